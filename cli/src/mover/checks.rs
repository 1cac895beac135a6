//! What a move checks before it makes anything: both servers' versions,
//! the pg_dump it will run, the shard's tables, roles and settings.

use super::*;

impl Mover<'_> {
    /// A move begun by 0.8.0's scripts/move_shard.sh recorded its cutover
    /// as a comment on the publication, committed with the drop.
    pub(super) fn legacy_cutover(&mut self) -> Result<bool> {
        Ok(self
            .from
            .query_one(
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_publication p WHERE p.pubname = $1::text
                                AND pg_catalog.obj_description(p.oid, 'pg_publication') = 'insta_id: cutover committed')",
                &[&self.name],
            )
            .described()?
            .get(0))
    }

    /// What a move needs of the shard and both servers, said before
    /// anything is made.
    /// The old and the new server's PostgreSQL majors.
    pub(super) fn majors(&mut self) -> Result<(u32, u32)> {
        let q = "SELECT pg_catalog.current_setting('server_version_num')::int / 10000";
        let from: i32 = self.from.query_one(q, &[]).described()?.get(0);
        let to: i32 = self.to.query_one(q, &[]).described()?.get(0);
        Ok((from as u32, to as u32))
    }

    /// The pg_dump this move uses, chosen once (choose_pg_dump).
    pub(super) fn pg_dump(&mut self) -> Result<PathBuf> {
        if let Some(p) = &self.pg_dump {
            return Ok(p.clone());
        }
        let (from, to) = self.majors()?;
        let (p, why) = choose_pg_dump(self.a.pg_bin.as_deref(), from, to.max(from))?;
        println!("   pg_dump: {} ({why})", p.display());
        self.pg_dump = Some(p.clone());
        Ok(p)
    }

    pub(super) fn checks(&mut self, schema: &str) -> Result<()> {
        // Onto the same major or a newer one only: pg_dump's definitions of
        // a newer server need not restore on an older one (a setting, a
        // syntax), and a failure there would come after the publication.
        let (from_major, to_major) = self.majors()?;
        if to_major < from_major {
            return fail(format!("the new server runs PostgreSQL {to_major}, older than the old server's {from_major}: a shard moves to the same major or a newer one; nothing was made"));
        }
        let wal: String = self
            .from
            .query_one("SELECT pg_catalog.current_setting('wal_level')", &[])
            .described()?
            .get(0);
        if wal != "logical" {
            return fail("wal_level on the old server is not logical");
        }
        // What the replication takes: a slot and a WAL sender on the old
        // server, an apply worker on the new one (background workers, of
        // which logical replication's are a part).
        let (slots, senders): (bool, bool) = {
            let r = self
                .from
                .query_one(
                    "SELECT (SELECT pg_catalog.count(*) FROM pg_catalog.pg_replication_slots) < pg_catalog.current_setting('max_replication_slots')::int,
                            (SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_replication) < pg_catalog.current_setting('max_wal_senders')::int",
                    &[],
                )
                .described()?;
            (r.get(0), r.get(1))
        };
        if !slots {
            return fail("no replication slot is free on the old server (max_replication_slots): drop unused slots (pg_replication_slots) or raise it (a restart)");
        }
        if !senders {
            return fail("every WAL sender of the old server is in use (max_wal_senders): raise it (a restart)");
        }
        let workers: bool = self
            .to
            .query_one(
                "SELECT (SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_subscription WHERE pid IS NOT NULL)
                        < pg_catalog.current_setting('max_logical_replication_workers')::int",
                &[],
            )
            .described()?
            .get(0);
        if !workers {
            return fail("every logical replication worker of the new server is in use (max_logical_replication_workers): let other subscriptions finish, or raise it (a restart)");
        }
        let exists: bool = self
            .to
            .query_one(
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1::text)",
                &[&schema],
            )
            .described()?
            .get(0);
        if exists {
            return fail(format!(
                "schema {} exists on the new server",
                printable(schema)
            ));
        }
        if let Some(nokey) = one(
            &mut self.from,
            "SELECT pg_catalog.string_agg(c.oid::pg_catalog.regclass::text, ', ')
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1::text AND c.relkind = 'r' AND c.relreplident IN ('d', 'n')
               AND (c.relreplident = 'n' OR NOT EXISTS (SELECT FROM pg_catalog.pg_index x
                                                        WHERE x.indrelid = c.oid AND x.indisprimary))",
            schema,
        )? {
            return fail(format!("tables without a primary key or replica identity: {}", printable(&nokey)));
        }
        // A publication carries permanent tables only: unlogged tables
        // would lose their rows, materialized views would arrive empty.
        if let Some(other) = one(
            &mut self.from,
            "SELECT pg_catalog.string_agg(c.oid::pg_catalog.regclass::text, ', ')
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1::text AND (c.relkind = 'm' OR (c.relkind IN ('r', 'p') AND c.relpersistence <> 'p'))",
            schema,
        )? {
            return fail(format!("unlogged tables or materialized views, which logical replication does not carry: {}", printable(&other)));
        }
        let fenced: bool = self
            .from
            .query_one(
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
                                JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                                WHERE t.tgname = 'insta_id_move_fence' AND n.nspname = $1::text)
                     OR EXISTS (SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
                                WHERE p.proname = 'insta_id_move_fence' AND n.nspname = $1::text)",
                &[&schema],
            )
            .described()?
            .get(0);
        if fenced {
            return fail(format!("{} still has the fence of the move that brought it here (insta_id_move_fence): run that move again to finish its cleanup", printable(schema)));
        }
        self.apply_checks(schema)?;
        // The schema is restored on the new server as the one owner of its
        // objects, who must exist there (src/restore.rs); so must every
        // role and every object outside the schema its definitions name.
        self.owners(schema)?;
        self.roles_named(schema)?;
        self.objects_used(schema)?;
        self.no_dependents_outside(schema, true, "nothing was made")?;
        let epoch = "SELECT EXTRACT(epoch FROM insta_id.epoch())::text";
        let (e1, e2): (String, String) = (
            self.from.query_one(epoch, &[]).described()?.get(0),
            self.to.query_one(epoch, &[]).described()?.get(0),
        );
        if e1 != e2 {
            return fail("the servers' insta_id.epoch differ: IDs of the new server could repeat the old one's");
        }
        self.subscription_reaches()?;
        self.slots_across_failover()?;
        // Last: the pg_dump for these two majors (the refusals above are
        // more telling when both apply).
        self.pg_dump()?;
        Ok(())
    }

    /// Whether the move's slots follow a failover (said, never refused):
    /// the old server's, before the cutover, and with a rollback window
    /// the new server's slot back, until the window closes. PostgreSQL 17
    /// and later carry a slot made for it (the tool makes its slots so) to
    /// a standby running sync_replication_slots, when the primary's
    /// synchronized_standby_slots names that standby's slot; 15 and 16
    /// never do.
    fn slots_across_failover(&mut self) -> Result<()> {
        let (from_major, to_major) = self.majors()?;
        let mut sides = vec![(
            true,
            from_major,
            "the move's slot on the old server",
            "a failover of the old server before the cutover makes a re-run copy the shard afresh",
        )];
        if self.keep.is_some() {
            sides.push((
                false,
                to_major,
                "the slot back on the new server",
                "a failover of the new server in the rollback window leaves the old copy behind, and a rollback is refused",
            ));
        }
        for (old, major, slot, lost) in sides {
            let c = if old { &mut self.from } else { &mut self.to };
            let said = if major < 17 {
                format!("{slot} does not follow a failover (PostgreSQL {major}): {lost}")
            } else {
                let r = c
                    .query_one(
                        "WITH s AS (SELECT coalesce(pg_catalog.current_setting('synchronized_standby_slots', true), '') AS names)
                         SELECT s.names,
                                (SELECT pg_catalog.string_agg(r.slot_name::text, ', ' ORDER BY r.slot_name)
                                 FROM pg_catalog.pg_replication_slots r
                                 WHERE r.slot_type = 'physical' AND r.active
                                   AND r.slot_name::text = ANY (pg_catalog.string_to_array(pg_catalog.replace(s.names, ' ', ''), ',')))
                         FROM s",
                        &[],
                    )
                    .described()?;
                let (names, streaming): (String, Option<String>) = (r.get(0), r.get(1));
                match (names.is_empty(), streaming) {
                    (true, _) => format!("{slot} does not follow a failover (synchronized_standby_slots is not set): {lost}"),
                    (false, Some(on)) => format!("{slot} follows a failover to the standbys streaming on slots {on} (synchronized_standby_slots), if they run sync_replication_slots = on with hot_standby_feedback and a dbname in primary_conninfo"),
                    (false, None) => format!("{slot} follows a failover to no standby now: synchronized_standby_slots names slots no standby streams on ({}): {lost}", printable(&names)),
                }
            };
            println!("   {said}");
        }
        Ok(())
    }

    /// Every role the schema's definitions name, beyond its owners: the
    /// grantees and grantors of its privileges (the schema's, its
    /// relations', columns', functions', types'), its default privileges'
    /// roles and its policies' roles. pg_dump writes each into a GRANT, an
    /// ALTER DEFAULT PRIVILEGES or a CREATE POLICY, which fails on a server
    /// without that role, after the publication was made.
    fn roles_named(&mut self, schema: &str) -> Result<()> {
        let names: Vec<String> = self
            .from
            .query(
                "WITH n AS (SELECT oid, nspacl FROM pg_catalog.pg_namespace WHERE nspname = $1::text),
                 acls(acl) AS (
                     SELECT n.nspacl FROM n
                     UNION ALL SELECT c.relacl FROM pg_catalog.pg_class c, n WHERE c.relnamespace = n.oid
                     UNION ALL SELECT a.attacl FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid, n
                               WHERE c.relnamespace = n.oid AND a.attacl IS NOT NULL
                     UNION ALL SELECT p.proacl FROM pg_catalog.pg_proc p, n WHERE p.pronamespace = n.oid
                     UNION ALL SELECT t.typacl FROM pg_catalog.pg_type t, n WHERE t.typnamespace = n.oid
                     UNION ALL SELECT d.defaclacl FROM pg_catalog.pg_default_acl d, n WHERE d.defaclnamespace = n.oid),
                 roles(oid) AS (
                     SELECT x.grantee FROM acls, pg_catalog.aclexplode(acls.acl) x
                     UNION SELECT x.grantor FROM acls, pg_catalog.aclexplode(acls.acl) x
                     UNION SELECT d.defaclrole FROM pg_catalog.pg_default_acl d, n WHERE d.defaclnamespace = n.oid
                     UNION SELECT pg_catalog.unnest(p.polroles) FROM pg_catalog.pg_policy p
                           JOIN pg_catalog.pg_class c ON c.oid = p.polrelid, n WHERE c.relnamespace = n.oid)
                 SELECT r.rolname::text FROM roles JOIN pg_catalog.pg_roles r ON r.oid = roles.oid ORDER BY 1",
                &[&schema],
            )
            .described()?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let missing: Option<String> = self
            .to
            .query_one(
                "SELECT pg_catalog.string_agg(pg_catalog.quote_ident(x), ', ' ORDER BY x)
                 FROM pg_catalog.unnest($1::text[]) x
                 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.rolname = x)",
                &[&names],
            )
            .described()?
            .get(0);
        match missing {
            None => Ok(()),
            Some(m) => fail(format!("roles that the privileges, default privileges or policies of {} name are missing on the new server ({}): {}; create them there first (pg_dumpall --roles-only); nothing was made", printable(schema), self.to_s.label, printable(&m))),
        }
    }

    /// Every object outside the schema (and not built in) that the schema's
    /// objects depend on: an extension's type or function, a collation, a
    /// type, function or operator of another schema. pg_dump -n dumps the
    /// schema only: each must be on the new server already, found there by
    /// its address (pg_get_object_address), or the restore fails.
    fn objects_used(&mut self, schema: &str) -> Result<()> {
        let used = self
            .from
            .query(
                "WITH n AS (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1::text),
                 rels AS (SELECT c.oid FROM pg_catalog.pg_class c, n WHERE c.relnamespace = n.oid),
                 objs(classid, objid) AS (
                     SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, oid FROM rels
                     UNION ALL SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, p.oid FROM pg_catalog.pg_proc p, n WHERE p.pronamespace = n.oid
                     UNION ALL SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, t.oid FROM pg_catalog.pg_type t, n WHERE t.typnamespace = n.oid
                     UNION ALL SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, k.oid FROM pg_catalog.pg_constraint k, n WHERE k.connamespace = n.oid
                     UNION ALL SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass, o.oid FROM pg_catalog.pg_operator o, n WHERE o.oprnamespace = n.oid
                     UNION ALL SELECT 'pg_catalog.pg_collation'::pg_catalog.regclass, l.oid FROM pg_catalog.pg_collation l, n WHERE l.collnamespace = n.oid
                     UNION ALL SELECT 'pg_catalog.pg_trigger'::pg_catalog.regclass, g.oid FROM pg_catalog.pg_trigger g WHERE g.tgrelid IN (SELECT oid FROM rels)
                     UNION ALL SELECT 'pg_catalog.pg_attrdef'::pg_catalog.regclass, a.oid FROM pg_catalog.pg_attrdef a WHERE a.adrelid IN (SELECT oid FROM rels)
                     UNION ALL SELECT 'pg_catalog.pg_rewrite'::pg_catalog.regclass, r.oid FROM pg_catalog.pg_rewrite r WHERE r.ev_class IN (SELECT oid FROM rels)
                     UNION ALL SELECT 'pg_catalog.pg_policy'::pg_catalog.regclass, p.oid FROM pg_catalog.pg_policy p WHERE p.polrelid IN (SELECT oid FROM rels)),
                 used AS (
                     SELECT DISTINCT d.refclassid, d.refobjid FROM pg_catalog.pg_depend d
                     JOIN objs o ON o.classid = d.classid AND o.objid = d.objid
                     -- (Below FirstNormalObjectId: made by initdb, on every server.)
                     WHERE d.deptype IN ('n', 'a') AND d.refobjid >= 16384
                       AND d.refclassid <> 'pg_catalog.pg_namespace'::pg_catalog.regclass
                       AND NOT EXISTS (SELECT FROM objs x WHERE x.classid = d.refclassid AND x.objid = d.refobjid))
                 SELECT a.type, a.object_names, a.object_args,
                        i.type || ' ' || i.identity || coalesce(' (extension ' || (
                            SELECT e.extname::text FROM pg_catalog.pg_depend x JOIN pg_catalog.pg_extension e ON e.oid = x.refobjid
                            WHERE x.classid = u.refclassid AND x.objid = u.refobjid AND x.deptype = 'e'
                              AND x.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass) || ')', '')
                 FROM used u,
                      LATERAL pg_catalog.pg_identify_object_as_address(u.refclassid, u.refobjid, 0) a,
                      LATERAL pg_catalog.pg_identify_object(u.refclassid, u.refobjid, 0) i
                 ORDER BY 4",
                &[&schema],
            )
            .described()?;
        let mut missing = Vec::new();
        for r in &used {
            let (kind, names, args, said): (String, Vec<String>, Vec<String>, String) =
                (r.get(0), r.get(1), r.get(2), r.get(3));
            if self
                .to
                .query_one(
                    "SELECT pg_catalog.pg_get_object_address($1::text, $2::text[], $3::text[])",
                    &[&kind, &names, &args],
                )
                .is_err()
            {
                missing.push(printable(&said));
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        fail(format!("objects outside {} that its definitions use are missing on the new server ({}): {}; create them there first (CREATE EXTENSION, or their own definitions); nothing was made", printable(schema), self.to_s.label, missing.join(", ")))
    }

    /// Objects of another schema (or of none) that depend on the shard's
    /// schema on the server a copy is dropped from once the shard has left
    /// it (`old`: the move's old server; else the new one, for a
    /// rollback). drop_shard refuses them (2BP01), which after the cutover
    /// committed would leave that copy behind: refused before anything,
    /// `nothing` saying what was not done.
    pub(super) fn no_dependents_outside(
        &mut self,
        schema: &str,
        old: bool,
        nothing: &str,
    ) -> Result<()> {
        let (c, label, which, when) = if old {
            (&mut self.from, &self.from_s.label, "old", "a move drops the old server's copy after its cutover, or when its rollback window ends")
        } else {
            (
                &mut self.to,
                &self.to_s.label,
                "new",
                "the rollback drops the new server's copy once the shard is back",
            )
        };
        if let Some(outside) = one(
            c,
            "SELECT insta_id._shard_dependents_outside((SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = $1::text))",
            schema,
        )? {
            return fail(format!(
                "objects outside {} on the {which} server ({label}) depend on it: {}; drop or change them first ({when}); {nothing}",
                printable(schema),
                printable(&outside)
            ));
        }
        Ok(())
    }

    /// The subscription's connection, made by the new server as the
    /// subscription will make it (its pg_hba.conf on the old server, its
    /// password file, its TLS), and for a rollback window the old server's
    /// back: a subscription created in a transaction rolled back, without
    /// a slot, nothing left.
    fn subscription_reaches(&mut self) -> Result<()> {
        let sides = [
            (
                false,
                self.a.subscription.as_deref().unwrap_or(&self.a.from),
                "--subscription",
                "new server",
                "old one",
            ),
            (
                true,
                self.a
                    .rollback_subscription
                    .as_deref()
                    .unwrap_or(&self.a.to),
                "--rollback-subscription",
                "old server",
                "new one",
            ),
        ];
        for (back, conn, option, on, of) in sides {
            if back && self.keep.is_none() {
                continue;
            }
            let c = if back { &mut self.from } else { &mut self.to };
            let tried = c.batch_execute(&format!(
                "BEGIN;
                 SET LOCAL client_min_messages = error; SET LOCAL statement_timeout = '30s';
                 CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {}
                   WITH (enabled = false, create_slot = false, slot_name = NONE)",
                ident(&format!("insta_check_{}", self.shard)),
                literal(conn),
                ident(if back { &self.back } else { &self.name })
            ));
            let _ = c.batch_execute("ROLLBACK");
            if let Err(e) = tried {
                return fail(format!(
                    "the {on} cannot reach the {of} as the move's {} would ({}): {}\nGive {option} the connection string the {on} uses for the {of}; its password belongs in the password file of the {on}'s operating-system user; nothing was made",
                    if back { "subscription back (for --rollback)" } else { "subscription" },
                    printable(conn),
                    crate::db::describe(&e)
                ));
            }
        }
        Ok(())
    }

    /// What the replication's apply may run, and what the replication back
    /// needs for a rollback window: checked before a copy is made, and
    /// again before a copy an earlier run made is taken up (with this run's
    /// window).
    pub(super) fn apply_checks(&mut self, schema: &str) -> Result<()> {
        // PostgreSQL 15 applies replicated rows as the subscription's owner
        // (the superuser running this); 16 and later as each table's owner.
        // So onto 15, no code a non-superuser owns may run in the apply:
        // none in the schema, none its tables' constraints, indexes,
        // triggers or defaults call.
        let to_version: i32 = self
            .to
            .query_one(
                "SELECT pg_catalog.current_setting('server_version_num')::int",
                &[],
            )
            .described()?
            .get(0);
        let from_version: i32 = self
            .from
            .query_one(
                "SELECT pg_catalog.current_setting('server_version_num')::int",
                &[],
            )
            .described()?
            .get(0);
        // The same onto the old server, when its copy follows the new one.
        if to_version < 160000 || (self.keep.is_some() && from_version < 160000) {
            if let Some(owners) = one(&mut self.from, APPLY_CODE_OWNERS, schema)? {
                if to_version < 160000 {
                    return fail(format!("the new server runs PostgreSQL 15, which applies replicated rows as the subscription's owner, a superuser: code of {} owned by {} would run with its rights there. Move it onto PostgreSQL 16 or later (rows applied as each table's owner), or give those objects to a superuser first", printable(schema), printable(&owners)));
                }
                return fail(format!("the old server runs PostgreSQL 15, which would apply the replication back (for a rollback) as the subscription's owner, a superuser: code of {} owned by {} would run with its rights there. Move it with --rollback-window 0 (no rollback), or give those objects to a superuser first", printable(schema), printable(&owners)));
            }
        }
        if self.keep.is_some() {
            let wal: String = self
                .to
                .query_one("SELECT pg_catalog.current_setting('wal_level')", &[])
                .described()?
                .get(0);
            if wal != "logical" {
                return fail("wal_level on the new server is not logical: the replication back to the old server's copy, for a rollback, needs it (or --rollback-window 0)");
            }
            let free: bool = self
                .to
                .query_one(
                    "SELECT pg_catalog.count(*) < pg_catalog.current_setting('max_replication_slots')::int FROM pg_catalog.pg_replication_slots",
                    &[],
                )
                .described()?
                .get(0);
            if !free {
                return fail("no replication slot is free on the new server for the replication back, for a rollback (max_replication_slots): drop unused slots, release kept copies (--release), or --rollback-window 0");
            }
        }
        Ok(())
    }
}

/// The one value `sql` answers for `schema` ($1).
fn one(c: &mut Client, sql: &str, schema: &str) -> Result<Option<String>> {
    Ok(c.query_one(sql, &[&schema]).described()?.get(0))
}

/// The major and minor release `pg_dump --version` answers (a
/// development version's minor is 0).
pub(super) fn client_version(said: &str) -> Option<(u32, u32)> {
    let v = said.split("(PostgreSQL) ").nth(1)?;
    let mut parts = v.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

/// Whether `pg_dump --version`'s answer is a fixed release.
pub fn fixed_version(said: &str) -> bool {
    let Some((major, minor)) = client_version(said) else {
        return false;
    };
    major >= 18
        || FIXED_CLIENT
            .iter()
            .any(|&(m, fixed)| m == major && minor >= fixed)
}

/// Whether the pg_dump that answered `said` may dump a shard from a server
/// of major `from` for one of major `to`: None if so, else why not.
pub(super) fn pg_dump_unfit(said: &str, from: u32, to: u32) -> Option<String> {
    match client_version(said) {
        None => Some(format!("it answers {:?}", terminal(said))),
        Some((m, _)) if m < from => Some(format!(
            "it is {m}'s, older than the old server's {from} (it cannot read it)"
        )),
        Some((m, _)) if m > to => Some(format!(
            "it is {m}'s, newer than the new server's {to} (what it writes may not restore there)"
        )),
        Some(_) if !fixed_version(said) => Some(format!("it is {} (CVE-2025-8714 and 8715: a move needs 13.22, 14.19, 15.14, 16.10, 17.6, 18 or later)", terminal(said))),
        Some(_) => None,
    }
}

/// The pg_dump for a move from major `from` to major `to` (--pg-bin's, or
/// as its help says) and why it was chosen (its version, where it was
/// found, those passed over), or a refusal saying each one tried and why
/// not.
pub(super) fn choose_pg_dump(
    pg_bin: Option<&Path>,
    from: u32,
    to: u32,
) -> Result<(PathBuf, String)> {
    let mut tried: Vec<PathBuf> = match pg_bin {
        Some(dir) => vec![dir.join("pg_dump")],
        None => std::iter::once(PathBuf::from("pg_dump"))
            .chain(
                (from..=to)
                    .rev()
                    .map(|n| PathBuf::from(format!("/usr/lib/postgresql/{n}/bin/pg_dump"))),
            )
            .collect(),
    };
    let mut why = Vec::new();
    for path in tried.drain(..) {
        let said = match Command::new(&path).arg("--version").output() {
            Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_string(),
            Err(_) if pg_bin.is_none() && path.is_absolute() => continue,
            Err(e) => {
                why.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        match pg_dump_unfit(&said, from, to) {
            None => {
                let whence = match pg_bin {
                    Some(_) => "--pg-bin's",
                    None if !path.is_absolute() => "the first on PATH",
                    None => "a PostgreSQL package's",
                };
                let mut chosen = format!("{}, {whence}", terminal(&said));
                if !why.is_empty() {
                    chosen += &format!("; passed over: {}", why.join("; "));
                }
                return Ok((path, chosen));
            }
            Some(w) => why.push(format!("{}: {w}", path.display())),
        }
    }
    fail(format!(
        "no pg_dump fit to move a shard from PostgreSQL {from} to {to} ({}): give --pg-bin the directory of a pg_dump of {}",
        why.join("; "),
        if from == to { from.to_string() } else { format!("{from} to {to}") }
    ))
}

#[cfg(test)]
mod tests {
    use super::{fixed_version, pg_dump_unfit};

    #[test]
    fn a_pg_dump_of_the_old_major_the_new_one_or_between() {
        let v = |s: &str| format!("pg_dump (PostgreSQL) {s}");
        for (said, from, to) in [
            ("16.10", 16, 18),
            ("17.6", 16, 18),
            ("18.0", 16, 18),
            ("15.20", 15, 15),
        ] {
            assert_eq!(
                pg_dump_unfit(&v(said), from, to),
                None,
                "{said} {from} {to}"
            );
        }
        for (said, from, to, why) in [
            ("15.20", 16, 18, "older than the old server's 16"),
            ("18.1", 15, 17, "newer than the new server's 17"),
            ("16.9", 16, 16, "CVE-2025-8714"),
        ] {
            let w = pg_dump_unfit(&v(said), from, to).unwrap();
            assert!(w.contains(why), "{said}: {w}");
        }
        assert!(pg_dump_unfit("bash: pg_dump: not found", 16, 18).is_some());
    }

    #[test]
    fn only_fixed_clients_restore_a_shard() {
        for ok in [
            "pg_dump (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)",
            "psql (PostgreSQL) 17.6",
            "pg_dump (PostgreSQL) 16.10",
            "pg_dump (PostgreSQL) 18.0",
            "pg_dump (PostgreSQL) 19devel",
        ] {
            assert!(fixed_version(ok), "{ok}");
        }
        for old in [
            "pg_dump (PostgreSQL) 15.13",
            "psql (PostgreSQL) 17.5",
            "pg_dump (PostgreSQL) 12.22",
            "something else",
        ] {
            assert!(!fixed_version(old), "{old}");
        }
    }
}
