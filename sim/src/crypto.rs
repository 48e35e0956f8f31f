//! The crypto provider the simulator hands its machines: RustCrypto, with the Ed25519 keys it
//! has already expanded kept, so a simulation spends its time on the protocol rather than on
//! deriving the same few keys again and again.
//!
//! Every AIRC message between realms is signed by its origin realm and verified by the
//! destination (AIRC §9.2, §9.3). Through the plain provider each signature costs three
//! fixed-base scalar multiplications (the public key for the kid, the key again inside
//! `ed25519_sign`, then the signature) and each verification decompresses the public key first.
//! A simulation has a handful of realm keys, so [`SimCrypto`] expands each once. The results
//! are the same bytes the plain provider gives (Ed25519 is deterministic, and both go through
//! `ed25519-dalek`); a test checks it.
//!
//! Minca signs and checks everything with P-256 (Minca §2, §6.2, §8), and [`SimCrypto`] keeps
//! each P-256 key that signs expanded too (a signing key otherwise costs a scalar
//! multiplication to build, a public key a square root).
//!
//! Nearly every signature a simulation verifies is one this same provider made earlier in the
//! run (an AIRC realm's Ed25519 signature checked at the destination realm: at 100 realms and
//! 100 000 messages all 126 292 verifications; a Minca hello, proof or introduction checked by
//! every peer of a room it is flooded to: all 107 209 of a 240-node meetup), and an honestly
//! made signature always verifies under its key (the correctness of Ed25519 and of ECDSA). So
//! [`SimCrypto`] remembers each signature it makes, under the SHA-256 of the message, the
//! signature, the public key and the scheme (up to [`MAX_REMEMBERED_SIGNATURES`]), and answers a
//! verification of exactly those bytes from memory; anything else (another key, a changed
//! byte, a signature from elsewhere) is verified for real. Tests check every answer against
//! the plain provider's.
//!
//! With the `fast-crypto` feature the arithmetic goes through assembly where the bytes stay the
//! same: Ed25519 signatures through aws-lc-rs (RFC 8032 signing is deterministic); a P-256
//! signature's `k×G` and a signing key's public half through aws-lc, with RFC 6979's nonce and
//! the rest of ECDSA as RustCrypto's own crates compute them (ring and aws-lc-rs sign only with
//! nonces of their own drawing, which no run could reproduce; `sim/src/crypto/signing.rs`);
//! P-256 verification through ring, as the drivers' fast
//! provider does; one-time keys' public halves and ECDH through aws-lc (ring agrees only with
//! its own ephemeral keys), each one scalar multiplication (`sim/src/crypto/aws.rs` says why
//! not through aws-lc-rs).
//!
//! A meetup never asks for the same agreement twice, but every seal's agreement is asked for
//! twice in another form: `e×B` by the sender, `b×E` by the recipient, the same point by the
//! Diffie-Hellman identity. The provider remembers each agreement it computes under the public
//! half of its secret (up to [`MAX_REMEMBERED_AGREEMENTS`]) and answers the recipient's from
//! memory when its secret's public half is the point the sender agreed with
//! (`sim/src/crypto/agreements.rs` says why that is exact). A point whose secret is known
//! here (a box whose half was computed here) is agreed with as `(e·b)×G`, a fixed-base
//! multiplication, where `e×B` is a variable-base one.
//! [`counts`] and [`ed25519_verifies`] say how much work was done and how much was remembered.

mod agreements;
#[cfg(feature = "fast-crypto")]
mod aws;
mod digest_set;
#[cfg(feature = "fast-crypto")]
mod invert;
#[cfg(feature = "fast-crypto")]
mod nonce;
mod signing;

pub use agreements::{MAX_KEPT_PUBLICS, MAX_KNOWN_SECRETS, MAX_REMEMBERED_AGREEMENTS};

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use ed25519_dalek::{Signer as _, SigningKey, Verifier as _, VerifyingKey};
use weft_proto::crypto::{
    self, CryptoError, CryptoProvider, Ed25519Seed, P256Public, P256Secret, Secp256k1Secret,
};

/// The most Ed25519 keys of each kind (signing, verifying) kept expanded. A scenario has one
/// key per realm; past this many a key is expanded on every use, as the plain provider does, so
/// memory stays bounded whatever a scenario does.
pub const MAX_EXPANDED_KEYS: usize = 4_096;

/// The most P-256 keys of each kind (signing, verifying) kept expanded: one session key per
/// node, so a 10 000-node meetup keeps every one; past this many a key is expanded on every use.
pub const MAX_EXPANDED_P256_KEYS: usize = 65_536;

/// The most signatures (of either scheme) remembered as made here, about 100 bytes an entry,
/// so verifying them again costs a hash. When full, that memory starts again empty: only
/// repeated work is lost.
pub const MAX_REMEMBERED_SIGNATURES: usize = 1 << 18;

/// What the provider has done since the process started, across every run sharing it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// P-256 signatures made.
    pub p256_signs: u64,
    /// P-256 verifications asked for.
    pub p256_verifies: u64,
    /// Of those, the ones answered from memory.
    pub p256_verifies_remembered: u64,
    /// P-256 ECDH agreements asked for.
    pub p256_ecdh: u64,
    /// Of those, the ones answered from memory (a seal's agreement, asked for by its recipient).
    pub p256_ecdh_remembered: u64,
    /// Of those computed, the ones computed as `(s·b)×G` because this provider knew the secret
    /// `b` of the peer's point (it computed that point from `b`: a seal to a box); the rest
    /// were variable-base multiplications (or refusals).
    pub p256_ecdh_fixed_base: u64,
}

static SIGNS: AtomicU64 = AtomicU64::new(0);
static VERIFIES: AtomicU64 = AtomicU64::new(0);
static REMEMBERED: AtomicU64 = AtomicU64::new(0);
static ECDH: AtomicU64 = AtomicU64::new(0);
static ECDH_REMEMBERED: AtomicU64 = AtomicU64::new(0);
static ECDH_FIXED_BASE: AtomicU64 = AtomicU64::new(0);
static ED_VERIFIES: AtomicU64 = AtomicU64::new(0);
static ED_REMEMBERED: AtomicU64 = AtomicU64::new(0);

/// How many Ed25519 verifications the shared provider was asked for, and how many of them it
/// answered from the signatures it remembers making (for profiling, like [`counts`]).
pub fn ed25519_verifies() -> (u64, u64) {
    (
        ED_VERIFIES.load(Ordering::Relaxed),
        ED_REMEMBERED.load(Ordering::Relaxed),
    )
}

/// How much P-256 work the shared provider has done (for profiling: runs in parallel threads
/// share the counts).
pub fn counts() -> Counts {
    Counts {
        p256_signs: SIGNS.load(Ordering::Relaxed),
        p256_verifies: VERIFIES.load(Ordering::Relaxed),
        p256_verifies_remembered: REMEMBERED.load(Ordering::Relaxed),
        p256_ecdh: ECDH.load(Ordering::Relaxed),
        p256_ecdh_remembered: ECDH_REMEMBERED.load(Ordering::Relaxed),
        p256_ecdh_fixed_base: ECDH_FIXED_BASE.load(Ordering::Relaxed),
    }
}

/// RustCrypto with expanded Ed25519 keys kept; see the [module docs](self).
#[derive(Debug)]
pub struct SimCrypto {
    signing: Kept<[u8; 32], Expanded>,
    verifying: Kept<[u8; 32], Option<VerifyingKey>>,
    p256_signing: Kept<[u8; 32], Option<signing::P256Key>>,
    p256_verifying: Kept<[u8; 33], Option<p256::ecdsa::VerifyingKey>>,
    /// BIP-340 public keys of secp256k1 secrets that signed here.
    schnorr_publics: Kept<[u8; 32], Result<[u8; 32], CryptoError>>,
    /// Digests ([`MessageHash::remembered_under`]) of the signatures made here. Only membership is
    /// asked, so a hash set's order never shows.
    signed: Mutex<Option<digest_set::DigestSet>>,
    /// ECDH agreements computed here, for their other side (`agreements.rs`).
    agreements: agreements::Agreements,
    /// Public halves of secrets that are not signing keys, known without a multiplication.
    publics: agreements::Publics,
}

/// The one provider every simulation shares (it holds only derived keys, which are the same for
/// every run that uses them).
pub static SIM_CRYPTO: SimCrypto = SimCrypto {
    signing: Kept::new(),
    verifying: Kept::new(),
    p256_signing: Kept::new(),
    p256_verifying: Kept::new(),
    schnorr_publics: Kept::new(),
    signed: Mutex::new(None),
    agreements: agreements::Agreements::new(),
    publics: agreements::Publics::new(),
};

std::thread_local! {
    /// The provider [`with_provider`] put in place on this thread, if any.
    static CHOSEN: std::cell::Cell<Option<&'static dyn CryptoProvider>> =
        const { std::cell::Cell::new(None) };
}

/// The provider scenarios hand their machines: [`SIM_CRYPTO`], unless [`with_provider`] chose
/// another for the run on this thread.
pub fn provider() -> &'static dyn CryptoProvider {
    CHOSEN.with(std::cell::Cell::get).unwrap_or(&SIM_CRYPTO)
}

/// Runs `run` with `chosen` as the provider every scenario started inside it hands its machines
/// (a fuzz target's [`crate::fuzz_crypto::FUZZ_CRYPTO`], say), then puts the previous one back,
/// also when `run` panics. Per thread: a scenario runs on the thread that calls it.
pub fn with_provider<R>(chosen: &'static dyn CryptoProvider, run: impl FnOnce() -> R) -> R {
    struct Restore(Option<&'static dyn CryptoProvider>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CHOSEN.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CHOSEN.with(|c| c.replace(Some(chosen))));
    run()
}

/// Values derived from their keys alone, kept under a lock. Hashed, not ordered: only lookups
/// are asked, so no order ever shows, and a lookup hashes once where an ordered map compared
/// keys a dozen times. Empty (`None`) until first used, so it can start in a static.
struct Kept<K, V>(Mutex<Option<hashbrown::HashMap<K, V>>>);

impl<K, V> std::fmt::Debug for Kept<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys of some are secrets (seeds, scalars): only how many are kept is shown.
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_tuple("Kept")
            .field(&map.as_ref().map_or(0, hashbrown::HashMap::len))
            .finish()
    }
}

impl<K: std::hash::Hash + Eq + Copy, V: Clone> Kept<K, V> {
    const fn new() -> Self {
        Kept(Mutex::new(None))
    }

    /// The value kept for `key`, if any.
    fn get(&self, key: &K) -> Option<V> {
        // A poisoned lock only means another thread panicked mid-insert of a value that is
        // derived from its key alone: the map is still right.
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.as_ref()?.get(key).cloned()
    }

    /// Finds `key`, or makes its value and keeps it while there are fewer than `max`.
    fn get_or_make(&self, key: &K, max: usize, make: impl FnOnce() -> V) -> V {
        if let Some(v) = self.get(key) {
            return v;
        }
        // Made outside the lock, so parallel runs do not wait on each other's curve arithmetic.
        let v = make();
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let map = map.get_or_insert_with(hashbrown::HashMap::new);
        if map.len() < max {
            map.insert(*key, v.clone());
        }
        v
    }
}

/// `secret` as a P-256 scalar: RustCrypto's rule (not zero, below the group order), which the
/// plain provider applies to every P-256 secret.
fn p256_scalar(secret: &P256Secret) -> Result<p256::NonZeroScalar, CryptoError> {
    p256::NonZeroScalar::from_repr((*secret.expose()).into())
        .into_option()
        .ok_or(CryptoError::InvalidSecretKey)
}

/// `scalar×G`, compressed, computed.
fn p256_public_for_real(scalar: &p256::NonZeroScalar) -> P256Public {
    // aws-lc's fixed-base multiplication is several times RustCrypto's; RustCrypto's is left
    // for when aws-lc cannot allocate.
    #[cfg(feature = "fast-crypto")]
    if let Some(public) = aws::mul_base(scalar) {
        return P256Public(public);
    }
    let key = p256::ecdsa::SigningKey::from(*scalar);
    P256Public(p256::CompressedPoint::from(key.verifying_key()).into())
}

/// The x-coordinate of `(scalar·known)×G`, which is that of `scalar×B` for `B = known×G`: one
/// fixed-base multiplication where `scalar×B` is a variable-base one. Both scalars are non-zero
/// modulo the prime order, so their product is too and the point is never infinity.
fn p256_ecdh_fixed_base(scalar: &p256::NonZeroScalar, known: &p256::NonZeroScalar) -> [u8; 32] {
    let P256Public([_tag, x @ ..]) = p256_public_for_real(&(*scalar * *known));
    x
}

/// `secret` × `peer`'s x-coordinate, computed; `scalar` is `secret` decoded.
fn p256_ecdh_for_real(
    secret: &P256Secret,
    scalar: &p256::NonZeroScalar,
    peer: &P256Public,
) -> Result<[u8; 32], CryptoError> {
    #[cfg(feature = "fast-crypto")]
    {
        // aws-lc's assembly does the variable-base multiplication several times faster than
        // RustCrypto, and takes the compressed point as it is: most peers' points here are
        // one-time envelope keys (Minca §2's seals), not worth decompressing and keeping.
        // aws-lc decodes the tags `02` and `03` as RustCrypto does (x below p, with a y; a test
        // compares them); RustCrypto also takes `05` (SEC1's compact form), which aws-lc
        // refuses, so any other tag goes to the plain provider.
        if !matches!(peer.0[0], 2 | 3) {
            return crypto::default_provider().p256_ecdh(secret, peer);
        }
        let [_tag, x @ ..] = aws::mul(scalar, &peer.0).ok_or(CryptoError::InvalidPublicKey)?;
        Ok(x)
    }
    #[cfg(not(feature = "fast-crypto"))]
    {
        let _ = scalar;
        crypto::default_provider().p256_ecdh(secret, peer)
    }
}

/// The signature schemes whose signatures are remembered, as the first byte of what each is
/// remembered under.
#[derive(Clone, Copy)]
enum Scheme {
    Ed25519 = 1,
    P256 = 2,
    Schnorr = 3,
}

/// A message hashed as far as its own bytes go. What a signature is remembered under,
/// SHA-256 of the message, then the fixed-length signature and key, then the scheme (the last
/// byte says how long the key is, so no two (scheme, key, signature, message) share a digest
/// input), starts with the same blocks as the message's own SHA-256, which a P-256 signature
/// signs: with `fast-crypto` a signature hashes its message once for both.
struct MessageHash<'a> {
    msg: &'a [u8],
    /// The SHA-256 state after `msg`.
    #[cfg(feature = "fast-crypto")]
    state: sha2::Sha256,
}

impl<'a> MessageHash<'a> {
    fn new(msg: &'a [u8]) -> Self {
        MessageHash {
            msg,
            #[cfg(feature = "fast-crypto")]
            state: {
                use sha2::Digest as _;
                sha2::Sha256::new_with_prefix(msg)
            },
        }
    }

    /// SHA-256 of the message alone.
    #[cfg(feature = "fast-crypto")]
    fn sha256(&self) -> [u8; 32] {
        use sha2::Digest as _;
        self.state.clone().finalize().into()
    }

    /// SHA-256 of the message then `tail`.
    fn sha256_then(self, tail: &[&[u8]]) -> [u8; 32] {
        #[cfg(feature = "fast-crypto")]
        {
            use sha2::Digest as _;
            let _ = self.msg;
            let mut state = self.state;
            for part in tail {
                state.update(part);
            }
            state.finalize().into()
        }
        #[cfg(not(feature = "fast-crypto"))]
        {
            let mut parts = Vec::with_capacity(tail.len() + 1);
            parts.push(self.msg);
            parts.extend_from_slice(tail);
            crypto::default_provider().sha256(&parts)
        }
    }

    /// What a signature `sig` of the message under `public` is remembered under.
    fn remembered_under(self, scheme: Scheme, public: &[u8], sig: &[u8; 64]) -> digest_set::Digest {
        digest_set::Digest(self.sha256_then(&[sig, public, &[scheme as u8]]))
    }
}

/// An expanded signing key: dalek's (which also gives the public key), and with `fast-crypto`
/// aws-lc-rs's, which signs faster.
#[derive(Clone)]
struct Expanded {
    dalek: SigningKey,
    /// `None` only if aws-lc-rs refused the seed (it takes any 32 bytes); dalek signs then.
    #[cfg(feature = "fast-crypto")]
    aws: Option<std::sync::Arc<aws_lc_rs::signature::Ed25519KeyPair>>,
}

impl std::fmt::Debug for Expanded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secret material: only the public half is shown.
        f.debug_tuple("Expanded")
            .field(&self.dalek.verifying_key())
            .finish()
    }
}

impl Expanded {
    fn new(seed: &[u8; 32]) -> Self {
        Expanded {
            dalek: SigningKey::from_bytes(seed),
            // `unchecked` only skips comparing against a public key we do not have.
            #[cfg(feature = "fast-crypto")]
            aws: aws_lc_rs::signature::Ed25519KeyPair::from_seed_unchecked(seed)
                .ok()
                .map(std::sync::Arc::new),
        }
    }

    fn sign(&self, msg: &[u8]) -> [u8; 64] {
        #[cfg(feature = "fast-crypto")]
        if let Some(aws) = &self.aws {
            let mut sig = [0; 64];
            sig.copy_from_slice(aws.sign(msg).as_ref());
            return sig;
        }
        self.dalek.sign(msg).to_bytes()
    }
}

impl SimCrypto {
    fn signing_key(&self, seed: &Ed25519Seed) -> Expanded {
        self.signing
            .get_or_make(seed.expose(), MAX_EXPANDED_KEYS, || {
                Expanded::new(seed.expose())
            })
    }

    /// Remembers that `sig` over the message was made here under `public`.
    fn remember_signed(&self, scheme: Scheme, public: &[u8], sig: &[u8; 64], msg: MessageHash) {
        let digest = msg.remembered_under(scheme, public, sig);
        let mut set = self.signed.lock().unwrap_or_else(|e| e.into_inner());
        let set = set.get_or_insert_with(digest_set::DigestSet::default);
        if set.len() >= MAX_REMEMBERED_SIGNATURES {
            set.clear();
        }
        set.insert(digest);
    }

    /// Whether `sig` over `msg` under `public` is one made here (so it verifies).
    fn made_here(&self, scheme: Scheme, public: &[u8], sig: &[u8; 64], msg: &[u8]) -> bool {
        let digest = MessageHash::new(msg).remembered_under(scheme, public, sig);
        self.signed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|set| set.contains(&digest))
    }

    /// `secret` expanded for signing, and kept: a key that signs is used again (a session key).
    fn p256_signing_key(&self, secret: &P256Secret) -> Option<signing::P256Key> {
        self.p256_signing
            .get_or_make(secret.expose(), MAX_EXPANDED_P256_KEYS, || {
                p256_scalar(secret).ok().map(signing::P256Key::new)
            })
    }

    /// `public` decompressed, once per key (a square root), or `None` when it is not a point.
    fn p256_verifying_key(&self, public: &P256Public) -> Option<p256::ecdsa::VerifyingKey> {
        self.p256_verifying
            .get_or_make(&public.0, MAX_EXPANDED_P256_KEYS, || {
                p256::ecdsa::VerifyingKey::from_sec1_bytes(&public.0).ok()
            })
    }

    /// `secret`'s public half if it is known without a multiplication.
    fn known_public(&self, secret: &P256Secret) -> Option<P256Public> {
        let signing = self.p256_signing.get(secret.expose());
        match signing {
            Some(key) => key.as_ref().map(signing::P256Key::public),
            None => self.publics.get(secret.expose()),
        }
    }

    /// `secret`'s agreement with `peer` when an agreement made under `peer` answers it: the
    /// secret's public half is the point that agreement was made with (`agreements.rs`);
    /// `scalar` is `secret` decoded.
    fn recalled_agreement(
        &self,
        secret: &P256Secret,
        scalar: &p256::NonZeroScalar,
        peer: &P256Public,
    ) -> Option<[u8; 32]> {
        let (with, shared) = self.agreements.recall(peer)?;
        let public = match self.known_public(secret) {
            Some(public) => public,
            None => self.p256_public_key(secret).ok()?,
        };
        if public != with {
            return None;
        }
        // A secret something was sealed to is a box, asked for again at every open, and sealed
        // to again: `public` was computed here from it, as `keep` asks.
        self.publics.keep(secret.expose(), scalar, &public);
        Some(shared)
    }

    fn p256_verify_for_real(&self, public: &P256Public, msg: &[u8], sig: &[u8; 64]) -> bool {
        let Some(key) = self.p256_verifying_key(public) else {
            return false;
        };
        #[cfg(feature = "fast-crypto")]
        {
            use p256::elliptic_curve::sec1::ToSec1Point as _;
            // ring takes only uncompressed points; the key was decompressed once, above.
            let point = p256::PublicKey::from(&key).to_uncompressed_point();
            ring::signature::UnparsedPublicKey::new(
                &ring::signature::ECDSA_P256_SHA256_FIXED,
                &point[..],
            )
            .verify(msg, sig)
            .is_ok()
        }
        #[cfg(not(feature = "fast-crypto"))]
        {
            let Ok(sig) = p256::ecdsa::Signature::from_bytes(sig.into()) else {
                return false;
            };
            key.verify(msg, &sig).is_ok()
        }
    }
}

impl CryptoProvider for SimCrypto {
    fn name(&self) -> &'static str {
        "rustcrypto (simulator: expanded keys kept, p256 verifications remembered)"
    }

    fn sha256(&self, parts: &[&[u8]]) -> [u8; 32] {
        crypto::default_provider().sha256(parts)
    }

    fn hmac_sha256(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        crypto::default_provider().hmac_sha256(key, parts)
    }

    fn hmac_sha1(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 20] {
        crypto::default_provider().hmac_sha1(key, parts)
    }

    fn p256_public_key(&self, secret: &P256Secret) -> Result<P256Public, CryptoError> {
        let kept = self.p256_signing.get(secret.expose());
        // A key that has signed is kept expanded. The others are not kept there: most keys
        // asked only for their public half are one-time envelope keys (Minca §2's seals), which
        // would crowd the session keys out; `publics` knows the few others worth knowing.
        if let Some(key) = kept {
            return key
                .as_ref()
                .map(signing::P256Key::public)
                .ok_or(CryptoError::InvalidSecretKey);
        }
        if let Some(public) = self.publics.get(secret.expose()) {
            return Ok(public);
        }
        let scalar = p256_scalar(secret)?;
        let public = p256_public_for_real(&scalar);
        // A seal asks again for its one-time key's half, then agrees with that key; a box's
        // half is sealed to.
        self.publics.computed(secret.expose(), &scalar, &public);
        Ok(public)
    }

    fn p256_sign(&self, secret: &P256Secret, msg: &[u8]) -> Result<[u8; 64], CryptoError> {
        SIGNS.fetch_add(1, Ordering::Relaxed);
        let key = self
            .p256_signing_key(secret)
            .ok_or(CryptoError::InvalidSecretKey)?;
        let hashed = MessageHash::new(msg);
        // RFC 6979, as the plain provider signs: the same bytes for the same key and message.
        #[cfg(feature = "fast-crypto")]
        let sig = key.sign(msg, &hashed.sha256());
        #[cfg(not(feature = "fast-crypto"))]
        let sig = key.sign(msg);
        self.remember_signed(Scheme::P256, &key.public().0, &sig, hashed);
        Ok(sig)
    }

    fn p256_verify(&self, public: &P256Public, msg: &[u8], sig: &[u8; 64]) -> bool {
        VERIFIES.fetch_add(1, Ordering::Relaxed);
        if self.made_here(Scheme::P256, &public.0, sig, msg) {
            REMEMBERED.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        self.p256_verify_for_real(public, msg, sig)
    }

    fn p256_is_point(&self, public: &P256Public) -> bool {
        self.p256_verifying_key(public).is_some()
    }

    fn p256_ecdh(&self, secret: &P256Secret, peer: &P256Public) -> Result<[u8; 32], CryptoError> {
        ECDH.fetch_add(1, Ordering::Relaxed);
        // The secret is checked first, as the plain provider does.
        let scalar = p256_scalar(secret)?;
        if let Some(shared) = self.recalled_agreement(secret, &scalar, peer) {
            ECDH_REMEMBERED.fetch_add(1, Ordering::Relaxed);
            return Ok(shared);
        }
        let shared = match self.publics.secret_of(peer) {
            Some(known) => {
                ECDH_FIXED_BASE.fetch_add(1, Ordering::Relaxed);
                p256_ecdh_fixed_base(&scalar, &known)
            }
            None => p256_ecdh_for_real(secret, &scalar, peer)?,
        };
        // Remembered only when the secret's half is known for free: a seal's one-time key,
        // just asked for (`agreements.rs`).
        if let Some(public) = self.known_public(secret) {
            self.agreements.remember(&public, peer, shared);
        }
        Ok(shared)
    }

    fn ed25519_public_key(&self, seed: &Ed25519Seed) -> [u8; 32] {
        self.signing_key(seed).dalek.verifying_key().to_bytes()
    }

    fn ed25519_sign(&self, seed: &Ed25519Seed, msg: &[u8]) -> [u8; 64] {
        let key = self.signing_key(seed);
        let sig = key.sign(msg);
        self.remember_signed(
            Scheme::Ed25519,
            key.dalek.verifying_key().as_bytes(),
            &sig,
            MessageHash::new(msg),
        );
        sig
    }

    fn ed25519_verify(&self, public: &[u8; 32], msg: &[u8], sig: &[u8; 64]) -> bool {
        ED_VERIFIES.fetch_add(1, Ordering::Relaxed);
        if self.made_here(Scheme::Ed25519, public, sig, msg) {
            ED_REMEMBERED.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let key = self.verifying.get_or_make(public, MAX_EXPANDED_KEYS, || {
            VerifyingKey::from_bytes(public).ok()
        });
        key.is_some_and(|k| {
            k.verify(msg, &ed25519_dalek::Signature::from_bytes(sig))
                .is_ok()
        })
    }

    fn x25519_public_key(&self, secret: &weft_proto::crypto::X25519Secret) -> [u8; 32] {
        // One fixed-base multiplication, made only when a key is made: RustCrypto's serves.
        weft_proto::crypto::default_provider().x25519_public_key(secret)
    }

    fn schnorr_public_key(&self, secret: &Secp256k1Secret) -> Result<[u8; 32], CryptoError> {
        self.schnorr_publics
            .get_or_make(secret.expose(), MAX_EXPANDED_KEYS, || {
                crypto::default_provider().schnorr_public_key(secret)
            })
    }

    fn schnorr_sign(
        &self,
        secret: &Secp256k1Secret,
        msg: &[u8; 32],
        aux: &[u8; 32],
    ) -> Result<[u8; 64], CryptoError> {
        // BIP-340 with the caller's auxiliary randomness: the same bytes the plain provider
        // gives, remembered as every signature made here is (a Nostr event is verified by every
        // relay and worker it reaches).
        let sig = crypto::default_provider().schnorr_sign(secret, msg, aux)?;
        let public = self.schnorr_public_key(secret)?;
        self.remember_signed(Scheme::Schnorr, &public, &sig, MessageHash::new(msg));
        Ok(sig)
    }

    fn schnorr_verify(&self, public: &[u8; 32], msg: &[u8; 32], sig: &[u8; 64]) -> bool {
        if self.made_here(Scheme::Schnorr, public, sig, msg) {
            return true;
        }
        crypto::default_provider().schnorr_verify(public, msg, sig)
    }

    fn secp256k1_ecdh(
        &self,
        secret: &Secp256k1Secret,
        peer: &[u8; 32],
    ) -> Result<[u8; 32], CryptoError> {
        crypto::default_provider().secp256k1_ecdh(secret, peer)
    }

    fn chacha20(&self, key: &[u8; 32], nonce: &[u8; 12], data: &[u8]) -> Vec<u8> {
        crypto::default_provider().chacha20(key, nonce, data)
    }

    fn aes256gcm_seal(
        &self,
        key: &[u8; 32],
        nonce: &[u8; 12],
        aad: &[u8],
        plaintext: &[u8],
    ) -> Vec<u8> {
        crypto::default_provider().aes256gcm_seal(key, nonce, aad, plaintext)
    }

    fn aes256gcm_open(
        &self,
        key: &[u8; 32],
        nonce: &[u8; 12],
        aad: &[u8],
        sealed: &[u8],
    ) -> Result<Vec<u8>, CryptoError> {
        crypto::default_provider().aes256gcm_open(key, nonce, aad, sealed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same bytes as the plain provider, on first use and from the kept keys, for good and
    /// bad signatures and for a public key that does not decode.
    #[test]
    fn kept_keys_give_the_plain_providers_answers() {
        let plain = crypto::default_provider();
        let sim = provider();
        for round in 0..2 {
            for n in 0u8..4 {
                let seed = Ed25519Seed::from_bytes([n.wrapping_mul(37).wrapping_add(1); 32]);
                let msg = [n, round, 9];
                let public = plain.ed25519_public_key(&seed);
                assert_eq!(sim.ed25519_public_key(&seed), public);
                let sig = plain.ed25519_sign(&seed, &msg);
                assert_eq!(sim.ed25519_sign(&seed, &msg), sig);
                assert!(sim.ed25519_verify(&public, &msg, &sig));
                let mut bad = sig;
                bad[n as usize] ^= 1;
                assert_eq!(
                    sim.ed25519_verify(&public, &msg, &bad),
                    plain.ed25519_verify(&public, &msg, &bad)
                );
                assert!(!sim.ed25519_verify(&public, b"other", &sig));
            }
        }
        // Not a point: every verification fails, the first and the kept one alike.
        for _ in 0..2 {
            assert!(!sim.p256_verify(&P256Public([0xff; 33]), b"m", &[1; 64]));
        }
        let not_a_point = [0xff; 32];
        for _ in 0..2 {
            assert!(!sim.ed25519_verify(&not_a_point, b"m", &[0; 64]));
        }
    }

    /// Random 32-byte secrets (some not valid scalars) from the seeded stream `(seed, n)`.
    fn random_secrets(seed: u64, n: u64) -> impl FnMut() -> P256Secret {
        use rand_core::Rng as _;
        let mut rng = crate::stream(seed, n);
        move || {
            let mut bytes = [0; 32];
            rng.fill_bytes(&mut bytes);
            P256Secret::from_bytes(bytes)
        }
    }

    /// A message hashed once gives its own SHA-256 and the digest its signature is remembered
    /// under, each as hashing the whole input afresh would, at every length around a block.
    #[test]
    fn a_message_hashed_once_gives_both_digests() {
        let plain = crypto::default_provider();
        let sig = [0x51; 64];
        let public = [0x0b; 33];
        for len in 0..200 {
            let msg: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            #[cfg(feature = "fast-crypto")]
            assert_eq!(MessageHash::new(&msg).sha256(), plain.sha256(&[&msg]));
            let remembered = MessageHash::new(&msg).remembered_under(Scheme::P256, &public, &sig);
            let whole = [&msg[..], &sig, &public, &[Scheme::P256 as u8]].concat();
            assert_eq!(remembered.0, plain.sha256(&[&whole]));
        }
    }

    /// A signature made here verifies from memory, but only under its own key, over its own
    /// message, byte for byte; a signature made elsewhere is checked for real.
    #[test]
    fn remembered_signatures_verify_only_as_made() {
        let plain = crypto::default_provider();
        let sim = provider();
        let (a, b) = (
            Ed25519Seed::from_bytes([91; 32]),
            Ed25519Seed::from_bytes([92; 32]),
        );
        let (pa, pb) = (plain.ed25519_public_key(&a), plain.ed25519_public_key(&b));
        let sig = sim.ed25519_sign(&a, b"made here");
        assert_eq!(sig, plain.ed25519_sign(&a, b"made here"));
        let (_, before) = ed25519_verifies();
        assert!(sim.ed25519_verify(&pa, b"made here", &sig));
        let (_, after) = ed25519_verifies();
        assert!(after > before, "answered from memory");
        assert!(!sim.ed25519_verify(&pb, b"made here", &sig));
        assert!(!sim.ed25519_verify(&pa, b"made her", &sig));
        let mut bad = sig;
        bad[63] ^= 0x10;
        assert!(!sim.ed25519_verify(&pa, b"made here", &bad));
        // Made by the plain provider only: verified for real, the same verdict.
        let elsewhere = plain.ed25519_sign(&b, b"made elsewhere");
        assert!(sim.ed25519_verify(&pb, b"made elsewhere", &elsewhere));
    }

    /// BIP-340 through the remembered answers: the plain provider's signature bytes and public
    /// key, a remembered verdict only for the exact key, message and signature made here.
    #[test]
    fn remembered_schnorr_signatures_verify_only_as_made() {
        let plain = crypto::default_provider();
        let sim = provider();
        let (a, b) = (
            Secp256k1Secret::from_bytes([41; 32]),
            Secp256k1Secret::from_bytes([42; 32]),
        );
        let pa = plain.schnorr_public_key(&a).unwrap();
        let pb = plain.schnorr_public_key(&b).unwrap();
        assert_eq!(sim.schnorr_public_key(&a).unwrap(), pa);
        let (msg, aux) = ([7; 32], [9; 32]);
        let sig = sim.schnorr_sign(&a, &msg, &aux).unwrap();
        assert_eq!(sig, plain.schnorr_sign(&a, &msg, &aux).unwrap());
        assert!(sim.schnorr_verify(&pa, &msg, &sig));
        assert!(!sim.schnorr_verify(&pb, &msg, &sig));
        let mut other = msg;
        other[31] ^= 1;
        assert!(!sim.schnorr_verify(&pa, &other, &sig));
        let mut bad = sig;
        bad[63] ^= 0x10;
        assert!(!sim.schnorr_verify(&pa, &msg, &bad));
        // Made by the plain provider only: verified for real, the same verdict.
        let elsewhere = plain.schnorr_sign(&b, &other, &aux).unwrap();
        assert!(sim.schnorr_verify(&pb, &other, &elsewhere));
    }

    /// P-256 through the kept keys and the remembered answers gives the plain provider's bytes
    /// and verdicts: a signature, the same one again, a forged one, another message.
    #[test]
    fn remembered_p256_answers_are_the_plain_providers() {
        let plain = crypto::default_provider();
        let sim = provider();
        for n in 1u8..4 {
            let secret = P256Secret::from_bytes([n; 32]);
            let public = plain.p256_public_key(&secret).unwrap();
            assert_eq!(sim.p256_public_key(&secret).unwrap(), public);
            let msg = [n, 7, 7];
            let sig = plain.p256_sign(&secret, &msg).unwrap();
            assert_eq!(sim.p256_sign(&secret, &msg).unwrap(), sig);
            let peer = plain
                .p256_public_key(&P256Secret::from_bytes([n + 10; 32]))
                .unwrap();
            for _ in 0..2 {
                assert_eq!(
                    sim.p256_ecdh(&secret, &peer).unwrap(),
                    plain.p256_ecdh(&secret, &peer).unwrap()
                );
                assert_eq!(sim.p256_sign(&secret, &msg).unwrap(), sig);
                assert!(sim.p256_verify(&public, &msg, &sig));
                let mut bad = sig;
                bad[usize::from(n)] ^= 1;
                assert!(!sim.p256_verify(&public, &msg, &bad));
                assert!(!sim.p256_verify(&public, b"other", &sig));
            }
        }
        assert!(
            sim.p256_public_key(&P256Secret::from_bytes([0; 32]))
                .is_err()
        );
        assert!(
            sim.p256_sign(&P256Secret::from_bytes([0; 32]), b"m")
                .is_err()
        );
        let secret = P256Secret::from_bytes([1; 32]);
        for not_a_point in [[0xff; 33], [2; 33], [0; 33]] {
            let not_a_point = P256Public(not_a_point);
            assert_eq!(
                sim.p256_ecdh(&secret, &not_a_point),
                plain.p256_ecdh(&secret, &not_a_point)
            );
        }
        let c = counts();
        assert!(c.p256_verifies_remembered > 0);
    }

    /// A signature the provider made is known to verify under its key and message, and only
    /// those: another key, message or changed byte is verified for real and refused.
    #[test]
    fn a_signature_made_here_verifies_from_memory_and_nothing_else_does() {
        let plain = crypto::default_provider();
        let sim = provider();
        let secret = P256Secret::from_bytes([42; 32]);
        let public = plain.p256_public_key(&secret).unwrap();
        let other = plain
            .p256_public_key(&P256Secret::from_bytes([43; 32]))
            .unwrap();
        let msg = b"made here, checked here";
        let sig = sim.p256_sign(&secret, msg).unwrap();
        assert!(SIM_CRYPTO.made_here(Scheme::P256, &public.0, &sig, msg));
        assert!(sim.p256_verify(&public, msg, &sig));
        assert!(plain.p256_verify(&public, msg, &sig));
        let mut bad = sig;
        bad[40] ^= 1;
        assert!(!sim.p256_verify(&public, msg, &bad));
        assert!(!sim.p256_verify(&other, msg, &sig));
        assert!(!sim.p256_verify(&public, b"made elsewhere", &sig));
    }

    /// Public keys and ECDH of many random secrets and points are the plain provider's bytes,
    /// and bad secrets and points get its errors, the secret's first: zero and scalars from the
    /// group order up; tags other than `02`/`03` (RustCrypto takes `05`, SEC1's compact form,
    /// which aws-lc refuses); x from p up; x with no y on the curve.
    #[test]
    fn p256_public_keys_and_ecdh_are_the_plain_providers() {
        let plain = crypto::default_provider();
        let sim = provider();
        let mut random_secret = random_secrets(0x9256, 1);
        // Never signed with, so never kept: every answer is computed afresh.
        for _ in 0..200 {
            let (secret, peer) = (random_secret(), random_secret());
            let public = plain.p256_public_key(&secret);
            assert_eq!(sim.p256_public_key(&secret), public);
            let peer = plain.p256_public_key(&peer).unwrap();
            assert_eq!(
                sim.p256_ecdh(&secret, &peer),
                plain.p256_ecdh(&secret, &peer)
            );
        }

        let hex = |s: &str| -> [u8; 32] {
            std::array::from_fn(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        };
        let order = hex("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551");
        let field = hex("ffffffff00000001000000000000000000000000ffffffffffffffffffffffff");
        // One more or less in the last byte, which for these two numbers does not wrap.
        let add = |mut n: [u8; 32], by: i8| {
            n[31] = n[31].wrapping_add_signed(by);
            n
        };
        let good_secret = random_secret();
        let good_peer = plain.p256_public_key(&random_secret()).unwrap();

        let mut bad_secrets = 0;
        for bytes in [
            [0; 32],
            order,
            add(order, 1),
            [0xff; 32],
            add(order, -1),
            [1; 32],
        ] {
            let secret = P256Secret::from_bytes(bytes);
            let public = plain.p256_public_key(&secret);
            bad_secrets += usize::from(public.is_err());
            assert_eq!(sim.p256_public_key(&secret), public);
            assert_eq!(
                sim.p256_ecdh(&secret, &good_peer),
                plain.p256_ecdh(&secret, &good_peer)
            );
        }
        assert_eq!(bad_secrets, 4);

        let mut points: Vec<[u8; 33]> = Vec::new();
        for tag in [0, 1, 2, 3, 4, 5, 6, 7, 0xff] {
            let mut point = good_peer.0;
            point[0] = tag;
            points.push(point);
        }
        let mut past_field = field;
        past_field[19] = 1;
        for x in [field, past_field, [0xff; 32], add(field, -1), [0; 32]] {
            for tag in [2, 3] {
                let mut point = [tag; 33];
                point[1..].copy_from_slice(&x);
                points.push(point);
            }
        }
        // About half of all x have no y: the first few of them.
        for n in 0..16u8 {
            let mut point = [2; 33];
            point[32] = n;
            points.push(point);
        }
        let mut not_points = 0;
        for point in points.into_iter().map(P256Public) {
            let agreed = plain.p256_ecdh(&good_secret, &point);
            not_points += usize::from(agreed == Err(CryptoError::InvalidPublicKey));
            assert_eq!(sim.p256_ecdh(&good_secret, &point), agreed);
            // A bad secret is reported before a bad point, as the plain provider does.
            let zero = P256Secret::from_bytes([0; 32]);
            assert_eq!(sim.p256_ecdh(&zero, &point), plain.p256_ecdh(&zero, &point));
        }
        assert!(not_points >= 20, "only {not_points} points refused");
    }

    /// A seal's two agreements, `e×B` then `b×E` (and the other way round), give the plain
    /// provider's bytes, the second from memory; secrets whose half is not the remembered point,
    /// bad secrets and points that are not points are computed (or refused) as the plain
    /// provider does.
    #[test]
    fn remembered_agreements_are_the_plain_providers() {
        let plain = crypto::default_provider();
        let sim = provider();
        let mut random_secret = random_secrets(0xec0d, 2);
        let remembered = || counts().p256_ecdh_remembered;
        for round in 0..100 {
            let (e, b, c) = (random_secret(), random_secret(), random_secret());
            let (ep, bp) = (sim.p256_public_key(&e), plain.p256_public_key(&b));
            assert_eq!(ep, plain.p256_public_key(&e));
            let (Ok(ep), Ok(bp)) = (ep, bp) else {
                continue;
            };
            // Even rounds seal (sender first), odd ones start from the recipient's side.
            let (first, second) = if round % 2 == 0 {
                ((&e, &bp), (&b, &ep))
            } else {
                ((&b, &ep), (&e, &bp))
            };
            sim.p256_public_key(first.0).unwrap();
            let agreed = sim.p256_ecdh(first.0, first.1);
            assert_eq!(agreed, plain.p256_ecdh(first.0, first.1));
            // Another secret agreeing with the same point is not the remembered one's peer.
            assert_eq!(sim.p256_ecdh(&c, second.1), plain.p256_ecdh(&c, second.1));
            for _ in 0..2 {
                let before = remembered();
                sim.p256_public_key(second.0).unwrap();
                assert_eq!(sim.p256_ecdh(second.0, second.1), agreed);
                assert!(remembered() > before, "round {round}: answered from memory");
            }
            // Without asking for the half first: known or computed, the same bytes.
            assert_eq!(sim.p256_ecdh(second.0, second.1), agreed);
            let zero = P256Secret::from_bytes([0; 32]);
            assert_eq!(
                sim.p256_ecdh(&zero, second.1),
                plain.p256_ecdh(&zero, second.1)
            );
            let mut not_a_point = second.1.0;
            not_a_point[0] = 4;
            let not_a_point = P256Public(not_a_point);
            assert_eq!(
                sim.p256_ecdh(second.0, &not_a_point),
                plain.p256_ecdh(second.0, &not_a_point)
            );
        }
    }

    /// Once this provider has computed a box's half (its owner asked for it, or opened a seal),
    /// seals to that box are agreed as `(e·b)×G`: the plain provider's bytes over many boxes and
    /// one-time keys, and only for the box's exact point: a point whose secret is unknown here,
    /// the box's point negated (same x, other tag), and bytes that are no point go the ordinary
    /// way, with the plain provider's answer.
    #[test]
    fn agreements_with_kept_boxes_are_the_plain_providers() {
        let plain = crypto::default_provider();
        let sim = provider();
        let mut random_secret = random_secrets(0xb0c5, 3);
        let mut valid = || loop {
            let secret = random_secret();
            if let Ok(public) = plain.p256_public_key(&secret) {
                return (secret, public);
            }
        };
        let fixed = || counts().p256_ecdh_fixed_base;
        for round in 0..40 {
            let (b, bp) = valid();
            // Before this provider computes `b`'s half, `b` is unknown here: the ordinary way.
            assert!(SIM_CRYPTO.publics.secret_of(&bp).is_none());
            let (e, ep) = valid();
            assert_eq!(sim.p256_public_key(&e), Ok(ep));
            assert_eq!(sim.p256_ecdh(&e, &bp), plain.p256_ecdh(&e, &bp));
            if round % 2 == 0 {
                // The owner opens it (recalled), which keeps the box with its secret.
                assert_eq!(sim.p256_ecdh(&b, &ep), plain.p256_ecdh(&b, &ep));
            } else {
                assert_eq!(sim.p256_public_key(&b), Ok(bp));
            }
            assert!(SIM_CRYPTO.publics.secret_of(&bp).is_some(), "round {round}");
            for _ in 0..5 {
                let (e, ep) = valid();
                let before = fixed();
                assert_eq!(sim.p256_public_key(&e), Ok(ep));
                assert_eq!(sim.p256_ecdh(&e, &bp), plain.p256_ecdh(&e, &bp));
                assert!(fixed() > before, "round {round}: fixed-base");
                // The recipient's side is still recalled, the same bytes.
                assert_eq!(sim.p256_ecdh(&b, &ep), plain.p256_ecdh(&b, &ep));
            }
            let (e, _) = valid();
            let (_, unknown) = valid();
            let mut negated = bp;
            negated.0[0] ^= 1;
            // About half of all x have a y: the next x after the box's that has none.
            let mut off_curve = bp;
            off_curve.0[32] ^= 1;
            while plain.p256_is_point(&off_curve) {
                off_curve.0[32] = off_curve.0[32].wrapping_add(1);
            }
            assert!(plain.p256_ecdh(&e, &off_curve).is_err());
            let mut uncompressed_tag = bp;
            uncompressed_tag.0[0] = 4;
            for peer in [unknown, negated, off_curve, uncompressed_tag] {
                assert!(SIM_CRYPTO.publics.secret_of(&peer).is_none());
                assert_eq!(sim.p256_ecdh(&e, &peer), plain.p256_ecdh(&e, &peer));
            }
            // A bad secret is still refused first, as the plain provider does.
            let zero = P256Secret::from_bytes([0; 32]);
            assert_eq!(sim.p256_ecdh(&zero, &bp), plain.p256_ecdh(&zero, &bp));
        }
    }

    /// No secret reaches the provider's `Debug`: kept keys, boxes and agreements show counts.
    #[test]
    fn debug_shows_no_secret() {
        let sim = provider();
        let secret = P256Secret::from_bytes([0x5e; 32]);
        let public = sim.p256_public_key(&secret).unwrap();
        sim.p256_sign(&secret, b"m").unwrap();
        let scalar = p256_scalar(&secret).unwrap();
        SIM_CRYPTO.publics.keep(secret.expose(), &scalar, &public);
        let shown = format!("{SIM_CRYPTO:?}");
        assert!(!shown.contains("94, 94, 94"), "{shown}");
        assert!(!shown.to_lowercase().contains("5e5e5e"), "{shown}");
    }
}
