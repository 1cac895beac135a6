#!/usr/bin/env python3
"""The census of insta_id's dynamic statements (issue 54).

Every statement insta_id builds at run time, in src/sql (PL/pgSQL
EXECUTE, and the executor _run_in_schema/_query_in_schema), in the
library (SPI) and in the fleet tool (SQL it formats), is found here. Each
must go through the gate (insta_id._gate or insta_id._gate_query,
src/sql/gate.sql) or be on ALLOWED below, with why it evaluates no
tenant's code. A new path to a tenant's relation fails this test when it
is written, not when a reviewer finds it; an entry of ALLOWED that
matches nothing fails too (the list stays exact).

    tests/census.py [REPO]           the census, in TAP's format
    tests/census.py --self-test      proves a new statement is caught
"""
import glob
import os
import re
import sys

# (where: "<file>:<function>", what the statement starts with, why it runs
# no tenant code). One row a site; a new site is a new row, or a gate call.
ALLOWED = [
    # PL/pgSQL, src/sql
    ("src/sql/registry.sql:_new_shard_schema", "EXECUTE format('CREATE SCHEMA %I', nsp)",
     "makes an empty schema, the caller's: nothing of a tenant exists in it yet"),
    ("src/sql/registry.sql:drop_shard", "EXECUTE format('DROP SCHEMA %I CASCADE'",
     "DROP evaluates no expression and fires no trigger (event triggers are superusers'); what it would take outside the shard is refused first"),
    ("src/sql/template_copy.sql:_create_copies", "EXECUTE format('COMMENT ON SCHEMA %I IS %L'",
     "a comment on the new schema: no code"),
    ("src/sql/template_copy.sql:_create_copies", "EXECUTE format('ALTER SCHEMA %I OWNER TO %s'",
     "gives the new schema to the template schema's owner: no code"),
    ("src/sql/template_copy.sql:_copy_planned", "PERFORM insta_id._run_in_schema(target, owner,",
     "the copy of a template into a new schema, as the template's code owner: decided by the gate's _gate_owner over the template once per template (_template_plan), under the template's lock; every object of the copy is made by that owner (gathered, in order, in as few calls as what must run between them allows)", 3),
    ("src/sql/template_copy.sql:_check_lock_budget", "EXECUTE lock_objects INTO",
     "reads pg_locks, before and after", 2),
    ("src/sql/gate.sql:_gate_run", "PERFORM insta_id._run_in_schema(nsp, owner, statements)",
     "the gate itself: the owner decided by _gate_owner under _gate_lock's locks"),
    ("src/sql/gate.sql:_gate_run", "value := insta_id._query_in_schema(nsp, owner, query)",
     "the gate itself: the owner decided by _gate_owner under _gate_lock's locks"),
    ("src/sql/gate.sql:_restore_session", "EXECUTE format('DEALLOCATE %I'",
     "deallocates a prepared statement the owner's code left: no relation"),
    ("src/sql/id_columns.sql:adopt_id_column", "PERFORM insta_id._run_in_schema(lock_rel.r->>'nsp', owner,",
     "LOCK TABLE only, as the owner the gate decided (_gate_owner, above it): a lock runs no code; every change after it goes through _gate"),
    ("src/sql/moves.sql:_fence_sequence", "EXECUTE format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START %s RESTART %s NO CYCLE'",
     "a sequence has no triggers, expressions or policies: no code"),
    ("src/sql/moves.sql:_fence_sequences", "EXECUTE format('SELECT last_value, is_called FROM %s'",
     "reads a sequence: no code"),
    ("src/sql/moves.sql:move_open", "EXECUTE format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START %s RESTART %s %s'",
     "a sequence: no code"),
    ("src/sql/moves.sql:move_fence", "EXECUTE format('CREATE TRIGGER insta_id_move_fence",
     "attaches insta_id's own fence trigger (insta_id._move_fence): creating a trigger evaluates nothing"),
    ("src/sql/moves.sql:move_lock", "EXECUTE format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE'",
     "a lock runs no code"),
    ("src/sql/moves.sql:move_lock", "EXECUTE format('ALTER SEQUENCE %I.%I INCREMENT BY %s'",
     "a sequence: no code"),
    ("src/sql/moves.sql:move_state", "EXECUTE format('SELECT last_value, is_called FROM %I.%I'",
     "reads a sequence: no code"),
    ("src/sql/privileges.sql:grant_shard_admin", "EXECUTE format(CASE WHEN revoke THEN 'REVOKE %s ON %s FROM %s' ELSE 'GRANT %s ON %s TO %s' END",
     "grants on insta_id's own objects"),
    ("src/sql/template_plan.sql:_grant", "EXECUTE stmt;",
     "GRANT statements (_grant_statements) on the new schema: no code"),
    # The library, src/*.rs (SPI)
    ("src/ddl.rs:run_as_role", "SPI_execute(statement",
     "the gate's executor: runs as the owner the gate decided, in a security-restricted operation"),
    ("src/ddl.rs:temporary_objects", "SPI_execute(QUERY", "reads pg_type and pg_collation"),
    ("src/registry.rs:execute", "SPI_execute_plan(",
     "_admin_write's check and write of insta_id's own tables"),
    ("src/locks.rs:wait_report", "SPI_execute_with_args(",
     "reads pg_describe_object, pg_locks and pg_stat_activity: who holds an object"),
    # The fleet tool, cli/src (SQL it formats; its other statements are
    # constant text calling insta_id's functions or reading catalogs)
    ("cli/src/bouncer.rs", "SET server_login_retry", "PgBouncer's admin console"),
    ("cli/src/mover.rs", "SELECT s.oid::bigint, coalesce((SELECT pg_catalog.min(n.nspname::text) FROM pg_catalog.pg_subscription_rel", "reads catalogs"),
    ("cli/src/mover.rs", "SELECT pg_catalog.string_agg(pg_catalog.quote_ident(t), ', ' ORDER BY t) FROM pg_catalog.jsonb_array_elements_", "formats names, reads no relation"),
    ("cli/src/mover.rs", "SELECT EXISTS (SELECT FROM pg_catalog.pg_subscription", "reads catalogs"),
    ("cli/src/mover/failover.rs", "SELECT (SELECT pg_catalog.min((e.value ->> 'timeline')::pg_catalog.int4) FROM insta_id_adm", "reads insta_id's record of a move and the WAL's timeline"),
    ("cli/src/mover/failover.rs", "SELECT o.remote_lsn::text FROM pg_catalog.pg_replication_origin_status o JOIN pg_catalog.p", "reads catalogs"),
    ("cli/src/mover/checks.rs", "BEGIN; SET LOCAL client_min_messages = error;", "a trial subscription, dropped: reads the publication, not a table"),
    ("cli/src/mover/copy.rs", "CREATE PUBLICATION {} FOR TABLES IN SCHEMA {}", "a publication: no code"),
    ("cli/src/mover/copy.rs", "SELECT oid::bigint FROM pg_catalog.pg_subscription", "reads catalogs"),
    ("cli/src/mover/copy.rs", "ALTER SUBSCRIPTION {} ENABLE", "the subscription: PostgreSQL 16+ applies rows as each table's owner; on 15, which applies them as the subscription's superuser owner, --check refuses a schema holding non-superusers' code (mover/checks.rs)"),
    ("cli/src/mover/copy.rs", "SELECT coalesce((SELECT subenabled FROM pg_catalog.pg_subscription", "reads catalogs"),
    ("cli/src/mover/copy.rs", "CREATE SCHEMA {} AUTHORIZATION {}", "an empty schema, the owner's"),
    ("cli/src/mover/copy.rs", "SELECT insta_id._run_in_schema($1::text::pg_catalog.name,",
     "restores the schema (pg_dump -s) into a new, empty schema as the code owner the old server's gate decided (insta_id._code_owner): its objects are made by that owner, as a copy of a template is (cli/src/restore.rs)"),
    ("cli/src/mover/copy.rs", "ALTER SCHEMA {schema} OWNER TO {owner}; SELECT insta_id.move_fence", "schema owner, insta_id's fence, the subscription: no code"),
    ("cli/src/mover/copy.rs", "SET client_min_messages = warning; DROP PUBLICATION IF EXISTS {name}", "a publication: no code"),
    ("cli/src/mover/cutover.rs", "ALTER SUBSCRIPTION {} SET (synchronous_commit = on)", "a subscription's setting"),
    ("cli/src/mover/cutover.rs", "ALTER SUBSCRIPTION {} SET (synchronous_commit = off)", "a subscription's setting, put back"),
    ("cli/src/mover/copy.rs", "ALTER SUBSCRIPTION {} CONNECTION {}", "a subscription's connection, after a failover of the old server"),
    ("cli/src/mover/rollback.rs", "ALTER SUBSCRIPTION {} CONNECTION {}", "the subscription back's connection, after a failover of the new server"),
    ("cli/src/mover/finish.rs", "DROP FUNCTION IF EXISTS {}.insta_id_move_fence()", "insta_id's own fence function"),
    ("cli/src/mover/finish.rs", "CREATE SUBSCRIPTION {name} CONNECTION {conn} PUBLICATION {name}", "a subscription"),
    ("cli/src/mover/finish.rs", "SET LOCAL client_min_messages = warning; ALTER SUBSCRIPTION {name} DISABLE;", "a subscription, twice", 2),
    ("cli/src/mover/finish.rs", "SET LOCAL client_min_messages = warning; DROP PUBLICATION IF EXISTS {}", "a publication, twice", 2),
    ("cli/src/mover/finish.rs", "DROP SCHEMA IF EXISTS {} CASCADE", "DROP evaluates no code"),
    ("cli/src/mover/finish.rs", "SELECT pg_catalog.count(*) = 0 FROM pg_catalog.pg_replication_slots", "reads catalogs"),
    ("cli/src/mover/finish.rs", "SELECT pg_catalog.pg_drop_replication_slot(slot_name)", "drops a slot"),
    ("cli/src/mover/finish.rs", "DROP TRIGGER IF EXISTS insta_id_move_fence ON {}.{}", "drops insta_id's fence trigger: no code"),
    ("cli/src/mover/rollback.rs", "SELECT (pg_catalog.count(r.srrelid) FILTER (WHERE r.srsubstate = 'r'))", "reads catalogs"),
    ("cli/src/restore.rs", "CREATE SCHEMA {schema};", "text matched in pg_dump's output, not sent"),
    ("cli/src/restore.rs", "ALTER SCHEMA {schema} OWNER TO", "text matched in pg_dump's output, not sent"),
    ("cli/src/verify.rs", "SET LOCAL {name} = {};", "settings of the reading"),
    ("cli/src/verify.rs", "LOCK TABLE {} IN ACCESS SHARE MODE", "a lock runs no code"),
    ("cli/src/verify.rs", "SELECT pg_catalog.string_agg(x.p", "the reading's query, sent through insta_id._gate_query (below it)"),
]

GATE = re.compile(r"\binsta_id\._gate(_query)?\(")
SQL_WORDS = re.compile(r"\b(BEGIN|WITH|SELECT|INSERT|UPDATE|DELETE|ALTER|CREATE|DROP|LOCK|TRUNCATE|COPY|GRANT|REVOKE|SET|CALL|EXECUTE)\b")


def norm(text):
    return " ".join(text.split())


def sql_sites(path, text):
    """PL/pgSQL EXECUTE statements and calls of the executor, by function."""
    function = None
    for line in text.splitlines():
        code = line.split("--", 1)[0] if line.lstrip().startswith("--") else line
        m = re.match(r"CREATE (?:OR REPLACE )?(?:FUNCTION|PROCEDURE) insta_id\.(\w+)\(", code)
        if m:
            function = m.group(1)
        stripped = norm(code)
        if stripped.startswith("('EXECUTE', '"):
            continue  # (privileges.sql's list of names)
        if GATE.search(stripped):
            yield (f"{path}:{function}", stripped, "gate")
        elif re.search(r"\binsta_id\._(run|query)_in_schema\(", stripped) and not stripped.startswith("CREATE"):
            yield (f"{path}:{function}", stripped, None)
        elif re.match(r"(EXECUTE)\b(?! (FUNCTION|PROCEDURE|ON))", stripped):
            yield (f"{path}:{function}", stripped, None)


def rust_sites(path, text):
    """SPI calls of the library, by function."""
    function = None
    text = text.split("#[cfg(test)]")[0]
    for line in text.splitlines():
        m = re.match(r"\s*(?:pub(?:\(\w+\))? )?(?:unsafe )?(?:extern \"C-unwind\" )?fn (\w+)", line)
        if m:
            function = m.group(1)
        stripped = norm(line)
        if re.search(r"\bSPI_execute\w*\(", stripped) and not stripped.startswith("//"):
            yield (f"{path}:{function}", stripped[stripped.index("SPI_execute"):], None)


def cli_sites(path, text):
    """SQL the tool formats (a statement with text put into it)."""
    text = text.split("#[cfg(test)]")[0]
    for m in re.finditer(r'format!\(\s*r?#?"((?:[^"\\]|\\.)*)"', text, re.S):
        literal = norm(m.group(1))
        if SQL_WORDS.match(literal) and "{" in literal:
            yield (path, literal, None)
    # constant statements that call the executor or the gate
    for m in re.finditer(r'"((?:[^"\\]|\\.)*insta_id\._(?:run_in_schema|query_in_schema|gate|gate_query)\((?:[^"\\]|\\.)*)"', text, re.S):
        literal = norm(m.group(1))
        yield (path, literal, "gate" if GATE.search(literal) else None)


def census(repo, files=None):
    if files is None:
        files = {}
        for pattern in ("src/sql/*.sql", "src/*.rs", "cli/src/*.rs", "cli/src/*/*.rs"):
            for p in sorted(glob.glob(os.path.join(repo, pattern))):
                files[os.path.relpath(p, repo)] = open(p, encoding="utf-8").read()
    sites = []
    for path, text in sorted(files.items()):
        if path.endswith(".sql"):
            sites += sql_sites(path, text)
        elif path.startswith("cli/"):
            if path != "cli/src/conninfo.rs":
                sites += cli_sites(path, text)
        elif path != "src/tests.rs":
            sites += rust_sites(path, text)
    results = []
    used = [0] * len(ALLOWED)
    for where, statement, kind in sites:
        if kind == "gate":
            results.append((True, f"{where}: {statement[:90]} (through the gate)"))
            continue
        hit = [i for i, a in enumerate(ALLOWED) if a[0] == where and statement.startswith(norm(a[1]))]
        if hit:
            used[hit[0]] += 1
            results.append((True, f"{where}: {statement[:90]} (allowed: {ALLOWED[hit[0]][2]})"))
        else:
            results.append((False, f"{where}: {statement[:90]}: neither through insta_id._gate nor on tests/census.py's ALLOWED"))
    for i, a in enumerate(ALLOWED):
        want = a[3] if len(a) > 3 else 1
        if used[i] != want:
            results.append((False, f"ALLOWED entry {a[0]}: {a[1][:60]}: matches {used[i]} statements, not {want}"))
    return results


def report(results):
    failed = 0
    for n, (ok, what) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {n} - {what}")
        failed += not ok
    print(f"1..{len(results)}")
    print(f"census: {len(results) - failed} passed, {failed} failed")
    return failed == 0


def self_test(repo):
    """A new helper reading a tenant's table with EXECUTE, a new executor
    call and a new statement of the tool: each is caught."""
    files = {}
    for pattern in ("src/sql/*.sql", "src/*.rs", "cli/src/*.rs", "cli/src/*/*.rs"):
        for p in glob.glob(os.path.join(repo, pattern)):
            files[os.path.relpath(p, repo)] = open(p, encoding="utf-8").read()
    baseline = [w for ok, w in census(repo, files) if not ok]
    files["src/sql/registry.sql"] += (
        "\nCREATE FUNCTION insta_id.new_helper(rel regclass) RETURNS boolean LANGUAGE plpgsql AS $$\n"
        "DECLARE b boolean; BEGIN\n    EXECUTE format('SELECT EXISTS (SELECT FROM %s)', rel) INTO b;\n"
        "    PERFORM insta_id._run_in_schema('s', 'r', ARRAY['x']);\n    RETURN b; END $$;\n")
    files["cli/src/verify.rs"] = 'fn f(t: &str) -> String { format!("SELECT count(*) FROM {t}") }\n' + files["cli/src/verify.rs"]
    caught = [w for ok, w in census(repo, files) if not ok and w not in baseline]
    want = ["new_helper: EXECUTE format('SELECT EXISTS", "new_helper: PERFORM insta_id._run_in_schema", "SELECT count(*) FROM {t}"]
    missing = [w for w in want if not any(w in c for c in caught)]
    ok = not baseline and not missing and len(caught) == 3
    print(f"{'ok' if ok else 'not ok'} 1 - the census catches a new EXECUTE on a tenant's table, a new executor call and a new statement of the tool")
    for c in caught:
        print(f"#   caught: {c}")
    print("1..1")
    print(f"census self-test: {int(ok)} passed, {int(not ok)} failed")
    return ok


if __name__ == "__main__":
    args = sys.argv[1:]
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    if args and args[0] == "--self-test":
        sys.exit(0 if self_test(repo) else 1)
    sys.exit(0 if report(census(args[0] if args else repo)) else 1)
