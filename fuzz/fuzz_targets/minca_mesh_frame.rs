//! `minca::mesh` on arbitrary bytes: a mesh frame (§7.1) or a named error, never a panic, the
//! same as the general path (through a JSON tree) answers; a parsed frame re-serializes to bytes
//! that parse to the same frame. Each `__signal` payload goes through
//! the introductions memory (§8), which must answer without panicking and stay within its bounds,
//! and each payload through the live-message limits (§9.2). Where the peek that recognises a copy
//! reads the bytes at all, the general path (through a JSON tree) reads a `__signal` frame in the
//! same room, a signal whose routing fields are the peek's, and the signal the peek reads in full
//! (or refuses it alike). Where the `__peers` peek reads them, the general path reads a
//! `__peers` frame in the same room whose list starts with the peek's entries.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_proto::core::Timestamp;
use weft_proto::crypto::default_provider;
use weft_proto::minca::mesh::frame::{Frame, PEERS, SIGNAL};
use weft_proto::minca::mesh::introduction::{Introductions, MAX_PEER_LIST, Signal, peer_list};
use weft_proto::minca::mesh::live::LiveAllowance;
use weft_proto::minca::mesh::{peers_peek, signal_peek};

fuzz_target!(|input: (u32, &[u8])| {
    let (clock, bytes) = input;
    let now = Timestamp::from_millis(1_790_000_000_000 + u64::from(clock));
    let me = "did:key:zDnaeV1SzGREx4fjGtUofWfZfnH42TV5EboaJ6deJLxvmo6jd";
    let peek = signal_peek::peek(bytes);
    let peers = peers_peek::peek(bytes);
    // Read without a tree of the frame, as the tree reads it (or refused alike).
    assert_eq!(Frame::parse(bytes), Frame::parse_tree(bytes));
    let Ok(frame) = Frame::parse(bytes) else {
        assert_eq!((peek, peers), (None, None));
        return;
    };
    if let Some(p) = peers {
        assert_eq!((p.room, frame.kind.as_str()), (frame.room.as_str(), PEERS));
        let general: Option<Vec<Option<&str>>> = frame.payload.as_array().map(|entries| {
            entries
                .iter()
                .take(MAX_PEER_LIST)
                .map(|e| e.as_str())
                .collect()
        });
        assert_eq!(general, Some(p.entries.iter().copied().map(Some).collect()));
    }
    if let Some(p) = peek {
        assert_eq!((p.room, frame.kind.as_str()), (frame.room.as_str(), SIGNAL));
        let general = Signal::parse(&frame.payload);
        if let Ok(s) = &general {
            assert_eq!(s.routing(), p.signal);
        }
        assert_eq!(p.read_signal(), general);
    }
    assert_eq!(Frame::parse(&frame.to_bytes(me)).as_ref(), Ok(&frame));
    let mut intro = Introductions::new();
    if frame.kind == SIGNAL {
        let _ = intro.receive(
            now,
            default_provider(),
            &frame.room,
            me,
            true,
            &frame.payload,
        );
        if let Ok(s) = Signal::parse(&frame.payload) {
            assert_eq!(Signal::parse(&s.to_payload()), Ok(s));
        }
    }
    assert!(peer_list(&frame.payload, me).count() <= 64);
    let _ = LiveAllowance::new(now).take(now, &frame.payload);
});
