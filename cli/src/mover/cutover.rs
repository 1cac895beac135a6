//! The cutover of a move or of its rollback: tries within a budget
//! (crate::pause), each one transaction on the server holding the shard
//! that locks it, waits for the other server to have everything, carries
//! what replication does not, drops (or fences) the shard and COMMITs: the
//! point of no return.

use super::copy::sides;
use super::*;
use crate::bouncer::{Gate, Pauser, Resumer};
use crate::pause::{Deadline, Reserve};

impl Mover<'_> {
    /// In the held session on the old server: the cutover's locks, the new
    /// server caught up, what replication does not carry carried, the drop,
    /// COMMIT (the point of no return).
    /// (The new server's adoption is begun before: run.)
    pub(super) fn cutover(&mut self, hold: &mut Client, schema: &str) -> Result<()> {
        // From here the subscription flushes what it applies at once, and
        // so confirms it at once: its default (off) leaves that to the new
        // server's WAL writer, up to 200 ms more of the cutover, with
        // clients waiting. And it waits for the new server's synchronous
        // standbys, if it has any, before it confirms: the rows the old
        // server committed before the cutover must survive a failover of
        // the new server after it (issue 57). (Not from the start: during
        // the copy and the stream a flush per applied transaction would
        // slow the apply; a failover of the new server before the cutover
        // makes a re-run copy afresh.)
        self.to
            .batch_execute(&format!(
                "ALTER SUBSCRIPTION {} SET (synchronous_commit = on)",
                ident(&self.name)
            ))
            .described()?;
        let done = self.tries(hold, schema, false);
        if done.is_err() {
            // Given up: the stream goes on as before (a synchronous
            // standby of the new server that is down would otherwise hold
            // its apply, and the old server's WAL with it).
            let _ = self.to.batch_execute(&format!(
                "ALTER SUBSCRIPTION {} SET (synchronous_commit = off)",
                ident(&self.name)
            ));
        }
        done
    }

    /// The session on the server that holds the shard now: the old one,
    /// or for a rollback (`back`) the new one.
    pub(super) fn holding(&mut self, back: bool) -> &mut Client {
        if back {
            &mut self.to
        } else {
            &mut self.from
        }
    }

    /// The tries of a cutover (`back`: a rollback's, held on the new
    /// server), in `hold`'s session there, each within its budget, the
    /// clients going on between tries. Before a try, sessions that have
    /// held the shard longer than the budget are waited for, nothing
    /// paused.
    pub(super) fn tries(&mut self, hold: &mut Client, schema: &str, back: bool) -> Result<()> {
        let hold_pid: i32 = hold
            .query_one("SELECT pg_catalog.pg_backend_pid()", &[])
            .described()?
            .get(0);
        let w = &self.a.waits;
        let (attempts, budget, retry) = (
            w.cutover_attempts,
            Duration::from_millis(w.pause_budget),
            Duration::from_secs(w.cutover_retry),
        );
        let mut reserve = Reserve::of(budget);
        let mut why = String::new();
        for attempt in 1..=attempts {
            if attempt > 1 {
                println!(
                    "   cutover try {} of {attempts} given up: {}\n   its clients go on; trying again in {} s",
                    attempt - 1,
                    printable_lines(&why),
                    retry.as_secs()
                );
                std::thread::sleep(retry);
                self.verify_since(schema, back)?;
            }
            // Again at each try, just before its lock: an object made since
            // the last in another schema, depending on the shard's, would
            // make the drop of the copy left behind fail after the point of
            // no return. (Under the try's lock no view, rule or foreign key
            // can be made on the shard's tables.)
            self.no_dependents_outside(
                schema,
                !back,
                if back {
                    "nothing was changed: the shard stays on the new server"
                } else {
                    "nothing was changed: the shard stays on the old server, its copy following it"
                },
            )?;
            let long = self.long_holders(schema, hold_pid, back, budget)?;
            if !long.is_empty() {
                why = format!(
                    "sessions have held the shard longer than the budget ({} ms), so nothing was paused:{}",
                    budget.as_millis(),
                    pause::listed(&long)
                );
                continue;
            }
            // The try's own session (its watchdog ends the try by ending
            // it: `hold` keeps the move's lock meanwhile), and PgBouncer's
            // consoles to resume through, opened before its budget starts.
            let holding_s = if back { &self.to_s } else { &self.from_s };
            let opened = Instant::now();
            let mut t = hold_open(holding_s, &self.a.waits.lock_timeout)?;
            // (What PgBouncer's new server connections take after a
            // RESUME, about: its PAUSE closed the entry's.)
            let login = opened.elapsed();
            if self.verify_to.is_some() {
                verify::warm(&mut t, schema)?;
            }
            let r = t
                .query_one(
                    "SELECT pg_catalog.pg_backend_pid(),
                            (SELECT extract(epoch FROM a.backend_start)::text FROM pg_catalog.pg_stat_activity a
                             WHERE a.pid = pg_catalog.pg_backend_pid())",
                    &[],
                )
                .described()?;
            let (t_pid, t_started): (i32, Option<String>) = (r.get(0), r.get(1));
            let (pausers, mut resumers) = match &self.bouncer {
                Some(bs) => (bs.pausers()?, bs.resumers()?),
                None => (Vec::new(), Vec::new()),
            };
            let gates: Vec<Gate> = pausers.iter().map(Pauser::gate).collect();
            // (The caller's copy: which PgBouncers the try sent a PAUSE to.)
            let sent_to = gates.clone();
            // Every statement of the move's other sessions is cancelled at
            // the deadline, the comparison's own on the new server too
            // (verify.rs).
            let mut cancels = vec![self.from.cancel_token(), self.to.cancel_token()];
            if let Some(c) = &self.verify_to {
                cancels.push(c.cancel_token());
            }
            let trips = Instant::now();
            hold.batch_execute("SELECT 1").described()?;
            let (mut rtt, mut logins) = (trips.elapsed(), 1);
            for r in &mut resumers {
                let (trip, servers) = r.ping()?;
                rtt += trip;
                logins = logins.max(servers);
            }
            let try_cancel = t.cancel_token();
            let b = Budget::keeping(budget, reserve.for_try(rtt, login, logins));
            self.paused_at = None;
            t.batch_execute("BEGIN").described()?;
            let (done, by_dog, dog_steps) = std::thread::scope(|s| {
                let dog = Watchdog::arm(
                    s,
                    &b,
                    Deadline {
                        killer: &mut *hold,
                        try_pid: t_pid,
                        try_started: t_started,
                        try_cancel,
                        resumers: &mut resumers,
                        gates,
                        cancels,
                    },
                );
                let done = self
                    .pause_entry(schema, (&b, &dog), t.cancel_token(), pausers, back)
                    .and_then(|()| {
                        b.lap("pause");
                        if back {
                            self.rollback_locked(&mut t, t_pid, schema, &b, &dog)
                        } else {
                            self.cutover_locked(&mut t, t_pid, schema, &b, &dog)
                        }
                    });
                dog.disarm();
                (done, dog.resumed(), dog.steps())
            });
            if by_dog.is_some() {
                // (A cancel that reached an idle session is dropped; one
                // still on its way would end the next statement.)
                for c in [&mut self.from, &mut self.to] {
                    quiet(c);
                }
                if let Some(c) = self.verify_to.as_mut() {
                    quiet(c);
                }
            }
            let done = match done {
                // A statement the watchdog ended (an error of the try's own,
                // such as copies that differ, stays what it is).
                Err(e) if by_dog.is_some() && ended_by_watchdog(&e) => Err(match e {
                    Failure::GaveUp(w) => Failure::GaveUp(w),
                    e => Failure::GaveUp(format!(
                        "the cutover's steps took the budget ({} ms) up: {}",
                        b.total_ms(),
                        e.message()
                    )),
                }),
                done => done,
            };
            match done {
                Err(Failure::GaveUp(w)) => {
                    // The try's transaction ended (its backend terminated if
                    // the watchdog fired), the entry resumed (by the
                    // watchdog at the deadline, else now).
                    let _ = t.batch_execute("ROLLBACK");
                    drop(t);
                    let resumed = self.resume_entry(schema, &mut resumers, &sent_to, by_dog)?;
                    // (A PAUSE that cut a login short leaves PgBouncer's
                    // retry delay on the entry: lifted.)
                    if let Some(Err(e)) = self.bouncer.as_ref().map(Bouncers::unstick) {
                        println!("   WARNING:  {e}");
                    }
                    why = w;
                    // What the try held its clients for: from its PAUSE to
                    // their server connection again after the RESUME (the
                    // PAUSE closed the entry's).
                    if let (Some(p), Some(r)) = (self.paused_at, resumed) {
                        let held = r.saturating_duration_since(p);
                        why += &format!(
                            "\n   (this try held the shard's clients {} ms of its budget of {} ms, {} ms of it kept back for giving up{})",
                            held.as_millis(),
                            budget.as_millis(),
                            b.reserve_ms(),
                            dog_steps
                                .as_ref()
                                .map(|s| format!(": at its deadline {s} ms"))
                                .unwrap_or_default()
                        );
                        reserve.overran(b.reserve(), held);
                        // (Said where the operator looks: the bound missed,
                        // the machine too loaded for the reserve.)
                        if held > budget {
                            println!(
                                "   WARNING:  a try of the cutover held the shard's clients {} ms, past its budget of {} ms: giving up took longer than the {} ms kept back for it (the machine is loaded); the next tries keep back what it overran",
                                held.as_millis(),
                                budget.as_millis(),
                                b.reserve_ms()
                            );
                        }
                    }
                }
                // Failed before its COMMIT: nothing changed, the clients
                // go on where the shard is.
                Err(e) if !pause::committing_now() => {
                    let _ = t.batch_execute("ROLLBACK");
                    return match self.resume_entry(schema, &mut resumers, &sent_to, by_dog) {
                        Ok(resumed) => {
                            // (As a try given up says it; here too when the
                            // PAUSE failed on one PgBouncer, sent to others.)
                            if let (Some(p), Some(r)) = (self.paused_at, resumed) {
                                println!(
                                    "   (this try held the shard's clients {} ms of its budget of {} ms before it failed)",
                                    r.saturating_duration_since(p).as_millis(),
                                    budget.as_millis()
                                );
                            }
                            Err(e)
                        }
                        Err(r) => fail(format!("{}\n{}", e.message(), r.message())),
                    };
                }
                done => return self.settle(done, &mut t, t_pid, back),
            }
        }
        Err(Failure::GaveUp(format!(
            "the cutover of shard {} was given up at each of its {attempts} tries, each within its budget of {} ms (--pause-budget, --cutover-attempts); the last: {}\nNothing changed: the shard is still on the {} server, its clients go on there, and the copy follows it; run the {} again to try the cutover again",
            self.shard,
            budget.as_millis(),
            printable_lines(&why),
            if back { "new" } else { "old" },
            if back { "rollback (--rollback)" } else { "move" }
        )))
    }

    /// Sessions that have held the shard (or a transaction open through its
    /// PgBouncer entry) longer than `budget`: a try now would only stall
    /// the clients behind them.
    pub(super) fn long_holders(
        &mut self,
        schema: &str,
        hold_pid: i32,
        back: bool,
        budget: Duration,
    ) -> Result<Vec<String>> {
        let servers = match &self.bouncer {
            Some(b) => b.busy_servers()?,
            None => Vec::new(),
        };
        let c = self.holding(back);
        // (Not permitted: left to the try, which names it.)
        for said in pause::cancel_autovacuum(c, schema).unwrap_or_default() {
            println!("   {said}: it holds the shard's table, and runs again later");
        }
        let mut who = pause::holders(c, schema, &[hold_pid], Some(budget))?;
        // A session both holding the shard and open through the entry is
        // listed once, with its locks.
        let listed: Vec<i32> = who
            .iter()
            .filter_map(|w| w.strip_prefix("process ")?.split(' ').next()?.parse().ok())
            .collect();
        let servers: Vec<i32> = servers
            .into_iter()
            .filter(|p| !listed.contains(p))
            .collect();
        if !servers.is_empty() {
            who.extend(pause::sessions(c, &servers, Some(budget))?);
        }
        Ok(who)
    }

    /// The shard's PgBouncer entry first: once no transaction runs through
    /// it, its clients queue there, and none waits on the cutover's locks
    /// (where the drop would fail it). Within what is left of `budget`.
    pub(super) fn pause_entry(
        &mut self,
        schema: &str,
        (budget, dog): (&Budget, &Watchdog),
        cancel: crate::pq::CancelToken,
        pausers: Vec<Pauser>,
        back: bool,
    ) -> Result<()> {
        let Some(b) = self.bouncer.clone() else {
            return Ok(());
        };
        // Recorded first: a run that finishes or undoes this move must be
        // able to resume the entry.
        self.record_to(Arriving::Paused, schema)?;
        pause::pausing(&b, cancel);
        // Sent before the try's deadline only, and waited for up to the
        // whole budget: when the entry does not drain, the try's watchdog
        // resumes it first, at its deadline (the caller resumes it after
        // any other failure).
        let now = Instant::now();
        match Bouncers::pause(pausers, now + budget.left(), now + budget.left_of_total()) {
            Ok(at) => {
                self.paused_at = Some(at);
                println!("   PgBouncer's entry {} paused", b.entry);
                Ok(())
            }
            Err(Drain::Failed(e, sent)) => {
                // Paused on the other PgBouncers from there, if sent to
                // any: resumed by the caller, which says for how long.
                self.paused_at = sent;
                fail(e)
            }
            Err(Drain::Late) => Err(Failure::GaveUp(format!(
                "the try's deadline passed before PgBouncer's entry {} was paused (the machine is slow; nothing was paused)",
                b.entry
            ))),
            Err(Drain::Partly(sent)) => {
                // Paused on some PgBouncers from there, until resumed.
                self.paused_at = Some(sent);
                Err(Failure::GaveUp(format!(
                    "the try's deadline passed before PgBouncer's entry {} was paused on every PgBouncer (the machine is slow; it was paused on some)",
                    b.entry
                )))
            }
            Err(Drain::Busy(sent)) => {
                // Paused from there, until resumed.
                self.paused_at = Some(sent);
                // Named once the watchdog is done, the clients resumed
                // (ended now if its thread was starved past the deadline;
                // its cancel may still be on its way).
                if dog.fire_now() {
                    quiet(self.holding(back));
                }
                let servers = b.busy_servers().unwrap_or_default();
                let who = pause::sessions(self.holding(back), &servers, None)?;
                Err(Failure::GaveUp(format!(
                    "PgBouncer's entry {} was not drained within the budget ({} ms), transactions open through it:{}",
                    b.entry,
                    budget.total_ms(),
                    if who.is_empty() { "\n  (ended since)".to_string() } else { pause::listed(&who) }
                )))
            }
        }
    }

    /// Resumes the entry after a try that ended before its COMMIT (its
    /// transaction ended): its clients go on where the shard still is.
    /// `by_dog`: what the try's watchdog did, if it fired; else (or if it
    /// could not) through the try's `resumers`, opened before it; failing
    /// that, through new console sessions for a few seconds. An entry that
    /// stays paused ends the move, saying so (the next try would only
    /// stall its clients longer).
    /// Returns when the clients had a server connection again after the
    /// RESUME (None without one).
    pub(super) fn resume_entry(
        &mut self,
        schema: &str,
        resumers: &mut [Resumer],
        gates: &[Gate],
        by_dog: Option<std::result::Result<Option<Instant>, String>>,
    ) -> Result<Option<Instant>> {
        let Some(b) = self.bouncer.clone() else {
            return Ok(None);
        };
        // The PgBouncers whose PAUSE was sent are resumed at once, the
        // others left alone (several PgBouncers, a PAUSE too late for some);
        // a try that sent none reads each entry first, so that PgBouncer
        // logs no RESUME of an entry not paused.
        let sent: Vec<bool> = gates.iter().map(Gate::shut).collect();
        let mut resumed = match by_dog {
            Some(Ok(Some(at))) => Ok(Some(at)),
            _ => crate::bouncer::resume_each(resumers, self.paused_at.map(|_| sent.as_slice()))
                .and_then(|at| crate::bouncer::served_after(resumers, at)),
        }
        // Then each PgBouncer read again: one whose PAUSE reached it after
        // the RESUME (several PgBouncers, or a PAUSE on its way) is resumed
        // too, and the clients' wait ends with the last.
        .and_then(|at| Ok(at.max(crate::bouncer::resume_each(resumers, None)?)));
        for _ in 0..5 {
            match resumed {
                Ok(at) => {
                    // (Again once: a cancel of the watchdog's arriving late
                    // ends the first.)
                    if self.record_to(Arriving::Resumed, schema).is_err() {
                        self.record_to(Arriving::Resumed, schema)?;
                    }
                    pause::released();
                    return Ok(at);
                }
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(500));
                    resumed = b.resume_acked();
                }
            }
        }
        let last = resumed.err().unwrap_or_default();
        fail(format!("PgBouncer's entry {} may still be paused after a try of the cutover was given up (the shard is still on the server it was on): {last}; resume it (RESUME {}) or run the move again, which resumes it", b.entry, b.entry))
    }

    /// After a cutover (`back`: a rollback's, held on the new server) that
    /// failed: its transaction ended, and the entry's clients go on where
    /// the shard still is. Unless the COMMIT did happen (its reply lost):
    /// then they wait for the run that finishes. Read once the held session
    /// has ended its transaction, one way or the other.
    pub(super) fn settle(
        &mut self,
        done: Result<()>,
        hold: &mut Client,
        hold_pid: i32,
        back: bool,
    ) -> Result<()> {
        let (Err(e), true) = (&done, self.bouncer.is_some()) else {
            return done;
        };
        let _ = hold.batch_execute("ROLLBACK");
        let c = self.holding(back);
        let settled = poll(
            30,
            Duration::from_millis(10),
            "the cutover's session to end",
            || {
                Ok(c
                    .query_one(
                        "SELECT NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity WHERE pid = $1::int AND state <> 'idle')",
                        &[&hold_pid],
                    )
                    .described()?
                    .get(0))
            },
        );
        let committed = settled.and_then(|()| {
            if back {
                Ok(self
                    .arriving_step()?
                    .is_some_and(|(s, _)| s == Arriving::Returned))
            } else {
                Ok(self.leaving_step()?.is_some_and(Leaving::cut_over))
            }
        });
        let b = self.bouncer.as_ref().expect("a bouncer");
        if let Ok(false) = committed {
            if let Err(r) = b.resume_if_paused() {
                eprintln!("insta-id: {r}");
            } else {
                pause::released();
                if let Some((_, schema)) = self.arriving_step()? {
                    let _ = self.record_to(Arriving::Resumed, &schema);
                }
            }
            return done;
        }
        fail(format!(
            "{}\nThe cutover may have committed: PgBouncer's entry {} stays paused until the {} is run again, which finishes it",
            e.message(),
            b.entry,
            if back { "rollback (--rollback)" } else { "move" }
        ))
    }

    /// Under the cutover's lock (`hold`'s transaction, a move's or for a
    /// rollback, `back`, its way back), the rows made since the last
    /// comparison and the buckets that differed then, compared with the
    /// copy, which has applied everything committed before the lock. A
    /// copy that differs stops the cutover, nothing changed.
    pub(super) fn compare_locked(
        &mut self,
        hold: &mut Client,
        schema: &str,
        budget: &Budget,
        back: bool,
    ) -> Result<()> {
        let (Some(lo), Some(copy)) = (self.verified_until, self.verify_to.as_mut()) else {
            return Ok(());
        };
        let compared = Instant::now();
        let differ = verify::at_cutover(hold, copy, schema, lo, &self.verify_again, sides(back))?;
        println!(
            "   the rows made since the last comparison compared with the tables locked: {} ms",
            compared.elapsed().as_millis()
        );
        budget.lap("compare");
        if differ.is_empty() {
            return Ok(());
        }
        let (copy, holder, then) = if back {
            (
                "the old server's copy",
                "the new server's",
                "the shard stays on the new server",
            )
        } else {
            (
                "the copy",
                "the old server's",
                "then --undo drops the copy, and a move copies afresh",
            )
        };
        fail(format!(
            "{copy} of shard {} differs from {holder} at the cutover (rolled back, nothing changed; the {} server holds the shard):\n  {}\nFind why with insta-id verify; {then}",
            self.shard,
            if back { "new" } else { "old" },
            differ.join("\n  ")
        ))
    }

    pub(super) fn cutover_locked(
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
            &mut self.from,
            &self.name,
            (self.shard, schema),
            budget,
            dog,
        )?;
        budget.lap("lock and catch-up");
        stop_after("blocked");
        self.compare_locked(hold, schema, budget, false)?;
        // Logical replication carries neither sequences nor the time of the
        // last ID (nor insta_id's history of the shard): move_state reads
        // them under the lock, move_carry sets them on the new server in
        // one transaction, the mark raised so that IDs stay unique when the
        // new server's clock is behind.
        let state: String = hold
            .query_one("SELECT insta_id.move_state($1::int)::text", &[&self.shard])
            .described()?
            .get(0);
        budget.lap("move_state");
        // The new server's part (move_carry, the mark) and the old one's
        // (the fence) at once, on their two sessions: neither reads what
        // the other writes, and neither is visible before the COMMIT below
        // (a try given up rolls the fence back; move_carry takes a re-run).
        let (shard, keep) = (self.shard, self.keep.as_deref());
        let (to, name) = (&mut self.to, self.name.as_str());
        let (carried, fenced) = std::thread::scope(|s| {
            let carried = s.spawn(|| carry(to, name, (shard, schema), &state, budget));
            let fenced = fence(hold, (shard, schema), keep, budget);
            let carried = carried
                .join()
                .unwrap_or_else(|_| fail("carrying the sequences panicked"));
            (carried, fenced)
        });
        let ((carry_said, carry_ms, mark_ms), (fence_said, fence_ms, until)) = (carried?, fenced?);
        budget.lap("carry beside fence");
        // (said in one order, whichever finished first)
        for line in carry_said.iter().chain(&fence_said) {
            println!("{line}");
        }
        println!(
            "   at once: move_carry {carry_ms} ms and the mark {mark_ms} ms on the new server, the fence {fence_ms} ms on the old"
        );
        stop_after("sequences");
        within(budget)?;
        commit_within(hold, budget, dog)?;
        committed(budget);
        if self.keep.is_some() {
            println!(
                "   schema {} stays on the old server, fenced, for a rollback until {until}",
                printable(schema)
            );
        } else {
            println!(
                "   schema {} fenced on the old server, to be dropped once its clients are on the new one",
                printable(schema)
            );
        }
        Ok(())
    }
}

/// The new server's part of a cutover (`to`, the move's session there,
/// subscription `name`): the tables the old server has checked against
/// what the subscription carries, move_carry of its move_state `state`,
/// then until the new server's clock has passed the carried mark. Returns
/// what it has to say, and how long the carry and the mark took (ms).
fn carry(
    to: &mut Client,
    name: &str,
    (shard, schema): (i32, &str),
    state: &str,
    budget: &Budget,
) -> Result<(Vec<String>, u128, u128)> {
    let started = Instant::now();
    if let Some(t) = unsubscribed(to, state, name, schema, "r")? {
        return fail(format!("tables of shard {shard} that the move's subscription does not carry (made after it began): {}; run the move again, which undoes it and moves the shard afresh", printable(&t)));
    }
    let raised: Option<String> = to
        .query_one(
            "SELECT insta_id.move_carry($1::int, $2::text::jsonb)::text",
            &[&shard, &state],
        )
        .described()?
        .get(0);
    let r = to
        .query_one(
            "SELECT coalesce(pg_catalog.string_agg(pg_catalog.format('%s %s', pg_catalog.quote_ident(key),
                               CASE WHEN (value ->> 1)::boolean THEN value ->> 0 ELSE '(next ' || (value ->> 0) || ')' END),
                             ', ' ORDER BY key), 'none'),
                    ($1::text::jsonb ->> 'mark')::timestamptz::text
             FROM pg_catalog.jsonb_each($1::text::jsonb -> 'sequences')",
            &[&state],
        )
        .described()?;
    let (sequences, mark): (String, Option<String>) = (r.get(0), r.get(1));
    let carried = started.elapsed().as_millis();
    let mut said = vec![format!(
        "   sequences continue after the old server's: {}",
        printable(&sequences)
    )];
    let waited = Instant::now();
    if let Some(mark) = mark {
        said.push(format!(
            "   high-water mark carried over: {mark} (new server's: {})",
            raised.as_deref().unwrap_or("none")
        ));
        wait_past_mark(to, &mark, budget)?;
    }
    Ok((said, carried, waited.elapsed().as_millis()))
}

/// The old server's part of a cutover, in `hold`'s transaction: the old
/// copy fenced and kept, not dropped (a drop's time grows with what the
/// schema holds: 0.4 s for 3,500 functions on 2 cores, all of it spent
/// with clients paused). Without a rollback window (`keep`) its window
/// ends now, and the move drops it (release) once its clients are on the
/// new server; a run killed before that drops it on its re-run, as any
/// copy whose window has passed. Returns what it has to say, how long it
/// took (ms) and the end of the window.
fn fence(
    hold: &mut Client,
    (shard, schema): (i32, &str),
    keep: Option<&str>,
    budget: &Budget,
) -> Result<(Vec<String>, u128, String)> {
    let started = Instant::now();
    within(budget)?;
    let mut said = Vec::new();
    if keep.is_none() {
        // First, so that move_reserve's fence (0.10.0) narrows only the
        // sequences kept: one rewrite less each, with clients paused.
        said = drop_sequences(hold, schema)?;
    }
    let until: String = hold
        .query_one(
            "SELECT pg_catalog.to_char(insta_id.move_reserve($1::int, $2::text::interval) AT TIME ZONE 'UTC',
                                       'YYYY-MM-DD HH24:MI:SS') || ' UTC'",
            &[&shard, &keep.unwrap_or("1 second")],
        )
        .described()?
        .get(0);
    if keep.is_none() {
        // (move_reserve's shortest window is a second: this ends it.)
        hold.execute(
            "UPDATE insta_id_admin.moves SET reserve_until = pg_catalog.clock_timestamp()
             WHERE shard_id = $1::int AND side = 'leaving'",
            &[&shard],
        )
        .described()?;
    }
    Ok((said, started.elapsed().as_millis(), until))
}

/// The first half of a cutover, in `hold`'s transaction on the server
/// holding the shard (`publisher`, another session there): move_lock (the
/// tables in ACCESS EXCLUSIVE mode, the mode the drop needs; then the
/// sequences), then until the subscriber has confirmed, on `slot`,
/// everything committed before the lock; both within what is left of
/// `budget`, else given up, naming the sessions the lock waited for.
/// Returns the lock's WAL position.
pub(super) fn lock_caught_up(
    hold: &mut Client,
    hold_pid: i32,
    publisher: &mut Client,
    slot: &str,
    (shard, schema): (i32, &str),
    budget: &Budget,
    dog: &Watchdog,
) -> Result<String> {
    // A statement timeout: the tables are locked one by one, and each
    // lock_timeout would start anew (the session's, --lock-timeout, set as
    // long, so that it does not end the wait first). Both stay to the end
    // of the try: nothing after the lock waits longer either. To the end of
    // the whole budget: at the deadline before it, the watchdog ends the
    // wait (and the try), and resumes the entry first.
    hold.execute(
        "SELECT pg_catalog.set_config('statement_timeout', $1, true),
                pg_catalog.set_config('lock_timeout', $1, true),
                pg_catalog.set_config('idle_in_transaction_session_timeout', $1, true)",
        &[&budget.left_setting()],
    )
    .described()?;
    let started = Instant::now();
    let lsn: String = match hold.query_one("SELECT insta_id.move_lock($1::int, 1)::text", &[&shard])
    {
        Ok(r) => r.get(0),
        Err(e)
            if dog.resumed().is_some()
                || matches!(
                    e.code(),
                    Some(sqlstate::QUERY_CANCELED | sqlstate::LOCK_NOT_AVAILABLE)
                ) =>
        {
            // The clients resumed first (the try's own timeout may come
            // before a starved watchdog), then named: what still holds the
            // shard is what held it up. (Once the watchdog is done: its
            // cancel may be on its way.)
            dog.fire_now();
            quiet(publisher);
            let who = pause::holders(publisher, schema, &[hold_pid], None)?;
            return Err(Failure::GaveUp(format!(
                "the shard's tables were not locked within the budget ({} ms), held by:{}",
                budget.total_ms(),
                if who.is_empty() {
                    "\n  (no one any more)".to_string()
                } else {
                    pause::listed(&who)
                }
            )));
        }
        Err(e) => return fail(crate::db::describe(&e)),
    };
    let locked = started.elapsed();
    // Everything committed before the lock is before it; polled every 5 ms:
    // clients wait meanwhile.
    match crate::db::slot_reached(publisher, slot, &lsn, Duration::from_millis(5), false, || {
        budget.spent()
    })? {
        crate::db::Reached::Yes => {
            println!(
                "   the shard's tables locked in {} ms; the new server caught up in {} ms",
                locked.as_millis(),
                (started.elapsed() - locked).as_millis()
            );
            Ok(lsn)
        }
        _ => Err(Failure::GaveUp(format!(
            "the subscription of {slot} had not applied what was committed before the lock ({lsn}) within the budget ({} ms): it is behind (pg_stat_subscription on the subscriber)",
            budget.total_ms()
        ))),
    }
}

/// The try's COMMIT (the point of no return), unless its budget is spent:
/// the watchdog disarmed first and the timeouts lifted, so that nothing
/// cancels the COMMIT's wait for a synchronous standby (cancelled, it
/// would leave the transaction committed here only).
pub(super) fn commit_within(hold: &mut Client, budget: &Budget, dog: &Watchdog) -> Result<()> {
    if dog.disarm() {
        return Err(Failure::GaveUp(format!(
            "the cutover's steps took the budget ({} ms) up",
            budget.total_ms()
        )));
    }
    within(budget)?;
    pause::committing();
    // (One round trip: nothing between the check and the COMMIT.)
    hold.batch_execute(
        "SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0;
         SET LOCAL idle_in_transaction_session_timeout = 0; COMMIT",
    )
    .described()?;
    Ok(())
}

/// Whether a try's failure is what its watchdog does to it: a try given up,
/// or a statement cancelled (57014) or a session terminated (57P01; 25P03,
/// the server's own deadline for an idle try; or its connection closed).
/// Any other error is the try's own.
fn ended_by_watchdog(e: &Failure) -> bool {
    match e {
        Failure::GaveUp(_) => true,
        e => ["(57014)", "(57P01)", "(25P03)", "connection closed"]
            .iter()
            .any(|said| e.message().contains(said)),
    }
}

/// Says the try committed, and where its time went (make bench-moves reads
/// the line).
pub(super) fn committed(budget: &Budget) {
    budget.lap("commit");
    println!(
        "   committed: the try took {} ms of its budget ({} ms): {}",
        budget.used_ms(),
        budget.total_ms(),
        budget.laps()
    );
}

/// After the watchdog cancelled a session's statement: a cancel that
/// reached it once it was idle is dropped by the server; one still on its
/// way ends this statement instead of the next one that matters.
fn quiet(c: &mut Client) {
    for _ in 0..3 {
        if c.batch_execute("SELECT 1").is_ok() {
            return;
        }
    }
}

/// Gives a try of the cutover up once its budget is spent.
pub(super) fn within(budget: &Budget) -> Result<()> {
    if budget.spent() {
        return Err(Failure::GaveUp(format!(
            "the cutover's steps under its lock took the budget ({} ms) up",
            budget.total_ms()
        )));
    }
    Ok(())
}

/// A message of several lines, each indented as a try's lines are.
pub(super) fn printable_lines(text: &str) -> String {
    crate::db::terminal(text).replace('\n', "\n   ")
}

/// Where the guard is per session (a library of 0.9.0 or earlier on 15 or
/// 16 not preloaded; 0.10.0 shares it everywhere), open sessions do not see
/// a raised high-water mark: waits until the server's clock is past it,
/// within what is left of the cutover's budget.
pub(super) fn wait_past_mark(c: &mut Client, mark: &str, budget: &Budget) -> Result<()> {
    let mode: String = c
        .query_one("SELECT insta_id.guard_mode()", &[])
        .described()?
        .get(0);
    if mode != "session" {
        return Ok(());
    }
    while !c
        .query_one(
            "SELECT pg_catalog.clock_timestamp() > $1::text::timestamptz",
            &[&mark],
        )
        .described()?
        .get::<_, bool>(0)
    {
        if budget.spent() {
            return Err(Failure::GaveUp(format!(
                "the clock of the server taking the shard did not pass the carried high-water mark ({mark}) within the budget ({} ms): it is behind the other server's (NTP)",
                budget.total_ms()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// In the cutover of a move without a window (`c`'s transaction, the
/// shard's tables locked): the old copy's sequences dropped, so that a
/// client connected to the old server itself mints no ID for the shard
/// until the copy is dropped (0.9.0's fence refuses writes, not nextval;
/// 0.10.0's narrows the sequences kept here). Only
/// those whose dependents are all column defaults of the schema's tables,
/// the defaults dropped first, then each sequence RESTRICT: never another
/// object. Any other is kept (an identity column's, one a view or function
/// uses), and said.
fn drop_sequences(c: &mut Client, schema: &str) -> Result<Vec<String>> {
    let r = c
        .query_one(
            "WITH seq AS (
               SELECT s.oid, s.relname,
                      NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
                                  WHERE d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.refobjid = s.oid
                                    AND NOT (d.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass AND d.deptype = 'n'
                                             AND EXISTS (SELECT FROM pg_catalog.pg_attrdef a JOIN pg_catalog.pg_class t ON t.oid = a.adrelid
                                                         WHERE a.oid = d.objid AND t.relnamespace = s.relnamespace)))
                      AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
                                      WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid = s.oid AND d.deptype = 'i') AS alone
               FROM pg_catalog.pg_class s JOIN pg_catalog.pg_namespace n ON n.oid = s.relnamespace
               WHERE n.nspname = $1::text AND s.relkind = 'S')
             SELECT coalesce((SELECT pg_catalog.string_agg(pg_catalog.format('ALTER TABLE ONLY %I.%I ALTER COLUMN %I DROP DEFAULT;',
                                                                              $1::text, t.relname, att.attname), ' ' ORDER BY t.relname, att.attnum)
                              FROM pg_catalog.pg_depend d
                              JOIN pg_catalog.pg_attrdef a ON d.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass AND a.oid = d.objid
                              JOIN pg_catalog.pg_class t ON t.oid = a.adrelid
                              JOIN pg_catalog.pg_attribute att ON att.attrelid = a.adrelid AND att.attnum = a.adnum
                              WHERE d.refobjid IN (SELECT oid FROM seq WHERE alone)
                                AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass), ''),
                    coalesce((SELECT 'DROP SEQUENCE ' || pg_catalog.string_agg(pg_catalog.format('%I.%I', $1::text, relname), ', ' ORDER BY relname) || ' RESTRICT'
                              FROM seq WHERE alone), ''),
                    coalesce((SELECT pg_catalog.string_agg(pg_catalog.quote_ident(relname), ', ' ORDER BY relname) FROM seq WHERE alone), ''),
                    coalesce((SELECT pg_catalog.string_agg(pg_catalog.quote_ident(relname), ', ' ORDER BY relname) FROM seq WHERE NOT alone), '')",
            &[&schema],
        )
        .described()?;
    let (defaults, drop, dropped, kept): (String, String, String, String) =
        (r.get(0), r.get(1), r.get(2), r.get(3));
    let mut said = Vec::new();
    if !drop.is_empty() {
        c.batch_execute(&format!("{defaults} {drop}")).described()?;
        said.push(format!(
            "   sequences dropped on the old server: {}",
            printable(&dropped)
        ));
    }
    if !kept.is_empty() {
        said.push(format!(
            "   sequences kept on the old server until its copy is dropped (an identity column's, or used by another object): {}",
            printable(&kept)
        ));
    }
    Ok(said)
}
