//! `#[pg_test]`s: every SQL function and every error, inside PostgreSQL.
//! The server runs with shared_preload_libraries = 'insta_id' (see lib.rs);
//! the session-guard mode is tested by tests/tap/t/002_concurrency.pl.

use pgrx::prelude::*;

#[pg_schema]
mod tests {
    use crate::clock::test_clock;
    use crate::layout::{self, INSTAGRAM_EPOCH_MS, MAX_MS};
    use pgrx::prelude::*;

    fn run(sql: &str) {
        Spi::run(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    fn one<T: FromDatum + IntoDatum>(sql: &str) -> T {
        Spi::get_one::<T>(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .unwrap_or_else(|| panic!("{sql}: NULL"))
    }

    /// "SQLSTATE: message" of the error `sql` raises, or "ok".
    fn error_of(sql: &str) -> String {
        if !one::<bool>("SELECT to_regprocedure('pg_temp.error_of(text)') IS NOT NULL") {
            run(
                "CREATE FUNCTION pg_temp.error_of(q text) RETURNS text LANGUAGE plpgsql AS $f$
                 BEGIN EXECUTE q; RETURN 'ok';
                 EXCEPTION WHEN OTHERS THEN RETURN SQLSTATE || ': ' || SQLERRM; END $f$",
            );
        }
        let quoted = sql.replace('\'', "''");
        one::<String>(&format!("SELECT pg_temp.error_of('{quoted}')"))
    }

    fn assert_error(sql: &str, sqlstate: &str, fragment: &str) {
        let got = error_of(sql);
        assert!(
            got.starts_with(&format!("{sqlstate}: ")) && got.contains(fragment),
            "{sql}\n  expected {sqlstate} containing {fragment:?}\n  got {got}"
        );
    }

    fn setup() {
        run("SET TIME ZONE 'UTC'; CREATE SEQUENCE s; CREATE TABLE t (x int)");
    }

    const T0: i64 = 1_700_000_000_000; // 2023-11-14 22:13:20 UTC

    #[pg_test]
    fn next_id_is_the_original_formula_for_the_clock_and_nextval() {
        setup();
        test_clock::set(T0, 0);
        let id = one::<i64>("SELECT insta_id.next_id(1341, 's')");
        assert_eq!(id, ((T0 - INSTAGRAM_EPOCH_MS) << 23) | (1341 << 10) | 1);
        // It went through the real nextval: currval and lastval see it.
        assert_eq!(one::<i64>("SELECT currval('s')"), 1);
        assert_eq!(one::<i64>("SELECT lastval()"), 1);
        // Sequence options apply: INCREMENT, START, and the % 1024 field.
        run("CREATE SEQUENCE s2 START 5001 INCREMENT 1000");
        let id = one::<i64>("SELECT insta_id.next_id(7, 's2')");
        assert_eq!(layout::decompose(id).seq, 5001 % 1024);
        let id = one::<i64>("SELECT insta_id.next_id(7, 's2')");
        assert_eq!(layout::decompose(id).seq, 6001 % 1024);
        assert_eq!(one::<i64>("SELECT currval('s2')"), 6001);
        test_clock::clear();
    }

    #[pg_test]
    fn next_id_reads_the_wall_clock_not_the_transaction_start() {
        setup();
        // Three IDs 2 ms apart in one transaction get three different times,
        // all after the transaction began (now() would give one time).
        let ok = one::<bool>(
            "SELECT count(DISTINCT insta_id.created_at(id)) = 3
                    AND min(insta_id.created_at(id)) >= date_trunc('milliseconds', now())
             FROM (SELECT insta_id.next_id(1, 's') AS id, pg_sleep(0.002)
                   FROM generate_series(1, 3)) x",
        );
        assert!(ok);
    }

    #[pg_test]
    fn next_id_rejects_bad_shards_without_taking_a_value() {
        setup();
        run("SELECT nextval('s')");
        for shard in ["8192", "-1", "2147483647"] {
            assert_error(
                &format!("SELECT insta_id.next_id({shard}, 's')"),
                "22003",
                &format!("shard id {shard} is out of range"),
            );
        }
        assert_eq!(one::<i64>("SELECT last_value FROM s"), 1);
        assert!(one::<i64>("SELECT insta_id.next_id(8191, 's')") > 0);
        assert!(one::<i64>("SELECT insta_id.next_id(0, 's')") > 0);
    }

    #[pg_test]
    fn next_id_refuses_what_is_not_a_sequence() {
        setup();
        run("CREATE VIEW v AS SELECT 1");
        assert_error(
            "SELECT insta_id.next_id(1, 't')",
            "42809",
            "\"t\" is not a sequence",
        );
        assert_error(
            "SELECT insta_id.next_id(1, 'v')",
            "42809",
            "\"v\" is not a sequence",
        );
        assert_error(
            "SELECT insta_id.next_id(1, 'nope')",
            "42P01",
            "\"nope\" does not exist",
        );
        assert_error(
            "SELECT insta_id.next_id(1, 4000000000::oid::regclass)",
            "42P01",
            "OID 4000000000 does not exist",
        );
    }

    #[pg_test]
    fn next_id_needs_the_privileges_nextval_needs() {
        setup();
        run("CREATE ROLE insta_id_nobody; GRANT USAGE ON SCHEMA public TO insta_id_nobody");
        run("SET ROLE insta_id_nobody");
        assert_error(
            "SELECT insta_id.next_id(1, 's')",
            "42501",
            "permission denied for sequence s",
        );
        run("RESET ROLE");
    }

    #[pg_test]
    fn application_role_needs_no_extra_grants() {
        setup();
        run("CREATE TABLE items (id bigint NOT NULL DEFAULT insta_id.next_id(3, 'public.s'::regclass) PRIMARY KEY, v text);
             CREATE ROLE insta_id_app;
             GRANT USAGE ON SCHEMA public TO insta_id_app;
             GRANT INSERT, SELECT ON items TO insta_id_app;
             GRANT USAGE ON SEQUENCE s TO insta_id_app;
             SET ROLE insta_id_app");
        let id = one::<i64>("INSERT INTO items (v) VALUES ('a') RETURNING id");
        assert_eq!(layout::decompose(id).shard, 3);
        assert_eq!(
            one::<i32>("SELECT (insta_id.id_parts(id)).shard_id FROM items"),
            3
        );
        run("RESET ROLE");
    }

    #[pg_test]
    fn null_arguments_give_null_and_not_null_columns_reject_the_row() {
        setup();
        assert_eq!(
            Spi::get_one::<i64>("SELECT insta_id.next_id(NULL, 's')").unwrap(),
            None
        );
        assert_eq!(
            Spi::get_one::<i64>("SELECT insta_id.next_id(1, NULL)").unwrap(),
            None
        );
        // STRICT: a NULL shard does not even take a value from the sequence.
        assert!(one::<bool>("SELECT NOT is_called FROM s"));
        run("CREATE TABLE n (id bigint NOT NULL DEFAULT insta_id.next_id(NULL::int, 's'), v int)");
        assert_error(
            "INSERT INTO n (v) VALUES (1)",
            "23502",
            "null value in column \"id\"",
        );
    }

    #[pg_test]
    fn next_id_in_a_read_only_transaction_fails_like_nextval() {
        // A hot standby runs every transaction read-only: the same check and
        // error as nextval's, made before anything (next_id may have to
        // write the high-water mark, even for a temporary sequence).
        setup();
        run("CREATE TEMPORARY SEQUENCE tmp_s");
        let theirs = error_of("SET LOCAL transaction_read_only = on; SELECT nextval('s')");
        assert_eq!(
            theirs,
            "25006: cannot execute nextval() in a read-only transaction"
        );
        for seq in ["s", "tmp_s"] {
            let ours = error_of(&format!(
                "SET LOCAL transaction_read_only = on; SELECT insta_id.next_id(1, '{seq}')"
            ));
            assert_eq!(
                ours, "25006: cannot execute insta_id.next_id() in a read-only transaction",
                "{seq}"
            );
        }
    }

    #[pg_test]
    fn next_id_refuses_negative_sequence_values() {
        setup();
        run("CREATE SEQUENCE neg MINVALUE -10 START -5");
        assert_error(
            "SELECT insta_id.next_id(1, 'neg')",
            "22003",
            "sequence value -5 is negative",
        );
    }

    #[pg_test]
    fn next_id_refuses_clocks_outside_the_time_field() {
        setup();
        test_clock::set(INSTAGRAM_EPOCH_MS - 1, 0);
        assert_error(
            "SELECT insta_id.next_id(1, 's')",
            "22008",
            "before the insta_id epoch",
        );
        test_clock::set(INSTAGRAM_EPOCH_MS + MAX_MS + 1, 0);
        assert_error(
            "SELECT insta_id.next_id(1, 's')",
            "22008",
            "past the end of the 41-bit",
        );
        // The very last millisecond of the field still works, with the sign bit set.
        test_clock::set(INSTAGRAM_EPOCH_MS + MAX_MS, 0);
        let id = one::<i64>("SELECT insta_id.next_id(8191, 's')");
        assert!(id < 0);
        assert_eq!(layout::decompose(id).ms, MAX_MS);
        test_clock::clear();
        // With a future epoch the real clock is before it.
        run("SET insta_id.epoch = '4000000000000'");
        assert_error(
            "SELECT insta_id.next_id(1, 's')",
            "22008",
            "before the insta_id epoch",
        );
    }

    #[pg_test]
    fn id_parts_decodes_the_published_examples() {
        run("SET TIME ZONE 'UTC'");
        let row = one::<String>("SELECT insta_id.id_parts(11637205501278089)::text");
        assert_eq!(row, "(\"2011-09-09 22:28:04.721+00\",1341,905,1387263000)");
        // The second article's example and epoch 1293843600000 ms (2011-01-01 01:00 UTC).
        let row = one::<String>(
            "SELECT insta_id.id_parts(2217813737473025833, '2011-01-01 01:00+00')::text",
        );
        assert_eq!(row, "(\"2019-05-19 01:00:00+00\",1001,809,264384000000)");
        assert_eq!(
            one::<i32>("SELECT insta_id.seq_id(2217813737473025832)"),
            808
        );
        assert_eq!(
            one::<i32>("SELECT insta_id.shard_id(11637205501278089)"),
            1341
        );
        assert_eq!(
            one::<String>("SELECT insta_id.created_at(11637205501278089)::text"),
            "2011-09-09 22:28:04.721+00"
        );
    }

    #[pg_test]
    fn id_parts_decodes_ids_with_the_sign_bit_set() {
        run("SET TIME ZONE 'UTC'");
        // 2^40 ms after the epoch: the first negative ID.
        let first_negative = layout::pack(1 << 40, 0, 0);
        assert_eq!(
            one::<String>(&format!(
                "SELECT insta_id.created_at({first_negative})::text"
            )),
            "2046-06-27 17:00:49.497+00"
        );
        assert_eq!(
            one::<String>("SELECT insta_id.id_parts(-1)::text"),
            "(\"2081-04-30 12:54:37.272+00\",8191,1023,2199023255551)"
        );
    }

    #[pg_test]
    fn decoders_work_in_indexes_generated_columns_and_parallel_plans() {
        setup();
        run("CREATE TABLE g (
                 id bigint PRIMARY KEY DEFAULT insta_id.next_id(42, 's'),
                 made timestamptz GENERATED ALWAYS AS (insta_id.created_at(id)) STORED,
                 shard int GENERATED ALWAYS AS ((insta_id.id_parts(id)).shard_id) STORED);
             CREATE INDEX ON g (((insta_id.id_parts(id)).shard_id));
             CREATE INDEX ON g (insta_id.shard_id(id));
             INSERT INTO g SELECT FROM generate_series(1, 100)");
        assert_eq!(
            one::<i64>(
                "SELECT count(*) FROM g WHERE shard = 42 AND made = insta_id.created_at(id)"
            ),
            100
        );
        let props = one::<String>(
            "SELECT string_agg(proname || ':' || provolatile::text || proparallel::text || proisstrict::text, ' ' ORDER BY proname, pronargs)
             FROM pg_proc WHERE pronamespace = 'insta_id'::regnamespace
               AND prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')",
        );
        assert_eq!(
            props,
            "_admin_write:vutrue _advisory_holds:vrfalse _gate_objects:sstrue _gate_owners:vutrue _gate_relations:ssfalse _guard_stats:vrtrue _identifier_list:istrue _in_transaction_block:vrtrue \
             _lock:vutrue _lock_object:vutrue _lock_relations:vutrue _lock_schema:vutrue _names_objects:istrue _names_schema:istrue _next_id_call:istrue \
             _query_in_schema:vutrue _requalified:istrue _run_in_schema:vutrue _search_path_lines:istrue _tree_const_types:istrue _tree_regclasses:istrue _tree_relids:istrue _unlock:vutrue _wait_for_commits:vrtrue _with_placeholder:sstrue _without_locations:istrue _without_relids:istrue created_at:istrue epoch:sstrue from_shortcode:istrue guard_mode:sstrue guard_stats_reset:vrtrue guard_stats_total:vrtrue \
             high_water_mark:vstrue id_parts:istrue id_parts:istrue max_id:istrue max_id:istrue \
             max_id:istrue max_id:istrue min_id:istrue min_id:istrue min_id:istrue min_id:istrue \
             next_id:vutrue raise_high_water_mark:vutrue seq_id:istrue shard_id:istrue shortcode:istrue"
        );
    }

    #[pg_test]
    fn min_and_max_id_bound_a_millisecond() {
        setup();
        let ts = "'2026-01-01 00:00:00.5+00'::timestamptz";
        let ms = 1_767_225_600_500 - INSTAGRAM_EPOCH_MS;
        assert_eq!(
            one::<i64>(&format!("SELECT insta_id.min_id({ts})")),
            ms << 23
        );
        assert_eq!(
            one::<i64>(&format!("SELECT insta_id.max_id({ts})")),
            (ms << 23) | 0x7F_FFFF
        );
        assert_eq!(
            one::<i64>(&format!("SELECT insta_id.min_id({ts}, 5)")),
            (ms << 23) | (5 << 10)
        );
        assert_eq!(
            one::<i64>(&format!("SELECT insta_id.max_id({ts}, 5)")),
            (ms << 23) | (5 << 10) | 1023
        );
        // Sub-millisecond parts of ts fall in the same millisecond.
        assert_eq!(
            one::<i64>("SELECT insta_id.min_id('2026-01-01 00:00:00.5009+00')"),
            ms << 23
        );
        let e = "'2011-01-01 01:00+00'";
        let ms2 = 1_767_225_600_500 - 1_293_843_600_000;
        assert_eq!(
            one::<i64>(&format!("SELECT insta_id.min_id({ts}, {e}::timestamptz)")),
            ms2 << 23
        );
        assert_eq!(
            one::<i64>(&format!(
                "SELECT insta_id.max_id({ts}, 9, {e}::timestamptz)"
            )),
            (ms2 << 23) | (9 << 10) | 1023
        );
        assert_eq!(
            one::<i64>(&format!(
                "SELECT insta_id.min_id({ts}, 9, {e}::timestamptz)"
            )),
            (ms2 << 23) | (9 << 10)
        );
        assert_eq!(
            one::<i64>(&format!("SELECT insta_id.max_id({ts}, {e}::timestamptz)")),
            (ms2 << 23) | 0x7F_FFFF
        );
        assert_error(
            "SELECT insta_id.min_id('2011-01-01')",
            "22008",
            "before the insta_id epoch",
        );
        assert_error(
            "SELECT insta_id.max_id('2090-01-01')",
            "22008",
            "past the end",
        );
        assert_error(
            "SELECT insta_id.min_id(now(), 8192)",
            "22003",
            "shard id 8192 is out of range",
        );
        assert_error(
            "SELECT insta_id.min_id(now(), '2011-01-01 00:00:00.0005+00'::timestamptz)",
            "22023",
            "whole millisecond",
        );
        assert_error(
            "SELECT insta_id.id_parts(1, '1969-12-31 23:59:59+00')",
            "22023",
            "epoch must be between",
        );
    }

    #[pg_test]
    fn min_id_range_is_an_index_scan_that_finds_every_row() {
        setup();
        run(
            "CREATE TABLE r (id bigint PRIMARY KEY DEFAULT insta_id.next_id(1, 's'));
             INSERT INTO r SELECT FROM generate_series(1, 2000);
             ANALYZE r",
        );
        let t = one::<String>("SELECT min(insta_id.created_at(id))::text FROM r");
        let q = format!(
            "FROM r WHERE id >= insta_id.min_id('{t}') AND id <= insta_id.max_id(clock_timestamp())"
        );
        assert_eq!(one::<i64>(&format!("SELECT count(*) {q}")), 2000);
        run("SET enable_seqscan = off");
        let plan = Spi::connect(|c| {
            c.select(
                &format!("EXPLAIN (COSTS OFF) SELECT count(*) {q}"),
                None,
                &[],
            )
            .unwrap()
            .map(|row| row.get::<String>(1).unwrap().unwrap())
            .collect::<Vec<_>>()
            .join("\n")
        });
        assert!(plan.contains("Index"), "{plan}");
        let before = one::<i64>(&format!(
            "SELECT count(*) FROM r WHERE id < insta_id.min_id('{t}')"
        ));
        assert_eq!(before, 0);
    }

    #[pg_test]
    fn epoch_setting_is_superuser_only_and_validated() {
        run("SET TIME ZONE 'UTC'");
        assert_eq!(
            one::<String>("SELECT insta_id.epoch()::text"),
            "2011-08-24 21:07:01.721+00"
        );
        assert_eq!(one::<String>("SHOW insta_id.epoch"), "1314220021721");
        run("SET insta_id.epoch = '1293843600000'");
        assert_eq!(
            one::<String>("SELECT insta_id.epoch()::text"),
            "2011-01-01 01:00:00+00"
        );
        assert_eq!(
            one::<String>("SELECT insta_id.created_at(2217813737473025833)::text"),
            "2019-05-19 01:00:00+00"
        );
        for bad in ["-1", "abc", "1.5", "2011-01-01", "253402300800000"] {
            assert_error(
                &format!("SET insta_id.epoch = '{bad}'"),
                "22023",
                "invalid value for parameter",
            );
        }
        run("RESET insta_id.epoch; CREATE ROLE insta_id_plain");
        error_of("SELECT 1"); // create the helper before switching roles
        run("SET ROLE insta_id_plain");
        assert_error(
            "SET insta_id.epoch = '0'",
            "42501",
            "permission denied to set parameter",
        );
        assert_error(
            "SET insta_id.on_overflow = 'legacy'",
            "42501",
            "permission denied to set parameter",
        );
        run("RESET ROLE");
    }

    /// Instagram's function as published (with `%` for the blog's `%%`),
    /// taking the clock reading and the nextval value as arguments.
    const ORIGINAL: &str =
        "CREATE FUNCTION pg_temp.original_id(now_millis bigint, shard_id int, seq_value bigint,
                                 OUT result bigint) AS $f$
        DECLARE
            our_epoch bigint := 1314220021721;
            seq_id bigint;
        BEGIN
            seq_id := seq_value % 1024;
            result := (now_millis - our_epoch) << 23;
            result := result | (shard_id << 10);
            result := result | (seq_id);
        END;
        $f$ LANGUAGE plpgsql";

    #[pg_test]
    fn differential_against_the_original_plpgsql() {
        setup();
        run(ORIGINAL);
        // Each native ID must be the original's for the same nextval value
        // and a clock reading taken between the readings around the call.
        let mismatches = one::<i64>(
            "DO $d$ DECLARE t0 bigint; t1 bigint; id bigint; v bigint; ms bigint; bad bigint := 0;
             BEGIN
               FOR i IN 1..5000 LOOP
                 t0 := floor(extract(epoch FROM clock_timestamp()) * 1000);
                 id := insta_id.next_id(i % 8192, 's');
                 v := currval('s');
                 t1 := floor(extract(epoch FROM clock_timestamp()) * 1000);
                 ms := (id >> 23) + 1314220021721;
                 IF ms < t0 OR ms > t1 OR pg_temp.original_id(ms, i % 8192, v) <> id THEN
                   bad := bad + 1;
                 END IF;
               END LOOP;
               PERFORM set_config('insta_id_test.bad', bad::text, false);
             END $d$;
             SELECT current_setting('insta_id_test.bad')::bigint",
        );
        assert_eq!(mismatches, 0);
        assert_eq!(one::<i64>("SELECT last_value FROM s"), 5000);
    }

    // ---- The duplicate guard (insta_id.on_overflow), on a scripted clock ----

    /// IDs of `n` next_id calls in one statement, in call order.
    fn burst(n: usize) -> Vec<i64> {
        Spi::connect(|c| {
            c.select(
                &format!("SELECT insta_id.next_id(1, 's') FROM generate_series(1, {n}) ORDER BY 1"),
                None,
                &[],
            )
            .unwrap()
            .map(|row| row.get::<i64>(1).unwrap().unwrap())
            .collect()
        })
    }

    fn distinct(ids: &[i64]) -> usize {
        ids.iter().collect::<std::collections::HashSet<_>>().len()
    }

    #[pg_test]
    fn wait_mode_moves_to_the_next_millisecond_instead_of_wrapping() {
        setup();
        assert_eq!(one::<String>("SHOW insta_id.on_overflow"), "wait");
        // The clock advances one ms every 5000 readings: 1024 IDs fill a ms first.
        test_clock::set(T0, 5000);
        let ids = burst(4000);
        assert_eq!(distinct(&ids), 4000);
        let ms: Vec<i64> = ids.iter().map(|&id| layout::decompose(id).ms).collect();
        let t0 = T0 - INSTAGRAM_EPOCH_MS;
        assert_eq!(ms.iter().filter(|&&m| m == t0).count(), 1024);
        assert!(ms.iter().all(|&m| m >= t0 && m <= t0 + 4));
        test_clock::clear();
    }

    #[pg_test]
    fn legacy_mode_repeats_ids_like_the_original() {
        setup();
        run("SET insta_id.on_overflow = 'legacy'");
        test_clock::set(T0, 0);
        let ids = burst(3000);
        // A frozen millisecond: only 1024 distinct values of the 10-bit field.
        assert_eq!(distinct(&ids), 1024);
        test_clock::clear();
    }

    #[pg_test]
    fn error_mode_refuses_the_1025th_id_of_a_millisecond() {
        setup();
        run("SET insta_id.on_overflow = 'error'");
        test_clock::set(T0, 0);
        assert_eq!(distinct(&burst(1024)), 1024);
        assert_error(
            "SELECT insta_id.next_id(1, 's')",
            "54000",
            "sequence \"s\" needs more than 1024 IDs in one millisecond",
        );
        test_clock::clear();
    }

    #[pg_test]
    fn a_wait_for_the_clock_past_max_clock_wait_is_refused() {
        setup();
        assert_eq!(one::<String>("SHOW insta_id.max_clock_wait"), "10s");
        test_clock::set(T0, 0);
        one::<i64>("SELECT insta_id.next_id(1, 's')");
        // As after a failover to a server 5 s behind: past the lead (1 s by
        // default) next_id would wait about 4 s for its clock.
        test_clock::set(T0 - 5000, 0);
        run("SET insta_id.max_clock_wait = 100");
        assert_error(
            "SELECT insta_id.next_id(1, 's')",
            "55000",
            "ms for the clock, longer than insta_id.max_clock_wait (100 ms)",
        );
        // Within the bound it would wait (a frozen test clock says so
        // instead of waiting for ever).
        run("SET insta_id.max_clock_wait = '10s'");
        assert_error(
            "SELECT insta_id.next_id(1, 's')",
            "XX000",
            "a test froze the scripted clock where next_id has to wait for it",
        );
        test_clock::clear();
    }

    #[pg_test]
    fn clock_stepping_back_never_moves_ids_back_in_time() {
        setup();
        // A bound on the lead wider than the step (the default 1 s: below).
        run("SET insta_id.max_lead = '10s'");
        let t0 = T0 - INSTAGRAM_EPOCH_MS;
        test_clock::set(T0, 0);
        let first = one::<i64>("SELECT insta_id.next_id(1, 's')");
        assert_eq!(layout::decompose(first).ms, t0);
        // NTP steps the clock back five seconds.
        test_clock::set(T0 - 5000, 0);
        let ids = burst(3000);
        assert_eq!(distinct(&ids), 3000);
        assert!(!ids.contains(&first));
        let ms: Vec<i64> = ids.iter().map(|&id| layout::decompose(id).ms).collect();
        // Still ms t0, then borrowed t0+1, t0+2: no five-second wait, no going back.
        assert!(
            ms.iter().all(|&m| (t0..=t0 + 2).contains(&m)),
            "{:?}",
            ms.iter().max()
        );
        // Error mode says so instead of borrowing.
        run("SET insta_id.on_overflow = 'error'");
        test_clock::set(T0 - 5000, 0);
        assert_error(
            "SELECT insta_id.next_id(1, 's') FROM generate_series(1, 2000)",
            "54000",
            "1024 IDs",
        );
        // Legacy mode goes back with the clock, as the original does.
        run("SET insta_id.on_overflow = 'legacy'");
        assert_eq!(
            layout::decompose(one::<i64>("SELECT insta_id.next_id(1, 's')")).ms,
            t0 - 5000
        );
        test_clock::clear();
    }

    #[pg_test]
    fn no_id_further_ahead_of_the_clock_than_max_lead() {
        setup();
        let t0 = T0 - INSTAGRAM_EPOCH_MS;
        test_clock::set(T0, 0);
        let first = one::<i64>("SELECT insta_id.next_id(1, 's')");
        assert_eq!(layout::decompose(first).ms, t0);
        // The clock steps back 5 s, past the default bound of 1 s: error
        // mode refuses, naming the lead.
        run("SET insta_id.on_overflow = 'error'");
        test_clock::set(T0 - 5000, 0);
        assert_error(
            "SELECT insta_id.next_id(1, 's')",
            "54000",
            "sequence \"s\" would issue an ID 5000 ms ahead of the clock",
        );
        // Wait mode waits until the clock is within 1 s of ms t0: with the
        // clock advancing 1 ms a reading, the ID is at most 1000 ms ahead of
        // the reading it was admitted at, and still not before t0.
        run("RESET insta_id.on_overflow");
        test_clock::set(T0 - 5000, 1);
        let id = one::<i64>("SELECT insta_id.next_id(1, 's')");
        let ms = layout::decompose(id).ms;
        assert!(ms >= t0 && id != first, "{ms} {t0}");
        // A frozen clock would make that wait endless: tests are told.
        test_clock::set(T0 - 5000, 0);
        assert_error(
            "SELECT insta_id.next_id(1, 's')",
            "XX000",
            "froze the scripted clock",
        );
        // Non-superusers may not move the bound.
        test_clock::clear();
        run("CREATE ROLE lead_tester");
        run("SET ROLE lead_tester");
        assert_error("SET insta_id.max_lead = '1h'", "42501", "permission denied");
        run("RESET ROLE");
    }

    #[pg_test]
    fn wait_mode_at_the_end_of_the_time_field_errors_instead_of_wrapping() {
        setup();
        test_clock::set(INSTAGRAM_EPOCH_MS + MAX_MS, 0);
        assert_eq!(distinct(&burst(1024)), 1024);
        // The 1025th would need ms 2^41, which does not exist: the clock is
        // frozen on the last ms here, so move it on to show the error.
        test_clock::set(INSTAGRAM_EPOCH_MS + MAX_MS + 1, 0);
        assert_error(
            "SELECT insta_id.next_id(1, 's')",
            "22008",
            "past the end of the 41-bit",
        );
        test_clock::clear();
    }

    #[pg_test]
    fn guard_is_shared_when_preloaded() {
        assert_eq!(one::<String>("SELECT insta_id.guard_mode()"), "shared");
    }

    /// The DSM registry refuses a segment of the guard's name with another
    /// size (another build loaded in the server) with 55000, not XX000.
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    #[pg_test]
    fn registry_segment_of_another_size_is_refused_with_55000() {
        use crate::guard_store::registry;
        let name = c"insta_id pg_test segment";
        let first = registry::attach(name, 4).buckets;
        assert_eq!(first.len(), 4);
        // The same size again finds the same memory.
        assert_eq!(registry::attach(name, 4).buckets.as_ptr(), first.as_ptr());
        let got = PgTryBuilder::new(|| {
            registry::attach(name, 8);
            String::from("ok")
        })
        .catch_others(|e| match e {
            pg_sys::panic::CaughtError::ErrorReport(r)
            | pg_sys::panic::CaughtError::PostgresError(r) => {
                format!(
                    "{:?}: {} / {}",
                    r.sql_error_code(),
                    r.message(),
                    r.hint().unwrap_or("")
                )
            }
            other => other.rethrow(),
        })
        .execute();
        assert!(
            got.starts_with("ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE: the duplicate guard's shared memory \"insta_id pg_test segment\" exists with another size")
                && got.contains("Restart the server"),
            "{got}"
        );
    }
}
