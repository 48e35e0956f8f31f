//! The str0m WebRTC transport of the Minca mesh (§5.1) on arbitrary operations: offers and
//! answers that are any text, datagrams that are any bytes from any port, sends, closes and time
//! steps. It must never panic, hold more connections than its bound, or keep a deadline that does
//! not advance past a served `now`; the channel binding of any text is empty or
//! `lowercase(alg) + " " + UPPERCASE(value)`.
#![no_main]

use std::net::SocketAddr;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use weft_drivers::minca::webrtc::transport::MAX_TRANSPORT_CONNECTIONS;
use weft_drivers::minca::webrtc::{Transport, channel_binding};
use weft_proto::core::{ConnId, Timestamp};
use weft_proto::minca::mesh::Output;

const T0: u64 = 1_790_000_000_000;

#[derive(Arbitrary, Debug)]
enum Op {
    Offer(u8),
    Answer(u8, String),
    Apply(u8, String),
    Send(u8, Vec<u8>),
    Close(u8),
    Datagram(u16, Vec<u8>),
    Advance(u16),
}

fuzz_target!(|input: (String, Vec<Op>)| {
    let (text, ops) = input;
    let binding = channel_binding(&text);
    if let Some((alg, value)) = binding.split_once(' ') {
        assert_eq!(alg, alg.to_ascii_lowercase());
        assert_eq!(value, value.to_ascii_uppercase());
    } else {
        assert!(binding.is_empty());
    }

    let local = SocketAddr::from(([127, 0, 0, 1], 9));
    let mut now = T0;
    let mut t = Transport::new(Timestamp::from_millis(now), local, vec![local]);
    for op in ops.into_iter().take(64) {
        let at = Timestamp::from_millis(now);
        let out = match op {
            Op::Offer(c) => Some(Output::CreateOffer {
                conn: ConnId(c.into()),
                peer: format!("p{}", c % 4),
            }),
            Op::Answer(c, offer) => Some(Output::CreateAnswer {
                conn: ConnId(c.into()),
                peer: format!("p{}", c % 4),
                offer,
            }),
            Op::Apply(c, answer) => Some(Output::ApplyAnswer {
                conn: ConnId(c.into()),
                answer,
            }),
            Op::Send(c, bytes) => Some(Output::Send {
                conn: ConnId(c.into()),
                peer: String::new(),
                bytes,
            }),
            Op::Close(c) => Some(Output::Close {
                conn: ConnId(c.into()),
            }),
            Op::Datagram(port, bytes) => {
                t.handle_datagram(at, SocketAddr::from(([127, 0, 0, 1], port)), &bytes);
                None
            }
            Op::Advance(ms) => {
                now += u64::from(ms);
                let at = Timestamp::from_millis(now);
                if t.poll_timeout().is_some_and(|w| w.at <= at) {
                    t.handle_timeout(at);
                }
                None
            }
        };
        if let Some(out) = out {
            assert!(t.handle_mesh_output(at, out).is_none());
        }
        assert!(t.connection_count() <= MAX_TRANSPORT_CONNECTIONS);
        while t.poll_event().is_some() {}
        while t.poll_transmit().is_some() {}
    }
});
