#!/usr/bin/env python3
"""Validates a PGXN META.json against the PGXN Meta Spec 1.0.0
(https://pgxn.org/spec/): the required keys and the type of every key it
uses, then that it agrees with the distribution around it: the version in
Cargo.toml (which pgrx writes into the control file), provides' files, and
an upgrade script and checksum in sql/ for that version.
Usage: meta_json.py DIRECTORY (a checkout or an unpacked `make dist`)."""
import json
import pathlib
import re
import sys

SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+)?$")
LICENSES = {"agpl_3", "apache_1_1", "apache_2_0", "artistic_1", "artistic_2", "bsd", "freebsd",
            "gfdl_1_2", "gfdl_1_3", "gpl_1", "gpl_2", "gpl_3", "lgpl_2_1", "lgpl_3_0", "mit",
            "mozilla_1_0", "mozilla_1_1", "openssl", "perl_5", "postgresql", "qpl_1_0", "ssleay",
            "sun", "zlib", "open_source", "restricted", "unrestricted", "unknown"}
PHASES = {"configure", "build", "test", "runtime", "develop"}
RELATIONS = {"requires", "recommends", "suggests", "conflicts"}
errors = []


def need(cond, what):
    if not cond:
        errors.append(what)
    return cond


def strings(v):
    return isinstance(v, str) or (isinstance(v, list) and v and all(isinstance(s, str) for s in v))


def version_range(v):  # "1.2.3", ">= 1.2.3", ">= 1.0.0, < 2.0.0" or 0
    return v == 0 or (isinstance(v, str) and all(
        SEMVER.match(re.sub(r"^(==|!=|>=|<=|>|<)\s*", "", p.strip())) for p in v.split(",")))


def main(root: pathlib.Path):
    meta = json.loads((root / "META.json").read_text())
    for key in ("name", "version", "abstract", "maintainer", "license", "provides", "meta-spec"):
        need(key in meta, f"required key {key} is missing")
    need(isinstance(meta.get("name"), str) and re.match(r"^[^/\\\s:]{2,}$", meta["name"]), "name")
    need(isinstance(meta.get("version"), str) and SEMVER.match(meta["version"]), "version is not semver")
    need(isinstance(meta.get("abstract"), str) and meta["abstract"], "abstract")
    need(strings(meta.get("maintainer")), "maintainer: a string or a list of strings")
    lic = meta.get("license")
    need((isinstance(lic, str) and lic in LICENSES) or (isinstance(lic, list) and set(lic) <= LICENSES)
         or (isinstance(lic, dict) and all(isinstance(u, str) for u in lic.values())), f"license {lic!r}")
    need(meta.get("meta-spec", {}).get("version") == "1.0.0", "meta-spec version 1.0.0")
    provides = meta.get("provides", {})
    need(isinstance(provides, dict) and provides, "provides: a non-empty object")
    for ext, p in provides.items():
        need(isinstance(p, dict) and SEMVER.match(p.get("version", "")), f"provides.{ext}.version")
        for f in ("file", "docfile"):
            if f in p:
                need((root / p[f]).is_file(), f"provides.{ext}.{f} {p[f]} is not in the distribution")
        need(p.get("version") == meta.get("version"), f"provides.{ext}.version differs from version")
    for phase, rels in meta.get("prereqs", {}).items():
        need(phase in PHASES, f"prereqs phase {phase}")
        for rel, reqs in rels.items():
            need(rel in RELATIONS, f"prereqs.{phase} relation {rel}")
            for name, v in reqs.items():
                need(version_range(v), f"prereqs.{phase}.{rel}.{name} version {v!r}")
    if "release_status" in meta:
        need(meta["release_status"] in ("stable", "testing", "unstable"), "release_status")
    if "tags" in meta:
        need(isinstance(meta["tags"], list) and all(isinstance(t, str) and 0 < len(t) < 256
                                                    for t in meta["tags"]), "tags")
    for name, r in meta.get("resources", {}).items():
        need(name in ("homepage", "bugtracker", "repository") or name.startswith("x_"), f"resources.{name}")
        need(isinstance(r, (str, dict)), f"resources.{name} type")
    for key in meta:
        need(key in {"name", "version", "abstract", "maintainer", "license", "provides", "meta-spec",
                     "description", "generated_by", "no_index", "prereqs", "release_status",
                     "resources", "tags"} or key.startswith("x_"), f"unknown key {key}")

    # The distribution around it.
    cargo = re.search(r'^version = "(.*)"', (root / "Cargo.toml").read_text(), re.M).group(1)
    version = meta.get("version")
    need(version == cargo, f"version {version} but Cargo.toml says {cargo}")
    need("@CARGO_VERSION@" in (root / "insta_id.control").read_text(),
         "the control file's default_version is no longer Cargo.toml's")
    need((root / "sql/SHA256SUMS").is_file(), "sql/SHA256SUMS (what has been released) is missing")
    need((root / "sql/insta_id--0.1.0.sql").is_file(), "sql/insta_id--0.1.0.sql, the base of the upgrade chain, is missing")
    need(any(root.glob(f"sql/insta_id--*--{version}.sql")), f"no upgrade script to {version} in sql/")
    for e in errors:
        print(f"FAIL - META.json: {e}")
    print(f"meta_json.py: {root / 'META.json'} {'is invalid' if errors else 'is valid'} (PGXN Meta Spec 1.0.0, version {version})")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1])))
