//! `weft demo`: runs what weft can do today, locally, on embedded defaults, and shows it working.
//!
//! Each step computes its result live (fresh keys from the OS, both crypto providers) and checks
//! it; the demo fails loudly if any check does. It grows as the protocols land: one submodule per
//! protocol's live part.

mod airc;
mod minca;

use std::io::{self, Write};
use std::process::ExitCode;

use weft_proto::airc::signing::{self, Signed};
use weft_proto::crypto::{self, CryptoProvider, sigstring};
use weft_proto::minca::{auth, room::Room};

/// Runs the demo, writing what it does to `out`.
pub fn run(out: &mut impl Write) -> ExitCode {
    match steps(out) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("weft demo: cannot write output: {e}");
            ExitCode::FAILURE
        }
    }
}

fn steps(out: &mut impl Write) -> io::Result<bool> {
    let mut rng = crate::os_rng();
    let providers: [&'static dyn CryptoProvider; 2] =
        [crypto::default_provider(), crate::server_provider()];
    let mut ok = true;
    let mut check = |out: &mut dyn Write, what: &str, pass: bool| -> io::Result<()> {
        ok &= pass;
        writeln!(out, "  [{}] {what}", if pass { "ok" } else { "FAILED" })
    };

    writeln!(out, "weft {} demo", env!("CARGO_PKG_VERSION"))?;
    writeln!(
        out,
        "\nMinca §1.3: a space's room, its topic and its room key"
    )?;
    let space = "example-space-id";
    let p = providers[0];
    let room = Room::of_space(p, space);
    writeln!(
        out,
        "  space {space} -> room {room} -> topic {}",
        room.topic(p)
    )?;
    let same = providers
        .iter()
        .all(|q| Room::of_space(*q, space) == room && room.topic(*q) == room.topic(p));
    check(out, "every provider derives the same room and topic", same)?;

    writeln!(
        out,
        "\nMinca §6.2: two fresh session keys prove themselves in a room (minca-mesh/v1)"
    )?;
    for signer in providers {
        let (a, a_did) = session(signer, &mut rng);
        let (_, b_did) = session(signer, &mut rng);
        let nonce = auth::nonce(&mut rng);
        let t = auth::mesh_transcript(space, &a_did, &b_did, &nonce, "", "");
        let sig = auth::sign(signer, &a, &t).unwrap_or_default();
        for verifier in providers {
            check(
                out,
                &format!(
                    "signed by {}, verified by {}",
                    signer.name(),
                    verifier.name()
                ),
                auth::verify(verifier, &a_did, &t, &sig)
                    && !auth::verify(verifier, &b_did, &t, &sig),
            )?;
        }
    }

    writeln!(
        out,
        "\nAIRC §9: a realm key signs a message; a peer checks it"
    )?;
    let seed = crypto::generate_ed25519(&mut rng);
    let public = p.ed25519_public_key(&seed);
    let msg = Signed {
        id: "demo-1",
        from: "airc://example.com/alice/x",
        to: "airc://partner.example/support/desk",
        ts_ms: 1_790_380_000_123,
        kind: None,
        re: None,
        body: "hello",
    };
    let sig = sigstring::sign(p, &seed, msg.canonical().as_bytes());
    writeln!(out, "  kid {} signature {sig}", sigstring::kid(p, &public))?;
    for q in providers {
        let valid = sigstring::verify(q, &public, msg.canonical().as_bytes(), &sig);
        let forged = Signed {
            body: "hullo",
            ..msg
        }
        .canonical();
        let refused = !sigstring::verify(q, &public, forged.as_bytes(), &sig);
        check(
            out,
            &format!("{} accepts it and refuses a changed body", q.name()),
            valid && refused,
        )?;
    }
    writeln!(
        out,
        "  hello canonical: {:?}",
        signing::hello_canonical(
            "example.com",
            "partner.example",
            1_790_380_000,
            "6f1d2c3b4a596877"
        )
    )?;

    writeln!(
        out,
        "\nAIRC over real sockets: a realm server, a listener and a sender on this machine"
    )?;
    match airc::exchange(out) {
        Ok(pass) => check(
            out,
            "the message was delivered, acked, and read by the listener",
            pass,
        )?,
        Err(e) => check(out, &format!("the exchange failed: {e}"), false)?,
    }

    writeln!(
        out,
        "\nSimulator: AIRC realms through link drops, crashes and stalled acks (weft sim airc-realms)"
    )?;
    match weft_sim::airc::run(&weft_sim::airc::Scenario::small(1), None) {
        Ok(r) => {
            writeln!(
                out,
                "  {} messages sent, {} delivered, {} crashes, {} link drops, in {} ms of virtual time",
                r.sent,
                r.delivered,
                r.crashes,
                r.link_drops,
                r.virtual_duration.as_millis()
            )?;
            check(
                out,
                "every invariant held (one ack each, queued means held, no loss)",
                true,
            )?;
        }
        Err(v) => check(out, &format!("{v}"), false)?,
    }

    writeln!(
        out,
        "\nMinca over real sockets: a relay and two nodes meet, prove themselves over WebRTC and talk (weft relay | node)"
    )?;
    match minca::meeting(out, &mut check) {
        Ok(pass) => check(out, "the Minca meeting worked end to end", pass)?,
        Err(e) => check(out, &format!("the Minca meeting failed: {e}"), false)?,
    }

    writeln!(
        out,
        "\nAIRC across realms: a passport opens a link over a signed peer link (loopback TCP here; TLS or QUIC between machines)"
    )?;
    match airc::two_realms(out) {
        Ok(pass) => check(
            out,
            "the passport was redeemed, and the signed message crossed and was delivered",
            pass,
        )?,
        Err(e) => check(out, &format!("the two-realm exchange failed: {e}"), false)?,
    }
    writeln!(
        out,
        "{}",
        if ok {
            "\nall checks passed"
        } else {
            "\nSOME CHECKS FAILED"
        }
    )?;
    Ok(ok)
}

/// A fresh P-256 session key and its did:key.
fn session(
    p: &dyn CryptoProvider,
    rng: &mut chacha20::ChaCha20Rng,
) -> (crypto::P256Secret, String) {
    let secret = crypto::generate_p256(p, rng);
    let public = p
        .p256_public_key(&secret)
        .expect("generate_p256 returns only valid keys");
    (
        secret,
        weft_proto::codec::did_key::DidKey::P256(public.0).to_did(),
    )
}
