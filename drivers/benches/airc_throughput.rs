//! AIRC message throughput (issue #4), `cargo bench -p weft-drivers --bench airc_throughput`:
//! messages per second through one realm and across two, each beside the Ed25519 sign and verify
//! ceilings of the server's provider measured in the same run.
//!
//! - One realm: a sender client and a listener client on the realm's Unix socket. The sender
//!   pipelines a round's `MESSAGES` (writes them all, then reads their acks); the listener reads
//!   each message and acks it `delivered`. A message counts once its sender holds its ack, and a
//!   round ends when the sender holds every ack and the listener has read every message.
//! - Two realms: `b.test` and `a.test` on loopback, peered by static entries over TLS (a CA made
//!   here with rcgen, each peer face presenting a certificate for its realm) with each other's
//!   Ed25519 key pinned (§8.2 `known_keys`). A client at `b.test` sends to a listener at
//!   `a.test`: `b.test` signs every message, `a.test` verifies it before delivering it.
//! - The ceilings: `weft_drivers::server_provider()` signing and verifying one message-sized
//!   input in a loop on this thread: what one core can do, the bound on a one-threaded server.
//!
//! Each rate is the median of `ROUNDS` rounds. A hand-rolled loop rather than criterion keeps
//! the dependency tree small, as in the other benches.

#[path = "../tests/common/tls_ca.rs"]
mod tls_ca;
use tls_ca::Ca;

use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Instant;

use weft_drivers::airc::client::{Client, message_id, new_message};
use weft_drivers::airc::config::FileConfig;
use weft_drivers::airc::serve::{ServeConfig, serve};
use weft_proto::airc::client::MAX_UNACKED;
use weft_proto::airc::frame::AckStatus;

/// Messages in one round, all written before the first ack is read.
const MESSAGES: usize = 2_000;
/// Rounds per row; the median is reported.
const ROUNDS: usize = 5;
/// Signatures or verifications in one round of a ceiling measurement.
const CRYPTO_OPS: usize = 4_000;
/// A body about a chat line long.
const BODY: &str = "the quick brown fox jumps over the lazy dog, twice: the quick brown fox";

/// A realm server running on a thread until `end`.
struct Running {
    stop: smol::channel::Sender<()>,
    thread: thread::JoinHandle<io::Result<()>>,
    socket: PathBuf,
}

impl Running {
    fn start(config: ServeConfig) -> Self {
        let socket = config.client_socket.clone();
        let (stop, stopped) = smol::channel::bounded(1);
        let (ready, started) = std::sync::mpsc::channel();
        let thread = thread::spawn(move || {
            serve(config, stopped, move || {
                let _ = ready.send(());
            })
        });
        started.recv().expect("a realm server starts");
        Self {
            stop,
            thread,
            socket,
        }
    }

    fn end(self) {
        let _ = self.stop.send_blocking(());
        self.thread.join().unwrap().unwrap();
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs one round from `sender` (acting as `from`) to `to`, which `listener` has bound, and
/// returns messages per second; both clients come back for the next round.
fn round(mut sender: Client, listener: Client, from: &str, to: &str) -> (f64, Client, Client) {
    let mut rng = weft_drivers::os_rng();
    let msgs: Vec<_> = (0..MESSAGES)
        .map(|_| new_message(message_id(&mut rng), from, to, BODY, None))
        .collect();
    let reader = thread::spawn(move || {
        let mut listener = listener;
        let mut read = 0;
        while read < MESSAGES {
            let mut ours = false;
            listener
                .receive(|m| ours = m.body == BODY)
                .expect("the listener reads");
            read += usize::from(ours);
        }
        listener
    });
    let start = Instant::now();
    // As many in flight as the client machine holds unacked.
    let mut posted = msgs.iter();
    let mut in_flight = 0;
    let mut acked = 0;
    while acked < MESSAGES {
        while in_flight < MAX_UNACKED {
            let Some(m) = posted.next() else { break };
            sender.post(m.clone()).unwrap();
            in_flight += 1;
        }
        let ack = sender.next_ack().unwrap().expect("no message is refused");
        assert_eq!(ack.status, AckStatus::Delivered, "ack {ack:?}");
        in_flight -= 1;
        acked += 1;
    }
    let listener = reader.join().unwrap();
    let rate = MESSAGES as f64 / start.elapsed().as_secs_f64();
    (rate, sender, listener)
}

/// The median of `ROUNDS` rounds between a fresh sender at `send_at` and a listener at
/// `listen_at` bound to `bind`.
fn rate(send_at: &Path, listen_at: &Path, bind: &str, from: &str, to: &str) -> f64 {
    let mut listener = Client::connect(listen_at).unwrap();
    listener.bind(vec![bind.into()]).unwrap();
    let mut sender = Client::connect(send_at).unwrap();
    // One message first, so the peer link (if any) is up before the clock starts.
    let warm = thread::spawn(move || {
        let mut l = listener;
        l.receive(|_| {}).unwrap();
        l
    });
    let ack = sender
        .message(new_message(
            message_id(&mut weft_drivers::os_rng()),
            from,
            to,
            "warm",
            None,
        ))
        .unwrap();
    assert_eq!(ack.status, AckStatus::Delivered);
    listener = warm.join().unwrap();
    let mut rates = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let (r, s, l) = round(sender, listener, from, to);
        rates.push(r);
        (sender, listener) = (s, l);
    }
    median(rates)
}

fn median(mut rates: Vec<f64>) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// Operations per second of `op`, median of `ROUNDS` rounds of `CRYPTO_OPS`.
fn ceiling(mut op: impl FnMut(usize) -> bool) -> f64 {
    let rates = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            let mut ok = 0usize;
            for i in 0..CRYPTO_OPS {
                ok += usize::from(std::hint::black_box(op(i)));
            }
            assert_eq!(ok, CRYPTO_OPS);
            CRYPTO_OPS as f64 / start.elapsed().as_secs_f64()
        })
        .collect();
    median(rates)
}

/// One realm on a Unix socket: a listener at `me/inbox` and a sender in the same namespace.
fn one_realm() -> f64 {
    let dir = temp_dir("one");
    let realm = Running::start(ServeConfig::local(&dir, "me").unwrap());
    let r = rate(&realm.socket, &realm.socket, "me/inbox", "bench", "inbox");
    realm.end();
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// A realm of the two-realm row: its name, namespace, directory and peer face address.
struct Realm {
    name: &'static str,
    ns: &'static str,
    dir: PathBuf,
    peer: std::net::SocketAddr,
}

impl Realm {
    fn new(name: &'static str, ns: &'static str) -> Self {
        let dir = temp_dir(name);
        // A port the OS had free a moment ago: each realm names the other's as a static entry.
        let peer = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        Self {
            name,
            ns,
            dir,
            peer,
        }
    }

    /// The public half of the realm's signing key, made as `weft airc serve` makes it.
    fn public_key(&self) -> String {
        use weft_drivers::airc::realm_key::{KEY_FILE, load_or_create};
        let seed = load_or_create(&self.dir.join(KEY_FILE), &mut weft_drivers::os_rng()).unwrap();
        let public = weft_drivers::server_provider().ed25519_public_key(&seed);
        weft_proto::codec::base64::encode(&public)
    }

    /// This realm's configuration: its peer face over TLS with a certificate from `ca` for its
    /// own name, and `other` as a static TLS entry with its key pinned.
    fn config(&self, other: &Realm, ca: &Ca) -> ServeConfig {
        let tls = ca.files(&self.dir, self.name);
        let path = |p: Option<PathBuf>| p.unwrap().display().to_string();
        let text = format!(
            "realm = \"{realm}\"\npeer_listen = \"{listen}\"\n\n\
             [namespaces]\n{uid} = [\"{ns}\"]\n\n\
             [tls]\ncert = \"{cert}\"\nkey = \"{key}\"\ntrust = \"{trust}\"\n\n\
             [peers.\"{other}\"]\naddress = \"{at}\"\ntransport = \"tls\"\n\n\
             [known_keys]\n\"{other}\" = [\"{pinned}\"]\n",
            realm = self.name,
            listen = self.peer,
            uid = rustix::process::getuid().as_raw(),
            ns = self.ns,
            cert = path(tls.cert),
            key = path(tls.key),
            trust = path(tls.trust),
            other = other.name,
            at = other.peer,
            pinned = other.public_key(),
        );
        let mut config = ServeConfig::local(&self.dir, self.ns).unwrap();
        FileConfig::parse(&text)
            .unwrap()
            .apply(&mut config)
            .unwrap();
        config
    }
}

/// Two realms over TLS: a sender at `b.test` to a listener at `a.test`.
fn two_realms() -> f64 {
    let ca = Ca::new();
    let a = Realm::new("a.test", "alice");
    let b = Realm::new("b.test", "bob");
    let (config_a, config_b) = (a.config(&b, &ca), b.config(&a, &ca));
    let realm_a = Running::start(config_a);
    let realm_b = Running::start(config_b);
    let r = rate(
        &realm_b.socket,
        &realm_a.socket,
        "alice/inbox",
        "y",
        "//a.test/alice/inbox",
    );
    realm_a.end();
    realm_b.end();
    for realm in [&a, &b] {
        let _ = std::fs::remove_dir_all(&realm.dir);
    }
    r
}

fn main() {
    let p = weft_drivers::server_provider();
    let seed = weft_proto::crypto::generate_ed25519(&mut weft_drivers::os_rng());
    let public = p.ed25519_public_key(&seed);
    // About what a realm signs per message: a canonical-JSON message envelope.
    let inputs: Vec<Vec<u8>> = (0..CRYPTO_OPS)
        .map(|i| format!(r#"{{"body":"{BODY}","from":"airc://b.test/bob/y","id":"{i}"}}"#).into())
        .collect();
    let sigs: Vec<[u8; 64]> = inputs.iter().map(|m| p.ed25519_sign(&seed, m)).collect();
    let sign = ceiling(|i| {
        std::hint::black_box(p.ed25519_sign(&seed, &inputs[i]));
        true
    });
    let verify = ceiling(|i| p.ed25519_verify(&public, &inputs[i], &sigs[i]));
    let one = one_realm();
    let two = two_realms();
    println!(
        "AIRC throughput ({MESSAGES} messages a round, median of {ROUNDS}; provider {})",
        p.name()
    );
    println!("{:<58} {:>12}", "row", "per second");
    println!(
        "{:<58} {:>12.0}",
        "one realm, Unix sockets, acks included (messages)", one
    );
    println!(
        "{:<58} {:>12.0}",
        "two realms over TLS, signed by b, verified by a (messages)", two
    );
    println!("{:<58} {:>12.0}", "Ed25519 sign, one core (ceiling)", sign);
    println!(
        "{:<58} {:>12.0}",
        "Ed25519 verify, one core (ceiling)", verify
    );
}
