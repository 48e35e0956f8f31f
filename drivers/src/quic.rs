//! QUIC for the smol adapter, on quinn: a connection the machine sees is one bidirectional stream
//! of one QUIC connection, opened by the dialler (AIRC §3.1's "ordered, reliable byte stream";
//! issue #4's "one bidirectional stream per link").
//!
//! The dialler opens the stream and writes first (the AIRC hello), which is what makes the
//! stream visible to the accepting side, so the acceptor waits for it inside the handshake
//! bound ([`HANDSHAKE_TIMEOUT`](crate::tls::HANDSHAKE_TIMEOUT)). Certificates and trust are [`crate::tls`]'s, with
//! [`QUIC_ALPN`](crate::tls::QUIC_ALPN).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;

use crate::smol::bounded;
use crate::tls::{SecureDial, TlsServer};

/// One link: the connection and its one bidirectional stream.
pub(crate) struct Link {
    pub(crate) connection: quinn::Connection,
    pub(crate) send: quinn::SendStream,
    pub(crate) recv: quinn::RecvStream,
}

/// The QUIC error code a link closes with when the machine closes it: 0, "no error".
const CLOSED: u32 = 0;

/// A quinn endpoint on `socket`, serving `server` if given, driven by smol.
pub(crate) fn endpoint(
    socket: UdpSocket,
    server: Option<&TlsServer>,
) -> io::Result<quinn::Endpoint> {
    let server = server.map(TlsServer::quic).transpose()?;
    quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        server,
        socket,
        Arc::new(quinn::SmolRuntime),
    )
}

/// A client-only endpoint on an ephemeral port of `to`'s address family.
pub(crate) fn client_for(to: SocketAddr) -> io::Result<quinn::Endpoint> {
    let any: SocketAddr = if to.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    endpoint(UdpSocket::bind(any)?, None)
}

/// Connects over `endpoint` and opens the link's stream.
pub(crate) async fn dial(endpoint: &quinn::Endpoint, to: &SecureDial) -> io::Result<Link> {
    let config = to.client.quic()?;
    let name = to.name.to_str();
    let connecting = endpoint
        .connect_with(config, to.addr, &name)
        .map_err(io::Error::other)?;
    bounded(async {
        let connection = connecting.await.map_err(io::Error::other)?;
        let (send, recv) = connection.open_bi().await.map_err(io::Error::other)?;
        Ok(Link {
            connection,
            send,
            recv,
        })
    })
    .await
}

/// Completes an incoming connection and waits for the dialler's stream.
pub(crate) async fn accept(incoming: quinn::Incoming) -> io::Result<Link> {
    bounded(async {
        let connection = incoming.await.map_err(io::Error::other)?;
        let (send, recv) = connection.accept_bi().await.map_err(io::Error::other)?;
        Ok(Link {
            connection,
            send,
            recv,
        })
    })
    .await
}

/// Ends a link once what was written is acknowledged (or the handshake bound has passed):
/// closing the connection at once would discard data still in flight.
pub(crate) async fn finish(mut send: quinn::SendStream, connection: quinn::Connection) {
    if send.finish().is_ok() {
        let _ = bounded(async {
            let _ = send.stopped().await;
            Ok(())
        })
        .await;
    }
    connection.close(CLOSED.into(), b"closed");
}
