//! A node's input as it waits in the event queue.
//!
//! `node::Input` is about 110 bytes for its rare largest kinds (`Join`, `Send`), and every queued
//! event took that much, so those wait boxed. The kinds a run queues by the ten thousand (a
//! peer's frame, a relay's text, a socket or connection that opened, closed or failed, a local
//! description) are kept as they are: a box each was an allocation and a free an event, about
//! 30 000 of them in a 1 000-node run.

use std::sync::Arc;

use bytes::Bytes;
use weft_proto::core::ConnId;
use weft_proto::minca::node;

/// A node's input as it waits in the event queue: the frequent kinds unboxed, any other boxed.
#[derive(Debug)]
pub(super) enum NodeInput {
    PeerFrame {
        conn: ConnId,
        bytes: Bytes,
    },
    RelayText {
        conn: ConnId,
        text: Arc<str>,
    },
    /// An input that names a connection and nothing else.
    Conn {
        conn: ConnId,
        what: ConnEvent,
    },
    LocalDescription {
        conn: ConnId,
        sdp: String,
    },
    /// A peer connection opened between nodes `local` and `remote`: their fingerprints
    /// ([`fingerprint`]) are written when the node takes it, not carried two strings wide.
    PeerOpened {
        conn: ConnId,
        local: u32,
        remote: u32,
    },
    Other(Box<node::Input>),
}

/// The inputs [`NodeInput::Conn`] carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ConnEvent {
    RelayOpened,
    RelayClosed,
    RelayDialFailed,
    PeerClosed,
}

/// Node `n`'s channel-binding fingerprint.
pub(super) fn fingerprint(n: usize) -> String {
    format!(
        "sha-256 {:02X}:{:02X}:{:02X}",
        n >> 16 & 0xff,
        n >> 8 & 0xff,
        n & 0xff
    )
}

impl NodeInput {
    /// Nodes `local` and `remote`'s connection `conn` opened.
    pub(super) fn peer_opened(conn: ConnId, local: usize, remote: usize) -> Self {
        match (u32::try_from(local), u32::try_from(remote)) {
            (Ok(local), Ok(remote)) => Self::PeerOpened {
                conn,
                local,
                remote,
            },
            // More nodes than a u32 numbers is far past any run; boxed, it is still right.
            _ => Self::Other(Box::new(node::Input::PeerOpened {
                conn,
                local_fingerprint: fingerprint(local),
                remote_fingerprint: fingerprint(remote),
            })),
        }
    }
}

impl From<node::Input> for NodeInput {
    fn from(input: node::Input) -> Self {
        use ConnEvent::*;
        let conn = |conn, what| Self::Conn { conn, what };
        match input {
            node::Input::PeerFrame { conn, bytes } => Self::PeerFrame { conn, bytes },
            node::Input::RelayText { conn, text } => Self::RelayText { conn, text },
            node::Input::RelayOpened { conn: c } => conn(c, RelayOpened),
            node::Input::RelayClosed { conn: c } => conn(c, RelayClosed),
            node::Input::RelayDialFailed { conn: c } => conn(c, RelayDialFailed),
            node::Input::PeerClosed { conn: c } => conn(c, PeerClosed),
            node::Input::LocalDescription { conn, sdp } => Self::LocalDescription { conn, sdp },
            other => Self::Other(Box::new(other)),
        }
    }
}

impl From<NodeInput> for node::Input {
    // Every node event is taken through here. Called, it cost two dozen instructions an event
    // more than the conversion inlined into the event loop (the input written out, then
    // copied in).
    #[inline(always)]
    fn from(input: NodeInput) -> Self {
        match input {
            NodeInput::PeerFrame { conn, bytes } => Self::PeerFrame { conn, bytes },
            NodeInput::RelayText { conn, text } => Self::RelayText { conn, text },
            NodeInput::Conn { conn, what } => match what {
                ConnEvent::RelayOpened => Self::RelayOpened { conn },
                ConnEvent::RelayClosed => Self::RelayClosed { conn },
                ConnEvent::RelayDialFailed => Self::RelayDialFailed { conn },
                ConnEvent::PeerClosed => Self::PeerClosed { conn },
            },
            NodeInput::LocalDescription { conn, sdp } => Self::LocalDescription { conn, sdp },
            NodeInput::PeerOpened {
                conn,
                local,
                remote,
            } => Self::PeerOpened {
                conn,
                local_fingerprint: fingerprint(local as usize),
                remote_fingerprint: fingerprint(remote as usize),
            },
            NodeInput::Other(input) => *input,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind comes back out as it went in, whichever way it waited.
    #[test]
    fn inputs_come_out_as_they_went_in() {
        let c = ConnId(7);
        let inputs = [
            node::Input::PeerFrame {
                conn: c,
                bytes: Bytes::from_static(&[1, 2]),
            },
            node::Input::RelayText {
                conn: c,
                text: "t".into(),
            },
            node::Input::RelayOpened { conn: c },
            node::Input::RelayClosed { conn: c },
            node::Input::RelayDialFailed { conn: c },
            node::Input::PeerClosed { conn: c },
            node::Input::LocalDescription {
                conn: c,
                sdp: "offer 1 7".into(),
            },
            node::Input::Online,
            node::Input::NodeSocketClosed { conn: c },
        ];
        for input in inputs {
            let before = format!("{input:?}");
            let back = node::Input::from(NodeInput::from(input));
            assert_eq!(format!("{back:?}"), before);
        }
    }

    /// An opened connection written when taken is the one written when queued.
    #[test]
    fn an_opened_connection_carries_both_fingerprints() {
        for (a, b) in [(0, 1), (3, 70_000), (u32::MAX as usize, 5), (1 << 40, 2)] {
            let want = node::Input::PeerOpened {
                conn: ConnId(9),
                local_fingerprint: fingerprint(a),
                remote_fingerprint: fingerprint(b),
            };
            let got = node::Input::from(NodeInput::peer_opened(ConnId(9), a, b));
            assert_eq!(format!("{got:?}"), format!("{want:?}"));
        }
    }
}
