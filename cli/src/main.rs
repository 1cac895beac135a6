//! insta-id: the fleet tool of insta_id, for the operator of several
//! PostgreSQL servers holding logical shards. It only sequences what each
//! server's insta_id does, over connections read the way libpq reads them
//! (`conninfo`).

/// Output that outlives its reader: a closed pipe (`insta-id rebalance |
/// head`) must not stop a move half-way, so a write to stdout that fails is
/// dropped, never a panic (std's println! panics).
macro_rules! println {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod bouncer;
mod conninfo;
mod db;
mod mover;
mod pause;
mod plan;
mod pq;
mod rebalance;
mod restore;
mod shared;
mod status;
mod verify;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// The logical shards of several PostgreSQL servers running insta_id.
///
/// Servers are named by libpq connection strings (`host=... dbname=...`,
/// `postgresql://...`, `service=...`), completed from PG* environment
/// variables and the service file; passwords come from the password file
/// (~/.pgpass, PGPASSFILE) or the service file, never from the command line.
#[derive(Parser)]
#[command(name = "insta-id", version, after_help = EXIT_STATUS, after_long_help = MORE)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every shard move in progress or interrupted on the given servers:
    /// which side, which step, how far the copy is, and whether a mover
    /// still holds it (since when) or it waits to be run again.
    Status {
        /// A server's connection string; give one per server.
        #[arg(long = "server", value_name = "CONNINFO", required = true)]
        servers: Vec<String>,
        /// One JSON object: each server's versions and moves (shard, side,
        /// peer, step, since, started, detail, state: running,
        /// interrupted, "finished, copy kept" or "rollback interrupted";
        /// the mover), and the servers that could not be read.
        #[arg(long)]
        json: bool,
    },
    /// A dry run: the shard moves that would bring every server within 5%
    /// of the mean bytes (tables, indexes, TOAST and materialized views of
    /// each shard's schema), each shard at most once: the lowest peak it
    /// can reach, with the fewest bytes moved. Shards being moved stay
    /// where they are; a shard goes only to a server of its PostgreSQL
    /// major or newer. Exits 3 when no plan reaches that, saying what keeps
    /// it (a shard alone larger than 5% of the mean widens the bound to its
    /// size).
    Plan {
        /// A server's connection string; give one per server, the new and
        /// empty ones too.
        #[arg(
            long = "server",
            value_name = "CONNINFO",
            required_unless_present = "sizes"
        )]
        servers: Vec<String>,
        /// Plan, without connecting, the fleet this file describes: a line
        /// per shard, `server shard bytes` (what each server's
        /// insta_id_admin.shard_registry and pg_total_relation_size say), and a
        /// server alone on a line for one without shards.
        #[arg(long, value_name = "FILE", conflicts_with = "servers")]
        sizes: Option<std::path::PathBuf>,
        #[command(flatten)]
        choice: plan::Choice,
    },
    /// Moves one logical shard to another server while it takes writes
    /// (logical replication; insta_id 0.11.0 or later on both servers,
    /// wal_level = logical on the old one, and on the new one for the
    /// rollback window). Run it again after an interruption at any step:
    /// it finishes the move, or, while the old server still holds the
    /// shard, undoes the partial copy and moves afresh. Writers of the
    /// shard wait during the cutover (its tables' locks): through PgBouncer
    /// (--pgbouncer) they then go on on the new server; without it those
    /// that waited fail once it commits and retry there. The old server
    /// keeps its copy for --rollback-window (--rollback, --release).
    #[command(after_long_help = MOVE_EXAMPLES)]
    Move(Box<mover::Args>),
    /// Carries out `insta-id plan`: the moves that even out the bytes per
    /// server, one at a time (each as `insta-id move`), with progress.
    /// Resumable: it first finishes or redoes every move the servers record
    /// as interrupted, then plans again, so running it again after any
    /// interruption goes on. Exits 1 when a move fails (run it again), 3
    /// when no plan reaches the bound (what keeps it said).
    Rebalance(Box<rebalance::Args>),
    /// Compares a shard's two copies (a move's, before its cutover or
    /// while the old server keeps its copy): each table's rows counted and
    /// hashed per time bucket of their ID, read on the side the other
    /// follows first, then on the other once it has caught up; a bucket
    /// that differs is read again before it is reported. Exits 0 when the
    /// copies are the same, 1 when they differ (each bucket named).
    Verify(verify::Args),
}

/// The exit statuses of every command, in `insta-id -h` and `--help` (and
/// the manual page's EXIT STATUS, which scripts/dev/manpage.sh makes from
/// `--help`): one text, a macro so that concat! can join it.
macro_rules! exit_status {
    () => {
        "Exit status:
  0    Done: what was asked, or nothing to do (said so).
  1    Failed or refused after connecting; the message names the server and
       what blocks. A move leaves nothing that running it again does not
       finish or undo. verify: the copies differ.
  2    A bad argument or connection string, refused before connecting.
  3    plan and rebalance: no plan reaches the bound; what keeps it is said
       (the version rule, a drained server's shards, the largest shard).
  75   A move's cutover given up at every try, each within its budget
       (EX_TEMPFAIL): nothing changed; run it again later.
  130  Interrupted (SIGINT); a PgBouncer entry the move paused is resumed
       first. Run the same command again to go on.
  143  Terminated (SIGTERM): as for SIGINT."
    };
}
const EXIT_STATUS: &str = exit_status!();

/// `insta-id --help`'s tail: the exit statuses, then what the tool reads.
const MORE: &str = concat!(
    exit_status!(),
    "

Environment:
  PGHOST, PGPORT, PGDATABASE, PGUSER, PGSERVICE, PGSSLMODE, ... (libpq's)
       Complete each connection string: the tool connects through libpq,
       so every keyword and variable psql takes works the same, TLS
       (sslrootcert, sslcrl, client certificates) and several hosts too.
  PGPASSFILE
       The password file (default ~/.pgpass). PGPASSWORD is refused.
  PGREQUIREAUTH
       As require_auth: which methods may answer the server. With `password`
       in it, a password may go in clear over a connection that is not
       encrypted, which the tool otherwise refuses (with a libpq older than
       16, the tool reads require_auth itself).
  PGOPTIONS
       As options: the tool's sessions and a move's pg_dump get it, the
       tool's own settings after it (search_path).
  PATH
       Where a move looks for pg_dump first (move --pg-bin).

Files:
  ~/.pgpass
       Passwords, never on the command line.
  ~/.pg_service.conf, PGSYSCONFDIR/pg_service.conf
       Connection services (service=NAME).
  /usr/lib/postgresql/N/bin/pg_dump
       A move's pg_dump for major N, when the one in PATH does not fit."
);

const MOVE_EXAMPLES: &str = "Examples:
  # PgBouncer: its console, and the file of its shard entries.
  bouncer='host=/tmp port=6432 dbname=pgbouncer user=pgbouncer'
  map=/etc/pgbouncer/shards.ini
  # Check everything a move of shard 7 needs, making nothing:
  insta-id move 7 --check \\
      --from 'host=db1 dbname=app' --to 'host=db4 dbname=app' \\
      --pgbouncer \"$bouncer\" --pgbouncer-map \"$map\" \\
      --pgbouncer-target 'host=db4 dbname=app'
  # The move itself: the same command without --check.
  # Within the rollback window (15 min), back to db1:
  insta-id move 7 --rollback \\
      --from 'host=db1 dbname=app' --to 'host=db4 dbname=app' \\
      --pgbouncer \"$bouncer\" --pgbouncer-map \"$map\" \\
      --pgbouncer-target 'host=db1 dbname=app'
  # The clients find their server otherwise (their own map, DNS):
  insta-id move 7 --routing-elsewhere \\
      --from 'host=db1 dbname=app' --to 'host=db4 dbname=app'
  # Compare the two copies on demand:
  insta-id verify 7 \\
      --from 'host=db1 dbname=app' --to 'host=db4 dbname=app'";

fn main() -> ExitCode {
    db::keep_pgoptions();
    let cli = Cli::parse();
    let env = conninfo::Env::of_process();
    let servers = match cli.command {
        Command::Plan {
            sizes: Some(ref file),
            ref choice,
            ..
        } => return plan::run_offline(file, &choice.drain, &choice.exclude),
        Command::Status { ref servers, .. } | Command::Plan { ref servers, .. } => servers,
        Command::Rebalance(ref args) => &args.servers,
        Command::Move(args) => {
            pause::catch_signals();
            return mover::run(&args, &env);
        }
        Command::Verify(args) => return verify::run(&args, &env),
    };
    // Every server's settings first: a refused string (a password, say)
    // stops the command before it connects anywhere (exit 2).
    let mut settings = Vec::new();
    for conninfo in servers {
        match conninfo::resolve(conninfo, &env) {
            Ok(s) => settings.push(s),
            Err(e) => {
                eprintln!("insta-id: {e}");
                return ExitCode::from(2);
            }
        }
    }
    // Which servers are drained or left out, by the strings given.
    let roles = match &cli.command {
        Command::Plan { choice, .. } => plan::roles(servers, &choice.drain, &choice.exclude),
        Command::Rebalance(args) => plan::roles(servers, &args.choice.drain, &args.choice.exclude),
        _ => Ok(Vec::new()),
    };
    let roles = match roles {
        Ok(r) => r,
        Err(e) => {
            eprintln!("insta-id: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Status { json, .. } => status::run(&settings, json),
        Command::Plan { .. } => plan::run(&settings, roles),
        Command::Rebalance(args) => {
            pause::catch_signals();
            rebalance::run(&args, &settings, roles, &env)
        }
        Command::Move(_) | Command::Verify(_) => unreachable!("handled above"),
    }
}
