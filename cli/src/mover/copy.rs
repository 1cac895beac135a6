//! The copy of a shard on the new server: the checks, the publication,
//! the schema restored as its owner, the subscription and its initial
//! copy; and whether a copy an earlier run made can be taken up.

use super::*;

/// What a re-run finds of an interrupted move's copy (copy_kept).
pub(super) enum Kept {
    /// Complete and streaming: on to the comparison and the cutover (its
    /// step recorded first if the interrupted run had not).
    Complete,
    /// Still being copied by the subscription's workers: waited for.
    Copying,
    /// Not to be trusted, for this reason: undone and made again.
    Untrusted(String),
}

impl Mover<'_> {
    /// The checks, then the copy: publication, schema and subscription,
    /// slot, the initial copy, and for a rollback window the publication
    /// and slot back.
    pub(super) fn copy(&mut self, schema: &str) -> Result<()> {
        let schema = schema.to_string();
        self.step("checks");
        self.checks(&schema)?;

        self.step("publication on the old server");
        {
            let mut tx = self.from.transaction().described()?;
            tx.batch_execute(&format!(
                "CREATE PUBLICATION {} FOR TABLES IN SCHEMA {}",
                ident(&self.name),
                ident(&schema)
            ))
            .described()?;
            Self::record(
                &mut tx,
                self.shard,
                Leaving::Published,
                &schema,
                &self.to_label,
            )?;
            tx.commit().described()?;
        }

        self.step("schema and subscription on the new server (one transaction)");
        if let Err(e) = self.copy_schema(&schema) {
            // Nothing of it was made on the new server (one transaction):
            // the publication this run made goes too, so that nothing of
            // the move is left.
            let none = State {
                on_from: None,
                on_to: None,
                sub: None,
            };
            return fail(match self.drop_replication(&none, None) {
                Ok(()) => format!("{}\nThe publication this run made on the old server was dropped: nothing of the move is left", e.message()),
                Err(u) => format!("{}\nThe publication {} this run made on the old server could not be dropped ({}): insta-id move --undo drops it", e.message(), self.name, u.message()),
            });
        }
        let subid: i64 = self
            .to
            .query_one(
                &format!("SELECT oid::bigint FROM pg_catalog.pg_subscription WHERE subname = $1::text AND subdbid = {THIS_DB}"),
                &[&self.name],
            )
            .described()?
            .get(0);

        self.step("slot on the old server; copy");
        let follows = self.majors()?.0 >= 17;
        make_slot(&mut self.from, &self.name, follows)?;
        self.record_from(Leaving::Slot, &schema)?;
        {
            let mut tx = self.to.transaction().described()?;
            tx.batch_execute(&format!("ALTER SUBSCRIPTION {} ENABLE", ident(&self.name)))
                .described()?;
            Self::record(
                &mut tx,
                self.shard,
                Arriving::Copying,
                &schema,
                &self.from_label,
            )?;
            tx.commit().described()?;
        }
        stop_after("slot");

        self.step("waiting for the copy");
        self.wait_copy(subid, &schema)?;
        self.record_to(Arriving::Copied, &schema)?;
        stop_after("copy");
        if self.keep.is_some() {
            self.step("publication and slot back on the new server, for a rollback");
            self.make_back(&schema)?;
            stop_after("back");
        }
        Ok(())
    }

    /// The copy compared with the server it copies before the cutover
    /// (verify.rs): a move's, the new server's copy with the old server's
    /// shard; a rollback's (`back`), the old server's copy with the new
    /// server's shard. The rows made since, and the buckets that differed,
    /// are compared at the cutover, which copies that differ stop.
    pub(super) fn verify_copy(&mut self, schema: &str, back: bool) -> Result<()> {
        if self.a.no_verify {
            return Ok(());
        }
        let (holding, copy) = if back {
            self.step("compare the old server's copy with the new server's shard");
            (&self.to_s, &self.from_s)
        } else {
            self.step("compare the copy with the old server's");
            (&self.from_s, &self.to_s)
        };
        let mut publisher = connect(holding)?;
        let mut subscriber = connect(copy)?;
        let (differ, until) = verify::before_cutover(
            &mut publisher,
            &mut subscriber,
            self.slot(back),
            schema,
            None,
            sides(back),
        )?;
        for (_, line) in &differ {
            println!("   differs, read again at the cutover (rows changing, or copies that differ): {line}");
        }
        self.verified_until = Some(until);
        self.verify_again = differ.into_iter().map(|(m, _)| m).collect();
        self.verify_from = Some(publisher);
        self.verify_to = Some(subscriber);
        Ok(())
    }

    /// The replication slot that feeds the copy: the move's, or for a
    /// rollback (`back`) the one back.
    pub(super) fn slot(&self, back: bool) -> &str {
        if back {
            &self.back
        } else {
            &self.name
        }
    }

    /// Between two tries of the cutover: the rows made since the last
    /// comparison compared now, so that the next try's, under its lock,
    /// stays as short as the first's.
    pub(super) fn verify_since(&mut self, schema: &str, back: bool) -> Result<()> {
        let slot = self.slot(back).to_string();
        let (Some(lo), Some(publisher), Some(subscriber)) = (
            self.verified_until,
            self.verify_from.as_mut(),
            self.verify_to.as_mut(),
        ) else {
            return Ok(());
        };
        let (differ, until) =
            verify::before_cutover(publisher, subscriber, &slot, schema, Some(lo), sides(back))?;
        for (m, line) in differ {
            println!("   differs, read again at the cutover (rows changing, or copies that differ): {line}");
            self.verify_again.push(m);
        }
        self.verified_until = Some(until);
        Ok(())
    }

    /// Whether an interrupted move's copy can be taken up where it
    /// stopped, and if not why: the old server's side at its slot (no
    /// cutover begun), its publication and slot there; the new server's
    /// copying or copied, its subscription enabled and naming every table
    /// of the shard (ready, or still being copied: the subscription's
    /// workers go on without the mover); the definitions unchanged since;
    /// and no replication back left unless this run keeps a window (it
    /// makes the back afresh).
    pub(super) fn copy_kept(&mut self, st: &State, schema: &str) -> Result<Kept> {
        let untrusted = |why: &str| Ok(Kept::Untrusted(why.to_string()));
        match st.sub.as_ref() {
            None => return untrusted("the new server has no subscription of it"),
            Some((_, s)) if s != schema => {
                return untrusted("the new server's subscription carries no table of the shard")
            }
            Some(_) => {}
        }
        match self.leaving_step()? {
            Some(Leaving::Slot) => {}
            Some(step) => {
                return Ok(Kept::Untrusted(format!(
                    "the old server recorded step '{}', not the slot's",
                    step.as_str()
                )))
            }
            None => return untrusted("the old server recorded no slot of it"),
        }
        let copying = match self.arriving_step()? {
            Some((step, s)) if s == schema && step.copied() => false,
            Some((Arriving::Copying, s)) if s == schema => true,
            Some((step, _)) => {
                return Ok(Kept::Untrusted(format!(
                    "the new server recorded step '{}', before its copy began",
                    step.as_str()
                )))
            }
            None => return untrusted("the new server recorded no copy"),
        };
        if self.keep.is_none() && self.back_left()? {
            return untrusted("replication back to the old server is left, and this move keeps no rollback window");
        }
        // A failover of the new server: what its earlier primary applied,
        // and confirmed to the old server's slot, which goes on from there,
        // may not have reached the standby promoted (the subscription's
        // commits wait for no standby before the cutover).
        if let Some((was, now)) = failed_over(&mut self.to, self.shard, "arriving")? {
            return Ok(Kept::Untrusted(format!("the new server failed over since its copy began (timeline {was}, now {now}): rows its earlier primary applied may be missing from the copy, and the old server's slot has gone past them")));
        }
        let old_failover = failed_over(&mut self.from, self.shard, "leaving")?;
        let (tables, published): (String, bool) = {
            let r = self
                .from
                .query_one(
                    "SELECT pg_catalog.jsonb_build_object('tables', coalesce(pg_catalog.jsonb_agg(c.relname), '[]'))::text,
                            EXISTS (SELECT FROM pg_catalog.pg_publication WHERE pubname = $2::text)
                              AND EXISTS (SELECT FROM pg_catalog.pg_replication_slots s
                                          WHERE s.slot_name = $2::text AND s.database = pg_catalog.current_database()
                                            -- (not invalidated: its WAL kept; 17's reason, when there is one)
                                            AND s.wal_status IS DISTINCT FROM 'lost'
                                            AND pg_catalog.to_jsonb(s) ->> 'invalidation_reason' IS NULL)
                     FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = $1::text AND c.relkind IN ('r', 'p')",
                    &[&schema, &self.name],
                )
                .described()?;
            (r.get(0), r.get(1))
        };
        match (published, old_failover) {
            (false, Some((was, now))) => return Ok(Kept::Untrusted(format!("the old server failed over since the move's slot was made (timeline {was}, now {now}), and the slot did not follow it (PostgreSQL 15 and 16 keep a logical slot on its primary; 17 and later carry it to a standby that runs sync_replication_slots, when the primary's synchronized_standby_slots names the standby's slot)"))),
            (false, None) => return untrusted("its publication or slot on the old server is gone"),
            // (The table copies' own slots never follow a failover.)
            (true, Some((was, now))) if copying => return Ok(Kept::Untrusted(format!("the old server failed over during the copy (timeline {was}, now {now}): the copies of its tables lost their slots"))),
            _ => {}
        }
        let enabled: bool = self
            .to
            .query_one(
                &format!("SELECT coalesce((SELECT subenabled FROM pg_catalog.pg_subscription WHERE subname = $1::text AND subdbid = {THIS_DB}), false)"),
                &[&self.name],
            )
            .described()?
            .get(0);
        if !enabled {
            return untrusted("its subscription on the new server is disabled");
        }
        let states = if copying { "rdsfi" } else { "r" };
        if let Some(t) = unsubscribed(&mut self.to, &tables, &self.name, schema, states)? {
            return Ok(Kept::Untrusted(format!(
                "tables its subscription does not carry{}: {t}",
                if copying { "" } else { " ready" }
            )));
        }
        // Definitions changed on the old server since the copy was made (a
        // migration ran between two runs, when no mover held the shard):
        // replication carries rows, not DDL, so the copy is made again.
        let (old, new) = (
            fingerprint(&mut self.from, schema)?,
            fingerprint(&mut self.to, schema)?,
        );
        if old != new {
            return untrusted(
                "the shard's definitions changed on the old server since its copy was made",
            );
        }
        if let Some((was, now)) = old_failover {
            // The slot followed, but the copy holds only what the standby
            // promoted had too: else its slot goes on after rows that
            // server never had, which the copy keeps.
            if let Some(why) =
                applied_past_failover(&mut self.from, was, now, &mut self.to, &self.name)?
            {
                return Ok(Kept::Untrusted(format!("the old server failed over since the move's slot was made (timeline {was}, now {now}), and its slot followed, but {why}")));
            }
            // The subscription reads from the server that holds the slot
            // now (this run's --from, or --subscription).
            let conn = self.conninfo_for_subscription().to_string();
            self.to
                .batch_execute(&format!(
                    "ALTER SUBSCRIPTION {} CONNECTION {}",
                    ident(&self.name),
                    literal(&conn)
                ))
                .described()?;
            slot_in_use(&mut self.from, &self.name, "--subscription")?;
            println!("   the old server failed over since the move's slot was made (timeline {was}, now {now}); the slot followed it, and the subscription reads from it now");
        }
        Ok(
            if copying && unsubscribed(&mut self.to, &tables, &self.name, schema, "r")?.is_some() {
                Kept::Copying
            } else {
                Kept::Complete
            },
        )
    }

    /// On the new server, in one transaction: the schema, made by the
    /// operator and owned by the one owner of its objects; pg_dump's
    /// definitions of them run as that owner in a security-restricted
    /// operation (src/restore.rs says why); the schema's own owner; its
    /// fence, and the move's subscription, disabled and without a slot.
    pub(super) fn copy_schema(&mut self, schema: &str) -> Result<()> {
        let options = format!("{} {SESSION_OPTIONS}", crate::db::pgoptions());
        let options = options.trim_start();
        let pg_dump = self.pg_dump()?;
        // The schema's name quoted: a name, not a pattern. The DDL stays in
        // memory, never in a file a killed move would leave.
        let dump = Command::new(&pg_dump)
            .args([
                "-s",
                "-n",
                &ident(schema),
                "-d",
                &crate::db::conninfo_for_client(&self.from_s, &self.from),
            ])
            .env("PGOPTIONS", options)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{} could not be run: {e}", pg_dump.display()))?;
        if !dump.status.success() {
            return fail(format!(
                "pg_dump of {}: {}",
                printable(schema),
                terminal(String::from_utf8_lossy(&dump.stderr).trim_end())
            ));
        }
        let (quoted, code_owner, schema_owner) = self.owners(schema)?;
        // pg_dump's output sets search_path to '': what follows names
        // everything in full.
        let owners_part =
            crate::restore::owners_part(&String::from_utf8_lossy(&dump.stdout), &quoted)
                .map_err(|e| format!("the schema on the new server (nothing of it made): {e}"))?;
        let subscription = self.conninfo_for_subscription().to_string();
        let mut tx = self.to.transaction().described()?;
        let made = (|| -> std::result::Result<(), crate::pq::Error> {
            tx.batch_execute(&format!(
                "CREATE SCHEMA {} AUTHORIZATION {}",
                ident(schema),
                ident(&code_owner)
            ))?;
            tx.execute(
                "SELECT insta_id._run_in_schema($1::text::pg_catalog.name,
                     (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = $2::text)::pg_catalog.regrole,
                     ARRAY[$3::text])",
                &[&schema, &code_owner, &owners_part],
            )?;
            tx.batch_execute(&format!(
                "ALTER SCHEMA {schema} OWNER TO {owner};
                 SELECT insta_id.move_fence({literal_schema}, {shard});
                 CREATE SUBSCRIPTION {name} CONNECTION {conn} PUBLICATION {name}
                   WITH (enabled = false, create_slot = false, slot_name = {slot});
                 SELECT insta_id.move_step({shard}, 'arriving', 'subscribed', {literal_schema}, {peer});",
                schema = ident(schema),
                owner = ident(&schema_owner),
                literal_schema = literal(schema),
                shard = self.shard,
                name = ident(&self.name),
                slot = literal(&self.name),
                conn = literal(&subscription),
                peer = literal(&self.from_label),
            ))
        })();
        match made {
            Ok(()) => tx.commit().described(),
            Err(e) => Err(e).described(),
        }
        .map_err(|e| format!("the schema on the new server (nothing of it made): {e}"))?;
        Ok(())
    }

    /// The schema's name as pg_dump quotes it, the one owner of its objects
    /// (insta_id._code_owner: a schema of several owners is refused, 42501)
    /// and the schema's owner, read on the old server; both roles must exist
    /// on the new one.
    pub(super) fn owners(&mut self, schema: &str) -> Result<(String, String, String)> {
        let row = self
            .from
            .query_one(
                "SELECT pg_catalog.quote_ident($1::text),
                        (SELECT r.rolname::text FROM pg_catalog.pg_roles r WHERE r.oid = insta_id._code_owner($1::text)),
                        (SELECT r.rolname::text FROM pg_catalog.pg_roles r JOIN pg_catalog.pg_namespace n ON n.nspowner = r.oid
                         WHERE n.nspname = $1::text)",
                &[&schema],
            )
            .described()
            .map_err(|e| format!("the owner of {}'s objects: {e}", printable(schema)))?;
        let (quoted, code_owner, schema_owner): (String, String, String) =
            (row.get(0), row.get(1), row.get(2));
        let missing: Option<String> = self
            .to
            .query_one(
                "SELECT pg_catalog.string_agg(DISTINCT pg_catalog.quote_ident(x), ', ')
                 FROM pg_catalog.unnest(ARRAY[$1::text, $2::text]) x
                 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.rolname = x)",
                &[&code_owner, &schema_owner],
            )
            .described()?
            .get(0);
        if let Some(missing) = missing {
            return fail(format!(
                "roles owning {} are missing on the new server: {}; create them there first (pg_dumpall --roles-only)",
                printable(schema),
                printable(&missing)
            ));
        }
        Ok((quoted, code_owner, schema_owner))
    }

    /// Until every table is copied and streaming, printing how far the copy
    /// is every 5 s.
    pub(super) fn wait_copy(&mut self, subid: i64, schema: &str) -> Result<()> {
        let started = Instant::now();
        let until = started + Duration::from_secs(self.a.waits.copy_timeout);
        let mut said = Instant::now();
        // Each table's size on the old server: what the copy has to carry
        // (its COPY text is about as large), for the estimate.
        let sizes: std::collections::HashMap<String, i64> = self
            .from
            .query(
                "SELECT c.relname::text, pg_catalog.pg_table_size(c.oid)
                 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = $1::text AND c.relkind = 'r'",
                &[&schema],
            )
            .described()?
            .into_iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let total: i64 = sizes.values().sum();
        loop {
            let r = self
                .to
                .query_one(
                    "SELECT pg_catalog.count(*) FILTER (WHERE r.srsubstate = 'r'), pg_catalog.count(*),
                            coalesce((SELECT sum(p.bytes_processed) FROM pg_catalog.pg_stat_progress_copy p
                                      WHERE p.relid IN (SELECT srrelid FROM pg_catalog.pg_subscription_rel
                                                        WHERE srsubid = $1::bigint::oid)), 0)::bigint,
                            coalesce(pg_catalog.array_agg(c.relname::text) FILTER (WHERE r.srsubstate = 'r'), '{}')
                     FROM pg_catalog.pg_subscription_rel r JOIN pg_catalog.pg_class c ON c.oid = r.srrelid
                     WHERE r.srsubid = $1::bigint::oid",
                    &[&subid],
                )
                .described()?;
            let (ready, tables, bytes, done): (i64, i64, i64, Vec<String>) =
                (r.get(0), r.get(1), r.get(2), r.get(3));
            if ready == tables {
                return Ok(());
            }
            if Instant::now() > until {
                return fail("gave up waiting for the initial copy");
            }
            if said.elapsed() >= Duration::from_secs(5) {
                said = Instant::now();
                let behind: Option<i64> = self
                    .from
                    .query_opt(
                        "SELECT pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), confirmed_flush_lsn)::bigint
                         FROM pg_catalog.pg_replication_slots WHERE slot_name = $1::text",
                        &[&self.name],
                    )
                    .described()?
                    .and_then(|r| r.get(0));
                let copied = done.iter().filter_map(|t| sizes.get(t)).sum::<i64>() + bytes.max(0);
                println!(
                    "   {ready} of {tables} tables copied; about {} of {} so far{}; the stream {} behind",
                    pretty(copied as u64),
                    pretty(total as u64),
                    left(started.elapsed(), copied, total),
                    behind.map_or("-".into(), |b| pretty(b.max(0) as u64))
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// On the new server, once the copy is streaming: the publication and
    /// the slot the old server's copy will follow after the cutover, made
    /// now so that no client waits on the slot's snapshot at the cutover.
    /// Made afresh: a slot left by a run killed here is from before it.
    pub(super) fn make_back(&mut self, schema: &str) -> Result<()> {
        self.to
            .execute(
                "SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM pg_catalog.pg_replication_slots
                 WHERE slot_name = $1::text AND database = pg_catalog.current_database()",
                &[&self.back],
            )
            .described()?;
        self.to
            .batch_execute(&format!(
                "SET client_min_messages = warning; DROP PUBLICATION IF EXISTS {name};
                 RESET client_min_messages; CREATE PUBLICATION {name} FOR TABLES IN SCHEMA {schema}",
                name = ident(&self.back),
                schema = ident(schema)
            ))
            .described()?;
        let follows = self.majors()?.1 >= 17;
        make_slot(&mut self.to, &self.back, follows)?;
        Ok(())
    }
}

/// A digest of what a schema defines, as the catalogs of either server say
/// it: the relations, their columns and types, their constraints and
/// triggers by name and kind, and the functions, without the move's own
/// fence. By names, not deparsed text, and without 18's NOT NULL
/// constraints (15 to 17 have none): equal across majors for a copy made
/// from the old server's definitions and not changed since.
pub(super) fn fingerprint(c: &mut Client, schema: &str) -> Result<String> {
    Ok(c.query_one(
        "WITH nsp AS (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1::text)
         SELECT coalesce(pg_catalog.md5(pg_catalog.string_agg(x, E'\\n' ORDER BY x)), '') FROM (
           SELECT 'r ' || c.relname || ' ' || c.relkind::text FROM pg_catalog.pg_class c WHERE c.relnamespace = (SELECT oid FROM nsp)
           UNION ALL
           SELECT 'a ' || c.relname || '.' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text
           FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
           WHERE c.relnamespace = (SELECT oid FROM nsp) AND a.attnum > 0 AND NOT a.attisdropped
           UNION ALL
           SELECT 'c ' || c.relname || '.' || k.conname || ' ' || k.contype::text
           FROM pg_catalog.pg_constraint k JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
           WHERE c.relnamespace = (SELECT oid FROM nsp) AND k.contype <> 'n'
           UNION ALL
           SELECT 't ' || c.relname || '.' || t.tgname FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
           WHERE c.relnamespace = (SELECT oid FROM nsp) AND NOT t.tgisinternal AND t.tgname <> 'insta_id_move_fence'
           UNION ALL
           SELECT 'f ' || p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')'
           FROM pg_catalog.pg_proc p WHERE p.pronamespace = (SELECT oid FROM nsp) AND p.proname <> 'insta_id_move_fence'
         ) s(x)",
        &[&schema],
    )
    .described()?
    .get(0))
}

/// The copy's estimate: at the rate so far, how long the rest takes.
fn left(elapsed: Duration, copied: i64, total: i64) -> String {
    if copied <= 0 || total <= copied {
        return String::new();
    }
    let secs = elapsed.as_secs_f64() * (total - copied) as f64 / copied as f64;
    format!(", about {} s left", secs.round() as u64)
}

/// What a comparison's lines call the server holding the shard and the one
/// with the copy: a move's old and new servers, a rollback's (`back`) the
/// other way.
pub(super) fn sides(back: bool) -> (&'static str, &'static str) {
    if back {
        ("new server", "old server")
    } else {
        ("old server", "new server")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_the_rate_so_far() {
        assert_eq!(left(Duration::from_secs(10), 100, 400), ", about 30 s left");
        assert_eq!(left(Duration::from_secs(10), 0, 400), "");
        assert_eq!(left(Duration::from_secs(10), 400, 400), "");
    }
}
