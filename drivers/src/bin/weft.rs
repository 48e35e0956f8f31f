//! The `weft` program: relay, realm server, node, simulator and demo over the weft-proto machines.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use weft_drivers::airc::client::{Client, message_id, new_message};
use weft_drivers::airc::config::{FileConfig, Flags, serve_config};
use weft_drivers::airc::serve::serve;
use weft_proto::airc::frame::AckStatus;

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
    Relay(RelayArgs),
    /// Run an AIRC realm server, or act as an AIRC client (AIRC draft 0.2).
    #[command(subcommand)]
    Airc(Airc),
    /// Run an always-on Minca node serving `/peer` (Minca 04 Network §5.3).
    Node,
    /// Run a simulator scenario in virtual time.
    #[command(subcommand)]
    Sim(Sim),
    /// Start everything locally on embedded defaults and show it working.
    Demo,
}

#[derive(Subcommand, Debug)]
enum Airc {
    /// Serve a realm: the client face on a Unix socket, durable state under --data-dir.
    Serve(ServeArgs),
    /// Send one message and wait for its ack; exits non-zero unless delivered or queued.
    Send {
        /// The destination: `ns/name`, or `//realm/ns/name`.
        to: String,
        /// The text.
        body: String,
        /// The sending endpoint inside your namespace (default `cli`).
        #[arg(long = "as", default_value = "cli")]
        from: String,
        /// Seconds the message may wait before it expires (default 86 400).
        #[arg(long)]
        ttl: Option<u64>,
        #[command(flatten)]
        socket: SocketArg,
    },
    /// Bind names and print each message as a JSON line, acking it delivered.
    Listen {
        /// Names to bind, inside your namespace: `ns/name`, `ns/`, `ns/*`.
        #[arg(required = true)]
        names: Vec<String>,
        /// Exit after this many messages (default: never).
        #[arg(long)]
        count: Option<u64>,
        #[command(flatten)]
        socket: SocketArg,
    },
}

#[derive(Subcommand, Debug)]
enum Sim {
    /// AIRC realm servers and clients under link drops, crashes, restarts and stalled acks;
    /// exits non-zero with the seed and the first invariant a run violated.
    AircRealms(AircRealmsArgs),
}

#[derive(Args, Debug)]
struct AircRealmsArgs {
    /// Realm servers.
    #[arg(long, default_value_t = 3)]
    realms: usize,
    /// Clients, spread over the realms (default: 4 a realm, at least 12).
    #[arg(long)]
    clients: Option<usize>,
    /// Messages sent in all.
    #[arg(long, default_value_t = 200)]
    messages: usize,
    /// The seed; the same seed gives the same trace and report.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Run this many seeds in turn, from --seed up, stopping at the first violation.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Virtual seconds of faults, before the quiet heal phase.
    #[arg(long, default_value_t = 300)]
    duration: u64,
    /// Write a JSON-lines trace of the (last) run here.
    #[arg(long)]
    trace: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct RelayArgs {
    /// The address to listen on.
    #[arg(long, default_value = weft_drivers::minca::relay::DEFAULT_LISTEN)]
    listen: std::net::SocketAddr,
    /// Take the client address from the last hop of X-Forwarded-For: only behind a proxy that
    /// sets it.
    #[arg(long)]
    trust_proxy: bool,
    /// The secret shared with the TURN server (coturn `use-auth-secret`).
    #[arg(long, env = "WEFT_TURN_SECRET", hide_env_values = true)]
    turn_secret: Option<String>,
    /// A TURN URL to offer (`turn:` or `turns:`), repeatable; the variable takes a comma list.
    #[arg(long = "turn-url", env = "WEFT_TURN_URLS", value_delimiter = ',')]
    turn_urls: Vec<String>,
    /// How long TURN passwords last, in seconds.
    #[arg(long, env = "WEFT_TURN_TTL", default_value_t = weft_proto::minca::turn::DEFAULT_TURN_TTL_S)]
    turn_ttl: u64,
}

#[derive(Args, Debug)]
struct SocketArg {
    /// The realm's client socket.
    #[arg(long, default_value = "./weft-data/airc/airc.sock")]
    socket: PathBuf,
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// A TOML file for everything else (see docs/airc-server.md): realm, data_dir,
    /// client_socket, client_tcp, namespaces, known_keys, trusted_unsigned, policy,
    /// policy_default_allow, accept_offers, auto_accept, tls (cert, key; reserved). An
    /// unknown key is refused. Flags given here override the file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The realm this server routes for (default: localhost).
    #[arg(long)]
    realm: Option<String>,
    /// Where durable state (spool, seen ids) lives (default: ./weft-data/airc).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The client-face Unix socket (default: airc.sock in --data-dir).
    #[arg(long)]
    client_socket: Option<PathBuf>,
    /// Also serve clients on this loopback TCP address (IPv4 or IPv6 loopback, with a port); a
    /// client's uid is the owner of its socket in /proc/net/tcp. Any other address is refused.
    #[arg(long)]
    client_tcp: Option<std::net::SocketAddr>,
    /// The operator's uid → namespaces table, `UID=NS[,NS…]`, repeatable; replaces the file's
    /// namespaces table. Default: your uid → your user name.
    #[arg(long = "namespaces")]
    namespaces: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Demo => weft_drivers::demo::run(&mut std::io::stdout().lock()),
        Command::Relay(args) => relay(args),
        Command::Airc(cmd) => airc(cmd),
        Command::Node => not_yet("node", "the always-on Minca node and its /peer endpoint"),
        Command::Sim(Sim::AircRealms(args)) => sim_airc_realms(&args),
    }
}

fn airc(cmd: Airc) -> ExitCode {
    let result = match cmd {
        Airc::Serve(args) => serve_realm(args),
        Airc::Send {
            to,
            body,
            from,
            ttl,
            socket,
        } => (|| {
            let mut c = Client::connect(&socket.socket)?;
            let id = message_id(&mut weft_drivers::os_rng());
            let ack = c.message(new_message(id, &from, &to, &body, ttl))?;
            println!("{}", serde_json::to_string(&ack).unwrap_or_default());
            Ok(ack.status != AckStatus::Failed)
        })(),
        Airc::Listen {
            names,
            count,
            socket,
        } => (|| {
            let mut c = Client::connect(&socket.socket)?;
            for pattern in c.bind(names)? {
                eprintln!("bound {pattern}");
            }
            let mut n = 0;
            while count.is_none_or(|c| n < c) {
                c.receive(|m| println!("{}", serde_json::to_string(m).unwrap_or_default()))?;
                n += 1;
            }
            Ok(true)
        })(),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("weft airc: {e}");
            ExitCode::FAILURE
        }
    }
}

fn relay(args: RelayArgs) -> ExitCode {
    use weft_drivers::minca::relay::{RelayOptions, serve};
    use weft_proto::minca::turn::TurnConfig;
    let turn = match (&args.turn_secret, args.turn_urls.is_empty()) {
        (Some(secret), false) => {
            match TurnConfig::new(secret.as_bytes(), args.turn_urls.clone(), args.turn_ttl) {
                Ok(t) => Some(t),
                Err(e) => {
                    eprintln!("weft relay: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        (None, true) => None,
        _ => {
            eprintln!("weft relay: TURN needs both --turn-secret and at least one --turn-url");
            return ExitCode::from(2);
        }
    };
    let options = RelayOptions {
        listen: args.listen,
        trust_proxy: args.trust_proxy,
        turn,
    };
    let (_keep, stop) = smol::channel::bounded::<()>(1);
    match serve(options, stop, |addr| {
        eprintln!("weft relay: listening on {addr}")
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft relay: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Clients a realm gets when `--clients` is not given.
const CLIENTS_PER_REALM: usize = 4;

/// The event budget per message of a run, past the scenario's default: a run that takes more is
/// livelocked. 100 000 messages take about 7.5 events each.
const EVENTS_PER_MESSAGE: u64 = 50;

fn sim_airc_realms(args: &AircRealmsArgs) -> ExitCode {
    use weft_sim::airc::{Scenario, run};
    let clients = args
        .clients
        .unwrap_or(args.realms.saturating_mul(CLIENTS_PER_REALM).max(12));
    if args.realms == 0 || clients < 2 {
        eprintln!("weft sim airc-realms: want at least one realm and two clients");
        return ExitCode::from(2);
    }
    for seed in args.seed..args.seed.saturating_add(args.seeds.max(1)) {
        let base = Scenario::new(seed);
        let scenario = Scenario {
            realms: args.realms,
            clients,
            messages: args.messages,
            duration: std::time::Duration::from_secs(args.duration),
            // A bound for a livelock, not for a large honest run: each message takes a few
            // dozen events (frames each way, acks, persists, retries).
            max_events: base.max_events.max(
                u64::try_from(args.messages)
                    .unwrap_or(u64::MAX)
                    .saturating_mul(EVENTS_PER_MESSAGE),
            ),
            ..base
        };
        let mut file = match &args.trace {
            Some(path) => match std::fs::File::create(path) {
                Ok(f) => Some(std::io::BufWriter::new(f)),
                Err(e) => {
                    eprintln!("weft sim airc-realms: {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            },
            None => None,
        };
        let result = run(
            &scenario,
            file.as_mut().map(|f| f as &mut dyn std::io::Write),
        );
        if let Some(Err(e)) = file.as_mut().map(std::io::Write::flush) {
            eprintln!("weft sim airc-realms: writing the trace: {e}");
        }
        match result {
            Ok(report) => {
                if args.seeds > 1 {
                    println!("{}", report.to_json());
                } else {
                    println!("{report}");
                }
            }
            Err(v) => {
                eprintln!("weft sim airc-realms: {v}");
                eprintln!("{}", v.report);
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

fn serve_realm(args: ServeArgs) -> std::io::Result<bool> {
    let file = match &args.config {
        Some(path) => FileConfig::load(path)?,
        None => FileConfig::default(),
    };
    let flags = Flags {
        realm: args.realm,
        data_dir: args.data_dir,
        client_socket: args.client_socket,
        client_tcp: args.client_tcp,
        namespaces: args.namespaces,
    };
    let config = serve_config(&file, &flags, &sanitize(&login_name()))?;
    if config.tls.is_some() {
        eprintln!("weft airc serve: [tls] is reserved: no peer face serves TLS yet");
    }
    let socket = config.client_socket.clone();
    let (_keep, stop) = smol::channel::bounded::<()>(1);
    let tcp = config.client_tcp;
    serve(config, stop, || {
        eprintln!("weft airc serve: listening on {}", socket.display());
        if let Some(tcp) = tcp {
            eprintln!("weft airc serve: listening on tcp {tcp}");
        }
    })?;
    Ok(true)
}

/// The invoking user's login name: `$USER`, `$LOGNAME`, or the passwd entry of the uid.
fn login_name() -> String {
    let from_env = ["USER", "LOGNAME"]
        .into_iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|v| !v.is_empty());
    from_env
        .or_else(|| {
            let uid = rustix::process::getuid().as_raw().to_string();
            let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
            passwd
                .lines()
                .map(|l| l.split(':').collect::<Vec<_>>())
                .find(|f| f.get(2) == Some(&uid.as_str()))
                .map(|f| f[0].to_string())
        })
        .unwrap_or_else(|| "local".into())
}

/// A user name as a namespace segment: letters, digits, `-` and `_`, not starting or ending with
/// `-`.
fn sanitize(user: &str) -> String {
    let s: String = user
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let s = s.trim_matches('-');
    if s.is_empty() {
        "local".into()
    } else {
        s.chars().take(63).collect()
    }
}

/// Says plainly that a subcommand is not built yet, and fails so no script mistakes it for success.
fn not_yet(name: &str, what: &str) -> ExitCode {
    eprintln!(
        "weft {name}: {what} is not built yet; see the open issues and docs/architecture.md."
    );
    ExitCode::from(2)
}
