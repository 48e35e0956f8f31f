//! A realm server whose client face also listens on loopback TCP, on the smol adapter: what the
//! loopback-identity tests (AIRC §5) start. Include it beside `common/adapter.rs`.

use std::net::SocketAddr;
use std::sync::mpsc;

use super::adapter::{Adapter, Running, Served};
use weft_drivers::airc::serve::{ServeConfig, open};
use weft_drivers::host::Endpoint;

/// Serves `config` (its `client_tcp` set) and returns the running server and the TCP face's
/// bound address.
pub(crate) fn serve_with_tcp_face(config: ServeConfig) -> (Running<()>, SocketAddr) {
    let (ready, bound) = mpsc::channel();
    let running = Adapter::Smol.spawn(
        move || {
            let (host, listeners, commands) = open(&config)?;
            let Ok(Endpoint::Tcp(addr)) = listeners[1].endpoint() else {
                panic!("the second listener is the TCP face")
            };
            ready.send(addr).unwrap();
            Ok(Served {
                commands: Some(commands),
                ..Served::new(host, listeners)
            })
        },
        drop,
    );
    let addr = bound.recv().expect("the server starts");
    (running, addr)
}
