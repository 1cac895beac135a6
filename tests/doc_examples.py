#!/usr/bin/env python3
"""Checks that every code block the docs copy from an example is the example.

In README.md and docs/*.md a block is tied to a region of a file by a comment
on the line before its opening fence:

    <!-- from examples/django/photos/models.py: model -->
    ```python
    ...
    ```

and the region in the file lies between `docs:start model` and
`docs:end model` comment lines (# or //). The block must equal the region,
dedented. Exit status 1 and a diff for every block that differs.
Usage: doc_examples.py REPO [--sync]   (--sync rewrites the blocks from the examples)
"""
import difflib
import pathlib
import re
import sys
import textwrap

TIE = re.compile(r"^<!-- from (\S+): ([\w-]+) -->\n```\w*\n(.*?)^```$", re.M | re.S)


def region(path: pathlib.Path, name: str) -> str:
    lines = path.read_text().splitlines(keepends=True)
    starts = [i for i, l in enumerate(lines) if re.search(rf"(#|//) docs:start {name}$", l.rstrip())]
    ends = [i for i, l in enumerate(lines) if re.search(rf"(#|//) docs:end {name}$", l.rstrip())]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise LookupError(f"{path}: no single region '{name}'")
    return textwrap.dedent("".join(lines[starts[0] + 1:ends[0]]))


def sync(doc: pathlib.Path, repo: pathlib.Path) -> None:
    def copy(m):
        source, name = m.group(1), m.group(2)
        lang = m.group(0).split("\n")[1]
        return f"<!-- from {source}: {name} -->\n{lang}\n{region(repo / source, name)}```"
    doc.write_text(TIE.sub(copy, doc.read_text()))


def main(repo: pathlib.Path, write: bool) -> int:
    docs = [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]
    checked = failed = 0
    for doc in docs:
        if write:
            sync(doc, repo)
        for m in TIE.finditer(doc.read_text()):
            source, name, block = m.groups()
            checked += 1
            try:
                want = region(repo / source, name)
            except (LookupError, OSError) as e:
                print(f"FAIL - {doc.name}: {e}")
                failed += 1
                continue
            if block != want:
                failed += 1
                print(f"FAIL - {doc.name}: the block from {source}: {name} differs from it:")
                sys.stdout.writelines(difflib.unified_diff(
                    want.splitlines(True), block.splitlines(True), source, doc.name))
            else:
                print(f"ok   - {doc.relative_to(repo)}: {source}: {name}")
    if checked == 0:
        print("FAIL - no code block of the docs is tied to an example")
        return 1
    print(f"doc_examples.py: {checked - failed} of {checked} blocks are their examples")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1]), "--sync" in sys.argv[2:]))
