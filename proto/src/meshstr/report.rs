//! The report (meshstr §7.1, kind 30802) as a reader checks it offline, and when an issuer may
//! publish one (§4 `complaint/1.0`).
//!
//! A report is admissible only if it carries, in its inline evidence map, the kind 30801 its
//! `grant` tag names (that id, signed, kind 30801, by the reporter), and every `evidence` entry is
//! something the subject itself signed: a Nostr event by the subject (keyed by its id) or a receipt
//! signed by the subject (keyed by its chain link, SHA-256 of its canonical form without `sig`,
//! the construction a receipt is cited by) or a handover link the subject signed (keyed by its
//! name, §3.1). An `evidence` tag with no entry is a bare reference
//! to a public event. Anything else is not admitted. A reader resolves nothing. A report citing
//! a claim whose handover chain its reporter signed a link of is discarded unread (§3.1).

use alloc::string::String;
use alloc::vec::Vec;
use serde_json::Value;

use super::events::{COVERAGE, GRANT, REPORT, Refusal, validate};
use super::handover;
use super::keys::did_nostr_key;
use super::lower_hex;
use super::receipt::Receipt;
use super::window::Severity;
use crate::codec::hex;
use crate::crypto::CryptoProvider;
use crate::nostr::Event;

/// The most inline evidence entries a report may carry (not in the text, docs/decisions.md).
pub const MAX_EVIDENCE: usize = 64;

/// Why a report is discarded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inadmissible {
    /// The event fails kind 30802's tag rules (or its signature).
    Event(Refusal),
    /// The content is not `{"note": …, "evidence": {…}}` within bounds.
    Content,
    /// No carried kind 30801 under the `grant` tag's id, or it is not that id, not signed, not a
    /// 30801, or not by the reporter: discarded unread.
    NoGrant,
    /// An evidence entry whose key is not its digest, or that the subject did not sign.
    Evidence(String),
    /// An evidence entry of a kind this reader cannot check (a delivery envelope, a handover).
    Unverifiable(String),
    /// An inline entry no `evidence` tag names.
    Uncited(String),
    /// The reporter is the `from` of a link in the handover chain of the claim the report cites
    /// (§3.1): a hole in a set it handed over is its own; discarded unread.
    Barred,
}

/// A report a reader admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The reporter's key.
    pub reporter: [u8; 32],
    /// The subject's key (the `d` tag).
    pub subject: [u8; 32],
    /// The outcome, `S1`..`S4`.
    pub outcome: Severity,
    /// The grant's id.
    pub grant: [u8; 32],
    /// Evidence checked inline.
    pub checked: usize,
    /// Evidence cited as bare references to public events.
    pub bare: Vec<[u8; 32]>,
}

/// Checks a report the way a reader does, at `now_secs`, holding no claims of its own: see
/// [`admit_holding`].
pub fn admit(
    provider: &dyn CryptoProvider,
    report: &Event,
    now_secs: u64,
) -> Result<Admitted, Inadmissible> {
    admit_holding(provider, report, &[], now_secs)
}

/// Checks a report the way a reader does, at `now_secs`, with the kind 30803 claims the reader
/// holds (`held`): a report citing a claim (inline, or as a bare reference to one the reader
/// holds) whose handover chain names the reporter as the `from` of any link is discarded unread
/// ([`Inadmissible::Barred`], §3.1).
pub fn admit_holding(
    provider: &dyn CryptoProvider,
    report: &Event,
    held: &[Event],
    now_secs: u64,
) -> Result<Admitted, Inadmissible> {
    report
        .verify(provider)
        .map_err(|_| Inadmissible::Event(Refusal::BadSignature))?;
    if validate(report, now_secs).map_err(Inadmissible::Event)? != REPORT {
        return Err(Inadmissible::Event(Refusal::WrongKind));
    }
    let tag = |n: &str| report.tag_value(n).unwrap_or("");
    let subject = lower_hex::<32>(tag("d")).ok_or(Inadmissible::Content)?;
    let grant = lower_hex::<32>(tag("grant")).ok_or(Inadmissible::NoGrant)?;
    let outcome = Severity::parse(tag("outcome")).ok_or(Inadmissible::Content)?;
    let content: Value =
        serde_json::from_str(&report.content).map_err(|_| Inadmissible::Content)?;
    let evidence = content
        .get("evidence")
        .and_then(Value::as_object)
        .ok_or(Inadmissible::Content)?;
    if evidence.len() > MAX_EVIDENCE {
        return Err(Inadmissible::Content);
    }
    // The carried grant: the id it is filed under, signed, a 30801, by the reporter.
    let carried = evidence
        .get(&hex::encode(&grant))
        .ok_or(Inadmissible::NoGrant)?;
    let g = Event::from_value(carried).map_err(|_| Inadmissible::NoGrant)?;
    if g.id != grant || g.kind != GRANT || g.pubkey != report.pubkey || g.verify(provider).is_err()
    {
        return Err(Inadmissible::NoGrant);
    }
    let cited: Vec<&str> = report
        .tags
        .iter()
        .filter(|t| t.len() >= 2 && t[0] == "evidence")
        .map(|t| t[1].as_str())
        .collect();
    let mut checked = 0;
    let mut bare = Vec::new();
    let barred = |claim: &Event| {
        claim.kind == COVERAGE
            && claim.pubkey == subject
            && handover::signers_of(claim).contains(&report.pubkey)
    };
    for h in &cited {
        let Some(artefact) = evidence.get(*h) else {
            let id = lower_hex::<32>(h).ok_or(Inadmissible::Content)?;
            if held.iter().any(|c| c.id == id && barred(c)) {
                return Err(Inadmissible::Barred);
            }
            bare.push(id);
            continue;
        };
        check_evidence(provider, h, artefact, &subject)?;
        if Event::from_value(artefact).is_ok_and(|c| barred(&c)) {
            return Err(Inadmissible::Barred);
        }
        checked += 1;
    }
    for k in evidence.keys() {
        if *k != hex::encode(&grant) && !cited.contains(&k.as_str()) {
            return Err(Inadmissible::Uncited(k.clone()));
        }
    }
    Ok(Admitted {
        reporter: report.pubkey,
        subject,
        outcome,
        grant,
        checked,
        bare,
    })
}

fn check_evidence(
    provider: &dyn CryptoProvider,
    key: &str,
    artefact: &Value,
    subject: &[u8; 32],
) -> Result<(), Inadmissible> {
    let bad = || Inadmissible::Evidence(key.into());
    if artefact.get("kind").is_some() && artefact.get("pubkey").is_some() {
        let e = Event::from_value(artefact).map_err(|_| bad())?;
        if hex::encode(&e.id) != key || e.pubkey != *subject || e.verify(provider).is_err() {
            return Err(bad());
        }
        return Ok(());
    }
    if artefact.get("counters").is_some() {
        let r = Receipt::from_value(artefact).map_err(|_| bad())?;
        if hex::encode(&r.link(provider)) != key || !r.verify(provider, subject) {
            return Err(bad());
        }
        return Ok(());
    }
    if artefact.get("fingerprint").is_some() && artefact.get("from").is_some() {
        // A handover: reportable against its signer as an asserted claim is (§3.1).
        let l = handover::Link::from_value(artefact).ok_or_else(bad)?;
        let sig = l.sig.ok_or_else(bad)?;
        let name = l.name(provider);
        if hex::encode(&name) != key
            || did_nostr_key(&l.from) != Some(*subject)
            || !provider.schnorr_verify(subject, &name, &sig)
        {
            return Err(bad());
        }
        return Ok(());
    }
    Err(Inadmissible::Unverifiable(key.into()))
}

/// Whether an issuer may publish a report of `outcome` now (§4): S3 and S4 at once; S1 and S2
/// only against an unreachable peer, or once a `complaint/1.0` notice delivered at
/// `notice_at_secs` has waited one window.
pub fn may_publish(
    outcome: Severity,
    reachable: bool,
    notice_at_secs: Option<u64>,
    window_secs: u64,
    now_secs: u64,
) -> bool {
    match outcome {
        Severity::S0 => false,
        Severity::S3 | Severity::S4 => true,
        Severity::S1 | Severity::S2 => {
            !reachable
                || notice_at_secs.is_some_and(|at| now_secs >= at.saturating_add(window_secs))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{Secp256k1Secret, default_provider, generate_secp256k1};
    use crate::meshstr::limits::{Counter, Counters};
    use crate::nostr::event::UnsignedEvent;
    use alloc::vec;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;
    use serde_json::{Map, json};

    const NOW: u64 = 1787000000;

    fn t(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| String::from(*s)).collect()
    }

    fn ev(s: &Secp256k1Secret, kind: u16, tags: Vec<Vec<String>>, content: String) -> Event {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        UnsignedEvent {
            created_at: NOW,
            kind,
            tags,
            content,
        }
        .sign(default_provider(), s, &mut rng)
        .unwrap()
    }

    struct World {
        reporter: Secp256k1Secret,
        subject: Secp256k1Secret,
        grant: Event,
        receipt: Receipt,
    }

    fn world() -> World {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(71);
        let reporter = generate_secp256k1(p, &mut rng);
        let subject = generate_secp256k1(p, &mut rng);
        let h = "ab".repeat(32);
        let exp = alloc::format!("{}", NOW + 3600);
        let grant = ev(
            &reporter,
            GRANT,
            vec![
                t(&["d", &h]),
                t(&["commit", &h]),
                t(&["scheme", "s"]),
                t(&["window", "3600"]),
                t(&["epoch", "1"]),
                t(&["expiration", &exp]),
            ],
            "x".into(),
        );
        let mut counters = Counters::ZERO;
        counters.set(Counter::EventsIn, 10);
        let mut receipt = Receipt {
            grant: hex::encode(&grant.id),
            window: 496389,
            seq: 0,
            prev: [0; 32],
            counters,
            forwarded_for: vec![],
            at: NOW,
            sig: None,
        };
        receipt.sign(p, &subject, &[3; 32]).unwrap();
        World {
            reporter,
            subject,
            grant,
            receipt,
        }
    }

    fn report(w: &World, outcome: &str, evidence: Map<String, Value>, cite: &[String]) -> Event {
        let p = default_provider();
        let subject = hex::encode(&p.schnorr_public_key(&w.subject).unwrap());
        let exp = alloc::format!("{}", NOW + 3600);
        let mut tags = vec![
            t(&["d", &subject]),
            t(&["outcome", outcome]),
            t(&["grant", &hex::encode(&w.grant.id)]),
            t(&["windows", "496389"]),
            t(&["expiration", &exp]),
        ];
        for c in cite {
            tags.push(vec!["evidence".into(), c.clone()]);
        }
        let content = json!({"note": "diverged", "evidence": Value::Object(evidence)});
        ev(
            &w.reporter,
            REPORT,
            tags,
            crate::codec::json::canonical(&content),
        )
    }

    fn inline(w: &World) -> (Map<String, Value>, String) {
        let p = default_provider();
        let mut m = Map::new();
        m.insert(hex::encode(&w.grant.id), w.grant.to_value());
        let link = hex::encode(&w.receipt.link(p));
        m.insert(link.clone(), w.receipt.to_value());
        (m, link)
    }

    #[test]
    fn a_report_with_its_grant_and_the_subjects_receipt_is_admitted() {
        let w = world();
        let (m, link) = inline(&w);
        let a = admit(default_provider(), &report(&w, "S2", m, &[link]), NOW).unwrap();
        assert_eq!(a.outcome, Severity::S2);
        assert_eq!(a.checked, 1);
        assert_eq!(
            a.reporter,
            default_provider().schnorr_public_key(&w.reporter).unwrap()
        );
    }

    #[test]
    fn without_its_grant_a_report_is_discarded_unread() {
        let p = default_provider();
        let w = world();
        let (mut m, link) = inline(&w);
        m.remove(&hex::encode(&w.grant.id));
        assert_eq!(
            admit(p, &report(&w, "S2", m, core::slice::from_ref(&link)), NOW),
            Err(Inadmissible::NoGrant)
        );
        // A grant signed by somebody else (the subject granting itself, say) is not the reporter's.
        let (mut m, _) = inline(&w);
        let mut forged = w.grant.clone();
        forged.pubkey = p.schnorr_public_key(&w.subject).unwrap();
        m.insert(hex::encode(&w.grant.id), forged.to_value());
        assert_eq!(
            admit(p, &report(&w, "S2", m, &[link]), NOW),
            Err(Inadmissible::NoGrant)
        );
    }

    #[test]
    fn evidence_must_be_the_subjects_own_and_named_by_its_digest() {
        let p = default_provider();
        let w = world();
        // The reporter "quotes" a receipt it signed itself.
        let mut fake = w.receipt.clone();
        fake.sign(p, &w.reporter, &[4; 32]).unwrap();
        let (mut m, link) = inline(&w);
        m.insert(link.clone(), fake.to_value());
        assert_eq!(
            admit(p, &report(&w, "S2", m, core::slice::from_ref(&link)), NOW),
            Err(Inadmissible::Evidence(link.clone()))
        );
        // The quoted receipt's counters edited: no longer its digest.
        let (mut m, link) = inline(&w);
        let mut edited = w.receipt.to_value();
        edited["counters"]["events_in"] = json!(11);
        m.insert(link.clone(), edited);
        assert!(matches!(
            admit(p, &report(&w, "S2", m, &[link]), NOW),
            Err(Inadmissible::Evidence(_))
        ));
        // Inline evidence no tag cites.
        let (m, link) = inline(&w);
        assert_eq!(
            admit(p, &report(&w, "S2", m, &["cd".repeat(32)]), NOW),
            Err(Inadmissible::Uncited(link))
        );
        // A bare reference to a public event is allowed.
        let (mut m, _) = inline(&w);
        m.retain(|k, _| *k == hex::encode(&w.grant.id));
        let a = admit(p, &report(&w, "S3", m, &["cd".repeat(32)]), NOW).unwrap();
        assert_eq!(a.bare, vec![[0xcd; 32]]);
        // Not adverse: refused as an event.
        let (m, link) = inline(&w);
        assert_eq!(
            admit(p, &report(&w, "S0", m, &[link]), NOW),
            Err(Inadmissible::Event(Refusal::NotAdverse))
        );
    }

    #[test]
    fn s1_and_s2_wait_a_window_after_notice_s3_and_s4_do_not() {
        let w = 3600;
        assert!(!may_publish(Severity::S1, true, None, w, 10_000));
        assert!(!may_publish(Severity::S2, true, Some(10_000), w, 13_599));
        assert!(may_publish(Severity::S2, true, Some(10_000), w, 13_600));
        assert!(may_publish(Severity::S1, false, None, w, 0));
        assert!(may_publish(Severity::S3, true, None, w, 0));
        assert!(may_publish(Severity::S4, true, None, w, 0));
        assert!(!may_publish(Severity::S0, false, None, w, 0));
    }
    /// A chain root → middle → subject, the subject's claim over it, signed.
    fn handed(w: &World, root: &Secp256k1Secret) -> (Event, Vec<handover::Link>) {
        use crate::meshstr::keys::did_nostr;
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(72);
        let middle = generate_secp256k1(p, &mut rng);
        let did = |s: &Secp256k1Secret| did_nostr(&p.schnorr_public_key(s).unwrap());
        let hops = [(root, did(&middle)), (&middle, did(&w.subject))];
        let links: Vec<handover::Link> = hops
            .iter()
            .map(|(from, to)| {
                let mut l = handover::Link {
                    from: did(from),
                    to: to.clone(),
                    shard: "bristol-2026H2".into(),
                    claim: "c".into(),
                    filter: r##"{"kinds":[1]}"##.into(),
                    since: 1751328000,
                    until: 1767225600,
                    fingerprint: "ab".repeat(16),
                    count: 5,
                    at: 1787000000 - 10,
                    sig: None,
                };
                l.sign(p, from, &[0; 32]).unwrap();
                l
            })
            .collect();
        let l = &links[1];
        let content =
            json!({"handover": links.iter().map(handover::Link::to_value).collect::<Vec<_>>()});
        let claim = ev(
            &w.subject,
            COVERAGE,
            vec![
                t(&["d", "bristol-2026H2"]),
                t(&["filter", &l.filter]),
                t(&["completeness", "asserted"]),
                t(&["since", "1751328000"]),
                t(&["until", "1767225600"]),
                t(&["fingerprint", &l.fingerprint]),
                t(&["count", "5"]),
                t(&["handover", &hex::encode(&l.name(p))]),
            ],
            crate::codec::json::canonical(&content),
        );
        assert!(handover::check_claim(p, &claim, NOW).is_ok());
        (claim, links)
    }

    fn grant_only(w: &World) -> Map<String, Value> {
        let (mut m, _) = inline(w);
        m.retain(|k, _| *k == hex::encode(&w.grant.id));
        m
    }

    #[test]
    fn a_signer_of_the_cited_claims_chain_is_barred_from_reporting_the_hole() {
        let p = default_provider();
        let w = world();
        // The reporter is the chain's root: it handed the set on and now reports a hole in it.
        let (claim, _) = handed(&w, &w.reporter);
        let mut m = grant_only(&w);
        let id = hex::encode(&claim.id);
        m.insert(id.clone(), claim.to_value());
        assert_eq!(
            admit(p, &report(&w, "S3", m, core::slice::from_ref(&id)), NOW),
            Err(Inadmissible::Barred)
        );
        // Cited as a bare reference to a claim the reader holds: barred too.
        let m = grant_only(&w);
        let r = report(&w, "S3", m, core::slice::from_ref(&id));
        assert_eq!(
            admit_holding(p, &r, core::slice::from_ref(&claim), NOW),
            Err(Inadmissible::Barred)
        );
        assert!(
            admit(p, &r, NOW).is_ok(),
            "a reader without the claim cannot tell"
        );
        // Anyone else with a grant to the replica may file it.
        let stranger = generate_secp256k1(p, &mut ChaCha20Rng::seed_from_u64(73));
        let (claim, _) = handed(&w, &stranger);
        let mut m = grant_only(&w);
        let id = hex::encode(&claim.id);
        m.insert(id.clone(), claim.to_value());
        let a = admit(p, &report(&w, "S3", m, &[id]), NOW).unwrap();
        assert_eq!(a.checked, 1);
    }

    #[test]
    fn a_handover_is_evidence_against_its_signer() {
        let p = default_provider();
        let mut w = world();
        // The subject is the root of a chain: its own link is evidence against it.
        let subject = core::mem::replace(
            &mut w.subject,
            generate_secp256k1(p, &mut ChaCha20Rng::seed_from_u64(74)),
        );
        let (_, links) = handed(&w, &subject);
        w.subject = subject;
        let mut m = grant_only(&w);
        let name = hex::encode(&links[0].name(p));
        m.insert(name.clone(), links[0].to_value());
        let a = admit(p, &report(&w, "S3", m, core::slice::from_ref(&name)), NOW).unwrap();
        assert_eq!(a.checked, 1);
        // The next link is not the subject's: not evidence against it.
        let mut m = grant_only(&w);
        let other = hex::encode(&links[1].name(p));
        m.insert(other.clone(), links[1].to_value());
        assert_eq!(
            admit(p, &report(&w, "S3", m, core::slice::from_ref(&other)), NOW),
            Err(Inadmissible::Evidence(other))
        );
    }
}
