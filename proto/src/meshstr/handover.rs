//! Handover chains (meshstr §3.1, §3.2): the signed statements that let a replica assert a shard
//! it holds through the mesh, checked the way a reader checks them, offline and whole.
//!
//! A link is `{from, to, shard, claim, filter, since, until, fingerprint, count, at, sig}`; `sig`
//! is the `from` node's BIP-340 signature over SHA-256 of the canonical link without `sig` (the
//! construction a receipt is cited by), which is also the link's name. A chain runs from the
//! first-hand root to the claim: each link hands to the node that signs the next, every link
//! names the same set, no key appears twice, `until` is never after `at`, and a chain has at most
//! eight links. The claim's `handover` tag is the name of the last link. Every signer is barred
//! from reporting a hole in the set. `from` and `to` are `did:nostr` (docs/decisions.md).

use alloc::string::String;
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::keys::did_nostr_key;
use super::{digest_without_sig, lower_hex};
use crate::codec::hex;
use crate::crypto::{CryptoError, CryptoProvider, Secp256k1Secret};

/// A chain is at most eight links (§3.2).
pub const MAX_LINKS: usize = 8;

/// One handover link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// The signer, first-hand or previous replica.
    pub from: String,
    /// The replica it hands to.
    pub to: String,
    /// The shard's name.
    pub shard: String,
    /// The claim the set is asserted under.
    pub claim: String,
    /// The filter, as JSON text.
    pub filter: String,
    /// Range start.
    pub since: u64,
    /// Range end: a closed range, never after `at`.
    pub until: u64,
    /// The NIP-77 fingerprint of the set, hex.
    pub fingerprint: String,
    /// The number of events in the set.
    pub count: u64,
    /// When it was signed.
    pub at: u64,
    /// The signature, once signed.
    pub sig: Option<[u8; 64]>,
}

/// Why a chain was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainError {
    /// No links, or more than [`MAX_LINKS`].
    Length,
    /// A link that is not an object of exactly the eleven members.
    Shape(usize),
    /// A `from` or `to` that is not a `did:nostr`.
    BadNode(usize),
    /// A signature that does not verify.
    BadSignature(usize),
    /// `until` later than `at`: an open range cannot be handed over.
    OpenRange(usize),
    /// A link that does not hand to the next link's signer.
    Broken(usize),
    /// A link naming another set (filter, range, fingerprint, count or shard).
    OtherSet(usize),
    /// A key appearing twice.
    Repeated(usize),
}

impl Link {
    /// The link as JSON.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("from".into(), self.from.as_str().into());
        m.insert("to".into(), self.to.as_str().into());
        m.insert("shard".into(), self.shard.as_str().into());
        m.insert("claim".into(), self.claim.as_str().into());
        m.insert("filter".into(), self.filter.as_str().into());
        m.insert("since".into(), self.since.into());
        m.insert("until".into(), self.until.into());
        m.insert("fingerprint".into(), self.fingerprint.as_str().into());
        m.insert("count".into(), self.count.into());
        m.insert("at".into(), self.at.into());
        if let Some(sig) = &self.sig {
            m.insert("sig".into(), hex::encode(sig).into());
        }
        Value::Object(m)
    }

    /// Reads a signed link: exactly its eleven members.
    pub fn from_value(v: &Value) -> Option<Self> {
        let m = v.as_object()?;
        if m.len() != 11 {
            return None;
        }
        let s = |k: &str| m.get(k)?.as_str().map(String::from);
        let u = |k: &str| m.get(k)?.as_u64();
        Some(Link {
            from: s("from")?,
            to: s("to")?,
            shard: s("shard")?,
            claim: s("claim")?,
            filter: s("filter")?,
            since: u("since")?,
            until: u("until")?,
            fingerprint: s("fingerprint")?,
            count: u("count")?,
            at: u("at")?,
            sig: Some(lower_hex::<64>(m.get("sig")?.as_str()?)?),
        })
    }

    /// The link's name: SHA-256 of its canonical form without `sig`.
    pub fn name(&self, provider: &dyn CryptoProvider) -> [u8; 32] {
        digest_without_sig(provider, &self.to_value())
    }

    /// Signs with the `from` node's key.
    pub fn sign(
        &mut self,
        provider: &dyn CryptoProvider,
        secret: &Secp256k1Secret,
        aux: &[u8; 32],
    ) -> Result<(), CryptoError> {
        let name = self.name(provider);
        self.sig = Some(provider.schnorr_sign(secret, &name, aux)?);
        Ok(())
    }

    fn same_set(&self, other: &Link) -> bool {
        self.shard == other.shard
            && self.filter == other.filter
            && self.since == other.since
            && self.until == other.until
            && self.fingerprint == other.fingerprint
            && self.count == other.count
    }
}

/// A chain a reader has checked: its signers (every one barred from reporting a hole in the
/// set) and the name the claim's `handover` tag must carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    /// Every `from`, root first.
    pub signers: Vec<[u8; 32]>,
    /// The replica the last link hands to: the only node that may assert the set.
    pub holder: [u8; 32],
    /// The last link's name.
    pub tag: [u8; 32],
}

/// Checks a whole chain, root first. A reader checks the whole chain or it has checked nothing.
pub fn check_chain(provider: &dyn CryptoProvider, links: &[Link]) -> Result<Checked, ChainError> {
    if links.is_empty() || links.len() > MAX_LINKS {
        return Err(ChainError::Length);
    }
    let mut signers: Vec<[u8; 32]> = Vec::with_capacity(links.len());
    for (i, l) in links.iter().enumerate() {
        let from = did_nostr_key(&l.from).ok_or(ChainError::BadNode(i))?;
        let to = did_nostr_key(&l.to).ok_or(ChainError::BadNode(i))?;
        let sig = l.sig.ok_or(ChainError::BadSignature(i))?;
        if !provider.schnorr_verify(&from, &l.name(provider), &sig) {
            return Err(ChainError::BadSignature(i));
        }
        if l.until > l.at {
            return Err(ChainError::OpenRange(i));
        }
        if !l.same_set(&links[0]) {
            return Err(ChainError::OtherSet(i));
        }
        if links.get(i + 1).is_some_and(|next| next.from != l.to) {
            return Err(ChainError::Broken(i));
        }
        if signers.contains(&from)
            || (i + 1 == links.len() && (signers.contains(&to) || to == from))
        {
            return Err(ChainError::Repeated(i));
        }
        signers.push(from);
    }
    let last = &links[links.len() - 1];
    Ok(Checked {
        holder: did_nostr_key(&last.to).ok_or(ChainError::BadNode(links.len() - 1))?,
        tag: last.name(provider),
        signers,
    })
}

/// Whether a hole report by `reporter` against a claim resting on `chain` is discarded unread:
/// it is, when the reporter signed any link.
pub fn barred(chain: &Checked, reporter: &[u8; 32]) -> bool {
    chain.signers.contains(reporter)
}

/// Reads a claim's content `{"handover": [link, …]}`, refusing more than [`MAX_LINKS`] before
/// reading any.
pub fn chain_from_content(content: &str) -> Result<Vec<Link>, ChainError> {
    let v: Value = serde_json::from_str(content).map_err(|_| ChainError::Shape(0))?;
    let a = v
        .get("handover")
        .and_then(Value::as_array)
        .ok_or(ChainError::Shape(0))?;
    if a.is_empty() || a.len() > MAX_LINKS {
        return Err(ChainError::Length);
    }
    a.iter()
        .enumerate()
        .map(|(i, x)| Link::from_value(x).ok_or(ChainError::Shape(i)))
        .collect()
}

/// Why a coverage claim resting on a handover is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimError {
    /// Not a kind 30803, or its tags fail the kind's rules.
    NotAClaim,
    /// An `asserted` claim with no `handover` tag: a reader cannot tell it from a first-hand
    /// claim, so this function (which checks a replica's claim) refuses it.
    NoHandover,
    /// The chain inside it is refused.
    Chain(ChainError),
    /// The `handover` tag is not the last link's name.
    Tag,
    /// The last link does not hand to the claim's author.
    NotTheHolder,
    /// The claim's filter, `since`, `until`, `fingerprint` or `count` is not the handed set's.
    NotTheHandedSet,
    /// A `best-effort` claim carries a handover: there is nothing for it to open.
    NotAsserted,
}

/// Checks a replica's `asserted` kind 30803 against the chain it carries (§3.1): the whole chain,
/// the `handover` tag naming its last link, the last link handing to the claim's author, and the
/// claim's filter, `since`, `until`, `fingerprint` and `count` exactly the handed set's. (The
/// event's signature is [`crate::nostr::Event::verify`]'s to check.)
pub fn check_claim(
    provider: &dyn CryptoProvider,
    claim: &crate::nostr::Event,
    now_secs: u64,
) -> Result<Checked, ClaimError> {
    use super::events::{COVERAGE, validate};
    if validate(claim, now_secs) != Ok(COVERAGE) {
        return Err(ClaimError::NotAClaim);
    }
    let tag = |n: &str| claim.tag_value(n);
    let Some(named) = tag("handover") else {
        return Err(ClaimError::NoHandover);
    };
    if tag("completeness") != Some("asserted") {
        return Err(ClaimError::NotAsserted);
    }
    let links = chain_from_content(&claim.content).map_err(ClaimError::Chain)?;
    let checked = check_chain(provider, &links).map_err(ClaimError::Chain)?;
    if lower_hex::<32>(named) != Some(checked.tag) {
        return Err(ClaimError::Tag);
    }
    if checked.holder != claim.pubkey {
        return Err(ClaimError::NotTheHolder);
    }
    let last = &links[links.len() - 1];
    let n = |x: u64| alloc::format!("{x}");
    if tag("filter") != Some(last.filter.as_str())
        || tag("since") != Some(n(last.since).as_str())
        || tag("until") != Some(n(last.until).as_str())
        || tag("fingerprint") != Some(last.fingerprint.as_str())
        || tag("count") != Some(n(last.count).as_str())
    {
        return Err(ClaimError::NotTheHandedSet);
    }
    Ok(checked)
}

/// The `from` keys of every link a claim's content carries, read without checking the chain: the
/// reporters a reader discards unread (§3.1). A link naming a reporter it did not sign only bars
/// that reporter, so reading them unchecked is safe, and a broken chain still bars its signers.
pub fn signers_of(claim: &crate::nostr::Event) -> Vec<[u8; 32]> {
    if claim.tag_value("handover").is_none() {
        return Vec::new();
    }
    chain_from_content(&claim.content)
        .map(|links| {
            links
                .iter()
                .filter_map(|l| did_nostr_key(&l.from))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a coverage claim is reportable (§3.2): `asserted` is, `best-effort` promises nothing.
pub fn reportable(claim: &crate::nostr::Event) -> bool {
    claim.kind == super::events::COVERAGE && claim.tag_value("completeness") == Some("asserted")
}

/// The withdrawal of a claim (§3.2): the same `d` and filter republished `best-effort`, with a
/// NIP-40 `expiration`, no range, no fingerprint, no handover, empty content.
pub fn withdrawal(
    claim: &crate::nostr::Event,
    created_at: u64,
    expiration: u64,
) -> crate::nostr::event::UnsignedEvent {
    let keep = |n: &str| claim.tag(n).map(|t| t.to_vec());
    let mut tags: Vec<Vec<String>> = [keep("d"), keep("filter")].into_iter().flatten().collect();
    tags.push(alloc::vec!["completeness".into(), "best-effort".into()]);
    tags.push(crate::nostr::expiration::tag(expiration));
    crate::nostr::event::UnsignedEvent {
        created_at,
        kind: super::events::COVERAGE,
        tags,
        content: String::new(),
    }
}

/// Whether a receiver keeps a handover sent store-and-forward (§3.2 step 2): only where the set
/// it names fingerprints to what the receiver holds over that range; otherwise it is refused at
/// no cost.
pub fn keeps(link: &Link, held_fingerprint: &str, held_count: u64) -> bool {
    link.fingerprint == held_fingerprint && link.count == held_count
}

/// One step of a retirement (§3.2), in the order [`retirement`] gives them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// 0: a heartbeat carrying `retiring`, before anything is given away.
    Announce,
    /// 1: the shard's range closed at `until` (now): an open range cannot be handed over.
    Close {
        /// The shard.
        shard: String,
        /// The range's new end.
        until: u64,
    },
    /// 2: a handover of the closed shard to a peer holding a live grant, sent store-and-forward
    /// and not waited for.
    Handover {
        /// The shard.
        shard: String,
        /// The peer.
        to: [u8; 32],
    },
    /// 3: the claim republished `best-effort` ([`withdrawal`]), after every handover.
    Withdraw {
        /// The shard.
        shard: String,
    },
    /// 4: a receipt for an open window, owed to its issuer.
    Farewell {
        /// The grant the window is under.
        grant: String,
    },
}

/// The retirement sequence of a node that intends to stop (§3.2), in order: announce, close
/// every asserted shard at `now_secs`, hand each over to each peer holding a live grant, withdraw
/// every claim, then a receipt for every open window. Nothing here revokes the key (a revocation
/// MAY follow, only where the key itself retires), and nothing calls this on a restart: it is a
/// command an operator gives, never a consequence of starting.
pub fn retirement(
    now_secs: u64,
    asserted: &[String],
    live_grantees: &[[u8; 32]],
    open_windows: &[String],
) -> Vec<Step> {
    let mut steps = alloc::vec![Step::Announce];
    steps.extend(asserted.iter().map(|s| Step::Close {
        shard: s.clone(),
        until: now_secs,
    }));
    for s in asserted {
        steps.extend(live_grantees.iter().map(|to| Step::Handover {
            shard: s.clone(),
            to: *to,
        }));
    }
    steps.extend(asserted.iter().map(|s| Step::Withdraw { shard: s.clone() }));
    steps.extend(
        open_windows
            .iter()
            .map(|g| Step::Farewell { grant: g.clone() }),
    );
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{default_provider, generate_secp256k1};
    use crate::meshstr::keys::did_nostr;
    use alloc::vec;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    fn nodes(n: usize) -> (Vec<Secp256k1Secret>, Vec<String>) {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(31);
        let s: Vec<_> = (0..n).map(|_| generate_secp256k1(p, &mut rng)).collect();
        let d = s
            .iter()
            .map(|k| did_nostr(&p.schnorr_public_key(k).unwrap()))
            .collect();
        (s, d)
    }

    fn link(from: &str, to: &str) -> Link {
        Link {
            from: from.into(),
            to: to.into(),
            shard: "bristol-2026H2".into(),
            claim: "c".into(),
            filter: r##"{"#t":["bristol"],"kinds":[1]}"##.into(),
            since: 1751328000,
            until: 1767225600,
            fingerprint: "ab".repeat(16),
            count: 5,
            at: 1787100000,
            sig: None,
        }
    }

    fn chain(secrets: &[Secp256k1Secret], dids: &[String], len: usize) -> Vec<Link> {
        (0..len)
            .map(|i| {
                let mut l = link(&dids[i], &dids[i + 1]);
                l.sign(default_provider(), &secrets[i], &[0; 32]).unwrap();
                l
            })
            .collect()
    }

    #[test]
    fn a_whole_chain_checks_and_bars_every_signer() {
        let p = default_provider();
        let (s, d) = nodes(4);
        let c = chain(&s, &d, 3);
        let checked = check_chain(p, &c).unwrap();
        assert_eq!(checked.signers.len(), 3);
        assert_eq!(checked.tag, c[2].name(p));
        for k in &s[..3] {
            assert!(barred(&checked, &p.schnorr_public_key(k).unwrap()));
        }
        assert!(!barred(&checked, &p.schnorr_public_key(&s[3]).unwrap()));
        let content =
            serde_json::json!({"handover": c.iter().map(Link::to_value).collect::<Vec<_>>()});
        assert_eq!(
            chain_from_content(&crate::codec::json::canonical(&content)).unwrap(),
            c
        );
    }

    #[test]
    fn broken_chains_are_refused() {
        let p = default_provider();
        let (s, d) = nodes(10);
        let c = chain(&s, &d, 3);
        // Dropping the middle link: the first no longer hands to the last's signer.
        assert_eq!(
            check_chain(p, &[c[0].clone(), c[2].clone()]),
            Err(ChainError::Broken(0))
        );
        // Another set in one link (re-signed, so only the set differs).
        let mut other = c.clone();
        other[1].count = 6;
        other[1].sign(p, &s[1], &[0; 32]).unwrap();
        assert_eq!(check_chain(p, &other), Err(ChainError::OtherSet(1)));
        // An edited link without its signer's key.
        let mut edited = c.clone();
        edited[0].until -= 1;
        assert_eq!(check_chain(p, &edited), Err(ChainError::BadSignature(0)));
        // An open range.
        let mut open = vec![link(&d[0], &d[1])];
        open[0].until = open[0].at + 1;
        open[0].sign(p, &s[0], &[0; 32]).unwrap();
        assert_eq!(check_chain(p, &open), Err(ChainError::OpenRange(0)));
        // A key twice: handing back to the root.
        let mut back = chain(&s, &d, 2);
        back[1] = link(&d[1], &d[0]);
        back[1].sign(p, &s[1], &[0; 32]).unwrap();
        assert_eq!(check_chain(p, &back), Err(ChainError::Repeated(1)));
        // Nine links.
        assert_eq!(check_chain(p, &chain(&s, &d, 9)), Err(ChainError::Length));
        assert!(check_chain(p, &chain(&s, &d, 8)).is_ok());
        assert_eq!(check_chain(p, &[]), Err(ChainError::Length));
    }
    fn sign_ev(
        s: &Secp256k1Secret,
        tags: Vec<Vec<String>>,
        content: String,
    ) -> crate::nostr::Event {
        crate::nostr::event::UnsignedEvent {
            created_at: 1787100001,
            kind: crate::meshstr::events::COVERAGE,
            tags,
            content,
        }
        .sign(default_provider(), s, &mut ChaCha20Rng::seed_from_u64(3))
        .unwrap()
    }

    /// The replica's claim over exactly the set `c` hands over, signed by `holder`.
    pub(crate) fn claim_tags(c: &[Link], p: &dyn CryptoProvider) -> Vec<Vec<String>> {
        let l = &c[c.len() - 1];
        let t = |a: &str, b: &str| vec![String::from(a), String::from(b)];
        vec![
            t("d", "bristol-2026H2"),
            t("filter", &l.filter),
            t("completeness", "asserted"),
            t("since", &alloc::format!("{}", l.since)),
            t("until", &alloc::format!("{}", l.until)),
            t("fingerprint", &l.fingerprint),
            t("count", &alloc::format!("{}", l.count)),
            t("handover", &hex::encode(&l.name(p))),
        ]
    }

    pub(crate) fn content(c: &[Link]) -> String {
        crate::codec::json::canonical(
            &serde_json::json!({"handover": c.iter().map(Link::to_value).collect::<Vec<_>>()}),
        )
    }

    const NOW: u64 = 1787100001;

    #[test]
    fn a_replica_asserts_exactly_the_handed_set() {
        let p = default_provider();
        let (s, d) = nodes(4);
        let c = chain(&s, &d, 3);
        let claim = sign_ev(&s[3], claim_tags(&c, p), content(&c));
        let checked = check_claim(p, &claim, NOW).unwrap();
        assert_eq!(checked.signers.len(), 3);
        assert!(reportable(&claim));
        // Any of the five terms widened or changed.
        for (i, v) in [
            (1, "{}"),
            (3, "1751327999"),
            (4, "1767225601"),
            (5, "cd"),
            (6, "6"),
        ] {
            let mut tags = claim_tags(&c, p);
            tags[i][1] = v.into();
            let e = sign_ev(&s[3], tags, content(&c));
            assert_eq!(
                check_claim(p, &e, NOW),
                Err(ClaimError::NotTheHandedSet),
                "{i}"
            );
        }
        // Asserted by a node the chain does not hand to (the root itself, say).
        let by_root = sign_ev(&s[0], claim_tags(&c, p), content(&c));
        assert_eq!(check_claim(p, &by_root, NOW), Err(ClaimError::NotTheHolder));
        // Carrying only the last link: it no longer hands from the root, so it bars only one
        // signer; a reader checking this claim sees a one-link chain by s[2], not s[3]'s holder.
        let last_only = sign_ev(&s[3], claim_tags(&c[2..], p), content(&c[2..]));
        assert_eq!(check_claim(p, &last_only, NOW).unwrap().signers.len(), 1);
        // A tag naming another link.
        let mut tags = claim_tags(&c, p);
        tags[7][1] = hex::encode(&c[1].name(p));
        let e = sign_ev(&s[3], tags, content(&c));
        assert_eq!(check_claim(p, &e, NOW), Err(ClaimError::Tag));
        // An asserted claim with no handover is not a replica's.
        let mut tags = claim_tags(&c, p);
        tags.pop();
        let e = sign_ev(&s[3], tags, String::new());
        assert_eq!(check_claim(p, &e, NOW), Err(ClaimError::NoHandover));
        // A broken chain inside.
        let e = sign_ev(
            &s[3],
            claim_tags(&c, p),
            content(&[c[0].clone(), c[2].clone()]),
        );
        assert_eq!(
            check_claim(p, &e, NOW),
            Err(ClaimError::Chain(ChainError::Broken(0)))
        );
        assert_eq!(
            signers_of(&e).len(),
            2,
            "a broken chain still bars its signers"
        );
    }

    #[test]
    fn a_withdrawal_is_best_effort_at_the_same_d_and_lapses() {
        let p = default_provider();
        let (s, d) = nodes(4);
        let c = chain(&s, &d, 1);
        let claim = sign_ev(&s[1], claim_tags(&c, p), content(&c));
        let w = sign_ev(
            &s[1],
            withdrawal(&claim, NOW, NOW + 86400).tags,
            String::new(),
        );
        assert_eq!(w.tag_value("d"), claim.tag_value("d"));
        assert_eq!(w.tag_value("completeness"), Some("best-effort"));
        assert_eq!(w.tag_value("expiration"), Some("1787186401"));
        assert!(w.tag("handover").is_none() && w.content.is_empty());
        assert!(!reportable(&w));
        assert_eq!(
            crate::meshstr::events::validate(&w, NOW),
            Ok(crate::meshstr::events::COVERAGE)
        );
        assert_eq!(
            crate::meshstr::events::validate(&w, NOW + 86400),
            Err(crate::meshstr::events::Refusal::Expired),
            "the replacement lapses"
        );
    }

    #[test]
    fn a_receiver_keeps_a_handover_only_where_it_holds_the_set() {
        let (_, d) = nodes(2);
        let l = link(&d[0], &d[1]);
        assert!(keeps(&l, &"ab".repeat(16), 5));
        assert!(!keeps(&l, &"ab".repeat(16), 4));
        assert!(!keeps(&l, &"cd".repeat(16), 5));
    }

    #[test]
    fn retirement_runs_in_order() {
        let shards = [String::from("a"), String::from("b")];
        let steps = retirement(NOW, &shards, &[[1; 32], [2; 32]], &[String::from("g")]);
        let rank = |s: &Step| match s {
            Step::Announce => 0,
            Step::Close { until, .. } => {
                assert_eq!(*until, NOW);
                1
            }
            Step::Handover { .. } => 2,
            Step::Withdraw { .. } => 3,
            Step::Farewell { .. } => 4,
        };
        let ranks: Vec<_> = steps.iter().map(rank).collect();
        assert_eq!(ranks, [0, 1, 1, 2, 2, 2, 2, 3, 3, 4]);
        // Nothing to give away: still announce, then the farewell.
        assert_eq!(
            retirement(NOW, &[], &[[1; 32]], &[String::from("g")]),
            [Step::Announce, Step::Farewell { grant: "g".into() }]
        );
    }
}
