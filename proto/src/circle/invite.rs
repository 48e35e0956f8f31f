//! Invites: how two devices make a circle edge on purpose (NAP-MESH §1 "Circle edges are pairings
//! made on purpose by both sides", §4's first two rules, §5 "Trust, not proximity"). The spec
//! leaves the pairing format to the shell; this is weft's (docs/decisions.md).
//!
//! The inviter's shell makes an [`Invite`]: its circle key (an npub), a one-time secret of
//! [`INVITE_SECRET_BYTES`] random bytes and an expiry [`INVITE_LIFETIME_MS`] ahead, as one line
//! the user hands over out of band (read aloud, a QR code, a message):
//!
//! ```text
//! weft-circle-invite1:<inviter npub>:<secret, 32 lower-case hex>:<expires, Unix seconds>
//! ```
//!
//! The invitee's shell, once a link has proven the inviter's key ([`super::link`]), sends its own
//! pairing record with a proof that it holds the secret, bound to both keys; the inviter checks
//! it, consumes the invite, and answers with its own record:
//!
//! ```text
//! ["PAIR", <invite id hex>, <proof hex>, <invitee's pairing record>]
//! ["PAIRED", <invite id hex>, true, <inviter's pairing record>]
//! ["PAIRED", <invite id hex>, false, <reason>]
//! ```
//!
//! - invite id = the first 16 bytes of `SHA-256(`[`INVITE_ID_CONTEXT`]` ‖ secret)`, so the
//!   inviter finds the invite without the secret crossing the link;
//! - proof = `HMAC-SHA-256(secret, `[`INVITE_PROOF_CONTEXT`]` ‖ inviter key ‖ invitee key)`:
//!   whoever sees it on the wire cannot use it for another key, and it says nothing of the
//!   secret.
//!
//! The inviter refuses a `PAIR` whose id it does not hold (a guessed or wrong secret), whose
//! invite has expired or was already used (a replay, or a second device), whose proof does not
//! verify (the invite is withdrawn after [`MAX_INVITE_FAILURES`] of those, so guessing is bounded
//! even by someone who saw the id), or whose record is not the link's key's about the inviter.
//! The invitee sends its `PAIR` only on a link whose far side proved the invite's key, so an
//! invite whose npub was changed reaches nobody but the holder of the key it now names, and a
//! changed character fails the npub's checksum. Both sides take the two records only when the
//! exchange succeeds; then each holds both, and the edge exists on both.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use serde_json::Value;

use crate::codec::{bech32, hex};
use crate::crypto::CryptoProvider;
use crate::nostr::event::Event;

use super::pairing::named_peer;

/// The invite string's first field, naming its format and version.
pub const INVITE_PREFIX: &str = "weft-circle-invite1";

/// How long an invite may be accepted, in milliseconds, from when it was made: long enough to
/// read it aloud or send it to a phone on the same table, short enough that a string left in a
/// chat history is dead soon.
pub const INVITE_LIFETIME_MS: u64 = 10 * 60 * 1_000;

/// Bytes of an invite's one-time secret: 128 bits, beyond guessing within
/// [`MAX_INVITE_FAILURES`] tries of [`MAX_INVITES`] invites.
pub const INVITE_SECRET_BYTES: usize = 16;

/// Most invites one shell holds open (used ones are kept until they expire, so a replay is
/// answered as one); making one more forgets the one that expires first.
pub const MAX_INVITES: usize = 16;

/// Wrong proofs for one invite before it is withdrawn.
pub const MAX_INVITE_FAILURES: u32 = 3;

/// Most invites one shell is accepting at once (waiting for the inviter's link or answer).
pub const MAX_ACCEPTING: usize = 16;

/// How long accepting an invite waits for a link proving the inviter's key and for its answer,
/// in milliseconds; then it ends refused ([`PairRefusal::Timeout`]).
pub const ACCEPT_TIMEOUT_MS: u64 = 60_000;

/// Longest invite string read, in characters (one is about 130).
pub const MAX_INVITE_CHARS: usize = 256;

/// Hashed before the secret into the invite id.
pub const INVITE_ID_CONTEXT: &[u8] = b"weft circle invite id v1";

/// The HMAC's first input for a proof of the secret.
pub const INVITE_PROOF_CONTEXT: &[u8] = b"weft circle invite proof v1";

/// An invite: who invites, the one-time secret, and until when.
#[derive(Clone, PartialEq, Eq)]
pub struct Invite {
    /// The inviter's circle key.
    pub inviter: [u8; 32],
    /// The one-time secret.
    pub secret: [u8; INVITE_SECRET_BYTES],
    /// When it expires, Unix seconds.
    pub expires: u64,
}

impl fmt::Debug for Invite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The secret never reaches a log.
        f.debug_struct("Invite")
            .field("inviter", &hex::encode(&self.inviter))
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

/// Why an invite string was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InviteError {
    /// Longer than [`MAX_INVITE_CHARS`], not four `:`-separated fields, or not [`INVITE_PREFIX`].
    NotAnInvite,
    /// The npub does not decode (a changed character fails its checksum).
    BadKey,
    /// The secret is not 32 lower-case hex digits.
    BadSecret,
    /// The expiry is not a decimal number of seconds.
    BadExpiry,
}

impl InviteError {
    /// The error in words.
    pub fn reason(self) -> &'static str {
        match self {
            Self::NotAnInvite => "not a weft circle invite",
            Self::BadKey => "the inviter's npub does not decode (a character changed?)",
            Self::BadSecret => "the secret is not 32 lower-case hex digits",
            Self::BadExpiry => "the expiry is not a number of seconds",
        }
    }
}

impl Invite {
    /// Reads an invite string (surrounding whitespace ignored).
    pub fn parse(text: &str) -> Result<Self, InviteError> {
        let text = text.trim();
        if text.len() > MAX_INVITE_CHARS {
            return Err(InviteError::NotAnInvite);
        }
        let parts: Vec<&str> = text.split(':').collect();
        let [prefix, npub, secret, expires] = parts.as_slice() else {
            return Err(InviteError::NotAnInvite);
        };
        if *prefix != INVITE_PREFIX {
            return Err(InviteError::NotAnInvite);
        }
        let inviter = bech32::decode_npub(npub).map_err(|_| InviteError::BadKey)?;
        if secret.len() != 2 * INVITE_SECRET_BYTES
            || !secret
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(InviteError::BadSecret);
        }
        let secret =
            hex::decode_array::<INVITE_SECRET_BYTES>(secret).map_err(|_| InviteError::BadSecret)?;
        if expires.is_empty() || expires.len() > 20 || !expires.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(InviteError::BadExpiry);
        }
        let expires = expires.parse().map_err(|_| InviteError::BadExpiry)?;
        Ok(Self {
            inviter,
            secret,
            expires,
        })
    }

    /// The invite string.
    pub fn to_text(&self) -> String {
        let mut s = String::from(INVITE_PREFIX);
        s.push(':');
        s.push_str(&bech32::encode_npub(&self.inviter));
        s.push(':');
        s.push_str(&hex::encode(&self.secret));
        s.push(':');
        s.push_str(&self.expires.to_string());
        s
    }

    /// The invite's id, as the inviter finds it.
    pub fn id(&self, provider: &dyn CryptoProvider) -> [u8; 16] {
        invite_id(provider, &self.secret)
    }

    /// The proof that `invitee` holds this invite's secret.
    pub fn proof(&self, provider: &dyn CryptoProvider, invitee: &[u8; 32]) -> [u8; 32] {
        invite_proof(provider, &self.secret, &self.inviter, invitee)
    }
}

/// The id of the invite whose secret is `secret`.
pub fn invite_id(provider: &dyn CryptoProvider, secret: &[u8; INVITE_SECRET_BYTES]) -> [u8; 16] {
    let h = provider.sha256(&[INVITE_ID_CONTEXT, secret]);
    let mut id = [0u8; 16];
    id.copy_from_slice(&h[..16]);
    id
}

/// The proof of `secret` for the pairing of `inviter` and `invitee`.
pub fn invite_proof(
    provider: &dyn CryptoProvider,
    secret: &[u8; INVITE_SECRET_BYTES],
    inviter: &[u8; 32],
    invitee: &[u8; 32],
) -> [u8; 32] {
    provider.hmac_sha256(secret, &[INVITE_PROOF_CONTEXT, inviter, invitee])
}

/// Compares in time independent of where the bytes differ.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a pairing by invite did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PairRefusal {
    /// The inviter holds no invite by that id: a wrong or guessed secret, a withdrawn invite, or
    /// an inviter that restarted.
    Unknown,
    /// The invite was used already: a replay, or a second device.
    Used,
    /// The invite expired.
    Expired,
    /// The proof did not verify: the secret is not known, or is bound to other keys.
    BadProof,
    /// The record is not the link's key's pairing record about the other side.
    BadRecord,
    /// The circle already tracks [`super::pairing::MAX_PAIRINGS`] peers.
    Full,
    /// The invite names this user's own key.
    OwnInvite,
    /// [`MAX_ACCEPTING`] invites are being accepted already.
    Busy,
    /// No link proved the inviter's key, or no answer came, within [`ACCEPT_TIMEOUT_MS`].
    Timeout,
    /// A reason this shell does not know (from another implementation).
    Other,
}

impl PairRefusal {
    /// The reason in words, as a `PAIRED` refusal carries it.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Unknown => "refused: unknown invite",
            Self::Used => "refused: invite already used",
            Self::Expired => "refused: invite expired",
            Self::BadProof => "refused: bad proof",
            Self::BadRecord => "refused: bad pairing record",
            Self::Full => "refused: circle full",
            Self::OwnInvite => "refused: own invite",
            Self::Busy => "refused: too many invites being accepted",
            Self::Timeout => "refused: no answer in time",
            Self::Other => "refused",
        }
    }

    /// The refusal a reason names ([`PairRefusal::Other`] when none does).
    pub fn from_reason(reason: &str) -> Self {
        [
            Self::Unknown,
            Self::Used,
            Self::Expired,
            Self::BadProof,
            Self::BadRecord,
            Self::Full,
            Self::OwnInvite,
            Self::Busy,
            Self::Timeout,
        ]
        .into_iter()
        .find(|r| r.reason() == reason)
        .unwrap_or(Self::Other)
    }
}

/// Longest reason a `PAIRED` refusal may carry, in bytes.
pub const MAX_REASON_BYTES: usize = 256;

/// A pairing frame (see the module docs for the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairFrame {
    /// The invitee's request.
    Pair {
        /// The invite's id.
        id: [u8; 16],
        /// The proof of its secret.
        proof: [u8; 32],
        /// The invitee's pairing record about the inviter.
        record: Event,
    },
    /// The inviter's answer.
    Paired {
        /// The invite's id.
        id: [u8; 16],
        /// The inviter's pairing record, or why not.
        outcome: Result<Event, String>,
    },
}

/// Whether `text` is meant as a pairing frame (its first element is `"PAIR"` or `"PAIRED"`),
/// so it is read by [`PairFrame::parse`] rather than as a member frame.
pub fn is_pair_frame(text: &str) -> bool {
    let rest = text.trim_start().strip_prefix('[').unwrap_or("");
    rest.trim_start().starts_with("\"PAIR")
}

fn hex_field<const N: usize>(v: &Value) -> Option<[u8; N]> {
    let s = v.as_str()?;
    if s.len() != 2 * N || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    hex::decode_array::<N>(s).ok()
}

impl PairFrame {
    /// Reads a pairing frame (bounded as a member frame is).
    pub fn parse(text: &str) -> Option<Self> {
        if text.len() > super::member::MAX_MEMBER_FRAME_BYTES {
            return None;
        }
        let v: Value = serde_json::from_str(text).ok()?;
        let items = v.as_array()?;
        match items.as_slice() {
            [tag, id, proof, record] if tag.as_str() == Some("PAIR") => Some(Self::Pair {
                id: hex_field(id)?,
                proof: hex_field(proof)?,
                record: Event::from_value(record).ok()?,
            }),
            [tag, id, ok, rest] if tag.as_str() == Some("PAIRED") => {
                let id = hex_field(id)?;
                let outcome = match ok.as_bool()? {
                    true => Ok(Event::from_value(rest).ok()?),
                    false => {
                        let r = rest.as_str()?;
                        if r.len() > MAX_REASON_BYTES {
                            return None;
                        }
                        Err(r.to_string())
                    }
                };
                Some(Self::Paired { id, outcome })
            }
            _ => None,
        }
    }

    /// The frame's text.
    pub fn to_text(&self) -> String {
        let v = match self {
            Self::Pair { id, proof, record } => Value::Array(alloc::vec![
                Value::from("PAIR"),
                Value::from(hex::encode(id)),
                Value::from(hex::encode(proof)),
                record.to_value(),
            ]),
            Self::Paired { id, outcome } => Value::Array(alloc::vec![
                Value::from("PAIRED"),
                Value::from(hex::encode(id)),
                Value::Bool(outcome.is_ok()),
                match outcome {
                    Ok(record) => record.to_value(),
                    Err(reason) => Value::from(reason.as_str()),
                },
            ]),
        };
        v.to_string()
    }
}

/// Whether `record` is `author`'s pairing record about `peer`, signed.
pub fn is_record_of(
    provider: &dyn CryptoProvider,
    record: &Event,
    author: &[u8; 32],
    peer: &[u8; 32],
) -> bool {
    record.pubkey == *author && named_peer(record) == Some(*peer) && record.verify(provider).is_ok()
}

#[derive(Debug, Clone)]
struct Open {
    secret: [u8; INVITE_SECRET_BYTES],
    /// Unix milliseconds.
    expires: u64,
    used_by: Option<[u8; 32]>,
    failures: u32,
}

/// The invites one inviter's shell has made and not yet forgotten, by id (at most
/// [`MAX_INVITES`]).
#[derive(Debug, Clone)]
pub struct Invites {
    me: [u8; 32],
    open: alloc::collections::BTreeMap<[u8; 16], Open>,
}

impl Invites {
    /// No invites yet, by the user whose circle key is `me`.
    pub fn new(me: [u8; 32]) -> Self {
        Self {
            me,
            open: alloc::collections::BTreeMap::new(),
        }
    }

    /// Holds a fresh invite with `secret`, made at `now_ms` (Unix milliseconds); forgets expired
    /// ones first, then the one expiring first if [`MAX_INVITES`] are held.
    pub fn make(
        &mut self,
        provider: &dyn CryptoProvider,
        secret: [u8; INVITE_SECRET_BYTES],
        now_ms: u64,
    ) -> Invite {
        self.expire(now_ms);
        while self.open.len() >= MAX_INVITES {
            let first = self
                .open
                .iter()
                .min_by_key(|(id, o)| (o.expires, **id))
                .map(|(id, _)| *id);
            match first {
                Some(id) => self.open.remove(&id),
                None => break,
            };
        }
        let expires = now_ms.saturating_add(INVITE_LIFETIME_MS);
        self.open.insert(
            invite_id(provider, &secret),
            Open {
                secret,
                expires,
                used_by: None,
                failures: 0,
            },
        );
        Invite {
            inviter: self.me,
            secret,
            expires: expires.div_ceil(1_000),
        }
    }

    /// Forgets every invite expired at `now_ms`.
    pub fn expire(&mut self, now_ms: u64) {
        self.open.retain(|_, o| o.expires > now_ms);
    }

    /// Invites held (open or used, not yet expired).
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Checks a `PAIR` from the link whose proven key is `from`, at `now_ms`; when it holds, the
    /// invite is used by `from` from now on.
    pub fn redeem(
        &mut self,
        provider: &dyn CryptoProvider,
        from: &[u8; 32],
        id: &[u8; 16],
        proof: &[u8; 32],
        record: &Event,
        now_ms: u64,
    ) -> Result<(), PairRefusal> {
        let Some(open) = self.open.get_mut(id) else {
            return Err(PairRefusal::Unknown);
        };
        if open.expires <= now_ms {
            self.open.remove(id);
            return Err(PairRefusal::Expired);
        }
        if open.used_by.is_some() {
            return Err(PairRefusal::Used);
        }
        let me = &self.me;
        if !same(&invite_proof(provider, &open.secret, me, from), proof) {
            open.failures += 1;
            if open.failures >= MAX_INVITE_FAILURES {
                self.open.remove(id);
            }
            return Err(PairRefusal::BadProof);
        }
        if from == me || !is_record_of(provider, record, from, me) {
            return Err(PairRefusal::BadRecord);
        }
        open.used_by = Some(*from);
        Ok(())
    }
}

#[cfg(all(test, feature = "rustcrypto"))]
mod tests {
    use super::*;
    use crate::crypto::default_provider;

    fn invite() -> Invite {
        Invite {
            inviter: [7; 32],
            secret: [0xab; 16],
            expires: 1_800_000_000,
        }
    }

    #[test]
    fn an_invite_string_round_trips_and_a_changed_character_is_refused() {
        let i = invite();
        let text = i.to_text();
        assert!(text.starts_with("weft-circle-invite1:npub1"), "{text}");
        assert_eq!(Invite::parse(&text), Ok(i.clone()));
        assert_eq!(Invite::parse(&alloc::format!("  {text}\n")), Ok(i.clone()));
        // Every single-character change in the npub fails its checksum or its shape.
        let start = INVITE_PREFIX.len() + 1 + 5;
        for at in start..start + 58 {
            let mut b = text.clone().into_bytes();
            b[at] = if b[at] == b'q' { b'p' } else { b'q' };
            let t = String::from_utf8(b).unwrap();
            assert_eq!(Invite::parse(&t), Err(InviteError::BadKey), "{t}");
        }
        let cases = [
            (
                text.replacen("invite1", "invite2", 1),
                InviteError::NotAnInvite,
            ),
            (alloc::format!("{text}:1"), InviteError::NotAnInvite),
            (
                text.replace(&hex::encode(&i.secret), "0909"),
                InviteError::BadSecret,
            ),
            (
                text.replace(
                    &hex::encode(&i.secret),
                    &hex::encode(&i.secret).to_uppercase(),
                ),
                InviteError::BadSecret,
            ),
            (text.replace("1800000000", "-1"), InviteError::BadExpiry),
            (text.replace("1800000000", ""), InviteError::BadExpiry),
            ("x".repeat(MAX_INVITE_CHARS + 1), InviteError::NotAnInvite),
        ];
        for (t, want) in cases {
            assert_eq!(Invite::parse(&t), Err(want), "{t}");
        }
        // The secret stays out of Debug.
        assert!(!alloc::format!("{i:?}").contains(&hex::encode(&i.secret)));
    }

    #[test]
    fn pair_frames_round_trip_and_malformed_ones_are_not_read() {
        let p = default_provider();
        let mut rng = <chacha20::ChaCha20Rng as rand_core::SeedableRng>::seed_from_u64(3);
        let s = crate::crypto::generate_secp256k1(p, &mut rng);
        let record = super::super::pairing::pairing_record(p, &s, &mut rng, &[1; 32], 5).unwrap();
        let frames = [
            PairFrame::Pair {
                id: [1; 16],
                proof: [2; 32],
                record: record.clone(),
            },
            PairFrame::Paired {
                id: [1; 16],
                outcome: Ok(record.clone()),
            },
            PairFrame::Paired {
                id: [1; 16],
                outcome: Err(PairRefusal::Used.reason().into()),
            },
        ];
        for f in frames {
            let t = f.to_text();
            assert!(is_pair_frame(&t));
            assert_eq!(PairFrame::parse(&t), Some(f));
        }
        assert!(is_pair_frame(" [ \"PAIRED\"]"));
        assert!(!is_pair_frame("[\"MESH\",{},[]]"));
        let id = hex::encode(&[1u8; 16]);
        for bad in [
            alloc::format!("[\"PAIR\",\"{id}\",\"00\",{{}}]"),
            alloc::format!("[\"PAIRED\",\"{id}\",false,\"{}\"]", "x".repeat(300)),
            alloc::format!("[\"PAIRED\",\"{id}\",true,\"no record\"]"),
            String::from("[\"PAIRED\",\"AA\",false,\"r\"]"),
            String::from("[\"PAIR\"]"),
        ] {
            assert_eq!(PairFrame::parse(&bad), None, "{bad}");
        }
        for r in [
            PairRefusal::Used,
            PairRefusal::BadProof,
            PairRefusal::Timeout,
        ] {
            assert_eq!(PairRefusal::from_reason(r.reason()), r);
        }
        assert_eq!(PairRefusal::from_reason("nope"), PairRefusal::Other);
    }

    #[test]
    fn the_table_is_bounded_and_forgets_the_first_to_expire() {
        let p = default_provider();
        let mut t = Invites::new([7; 32]);
        let first = t.make(p, [0; 16], 0);
        for n in 1..MAX_INVITES as u8 {
            t.make(p, [n; 16], u64::from(n));
        }
        assert_eq!(t.len(), MAX_INVITES);
        t.make(p, [200; 16], 100);
        assert_eq!(t.len(), MAX_INVITES);
        assert!(!t.open.contains_key(&first.id(p)));
        t.expire(100 + INVITE_LIFETIME_MS);
        assert!(t.is_empty());
    }
}
