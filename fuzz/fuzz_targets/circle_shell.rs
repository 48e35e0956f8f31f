//! The NAP-MESH shell (`circle::shell::Shell`) under arbitrary timed input: napplet messages raw
//! and well-formed (publish, subscribe, close, blobs, info with fuzzed ttl and sizes), grants and
//! revocations, links from a member and from a stranger, member frames raw and well-formed
//! (floods with any budget, backlog requests and answers, blob questions and answers, genuinely
//! signed by the member or forged), pairing and unpairing, the store failing, and time jumps. The
//! host answers store reads and blob checks at once. It must never panic; it never sends a frame
//! to a stranger's link; its subscriptions stay within their bound; and after `handle_timeout(now)`
//! it never asks to be woken at or before `now`.
#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use chacha20::ChaCha20Rng;
use libfuzzer_sys::fuzz_target;
use rand_core::SeedableRng;
use weft_fuzz::advance;
use weft_proto::circle::member::MemberFrame;
use weft_proto::circle::pairing::pairing_record;
use weft_proto::circle::shell::{Input, NappletId, Output, Shell, ShellConfig};
use weft_proto::circle::{MAX_SUBS, napplet::Limits};
use weft_proto::core::{ConnId, Machine, Timestamp};
use weft_proto::crypto::Secp256k1Secret;
use weft_proto::nostr::Event;
use weft_proto::nostr::event::UnsignedEvent;
use weft_proto::nostr::message::Filter;

const MEMBER_LINK: ConnId = ConnId(1);
const STRANGER_LINK: ConnId = ConnId(2);

#[derive(Arbitrary, Debug)]
enum Op {
    Raw {
        napplet: bool,
        text: String,
    },
    Publish {
        ttl: Option<u16>,
        kind: u16,
        content: String,
    },
    Subscribe {
        sub: u8,
        ttl: Option<u16>,
        kind: Option<u16>,
    },
    Close {
        sub: u8,
    },
    Blobs {
        n: u8,
        first: u8,
    },
    Info,
    Grant,
    Revoke,
    Online(bool),
    LinkUp {
        member: bool,
    },
    LinkDown {
        member: bool,
    },
    Frame {
        member: bool,
        text: String,
    },
    Flood {
        member: bool,
        ttl: u8,
        which: u8,
        forged: bool,
    },
    Req {
        ttl: u8,
        budget: u16,
        qid: u8,
    },
    Backlog {
        qid_of_sent: bool,
        which: u8,
    },
    Have {
        n: u8,
    },
    Has {
        qid_of_sent: bool,
        n: u8,
    },
    Unpair,
    Pair,
    Decline(bool),
    BreakStore(bool),
    Advance {
        ms: u16,
    },
}

struct Keys {
    user: Secp256k1Secret,
    member_records: [Event; 2],
    events: Vec<Event>,
}

fn keys() -> &'static Keys {
    static K: OnceLock<Keys> = OnceLock::new();
    K.get_or_init(|| {
        let p = weft_fuzz::crypto();
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let user = Secp256k1Secret::from_bytes([3; 32]);
        let member = Secp256k1Secret::from_bytes([4; 32]);
        let (ku, km) = (
            p.schnorr_public_key(&user).unwrap(),
            p.schnorr_public_key(&member).unwrap(),
        );
        let ours = pairing_record(p, &user, &mut rng, &km, 1).unwrap();
        let theirs = pairing_record(p, &member, &mut rng, &ku, 1).unwrap();
        let events = [1u16, 9, 20_666, 30_000]
            .iter()
            .map(|k| {
                UnsignedEvent {
                    created_at: 1_700_000_000,
                    kind: *k,
                    tags: vec![vec!["h".into(), "kitchen".into()]],
                    content: "x".into(),
                }
                .sign(p, &member, &mut rng)
                .unwrap()
            })
            .collect();
        Keys {
            user,
            member_records: [ours, theirs],
            events,
        }
    })
}

fuzz_target!(|ops: Vec<Op>| {
    let k = keys();
    let p = weft_fuzz::crypto();
    let member_key = k.member_records[1].pubkey;
    let config = ShellConfig {
        limits: Limits {
            publish_ttl: 3,
            subscribe_ttl: 2,
        },
        blobs: true,
    };
    let mut shell = Shell::new(p, k.user.clone(), ChaCha20Rng::seed_from_u64(2), config).unwrap();
    let mut now = Timestamp::from_secs(1_700_000_000);
    let app = NappletId(1);
    shell.handle(now, Input::Online(true));
    shell.handle(now, Input::Grant(app));
    for r in &k.member_records {
        shell.handle(now, Input::PairingRecord(r.clone()));
    }
    let mut store_broken = false;
    let mut sent_qids: Vec<String> = Vec::new();
    for op in ops.into_iter().take(256) {
        let link = |member: bool| if member { MEMBER_LINK } else { STRANGER_LINK };
        let input = match op {
            Op::Raw { napplet, text } => {
                if napplet {
                    Input::Napplet { napplet: app, text }
                } else {
                    Input::Link { link: MEMBER_LINK, text }
                }
            }
            Op::Publish { ttl, kind, content } => Input::Napplet {
                napplet: app,
                text: serde_json::json!({"type": "mesh.publish", "id": "p", "event": {"kind": kind, "content": content}, "ttl": ttl}).to_string(),
            },
            Op::Subscribe { sub, ttl, kind } => Input::Napplet {
                napplet: app,
                text: serde_json::json!({"type": "mesh.subscribe", "id": "s", "subId": sub.to_string(), "filters": [{"kinds": kind.map(|k| vec![k]).unwrap_or_default()}], "ttl": ttl}).to_string(),
            },
            Op::Close { sub } => Input::Napplet {
                napplet: app,
                text: serde_json::json!({"type": "mesh.close", "subId": sub.to_string()}).to_string(),
            },
            Op::Blobs { n, first } => Input::Napplet {
                napplet: app,
                text: serde_json::json!({"type": "mesh.blobs", "id": "b", "hashes": (0..n).map(|i| format!("{:064x}", i as u16 + first as u16)).collect::<Vec<_>>()}).to_string(),
            },
            Op::Info => Input::Napplet { napplet: app, text: r#"{"type":"mesh.info","id":"i"}"#.into() },
            Op::Grant => Input::Grant(app),
            Op::Revoke => Input::Revoke(app),
            Op::Online(on) => Input::Online(on),
            Op::LinkUp { member } => Input::LinkUp {
                link: link(member),
                key: if member { member_key } else { [9; 32] },
            },
            Op::LinkDown { member } => Input::LinkDown(link(member)),
            Op::Frame { member, text } => Input::Link { link: link(member), text },
            Op::Flood { member, ttl, which, forged } => {
                let mut event = k.events[which as usize % k.events.len()].clone();
                if forged {
                    event.content.push('!');
                }
                Input::Link { link: link(member), text: MemberFrame::Publish { ttl, event }.to_text() }
            }
            Op::Req { ttl, budget, qid } => Input::Link {
                link: MEMBER_LINK,
                text: MemberFrame::Req { ttl, qid: format!("q{qid}"), budget_ms: budget as u64, filters: vec![Filter::default()] }.to_text(),
            },
            Op::Backlog { qid_of_sent, which } => Input::Link {
                link: MEMBER_LINK,
                text: MemberFrame::Backlog {
                    qid: pick(&sent_qids, qid_of_sent),
                    event: k.events[which as usize % k.events.len()].clone(),
                }
                .to_text(),
            },
            Op::Have { n } => Input::Link {
                link: MEMBER_LINK,
                text: MemberFrame::Have { qid: "h".into(), hashes: (0..n.min(64)).map(|i| [i; 32]).collect() }.to_text(),
            },
            Op::Has { qid_of_sent, n } => Input::Link {
                link: MEMBER_LINK,
                text: MemberFrame::Has { qid: pick(&sent_qids, qid_of_sent), hashes: (0..n.min(64)).map(|i| [i; 32]).collect() }.to_text(),
            },
            Op::Unpair => Input::Unpair(member_key),
            Op::Pair => Input::PairingRecord(k.member_records[0].clone()),
            Op::Decline(d) => Input::Decline { peer: member_key, decline: d },
            Op::BreakStore(b) => {
                store_broken = b;
                continue;
            }
            Op::Advance { ms } => {
                now = now.saturating_add(core::time::Duration::from_millis(ms as u64));
                advance::run_due(&mut shell, now, |_| {});
                continue;
            }
        };
        shell.handle(now, input);
        // The host: answer lookups at once, and watch where frames go.
        let mut pending = Vec::new();
        while let Some(out) = shell.poll() {
            match out {
                Output::ToLink { link, frame } => {
                    assert_ne!(link, STRANGER_LINK, "a stranger is never sent anything");
                    match frame {
                        MemberFrame::Req { qid, .. } | MemberFrame::Have { qid, .. } => {
                            if sent_qids.len() < 16 {
                                sent_qids.push(qid);
                            }
                        }
                        _ => {}
                    }
                }
                Output::ReadBacklog { token, .. } => pending.push(Input::Backlog {
                    token,
                    events: (!store_broken).then(|| k.events.clone()),
                }),
                Output::CheckBlobs { token, hashes } => pending.push(Input::BlobsHeld {
                    token,
                    held: hashes.into_iter().step_by(2).collect(),
                }),
                _ => {}
            }
        }
        for i in pending {
            shell.handle(now, i);
            while shell.poll().is_some() {}
        }
        assert!(shell.subscription_count() <= MAX_SUBS);
    }
    advance::run_due(
        &mut shell,
        Timestamp::MAX.saturating_sub(core::time::Duration::from_secs(1)),
        |_| {},
    );
});

fn pick(sent: &[String], of_sent: bool) -> String {
    if of_sent && let Some(q) = sent.last() {
        return q.clone();
    }
    "unasked".into()
}
