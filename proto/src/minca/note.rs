//! Notes: what 01 Identity §7.5 would supply (lost from the copy), as weft defines it.
//!
//! Minca reads a note in three places: the node's `note` in a welcome, checked against a pin
//! (§5.2); the `who` every peer sends, whose issuer becomes the peer's account (§6.4, §9.1); and
//! the `member` a reader seals under the space key (§6.3). All that survives of 01 is that a note
//! is "one token from the account's root key to the session key" carrying `iss`, `aud`, `sub`,
//! `cmd`, `pol` and `exp`, checked at the checker's own time (01 §7.6). So the checking enters
//! through one small trait, [`NoteChecker`], and weft's concrete token format is [`Es256Notes`]:
//!
//! ```text
//! token   = base64url(header) "." base64url(payload) "." base64url(signature)
//! header  = {"alg":"ES256","typ":"JWT"}                     (canonical JSON)
//! payload = {"aud","cmd","exp","iss","nbf"?,"pol","sub"}     (canonical JSON)
//! signature = ECDSA P-256 / SHA-256, 64-byte P1363, over ASCII(base64url(header) "." base64url(payload))
//! ```
//!
//! `iss` is the P-256 did:key of the account root key and signs the token; `aud` is the session
//! DID the note is made out to; `sub` is what the power is over (the account itself for a node's
//! whole power); `cmd` is the command path granted (`/` for everything); `pol` a JSON array of
//! policy statements (`[]`: no restriction); `exp` and the optional `nbf` are JWT NumericDates
//! (Unix seconds). The layout is JWS compact serialization with ES256 (RFC 7515, RFC 7518 §3.4),
//! so any JOSE library can read it; the claim names are UCAN 1.0's, which 01's names match.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde_json::{Map, Value, json};

use crate::codec::did_key::DidKey;
use crate::codec::{base64url, js, json as cjson};
use crate::core::Timestamp;
use crate::crypto::{CryptoProvider, P256Public, P256Secret};

/// Longest note, in characters of its canonical JSON (§6.4: "a proof whose canonical JSON is
/// longer than 16 384 characters […] gives the peer no account"). A token is checked against it
/// before anything is decoded.
pub const MAX_NOTE_CHARS: usize = 16_384;

/// The JOSE header every weft note carries, exactly.
const HEADER: &str = r#"{"alg":"ES256","typ":"JWT"}"#;

/// The `cmd` that grants everything (§5.2: "cmd is /").
pub const CMD_ALL: &str = "/";

/// Why a token is not a valid note.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoteError {
    /// Longer than [`MAX_NOTE_CHARS`].
    TooLong,
    /// Not three base64url parts, or a header or payload that is not the JSON weft writes.
    Malformed,
    /// `iss` is not a P-256 did:key, or the signature does not verify against it.
    BadSignature,
    /// `exp` has passed at the checker's time.
    Expired,
    /// `nbf` is still in the future at the checker's time.
    NotYetValid,
}

/// The claims of a note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// The issuer: the account root key's DID, which signed the token.
    pub iss: String,
    /// The audience: the session DID the note is made out to.
    pub aud: String,
    /// The subject: what the power is over (the account DID for a node's whole power).
    pub sub: String,
    /// The command path granted; [`CMD_ALL`] grants everything.
    pub cmd: String,
    /// Policy statements narrowing the grant; empty grants it without restriction.
    pub pol: Vec<Value>,
    /// Expiry, Unix seconds: the note is invalid from this second on.
    pub exp: u64,
    /// Not before, Unix seconds, if given.
    pub nbf: Option<u64>,
}

impl Note {
    /// Whether this note grants a node's whole power over `account` (§5.2): `cmd` is `/`, `sub`
    /// is the account and `pol` is `[]`. A narrower note (one space, reading only) does not.
    pub fn grants_everything_about(&self, account: &str) -> bool {
        self.cmd == CMD_ALL && self.sub == account && self.pol.is_empty()
    }

    fn payload(&self) -> Value {
        let mut m = Map::new();
        m.insert("iss".into(), json!(self.iss));
        m.insert("aud".into(), json!(self.aud));
        m.insert("sub".into(), json!(self.sub));
        m.insert("cmd".into(), json!(self.cmd));
        m.insert("pol".into(), Value::Array(self.pol.clone()));
        m.insert("exp".into(), json!(self.exp));
        if let Some(nbf) = self.nbf {
            m.insert("nbf".into(), json!(nbf));
        }
        Value::Object(m)
    }

    fn from_payload(v: &Value) -> Option<Self> {
        let o = v.as_object()?;
        let s = |k: &str| o.get(k)?.as_str().map(ToString::to_string);
        let nbf = match o.get("nbf") {
            None => None,
            Some(n) => Some(n.as_u64()?),
        };
        Some(Self {
            iss: s("iss")?,
            aud: s("aud")?,
            sub: s("sub")?,
            cmd: s("cmd")?,
            pol: o.get("pol")?.as_array()?.clone(),
            exp: o.get("exp")?.as_u64()?,
            nbf,
        })
    }
}

/// What 01 Identity supplies to Minca: checking a note at a given time.
pub trait NoteChecker {
    /// The note's claims if `token` is a valid note at `now` (signature by `iss`, not expired,
    /// not before `nbf`, within [`MAX_NOTE_CHARS`]). Audience and power are the caller's to judge.
    fn check(&self, token: &str, now: Timestamp) -> Result<Note, NoteError>;
}

/// weft's note format: a JWS compact token signed ES256 by a P-256 root key (module docs).
#[derive(Clone, Copy)]
pub struct Es256Notes {
    crypto: &'static dyn CryptoProvider,
}

impl core::fmt::Debug for Es256Notes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Es256Notes")
            .field("crypto", &self.crypto.name())
            .finish()
    }
}

impl Es256Notes {
    /// A checker (and issuer) over `crypto`.
    pub fn new(crypto: &'static dyn CryptoProvider) -> Self {
        Self { crypto }
    }

    /// Issues a note signed by `root`. The claims' `iss` is replaced by `root`'s DID, so a token
    /// this makes always names its real signer. `None` only if `root` is not a valid key.
    pub fn issue(&self, root: &P256Secret, claims: &Note) -> Option<String> {
        let public = self.crypto.p256_public_key(root).ok()?;
        let mut claims = claims.clone();
        claims.iss = DidKey::P256(public.0).to_did();
        let mut signing_input = base64url::encode(HEADER.as_bytes());
        signing_input.push('.');
        signing_input.push_str(&base64url::encode(&cjson::canonical_bytes(
            &claims.payload(),
        )));
        let sig = self.crypto.p256_sign(root, signing_input.as_bytes()).ok()?;
        signing_input.push('.');
        signing_input.push_str(&base64url::encode(&sig));
        Some(signing_input)
    }
}

impl NoteChecker for Es256Notes {
    fn check(&self, token: &str, now: Timestamp) -> Result<Note, NoteError> {
        // The canonical JSON of a token is the token quoted; base64url and dots need no escapes.
        if token.len() + 2 > MAX_NOTE_CHARS {
            return Err(NoteError::TooLong);
        }
        let mut parts = token.split('.');
        let (Some(h), Some(p), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(NoteError::Malformed);
        };
        let header = base64url::decode(h).map_err(|_| NoteError::Malformed)?;
        let header: Value = serde_json::from_slice(&header).map_err(|_| NoteError::Malformed)?;
        if header.get("alg").and_then(Value::as_str) != Some("ES256") {
            return Err(NoteError::Malformed);
        }
        let payload = base64url::decode(p).map_err(|_| NoteError::Malformed)?;
        let payload: Value = serde_json::from_slice(&payload).map_err(|_| NoteError::Malformed)?;
        let note = Note::from_payload(&payload).ok_or(NoteError::Malformed)?;
        let sig = base64url::decode_array::<64>(s).map_err(|_| NoteError::Malformed)?;
        let Ok(DidKey::P256(point)) = DidKey::parse(&note.iss) else {
            return Err(NoteError::BadSignature);
        };
        let signing_input = &token[..h.len() + 1 + p.len()];
        if !self
            .crypto
            .p256_verify(&P256Public(point), signing_input.as_bytes(), &sig)
        {
            return Err(NoteError::BadSignature);
        }
        if now.as_millis() >= note.exp.saturating_mul(1000) {
            return Err(NoteError::Expired);
        }
        if note
            .nbf
            .is_some_and(|nbf| now.as_millis() < nbf.saturating_mul(1000))
        {
            return Err(NoteError::NotYetValid);
        }
        Ok(note)
    }
}

/// The account behind a session (§6.4): the issuer of `proof` if it is one valid note at `now`
/// whose audience is `session_did`, the peer's proven session DID; otherwise `None`.
///
/// `proof` is the JSON value the peer sent. A list of tokens is not a note, and a proof whose
/// canonical JSON is longer than [`MAX_NOTE_CHARS`] gives no account whatever it holds.
pub fn account_of(
    notes: &dyn NoteChecker,
    proof: &Value,
    session_did: &str,
    now: Timestamp,
) -> Option<String> {
    let token = proof.as_str()?;
    if js::utf16_len(&cjson::canonical(proof)) > MAX_NOTE_CHARS {
        return None;
    }
    let note = notes.check(token, now).ok()?;
    (note.aud == session_did).then_some(note.iss)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::crypto::{default_provider, generate_p256};
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    /// A P-256 key and its DID, for tests across the module.
    pub(crate) fn key(seed: u64) -> (P256Secret, String) {
        let c = default_provider();
        let s = generate_p256(c, &mut ChaCha20Rng::seed_from_u64(seed));
        let did = DidKey::P256(c.p256_public_key(&s).unwrap().0).to_did();
        (s, did)
    }

    /// A note for everything about `root`'s account, made out to `aud`, valid until `exp` s.
    pub(crate) fn whole_power(root: &P256Secret, aud: &str, exp: u64) -> String {
        let notes = Es256Notes::new(default_provider());
        let iss = DidKey::P256(default_provider().p256_public_key(root).unwrap().0).to_did();
        let claims = Note {
            iss: iss.clone(),
            aud: aud.into(),
            sub: iss,
            cmd: CMD_ALL.into(),
            pol: Vec::new(),
            exp,
            nbf: None,
        };
        notes.issue(root, &claims).unwrap()
    }

    const NOW: Timestamp = Timestamp::from_secs(1_800_000_000);

    #[test]
    fn a_note_issued_by_a_root_key_checks_and_names_its_issuer() {
        let (root, account) = key(1);
        let (_, session) = key(2);
        let token = whole_power(&root, &session, 1_800_000_100);
        let note = Es256Notes::new(default_provider())
            .check(&token, NOW)
            .unwrap();
        assert_eq!(note.iss, account);
        assert_eq!(note.aud, session);
        assert!(note.grants_everything_about(&account));
        assert!(!note.grants_everything_about(&session));
    }

    #[test]
    fn a_note_is_invalid_from_its_exp_and_before_its_nbf() {
        let (root, _) = key(1);
        let (_, session) = key(2);
        let notes = Es256Notes::new(default_provider());
        let token = whole_power(&root, &session, NOW.as_secs());
        assert_eq!(notes.check(&token, NOW), Err(NoteError::Expired));
        let just_before = Timestamp::from_millis(NOW.as_millis() - 1);
        assert!(notes.check(&token, just_before).is_ok());
        let mut claims = notes.check(&token, just_before).unwrap();
        claims.exp = NOW.as_secs() + 100;
        claims.nbf = Some(NOW.as_secs() + 10);
        let later = notes.issue(&root, &claims).unwrap();
        assert_eq!(notes.check(&later, NOW), Err(NoteError::NotYetValid));
        assert!(
            notes
                .check(
                    &later,
                    NOW.saturating_add(core::time::Duration::from_secs(10))
                )
                .is_ok()
        );
    }

    #[test]
    fn a_note_with_any_changed_byte_or_another_signer_fails() {
        let (root, _) = key(1);
        let (other, other_did) = key(3);
        let (_, session) = key(2);
        let notes = Es256Notes::new(default_provider());
        let token = whole_power(&root, &session, 1_900_000_000);
        // A payload naming another issuer than the signer.
        let mut parts: Vec<&str> = token.split('.').collect();
        let mut payload: Value =
            serde_json::from_slice(&base64url::decode(parts[1]).unwrap()).unwrap();
        payload["iss"] = json!(other_did);
        let forged = base64url::encode(&cjson::canonical_bytes(&payload));
        parts[1] = &forged;
        assert_eq!(
            notes.check(&parts.join("."), NOW),
            Err(NoteError::BadSignature)
        );
        let mut bytes = token.clone().into_bytes();
        let i = bytes.len() - 5;
        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
        assert!(
            notes
                .check(&String::from_utf8(bytes).unwrap(), NOW)
                .is_err()
        );
        assert_eq!(notes.check("a.b", NOW), Err(NoteError::Malformed));
        let by_other = whole_power(&other, &session, 1_900_000_000);
        assert_eq!(notes.check(&by_other, NOW).unwrap().iss, other_did);
    }

    #[test]
    fn a_peer_showing_someone_elses_note_is_known_as_nobody() {
        let (root, account) = key(1);
        let (_, alice) = key(2);
        let (_, mallory) = key(4);
        let notes = Es256Notes::new(default_provider());
        let token = whole_power(&root, &alice, 1_900_000_000);
        assert_eq!(
            account_of(&notes, &json!(token), &alice, NOW),
            Some(account)
        );
        assert_eq!(account_of(&notes, &json!(token), &mallory, NOW), None);
    }

    #[test]
    fn a_list_of_tokens_is_not_a_note() {
        let (root, _) = key(1);
        let (_, alice) = key(2);
        let notes = Es256Notes::new(default_provider());
        let token = whole_power(&root, &alice, 1_900_000_000);
        assert_eq!(account_of(&notes, &json!([token]), &alice, NOW), None);
        assert_eq!(account_of(&notes, &Value::Null, &alice, NOW), None);
    }

    #[test]
    fn a_proof_longer_than_16384_characters_gives_no_account() {
        let (root, _) = key(1);
        let (_, alice) = key(2);
        let notes = Es256Notes::new(default_provider());
        let mut claims = Note {
            iss: String::new(),
            aud: alice.clone(),
            sub: "s".into(),
            cmd: "/".into(),
            pol: Vec::new(),
            exp: 1_900_000_000,
            nbf: None,
        };
        // Grow the policy until the token's canonical JSON is just over the bound.
        let base = notes.issue(&root, &claims).unwrap().len();
        let pad = (MAX_NOTE_CHARS - 2 - base) * 3 / 4 - 4;
        claims.pol = alloc::vec![json!("x".repeat(pad))];
        let near = notes.issue(&root, &claims).unwrap();
        assert!(near.len() + 2 <= MAX_NOTE_CHARS, "{}", near.len());
        assert!(account_of(&notes, &json!(near), &alice, NOW).is_some());
        claims.pol = alloc::vec![json!("x".repeat(pad + 8))];
        let over = notes.issue(&root, &claims).unwrap();
        assert!(over.len() + 2 > MAX_NOTE_CHARS);
        assert_eq!(account_of(&notes, &json!(over), &alice, NOW), None);
        assert_eq!(notes.check(&over, NOW), Err(NoteError::TooLong));
    }
}
