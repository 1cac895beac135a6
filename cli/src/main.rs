//! insta-id: the fleet tool of insta_id, for the operator of several
//! PostgreSQL servers holding logical shards. It only sequences what each
//! server's insta_id does, over connections read the way libpq reads them
//! (`conninfo`).

mod conninfo;
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let env = conninfo::Env::of_process();
    match cli.command {
        Command::Status { servers } => status::run(&servers, &env),
    }
}
