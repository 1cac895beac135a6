//! What a run of `insta-id move` does, decided in one place: from what both
//! servers record of the shard (Seen, read under the move's lock) and what
//! the operator asked (Want). A first run and a re-run after any
//! interruption go through the same function; mover.rs reads the servers,
//! takes the lock and carries the decision out.

use super::steps::{Arriving, Leaving};

/// What the operator asked for.
#[derive(Clone, Copy, Debug, Default)]
pub struct Want {
    pub rollback: bool,
    pub release: bool,
    pub undo: bool,
    pub check: bool,
    /// --pgbouncer given: a paused entry can be resumed.
    pub bouncer: bool,
}

/// What both servers record of the shard's move.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub shard: i32,
    /// Registered on the old server, on the new one.
    pub on_from: bool,
    pub on_to: bool,
    /// The move's subscription on the new server, and whether it names the
    /// schema of its tables (none once it has no table).
    pub sub: bool,
    pub sub_schema: bool,
    pub leaving: Option<Leaving>,
    pub arriving: Option<Arriving>,
    /// The new server's record names another old server: that one's label,
    /// and this run's --from's.
    pub arriving_from_elsewhere: Option<(String, String)>,
    /// The new server's record: the move paused PgBouncer's entry and has
    /// not pointed or resumed it since.
    pub entry_paused: bool,
    /// It ever paused the entry; it re-pointed the PL/Proxy router.
    pub bounced: bool,
    pub mapped: bool,
    /// The old server keeps a copy for a rollback: until when, and whether
    /// that has passed.
    pub kept: Option<(String, bool)>,
    /// The old server's copy follows the new server (its subscription back).
    pub subscribed_back: bool,
    /// Anything of an earlier run on either server (publication, slot,
    /// subscription, the old server's record, the replication back).
    pub leftovers: bool,
    /// 0.8.0's scripts/move_shard.sh recorded its cutover.
    pub legacy_cutover: bool,
    /// What the new server's registry records of where a move brought the
    /// shard from: whether that is this run's --from, and the server's
    /// name and when, as it recorded them (None: made there, or moved
    /// before 0.11.0).
    pub moved_from: Option<(bool, String)>,
}

/// The move's lock a run takes before it decides: the old server's while
/// it holds the shard (the mover's, until the cutover), else the new one's
/// (the finishers').
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Locus {
    Old,
    New,
}

impl Locus {
    /// The old server's while it registers the shard, unless a rollback's
    /// cutover committed (the new server's row 'returned'): that one is
    /// finished under the new server's lock, as its finisher holds it,
    /// even once the old server registers the shard again.
    pub fn of(on_from: bool, arriving: Option<Arriving>) -> Locus {
        if on_from && arriving != Some(Arriving::Returned) {
            Locus::Old
        } else {
            Locus::New
        }
    }
}

/// What the run does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing changes: exit 1 with this.
    Refuse(String),
    /// Nothing to do: said, exit 0.
    Nothing(String),
    /// --check: the checks, nothing made.
    Check,
    /// The old server holds the shard. Resume an entry an interrupted run
    /// left paused; take a complete, streaming copy up (if `leftovers` and
    /// it is one) or undo what is left; then, unless --undo, copy, compare
    /// and cut over.
    Move { leftovers: bool },
    /// A rollback whose cutover committed: adopt the kept copy on the old
    /// server and point the entry back.
    FinishRollback,
    /// The old copy kept for a rollback: return the shard to it.
    Rollback,
    /// Drop the old copy (its window passed, or --release).
    Release,
    /// The cutover committed: adopt on the new server, point, clean up.
    Finish,
}

/// The decision. `locus` is the lock the run holds: a shard that came or
/// went meanwhile is said so.
pub fn decide(s: &Seen, w: Want, locus: Locus) -> Next {
    let n = s.shard;
    let refuse = |m: String| Next::Refuse(m);
    // A rollback whose cutover committed (the shard dropped on the new
    // server) is only finished, by a run that knows it is a rollback: its
    // PgBouncer target is the old server's, not the move's.
    if s.arriving == Some(Arriving::Returned) {
        if !w.rollback {
            return refuse(format!("a rollback of shard {n} committed (the shard left the new server): finish it with --rollback, and with --pgbouncer-target naming the old server"));
        }
        if let Some(m) = paused_without_bouncer(s, w) {
            return refuse(m);
        }
        if locus != Locus::New {
            return refuse(format!(
                "a rollback of shard {n} committed while this waited: run again"
            ));
        }
        return Next::FinishRollback;
    }
    if s.on_from && s.on_to {
        return refuse(format!("shard {n} is registered on both servers: not a state a move leaves; compare them and drop one by hand"));
    }
    if locus != Locus::of(s.on_from, s.arriving) {
        return refuse(if s.on_from {
            format!("shard {n} came back to the old server while this waited: run again")
        } else {
            format!("shard {n} left the old server while this waited: run again")
        });
    }
    if s.on_from {
        on_from(s, w)
    } else {
        not_on_from(s, w)
    }
}

fn paused_without_bouncer(s: &Seen, w: Want) -> Option<String> {
    (!w.bouncer && s.entry_paused).then(|| {
        format!(
            "this move of shard {n} paused its PgBouncer entry (shard{n}) at the cutover and did not resume it: run it again with --pgbouncer, --pgbouncer-map and --pgbouncer-target, which resume it",
            n = s.shard
        )
    })
}

/// The old server holds the shard.
fn on_from(s: &Seen, w: Want) -> Next {
    let n = s.shard;
    if w.rollback || w.release {
        return Next::Refuse(format!(
            "shard {n} is on the old server: no move of it to roll back or release"
        ));
    }
    // A move whose cutover committed is never undone, even with the shard
    // registered on the old server again: the new server's copy is the
    // shard.
    if s.leaving.is_some_and(Leaving::cut_over) || s.arriving.is_some_and(Arriving::adopted) {
        return Next::Refuse(format!("shard {n} is registered on the old server, but its move to the new one committed its cutover there: the new server's copy is the shard; compare them by hand"));
    }
    if let Some(m) = paused_without_bouncer(s, w) {
        return Next::Refuse(m);
    }
    if w.check {
        if s.leftovers {
            return Next::Refuse(format!("an interrupted move of shard {n} is recorded: run the move (it takes a complete copy up, or undoes a partial one) or --undo; insta-id status says where it stands"));
        }
        return Next::Check;
    }
    Next::Move {
        leftovers: s.leftovers,
    }
}

/// The shard is not registered on the old server: a move past its cutover
/// to finish, a kept copy to roll back or release, or nothing to do.
fn not_on_from(s: &Seen, w: Want) -> Next {
    let n = s.shard;
    let refuse = |m: String| Next::Refuse(m);
    if w.check {
        return refuse(format!(
            "shard {n} is not registered on the old server: nothing to check"
        ));
    }
    if w.undo {
        return refuse(format!("shard {n} is not on the old server: nothing to undo (a move past its cutover is only finished)"));
    }
    if !s.on_to && !s.sub {
        return refuse(format!("shard {n} is not registered on the old server"));
    }
    // A label names a route (a socket, an address), which a re-run may
    // take otherwise: the old server's own record decides.
    if let Some((peer, ours)) = &s.arriving_from_elsewhere {
        if !s.leaving.is_some_and(Leaving::cut_over) {
            return refuse(format!("shard {n} is being moved to the new server from {peer}, not from {ours}: give that server as --from"));
        }
    }
    if let Some(m) = paused_without_bouncer(s, w) {
        return refuse(m);
    }
    // A finished move whose old copy is kept: the forward subscription
    // gone, the one back made (a rollback given up since may have left the
    // new server's row at 'paused' or 'resumed'). Or fenced at the cutover
    // of a move without a window, to be dropped: its window is over.
    if let (true, false, Some((until, expired))) = (s.on_to, s.sub, &s.kept) {
        if s.subscribed_back {
            return kept_copy(s, w, until, *expired);
        }
        // Its subscription back gone (a run killed before making it, or
        // dropped by hand): never a rollback; a release needs none; a
        // plain run within the window makes it again (Finish).
        if w.rollback {
            if *expired {
                return refuse(format!("the rollback window of shard {n}'s move closed at {until}: the shard stays on the new server (--release drops the old copy)"));
            }
            return refuse(format!("the old server's copy of shard {n} does not follow the new server (no subscription insta_back_{n} there): run the move once without --rollback, which subscribes it again, then roll back"));
        }
        if w.release || *expired {
            return Next::Release;
        }
    }
    if s.on_to && s.arriving.is_none() && !s.sub {
        // (A second run finishing the same move finds it finished.) The
        // registry tells it from a move given its servers the wrong way
        // round, which a script must not read as success.
        return match &s.moved_from {
            Some((true, when)) => Next::Nothing(format!("shard {n} is on the new server, where a move from the old one brought it ({when}): nothing to do")),
            Some((false, whence)) => refuse(format!("shard {n} is on the new server, where a move from another server brought it ({whence}), not from the old one: if it is to leave the new server, --from and --to are swapped")),
            None => refuse(format!("shard {n} is on the new server, and no move from the old one brought it there (made there, or moved before 0.11.0): if it is to leave the new server, --from and --to are swapped")),
        };
    }
    // (--release goes on: a release interrupted after the old server's
    // part is finished by Finish's cleanup.)
    if w.rollback {
        return refuse(format!("no finished move of shard {n} keeps a copy on the old server: nothing to roll back (a move is rolled back once it has finished, within its window)"));
    }
    // Adopted on the new server (only ever after the cutover), or the old
    // server's record of the cutover, committed with it: anything else is
    // not a move this can finish.
    if !s.on_to && !s.leaving.is_some_and(Leaving::cut_over) && !s.legacy_cutover {
        return refuse(format!("shard {n} is on neither server's registry and its cutover did not commit: compare the servers by hand"));
    }
    if !s.on_to && !s.sub_schema {
        return refuse(format!("shard {n} left the old server, but its copy on the new one has no tables: compare the servers by hand"));
    }
    Next::Finish
}

/// The shard is the new server's and the old one keeps a copy that
/// follows it: rolled back, released, or left as it is.
fn kept_copy(s: &Seen, w: Want, until: &str, expired: bool) -> Next {
    let n = s.shard;
    if w.rollback {
        // A move that re-pointed a router leaves it pointing at the new
        // server: a rollback that could not point it back would send every
        // client to a dropped shard.
        if s.bounced && !w.bouncer {
            return Next::Refuse(format!("the move of shard {n} re-pointed PgBouncer at the new server: roll it back with --pgbouncer, --pgbouncer-map and --pgbouncer-target (the old server's entry), which point it back"));
        }
        if s.mapped && !s.bounced {
            return Next::Refuse(format!("the move of shard {n} re-pointed the PL/Proxy router, which --rollback does not: --release, then move the shard back with a move of its own (--router)"));
        }
        if expired {
            return Next::Refuse(format!("the rollback window of shard {n}'s move closed at {until}: the shard stays on the new server (--release drops the old copy)"));
        }
        return Next::Rollback;
    }
    if w.release || expired {
        return Next::Release;
    }
    Next::Nothing(format!("shard {n} is on the new server; the old server keeps its copy for a rollback until {until}: nothing to do (--rollback returns the shard, --release drops the copy now)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen() -> Seen {
        Seen {
            shard: 7,
            ..Seen::default()
        }
    }
    fn is_refused(n: &Next, says: &str) -> bool {
        matches!(n, Next::Refuse(m) if m.contains(says))
    }

    #[test]
    fn a_first_run_moves_and_checks_only_when_asked() {
        let s = Seen {
            on_from: true,
            ..seen()
        };
        assert_eq!(
            decide(&s, Want::default(), Locus::Old),
            Next::Move { leftovers: false }
        );
        let check = Want {
            check: true,
            ..Want::default()
        };
        assert_eq!(decide(&s, check, Locus::Old), Next::Check);
        let left = Seen {
            leftovers: true,
            ..s.clone()
        };
        assert!(is_refused(
            &decide(&left, check, Locus::Old),
            "an interrupted move"
        ));
        assert_eq!(
            decide(&left, Want::default(), Locus::Old),
            Next::Move { leftovers: true }
        );
    }

    #[test]
    fn a_committed_cutover_is_never_undone() {
        for (leaving, arriving) in [
            (Some(Leaving::Cutover), None),
            (Some(Leaving::Reserved), None),
            (None, Some(Arriving::Adopted)),
            (None, Some(Arriving::Cleanup)),
        ] {
            let s = Seen {
                on_from: true,
                leaving,
                arriving,
                ..seen()
            };
            for w in [
                Want::default(),
                Want {
                    undo: true,
                    ..Want::default()
                },
            ] {
                assert!(is_refused(
                    &decide(&s, w, Locus::Old),
                    "committed its cutover"
                ));
            }
        }
    }

    #[test]
    fn a_paused_entry_needs_a_run_that_can_resume_it() {
        let s = Seen {
            on_from: true,
            entry_paused: true,
            ..seen()
        };
        assert!(is_refused(
            &decide(&s, Want::default(), Locus::Old),
            "did not resume it"
        ));
        let w = Want {
            bouncer: true,
            ..Want::default()
        };
        assert_eq!(decide(&s, w, Locus::Old), Next::Move { leftovers: false });
        let after = Seen {
            on_from: false,
            on_to: false,
            sub: true,
            sub_schema: true,
            leaving: Some(Leaving::Reserved),
            ..s
        };
        assert!(is_refused(
            &decide(&after, Want::default(), Locus::New),
            "did not resume it"
        ));
        assert_eq!(decide(&after, w, Locus::New), Next::Finish);
    }

    #[test]
    fn a_shard_that_came_or_went_while_the_run_waited_is_said() {
        let s = Seen {
            on_from: true,
            ..seen()
        };
        assert!(is_refused(
            &decide(&s, Want::default(), Locus::New),
            "came back"
        ));
        let gone = Seen {
            on_to: true,
            sub: true,
            ..seen()
        };
        assert!(is_refused(
            &decide(&gone, Want::default(), Locus::Old),
            "left the old server"
        ));
        let both = Seen {
            on_from: true,
            on_to: true,
            ..seen()
        };
        assert!(is_refused(
            &decide(&both, Want::default(), Locus::Old),
            "both servers"
        ));
    }

    #[test]
    fn a_finished_move_is_nothing_to_do_and_swapped_servers_refused() {
        let on_to = |moved_from: Option<(bool, &str)>| Seen {
            on_to: true,
            moved_from: moved_from.map(|(ours, s)| (ours, s.to_string())),
            ..seen()
        };
        let finished = decide(&on_to(Some((true, "a at t"))), Want::default(), Locus::New);
        assert!(matches!(finished, Next::Nothing(m) if m.contains("(a at t): nothing to do")));
        // Made on the new server, moved there before 0.11.0, or brought
        // from a third server: exit 1, never success.
        for whence in [None, Some((false, "c at t"))] {
            assert!(is_refused(
                &decide(&on_to(whence), Want::default(), Locus::New),
                "--from and --to are swapped"
            ));
        }
        let nowhere = seen();
        assert!(is_refused(
            &decide(&nowhere, Want::default(), Locus::New),
            "not registered on the old server"
        ));
    }

    #[test]
    fn a_cutover_that_committed_is_finished() {
        // Killed after the cutover: registered nowhere, the old server's
        // record says so; the copy's schema is known from its subscription.
        let s = Seen {
            sub: true,
            sub_schema: true,
            leaving: Some(Leaving::Reserved),
            arriving: Some(Arriving::Sequences),
            kept: Some(("t".into(), true)),
            leftovers: true,
            ..seen()
        };
        assert_eq!(decide(&s, Want::default(), Locus::New), Next::Finish);
        // Not committed: nothing this can finish.
        let not = Seen {
            leaving: Some(Leaving::Slot),
            kept: None,
            ..s.clone()
        };
        assert!(is_refused(
            &decide(&not, Want::default(), Locus::New),
            "did not commit"
        ));
        let legacy = Seen {
            legacy_cutover: true,
            ..not
        };
        assert_eq!(decide(&legacy, Want::default(), Locus::New), Next::Finish);
        let undo = Want {
            undo: true,
            ..Want::default()
        };
        assert!(is_refused(&decide(&s, undo, Locus::New), "nothing to undo"));
        // Another old server's move.
        let elsewhere = Seen {
            leaving: None,
            arriving_from_elsewhere: Some(("db9:5432/app".into(), "db1:5432/app".into())),
            ..s
        };
        assert!(is_refused(
            &decide(&elsewhere, Want::default(), Locus::New),
            "give that server as --from"
        ));
    }

    #[test]
    fn a_kept_copy_is_rolled_back_released_or_left() {
        let kept = |expired: bool, back: bool| Seen {
            on_to: true,
            arriving: Some(Arriving::Reserved),
            leaving: Some(Leaving::Reserved),
            kept: Some(("2026-11-27 06:00:00 UTC".into(), expired)),
            subscribed_back: back,
            ..seen()
        };
        let rollback = Want {
            rollback: true,
            ..Want::default()
        };
        let release = Want {
            release: true,
            ..Want::default()
        };
        assert_eq!(
            decide(&kept(false, true), rollback, Locus::New),
            Next::Rollback
        );
        assert!(
            matches!(decide(&kept(false, true), Want::default(), Locus::New), Next::Nothing(m) if m.contains("until 2026-11-27 06:00:00 UTC"))
        );
        assert_eq!(
            decide(&kept(false, true), release, Locus::New),
            Next::Release
        );
        assert_eq!(
            decide(&kept(true, true), Want::default(), Locus::New),
            Next::Release
        );
        assert!(is_refused(
            &decide(&kept(true, true), rollback, Locus::New),
            "window"
        ));
        // The subscription back gone: released, made again, or refused.
        assert_eq!(
            decide(&kept(true, false), Want::default(), Locus::New),
            Next::Release
        );
        assert_eq!(
            decide(&kept(false, false), Want::default(), Locus::New),
            Next::Finish
        );
        assert!(is_refused(
            &decide(&kept(false, false), rollback, Locus::New),
            "does not follow"
        ));
        assert!(is_refused(
            &decide(&kept(true, false), rollback, Locus::New),
            "closed"
        ));
        // Fenced at a cutover without a window, the new server's record
        // gone (a release killed before it dropped the copy): released.
        let fenced = Seen {
            arriving: None,
            ..kept(true, false)
        };
        assert_eq!(decide(&fenced, Want::default(), Locus::New), Next::Release);
        // A router re-pointed: PgBouncer's needs --pgbouncer to go back;
        // PL/Proxy's is not rolled back at all.
        let bounced = Seen {
            bounced: true,
            ..kept(false, true)
        };
        assert!(is_refused(
            &decide(&bounced, rollback, Locus::New),
            "re-pointed PgBouncer"
        ));
        let mapped = Seen {
            mapped: true,
            ..kept(false, true)
        };
        assert!(is_refused(
            &decide(&mapped, rollback, Locus::New),
            "PL/Proxy"
        ));
        // On the old server: nothing to roll back.
        let on_old = Seen {
            on_from: true,
            ..seen()
        };
        assert!(is_refused(
            &decide(&on_old, rollback, Locus::Old),
            "no move of it to roll back"
        ));
    }

    #[test]
    fn a_committed_rollback_is_finished_only_as_a_rollback() {
        let s = Seen {
            arriving: Some(Arriving::Returned),
            ..seen()
        };
        assert!(is_refused(
            &decide(&s, Want::default(), Locus::New),
            "finish it with --rollback"
        ));
        let w = Want {
            rollback: true,
            bouncer: true,
            ..Want::default()
        };
        assert_eq!(decide(&s, w, Locus::New), Next::FinishRollback);
    }
}
