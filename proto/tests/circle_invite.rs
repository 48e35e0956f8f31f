//! Pairing by invite (`weft_proto::circle::invite`, NAP-MESH §1 "pairings made on purpose by
//! both sides", §5 "Trust, not proximity"), at the shell's boundary over in-memory links in
//! virtual time, and attacked: a replayed `PAIR`, a wrong or guessed secret, a second device, an
//! expired invite (and one whose expiry was pushed out), a changed npub, a forged record.

use core::time::Duration;

use chacha20::ChaCha20Rng;
use rand_core::SeedableRng;
use weft_proto::circle::harness::Harness;
use weft_proto::circle::invite::{
    ACCEPT_TIMEOUT_MS, INVITE_LIFETIME_MS, Invite, InviteError, MAX_INVITE_FAILURES, PairFrame,
    PairRefusal,
};
use weft_proto::circle::napplet::Reply;
use weft_proto::circle::pairing::pairing_record;
use weft_proto::circle::shell::{Input, NappletId, Shell, ShellConfig};
use weft_proto::codec::bech32;
use weft_proto::core::{ConnId, Timestamp};
use weft_proto::crypto::{CryptoProvider, default_provider, generate_secp256k1};

type H = Harness<ChaCha20Rng>;

const APP: NappletId = NappletId(1);
const T0: u64 = 1_700_000_000;

fn net(n: usize) -> H {
    let mut h = Harness::new(Timestamp::from_secs(T0), Duration::from_millis(10), 100_000);
    h.hand_over_pairings = false;
    for i in 0..n {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(500 + i as u64);
        let secret = generate_secp256k1(p, &mut rng);
        let d = h.add(Shell::new(p, secret, rng, ShellConfig::default()).unwrap());
        h.input(d, Input::Grant(APP));
    }
    h
}

fn key(h: &H, d: usize) -> [u8; 32] {
    h.devices[d].shell.pubkey()
}

fn invite(h: &mut H, d: usize) -> Invite {
    h.input(d, Input::Invite);
    h.devices[d].invites.last().cloned().expect("an invite")
}

fn accept(h: &mut H, d: usize, text: &str) {
    let invite = Invite::parse(text).expect("an invite string");
    h.input(d, Input::AcceptInvite(invite));
}

/// The last end of a pairing by invite on device `d`.
fn last_paired(h: &H, d: usize) -> Option<([u8; 32], Result<(), PairRefusal>)> {
    h.devices[d].paired.last().copied()
}

/// Device `d`'s `PAIR` frames sent, as text, with their links.
fn pairs_sent(h: &H, d: usize) -> Vec<(ConnId, String)> {
    h.devices[d]
        .pair_sent
        .iter()
        .filter(|(_, _, f)| matches!(f, PairFrame::Pair { .. }))
        .map(|(_, l, f)| (*l, f.to_text()))
        .collect()
}

/// Whether device `d` delivered a `mesh.event` with `content` to its napplet.
fn got(h: &H, d: usize, content: &str) -> bool {
    h.devices[d]
        .replies
        .iter()
        .any(|(_, _, r)| matches!(r, Reply::Event { event, .. } if event.content == content))
}

fn publish_and_listen(h: &mut H, from: usize, to: usize, content: &str) {
    h.napplet(
        to,
        APP,
        &format!(r#"{{"type":"mesh.subscribe","id":"s-{content}","subId":"{content}","filters":{{"kinds":[1]}},"ttl":0}}"#),
    );
    h.napplet(
        from,
        APP,
        &format!(r#"{{"type":"mesh.publish","id":"p-{content}","event":{{"kind":1,"content":"{content}","tags":[]}},"ttl":1}}"#),
    );
    h.run().unwrap();
}

#[test]
fn an_invite_makes_both_signed_records_on_both_sides_and_a_publish_crosses() {
    let mut h = net(2);
    h.link(0, 1);
    let (k0, k1) = (key(&h, 0), key(&h, 1));
    // Linked at the transport, not paired: nothing crosses.
    publish_and_listen(&mut h, 0, 1, "before");
    assert!(!got(&h, 1, "before"));

    let inv = invite(&mut h, 0);
    let text = inv.to_text();
    assert!(text.starts_with(&format!(
        "weft-circle-invite1:{}:",
        bech32::encode_npub(&k0)
    )));
    assert_eq!(
        inv.expires,
        (T0 * 1_000 + INVITE_LIFETIME_MS).div_ceil(1_000),
        "the lifetime is the named constant"
    );
    accept(&mut h, 1, &text);
    h.run().unwrap();
    assert_eq!(last_paired(&h, 1), Some((k0, Ok(()))));
    assert_eq!(last_paired(&h, 0), Some((k1, Ok(()))));
    // Each side was asked to keep both signed records: its own about the other and the other's.
    for (d, me, them) in [(0, k0, k1), (1, k1, k0)] {
        let recs = &h.devices[d].records;
        assert_eq!(recs.len(), 2, "{recs:?}");
        assert!(
            recs.iter().any(|r| r.pubkey == me
                && r.tag_value("p") == Some(&weft_proto::codec::hex::encode(&them)))
        );
        assert!(
            recs.iter().any(|r| r.pubkey == them
                && r.tag_value("p") == Some(&weft_proto::codec::hex::encode(&me)))
        );
        for r in recs {
            r.verify(default_provider()).unwrap();
        }
        assert!(h.devices[d].shell.circle().is_member(&them));
    }
    // The secret never crossed the link: neither frame carries it.
    let hex_secret = weft_proto::codec::hex::encode(&inv.secret);
    for d in 0..2 {
        for (_, _, f) in &h.devices[d].pair_sent {
            assert!(!f.to_text().contains(&hex_secret));
        }
    }
    publish_and_listen(&mut h, 0, 1, "after");
    assert!(got(&h, 1, "after"));
}

#[test]
fn a_replayed_pair_is_refused_and_the_invitee_cannot_use_the_invite_twice() {
    let mut h = net(3);
    let (l10, _) = h.link(1, 0);
    let (l20, _) = h.link(2, 0);
    let text = invite(&mut h, 0).to_text();
    accept(&mut h, 1, &text);
    h.run().unwrap();
    assert_eq!(last_paired(&h, 0), Some((key(&h, 1), Ok(()))));
    let refused = h.devices[0].shell.stats().invites_refused;
    let records = h.devices[0].records.len();
    // The same PAIR again on the same link, and on a stranger's (a recorded frame replayed).
    let (_, pair) = pairs_sent(&h, 1).remove(0);
    h.inject(l10, &pair);
    h.inject(l20, &pair);
    h.run().unwrap();
    assert_eq!(h.devices[0].shell.stats().invites_refused, refused + 2);
    assert_eq!(h.devices[0].records.len(), records, "no record taken");
    assert!(!h.devices[0].shell.circle().is_member(&key(&h, 2)));
    assert!(!h.devices[0].shell.circle().tracks(&key(&h, 2)));
    let answers: Vec<_> = h.devices[0]
        .pair_sent
        .iter()
        .filter_map(|(_, l, f)| match f {
            PairFrame::Paired {
                outcome: Err(r), ..
            } => Some((*l, r.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(answers.iter().all(|(_, r)| r == PairRefusal::Used.reason()));
    // The invitee accepting the same string again is refused as used.
    accept(&mut h, 1, &text);
    h.run().unwrap();
    assert_eq!(
        last_paired(&h, 1),
        Some((key(&h, 0), Err(PairRefusal::Used)))
    );
}

#[test]
fn a_wrong_or_guessed_secret_is_refused_and_guessing_withdraws_the_invite() {
    let mut h = net(3);
    h.link(1, 0);
    let (l20, _) = h.link(2, 0);
    let (k0, k2) = (key(&h, 0), key(&h, 2));
    let real = invite(&mut h, 0);
    // A guessed secret: its id names no invite.
    let mut guessed = real.clone();
    guessed.secret[0] ^= 1;
    accept(&mut h, 1, &guessed.to_text());
    h.run().unwrap();
    assert_eq!(last_paired(&h, 1), Some((k0, Err(PairRefusal::Unknown))));
    assert!(!h.devices[0].shell.circle().tracks(&key(&h, 1)));
    // Someone who saw the id (it crosses the link) but not the secret: a proof from a wrong
    // secret is refused, and after MAX_INVITE_FAILURES of them the invite is withdrawn.
    let p = default_provider();
    let mut rng = ChaCha20Rng::seed_from_u64(502);
    let s2 = generate_secp256k1(p, &mut rng);
    assert_eq!(p.schnorr_public_key(&s2).unwrap(), k2);
    let record = pairing_record(p, &s2, &mut rng, &k0, T0).unwrap();
    for n in 0..MAX_INVITE_FAILURES {
        let mut wrong = real.clone();
        wrong.secret[15] ^= 1 + n as u8;
        let frame = PairFrame::Pair {
            id: real.id(p),
            proof: wrong.proof(p, &k2),
            record: record.clone(),
        };
        h.inject(l20, &frame.to_text());
        h.run().unwrap();
    }
    assert_eq!(
        h.devices[0].shell.stats().invites_refused,
        1 + u64::from(MAX_INVITE_FAILURES)
    );
    assert!(!h.devices[0].shell.circle().tracks(&k2));
    // The right secret now finds nothing: the invite is gone.
    accept(&mut h, 1, &real.to_text());
    h.run().unwrap();
    assert_eq!(last_paired(&h, 1), Some((k0, Err(PairRefusal::Unknown))));
    assert_eq!(h.devices[0].shell.circle().members().count(), 0);
}

#[test]
fn a_proof_is_bound_to_the_keys_and_a_forged_record_does_not_use_up_the_invite() {
    let mut h = net(3);
    h.link(1, 0);
    let (l20, _) = h.link(2, 0);
    let (k0, k1, k2) = (key(&h, 0), key(&h, 1), key(&h, 2));
    let inv = invite(&mut h, 0);
    let p = default_provider();
    let mut rng = ChaCha20Rng::seed_from_u64(501);
    let s1 = generate_secp256k1(p, &mut rng);
    assert_eq!(p.schnorr_public_key(&s1).unwrap(), k1);
    let mut rng2 = ChaCha20Rng::seed_from_u64(502);
    let s2 = generate_secp256k1(p, &mut rng2);
    // Device 2 replays device 1's proof (seen on the wire) with its own record: bound to k1.
    let frame = PairFrame::Pair {
        id: inv.id(p),
        proof: inv.proof(p, &k1),
        record: pairing_record(p, &s2, &mut rng2, &k0, T0).unwrap(),
    };
    h.inject(l20, &frame.to_text());
    h.run().unwrap();
    // Device 2 knows the secret but sends device 1's record (another key's) as its own.
    let frame = PairFrame::Pair {
        id: inv.id(p),
        proof: inv.proof(p, &k2),
        record: pairing_record(p, &s1, &mut rng, &k0, T0).unwrap(),
    };
    h.inject(l20, &frame.to_text());
    // … or its own record, naming someone else.
    let frame = PairFrame::Pair {
        id: inv.id(p),
        proof: inv.proof(p, &k2),
        record: pairing_record(p, &s2, &mut rng2, &k1, T0).unwrap(),
    };
    h.inject(l20, &frame.to_text());
    h.run().unwrap();
    let reasons: Vec<String> = h.devices[0]
        .pair_sent
        .iter()
        .filter_map(|(_, _, f)| match f {
            PairFrame::Paired {
                outcome: Err(r), ..
            } => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasons,
        [
            PairRefusal::BadProof.reason(),
            PairRefusal::BadRecord.reason(),
            PairRefusal::BadRecord.reason()
        ]
    );
    assert!(!h.devices[0].shell.circle().tracks(&k2));
    // The invite is still good for the device holding it honestly.
    accept(&mut h, 1, &inv.to_text());
    h.run().unwrap();
    assert_eq!(last_paired(&h, 1), Some((k0, Ok(()))));
}

#[test]
fn an_invite_accepted_by_a_second_device_is_refused() {
    let mut h = net(3);
    h.link(1, 0);
    h.link(2, 0);
    let (k0, k1, k2) = (key(&h, 0), key(&h, 1), key(&h, 2));
    let text = invite(&mut h, 0).to_text();
    accept(&mut h, 1, &text);
    accept(&mut h, 2, &text);
    h.run().unwrap();
    assert_eq!(last_paired(&h, 1), Some((k0, Ok(()))));
    assert_eq!(last_paired(&h, 2), Some((k0, Err(PairRefusal::Used))));
    let members: Vec<_> = h.devices[0].shell.circle().members().copied().collect();
    assert_eq!(members, [k1]);
    assert!(!h.devices[0].shell.circle().tracks(&k2));
    assert!(
        !h.devices[2].shell.circle().tracks(&k0),
        "the refused side keeps nothing"
    );
    assert!(h.devices[2].records.is_empty());
}

#[test]
fn an_expired_invite_is_refused_even_with_its_expiry_pushed_out() {
    let mut h = net(2);
    h.link(1, 0);
    let k0 = key(&h, 0);
    let inv = invite(&mut h, 0);
    // The lifetime passes: the invitee refuses on the string's own expiry, sending nothing.
    h.run_until(Timestamp::from_millis(T0 * 1_000 + INVITE_LIFETIME_MS))
        .unwrap();
    accept(&mut h, 1, &inv.to_text());
    assert_eq!(last_paired(&h, 1), Some((k0, Err(PairRefusal::Expired))));
    assert!(pairs_sent(&h, 1).is_empty());
    // An expiry pushed out in the string changes nothing: the inviter keeps its own.
    let mut pushed = inv.clone();
    pushed.expires += 3_600;
    accept(&mut h, 1, &pushed.to_text());
    h.run().unwrap();
    assert_eq!(pairs_sent(&h, 1).len(), 1);
    assert!(matches!(
        last_paired(&h, 1),
        Some((_, Err(PairRefusal::Expired | PairRefusal::Unknown)))
    ));
    assert_eq!(h.devices[0].shell.circle().members().count(), 0);
    // A fresh invite still works.
    let fresh = invite(&mut h, 0);
    accept(&mut h, 1, &fresh.to_text());
    h.run().unwrap();
    assert_eq!(last_paired(&h, 1), Some((k0, Ok(()))));
}

#[test]
fn a_tampered_npub_fails() {
    let mut h = net(3);
    h.link(1, 0);
    h.link(1, 2);
    let (k0, k2) = (key(&h, 0), key(&h, 2));
    let inv = invite(&mut h, 0);
    let text = inv.to_text();
    // One character changed: the npub's checksum fails.
    let npub = bech32::encode_npub(&k0);
    let mut changed = npub.clone().into_bytes();
    changed[20] = if changed[20] == b'q' { b'p' } else { b'q' };
    let changed = String::from_utf8(changed).unwrap();
    assert_eq!(
        Invite::parse(&text.replace(&npub, &changed)),
        Err(InviteError::BadKey)
    );
    // Another valid npub put in its place (a stranger device 1 is linked to): the PAIR goes to
    // that key's link only, never to the real inviter, and the stranger holds no such invite.
    accept(&mut h, 1, &text.replace(&npub, &bech32::encode_npub(&k2)));
    h.run().unwrap();
    let sent = pairs_sent(&h, 1);
    assert_eq!(sent.len(), 1);
    assert!(h.devices[0].pair_sent.is_empty() && h.devices[0].paired.is_empty());
    assert_eq!(last_paired(&h, 1), Some((k2, Err(PairRefusal::Unknown))));
    // A key no link proves: nothing is sent, and the acceptance ends in time.
    let mut nobody = inv.clone();
    nobody.inviter = [3; 32];
    let before = pairs_sent(&h, 1).len();
    accept(&mut h, 1, &nobody.to_text());
    h.run().unwrap();
    assert_eq!(pairs_sent(&h, 1).len(), before);
    assert_eq!(
        last_paired(&h, 1),
        Some(([3; 32], Err(PairRefusal::Timeout)))
    );
    assert!(h.now() >= Timestamp::from_millis(T0 * 1_000 + ACCEPT_TIMEOUT_MS));
    assert_eq!(h.devices[1].shell.circle().members().count(), 0);
    // The real invite is untouched by all this.
    accept(&mut h, 1, &text);
    h.run().unwrap();
    assert_eq!(last_paired(&h, 1), Some((k0, Ok(()))));
}

#[test]
fn an_acceptance_waits_for_the_inviters_link_and_own_invites_are_refused() {
    let mut h = net(2);
    let (k0, k1) = (key(&h, 0), key(&h, 1));
    let text = invite(&mut h, 0).to_text();
    accept(&mut h, 0, &text);
    assert_eq!(last_paired(&h, 0), Some((k0, Err(PairRefusal::OwnInvite))));
    // No link yet: the PAIR waits, and goes out once a link proves the inviter's key.
    accept(&mut h, 1, &text);
    h.run_until(Timestamp::from_secs(T0 + 5)).unwrap();
    assert!(pairs_sent(&h, 1).is_empty());
    h.link(1, 0);
    h.run().unwrap();
    assert_eq!(pairs_sent(&h, 1).len(), 1);
    assert_eq!(last_paired(&h, 1), Some((k0, Ok(()))));
    assert_eq!(last_paired(&h, 0), Some((k1, Ok(()))));
    // An unasked PAIRED is ignored and counted.
    let (l10, _) = h.link(1, 0);
    let stray = PairFrame::Paired {
        id: [0; 16],
        outcome: Err("refused".into()),
    };
    h.inject(l10, &stray.to_text());
    h.run().unwrap();
    assert_eq!(h.devices[0].shell.stats().pair_answers_ignored, 1);
}
