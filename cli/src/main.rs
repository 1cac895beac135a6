//! insta-id: the fleet tool of insta_id, for the operator of several
//! PostgreSQL servers holding logical shards. It only sequences what each
//! server's insta_id does, over connections read the way libpq reads them
//! (`conninfo`).

mod conninfo;
mod db;
mod mover;
mod plan;
mod status;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// The logical shards of several PostgreSQL servers running insta_id.
///
/// Servers are named by libpq connection strings (`host=... dbname=...`,
/// `postgresql://...`, `service=...`), completed from PG* environment
/// variables and the service file; passwords come from the password file
/// (~/.pgpass, PGPASSFILE) or the service file, never from the command line.
#[derive(Parser)]
#[command(name = "insta-id", version)]
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
    },
    /// A dry run: the shard moves that would bring every server within 5%
    /// of the mean bytes (tables, indexes, TOAST and materialized views of
    /// each shard's schema), largest first, each shard at most once. Shards
    /// being moved stay where they are. Exits 1 when no plan reaches that
    /// (a shard alone larger than 5% of the mean widens the bound to its
    /// size).
    Plan {
        /// A server's connection string; give one per server, the new and
        /// empty ones too.
        #[arg(long = "server", value_name = "CONNINFO", required = true)]
        servers: Vec<String>,
    },
    /// Moves one logical shard to another server while it takes writes
    /// (logical replication; insta_id 0.9.0 or later on both servers,
    /// wal_level = logical on the old one). Run it again after an
    /// interruption at any step: it finishes the move, or, while the old
    /// server still holds the shard, rolls the partial copy back and moves
    /// afresh. Writers of the shard wait during the cutover (its tables'
    /// locks); those that waited fail once it commits and retry on the new
    /// server.
    Move {
        /// The logical shard, 0 to 8191.
        shard: u32,
        /// The server holding the shard.
        #[arg(long, value_name = "CONNINFO")]
        from: String,
        /// The server receiving it (insta_id installed; the schema absent).
        #[arg(long, value_name = "CONNINFO")]
        to: String,
        /// How the new server's subscription reaches the old one (default:
        /// --from). It is stored in pg_subscription: its password belongs
        /// in the new server's password file, never in it.
        #[arg(long, value_name = "CONNINFO")]
        subscription: Option<String>,
        /// The fleet's router database (the demo's PL/Proxy router,
        /// scripts/demo/fleet_router.sql), whose map is re-pointed once the
        /// new server holds the shard.
        #[arg(long, value_name = "CONNINFO", requires = "router_target")]
        router: Option<String>,
        /// The connection string the router's map gets for the new server:
        /// the application's, not this tool's.
        #[arg(long, value_name = "CONNINFO", requires = "router")]
        router_target: Option<String>,
        /// Only roll back an interrupted move while the old server still
        /// holds the shard.
        #[arg(long)]
        undo: bool,
        /// How long each try of the cutover's lock waits behind a reader of
        /// the shard before it lets the writers go on (a PostgreSQL
        /// interval).
        #[arg(long, value_name = "INTERVAL", default_value = "5s")]
        lock_timeout: String,
        /// How many times the cutover tries its lock.
        #[arg(long, value_name = "N", default_value_t = 5,
              value_parser = clap::value_parser!(u16).range(1..=999))]
        lock_attempts: u16,
        /// Seconds the initial copy may take.
        #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
        copy_timeout: u64,
        /// Seconds to wait for another run finishing the same move.
        #[arg(long, value_name = "SECONDS", default_value_t = 120)]
        finish_wait: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let env = conninfo::Env::of_process();
    let servers = match cli.command {
        Command::Status { ref servers } | Command::Plan { ref servers } => servers,
        Command::Move {
            shard,
            from,
            to,
            subscription,
            router,
            router_target,
            undo,
            lock_timeout,
            lock_attempts,
            copy_timeout,
            finish_wait,
        } => {
            let args = mover::Args {
                shard,
                from,
                to,
                subscription,
                router,
                router_target,
                undo,
                lock_timeout,
                lock_attempts,
                copy_timeout,
                finish_wait,
            };
            return mover::run(&args, &env);
        }
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
    match cli.command {
        Command::Status { .. } => status::run(&settings),
        Command::Plan { .. } => plan::run(&settings),
        Command::Move { .. } => unreachable!("handled above"),
    }
}
