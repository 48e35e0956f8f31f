//! Running `weft circle serve`, and the client commands that talk to its control face
//! (`weft circle info`, `weft circle pair invite|accept|record|take`, `weft circle grant|revoke`).

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::path::Path;

use smol::channel::Receiver;
use weft_proto::nostr::event::Event;

use super::config::CircleConfig;
use super::serve::{CircleServe, MAX_MESSAGE_BYTES};
use crate::host::{Endpoint, Host, Listener};
use crate::nostr::RedbStore;
use crate::state_dir::prepare_dir;
use crate::ws::{Ws, WsConfig, WsHooks};

/// The host of `weft circle serve`.
pub type CircleHost = Host<Ws<CircleServe<RedbStore>>, WsHooks<fn(Infallible)>>;

fn drop_app(app: Infallible) {
    match app {}
}

/// The pairing records kept in `dir` (files that do not read as events are skipped, named).
pub fn load_pairings(dir: &Path) -> io::Result<Vec<Event>> {
    let mut out = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    names.sort();
    for path in names {
        match std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| Event::parse(&t).ok())
        {
            Some(e) => out.push(e),
            None => eprintln!("weft circle serve: {} is no pairing record", path.display()),
        }
    }
    Ok(out)
}

/// Where `weft circle serve` listens, once it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    /// The napplet and control face.
    pub listen: SocketAddr,
    /// The member face, when there is one.
    pub members: Option<SocketAddr>,
    /// This user's circle key.
    pub pubkey: [u8; 32],
}

/// Runs the shell for `config` until `stop` yields (or forever); `ready` gets the bound
/// addresses once it listens and its store is open.
pub fn serve(
    config: CircleConfig,
    stop: Receiver<()>,
    ready: impl FnOnce(Bound),
) -> io::Result<()> {
    prepare_dir(&config.data_dir, false)?;
    let pairings_dir = config.data_dir.join("pairings");
    prepare_dir(&pairings_dir, false)?;
    let store = RedbStore::open_dir(&config.data_dir.join("events"))?;
    let mut rng = crate::os_rng();
    let secret = super::key::load_or_make(&config.key_path(), crate::server_provider(), &mut rng)?;
    let pairings = load_pairings(&pairings_dir)?;
    let listener = Listener::bind(&Endpoint::Tcp(config.listen))?;
    let listen = match listener.endpoint()? {
        Endpoint::Tcp(a) => a,
        _ => config.listen,
    };
    let mut listeners = vec![listener];
    let mut members = None;
    if let Some(addr) = config.member_listen {
        let l = Listener::bind(&Endpoint::Tcp(addr))?;
        members = match l.endpoint()? {
            Endpoint::Tcp(a) => Some(a),
            _ => Some(addr),
        };
        listeners.push(l);
    }
    let mut machine = CircleServe::new(
        &config,
        secret,
        store,
        pairings,
        Some(pairings_dir),
        rng,
        crate::now(),
    )?;
    machine.set_listen(listen, config.origins.clone());
    let pubkey = machine.shell().pubkey();
    let ws = Ws::new(machine, WsConfig::new(MAX_MESSAGE_BYTES));
    let mut host: CircleHost = Host::new(ws, WsHooks(drop_app as fn(Infallible)));
    ready(Bound {
        listen,
        members,
        pubkey,
    });
    smol::block_on(smol::future::or(
        crate::smol::run(&mut host, listeners),
        async {
            let _ = stop.recv().await;
            Ok(())
        },
    ))
}

/// Sends one control request to the shell at `url` (`ws://…/control?token=…`) and returns its
/// answer.
pub fn control(url: &str, request: &serde_json::Value) -> io::Result<serde_json::Value> {
    use tungstenite::Message;
    let (mut ws, _) = tungstenite::connect(url).map_err(|e| io::Error::other(e.to_string()))?;
    ws.send(Message::Text(request.to_string().into()))
        .map_err(|e| io::Error::other(e.to_string()))?;
    loop {
        match ws.read().map_err(|e| io::Error::other(e.to_string()))? {
            Message::Text(t) => {
                let _ = ws.close(None);
                return serde_json::from_str(&t).map_err(|e| io::Error::other(e.to_string()));
            }
            Message::Close(_) => return Err(io::Error::other("closed without an answer")),
            _ => {}
        }
    }
}
