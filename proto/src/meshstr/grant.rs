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
use super::limits::{LIMIT_COUNT, Limit, Limits, Tier};
use super::nip44::{self, Nip44Error};
use super::window::ScheduleRatio;
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
    /// The opened grant's body is not a grant body ([`open_grant`]).
    Body(BodyError),
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

/// The remedy a grant states before any breach (§7: deterministic, and in the grant): the
/// ladder of §6.3 as `constants.json` carries it, named by the protocol version whose schema
/// digest a descriptor declares. Nothing else is a remedy weft can apply.
pub const REMEDY_LADDER: &str = "meshstr/0-draft";

/// The most scopes (filters) one grant may name (not in the text, docs/decisions.md).
pub const MAX_SCOPES: usize = 16;

/// The longest a scope's canonical filter may be, in bytes (not in the text, docs/decisions.md).
pub const MAX_SCOPE_BYTES: usize = 4096;

/// The members of a grant body, exactly (§6.1; the layout is weft's, docs/decisions.md).
pub const BODY_MEMBERS: [&str; 7] = [
    "cadence", "limits", "remedy", "schedule", "scopes", "tier", "window",
];

/// A grant's body (§6.1): what a kind 30801 seals for its subject. `limits` are priced per window
/// of `window_secs` (§6.3); the subject sends a receipt every `cadence_secs` (§6.2); `scopes` are
/// the NIP-01 filters of the shards it covers (§5); `schedule` the ratio of each limit, in
/// thousandths, at which the issuer starts to schedule (a ratio of the limit, not an overrun:
/// §6.5); `remedy` the ladder that will answer a breach (§7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantBody {
    /// The tier the grant names.
    pub tier: Tier,
    /// One limit per [`crate::meshstr::limits::Limit`], none above the tier's ceiling.
    pub limits: Limits,
    /// The window, seconds.
    pub window_secs: u64,
    /// The receipt cadence, seconds, at most the window.
    pub cadence_secs: u64,
    /// The shards, as NIP-01 filter objects.
    pub scopes: Vec<Value>,
    /// The schedule ratio, thousandths of the limit (1100 = 110 %).
    pub schedule: ScheduleRatio,
    /// The remedy ladder ([`REMEDY_LADDER`]).
    pub remedy: String,
}

/// Why a grant body is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyError {
    /// Not an object with exactly [`BODY_MEMBERS`].
    Shape,
    /// `tier` is not one of the four.
    Tier,
    /// `limits` is not one integer per limit.
    Limits,
    /// A limit above the ceiling of the tier the grant names (§6.6: MUST NOT).
    AboveCeiling,
    /// `window` zero, or `cadence` zero or longer than the window.
    Window,
    /// `scopes` empty, too many, or one not a filter object within bounds.
    Scopes,
    /// `schedule` under 1000 (a ratio below the limit itself) or not an integer.
    Schedule,
    /// A remedy other than [`REMEDY_LADDER`]: not one stated before the breach that weft applies.
    Remedy,
    /// The body's `window` is not the envelope's `window` tag.
    WindowTag,
}

impl GrantBody {
    /// The body as JSON (its canonical form is what the commitment covers).
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("cadence".into(), self.cadence_secs.into());
        m.insert("limits".into(), self.limits.to_value());
        m.insert("remedy".into(), Value::from(self.remedy.as_str()));
        m.insert("schedule".into(), self.schedule.0.into());
        m.insert("scopes".into(), Value::Array(self.scopes.clone()));
        m.insert("tier".into(), Value::from(self.tier.as_str()));
        m.insert("window".into(), self.window_secs.into());
        Value::Object(m)
    }

    /// Reads and checks a body: exactly its members, a known tier, every limit an integer within
    /// the tier's ceiling, a cadence within the window, one to [`MAX_SCOPES`] filter objects, a
    /// schedule of at least the limit itself, and [`REMEDY_LADDER`].
    pub fn from_value(v: &Value) -> Result<Self, BodyError> {
        let o = v.as_object().ok_or(BodyError::Shape)?;
        if o.len() != BODY_MEMBERS.len() || !BODY_MEMBERS.iter().all(|m| o.contains_key(*m)) {
            return Err(BodyError::Shape);
        }
        let tier = o["tier"]
            .as_str()
            .and_then(Tier::parse)
            .ok_or(BodyError::Tier)?;
        let lo = o["limits"].as_object().ok_or(BodyError::Limits)?;
        if lo.len() != LIMIT_COUNT {
            return Err(BodyError::Limits);
        }
        let mut limits = Limits::ZERO;
        for l in Limit::ALL {
            let n = lo
                .get(l.as_str())
                .and_then(Value::as_u64)
                .ok_or(BodyError::Limits)?;
            limits.set(l, n);
        }
        if !limits.within(tier) {
            return Err(BodyError::AboveCeiling);
        }
        let window_secs = o["window"].as_u64().ok_or(BodyError::Window)?;
        let cadence_secs = o["cadence"].as_u64().ok_or(BodyError::Window)?;
        if window_secs == 0 || cadence_secs == 0 || cadence_secs > window_secs {
            return Err(BodyError::Window);
        }
        let scopes = o["scopes"].as_array().ok_or(BodyError::Scopes)?;
        if scopes.is_empty()
            || scopes.len() > MAX_SCOPES
            || scopes
                .iter()
                .any(|f| !f.is_object() || canonical(f).len() > MAX_SCOPE_BYTES)
        {
            return Err(BodyError::Scopes);
        }
        let schedule = o["schedule"]
            .as_u64()
            .filter(|r| *r >= 1000)
            .ok_or(BodyError::Schedule)?;
        let remedy = o["remedy"].as_str().ok_or(BodyError::Remedy)?;
        if remedy != REMEDY_LADDER {
            return Err(BodyError::Remedy);
        }
        Ok(GrantBody {
            tier,
            limits,
            window_secs,
            cadence_secs,
            scopes: scopes.clone(),
            schedule: ScheduleRatio(schedule),
            remedy: remedy.into(),
        })
    }
}

/// Opens a kind 30801 as its subject ([`open`]) and reads its body as a [`GrantBody`], whose
/// `window` must be the envelope's `window` tag.
pub fn open_grant(
    provider: &dyn CryptoProvider,
    secret: &Secp256k1Secret,
    e: &Event,
) -> Result<GrantBody, GrantError> {
    if e.kind != GRANT {
        return Err(GrantError::WrongKind);
    }
    let v = open(provider, secret, e)?;
    let body = GrantBody::from_value(&v).map_err(GrantError::Body)?;
    if e.tag_value("window") != Some(alloc::format!("{}", body.window_secs).as_str()) {
        return Err(GrantError::Body(BodyError::WindowTag));
    }
    Ok(body)
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

    fn body() -> GrantBody {
        GrantBody {
            tier: Tier::Member,
            limits: Limits::opening(Tier::Member),
            window_secs: 3600,
            cadence_secs: 300,
            scopes: vec![json!({"kinds": [1], "#t": ["bristol"]})],
            schedule: ScheduleRatio(1100),
            remedy: REMEDY_LADDER.into(),
        }
    }

    #[test]
    fn a_grant_body_reads_back_and_never_carries_a_limit_over_its_tier() {
        let b = body();
        assert_eq!(GrantBody::from_value(&b.to_value()), Ok(b.clone()));
        let refuse = |edit: &dyn Fn(&mut Value), want: BodyError| {
            let mut v = b.to_value();
            edit(&mut v);
            assert_eq!(GrantBody::from_value(&v), Err(want), "{v}");
        };
        // §6.6: one above the ceiling of the tier it names, at any tier and any limit.
        for tier in Tier::ALL {
            for l in Limit::ALL {
                let mut over = b.clone();
                over.tier = tier;
                over.limits = Limits::ceilings(tier);
                assert!(GrantBody::from_value(&over.to_value()).is_ok());
                over.limits.set(l, over.limits.get(l) + 1);
                assert_eq!(
                    GrantBody::from_value(&over.to_value()),
                    Err(BodyError::AboveCeiling)
                );
            }
        }
        // The member limits the trusted tier allows, under a body naming member.
        refuse(
            &|v| v["limits"] = Limits::ceilings(Tier::Trusted).to_value(),
            BodyError::AboveCeiling,
        );
        refuse(&|v| v["tier"] = "emperor".into(), BodyError::Tier);
        refuse(&|v| v["limits"]["conn_max"] = 1.into(), BodyError::Limits);
        refuse(&|v| v["limits"]["req"] = (-1).into(), BodyError::Limits);
        refuse(&|v| v["limits"]["req"] = 1.5.into(), BodyError::Limits);
        refuse(&|v| v["window"] = 0.into(), BodyError::Window);
        refuse(&|v| v["cadence"] = 3601.into(), BodyError::Window);
        refuse(&|v| v["cadence"] = 0.into(), BodyError::Window);
        refuse(&|v| v["scopes"] = json!([]), BodyError::Scopes);
        refuse(&|v| v["scopes"] = json!(["kinds=1"]), BodyError::Scopes);
        refuse(
            &|v| v["scopes"] = Value::Array(vec![json!({}); MAX_SCOPES + 1]),
            BodyError::Scopes,
        );
        refuse(
            &|v| v["scopes"] = json!([{"#t": ["x".repeat(MAX_SCOPE_BYTES)]}]),
            BodyError::Scopes,
        );
        // A schedule of 0.9 of the limit reads an overrun threshold as a ratio (§6.5's trap).
        refuse(&|v| v["schedule"] = 900.into(), BodyError::Schedule);
        refuse(
            &|v| v["remedy"] = "whatever the issuer likes".into(),
            BodyError::Remedy,
        );
        refuse(&|v| v["note"] = "extra".into(), BodyError::Shape);
        refuse(
            &|v| {
                v.as_object_mut().unwrap().remove("remedy");
            },
            BodyError::Shape,
        );
    }

    #[test]
    fn open_grant_reads_the_body_and_holds_its_window_to_the_tag() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(62);
        let issuer = generate_secp256k1(p, &mut rng);
        let subject = generate_secp256k1(p, &mut rng);
        let sp = p.schnorr_public_key(&subject).unwrap();
        let sealed = |b: &Value, e: Envelope| {
            seal(p, &issuer, &sp, &e, b, &[1; 32], &[2; 32])
                .unwrap()
                .sign(p, &issuer, &mut ChaCha20Rng::seed_from_u64(3))
                .unwrap()
        };
        let g = sealed(&body().to_value(), env(GRANT));
        assert_eq!(open_grant(p, &subject, &g), Ok(body()));
        // The envelope says 7200 s, the body 3600: one of them lies.
        let mut e2 = env(GRANT);
        e2.window_secs = 7200;
        assert_eq!(
            open_grant(p, &subject, &sealed(&body().to_value(), e2)),
            Err(GrantError::Body(BodyError::WindowTag))
        );
        let mut over = body().to_value();
        over["limits"]["events_in"] = 3001.into();
        assert_eq!(
            open_grant(p, &subject, &sealed(&over, env(GRANT))),
            Err(GrantError::Body(BodyError::AboveCeiling))
        );
        let job = sealed(&body().to_value(), env(JOB_RECEIPT));
        assert_eq!(open_grant(p, &subject, &job), Err(GrantError::WrongKind));
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
