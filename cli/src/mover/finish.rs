//! The new server's part once the old server has let the shard go: the
//! finishers' lock, the adoption, PgBouncer or the router pointed there,
//! and the cleanup of the move's replication (or the replication back, for
//! a copy kept for a rollback).

use super::*;

impl Mover<'_> {
    /// Finishers of one move (two re-runs, or a re-run beside the mover)
    /// queue on insta_id's lock on the new server, the key of
    /// lock_shard_for_move (so migrate skips the shard meanwhile), held by a
    /// session kept to the end; each reads the state again once it has it.
    pub(super) fn lock_finish(&mut self) -> Result<(Client, State)> {
        let until = Instant::now() + Duration::from_secs(self.a.waits.finish_wait);
        let mut hold = hold_open(&self.to_s, "0")?;
        let mut said = false;
        loop {
            let got: bool = hold
                .query_one(
                    "SELECT insta_id._lock(insta_id._move_lock_key(), $1::int, false, true, false)",
                    &[&self.shard],
                )
                .described()?
                .get(0);
            if got {
                break;
            }
            if !said {
                let pid: Option<i32> = self
                    .to
                    .query_one(
                        "SELECT insta_id._lock_holder(insta_id._move_lock_key(), $1::int)",
                        &[&self.shard],
                    )
                    .described()?
                    .get(0);
                println!(
                    "   waiting for process {} on the new server (finishing this move, or moving the shard on)",
                    pid.map_or("-".into(), |p| p.to_string())
                );
                said = true;
            }
            if Instant::now() > until {
                return fail(format!(
                    "gave up waiting for the lock of shard {} on the new server",
                    self.shard
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let st = self.read_state()?;
        Ok((hold, st))
    }

    /// After the cutover committed, under lock_finish: the shard is the new
    /// server's; finish what is left.
    pub(super) fn finish_move(&mut self, mut hold: Client, st: &State, schema: &str) -> Result<()> {
        // (Before the adoption: the mark first, then the shard's writers.)
        self.after_new_failover()?;
        if st.on_to.is_none() {
            self.step(&format!("adopt {} on the new server", printable(schema)));
            let advance = (!self.origin_filter).then_some(self.back.as_str());
            Self::adopt(
                &mut hold,
                &self.a.waits.lock_timeout,
                self.shard,
                schema,
                (&self.from_label, &self.from_id),
                advance,
            )?;
        }
        stop_after("adopted");
        if let Some(entry) = self.bouncer.as_ref().map(|b| b.entry.clone()) {
            self.step(&format!(
                "point PgBouncer's entry {entry} at the new server"
            ));
            let pointed = self.bouncer.as_ref().expect("a bouncer").point_and_resume();
            // (Resumed, or not to be resumed by a signal: its target may be
            // the old one.)
            pause::released();
            let resumed = pointed.map_err(|e| format!("{e}\nThe shard is the new server's; its entry may still be paused: fix this and run the move again"))?;
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
        if let Some(target) = &self.a.router_target {
            self.step("re-point the router's map");
            let router = self.router.as_mut().expect("--router with --router-target");
            let version: i32 = router
                .query_one(
                    "SELECT public.repoint_shard($1::int, $2::text)",
                    &[&self.shard, target],
                )
                .described()?
                .get(0);
            println!("   map version {version}");
        }
        if self.bouncer.is_some() || self.router.is_some() {
            self.record_to(Arriving::Map, schema)?;
            stop_after("map");
        }
        self.step("cleanup: subscription, slots, publication, fence");
        self.record_to(Arriving::Cleanup, schema)?;
        self.drop_replication(st, None)?;
        stop_after("unsubscribed");
        drop_fence(&mut self.to, schema)?;
        // The old server keeps its copy for a rollback: it follows the new
        // server from now on (the forward stream gone, nothing loops). A
        // copy whose window has passed (a move without one: the cutover
        // fenced it, see cutover) is dropped below.
        let fenced = self.kept()?;
        let kept = matches!(fenced, Some((_, _, false)));
        if kept {
            self.subscribe_back()?;
        }
        {
            let mut tx = self.to.transaction().described()?;
            // (0.9.0's first script made the fence's function in the schema.)
            tx.batch_execute(&format!(
                "DROP FUNCTION IF EXISTS {}.insta_id_move_fence()",
                ident(schema)
            ))
            .described()?;
            if kept {
                Self::record(
                    &mut tx,
                    self.shard,
                    Arriving::Reserved,
                    schema,
                    &self.from_label,
                )?;
            }
            tx.commit().described()?;
        }
        self.step(&format!(
            "moved shard {} ({})",
            self.shard,
            printable(schema)
        ));
        // The old copy, fenced, its window over: dropped, then the new
        // server's record (release ends with drop_back), so that a run
        // interrupted before the drop finds the move to finish.
        if fenced.is_some() && !kept {
            stop_after("moved");
            return self.release(hold, schema);
        }
        // No copy kept (any more): the slot and publication back, if a
        // window or an interrupted release left them, go with the record.
        if !kept {
            self.drop_back(true)?;
        }
        drop(hold);
        if let Some((_, until, _)) = self.kept()? {
            println!("   the old server keeps its copy, fenced and following this one, for a rollback until {until}");
        }
        Ok(())
    }

    /// Registers the copy on the new server (the fence opens), under the
    /// finishers' lock for this transaction, unless a run beside this one
    /// did. On 15 (no origin filter), the slot back `advance`, if the move
    /// made one, is first moved past everything written here so far (the
    /// forward stream's rows, which the old copy has): only what clients
    /// write from now on goes back. (A logical slot's advance reaches disk
    /// at the next checkpoint: a crash of the new server before it would
    /// send those rows back, and the copy stop following; the rollback is
    /// then refused, nothing lost.)
    pub(super) fn adopt(
        c: &mut Client,
        lock_timeout: &str,
        shard: i32,
        schema: &str,
        from: (&str, &str),
        back: Option<&str>,
    ) -> Result<()> {
        let done = Self::adopt_begin(c, true, shard, schema)
            .and_then(|now| Self::adopt_end(c, lock_timeout, now, shard, schema, from, back));
        if done.is_err() {
            let _ = c.batch_execute("ROLLBACK");
        }
        done
    }

    /// The adoption's first half, in a transaction it opens and leaves
    /// open: the finishers' lock for the transaction (`lock`: the move's
    /// new server), then adopt_shard, unless the shard is registered here
    /// already (a re-run finishing beside this one adopted first: false).
    pub(super) fn adopt_begin(
        c: &mut Client,
        lock: bool,
        shard: i32,
        schema: &str,
    ) -> Result<bool> {
        c.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            .described()?;
        if lock {
            c.execute(
                "SELECT insta_id._lock(insta_id._move_lock_key(), $1::int, false, false, true)",
                &[&shard],
            )
            .described()?;
        }
        let registered: bool = c
            .query_one(
                "SELECT EXISTS (SELECT FROM insta_id_admin.shard_registry WHERE shard_id = $1::int)",
                &[&shard],
            )
            .described()?
            .get(0);
        if !registered {
            c.execute(
                "SELECT insta_id.adopt_shard($1::text::name, $2::int)",
                &[&schema, &shard],
            )
            .described()?;
        }
        Ok(!registered)
    }

    /// Records on `c`'s registry, in the adoption's transaction, where the
    /// move brought the shard from (`from`: its label and identity), so
    /// that a re-run tells a finished move from swapped servers.
    pub(super) fn arrived(
        c: &mut impl crate::pq::GenericClient,
        shard: i32,
        from: (&str, &str),
    ) -> Result<()> {
        c.execute(
            "SELECT insta_id.move_arrived($1::int, $2::text, $3::text)",
            &[&shard, &from.1, &from.0],
        )
        .described()?;
        Ok(())
    }

    /// Its second half, once the old server has let the shard go: the
    /// step recorded (when this run adopted), which opens the fence of the
    /// copy's sequences (only now: the cutover sets them through it from
    /// another session), the slot back advanced, COMMIT.
    pub(super) fn adopt_end(
        c: &mut Client,
        lock_timeout: &str,
        adopted: bool,
        shard: i32,
        schema: &str,
        from: (&str, &str),
        back: Option<&str>,
    ) -> Result<()> {
        if adopted {
            // The step opens the fence of the copy's sequences (0.10.0),
            // which waits for a session using one: no longer than
            // --lock-timeout, as clients are paused.
            c.execute(
                "SELECT pg_catalog.set_config('lock_timeout', $1, true)",
                &[&lock_timeout],
            )
            .described()?;
            Self::record(c, shard, Arriving::Adopted, schema, from.0)?;
            Self::arrived(c, shard, from)?;
            // After the step, which may give up: the advance is not undone
            // by a rollback. (The step's writes are insta_id's own tables
            // and sequences, which the slot's publication does not carry.)
            if let Some(back) = back {
                c.execute(
                    "SELECT pg_catalog.pg_replication_slot_advance(slot_name, pg_catalog.pg_current_wal_flush_lsn())
                     FROM pg_catalog.pg_replication_slots WHERE slot_name = $1::text AND database = pg_catalog.current_database()",
                    &[&back],
                )
                .described()?;
            }
        }
        c.batch_execute("COMMIT").described()?;
        Ok(())
    }

    /// On the old server, once the forward stream is gone: the subscription
    /// that keeps its copy following the new server, from the slot back
    /// (nothing copied: the copy has every row up to the slot's start). It
    /// flushes what it applies at once (synchronous_commit = on), so a
    /// rollback's cutover waits for no WAL writer, and for the old
    /// server's synchronous standbys if it has any (rows returned to it
    /// survive its failover); set now, since changing it at the rollback
    /// would restart its worker while clients wait.
    pub(super) fn subscribe_back(&mut self) -> Result<()> {
        if self.subscribed_back()? {
            return Ok(());
        }
        let conn = self.back_conninfo().to_string();
        self.from
            .batch_execute(&format!(
                "CREATE SUBSCRIPTION {name} CONNECTION {conn} PUBLICATION {name}
                   WITH (create_slot = false, slot_name = {slot}, copy_data = false, synchronous_commit = on{origin})",
                name = ident(&self.back),
                slot = literal(&self.back),
                conn = literal(&conn),
                origin = if self.origin_filter {
                    ", origin = none"
                } else {
                    ""
                },
            ))
            .described()?;
        Ok(())
    }

    /// Whether the old server has the subscription back.
    pub(super) fn subscribed_back(&mut self) -> Result<bool> {
        Ok(self
            .from
            .query_one(&subscribed_sql(), &[&self.back])
            .described()?
            .get(0))
    }

    /// In a transaction on the old server: the subscription back, detached
    /// from its slot (the new server's, dropped there), if it is there.
    pub(super) fn unsubscribe_back(tx: &mut crate::pq::Transaction, back: &str) -> Result<()> {
        let exists: bool = tx
            .query_one(&subscribed_sql(), &[&back])
            .described()?
            .get(0);
        if exists {
            let name = ident(back);
            tx.batch_execute(&format!(
                "SET LOCAL client_min_messages = warning;
                 ALTER SUBSCRIPTION {name} DISABLE;
                 ALTER SUBSCRIPTION {name} SET (slot_name = NONE);
                 DROP SUBSCRIPTION {name}"
            ))
            .described()?;
        }
        Ok(())
    }

    /// On the new server: the slot and the publication back, then (`done`)
    /// its record of the move.
    pub(super) fn drop_back(&mut self, done: bool) -> Result<()> {
        let (to, back) = (&mut self.to, &self.back);
        let free = "SELECT NOT EXISTS (SELECT FROM pg_catalog.pg_replication_slots WHERE slot_name = $1::text AND active)";
        // Its subscriber is gone (dropped on the old server, or the old
        // server itself): a walsender still holding the slot is one whose
        // peer vanished, which wal_sender_timeout would end later.
        if wait_for(10, "the slot back to be released", || {
            Ok(to.query_one(free, &[back]).described()?.get(0))
        })
        .is_err()
        {
            to.execute(
                "SELECT pg_catalog.pg_terminate_backend(active_pid) FROM pg_catalog.pg_replication_slots
                 WHERE slot_name = $1::text AND active",
                &[back],
            )
            .described()?;
            wait_for(20, "the slot back to be released", || {
                Ok(to.query_one(free, &[back]).described()?.get(0))
            })?;
        }
        self.to
            .execute(
                "SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM pg_catalog.pg_replication_slots
                 WHERE slot_name = $1::text AND database = pg_catalog.current_database()",
                &[&self.back],
            )
            .described()?;
        let mut tx = self.to.transaction().described()?;
        tx.batch_execute(&format!(
            "SET LOCAL client_min_messages = warning; DROP PUBLICATION IF EXISTS {}",
            ident(&self.back)
        ))
        .described()?;
        if done {
            Self::done(&mut tx, self.shard, "arriving")?;
        }
        tx.commit().described()?;
        Ok(())
    }

    /// Drops what the move made for replication, each part only if it is
    /// there. On the new server in one transaction: the subscription,
    /// detached from its slot, and when undoing (`undo`: the schema) the
    /// schema and its history with it, so that a schema of ours is there
    /// exactly while the subscription is. Then on the old server the slots
    /// (the subscription's and its table copies') and the publication.
    pub(super) fn drop_replication(&mut self, st: &State, undo: Option<&str>) -> Result<()> {
        let mut copy_slots = String::new();
        if let Some((subid, _)) = &st.sub {
            let mut tx = self.to.transaction().described()?;
            let name = ident(&self.name);
            tx.batch_execute(&format!(
                "SET LOCAL client_min_messages = warning;
                 ALTER SUBSCRIPTION {name} DISABLE;
                 ALTER SUBSCRIPTION {name} SET (slot_name = NONE);
                 DROP SUBSCRIPTION {name}"
            ))
            .described()?;
            if let Some(schema) = undo {
                tx.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", ident(schema)))
                    .described()?;
                tx.execute(
                    "DELETE FROM insta_id_admin.applied_migrations WHERE schema_name = $1::text",
                    &[&schema],
                )
                .described()?;
                // The new server's side ends with its schema; when finishing,
                // with the fence (finish_move).
                Self::done(&mut tx, self.shard, "arriving")?;
            }
            tx.commit().described()?;
            // Table-copy slots are pg_<subscription oid>_sync_<relid>_<system
            // identifier of the new server>: only this move's.
            copy_slots = format!("pg\\_{subid}\\_sync\\_%\\_{}", self.to_sysid);
        }
        let ours = "(slot_name = $1::text OR slot_name LIKE $2::text) AND database = pg_catalog.current_database()";
        let (from, name) = (&mut self.from, &self.name);
        wait_for(30, "the slots of the move to be released", || {
            Ok(from
                .query_one(
                    &format!("SELECT pg_catalog.count(*) = 0 FROM pg_catalog.pg_replication_slots WHERE {ours} AND active"),
                    &[name, &copy_slots],
                )
                .described()?
                .get(0))
        })?;
        self.from
            .execute(
                &format!("SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM pg_catalog.pg_replication_slots WHERE {ours}"),
                &[&self.name, &copy_slots],
            )
            .described()?;
        let mut tx = self.from.transaction().described()?;
        tx.batch_execute(&format!(
            "SET LOCAL client_min_messages = warning; DROP PUBLICATION IF EXISTS {}",
            ident(&self.name)
        ))
        .described()?;
        // (A copy kept for a rollback keeps its record.)
        tx.execute(
            "SELECT insta_id.move_done($1::int, 'leaving') FROM insta_id_admin.moves
             WHERE shard_id = $1::int AND side = 'leaving' AND step NOT IN ('reserved', 'returning')",
            &[&self.shard],
        )
        .described()?;
        tx.commit().described()?;
        if undo.is_some() {
            self.drop_back(true)?;
        }
        Ok(())
    }
}

/// Drops the fence's triggers from a schema's tables. Dropping a trigger
/// locks its table (ACCESS EXCLUSIVE), which now takes writes: one table at
/// a time, each wait short. The fence is open already; a re-run drops what
/// this leaves.
pub(super) fn drop_fence(c: &mut Client, schema: &str) -> Result<()> {
    let fenced = c.query(
            "SELECT n.nspname::text, c.relname::text FROM pg_catalog.pg_trigger t
             JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE t.tgname = 'insta_id_move_fence' AND n.nspname = $1::text",
            &[&schema],
        )
        .described()?;
    c.batch_execute("SET lock_timeout = '500ms'").described()?;
    for r in fenced {
        let (nsp, rel): (String, String) = (r.get(0), r.get(1));
        let drop = format!(
            "DROP TRIGGER IF EXISTS insta_id_move_fence ON {}.{}",
            ident(&nsp),
            ident(&rel)
        );
        let mut attempt = 1;
        while let Err(e) = c.batch_execute(&drop) {
            if attempt == 20 {
                return fail(format!(
                    "the fence's trigger on {}.{} is still there (open; a re-run drops it): {}",
                    printable(&nsp),
                    printable(&rel),
                    crate::db::describe(&e)
                ));
            }
            attempt += 1;
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    c.batch_execute("RESET lock_timeout").described()?;
    Ok(())
}
