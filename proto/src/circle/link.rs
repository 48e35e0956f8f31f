//! Proving a circle key on a link (NAP-MESH §1 "The circle is not the transport", §4's first two
//! rules, §5 "Trust, not proximity"). The spec leaves member-to-member transport to the shell; the
//! shell's [`super::Input::LinkUp`] needs the far side's circle key *proven*, and this is how a
//! weft shell proves it on a fresh link of any transport (a WebSocket, a Minca data channel).
//!
//! Each side opens with a hello naming its key and a fresh nonce, and answers the other's hello
//! with a BIP-340 signature over [`PROOF_CONTEXT`], the other's nonce, its own nonce, its own key
//! and the other's key:
//!
//! ```text
//! ["CIRCLE", "hello", <key hex>, <nonce hex>]
//! ["CIRCLE", "proof", <signature hex>]
//! ```
//!
//! A link is proven when the far side's proof verifies over this side's nonce: its key signed
//! this link's fresh challenge, so a recorded proof is worth nothing on another link. Until then
//! every other frame is dropped and counted ([`LinkAuth::handle`] answers
//! [`Step::Dropped`]); a hello that does not parse, a second hello, a key equal to this side's,
//! a proof before the hello or one that does not verify fail the link, as does no proof within
//! [`PROOF_TIMEOUT_MS`]. Proving a key says nothing of membership: the shell decides that from
//! the pairings it holds, so a stranger proves its key and is still no member.
//!
//! Over plain `ws://` a party in the middle can relay both hellos and proofs unchanged and then
//! read the link; it cannot sign events, so it cannot forge a publish or a backlog answer (both
//! are signed events, verified by the shell). Links that cross untrusted networks take `wss://`
//! or Minca's channel-bound data channels (docs/decisions.md).

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use rand_core::CryptoRng;
use serde_json::Value;

use crate::codec::hex;
use crate::core::{Machine, Timestamp, Wakeup};
use crate::crypto::{CryptoProvider, Secp256k1Secret};

/// The context every link proof signs first, so the signature means nothing elsewhere.
pub const PROOF_CONTEXT: &[u8] = b"weft circle link proof v1";

/// How long the far side has to prove its key, in milliseconds, from the link's start.
pub const PROOF_TIMEOUT_MS: u64 = 10_000;

/// Longest handshake frame read, in bytes (a hello is about 170).
pub const MAX_HANDSHAKE_BYTES: usize = 512;

/// Why a link failed its proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkError {
    /// The far side's hello did not parse, came twice, or named this side's own key.
    BadHello,
    /// A proof came before the hello, did not parse, or did not verify.
    BadProof,
    /// No proof within [`PROOF_TIMEOUT_MS`].
    Timeout,
}

impl LinkError {
    /// The reason in words (a close reason).
    pub fn reason(self) -> &'static str {
        match self {
            Self::BadHello => "circle: bad hello",
            Self::BadProof => "circle: bad proof",
            Self::Timeout => "circle: no proof in time",
        }
    }
}

/// What one frame on an unproven link came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A handshake frame taken; nothing to do but [`Machine::poll`].
    Taken,
    /// The far side proved this key: the link is up, every later frame is the shell's.
    Proven([u8; 32]),
    /// Not a handshake frame, on a link not proven: dropped (counted).
    Dropped,
    /// The link failed; close it.
    Failed(LinkError),
}

/// What the handshake asks of its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send this text on the link.
    Send(String),
    /// The link failed; close it with [`LinkError::reason`].
    Fail(LinkError),
}

/// One link's key proof, both directions (see the module docs).
pub struct LinkAuth {
    provider: &'static dyn CryptoProvider,
    secret: Secp256k1Secret,
    key: [u8; 32],
    nonce: [u8; 32],
    /// The far side's key and nonce, once its hello came.
    theirs: Option<([u8; 32], [u8; 32])>,
    proven: Option<[u8; 32]>,
    failed: bool,
    deadline: Timestamp,
    out: Vec<Output>,
    dropped: u64,
}

impl core::fmt::Debug for LinkAuth {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LinkAuth")
            .field("proven", &self.proven.map(|k| hex::encode(&k)))
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

fn hello_text(key: &[u8; 32], nonce: &[u8; 32]) -> String {
    Value::Array(alloc::vec![
        "CIRCLE".into(),
        "hello".into(),
        hex::encode(key).into(),
        hex::encode(nonce).into(),
    ])
    .to_string()
}

fn read_hex32(v: Option<&Value>) -> Option<[u8; 32]> {
    let s = v?.as_str()?;
    if s.len() != 64 || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    hex::decode_array::<32>(s).ok()
}

/// Whether `text` is a handshake frame (`["CIRCLE", …]`), without reading the rest.
pub fn is_handshake(text: &str) -> bool {
    text.trim_start().starts_with("[\"CIRCLE\"")
}

impl LinkAuth {
    /// A link's handshake started at `now` by this user's `secret`; its hello is the first
    /// output.
    pub fn new(
        provider: &'static dyn CryptoProvider,
        secret: Secp256k1Secret,
        rng: &mut dyn CryptoRng,
        now: Timestamp,
    ) -> Result<Self, crate::crypto::CryptoError> {
        let key = provider.schnorr_public_key(&secret)?;
        let mut nonce = [0u8; 32];
        rng.fill_bytes(&mut nonce);
        Ok(Self {
            provider,
            secret,
            key,
            nonce,
            theirs: None,
            proven: None,
            failed: false,
            deadline: now.saturating_add(core::time::Duration::from_millis(PROOF_TIMEOUT_MS)),
            out: alloc::vec![Output::Send(hello_text(&key, &nonce))],
            dropped: 0,
        })
    }

    /// The far side's key, once proven.
    pub fn proven(&self) -> Option<[u8; 32]> {
        self.proven
    }

    /// Frames dropped because they came before the proof.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    fn message(
        &self,
        signer: &[u8; 32],
        signer_nonce: &[u8; 32],
        other: &[u8; 32],
        other_nonce: &[u8; 32],
    ) -> [u8; 32] {
        // The signer signs the challenge it was given (the other's nonce) first.
        self.provider
            .sha256(&[PROOF_CONTEXT, other_nonce, signer_nonce, signer, other])
    }

    fn fail(&mut self, e: LinkError) -> Step {
        if !self.failed {
            self.failed = true;
            self.out.push(Output::Fail(e));
        }
        Step::Failed(e)
    }

    /// One text frame from the link before (or as) it is proven. After [`Step::Proven`] the
    /// host hands frames to the shell, not here; one that still comes here is [`Step::Dropped`].
    pub fn handle_text(&mut self, text: &str) -> Step {
        if self.failed {
            return Step::Failed(LinkError::BadHello);
        }
        if self.proven.is_some() || !is_handshake(text) {
            self.dropped += 1;
            return Step::Dropped;
        }
        let parsed: Option<Vec<Value>> = (text.len() <= MAX_HANDSHAKE_BYTES)
            .then(|| serde_json::from_str::<Value>(text).ok())
            .flatten()
            .and_then(|v| match v {
                Value::Array(a) => Some(a),
                _ => None,
            });
        let Some(items) = parsed else {
            return self.fail(LinkError::BadHello);
        };
        match (items.get(1).and_then(Value::as_str), items.len()) {
            (Some("hello"), 4) => {
                let (Some(key), Some(nonce)) = (read_hex32(items.get(2)), read_hex32(items.get(3)))
                else {
                    return self.fail(LinkError::BadHello);
                };
                if self.theirs.is_some() || key == self.key {
                    return self.fail(LinkError::BadHello);
                }
                self.theirs = Some((key, nonce));
                let msg = self.message(&self.key, &self.nonce, &key, &nonce);
                let mut aux = [0u8; 32];
                // Deterministic aux: the two nonces are fresh per link already.
                aux.copy_from_slice(&self.provider.sha256(&[&self.nonce, &nonce]));
                let Ok(sig) = self.provider.schnorr_sign(&self.secret, &msg, &aux) else {
                    return self.fail(LinkError::BadProof);
                };
                let proof = Value::Array(alloc::vec![
                    "CIRCLE".into(),
                    "proof".into(),
                    hex::encode(&sig).into(),
                ])
                .to_string();
                self.out.push(Output::Send(proof));
                Step::Taken
            }
            (Some("proof"), 3) => {
                let Some((key, nonce)) = self.theirs else {
                    return self.fail(LinkError::BadProof);
                };
                let sig = items
                    .get(2)
                    .and_then(Value::as_str)
                    .filter(|s| s.len() == 128)
                    .and_then(|s| hex::decode_array::<64>(s).ok());
                let Some(sig) = sig else {
                    return self.fail(LinkError::BadProof);
                };
                let msg = self.message(&key, &nonce, &self.key, &self.nonce);
                if !self.provider.schnorr_verify(&key, &msg, &sig) {
                    return self.fail(LinkError::BadProof);
                }
                self.proven = Some(key);
                Step::Proven(key)
            }
            _ => self.fail(LinkError::BadHello),
        }
    }
}

impl Machine for LinkAuth {
    type Input = String;
    type Output = Output;

    fn handle(&mut self, _now: Timestamp, input: String) {
        let _ = self.handle_text(&input);
    }

    fn poll(&mut self) -> Option<Output> {
        if self.out.is_empty() {
            None
        } else {
            Some(self.out.remove(0))
        }
    }

    fn poll_timeout(&self) -> Option<Wakeup> {
        (self.proven.is_none() && !self.failed)
            .then(|| Wakeup::new(self.deadline, "circle: link proof deadline"))
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        if self.proven.is_none() && now >= self.deadline {
            self.fail(LinkError::Timeout);
        }
    }
}

#[cfg(all(test, feature = "rustcrypto"))]
mod tests {
    use super::*;
    use crate::crypto::{default_provider, generate_secp256k1};
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    const T0: Timestamp = Timestamp::from_millis(1_790_000_000_000);

    fn side(seed: u64) -> (LinkAuth, [u8; 32], Secp256k1Secret) {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let secret = generate_secp256k1(p, &mut rng);
        let key = p.schnorr_public_key(&secret).unwrap();
        (
            LinkAuth::new(p, secret.clone(), &mut rng, T0).unwrap(),
            key,
            secret,
        )
    }

    fn sent(a: &mut LinkAuth) -> Vec<String> {
        core::iter::from_fn(|| a.poll())
            .filter_map(|o| match o {
                Output::Send(t) => Some(t),
                Output::Fail(_) => None,
            })
            .collect()
    }

    /// Runs both handshakes to the end; what each side saw proven.
    fn meet(a: &mut LinkAuth, b: &mut LinkAuth) -> (Vec<Step>, Vec<Step>) {
        let (mut sa, mut sb) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            for t in sent(a) {
                sb.push(b.handle_text(&t));
            }
            for t in sent(b) {
                sa.push(a.handle_text(&t));
            }
        }
        (sa, sb)
    }

    #[test]
    fn both_sides_prove_their_keys_and_frames_before_the_proof_are_dropped() {
        let (mut a, ka, _) = side(1);
        let (mut b, kb, _) = side(2);
        assert_eq!(
            b.handle_text(r#"["MESH",{"ttl":1},["EVENT",{}]]"#),
            Step::Dropped
        );
        let (sa, sb) = meet(&mut a, &mut b);
        assert!(sa.contains(&Step::Proven(kb)), "{sa:?}");
        assert!(sb.contains(&Step::Proven(ka)), "{sb:?}");
        assert_eq!(a.proven(), Some(kb));
        assert_eq!(b.dropped(), 1);
        assert_eq!(a.poll_timeout(), None);
    }

    #[test]
    fn a_proof_replayed_on_another_link_or_by_another_key_fails() {
        let (mut a, _, _) = side(1);
        let (mut b, _, _) = side(2);
        // Record b's hello and proof on the a-b link.
        let hello_a = sent(&mut a);
        let hello_b = sent(&mut b);
        b.handle_text(&hello_a[0]);
        let proof_b = sent(&mut b);
        // A fresh link from a (new nonce) given b's recorded hello and proof: refused.
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let mut a2 = LinkAuth::new(p, generate_secp256k1(p, &mut rng), &mut rng, T0).unwrap();
        let _ = sent(&mut a2);
        assert_eq!(a2.handle_text(&hello_b[0]), Step::Taken);
        assert_eq!(
            a2.handle_text(&proof_b[0]),
            Step::Failed(LinkError::BadProof)
        );
        assert!(matches!(a2.poll(), Some(Output::Send(_))));
        assert_eq!(a2.poll(), Some(Output::Fail(LinkError::BadProof)));
        // A stranger claiming b's key cannot sign for it.
        let (mut m, _, _) = side(3);
        let (mut c, _, _) = side(4);
        let _ = sent(&mut m);
        let hello_c = sent(&mut c);
        let claim = hello_b[0].clone();
        assert_eq!(c.handle_text(&claim), Step::Taken);
        m.handle_text(&hello_c[0]);
        let forged = sent(&mut m);
        assert_eq!(c.handle_text(&forged[0]), Step::Failed(LinkError::BadProof));
    }

    #[test]
    fn malformed_second_or_own_hellos_and_early_proofs_fail_the_link() {
        let (mut a, ka, _) = side(1);
        let own = hello_text(&ka, &[7; 32]);
        for (text, want) in [
            (own.as_str(), LinkError::BadHello),
            (r#"["CIRCLE","hello","AB","00"]"#, LinkError::BadHello),
            (r#"["CIRCLE","proof","00"]"#, LinkError::BadProof),
            (r#"["CIRCLE",1]"#, LinkError::BadHello),
            (r#"["CIRCLE""#, LinkError::BadHello),
        ] {
            let (mut x, _, _) = side(1);
            assert_eq!(x.handle_text(text), Step::Failed(want), "{text}");
        }
        let huge = alloc::format!("[\"CIRCLE\",\"{}\"]", "x".repeat(MAX_HANDSHAKE_BYTES));
        assert_eq!(a.handle_text(&huge), Step::Failed(LinkError::BadHello));
        let (mut b, _, _) = side(2);
        let hb = hello_text(&[5; 32], &[6; 32]);
        assert_eq!(b.handle_text(&hb), Step::Taken);
        assert_eq!(b.handle_text(&hb), Step::Failed(LinkError::BadHello));
    }

    #[test]
    fn no_proof_in_time_fails_the_link() {
        let (mut a, _, _) = side(1);
        let _ = sent(&mut a);
        let at = a.poll_timeout().unwrap().at;
        assert_eq!(
            at,
            T0.saturating_add(core::time::Duration::from_millis(PROOF_TIMEOUT_MS))
        );
        a.handle_timeout(Timestamp::from_millis(at.as_millis() - 1));
        assert_eq!(a.poll(), None);
        a.handle_timeout(at);
        assert_eq!(a.poll(), Some(Output::Fail(LinkError::Timeout)));
        assert_eq!(a.poll_timeout(), None);
    }
}
