//! The `kmirror` command.
//!
//! Today it describes the protocol surface this build speaks; `broker`, `mirrors`, `quickstart`
//! and `dump-log` arrive with the issues that build them.

use clap::{Parser, Subcommand};
use kmirror_protocol::errors;
use kmirror_protocol::messages::MirrorApiKey;
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Protocol => print_protocol(),
    }
    ExitCode::SUCCESS
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
