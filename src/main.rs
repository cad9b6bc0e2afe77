//! The `kmirror` command.
//!
//! Today it describes the protocol surface this build speaks and dumps partition logs;
//! `broker`, `mirrors` and `quickstart` arrive with the issues that build them.
//!
//! Exit codes: 0 success, 1 the command ran and found damage (dump-log), 2 usage or I/O error.

use clap::{Parser, Subcommand};
use kmirror::storage::dump;
use kmirror_protocol::errors;
use kmirror_protocol::messages::MirrorApiKey;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Broker-embedded Kafka cluster mirroring (KIP-1279).
#[derive(Debug, Parser)]
#[command(name = "kmirror", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the KIP-1279 API keys and versions, and the error codes, this build speaks.
    Protocol,
    /// Print the batches of a partition log directory (or one .log segment file), read-only.
    DumpLog {
        /// A partition directory or a segment file.
        path: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Protocol => {
            print_protocol();
            ExitCode::SUCCESS
        }
        Command::DumpLog { path } => dump_log(&path),
    }
}

fn dump_log(path: &Path) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = dump::dump(path, &mut out);
    // Output already written stays; a failed flush is reported like any other error.
    let flushed = out.flush();
    match (result, flushed) {
        (Ok(summary), Ok(())) if summary.corrupt_batches == 0 && summary.unreadable_bytes == 0 => {
            ExitCode::SUCCESS
        }
        (Ok(_), Ok(())) => ExitCode::from(1),
        (Err(e), _) => {
            eprintln!("kmirror dump-log: {e}");
            ExitCode::from(2)
        }
        (_, Err(e)) => {
            eprintln!("kmirror dump-log: writing output: {e}");
            ExitCode::from(2)
        }
    }
}

fn print_protocol() {
    println!("KIP-1279 APIs (flexible versions, request header v2):");
    println!("{:>5}  {:<20} versions", "key", "name");
    for api in MirrorApiKey::ALL {
        let (min, max) = api.versions();
        println!("{:>5}  {:<20} {min}-{max}", api.key(), api.name());
    }
    println!();
    println!("Error codes:");
    println!("{:>5}  {:<40} {:<9} message", "code", "name", "class");
    for info in errors::all() {
        println!(
            "{:>5}  {:<40} {:<9} {}",
            info.code,
            info.name,
            format!("{:?}", info.class).to_lowercase(),
            info.message
        );
    }
}
