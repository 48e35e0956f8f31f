//! The grant envelope (meshstr §6.1, §9.1 kind 30801) and the job receipt envelope (§8.1, kind
//! 30811): what is public is a blinded pair identifier and a commitment; the body is NIP-44 v2
//! ciphertext addressed to the subject.
//!
//! - `d` = HKDF-SHA256 over the issuer/subject ECDH x-coordinate, under the salt and info of
//!   [`Blinding`], so only the two parties can derive it;
//! - `commit` = SHA-256(blinding ‖ canonical body), the blinding fresh random per commitment;
//! - the content is NIP-44 v2 of the canonical `{"blinding": hex, "body": …}`, so the subject can
//!   check the commitment and nobody else learns who granted whom how much.
//!
//! `constants.json` (`blinding.grant`, `blinding.job`, `commitment.scheme`) was not handed over,
//! so the salts, infos and scheme name are weft's own (docs/decisions.md).

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::events::{GRANT, JOB_RECEIPT};
use super::nip44::{self, Nip44Error};
use super::{canonical, lower_hex};
use crate::codec::hex;
use crate::crypto::{CryptoProvider, Secp256k1Secret, hkdf_expand, hkdf_extract};
use crate::nostr::Event;
use crate::nostr::event::UnsignedEvent;

/// Which blinding a `d` is derived under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blinding {
    /// `blinding.grant`: a kind 30801's `d`.
    Grant,
    /// `blinding.job`: a kind 30811's `d`.
    Job,
}

impl Blinding {
    /// The HKDF salt (docs/decisions.md).
    pub const fn salt(self) -> &'static [u8] {
        match self {
            Blinding::Grant => b"meshstr/blinding/grant/1",
            Blinding::Job => b"meshstr/blinding/job/1",
        }
    }

    /// The HKDF info (docs/decisions.md).
    pub const fn info(self) -> &'static [u8] {
        match self {
            Blinding::Grant => b"meshstr grant d",
            Blinding::Job => b"meshstr job d",
        }
    }
}

/// The `scheme` tag: SHA-256 over the 32-byte blinding then the canonical body.
pub const COMMITMENT_SCHEME: &str = "sha256-blinded/1";

/// Bytes of fresh blinding per commitment (`commitment.blinding_factor`).
pub const BLINDING_BYTES: usize = 32;

/// The blinded `d` of a pair: both parties derive the same one, from either side's secret and
/// the other's key.
pub fn blinded_d(
    provider: &dyn CryptoProvider,
    secret: &Secp256k1Secret,
    peer: &[u8; 32],
    blinding: Blinding,
) -> Result<[u8; 32], Nip44Error> {
    let shared = provider
        .secp256k1_ecdh(secret, peer)
        .map_err(Nip44Error::Key)?;
    let prk = hkdf_extract(provider, blinding.salt(), &shared);
    let mut d = [0u8; 32];
    hkdf_expand(provider, &prk, blinding.info(), &mut d);
    Ok(d)
}

/// The commitment to `body` under `blinding`: SHA-256(blinding ‖ canonical body).
pub fn commitment(provider: &dyn CryptoProvider, blinding: &[u8; 32], body: &Value) -> [u8; 32] {
    provider.sha256(&[blinding, canonical(body).as_bytes()])
}

/// What a sealed envelope names besides its body.
#[derive(Clone, Copy, Debug)]
pub struct Envelope {
    /// Kind 30801 (grant) or 30811 (job receipt).
    pub kind: u16,
    /// The grant's window in seconds (grants only).
    pub window_secs: u64,
    /// The grant's epoch (grants only).
    pub epoch: u64,
    /// `created_at`.
    pub created_at: u64,
    /// The NIP-40 expiration.
    pub expiration: u64,
}

/// Why an envelope could not be sealed or opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantError {
    /// Not kind 30801 or 30811.
    WrongKind,
    /// NIP-44 refused (a bad key, a wrong MAC, a bad length).
    Nip44(Nip44Error),
    /// The `d` is not the pair's: not addressed to this subject by this issuer.
    NotOurs,
    /// A tag or the decrypted body is malformed.
    Shape,
    /// The body does not match the public `commit`.
    Commitment,
}

fn blinding_of(kind: u16) -> Result<Blinding, GrantError> {
    match kind {
        GRANT => Ok(Blinding::Grant),
        JOB_RECEIPT => Ok(Blinding::Job),
        _ => Err(GrantError::WrongKind),
    }
}

/// Seals `body` from the issuer (`secret`) to `subject`: the unsigned envelope, ready for the
/// issuer to sign. `blinding` and `nonce` are drawn by the caller from its injected RNG.
pub fn seal(
    provider: &dyn CryptoProvider,
    secret: &Secp256k1Secret,
    subject: &[u8; 32],
    env: &Envelope,
    body: &Value,
    blinding: &[u8; 32],
    nonce: &[u8; 32],
) -> Result<UnsignedEvent, GrantError> {
    let which = blinding_of(env.kind)?;
    let d = blinded_d(provider, secret, subject, which).map_err(GrantError::Nip44)?;
    let commit = commitment(provider, blinding, body);
    let mut plain = Map::new();
    plain.insert("blinding".into(), Value::from(hex::encode(blinding)));
    plain.insert("body".into(), body.clone());
    let ck = nip44::conversation_key(provider, secret, subject).map_err(GrantError::Nip44)?;
    let content =
        nip44::encrypt_with_nonce(provider, &ck, nonce, &canonical(&Value::Object(plain)))
            .map_err(GrantError::Nip44)?;
    let s = |x: &str| String::from(x);
    let mut tags: Vec<Vec<String>> = vec![
        vec![s("d"), hex::encode(&d)],
        vec![s("commit"), hex::encode(&commit)],
        vec![s("scheme"), s(COMMITMENT_SCHEME)],
    ];
    if env.kind == GRANT {
        tags.push(vec![s("window"), alloc::format!("{}", env.window_secs)]);
        tags.push(vec![s("epoch"), alloc::format!("{}", env.epoch)]);
    }
    tags.push(crate::nostr::expiration::tag(env.expiration));
    Ok(UnsignedEvent {
        created_at: env.created_at,
        kind: env.kind,
        tags,
        content,
    })
}

/// Opens an envelope as its subject (`secret`): checks that `d` is the pair's, decrypts, and
/// checks the body against the public commitment. Returns the body. (The event's signature is
/// [`crate::nostr::Event::verify`]'s to check.)
pub fn open(
    provider: &dyn CryptoProvider,
    secret: &Secp256k1Secret,
    e: &Event,
) -> Result<Value, GrantError> {
    let which = blinding_of(e.kind)?;
    let tag = |n: &str| e.tag_value(n).ok_or(GrantError::Shape);
    let d = lower_hex::<32>(tag("d")?).ok_or(GrantError::Shape)?;
    let commit = lower_hex::<32>(tag("commit")?).ok_or(GrantError::Shape)?;
    if tag("scheme")? != COMMITMENT_SCHEME {
        return Err(GrantError::Shape);
    }
    if blinded_d(provider, secret, &e.pubkey, which).map_err(GrantError::Nip44)? != d {
        return Err(GrantError::NotOurs);
    }
    let ck = nip44::conversation_key(provider, secret, &e.pubkey).map_err(GrantError::Nip44)?;
    let plain = nip44::decrypt(provider, &ck, &e.content).map_err(GrantError::Nip44)?;
    let v: Value = serde_json::from_str(&plain).map_err(|_| GrantError::Shape)?;
    let m = v.as_object().ok_or(GrantError::Shape)?;
    if m.len() != 2 {
        return Err(GrantError::Shape);
    }
    let blinding = m
        .get("blinding")
        .and_then(Value::as_str)
        .and_then(lower_hex::<32>)
        .ok_or(GrantError::Shape)?;
    let body = m.get("body").ok_or(GrantError::Shape)?;
    if commitment(provider, &blinding, body) != commit {
        return Err(GrantError::Commitment);
    }
    Ok(body.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{default_provider, generate_secp256k1};
    use crate::meshstr::events::validate;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;
    use serde_json::json;

    const NOW: u64 = 1787000000;

    fn env(kind: u16) -> Envelope {
        Envelope {
            kind,
            window_secs: 3600,
            epoch: 1,
            created_at: NOW,
            expiration: NOW + 86400,
        }
    }

    #[test]
    fn the_pair_derives_one_d_and_nobody_else_does() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(61);
        let (a, b, c) = (
            generate_secp256k1(p, &mut rng),
            generate_secp256k1(p, &mut rng),
            generate_secp256k1(p, &mut rng),
        );
        let pa = p.schnorr_public_key(&a).unwrap();
        let pb = p.schnorr_public_key(&b).unwrap();
        let d = blinded_d(p, &a, &pb, Blinding::Grant).unwrap();
        assert_eq!(d, blinded_d(p, &b, &pa, Blinding::Grant).unwrap());
        assert_ne!(d, blinded_d(p, &c, &pa, Blinding::Grant).unwrap());
        assert_ne!(d, blinded_d(p, &a, &pb, Blinding::Job).unwrap());
        // Neither the ECDH x itself nor anything a third party can compute from the two keys.
        assert_ne!(d, p.secp256k1_ecdh(&a, &pb).unwrap());
    }

    #[test]
    fn a_sealed_grant_validates_opens_for_its_subject_only_and_binds_its_body() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(62);
        let issuer = generate_secp256k1(p, &mut rng);
        let subject = generate_secp256k1(p, &mut rng);
        let other = generate_secp256k1(p, &mut rng);
        let ps = p.schnorr_public_key(&subject).unwrap();
        let body = json!({"tier": "probation", "limits": {"req": 60}});
        for kind in [GRANT, JOB_RECEIPT] {
            let u = seal(p, &issuer, &ps, &env(kind), &body, &[7; 32], &[8; 32]).unwrap();
            let e = u.sign(p, &issuer, &mut rng).unwrap();
            assert_eq!(validate(&e, NOW), Ok(kind));
            assert!(!e.content.contains("probation"), "never in the clear");
            assert_eq!(open(p, &subject, &e), Ok(body.clone()));
            assert_eq!(open(p, &other, &e), Err(GrantError::NotOurs));
            // A body swapped under the same commitment is refused.
            let mut swapped = e.clone();
            let forged = seal(
                p,
                &issuer,
                &ps,
                &env(kind),
                &json!({"tier": "anchor"}),
                &[7; 32],
                &[8; 32],
            )
            .unwrap();
            swapped.content = forged.content;
            assert_eq!(open(p, &subject, &swapped), Err(GrantError::Commitment));
        }
        let u = seal(p, &issuer, &ps, &env(1), &body, &[7; 32], &[8; 32]);
        assert_eq!(u.err(), Some(GrantError::WrongKind));
    }

    #[test]
    fn the_commitment_is_over_blinding_then_canonical_body() {
        let p = default_provider();
        let body = json!({"b": 1, "a": 2});
        let mut want_input = vec![5u8; 32];
        want_input.extend_from_slice(br#"{"a":2,"b":1}"#);
        assert_eq!(commitment(p, &[5; 32], &body), p.sha256(&[&want_input]));
        assert_ne!(
            commitment(p, &[6; 32], &body),
            commitment(p, &[5; 32], &body)
        );
    }
}
