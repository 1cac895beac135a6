//! A move across a failover of either server (issue 57): each server's
//! record of the move holds the WAL timeline of every step, which tells a
//! re-run that a server failed over since; whether a copy the slot kept
//! after it can be trusted; the slots made to follow a failover.

use super::*;

/// The timeline a server writes WAL on (the first 8 hex digits of the
/// name of its current WAL file), as move_step records it.
const TIMELINE: &str = "('x' OPERATOR(pg_catalog.||) pg_catalog.left(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 8))
                        ::pg_catalog.bit(32)::pg_catalog.int4";

/// Whether `c`'s server failed over (a standby promoted) since its side
/// of the move of `shard` began there: the earliest timeline its record's
/// steps hold, and the one it is on now, when they differ (0.11.0 records
/// the timeline; an earlier record says nothing).
pub(super) fn failed_over(c: &mut Client, shard: i32, side: &str) -> Result<Option<(i32, i32)>> {
    failed_over_since(c, shard, side, None)
}

/// The same since the first time the record reached `step` (None: since
/// the move began there).
pub(super) fn failed_over_since(
    c: &mut Client,
    shard: i32,
    side: &str,
    step: Option<&str>,
) -> Result<Option<(i32, i32)>> {
    let r = c
        .query_one(
            &format!(
                "SELECT (SELECT pg_catalog.min((e.value ->> 'timeline')::pg_catalog.int4)
                         FROM insta_id_admin.moves m, pg_catalog.jsonb_array_elements(m.steps) e
                         WHERE m.shard_id = $1::int AND m.side = $2::text
                           AND ($3::text IS NULL OR e.value ->> 'step' = $3::text)),
                        {TIMELINE}"
            ),
            &[&shard, &side, &step],
        )
        .described()?;
    Ok(match (r.get::<_, Option<i32>>(0), r.get::<_, i32>(1)) {
        (Some(was), now) if was != now => Some((was, now)),
        _ => None,
    })
}

/// After a failover of the publisher `promoted` from timeline `was`: where
/// that timeline ended there (its history file, which the promotion
/// wrote), and whether the subscription `sub` on `subscriber` applied
/// nothing past it. A subscriber that did had rows the standby promoted
/// never received (its primary confirmed them before the standby had
/// them: an asynchronous standby, or synchronized_standby_slots not
/// naming it): a slot that followed the failover goes on after them, and
/// the copy keeps rows the promoted server never had. Some(reason) when
/// the copy cannot be trusted, None when it can.
pub(super) fn applied_past_failover(
    promoted: &mut Client,
    was: i32,
    now: i32,
    subscriber: &mut Client,
    sub: &str,
) -> Result<Option<String>> {
    let applied: Option<String> = subscriber
        .query_opt(
            &format!(
                "SELECT o.remote_lsn::text FROM pg_catalog.pg_replication_origin_status o
                 JOIN pg_catalog.pg_subscription s ON o.external_id = 'pg_' OPERATOR(pg_catalog.||) s.oid::text
                 WHERE s.subname = $1::text AND s.subdbid = {THIS_DB}"
            ),
            &[&sub],
        )
        .described()?
        .and_then(|r| r.get(0));
    let Some(applied) = applied else {
        return Ok(Some(format!(
            "its subscription {sub} has no record of what it applied"
        )));
    };
    // A line for each timeline before this one: its number, where it
    // ended, why (tab-separated).
    let ended: Option<String> = promoted
        .query_one(
            "SELECT (SELECT pg_catalog.split_part(l, pg_catalog.chr(9), 2)
                     FROM pg_catalog.regexp_split_to_table(
                            pg_catalog.pg_read_file('pg_wal/' OPERATOR(pg_catalog.||) pg_catalog.lpad(pg_catalog.to_hex($2::int), 8, '0')
                                                    OPERATOR(pg_catalog.||) '.history'), pg_catalog.chr(10)) l
                     WHERE pg_catalog.split_part(l, pg_catalog.chr(9), 1) = $1::int::text LIMIT 1)",
            &[&was, &now],
        )
        .described()?
        .get(0);
    let Some(ended) = ended else {
        return Ok(Some(format!(
            "the history of timeline {now} does not say where timeline {was} ended"
        )));
    };
    let past: bool = promoted
        .query_one(
            "SELECT $1::text::pg_catalog.pg_lsn > $2::text::pg_catalog.pg_lsn",
            &[&applied, &ended],
        )
        .described()?
        .get(0);
    Ok(past.then(|| format!("its subscription {sub} applied changes up to {applied}, past {ended}, where timeline {was} ended on the server promoted: rows that server never had")))
}

/// Until the slot `name` on `c`'s server is in use (its subscription
/// connected to it), 30 s at most; else the subscription does not reach
/// that server, which `option` would tell it how to.
pub(super) fn slot_in_use(c: &mut Client, name: &str, option: &str) -> Result<()> {
    wait_for(30, "the subscription to reach the server promoted", || {
        Ok(c.query_one(
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_replication_slots WHERE slot_name = $1::text AND active)",
            &[&name],
        )
        .described()?
        .get(0))
    })
    .map_err(|_| {
        Failure::Failed(format!("the subscription of slot {name} does not reach the server promoted within 30 s (its log says why): give {option} the connection string that server's subscriber uses for it"))
    })
}

/// A logical slot named `name` on `c`'s server, made to follow a failover
/// to its standbys where the server can (`follows`: PostgreSQL 17 and
/// later, whose standbys running sync_replication_slots keep a copy of
/// it); else one that stays on this primary.
pub(super) fn make_slot(c: &mut Client, name: &str, follows: bool) -> Result<()> {
    c.execute(
        if follows {
            "SELECT pg_catalog.pg_create_logical_replication_slot($1::text, 'pgoutput', false, false, true)"
        } else {
            "SELECT pg_catalog.pg_create_logical_replication_slot($1::text, 'pgoutput')"
        },
        &[&name],
    )
    .described()?;
    Ok(())
}
