//! `weft relay`: the [`RelayServer`] machine as a [`WsMachine`], so any runtime adapter drives
//! it through the WebSocket layer ([`crate::ws`]) (Minca 04 Network §1.4).
//!
//! The layer reads each request head: `GET /health` answers `{"ok":true}`, any other plain HTTP
//! request 426; an upgrade (on any path) is put to [`Relay::upgrade`], which asks the machine's
//! [`RelayServer::admit`]: a refusal goes back as a plain HTTP response with `Connection: close`.
//! The client address is the TCP peer, or with `trust_proxy` the last hop of `X-Forwarded-For`.
//! With [`RelayOptions::tls`] the listener runs TLS first, so clients dial `wss://` to it.
//!
//! Nothing here holds protocol meaning: every frame, close and tick goes to the machine, and its
//! outputs become frames, pings and closes in order.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use smol::channel::Receiver;
use weft_proto::core::rand_core::CryptoRng;
use weft_proto::core::{ConnId, Machine, Timestamp, Wakeup};
use weft_proto::minca::relay_server::{
    Input, MAX_WS_MESSAGE_BYTES, Output, RelayConfig, RelayServer,
};
use weft_proto::minca::turn::TurnConfig;

use crate::host::{Endpoint, Host, Listener, Peer, Remote, TlsServer};
use crate::ws::{Frame, NoDial, Refusal, Request, Ws, WsConfig, WsEffect, WsHooks, WsMachine};

/// The address `weft relay` listens on when told none.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";

/// How `weft relay` runs.
#[derive(Clone, Debug)]
pub struct RelayOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Take the client address from the last hop of `X-Forwarded-For` (only behind a proxy
    /// that sets it).
    pub trust_proxy: bool,
    /// TURN passwords to hand out, if any.
    pub turn: Option<TurnConfig>,
    /// Serve `wss://`: every connection opens with a TLS handshake presenting this certificate
    /// (the host layer's one TLS setup, [`crate::tls`]); `None` serves plain `ws://`.
    pub tls: Option<TlsServer>,
}

/// The relay machine with how its host determines client addresses.
#[derive(Debug)]
pub struct Relay<R> {
    /// The machine.
    pub server: RelayServer<R>,
    trust_proxy: bool,
}

impl<R: CryptoRng> Relay<R> {
    /// `server`, taking client addresses from `X-Forwarded-For` when `trust_proxy`.
    pub fn new(server: RelayServer<R>, trust_proxy: bool) -> Self {
        Self {
            server,
            trust_proxy,
        }
    }
}

/// `weft relay`'s host: the relay over the WebSocket layer, with hooks that dial nothing and
/// store nothing.
pub type RelayHost = Host<Ws<Relay<chacha20::ChaCha20Rng>>, WsHooks<fn(std::convert::Infallible)>>;

/// The relay for `options` over the WebSocket layer, ready for any adapter.
pub fn relay_host(options: &RelayOptions) -> RelayHost {
    let server = RelayServer::new(
        RelayConfig {
            turn: options.turn.clone(),
        },
        crate::server_provider(),
        crate::os_rng(),
    );
    let machine = Ws::new(
        Relay::new(server, options.trust_proxy),
        WsConfig::new(MAX_WS_MESSAGE_BYTES),
    );
    Host::new(machine, WsHooks(|never| match never {}))
}

/// Runs the relay on the smol adapter until `stop` yields (or forever). `ready` gets the bound
/// address once the relay listens (the port is the OS's choice when `listen` names port 0).
pub fn serve(
    options: RelayOptions,
    stop: Receiver<()>,
    ready: impl FnOnce(SocketAddr),
) -> io::Result<()> {
    let listener = match &options.tls {
        Some(server) => Listener::tls(options.listen, server.clone())?,
        None => Listener::bind(&Endpoint::Tcp(options.listen))?,
    };
    if let Endpoint::Tcp(addr) = listener.endpoint()? {
        ready(addr);
    }
    let mut host = relay_host(&options);
    smol::block_on(smol::future::or(
        crate::smol::run(&mut host, vec![listener]),
        async {
            let _ = stop.recv().await;
            Ok(())
        },
    ))
}

impl<R: CryptoRng> Machine for Relay<R> {
    type Input = Input;
    type Output = Output;
    fn handle(&mut self, now: Timestamp, input: Input) {
        self.server.handle(now, input);
    }
    fn poll(&mut self) -> Option<Output> {
        self.server.poll()
    }
    fn poll_timeout(&self) -> Option<Wakeup> {
        self.server.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        self.server.handle_timeout(now);
    }
}

impl<R: CryptoRng> WsMachine for Relay<R> {
    type Target = NoDial;
    type App = std::convert::Infallible;

    fn upgrade(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        peer: &Peer,
        request: &Request,
    ) -> Result<Input, Refusal> {
        let addr = client_addr(request, peer, self.trust_proxy);
        match self.server.admit(now, addr) {
            Ok(()) => Ok(Input::Opened { conn, addr }),
            Err(refusal) => Err(Refusal {
                status: refusal.http_status(),
                reason: refusal.reason().into(),
            }),
        }
    }
    fn message(&mut self, conn: ConnId, frame: Frame) -> Option<Input> {
        Some(match frame {
            Frame::Text(text) => Input::Text { conn, text },
            Frame::Binary(_) => Input::Binary { conn },
            // Pings and pongs are proof of life and count against the budget (§1.4).
            _ => Input::Control { conn },
        })
    }
    fn closed(&mut self, conn: ConnId) -> Option<Input> {
        Some(Input::Closed { conn })
    }
    fn dialled(&mut self, _conn: ConnId, target: NoDial) -> Option<Input> {
        match target {}
    }
    fn dial_failed(&mut self, target: NoDial) -> Option<Input> {
        match target {}
    }
    fn effect(&mut self, output: Output) -> Option<WsEffect<NoDial, Self::App>> {
        Some(match output {
            Output::Send { conn, text } => WsEffect::Text { conn, text },
            Output::Ping { conn } => WsEffect::Ping { conn },
            Output::Close { conn, code, reason } => WsEffect::Close {
                conn,
                code,
                reason: reason.into(),
            },
            _ => WsEffect::Unhandled,
        })
    }
}

/// The client address: the TCP peer, or with `trust_proxy` the last `X-Forwarded-For` hop (the
/// one the relay's own proxy appended); §1.4: "anywhere else a header is whatever the client
/// says". A Unix-socket peer is local.
fn client_addr(request: &Request, peer: &Peer, trust_proxy: bool) -> IpAddr {
    let direct = match peer.remote {
        Remote::Tcp(addr) => addr.ip(),
        _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
    let forwarded = || {
        let last = request.header("x-forwarded-for")?.rsplit(',').next()?;
        last.trim().parse().ok()
    };
    if trust_proxy {
        forwarded().unwrap_or(direct)
    } else {
        direct
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(forwarded: Option<&str>) -> Request {
        Request {
            method: "GET".into(),
            path: "/".into(),
            headers: forwarded
                .map(|v| ("x-forwarded-for".to_string(), v.to_string()))
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn the_client_address_is_the_tcp_peer_unless_the_proxy_is_trusted() {
        let tcp: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let peer = &Peer {
            listener: 0,
            remote: Remote::Tcp(tcp),
        };
        let spoofed = head(Some("203.0.113.9, 198.51.100.4"));
        // Untrusted, a header is whatever the client says.
        assert_eq!(client_addr(&spoofed, peer, false), tcp.ip());
        // Behind a trusted proxy: the last hop, the one the proxy appended.
        assert_eq!(
            client_addr(&spoofed, peer, true),
            "198.51.100.4".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            client_addr(&head(Some("2001:db8::7")), peer, true),
            "2001:db8::7".parse::<IpAddr>().unwrap()
        );
        // Missing or unparsable: the TCP peer.
        assert_eq!(client_addr(&head(None), peer, true), tcp.ip());
        assert_eq!(client_addr(&head(Some("unknown")), peer, true), tcp.ip());
    }
}
