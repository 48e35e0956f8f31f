//! The `weft` program: relay, realm server, node, simulator and demo over the weft-proto machines.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// weft: relay, rendezvous and mesh networking as sans-IO state machines.
#[derive(Parser, Debug)]
#[command(
    name = "weft",
    version,
    about = "weft: relay, rendezvous and mesh networking as sans-IO state machines"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a Minca relay server (Minca 04 Network §1.4).
    Relay,
    /// Run an AIRC realm server, or act as an AIRC client (AIRC draft 0.2).
    Airc,
    /// Run an always-on Minca node serving `/peer` (Minca 04 Network §5.3).
    Node,
    /// Run a simulator scenario in virtual time.
    Sim,
    /// Start everything locally on embedded defaults and show it working.
    Demo,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Demo => weft_drivers::demo::run(&mut std::io::stdout().lock()),
        Command::Relay => not_yet("relay", "the Minca relay server (Minca §1.4)"),
        Command::Airc => not_yet("airc", "the AIRC realm server and its client commands"),
        Command::Node => not_yet("node", "the always-on Minca node and its /peer endpoint"),
        Command::Sim => not_yet(
            "sim",
            "the simulator scenarios minca-meetup and airc-realms",
        ),
    }
}

/// Says plainly that a subcommand is not built yet, and fails so no script mistakes it for success.
fn not_yet(name: &str, what: &str) -> ExitCode {
    eprintln!(
        "weft {name}: {what} is not built yet; see the open issues and docs/architecture.md."
    );
    ExitCode::from(2)
}
