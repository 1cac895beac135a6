//! `insta-id plan`: the moves that even out the bytes each server holds.
//! The decision is pure (`plan`), so it is tested on fleets of any shape
//! without servers; `run` only reads the servers and prints.
//!
//! The objective: the lowest peak (the fullest server's bytes) it can
//! reach, then the fewest bytes moved, then the fewest moves. The rule:
//! while the fleet is not balanced, take the fullest and the emptiest
//! server and move, from the first to the second, a shard smaller than
//! their difference: a move of one lowers the sum of the squared loads, so
//! the loop ends. It is run twice, and the better plan kept: with the shard
//! nearest half the difference (it evens the pair best: short plans), and
//! with the smallest (a shard far larger than the others stays where it is,
//! and the small ones move around it). A shard moves at most once.
//!
//! Balanced: every server within 5% of the mean, or, where one shard alone
//! is larger than 5% of the mean, within that shard's size of it (no plan can
//! do better than a shard's size).

use crate::conninfo::Settings;
use crate::db::{connect, describe};
use crate::pq::GenericClient;
use crate::shared::pretty;
use crate::status;
use std::collections::BTreeSet;
use std::process::ExitCode;

/// The share of the mean a server may be off it.
pub const TOLERANCE: f64 = 0.05;

/// One shard to move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub shard: i32,
    pub bytes: u64,
    pub from: usize,
    pub to: usize,
}

/// What the operator asks of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Evened out with the others.
    Even,
    /// Emptied (a server to retire): every shard a move of its own may
    /// take leaves it, none arrives.
    Drain,
    /// Left out: its shards stay, none arrives, its bytes are not in the
    /// mean (a server kept for something else).
    Exclude,
}

/// Which servers to drain or leave out, as the operator names them.
#[derive(clap::Args, Clone, Default)]
pub struct Choice {
    /// A server to empty (one to retire): every shard leaves it, none
    /// arrives; give the same string as its --server (or its name in
    /// --sizes); repeatable.
    #[arg(long, value_name = "SERVER")]
    pub drain: Vec<String>,
    /// A server to leave out: its shards stay and none arrives, its bytes
    /// are not in the mean; repeatable.
    #[arg(long, value_name = "SERVER")]
    pub exclude: Vec<String>,
}

/// Each server's role: `Drain` for the given ones among `drain`, `Exclude`
/// for those among `exclude`; a name given that is no server's is an error.
pub fn roles(
    servers: &[String],
    drain: &[String],
    exclude: &[String],
) -> Result<Vec<Role>, String> {
    for (option, names) in [("--drain", drain), ("--exclude", exclude)] {
        if let Some(n) = names.iter().find(|n| !servers.contains(n)) {
            return Err(format!("{option} {n}: not one of the servers given (the same string as its --server, or its name in --sizes)"));
        }
    }
    if let Some(n) = drain.iter().find(|n| exclude.contains(n)) {
        return Err(format!("{n} is both drained and excluded"));
    }
    Ok(servers
        .iter()
        .map(|s| {
            if drain.contains(s) {
                Role::Drain
            } else if exclude.contains(s) {
                Role::Exclude
            } else {
                Role::Even
            }
        })
        .collect())
}

/// What a plan leaves: each server's bytes, and whether that is balanced.
#[derive(Debug)]
pub struct Plan {
    pub moves: Vec<Move>,
    pub before: Vec<u64>,
    pub after: Vec<u64>,
    pub balanced: bool,
    /// When not balanced, what keeps it from it: drained shards with
    /// nowhere to go, the version rule, a shard larger than the bound.
    pub why: Vec<String>,
}

fn mean(loads: &[u64]) -> f64 {
    loads.iter().sum::<u64>() as f64 / loads.len().max(1) as f64
}

/// Whether every server is within `slack` bytes of the mean.
pub fn within(loads: &[u64], slack: f64) -> bool {
    let m = mean(loads);
    loads.iter().all(|&l| (l as f64 - m).abs() <= slack)
}

/// The moves for servers holding `(shard, bytes)` each; `fixed` shards (a
/// move of theirs in progress) stay where they are; no shard goes to a
/// server of an older PostgreSQL major than its own (`majors`, one per
/// server: pg_dump's definitions of a newer server need not restore on an
/// older one, and a move refuses it).
#[cfg(test)]
pub fn plan(servers: &[Vec<(i32, u64)>], fixed: &BTreeSet<i32>, majors: &[u32]) -> Plan {
    plan_for(servers, fixed, majors, &vec![Role::Even; servers.len()])
}

/// As `plan`, each server in its role: first every movable shard of a
/// drained server, largest first, to the least loaded server it may go to
/// (evened, of its major or newer), then the evened servers among
/// themselves; excluded servers neither give nor take. Balanced when the
/// evened servers are within the bound and the drained ones are empty.
pub fn plan_for(
    servers: &[Vec<(i32, u64)>],
    fixed: &BTreeSet<i32>,
    majors: &[u32],
    roles: &[Role],
) -> Plan {
    let mut loads: Vec<u64> = servers
        .iter()
        .map(|s| s.iter().map(|&(_, b)| b).sum())
        .collect();
    let before = loads.clone();
    // (An excluded server's shards stay: they bound nothing.)
    let largest = servers
        .iter()
        .zip(roles)
        .filter(|(_, r)| **r != Role::Exclude)
        .flat_map(|(s, _)| s.iter().map(|&(_, b)| b))
        .max()
        .unwrap_or(0);
    // Each server's movable shards by size; a moved shard joins no set.
    let mut movable: Vec<BTreeSet<(u64, i32)>> = servers
        .iter()
        .map(|s| {
            s.iter()
                .filter(|(id, b)| *b > 0 && !fixed.contains(id))
                .map(|&(id, b)| (b, id))
                .collect()
        })
        .collect();
    let even: Vec<usize> = (0..loads.len())
        .filter(|&i| roles[i] == Role::Even)
        .collect();
    let mut moves = Vec::new();
    for d in (0..loads.len()).filter(|&i| roles[i] == Role::Drain) {
        // Every shard, the empty ones too (a shard of 0 bytes is still on
        // the server to retire).
        let mut leaving: Vec<(u64, i32)> = servers[d]
            .iter()
            .filter(|(id, _)| !fixed.contains(id))
            .map(|&(id, b)| (b, id))
            .collect();
        leaving.sort_by_key(|&(b, id)| (std::cmp::Reverse(b), id));
        for (bytes, shard) in leaving {
            let Some(&to) = even
                .iter()
                .filter(|&&i| majors[i] >= majors[d])
                .min_by_key(|&&i| (loads[i], i))
            else {
                break;
            };
            movable[d].remove(&(bytes, shard));
            loads[d] -= bytes;
            loads[to] += bytes;
            moves.push(Move {
                shard,
                bytes,
                from: d,
                to,
            });
        }
    }
    let evened = |loads: &[u64]| even.iter().map(|&i| loads[i]).collect::<Vec<u64>>();
    // Aim at 5%; where a shard alone is larger, it bounds what any plan can
    // reach, and the evening stops when no move evens any pair of servers.
    let strict = mean(&evened(&loads)) * TOLERANCE;
    let bound = strict.max(largest as f64);
    // Two ways to even out, from what the drains left: the shard nearest
    // half the gap (few moves), or the smallest that lowers the pair (few
    // bytes: a shard far larger than the others stays where it is). The
    // plan is the one with the lower peak, then the fewer bytes moved,
    // each compared to 1% of the mean (a peak or bytes nearer than that
    // are the same: the smallest shards first would otherwise win by a few
    // bytes with thousands of moves more), then the fewer moves.
    let [(l1, m1), (l2, m2)] = [nearest_half as Pick, smallest_below as Pick].map(|pick| {
        let (mut l, mut m, mut more) = (loads.clone(), movable.clone(), moves.clone());
        even_out(&mut l, &mut m, &mut more, &even, majors, strict, pick);
        (l, more)
    });
    let cost = |l: &[u64], m: &[Move]| {
        [
            evened(l).into_iter().max().unwrap_or(0),
            m.iter().map(|m| m.bytes).sum::<u64>(),
            m.len() as u64,
        ]
    };
    let near = (mean(&evened(&loads)) * 0.01) as u64;
    let (loads, moves) = if better(cost(&l1, &m1), cost(&l2, &m2), near) {
        (l2, m2)
    } else {
        (l1, m1)
    };
    let stuck: Vec<i32> = (0..loads.len())
        .filter(|&i| roles[i] == Role::Drain)
        .flat_map(|i| servers[i].iter().map(|&(id, _)| id))
        .filter(|id| !moves.iter().any(|m| m.shard == *id))
        .collect();
    let balanced = within(&evened(&loads), bound) && stuck.is_empty();
    let mut why = Vec::new();
    if !stuck.is_empty() {
        why.push(format!(
            "drained servers keep {} shards (being moved, or with no evened server of their major or newer to go to): {}",
            stuck.len(),
            stuck.iter().map(i32::to_string).collect::<Vec<_>>().join(", ")
        ));
    }
    // What the version rule costs: the same fleet planned as if every
    // server ran one major.
    if !balanced && majors.iter().any(|&m| m != majors[0]) {
        let free = plan_for(servers, fixed, &vec![0; majors.len()], roles);
        if free.balanced {
            why.push("the version rule: a shard moves only to a server of its PostgreSQL major or a newer one, and the servers that could take the bytes run older majors (upgrade them first)".into());
        }
    }
    if !balanced && largest as f64 > strict {
        why.push(format!(
            "the largest shard ({}) is more than 5% of the mean: no server holding it gets nearer the mean than that",
            pretty(largest)
        ));
    }
    Plan {
        moves,
        before,
        after: loads,
        balanced,
        why,
    }
}

/// Whether a plan of cost `b` (peak, bytes moved, moves) is better than
/// one of cost `a`: a lower peak, else fewer bytes, each by more than
/// `near`; else fewer moves.
fn better(a: [u64; 3], b: [u64; 3], near: u64) -> bool {
    for i in 0..2 {
        if b[i].saturating_add(near) < a[i] {
            return true;
        }
        if a[i].saturating_add(near) < b[i] {
            return false;
        }
    }
    b[2] < a[2]
}

/// How a plan picks the shard to move from a server to another: among
/// the giving server's movable shards, given the gap between the two.
type Pick = fn(&BTreeSet<(u64, i32)>, u64) -> Option<(u64, i32)>;

/// Evens out the `even` servers: while they are not within `strict`, the
/// fullest gives to the emptiest it may (its major or newer) the shard
/// `pick` chooses. Each move of a shard smaller than the gap lowers the
/// sum of the squared loads, and a shard moves once: it ends.
fn even_out(
    loads: &mut [u64],
    movable: &mut [BTreeSet<(u64, i32)>],
    moves: &mut Vec<Move>,
    even: &[usize],
    majors: &[u32],
    strict: f64,
    pick: Pick,
) {
    let evened = |loads: &[u64]| even.iter().map(|&i| loads[i]).collect::<Vec<u64>>();
    while !within(&evened(loads), strict) {
        // The fullest server gives first, to the emptiest first; ties go to
        // the first server given: the same fleet, the same plan.
        let mut order: Vec<usize> = even.to_vec();
        order.sort_by_key(|&i| (std::cmp::Reverse(loads[i]), i));
        let chosen = order.iter().find_map(|&hi| {
            order
                .iter()
                .rev()
                .take_while(|&&lo| loads[lo] < loads[hi])
                .filter(|&&lo| majors[lo] >= majors[hi])
                .find_map(|&lo| pick(&movable[hi], loads[hi] - loads[lo]).map(|p| (hi, lo, p)))
        });
        let Some((hi, lo, (bytes, shard))) = chosen else {
            break;
        };
        movable[hi].remove(&(bytes, shard));
        loads[hi] -= bytes;
        loads[lo] += bytes;
        moves.push(Move {
            shard,
            bytes,
            from: hi,
            to: lo,
        });
    }
}

/// The smallest shard of `shards` below `gap` (a move of it lowers the
/// squared loads), the lowest number of those of one size.
fn smallest_below(shards: &BTreeSet<(u64, i32)>, gap: u64) -> Option<(u64, i32)> {
    shards.iter().next().copied().filter(|&(b, _)| b < gap)
}

/// The shard of `shards` whose size is nearest half of `gap` and below
/// `gap` (a move of it lowers the squared loads), the lowest number of those
/// of one size.
fn nearest_half(shards: &BTreeSet<(u64, i32)>, gap: u64) -> Option<(u64, i32)> {
    let want = gap / 2;
    let below = shards
        .range(..=(want, i32::MAX))
        .next_back()
        .and_then(|&(b, _)| shards.range((b, i32::MIN)..).next())
        .copied();
    let above = shards.range((want, i32::MAX)..).next().copied();
    [below, above]
        .into_iter()
        .flatten()
        .filter(|&(b, _)| b < gap)
        .min_by_key(|&(b, id)| (b.abs_diff(want), id))
}

/// What the servers hold, and the plan for it.
pub struct Fleet {
    /// Each server's shards: number, schema, bytes.
    pub shards: Vec<Vec<(i32, String, u64)>>,
    /// Shards a move is under way or interrupted for: they stay.
    pub fixed: BTreeSet<i32>,
    /// Each server's PostgreSQL major (0: not known, a fleet described in
    /// a file).
    pub majors: Vec<u32>,
    /// What the operator asked of each server.
    pub roles: Vec<Role>,
    pub plan: Plan,
}

impl Fleet {
    /// Reads each server's shards and their bytes, and plans; an error names
    /// the server.
    pub fn read(settings: &[Settings], roles: Vec<Role>) -> Result<Fleet, String> {
        let mut shards = Vec::new();
        let mut fixed = BTreeSet::new();
        let mut majors = Vec::new();
        for s in settings {
            // The moves first: they say clearly when insta_id is missing or old.
            let read = connect(s).and_then(|mut c| {
                let moving = status::moving_shards(&mut c)?;
                let sizes = shard_sizes(&mut c).map_err(|e| describe(&e))?;
                let major: i32 = c
                    .query_one(
                        "SELECT pg_catalog.current_setting('server_version_num')::int / 10000",
                        &[],
                    )
                    .map_err(|e| describe(&e))?
                    .get(0);
                Ok((sizes, moving, major as u32))
            });
            let (sizes, moving, major) = read.map_err(|e| format!("server {}: {e}", s.label))?;
            fixed.extend(moving);
            shards.push(sizes);
            majors.push(major);
        }
        let mut seen = BTreeSet::new();
        for (i, held) in shards.iter().enumerate() {
            for (id, _, _) in held {
                if !seen.insert(*id) {
                    return Err(format!(
                        "shard {id} is registered on more than one server (one is {}): compare them before planning",
                        settings[i].label
                    ));
                }
            }
        }
        let sizes: Vec<Vec<(i32, u64)>> = shards
            .iter()
            .map(|s| s.iter().map(|(id, _, b)| (*id, *b)).collect())
            .collect();
        let plan = plan_for(&sizes, &fixed, &majors, &roles);
        Ok(Fleet {
            shards,
            fixed,
            majors,
            roles,
            plan,
        })
    }

    /// A fleet described in text instead of read from its servers: a line
    /// per shard, `server shard bytes` (whitespace between; `#` starts a
    /// comment), and a server alone on a line for one without shards; the
    /// servers in the order they first appear. What the
    /// servers would say of moves in progress is not known: none stay.
    pub fn from_sizes(
        text: &str,
        drain: &[String],
        exclude: &[String],
    ) -> Result<(Vec<String>, Fleet), String> {
        let mut labels: Vec<String> = Vec::new();
        let mut shards: Vec<Vec<(i32, String, u64)>> = Vec::new();
        let mut seen = BTreeSet::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            if let [server] = f[..] {
                // A server of its own line: one without shards (a new one).
                if !labels.iter().any(|l| l == server) {
                    labels.push(server.to_string());
                    shards.push(Vec::new());
                }
                continue;
            }
            let parsed = match f[..] {
                [server, shard, bytes] => shard
                    .parse::<i32>()
                    .ok()
                    .filter(|s| (0..=8191).contains(s))
                    // (up to 1 PiB a shard: sums of 8192 stay far from overflow)
                    .zip(bytes.parse::<u64>().ok().filter(|b| *b <= 1 << 50))
                    .map(|(shard, bytes)| (server, shard, bytes)),
                _ => None,
            };
            let Some((server, shard, bytes)) = parsed else {
                return Err(format!(
                    "line {}: not `server shard bytes` (a shard from 0 to 8191): {line}",
                    n + 1
                ));
            };
            if !seen.insert(shard) {
                return Err(format!("line {}: shard {shard} is listed twice", n + 1));
            }
            let i = match labels.iter().position(|l| l == server) {
                Some(i) => i,
                None => {
                    labels.push(server.to_string());
                    shards.push(Vec::new());
                    labels.len() - 1
                }
            };
            shards[i].push((shard, format!("insta{shard}"), bytes));
        }
        if labels.is_empty() {
            return Err("no shard listed".into());
        }
        let sizes: Vec<Vec<(i32, u64)>> = shards
            .iter()
            .map(|s| s.iter().map(|(id, _, b)| (*id, *b)).collect())
            .collect();
        let fixed = BTreeSet::new();
        let majors = vec![0; shards.len()];
        let roles = roles(&labels, drain, exclude)?;
        let plan = plan_for(&sizes, &fixed, &majors, &roles);
        Ok((
            labels,
            Fleet {
                shards,
                fixed,
                majors,
                roles,
                plan,
            },
        ))
    }

    /// The schema of a shard the plan moves.
    pub fn schema(&self, m: &Move) -> &str {
        &self.shards[m.from]
            .iter()
            .find(|(id, _, _)| *id == m.shard)
            .expect("a planned shard is on its server")
            .1
    }

    /// Prints each server's bytes before and after, and the moves.
    pub fn print(&self, labels: &[String], what: &str) {
        let p = &self.plan;
        let total: u64 = p.before.iter().sum();
        let mean = total as f64 / p.before.len() as f64;
        let share = |b: u64| {
            if mean > 0.0 {
                format!("{:.0}%", b as f64 * 100.0 / mean)
            } else {
                "-".into()
            }
        };
        println!(
            "servers: bytes now -> after the plan (share of the mean, {})",
            pretty(mean as u64)
        );
        for (i, label) in labels.iter().enumerate() {
            println!(
                "  {}{}{}: {} shards, {} ({}) -> {} ({})",
                label,
                match self.majors[i] {
                    0 => String::new(),
                    m => format!(" (PostgreSQL {m})"),
                },
                match self.roles[i] {
                    Role::Even => "",
                    Role::Drain => ", drained",
                    Role::Exclude => ", left out",
                },
                self.shards[i].len(),
                pretty(p.before[i]),
                share(p.before[i]),
                pretty(p.after[i]),
                share(p.after[i])
            );
        }
        if !self.fixed.is_empty() {
            println!(
                "left where they are, being moved: {}",
                self.fixed
                    .iter()
                    .map(i32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let moved: u64 = p.moves.iter().map(|m| m.bytes).sum();
        println!("moves: {} ({}); {what}", p.moves.len(), pretty(moved));
        for m in &p.moves {
            println!(
                "  shard {} ({}, {}): {} -> {}",
                m.shard,
                self.schema(m),
                pretty(m.bytes),
                labels[m.from],
                labels[m.to]
            );
        }
    }
}

pub const UNBALANCED: &str =
    "no plan brings every server within 5% of the mean (or the largest shard's size) and empties every drained one";

/// The exit status of a plan (and a rebalance) that cannot reach the
/// bound: told apart from 1, a failure.
pub const UNREACHABLE: u8 = 3;

/// Says why a plan cannot reach the bound, and exits UNREACHABLE.
pub fn unreachable(p: &Plan) -> ExitCode {
    eprintln!("insta-id: {UNBALANCED}");
    for w in &p.why {
        eprintln!("  what keeps it: {w}");
    }
    ExitCode::from(UNREACHABLE)
}

/// Reads the servers and prints the plan. Exits 0 with a plan that
/// balances the fleet (or with nothing to move), 1 when a server cannot be
/// read, 3 when no plan reaches the bound (saying what keeps it).
pub fn run(settings: &[Settings], roles: Vec<Role>) -> ExitCode {
    let labels: Vec<String> = settings.iter().map(|s| s.label.clone()).collect();
    show(Fleet::read(settings, roles).map(|f| (labels, f)))
}

/// `insta-id plan --sizes FILE`: the plan of a fleet the file describes.
pub fn run_offline(file: &std::path::Path, drain: &[String], exclude: &[String]) -> ExitCode {
    show(
        std::fs::read_to_string(file)
            .map_err(|e| format!("{}: {e}", file.display()))
            .and_then(|text| Fleet::from_sizes(&text, drain, exclude)),
    )
}

fn show(read: Result<(Vec<String>, Fleet), String>) -> ExitCode {
    let (labels, fleet) = match read {
        Ok(f) => f,
        Err(e) => {
            eprintln!("insta-id: {e}");
            return ExitCode::FAILURE;
        }
    };
    fleet.print(&labels, "a dry run, nothing is moved");
    if fleet.plan.balanced {
        ExitCode::SUCCESS
    } else {
        unreachable(&fleet.plan)
    }
}

/// A server's shards: number, schema and bytes on disk (tables, their
/// indexes and TOAST, materialized views).
fn shard_sizes(c: &mut crate::pq::Client) -> Result<Vec<(i32, String, u64)>, crate::pq::Error> {
    let rows = c.query(
        "SELECT r.shard_id, r.schema_name::text,
                coalesce(sum(pg_catalog.pg_total_relation_size(k.oid)), 0)::bigint
         FROM insta_id_admin.shard_registry r
         LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = r.schema_name
         LEFT JOIN pg_catalog.pg_class k ON k.relnamespace = n.oid AND k.relkind IN ('r', 'm')
         GROUP BY r.shard_id, r.schema_name ORDER BY r.shard_id",
        &[],
    )?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get::<_, i64>(2) as u64))
        .collect())
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_fleet_described_in_a_file_is_planned_like_one_read() {
        let (labels, f) = Fleet::from_sizes(
            "# server shard bytes\ndb1 1 900\ndb1 2 100  # small\n\ndb2 3 100\ndb3 4 0\ndb4\n",
            &[],
            &[],
        )
        .unwrap();
        assert_eq!(labels, ["db1", "db2", "db3", "db4"]);
        assert_eq!(
            f.shards[0],
            [(1, "insta1".into(), 900), (2, "insta2".into(), 100)]
        );
        assert_eq!(f.plan.before, [1000, 100, 0, 0]);
        for (bad, said) in [
            ("db1 1\n", "line 1: not `server shard bytes`"),
            ("db1 8192 5\n", "line 1: not `server shard bytes`"),
            ("db1 1 -5\n", "line 1: not `server shard bytes`"),
            ("db1 1 5\ndb2 1 6\n", "line 2: shard 1 is listed twice"),
            ("# nothing\n", "no shard listed"),
        ] {
            let e = Fleet::from_sizes(bad, &[], &[]).err().unwrap();
            assert!(e.starts_with(said), "{bad:?}: {e}");
        }
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_lowest_peak_with_the_fewest_bytes_moved() {
        // 12 shards on three servers, one of 580 MB: the peak cannot go
        // below it, and moving the small shards around it reaches that.
        const MB: u64 = 1 << 20;
        let servers = [
            vec![(1, 580 * MB), (2, 8 * MB), (3, 7 * MB), (4, 9 * MB)],
            vec![(5, 7 * MB), (6, 8 * MB), (7, 6 * MB), (8, 9 * MB)],
            vec![(9, 7 * MB), (10, 8 * MB), (11, 6 * MB), (12, 9 * MB)],
        ];
        let p = plan(&servers, &BTreeSet::new(), &[16, 16, 16]);
        let moved: u64 = p.moves.iter().map(|m| m.bytes).sum();
        assert!(p.balanced, "{p:?}");
        assert_eq!(p.after.iter().max(), Some(&(580 * MB)), "{p:?}");
        assert!(p.moves.iter().all(|m| m.shard != 1), "{p:?}");
        assert!(moved <= 24 * MB, "{p:?}");
    }

    #[test]
    fn what_keeps_a_plan_from_balancing_is_said() {
        // Every shard on 18, the 15 and 16 servers empty: the version rule.
        let p = plan(
            &[vec![(1, 100), (2, 100), (3, 100)], vec![], vec![]],
            &BTreeSet::new(),
            &[18, 15, 16],
        );
        assert!(!p.balanced && p.moves.is_empty(), "{p:?}");
        assert!(
            p.why.iter().any(|w| w.starts_with("the version rule")),
            "{p:?}"
        );
        // The same on one major balances: nothing to say.
        let p = plan(
            &[vec![(1, 100), (2, 100), (3, 100)], vec![], vec![]],
            &BTreeSet::new(),
            &[18, 18, 18],
        );
        assert!(p.balanced && p.why.is_empty(), "{p:?}");
        // A drained server's shard with nowhere to go is named.
        let p = plan_for(
            &[vec![(7, 10)], vec![]],
            &BTreeSet::new(),
            &[18, 16],
            &[Role::Drain, Role::Even],
        );
        assert!(p.why.iter().any(|w| w.ends_with(": 7")), "{p:?}");
    }

    #[test]
    fn a_drained_server_is_emptied_and_an_excluded_one_left_alone() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // db1 drained (its empty shard 3 too), db4 left out: db2 and db3
        // take db1's shards, then even out; nothing reaches db1 or db4.
        let (_, f) = Fleet::from_sizes(
            "db1 1 500\ndb1 2 300\ndb1 3 0\ndb2 4 100\ndb3 5 100\ndb4 6 5000\n",
            &names(&["db1"]),
            &names(&["db4"]),
        )
        .unwrap();
        let p = &f.plan;
        assert!(p.balanced, "{p:?}");
        assert_eq!(p.after[0], 0);
        assert_eq!(p.after[3], 5000);
        assert!(
            p.moves
                .iter()
                .all(|m| m.to != 0 && m.to != 3 && m.from != 3),
            "{p:?}"
        );
        let mut left: Vec<i32> = p
            .moves
            .iter()
            .filter(|m| m.from == 0)
            .map(|m| m.shard)
            .collect();
        left.sort();
        assert_eq!(left, [1, 2, 3]);
        assert_eq!(p.after[1] + p.after[2], 1000);
        // A drained server's shard being moved stays: no plan empties it.
        let p = plan_for(
            &[vec![(1, 10), (2, 10)], vec![]],
            &[2].into(),
            &[16, 16],
            &[Role::Drain, Role::Even],
        );
        assert!(!p.balanced && p.moves.len() == 1, "{p:?}");
        // Nowhere to go (only an older major): not balanced, said so.
        let p = plan_for(
            &[vec![(1, 10)], vec![]],
            &BTreeSet::new(),
            &[18, 16],
            &[Role::Drain, Role::Even],
        );
        assert!(!p.balanced && p.moves.is_empty(), "{p:?}");
        // Names that are no server's, or drained and excluded at once.
        assert!(roles(&names(&["a", "b"]), &names(&["c"]), &[])
            .unwrap_err()
            .starts_with("--drain c: not one of"));
        assert!(roles(&names(&["a", "b"]), &names(&["a"]), &names(&["a"])).is_err());
    }

    #[test]
    fn no_shard_goes_to_an_older_major() {
        // The full server is 18's, the empty one 16's: nothing can go.
        let fleet = vec![vec![(1, 100), (2, 100), (3, 100), (4, 100)], vec![]];
        let p = plan(&fleet, &BTreeSet::new(), &[18, 16]);
        assert!(p.moves.is_empty() && !p.balanced, "{p:?}");
        // The other way round, shards go up to 18.
        let p = plan(&fleet, &BTreeSet::new(), &[16, 18]);
        assert_eq!(p.moves.len(), 2, "{p:?}");
        assert!(p.balanced);
        // Three servers: the 18 one gives to the other 18 one, never to 17's.
        let fleet = vec![vec![(1, 100), (2, 100), (3, 100)], vec![], vec![(4, 50)]];
        let p = plan(&fleet, &BTreeSet::new(), &[18, 17, 18]);
        assert!(p.moves.iter().all(|m| m.to == 2), "{p:?}");
    }

    /// A deterministic generator (xorshift64*), so the fleets are the same
    /// on every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// 8192 shards with skewed sizes (log-normal, the largest about a
    /// hundred times the median), spread 45/30/25 over three servers and a fourth one empty:
    /// the fleet that has just grown.
    fn grown_fleet() -> Vec<Vec<(i32, u64)>> {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let mut fleet = vec![Vec::new(); 4];
        for id in 0..8192 {
            // Box-Muller: a normal variate, sigma 1.2 around 64 MB.
            let (u1, u2) = (rng.unit().max(1e-12), rng.unit());
            let normal = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            let bytes = (64.0 * 1024.0 * 1024.0 * (1.2 * normal).exp()) as u64;
            let server = match id % 20 {
                0..=8 => 0,
                9..=14 => 1,
                _ => 2,
            };
            fleet[server].push((id, bytes));
        }
        fleet
    }

    fn check_moves(fleet: &[Vec<(i32, u64)>], p: &Plan) {
        let mut loads = p.before.clone();
        let mut moved = BTreeSet::new();
        for m in &p.moves {
            assert!(moved.insert(m.shard), "shard {} moved twice", m.shard);
            assert!(
                fleet[m.from].contains(&(m.shard, m.bytes)),
                "shard {} is not on server {}",
                m.shard,
                m.from
            );
            assert_ne!(m.from, m.to);
            loads[m.from] -= m.bytes;
            loads[m.to] += m.bytes;
        }
        assert_eq!(loads, p.after);
    }

    #[test]
    fn a_grown_fleet_of_8192_shards_is_evened_within_5_percent() {
        let fleet = grown_fleet();
        let p = plan(&fleet, &BTreeSet::new(), &vec![0; fleet.len()]);
        check_moves(&fleet, &p);
        let mean = p.after.iter().sum::<u64>() as f64 / 4.0;
        let largest = fleet.iter().flatten().map(|s| s.1).max().unwrap();
        assert!(
            (largest as f64) < mean * TOLERANCE,
            "this fleet's shards are each below 5% of the mean"
        );
        assert!(!within(&p.before, mean * TOLERANCE));
        for a in &p.after {
            assert!(
                (*a as f64 - mean).abs() <= mean * TOLERANCE,
                "{a} is not within 5% of {mean}"
            );
        }
        assert!(p.balanced);
        // A quarter of the bytes has to reach the new server; the plan moves
        // little more than that, not thousands of small shards.
        let moved: u64 = p.moves.iter().map(|m| m.bytes).sum();
        assert!(p.after[3] as f64 >= mean * (1.0 - TOLERANCE));
        assert!(
            (moved as f64) < 0.4 * p.before.iter().sum::<u64>() as f64,
            "moved {moved}"
        );
        assert!(p.moves.len() < 1000, "{} moves", p.moves.len());
    }

    #[test]
    fn a_balanced_fleet_gets_no_move() {
        let fleet = vec![vec![(1, 100), (2, 100)], vec![(3, 101), (4, 99)]];
        let p = plan(&fleet, &BTreeSet::new(), &vec![0; fleet.len()]);
        assert!(p.moves.is_empty() && p.balanced);
    }

    #[test]
    fn one_shard_larger_than_5_percent_bounds_the_plan_by_its_size() {
        // 1000 + 10 × 100 over two servers: the mean is 1000, the whale alone
        // is that; every server within 1000 of the mean is the best there is.
        let mut a = vec![(0, 1000)];
        a.extend((1..=10).map(|i| (i, 100)));
        let fleet = vec![a, vec![]];
        let p = plan(&fleet, &BTreeSet::new(), &vec![0; fleet.len()]);
        check_moves(&fleet, &p);
        assert!(p.balanced);
        assert!(p.moves.iter().all(|m| m.shard != 0 || p.moves.len() == 1));
        assert_eq!(p.after.iter().sum::<u64>(), 2000);
        assert!(p.after.iter().all(|&l| l.abs_diff(1000) <= 1000));
    }

    #[test]
    fn shards_being_moved_stay_and_an_unreachable_balance_is_said() {
        let fleet = vec![(1..=10).map(|id| (id, 100)).collect(), vec![]];
        let p = plan(&fleet, &(1..=10).collect(), &vec![0; fleet.len()]);
        assert!(p.moves.is_empty());
        assert!(!p.balanced);
        let p = plan(&fleet, &(1..=5).collect(), &vec![0; fleet.len()]);
        check_moves(&fleet, &p);
        assert_eq!(
            p.moves.iter().map(|m| m.shard).collect::<Vec<_>>(),
            vec![6, 7, 8, 9, 10]
        );
        assert!(p.balanced && p.after == vec![500, 500]);
    }

    #[test]
    fn when_the_fullest_cannot_give_the_next_one_does() {
        // The fullest server holds one shard, larger than any gap: the
        // second fullest gives to the empty one instead.
        let fleet = vec![vec![(1, 1000)], vec![(2, 300), (3, 300), (4, 300)], vec![]];
        let p = plan(&fleet, &BTreeSet::new(), &vec![0; fleet.len()]);
        check_moves(&fleet, &p);
        assert_eq!(
            p.moves,
            vec![Move {
                shard: 2,
                bytes: 300,
                from: 1,
                to: 2
            }]
        );
        assert_eq!(p.after, vec![1000, 600, 300]);
        assert!(p.balanced);
    }

    proptest! {
        /// Whatever the fleet, a plan moves each shard once, from where it is,
        /// never to where it is, keeps the total, and never leaves the
        /// squared loads larger than it found them.
        #[test]
        fn plans_are_sound(fleet in prop::collection::vec(prop::collection::vec(0u64..1_000_000, 0..40), 1..6)) {
            let mut id = 0;
            let fleet: Vec<Vec<(i32, u64)>> = fleet.into_iter().map(|s| s.into_iter().map(|b| { id += 1; (id, b) }).collect()).collect();
            let p = plan(&fleet, &BTreeSet::new(), &vec![0; fleet.len()]);
            check_moves(&fleet, &p);
            let sq = |l: &[u64]| l.iter().map(|&x| (x as u128) * (x as u128)).sum::<u128>();
            prop_assert!(sq(&p.after) <= sq(&p.before));
            prop_assert_eq!(p.after.iter().sum::<u64>(), p.before.iter().sum::<u64>());
        }
    }
}
