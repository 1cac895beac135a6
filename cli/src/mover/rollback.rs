//! A moved shard's kept copy on the old server: the rollback that returns
//! the shard to it, and the release that drops it.

use super::cutover::{commit_within, committed, lock_caught_up, wait_past_mark};
use super::finish::drop_fence;
use super::*;

impl Mover<'_> {
    /// After a failover of the new server since the move began (issue 57):
    /// its high-water mark raised to the old server's, which covers every
    /// ID the old server issued, so that the new server never issues one
    /// of them whatever it lost (move_carry's mark, on a standby that was
    /// not synchronous). Whether it failed over.
    pub(super) fn after_new_failover(&mut self) -> Result<bool> {
        if let Some(seen) = self.new_failover {
            return Ok(seen);
        }
        let Some((was, now)) = failed_over(&mut self.to, self.shard, "arriving")? else {
            self.new_failover = Some(false);
            return Ok(false);
        };
        let mark: Option<String> = self
            .from
            .query_one("SELECT insta_id.high_water_mark()::text", &[])
            .described()?
            .get(0);
        if let Some(mark) = &mark {
            self.to
                .query_one(
                    "SELECT insta_id.raise_high_water_mark($1::text::timestamptz)",
                    &[mark],
                )
                .described()?;
        }
        println!(
            "   the new server failed over since the move began (timeline {was}, now {now}): its high-water mark raised to the old server's ({}), so that it issues none of the old server's IDs",
            mark.as_deref().unwrap_or("none")
        );
        self.new_failover = Some(true);
        Ok(true)
    }

    /// After a failover of either server since the move (issue 57). The
    /// old server's since the cutover: refused. The new server's: the
    /// slot back followed it (PostgreSQL 17 and later, to a standby that
    /// runs sync_replication_slots), and the old server's subscription back
    /// is pointed at the server that holds it now (--rollback-subscription,
    /// else --to); else the old copy stopped following the shard at the
    /// failover, and a rollback, which would lose what was written since,
    /// is refused.
    fn back_after_failover(&mut self) -> Result<()> {
        // The old server failed over since the cutover: what its earlier
        // primary applied from the slot back, and confirmed, may not have
        // reached the standby promoted, and the slot does not send it
        // again.
        if let Some((was, now)) = failed_over_since(
            &mut self.from,
            self.shard,
            "leaving",
            Some(Leaving::Reserved.as_str()),
        )? {
            return fail(format!("the old server failed over since the cutover (timeline {was}, now {now}): its copy of shard {} may lack rows its earlier primary applied from the new server, which the slot back does not send again; a rollback is refused, nothing was changed. insta-id move --release drops the old copy", self.shard));
        }
        let Some((was, now)) = failed_over(&mut self.to, self.shard, "arriving")? else {
            return Ok(());
        };
        let followed: bool = self
            .to
            .query_one(
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_replication_slots
                                WHERE slot_name = $1::text AND database = pg_catalog.current_database())",
                &[&self.back],
            )
            .described()?
            .get(0);
        if !followed {
            return fail(format!("the new server failed over since the move (timeline {was}, now {now}), and the slot back ({}) did not follow it: the old server's copy stopped following shard {} then, and a rollback would lose what was written since; nothing was changed. insta-id move --release drops the old copy", self.back, self.shard));
        }
        if let Some(why) =
            applied_past_failover(&mut self.to, was, now, &mut self.from, &self.back)?
        {
            return fail(format!("the new server failed over since the move (timeline {was}, now {now}), and the slot back ({}) followed, but {why}: the old copy of shard {} has rows the shard lost; nothing was changed. insta-id move --release drops the old copy", self.back, self.shard));
        }
        let conn = self.back_conninfo().to_string();
        self.from
            .batch_execute(&format!(
                "ALTER SUBSCRIPTION {} CONNECTION {}",
                ident(&self.back),
                literal(&conn)
            ))
            .described()?;
        slot_in_use(&mut self.to, &self.back, "--rollback-subscription")?;
        println!("   the new server failed over since the move (timeline {was}, now {now}); the slot back followed it, and the old server's subscription back reads from it now");
        Ok(())
    }

    /// Returns the shard to the old server, whose copy the subscription back
    /// kept up to date: the cutover the other way (the new server's locks,
    /// the copy caught up, sequences, mark and history carried back, the
    /// shard dropped on the new server: the point of no return), then the
    /// old server adopts it.
    pub(super) fn rollback(&mut self, mut hold: Client, schema: &str) -> Result<()> {
        self.step(&format!(
            "roll back shard {} to the old server: checks",
            self.shard
        ));
        self.no_dependents_outside(schema, false, "nothing was changed")?;
        self.back_after_failover()?;
        let (from, back) = (&mut self.from, &self.back);
        let ready: Option<(i64, i64)> = from
            .query_opt(
                &format!(
                    "SELECT (pg_catalog.count(r.srrelid) FILTER (WHERE r.srsubstate = 'r'))::bigint, pg_catalog.count(r.srrelid)::bigint
                     FROM pg_catalog.pg_subscription s LEFT JOIN pg_catalog.pg_subscription_rel r ON r.srsubid = s.oid
                     WHERE s.subname = $1::text AND s.subdbid = {THIS_DB} AND s.subenabled GROUP BY s.oid"
                ),
                &[back],
            )
            .described()?
            .map(|r| (r.get(0), r.get(1)));
        match ready {
            Some((r, n)) if r == n && n > 0 => {}
            _ => return fail(format!("the old server's subscription back ({}) is missing, disabled or not streaming every table: the copy may not be up to date, so nothing was changed", self.back)),
        }
        // Streaming now (an apply worker on the old server, the slot in use
        // on the new one), before clients are paused for it.
        let (from, to, back) = (&mut self.from, &mut self.to, &self.back);
        wait_for(10, "the subscription back to stream", || {
            let worker: bool = from
                .query_one(
                    "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_subscription
                                    WHERE subname = $1::text AND relid IS NULL AND pid IS NOT NULL)",
                    &[back],
                )
                .described()?
                .get(0);
            let slot: bool = to
                .query_one(
                    "SELECT EXISTS (SELECT FROM pg_catalog.pg_replication_slots WHERE slot_name = $1::text AND active)",
                    &[back],
                )
                .described()?
                .get(0);
            Ok(worker && slot)
        })
        .map_err(|_| format!("the subscription back ({}) is not streaming (no apply worker on the old server, or its slot idle on the new one: the old server's log says why); nothing was changed", self.back))?;
        // The old server's copy compared with the shard before it is
        // returned, as a move compares its copy (the rows made since, at
        // the cutover, under its lock).
        self.verify_copy(schema, true)?;
        // As the move's cutover does on the new server: the old server's
        // adoption is begun, and its registry row held, before this
        // cutover's COMMIT on the new server, the point of no return.
        let mut fin = hold_open(&self.from_s, &self.a.waits.lock_timeout)?;
        let adopted = Self::adopt_begin(&mut fin, false, self.shard, schema).map_err(|e| {
            format!(
                "the old server could not adopt the copy of shard {} (nothing was changed): {}",
                self.shard,
                e.message()
            )
        })?;
        self.step("rollback: cutover");
        if let Err(e) = self.tries(&mut hold, schema, true) {
            let _ = fin.batch_execute("ROLLBACK");
            return Err(e);
        }
        stop_after("rolled-back");
        let adopt = if adopted {
            self.step(&format!("adopt {} on the old server", printable(schema)));
            // (The step opens the fence of its sequences, now that the
            // carry, from another session, has set them.)
            Self::record(
                &mut fin,
                self.shard,
                Leaving::Returned,
                schema,
                &self.to_label,
            )
            .and_then(|()| Self::arrived(&mut fin, self.shard, (&self.to_label, &self.to_id)))
        } else {
            Ok(())
        };
        adopt
            .and_then(|()| Ok(fin.batch_execute("COMMIT").described()?))
            .map_err(|e| {
                format!(
                    "{}\nThe rollback's cutover committed: shard {} left the new server; run the rollback again, which adopts it on the old server and finishes",
                    e.message(),
                    self.shard
                )
            })?;
        self.finish_rollback(hold, schema)
    }

    /// In the held session on the new server.
    pub(super) fn rollback_locked(
        &mut self,
        hold: &mut Client,
        hold_pid: i32,
        schema: &str,
        budget: &Budget,
        dog: &Watchdog,
    ) -> Result<()> {
        lock_caught_up(
            hold,
            hold_pid,
            &mut self.to,
            &self.back,
            (self.shard, schema),
            budget,
            dog,
        )?;
        budget.lap("lock and catch-up");
        stop_after("back-blocked");
        let state: String = hold
            .query_one("SELECT insta_id.move_state($1::int)::text", &[&self.shard])
            .described()?
            .get(0);
        budget.lap("move_state");
        // As at the move's cutover: a table made on both servers in the
        // window exists on the old copy, but the rows written to it on the
        // new server never came back.
        if let Some(t) = unsubscribed(&mut self.from, &state, &self.back, schema, "r")? {
            return fail(format!("tables of shard {} that the subscription back does not carry (made after the move): {}; nothing was changed, the shard stays on the new server", self.shard, printable(&t)));
        }
        // (After that check: such a table differs too, and is better said.)
        self.compare_locked(hold, schema, budget, true)?;
        self.from
            .execute(
                "SELECT insta_id.move_carry($1::int, $2::text::jsonb)",
                &[&self.shard, &state],
            )
            .described()?;
        budget.lap("move_carry");
        let mark: Option<String> = self
            .from
            .query_one(
                "SELECT ($1::text::jsonb ->> 'mark')::timestamptz::text",
                &[&state],
            )
            .described()?
            .get(0);
        if let Some(mark) = mark {
            println!("   sequences and the high-water mark ({mark}) carried back");
            wait_past_mark(&mut self.from, &mark, budget)?;
        }
        budget.lap("mark");
        // Fenced and kept, not dropped: a drop's time grows with what the
        // schema holds, all of it spent with clients paused. The rollback
        // drops it once they are on the old server (finish_rollback).
        hold.execute("SELECT insta_id.move_return($1::int)", &[&self.shard])
            .described()?;
        budget.lap("fence");
        commit_within(hold, budget, dog)?;
        committed(budget);
        println!(
            "   schema {} fenced on the new server, to be dropped once its clients are on the old one",
            printable(schema)
        );
        Ok(())
    }

    /// After a rollback's cutover committed: the old server adopts its copy
    /// (the fence opens), the entry points back at it, and the replication
    /// back and the fence are dropped.
    pub(super) fn finish_rollback(&mut self, hold: Client, schema: &str) -> Result<()> {
        let registered: bool = self
            .from
            .query_one(
                "SELECT EXISTS (SELECT FROM insta_id_admin.shard_registry WHERE shard_id = $1::int)",
                &[&self.shard],
            )
            .described()?
            .get(0);
        if !registered {
            self.step(&format!("adopt {} on the old server", printable(schema)));
            let mut tx = self.from.transaction().described()?;
            // The step opens the fence of the copy's sequences: bounded, as
            // the entry may still be paused.
            tx.execute(
                "SELECT pg_catalog.set_config('lock_timeout', $1, true)",
                &[&self.a.waits.lock_timeout],
            )
            .described()?;
            tx.execute(
                "SELECT insta_id.adopt_shard($1::text::name, $2::int)",
                &[&schema, &self.shard],
            )
            .described()?;
            Self::record(
                &mut tx,
                self.shard,
                Leaving::Returned,
                schema,
                &self.to_label,
            )?;
            Self::arrived(&mut tx, self.shard, (&self.to_label, &self.to_id))?;
            tx.commit().described()?;
        }
        if let Some(entry) = self.bouncer.as_ref().map(|b| b.entry.clone()) {
            self.step(&format!(
                "point PgBouncer's entry {entry} at the old server"
            ));
            let pointed = self.bouncer.as_ref().expect("a bouncer").point_and_resume();
            // (Resumed, or not to be resumed by a signal: its target may be
            // the old one.)
            pause::released();
            let resumed = pointed.map_err(|e| format!("{e}\nThe shard is the old server's again; its entry may still be paused: fix this and run the rollback again"))?;
            // From the PAUSE to PgBouncer's answer to the RESUME: how long
            // its clients waited.
            if let (Some(t), Some(r)) = (self.paused_at, resumed) {
                println!(
                    "   {entry} paused for {:.3} s",
                    r.duration_since(t).as_secs_f64()
                );
            }
        }
        // (Without PgBouncer too: a signal from here on exits at once.)
        pause::released();
        self.step("cleanup: the replication back, the fence, the new server's copy");
        {
            let mut tx = self.from.transaction().described()?;
            Self::unsubscribe_back(&mut tx, &self.back)?;
            tx.commit().described()?;
        }
        drop_fence(&mut self.from, schema)?;
        Self::done(&mut self.from, self.shard, "leaving")?;
        // The slot back first: a copy that cannot be dropped yet must not
        // keep WAL on the new server meanwhile.
        self.drop_back(false)?;
        // The copy the cutover fenced on the new server, now that the
        // clients are on the old one (a rollback before 0.11.0 dropped it
        // in its cutover: nothing left).
        let kept: bool = self
            .to
            .query_one(
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1::text)
                        AND EXISTS (SELECT FROM insta_id_admin.moves
                                    WHERE shard_id = $2::int AND side = 'arriving' AND step = 'returned')",
                &[&schema, &self.shard],
            )
            .described()?
            .get(0);
        if kept {
            release_copy((&mut self.to, "new"), |_| Ok(()), self.shard, schema, &self.a.waits.lock_timeout)
                .map_err(|e| {
                    Failure::Failed(format!(
                        "{}\nThe shard is the old server's again; run the rollback again (--rollback) to drop the new server's copy",
                        e.message()
                    ))
                })?;
        }
        stop_after("released-new");
        Self::done(&mut self.to, self.shard, "arriving")?;
        drop(hold);
        self.step(&format!(
            "rolled back shard {} ({}) to the old server",
            self.shard,
            printable(schema)
        ));
        Ok(())
    }

    /// Drops the old server's copy and the replication back.
    pub(super) fn release(&mut self, hold: Client, schema: &str) -> Result<()> {
        // After a failover of the new server, the old copy may hold rows
        // the shard lost: dropped only when the operator says so.
        if self.after_new_failover()? && !self.a.release {
            println!("   WARNING:  the old server's copy of shard {} is kept: the new server failed over since the move began, and if its standby was not synchronous, rows the old server committed before the cutover may be missing there. Compare the copies (insta-id verify {} --from OLD --to NEW), then drop the old one with --release", self.shard, self.shard);
            return Ok(());
        }
        self.step(&format!(
            "release: the old server's copy of shard {} (fenced since the cutover), and any replication back",
            self.shard
        ));
        // (A finish interrupted in its cleanup leaves the forward
        // replication: its subscription, slots and publication.)
        let st = self.read_state()?;
        self.drop_replication(&st, None)?;
        let back = self.back.clone();
        release_copy(
            (&mut self.from, "old"),
            |tx| Self::unsubscribe_back(tx, &back),
            self.shard,
            schema,
            &self.a.waits.lock_timeout,
        )
        .map_err(|e| {
            Failure::Failed(format!(
                "{}\nThe shard is the new server's; run the move again (or --release) to drop the copy",
                e.message()
            ))
        })?;
        stop_after("released-old");
        // (A finish killed before it dropped the fence on the new server.)
        drop_fence(&mut self.to, schema)?;
        self.drop_back(true)?;
        drop(hold);
        self.step(&format!(
            "shard {} ({}) is the new server's alone",
            self.shard,
            printable(schema)
        ));
        Ok(())
    }
}

/// Drops, in `tx` on `c`'s server, the copy of `shard` it keeps fenced
/// (move_release: one kept for a rollback, or one a rollback left), saying
/// first what it drops, and commits. Bounded by `lock_timeout`: a session
/// on the copy (a reader, a backup) holds the drop up, and is named.
/// `first` runs in the same transaction before it.
fn release_copy(
    (c, server): (&mut Client, &str),
    first: impl FnOnce(&mut crate::pq::Transaction<'_>) -> Result<()>,
    shard: i32,
    schema: &str,
    lock_timeout: &str,
) -> Result<()> {
    let mut tx = c.transaction().described()?;
    first(&mut tx)?;
    // What it drops, said before it does.
    let dropped: String = tx
            .query_one(
                "WITH nsp AS (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1::text)
                 SELECT coalesce(pg_catalog.string_agg(pg_catalog.format('%s %I',
                            CASE c.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'partitioned table'
                                 WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view' ELSE 'relation' END, c.relname),
                          ', ' ORDER BY c.relname), 'nothing')
                     || pg_catalog.format(', %s functions, %s types',
                          (SELECT pg_catalog.count(*) FROM pg_catalog.pg_proc p WHERE p.pronamespace = (SELECT oid FROM nsp)),
                          (SELECT pg_catalog.count(*) FROM pg_catalog.pg_type y LEFT JOIN pg_catalog.pg_class t ON t.oid = y.typrelid
                           WHERE y.typnamespace = (SELECT oid FROM nsp) AND (y.typtype IN ('e', 'd') OR t.relkind = 'c')))
                 FROM pg_catalog.pg_class c WHERE c.relnamespace = (SELECT oid FROM nsp) AND c.relkind IN ('r', 'p', 'S', 'v')",
                &[&schema],
            )
            .described()?
            .get(0);
    println!(
        "   dropping schema {} on the {server} server: {} (never another schema's objects: drop_shard refuses those)",
        printable(schema),
        printable(&dropped)
    );
    // Bounded: a session on the copy holds the drop up, named; a
    // re-run drops it later.
    tx.execute(
        "SELECT pg_catalog.set_config('lock_timeout', $1, true)",
        &[&lock_timeout],
    )
    .described()?;
    if let Err(e) = tx.execute("SELECT insta_id.move_release($1::int)", &[&shard]) {
        if e.code() != Some(sqlstate::LOCK_NOT_AVAILABLE) {
            return fail(crate::db::describe(&e));
        }
        drop(tx);
        let who = pause::holders(c, schema, &[], None)?;
        return fail(format!(
            "the {server} server's copy of shard {} was not dropped within --lock-timeout ({}), held by:{}",
            shard,
            lock_timeout,
            if who.is_empty() {
                "\n  (no one any more)".to_string()
            } else {
                pause::listed(&who)
            }
        ));
    }
    tx.commit().described()?;
    Ok(())
}
