//! The `weft circle` commands, parsed by clap, kept here so the program's own file only names
//! them.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::config::CircleConfig;

/// `weft circle …`.
#[derive(Subcommand, Debug)]
pub enum Circle {
    /// Serve the circle shell: the napplet face (`/napplet?token=…`, loopback), member links over
    /// WebSocket (`/member`, and the configured member URLs), events kept in
    /// the embedded store (ephemeral ones never), blobs answered from a directory. Says
    /// `listening …` on stderr once ready.
    Serve(ServeArgs),
    /// Print the shell's counters and reachable members (from its control face).
    Info(ControlArgs),
    /// Pair with another device on purpose: `invite` on one side prints an invite string, the
    /// other side's `accept` takes it; both then hold both signed pairing records.
    #[command(subcommand)]
    Pair(Pair),
    /// Grant a napplet the `mesh` capability.
    Grant {
        /// The control face.
        #[command(flatten)]
        control: ControlArgs,
        /// The napplet's name in the config.
        napplet: String,
    },
    /// Revoke a napplet's `mesh` grant: its next call is refused and its subscriptions end now.
    Revoke {
        /// The control face.
        #[command(flatten)]
        control: ControlArgs,
        /// The napplet's name in the config.
        napplet: String,
    },
}

/// `weft circle pair …`.
#[derive(Subcommand, Debug)]
pub enum Pair {
    /// Make an invite and print its string (`weft-circle-invite1:<npub>:<secret>:<expires>`):
    /// hand it to the other device's user out of band. It works once, for one device, until
    /// it expires (10 minutes).
    Invite {
        /// The control face.
        #[command(flatten)]
        control: ControlArgs,
    },
    /// Accept an invite: this device sends its pairing record and a proof of the invite's
    /// secret on its link to the inviter (a member URL in the config, or the inviter dialling
    /// in) and prints how it ended; exits non-zero when refused.
    Accept {
        /// The control face.
        #[command(flatten)]
        control: ControlArgs,
        /// The invite string.
        invite: String,
    },
    /// Pair by hand: make this user's pairing record for a peer and print it (the peer takes it
    /// with `weft circle pair take`). An edge once both records are held.
    Record {
        /// The control face.
        #[command(flatten)]
        control: ControlArgs,
        /// The peer's circle key: an npub or 64 hex digits.
        #[arg(long)]
        peer: String,
    },
    /// Pair by hand: take a peer's pairing record (the JSON `weft circle pair record` printed).
    Take {
        /// The control face.
        #[command(flatten)]
        control: ControlArgs,
        /// The record (a NIP-01 event, JSON).
        record: String,
    },
}

/// `weft circle serve`'s flags.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The config file (TOML; see `drivers/src/circle/config.rs`). Unknown keys are refused.
    #[arg(long)]
    pub config: PathBuf,
}

/// How to reach a running shell's control face.
#[derive(Args, Debug)]
pub struct ControlArgs {
    /// The control face: `ws://127.0.0.1:7480/control?token=…`.
    #[arg(long, env = "WEFT_CIRCLE_CONTROL")]
    pub control: String,
}

/// Runs one `weft circle` command.
pub fn run(cmd: Circle) -> ExitCode {
    let (control, request) = match cmd {
        Circle::Serve(args) => return serve(&args),
        Circle::Info(c) => (c, json!({"op": "stats"})),
        Circle::Pair(Pair::Invite { control }) => {
            return match super::run::control(&control.control, &json!({"op": "invite"})) {
                Ok(answer) => match answer.get("invite").and_then(Value::as_str) {
                    Some(invite) => {
                        println!("{invite}");
                        ExitCode::SUCCESS
                    }
                    None => {
                        eprintln!("weft circle pair invite: {answer}");
                        ExitCode::FAILURE
                    }
                },
                Err(e) => {
                    eprintln!("weft circle pair invite: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Circle::Pair(Pair::Accept { control, invite }) => {
            (control, json!({"op": "join", "invite": invite}))
        }
        Circle::Pair(Pair::Record { control, peer }) => {
            (control, json!({"op": "pair", "peer": peer}))
        }
        Circle::Pair(Pair::Take { control, record }) => {
            match serde_json::from_str::<Value>(&record) {
                Ok(r) => (control, json!({"op": "accept", "record": r})),
                Err(e) => {
                    eprintln!("weft circle pair take: the record is no JSON: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        Circle::Grant { control, napplet } => (control, json!({"op": "grant", "napplet": napplet})),
        Circle::Revoke { control, napplet } => {
            (control, json!({"op": "revoke", "napplet": napplet}))
        }
    };
    match super::run::control(&control.control, &request) {
        Ok(answer) => {
            if let Some(notice) = answer.get("notice").and_then(Value::as_str) {
                eprintln!("weft circle: napplet {notice}");
            }
            println!("{answer}");
            if answer.get("ok") == Some(&Value::Bool(false)) {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("weft circle: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: &ServeArgs) -> ExitCode {
    let config = match std::fs::read_to_string(&args.config)
        .map_err(|e| e.to_string())
        .and_then(|t| CircleConfig::parse(&t))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weft circle serve: {}: {e}", args.config.display());
            return ExitCode::from(2);
        }
    };
    let (_keep, stop) = smol::channel::bounded::<()>(1);
    match super::run::serve(config, stop, |b| {
        let members = b
            .members
            .map(|a| format!(" members ws://{a}/member"))
            .unwrap_or_default();
        eprintln!(
            "weft circle serve: listening ws://{}/napplet{members} pubkey {}",
            b.listen,
            weft_proto::codec::hex::encode(&b.pubkey)
        );
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft circle serve: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `weft sim circle`'s flags.
#[derive(Args, Debug)]
pub struct SimCircleArgs {
    /// The seed; the same seed gives the same report.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Run this many seeds in turn, from --seed up, stopping at the first violation.
    #[arg(long, default_value_t = 1)]
    pub seeds: u64,
    /// Circle members.
    #[arg(long, default_value_t = 16)]
    pub devices: usize,
    /// Strangers on the transport (a circle key and links to members, no pairing).
    #[arg(long, default_value_t = 3)]
    pub strangers: usize,
    /// Pairings per member, about.
    #[arg(long, default_value_t = 3)]
    pub degree: usize,
    /// Seconds of the faulty phase.
    #[arg(long, default_value_t = 20)]
    pub duration: u64,
    /// Frames lost in the faulty phase, per thousand.
    #[arg(long, default_value_t = 20)]
    pub loss: u32,
    /// Mean seconds between partitions; 0 for none.
    #[arg(long, default_value_t = 8)]
    pub partition_every: u64,
    /// Mean seconds between crashes; 0 for none.
    #[arg(long, default_value_t = 10)]
    pub crash_every: u64,
    /// Mean seconds between one device's napplet actions (a publish or a subscription).
    #[arg(long, default_value_t = 6)]
    pub act_every: u64,
}

/// `weft sim circle`: one JSON report line per seed (the text report for one seed); exits
/// non-zero with the seed and the first invariant a run violated.
pub fn sim(args: &SimCircleArgs) -> ExitCode {
    use std::time::Duration;
    use weft_sim::circle::{Scenario, run};
    let every = |s: u64| (s > 0).then(|| Duration::from_secs(s));
    for seed in args.seed..args.seed.saturating_add(args.seeds.max(1)) {
        let base = Scenario::small(seed);
        let scenario = Scenario {
            devices: args.devices.max(2),
            strangers: args.strangers,
            degree: args.degree,
            duration: Duration::from_secs(args.duration),
            loss_permille: args.loss.min(1000),
            partition_every: every(args.partition_every),
            crash_every: every(args.crash_every),
            act_every: Duration::from_secs(args.act_every.max(1)),
            max_events: base.max_events.max(args.devices as u64 * 200_000),
            ..base
        };
        match run(&scenario) {
            Ok(r) if args.seeds > 1 => println!("{}", r.to_json()),
            Ok(r) => println!("{r}"),
            Err(v) => {
                eprintln!("weft sim circle: {v}\n{}", v.report);
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
