//! Both sides of the Minca node WebSocket (§5.2, §5.3) under arbitrary timed frames: a client and
//! a node in a private space, fed fuzzed text and binary frames, application sends, access
//! changes, closes and time jumps, interleaved with the frames they send each other (so the
//! fuzzer also reaches the states after a real handshake). Neither may panic, and after
//! `handle_timeout(now)` neither may ask to be woken at or before `now`. Node URLs are parsed
//! from fuzzed text on the way.
#![no_main]

use arbitrary::Arbitrary;
use chacha20::ChaCha20Rng;
use libfuzzer_sys::fuzz_target;
use rand_core::SeedableRng;
use serde_json::json;
use std::sync::OnceLock;
use weft_proto::codec::did_key::DidKey;
use weft_proto::core::{Machine, Timestamp};
use weft_proto::crypto::{P256Secret, generate_p256};
use weft_proto::minca::node_socket::{ClientSocket, Input, NodeSocket, Output, Session};
use weft_proto::minca::node_url::NodeUrl;
use weft_proto::minca::note::{CMD_ALL, Es256Notes, Note};
use weft_proto::minca::space_access::{HeldReadKey, MemorySpace};

#[derive(Arbitrary, Debug)]
enum Op {
    ToClient(Frame),
    ToNode(Frame),
    Deliver { to_node: bool, count: u8 },
    Send { to_node: bool, kind: u8 },
    AccessChanged { remove: bool },
    Advance { ms: u16 },
    Close { node: bool },
    Url(String),
}

#[derive(Arbitrary, Debug)]
enum Frame {
    Text(String),
    Binary(Vec<u8>),
    Hello {
        sig: String,
        read: Option<String>,
        member: Option<String>,
    },
    Who(String),
    TooLarge(u32),
}

fn input(f: Frame) -> Input {
    match f {
        Frame::Text(t) => Input::Text(t),
        Frame::Binary(b) => Input::Binary(b),
        Frame::Hello { sig, read, member } => Input::Text(
            json!({"type":"hello","did":"did:key:zDnaerDaTF5BXEavCrfRZEk316dpbLsfPDZ3WJ5hRTPFU2169",
                   "nonce":"n","sig":sig,"read":read,"member":member,"earlier":[{"readKey":"x","read":"y"}]})
            .to_string(),
        ),
        Frame::Who(note) => Input::Binary(json!({"type":"who","payload":{"note":note}}).to_string().into_bytes()),
        Frame::TooLarge(n) => Input::FrameTooLarge(n as usize),
    }
}

fn frames(out: Vec<Output>) -> Vec<Input> {
    out.into_iter()
        .filter_map(|o| match o {
            Output::SendText(t) => Some(Input::Text(t)),
            Output::SendBinary(b) => Some(Input::Binary(b)),
            _ => None,
        })
        .collect()
}

fn drain(m: &mut impl Machine<Output = Output>) -> Vec<Output> {
    core::iter::from_fn(|| m.poll()).collect()
}

fn key(seed: u64) -> P256Secret {
    generate_p256(weft_fuzz::crypto(), &mut ChaCha20Rng::seed_from_u64(seed))
}

fn did(k: &P256Secret) -> String {
    DidKey::P256(weft_fuzz::crypto().p256_public_key(k).unwrap().0).to_did()
}

struct Fixture {
    note: String,
    ck: P256Secret,
    nk: P256Secret,
    account: String,
    space: MemorySpace,
}

/// Keys, the note and the space, made once: key generation and signing would otherwise be most
/// of every run.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let notes = Es256Notes::new(weft_fuzz::crypto());
        let (root, ck, nk) = (key(1), key(2), key(3));
        let note = notes
            .issue(
                &root,
                &Note {
                    iss: String::new(),
                    aud: did(&ck),
                    sub: did(&root),
                    cmd: CMD_ALL.into(),
                    pol: Vec::new(),
                    exp: 1_900_000_000,
                    nbf: None,
                },
            )
            .unwrap();
        let rk = key(4);
        let read_key = HeldReadKey {
            did: did(&rk),
            secret: Some(rk),
            seal_key: Some([4; 32]),
        };
        let mut space = MemorySpace::private("s");
        space.add_key(read_key);
        space.add_reader(&did(&root));
        Fixture {
            note,
            ck,
            nk,
            account: did(&root),
            space,
        }
    })
}

fuzz_target!(|ops: Vec<Op>| {
    let c = weft_fuzz::crypto();
    let notes = Es256Notes::new(c);
    let f = fixture();
    let (ck, nk, note, space) = (f.ck.clone(), f.nk.clone(), f.note.clone(), f.space.clone());
    let mut now = Timestamp::from_secs(1_800_000_000);
    let mut client = ClientSocket::new(
        c,
        notes,
        ChaCha20Rng::seed_from_u64(5),
        Session::new(c, ck, Some(note)).unwrap(),
        space.clone(),
        None,
        now,
    );
    let mut node = NodeSocket::new(
        c,
        notes,
        ChaCha20Rng::seed_from_u64(6),
        Session::new(c, nk, None).unwrap(),
        "s",
        Some(space),
        now,
    );
    let (mut to_client, mut to_node) = (frames(drain(&mut node)), Vec::new());
    for op in ops.into_iter().take(64) {
        match op {
            Op::ToClient(fr) => client.handle(now, input(fr)),
            Op::ToNode(fr) => node.handle(now, input(fr)),
            Op::Deliver {
                to_node: true,
                count,
            } => {
                for f in to_node.drain(..to_node.len().min(usize::from(count))) {
                    node.handle(now, f);
                }
            }
            Op::Deliver {
                to_node: false,
                count,
            } => {
                for f in to_client.drain(..to_client.len().min(usize::from(count))) {
                    client.handle(now, f);
                }
            }
            Op::Send { to_node, kind } => {
                let i = Input::Send {
                    kind: ["live", "who", "sync"][usize::from(kind % 3)].into(),
                    payload: json!(kind),
                };
                if to_node {
                    client.handle(now, i)
                } else {
                    node.handle(now, i)
                }
            }
            Op::AccessChanged { remove } => {
                if let Some(s) = node.space_mut() {
                    if remove {
                        s.remove_member(&f.account)
                    } else {
                        s.add_key(HeldReadKey {
                            did: did(&key(9)),
                            secret: None,
                            seal_key: None,
                        })
                    }
                }
                node.handle(now, Input::AccessChanged);
            }
            Op::Advance { ms } => {
                now = now.saturating_add(core::time::Duration::from_millis(u64::from(ms) * 16));
                client.handle_timeout(now);
                node.handle_timeout(now);
                for w in [client.poll_timeout(), node.poll_timeout()]
                    .into_iter()
                    .flatten()
                {
                    assert!(w.at > now, "wakeup {:?} not after {now:?}", w);
                }
            }
            Op::Close { node: true } => node.handle(now, Input::Closed),
            Op::Close { node: false } => client.handle(now, Input::Closed),
            Op::Url(text) => {
                if let Ok(u) = NodeUrl::parse(&text) {
                    let _ = u.dial_url(&text);
                }
            }
        }
        to_node.extend(frames(drain(&mut client)));
        to_client.extend(frames(drain(&mut node)));
    }
});
