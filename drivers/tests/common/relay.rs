//! `weft relay` on an ephemeral loopback port, for the Minca driver tests; stopped on drop.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread;

use weft_drivers::minca::relay::{RelayOptions, serve};
use weft_proto::minca::turn::TurnConfig;

/// A relay running on its own thread.
pub(crate) struct Running {
    stop: smol::channel::Sender<()>,
    thread: Option<thread::JoinHandle<std::io::Result<()>>>,
    /// Where it listens.
    pub(crate) addr: SocketAddr,
}

impl Running {
    /// Starts a relay on `127.0.0.1:0`, handing out TURN passwords when `turn` is given.
    pub(crate) fn start(turn: Option<TurnConfig>) -> Self {
        Self::with(RelayOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            trust_proxy: false,
            turn,
            tls: None,
        })
    }

    /// Starts a relay with `options` (its `listen` should name port 0).
    pub(crate) fn with(options: RelayOptions) -> Self {
        let (stop, stopped) = smol::channel::bounded(1);
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = thread::spawn(move || {
            serve(options, stopped, move |addr| ready_tx.send(addr).unwrap())
        });
        let addr = ready_rx.recv().expect("the relay starts");
        Self {
            stop,
            thread: Some(thread),
            addr,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop.send_blocking(());
        if let Some(t) = self.thread.take() {
            t.join().unwrap().unwrap();
        }
    }
}
