//! NIP-59 gift wrap, the nostr binding of meshstr's control plane (§4.1, §9.2): kind 21059 for live
//! control (the default) and kind 1059 when store-and-forward is required.
//!
//! A **rumor** is an unsigned event (id, no `sig`), so its author can deny it to anyone but the
//! recipient; a **seal** (kind 13, no tags) is the rumor's JSON as NIP-44 v2 ciphertext from the
//! author to the recipient, signed by the author; a **wrap** is the seal's JSON as NIP-44 v2
//! ciphertext from a one-time key to the recipient, tagged `["p", recipient]` and signed by the
//! one-time key. Seal and wrap `created_at` are drawn up to [`MAX_TWEAK_SECS`] into the past, as
//! NIP-59 asks, from the RNG the caller hands in. Opening checks, in order: the wrap's id and
//! signature, its kind and `p`, the seal's id and signature, kind 13 and no tags, the rumor's id,
//! and that the rumor's author is the seal's signer — so nobody can seal a rumor in another's
//! name. Interoperates with nostr-tools' `nip59` (`drivers/tests/meshstr_interop.rs`).

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use serde_json::{Value, json};

use super::nip44::{self, Nip44Error};
use crate::codec::hex;
use crate::crypto::{CryptoProvider, Secp256k1Secret, generate_secp256k1};
use crate::nostr::Event;
use crate::nostr::event::{UnsignedEvent, id_serialization};

/// Kind 13: the seal.
pub const SEAL: u16 = 13;
/// Kind 1059: the gift wrap, store-and-forward.
pub const WRAP: u16 = 1059;
/// Kind 21059: the ephemeral gift wrap, meshstr's live control transport (the default, §4.1).
pub const EPHEMERAL_WRAP: u16 = 21059;
/// How far into the past a seal's or wrap's `created_at` may be drawn: two days (NIP-59).
pub const MAX_TWEAK_SECS: u64 = 2 * 24 * 3600;

/// An unsigned event: what the author says, deniable to all but the recipient.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rumor {
    /// The id NIP-01 computes over the fields below.
    pub id: [u8; 32],
    /// The author's key.
    pub pubkey: [u8; 32],
    /// Unix seconds.
    pub created_at: u64,
    /// The kind.
    pub kind: u16,
    /// Tags.
    pub tags: Vec<Vec<String>>,
    /// The content.
    pub content: String,
}

impl Rumor {
    /// The rumor of `event` by `pubkey`, its id computed.
    pub fn new(provider: &dyn CryptoProvider, pubkey: [u8; 32], event: UnsignedEvent) -> Self {
        let id = provider.sha256(&[id_serialization(
            &pubkey,
            event.created_at,
            event.kind,
            &event.tags,
            &event.content,
        )
        .as_bytes()]);
        Rumor {
            id,
            pubkey,
            created_at: event.created_at,
            kind: event.kind,
            tags: event.tags,
            content: event.content,
        }
    }

    /// The rumor as JSON: NIP-01's members without `sig`.
    pub fn to_value(&self) -> Value {
        json!({
            "id": hex::encode(&self.id),
            "pubkey": hex::encode(&self.pubkey),
            "created_at": self.created_at,
            "kind": self.kind,
            "tags": self.tags,
            "content": self.content,
        })
    }

    /// Reads a rumor: NIP-01's members, strictly as [`Event::from_value`] reads them, no `sig`
    /// (a signed rumor is not deniable, so it is not one), and an id that is its fields' id.
    pub fn from_value(provider: &dyn CryptoProvider, v: &Value) -> Result<Self, WrapError> {
        let mut o = v.as_object().ok_or(WrapError::Rumor)?.clone();
        if o.contains_key("sig") {
            return Err(WrapError::Rumor);
        }
        // The event reader checks every member's type and bounds; the signature it wants is not
        // a rumor's, so a placeholder stands in and is never checked.
        o.insert("sig".into(), Value::from("00".repeat(64)));
        let e = Event::from_value(&Value::Object(o)).map_err(|_| WrapError::Rumor)?;
        let r = Rumor::new(
            provider,
            e.pubkey,
            UnsignedEvent {
                created_at: e.created_at,
                kind: e.kind,
                tags: e.tags,
                content: e.content,
            },
        );
        if r.id != e.id {
            return Err(WrapError::RumorId);
        }
        Ok(r)
    }
}

/// Why a gift wrap could not be made or opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrapError {
    /// Not kind 1059 or 21059 (or asked to wrap as another kind).
    WrongKind,
    /// The wrap or the seal does not verify (id or signature).
    BadSignature,
    /// The wrap's `p` tag is not the recipient.
    NotAddressed,
    /// NIP-44 refused: the wrong key, a tampered payload.
    Nip44(Nip44Error),
    /// The seal is not a kind 13 event with no tags.
    Seal,
    /// The rumor is not an unsigned NIP-01 event.
    Rumor,
    /// The rumor's id is not its fields' id.
    RumorId,
    /// The rumor's author is not the seal's signer: a rumor sealed in another's name.
    Impersonation,
    /// A key is not valid.
    Key,
}

fn tweak(now_secs: u64, rng: &mut dyn rand_core::CryptoRng) -> u64 {
    now_secs.saturating_sub(rng.next_u64() % MAX_TWEAK_SECS)
}

/// Wraps `rumor` from its author (`author`, whose key must be the rumor's) to `recipient`, as kind
/// `kind` (1059 or 21059): seals it, then wraps the seal under a one-time key drawn from `rng`.
pub fn wrap(
    provider: &dyn CryptoProvider,
    author: &Secp256k1Secret,
    rumor: &Rumor,
    recipient: &[u8; 32],
    kind: u16,
    now_secs: u64,
    rng: &mut dyn rand_core::CryptoRng,
) -> Result<Event, WrapError> {
    if kind != WRAP && kind != EPHEMERAL_WRAP {
        return Err(WrapError::WrongKind);
    }
    if provider
        .schnorr_public_key(author)
        .map_err(|_| WrapError::Key)?
        != rumor.pubkey
    {
        return Err(WrapError::Impersonation);
    }
    let ck = nip44::conversation_key(provider, author, recipient).map_err(WrapError::Nip44)?;
    let sealed = nip44::encrypt(provider, &ck, &rumor.to_value().to_string(), rng)
        .map_err(WrapError::Nip44)?;
    let seal = UnsignedEvent {
        created_at: tweak(now_secs, rng),
        kind: SEAL,
        tags: Vec::new(),
        content: sealed,
    }
    .sign(provider, author, rng)
    .map_err(|_| WrapError::Key)?;
    let one_time = generate_secp256k1(provider, rng);
    let ck = nip44::conversation_key(provider, &one_time, recipient).map_err(WrapError::Nip44)?;
    let content = nip44::encrypt(provider, &ck, &seal.to_json(), rng).map_err(WrapError::Nip44)?;
    UnsignedEvent {
        created_at: tweak(now_secs, rng),
        kind,
        tags: vec![vec![String::from("p"), hex::encode(recipient)]],
        content,
    }
    .sign(provider, &one_time, rng)
    .map_err(|_| WrapError::Key)
}

/// What opening a wrap gives: the rumor and the seal's signer (who is its author).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    /// The rumor.
    pub rumor: Rumor,
    /// The seal, as received.
    pub seal: Event,
}

/// Opens a gift wrap as its recipient (`secret`), checking everything the module docs list.
pub fn unwrap(
    provider: &dyn CryptoProvider,
    secret: &Secp256k1Secret,
    wrap: &Event,
) -> Result<Opened, WrapError> {
    if wrap.kind != WRAP && wrap.kind != EPHEMERAL_WRAP {
        return Err(WrapError::WrongKind);
    }
    wrap.verify(provider).map_err(|_| WrapError::BadSignature)?;
    let me = provider
        .schnorr_public_key(secret)
        .map_err(|_| WrapError::Key)?;
    if wrap.tag_value("p") != Some(hex::encode(&me).as_str()) {
        return Err(WrapError::NotAddressed);
    }
    let ck = nip44::conversation_key(provider, secret, &wrap.pubkey).map_err(WrapError::Nip44)?;
    let seal_json = nip44::decrypt(provider, &ck, &wrap.content).map_err(WrapError::Nip44)?;
    let seal = Event::parse(&seal_json).map_err(|_| WrapError::Seal)?;
    if seal.kind != SEAL || !seal.tags.is_empty() {
        return Err(WrapError::Seal);
    }
    seal.verify(provider).map_err(|_| WrapError::BadSignature)?;
    let ck = nip44::conversation_key(provider, secret, &seal.pubkey).map_err(WrapError::Nip44)?;
    let rumor_json = nip44::decrypt(provider, &ck, &seal.content).map_err(WrapError::Nip44)?;
    let v: Value = serde_json::from_str(&rumor_json).map_err(|_| WrapError::Rumor)?;
    let rumor = Rumor::from_value(provider, &v)?;
    if rumor.pubkey != seal.pubkey {
        return Err(WrapError::Impersonation);
    }
    Ok(Opened { rumor, seal })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::default_provider;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    const NOW: u64 = 1_787_000_000;

    fn parties(rng: &mut ChaCha20Rng) -> (Secp256k1Secret, Secp256k1Secret, Secp256k1Secret) {
        let p = default_provider();
        (
            generate_secp256k1(p, rng),
            generate_secp256k1(p, rng),
            generate_secp256k1(p, rng),
        )
    }

    fn rumor(author: &Secp256k1Secret, content: &str) -> Rumor {
        let p = default_provider();
        Rumor::new(
            p,
            p.schnorr_public_key(author).unwrap(),
            UnsignedEvent {
                created_at: NOW,
                kind: 14,
                tags: vec![],
                content: content.into(),
            },
        )
    }

    /// Re-signs `wrap` by a fresh one-time key after `edit` to its decrypted seal.
    fn rewrap(
        to: &Secp256k1Secret,
        wrap: &Event,
        kind: u16,
        rng: &mut ChaCha20Rng,
        edit: impl FnOnce(&mut Value),
    ) -> Event {
        let p = default_provider();
        let ck = nip44::conversation_key(p, to, &wrap.pubkey).unwrap();
        let mut seal: Value =
            serde_json::from_str(&nip44::decrypt(p, &ck, &wrap.content).unwrap()).unwrap();
        edit(&mut seal);
        let one_time = generate_secp256k1(p, rng);
        let me = p.schnorr_public_key(to).unwrap();
        let ck = nip44::conversation_key(p, &one_time, &me).unwrap();
        UnsignedEvent {
            created_at: NOW,
            kind,
            tags: vec![vec!["p".into(), hex::encode(&me)]],
            content: nip44::encrypt(p, &ck, &seal.to_string(), rng).unwrap(),
        }
        .sign(p, &one_time, rng)
        .unwrap()
    }

    #[test]
    fn a_wrap_opens_for_its_recipient_only_and_names_its_author() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(59);
        let (alice, bob, eve) = parties(&mut rng);
        let r = rumor(&alice, "peering/1.0/propose");
        let bob_pk = p.schnorr_public_key(&bob).unwrap();
        for kind in [EPHEMERAL_WRAP, WRAP] {
            let w = wrap(p, &alice, &r, &bob_pk, kind, NOW, &mut rng).unwrap();
            assert_eq!(w.kind, kind);
            assert_ne!(w.pubkey, r.pubkey, "the wrap is signed by a one-time key");
            assert!(w.created_at <= NOW && w.created_at > NOW - MAX_TWEAK_SECS);
            let o = unwrap(p, &bob, &w).unwrap();
            assert_eq!(o.rumor, r);
            assert_eq!(o.seal.pubkey, r.pubkey);
            assert!(o.seal.created_at <= NOW);
            // Eve, to whom it is not addressed, opens nothing.
            assert_eq!(unwrap(p, &eve, &w), Err(WrapError::NotAddressed));
        }
        assert_eq!(
            wrap(p, &alice, &r, &bob_pk, 14, NOW, &mut rng),
            Err(WrapError::WrongKind)
        );
        assert_eq!(
            wrap(p, &eve, &r, &bob_pk, WRAP, NOW, &mut rng),
            Err(WrapError::Impersonation),
            "nobody wraps another's rumor as its author"
        );
    }

    #[test]
    fn tampered_forged_and_impersonating_wraps_are_refused() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(60);
        let (alice, bob, eve) = parties(&mut rng);
        let bob_pk = p.schnorr_public_key(&bob).unwrap();
        let r = rumor(&alice, "budget/1.0/receipt");
        let w = wrap(p, &alice, &r, &bob_pk, WRAP, NOW, &mut rng).unwrap();
        // The wrap's content altered after signing.
        let mut t = w.clone();
        t.content
            .replace_range(10..11, if &t.content[10..11] == "A" { "B" } else { "A" });
        assert_eq!(unwrap(p, &bob, &t), Err(WrapError::BadSignature));
        // The seal's content changed under a fresh wrap: its signature fails.
        let bad = rewrap(&bob, &w, WRAP, &mut rng, |s| {
            s["created_at"] = (NOW - 1).into();
        });
        assert_eq!(unwrap(p, &bob, &bad), Err(WrapError::BadSignature));
        // Eve seals a rumor that names Alice as author: the seal is Eve's, so refused.
        let forged = {
            let ck = nip44::conversation_key(p, &eve, &bob_pk).unwrap();
            let seal = UnsignedEvent {
                created_at: NOW,
                kind: SEAL,
                tags: vec![],
                content: nip44::encrypt(p, &ck, &r.to_value().to_string(), &mut rng).unwrap(),
            }
            .sign(p, &eve, &mut rng)
            .unwrap();
            rewrap(&bob, &w, WRAP, &mut rng, |s| *s = seal.to_value())
        };
        assert_eq!(unwrap(p, &bob, &forged), Err(WrapError::Impersonation));
        // A seal with a tag (NIP-59: tags MUST be empty), a seal of another kind.
        for edit in [
            (|s: &mut Value| s["tags"] = serde_json::json!([["p", "x"]])) as fn(&mut Value),
            |s: &mut Value| s["kind"] = 14.into(),
        ] {
            let bad = rewrap(&bob, &w, WRAP, &mut rng, edit);
            assert_eq!(unwrap(p, &bob, &bad), Err(WrapError::Seal));
        }
        // A rumor whose id is not its own, or that carries a signature.
        let mut wrong = r.clone();
        wrong.content = "budget/1.0/dispute".into();
        let mut v = wrong.to_value();
        assert_eq!(Rumor::from_value(p, &v), Err(WrapError::RumorId));
        v = r.to_value();
        v["sig"] = "00".repeat(64).into();
        assert_eq!(Rumor::from_value(p, &v), Err(WrapError::Rumor));
        // Not a wrap at all.
        let mut k = w.clone();
        k.kind = 1;
        assert_eq!(unwrap(p, &bob, &k), Err(WrapError::WrongKind));
    }
}
