//! The AIRC part of `weft demo`: realm servers on real sockets, on embedded defaults.

use std::io::{self, Write};

/// Starts a realm server on a fresh Unix socket, binds a listener, sends it a message, and checks
/// that the ack and the delivered message agree.
pub(super) fn exchange(out: &mut impl Write) -> io::Result<bool> {
    use crate::airc::client::{Client, message_id, new_message};
    use crate::airc::serve::{ServeConfig, serve};
    use weft_proto::airc::frame::AckStatus;

    let dir = std::env::temp_dir().join(format!("weft-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = ServeConfig::local(&dir, "demo")?;
    let socket = config.client_socket.clone();
    let (stop, stopped) = smol::channel::bounded(1);
    let (ready, started) = std::sync::mpsc::sync_channel(1);
    let server = std::thread::spawn(move || {
        serve(config, stopped, move || {
            let _ = ready.send(());
        })
    });
    started.recv().map_err(io::Error::other)?;
    writeln!(out, "  realm localhost listening on {}", socket.display())?;

    let mut listener = Client::connect(&socket)?;
    let bound = listener.bind(vec!["demo/inbox".into()])?;
    writeln!(out, "  listener bound {}", bound.join(" "))?;
    let reader = std::thread::spawn(move || {
        let mut got = None;
        listener.receive(|m| got = Some(m.clone())).map(|()| got)
    });
    let mut sender = Client::connect(&socket)?;
    let id = message_id(&mut crate::os_rng());
    let ack = sender.message(new_message(
        id.clone(),
        "hello-bot",
        "inbox",
        "hello, realm",
        None,
    ))?;
    writeln!(out, "  sender got ack {:?}", ack.status)?;
    let got = reader
        .join()
        .map_err(|_| io::Error::other("listener panicked"))??;
    if let Some(m) = &got {
        writeln!(
            out,
            "  listener read {:?} from {} to {}",
            m.body, m.from, m.to
        )?;
    }
    let _ = stop.send_blocking(());
    server
        .join()
        .map_err(|_| io::Error::other("server panicked"))??;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ack.status == AckStatus::Delivered && got.is_some_and(|m| m.id == id))
}

/// One realm of the two-realm exchange: its name, the namespace this user holds there, its data
/// directory and its peer face's address.
struct Realm {
    name: &'static str,
    ns: &'static str,
    dir: std::path::PathBuf,
    peer: std::net::SocketAddr,
}

impl Realm {
    fn new(name: &'static str, ns: &'static str) -> io::Result<Self> {
        let dir = std::env::temp_dir().join(format!("weft-demo-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        crate::state_dir::prepare_dir(&dir, true)?;
        // A port the OS had free a moment ago: both realms must know each other's address before
        // either starts, as static entries in an operator's configuration do.
        let peer = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        Ok(Self {
            name,
            ns,
            dir,
            peer,
        })
    }

    /// The public half of this realm's signing key, made here as `weft airc serve` makes it on
    /// first start, so the other realm can pin it (§8.2 `known_keys`).
    fn public_key(&self) -> io::Result<String> {
        use crate::airc::realm_key::{KEY_FILE, load_or_create};
        let seed = load_or_create(&self.dir.join(KEY_FILE), &mut crate::os_rng())?;
        let public = crate::server_provider().ed25519_public_key(&seed);
        Ok(weft_proto::codec::base64::encode(&public))
    }

    /// The server configuration: this user's uid → the realm's namespace, a peer face on
    /// loopback, and the other realm as a static entry with its pinned key.
    fn config(&self, other: &Realm) -> io::Result<crate::airc::serve::ServeConfig> {
        use crate::airc::config::FileConfig;
        let text = format!(
            "realm = \"{realm}\"\npeer_listen = \"{listen}\"\n\n\
             [namespaces]\n{uid} = [\"{ns}\"]\n\n\
             [peers.\"{other}\"]\naddress = \"{at}\"\ntransport = \"tcp\"\n\n\
             [known_keys]\n\"{other}\" = [\"{key}\"]\n",
            realm = self.name,
            listen = self.peer,
            uid = rustix::process::getuid().as_raw(),
            ns = self.ns,
            other = other.name,
            at = other.peer,
            key = other.public_key()?,
        );
        let mut config = crate::airc::serve::ServeConfig::local(&self.dir, self.ns)?;
        FileConfig::parse(&text)?.apply(&mut config)?;
        Ok(config)
    }
}

/// A realm server running on a thread until `stop` is sent.
struct Running {
    stop: smol::channel::Sender<()>,
    thread: std::thread::JoinHandle<io::Result<()>>,
    socket: std::path::PathBuf,
}

impl Running {
    fn start(config: crate::airc::serve::ServeConfig) -> io::Result<Self> {
        let socket = config.client_socket.clone();
        let (stop, stopped) = smol::channel::bounded(1);
        let (ready, started) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::spawn(move || {
            crate::airc::serve::serve(config, stopped, move || {
                let _ = ready.send(());
            })
        });
        started
            .recv()
            .map_err(|_| io::Error::other("a realm server did not start"))?;
        Ok(Self {
            stop,
            thread,
            socket,
        })
    }

    fn end(self) -> io::Result<()> {
        let _ = self.stop.send_blocking(());
        self.thread
            .join()
            .map_err(|_| io::Error::other("a realm server panicked"))?
    }
}

/// A passport request for `op` acting as `acting`, every other field absent.
fn passport_request(op: &str, acting: &str) -> weft_proto::airc::frame::PassportRequest {
    weft_proto::airc::frame::PassportRequest {
        op: op.into(),
        acting: Some(acting.into()),
        passport: None,
        id: None,
        label: None,
        to: None,
        uses: None,
        ttl: None,
        direction: None,
        link_ttl: None,
        and_links: None,
    }
}

/// Whether `acting`'s server lists link `id` as active, asking for up to `LINK_WAIT`.
fn link_active(c: &mut crate::airc::client::Client, acting: &str, id: &str) -> io::Result<bool> {
    use weft_proto::airc::client::{Reply, Request};
    use weft_proto::airc::frame::LinkRequest;
    const LINK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
    let deadline = std::time::Instant::now() + LINK_WAIT;
    loop {
        let listed = c.request(Request::Link(LinkRequest {
            op: "list".into(),
            acting: Some(acting.into()),
            peer: None,
            id: None,
            label: None,
            direction: None,
        }))?;
        let listed = match listed {
            Ok(Reply::Linked(l)) => Some(l),
            _ => None,
        };
        let active = listed.and_then(|l| l.links).is_some_and(|links| {
            links.iter().any(|l| {
                l.get("id").and_then(|v| v.as_str()) == Some(id)
                    && l.get("state").and_then(|v| v.as_str()) == Some("active")
            })
        });
        if active || std::time::Instant::now() > deadline {
            return Ok(active);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Two realms on loopback (§8.4, §12): `a.test` issues a passport, `b.test` redeems it across
/// the peer link, and a message signed by `b.test` is delivered at `a.test` over the link the
/// passport opened.
pub(super) fn two_realms(out: &mut impl Write) -> io::Result<bool> {
    use crate::airc::client::{Client, message_id, new_message};
    use weft_proto::airc::client::{Reply, Request};
    use weft_proto::airc::frame::AckStatus;

    let a = Realm::new("a.test", "alice")?;
    let b = Realm::new("b.test", "bob")?;
    let (config_a, config_b) = (a.config(&b)?, b.config(&a)?);
    let realm_a = Running::start(config_a)?;
    let realm_b = Running::start(config_b)?;
    writeln!(
        out,
        "  realms a.test (peer face {}) and b.test (peer face {}), each pinning the other's Ed25519 key",
        a.peer, b.peer
    )?;

    let refused = |what: &str, r: crate::airc::client::Refusal| {
        io::Error::other(format!("{what} refused: {r:?}"))
    };
    let passported = |reply: Reply| match reply {
        Reply::Passported(p) => Ok(p),
        other => Err(io::Error::other(format!(
            "not a passported reply: {other:?}"
        ))),
    };
    let mut at_a = Client::connect(&realm_a.socket)?;
    let issued = at_a
        .request(Request::Passport(passport_request("new", "alice/x")))?
        .map_err(|r| refused("passport new", r))
        .and_then(passported)?;
    let line = issued.line.unwrap_or_default();
    writeln!(out, "  a.test issued a passport for alice/x: {line}")?;

    let mut at_b = Client::connect(&realm_b.socket)?;
    let mut redeem = passport_request("redeem", "bob/y");
    redeem.passport = Some(line);
    let redeemed = at_b
        .request(Request::Passport(redeem))?
        .map_err(|r| refused("passport redeem", r))
        .and_then(passported)?;
    let link = redeemed
        .link
        .as_ref()
        .and_then(|l| l.get("id"))
        .and_then(|id| id.as_str())
        .unwrap_or("none")
        .to_owned();
    writeln!(
        out,
        "  b.test redeemed it for bob/y over the peer link: {:?}, link {link}",
        redeemed.status
    )?;
    let redeemed_ok = redeemed.ok && redeemed.status == Some(AckStatus::Delivered);
    // a.test hears the grant by a control message over the link (§11.4), which may land after
    // the redemption's ack: wait (bounded) until a.test holds the link active too.
    let active = link_active(&mut at_a, "alice/x", &link)?;
    writeln!(
        out,
        "  a.test holds link {link} {}",
        if active { "active" } else { "NOT active" }
    )?;
    let linked = redeemed_ok && active;

    let mut listener = Client::connect(&realm_a.socket)?;
    listener.bind(vec!["alice/x".into()])?;
    let id = message_id(&mut crate::os_rng());
    // The listener reads (and acks) from now on: the link's notices (§11.1), spooled for alice/x
    // before it bound, come first, and a message behind unacked ones would wait in the spool.
    let wanted = id.clone();
    let reader = std::thread::spawn(
        move || -> io::Result<Option<weft_proto::airc::frame::Msg>> {
            for _ in 0..16 {
                let mut this = None;
                listener.receive(|m| this = Some(m.clone()))?;
                if this.as_ref().is_some_and(|m| m.id == wanted) {
                    return Ok(this);
                }
            }
            Ok(None)
        },
    );
    let ack = at_b.message(new_message(
        id.clone(),
        "y",
        "//a.test/alice/x",
        "hello across realms",
        None,
    ))?;
    writeln!(
        out,
        "  bob/y sent a message to //a.test/alice/x, signed by b.test: ack {:?}",
        ack.status
    )?;
    let got = reader
        .join()
        .map_err(|_| io::Error::other("the listener panicked"))??;
    if let Some(m) = &got {
        writeln!(out, "  alice/x read {:?} from {}", m.body, m.from)?;
    }
    drop((at_a, at_b));
    realm_a.end()?;
    realm_b.end()?;
    for r in [&a, &b] {
        let _ = std::fs::remove_dir_all(&r.dir);
    }
    Ok(linked
        && ack.status == AckStatus::Delivered
        && got.is_some_and(|m| m.from == "airc://b.test/bob/y"))
}
