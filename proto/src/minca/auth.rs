//! Peer authentication (Minca 04 Network §6): the common rules, the `minca-peer/v3` labels H and
//! W of §6.1, and the `minca-mesh/v1` transcript of §6.2.
//!
//! Common rules (§6): nonces are 16 random bytes as base64url (22 characters); signatures are
//! ECDSA P-256 / SHA-256, 64-byte P1363, base64url (86 characters), over the UTF-8 bytes of a
//! label; a signature is checked against the key decoded from the signer's DID, and a DID that
//! does not start with `did:key:` or does not decode fails.

use alloc::string::String;

use crate::codec::base64url;
use crate::codec::did_key::DidKey;
use crate::crypto::{CryptoProvider, P256Public, P256Secret};

/// Bytes in a handshake nonce (§6: "16 random bytes, base64url (22 characters)").
pub const NONCE_BYTES: usize = 16;

/// A fresh handshake nonce, base64url.
pub fn nonce(rng: &mut dyn rand_core::CryptoRng) -> String {
    let mut n = [0u8; NONCE_BYTES];
    rng.fill_bytes(&mut n);
    base64url::encode(&n)
}

/// `H` of §6.1, what a client's hello signs: it names the node, so a hello cannot be replayed to
/// another node.
pub fn peer_client_label(
    space_id: &str,
    client_did: &str,
    node_did: &str,
    node_nonce: &str,
) -> String {
    [
        "minca-peer/v3",
        "client",
        space_id,
        client_did,
        node_did,
        node_nonce,
    ]
    .join("|")
}

/// `W` of §6.1, what a node's welcome signs: the client's own nonce proves the welcome comes from
/// the node that answered this hello.
pub fn peer_server_label(space_id: &str, node_did: &str, client_nonce: &str) -> String {
    ["minca-peer/v3", "server", space_id, node_did, client_nonce].join("|")
}

/// `T(prover, verifier, nonce)` of §6.2, the string a mesh proof signs.
///
/// `prover_cert` and `verifier_cert` are the channel-binding fingerprints of §5.1, each as its
/// owner's end: the prover passes (local, remote) as it sees them, the verifier (remote, local).
/// Without a binding both are empty strings.
pub fn mesh_transcript(
    space_id: &str,
    prover_did: &str,
    verifier_did: &str,
    nonce: &str,
    prover_cert: &str,
    verifier_cert: &str,
) -> String {
    let parts = [
        "minca-mesh/v1",
        space_id,
        prover_did,
        verifier_did,
        nonce,
        prover_cert,
        verifier_cert,
    ];
    parts.join("|")
}

/// Signs `label` with a session key: base64url of the 64-byte P1363 signature (86 characters).
pub fn sign(crypto: &dyn CryptoProvider, key: &P256Secret, label: &str) -> Option<String> {
    crypto
        .p256_sign(key, label.as_bytes())
        .ok()
        .map(|s| base64url::encode(&s))
}

/// Checks a base64url signature over `label` against the P-256 key `did` names.
///
/// False for a DID that is not a P-256 did:key, a signature that is not 64 bytes of base64url, or
/// a signature that does not verify.
pub fn verify(crypto: &dyn CryptoProvider, did: &str, label: &str, sig: &str) -> bool {
    let Ok(DidKey::P256(point)) = DidKey::parse(did) else {
        return false;
    };
    verify_by(crypto, &P256Public(point), label, sig)
}

/// Checks a base64url signature over `label` against `key`, the key a signer's DID names, for a
/// caller that decoded that DID before (a did:key has one spelling per key).
///
/// False for a signature that is not 64 bytes of base64url, or one that does not verify.
pub fn verify_by(crypto: &dyn CryptoProvider, key: &P256Public, label: &str, sig: &str) -> bool {
    let Ok(sig) = base64url::decode_array::<64>(sig) else {
        return false;
    };
    crypto.p256_verify(key, label.as_bytes(), &sig)
}

#[cfg(all(test, feature = "rustcrypto"))]
mod tests {
    use super::*;
    use crate::crypto::{default_provider, generate_p256};
    use alloc::format;
    use alloc::string::ToString;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    fn did_of(key: &P256Secret) -> String {
        let P256Public(point) = default_provider().p256_public_key(key).unwrap();
        DidKey::P256(point).to_did()
    }

    /// §6: a nonce is 16 random bytes as base64url: 22 characters of the URL-safe alphabet with
    /// no padding, decoding to exactly 16 bytes, each one drawn from the machine's RNG (so two
    /// draws differ, and the same seed draws the same nonce: the randomness is the RNG's, not a
    /// counter or the clock's).
    #[test]
    fn a_nonce_is_16_fresh_random_bytes_in_22_base64url_characters() {
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let mut seen = alloc::collections::BTreeSet::new();
        let mut ones = [0u32; NONCE_BYTES * 8];
        let mut first = None;
        const DRAWS: usize = 2_000;
        for _ in 0..DRAWS {
            let n = nonce(&mut rng);
            first.get_or_insert_with(|| n.clone());
            assert_eq!(n.len(), 22, "{n}");
            assert!(
                n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "base64url alphabet, no padding: {n}"
            );
            let bytes = base64url::decode(&n).unwrap();
            assert_eq!(bytes.len(), NONCE_BYTES);
            for (i, bit) in ones.iter_mut().enumerate() {
                *bit += u32::from(bytes[i / 8] >> (i % 8) & 1);
            }
            assert!(seen.insert(n), "every nonce is fresh");
        }
        // Every one of the 128 bits is random: each is set in roughly half the draws (a byte
        // left zero, or a counter, would sit near 0 or DRAWS).
        for (i, &count) in ones.iter().enumerate() {
            assert!(
                (800..1200).contains(&(count as usize)),
                "bit {i} set {count} times"
            );
        }
        let again = nonce(&mut ChaCha20Rng::seed_from_u64(9));
        assert_eq!(Some(again), first, "drawn from the RNG it is handed");
    }

    /// §6: the signature is checked against the key the DID names, and a DID that does not
    /// start with `did:key:` or does not decode fails, even around the right key.
    #[test]
    fn a_signature_checks_only_against_the_did_key_of_its_signer() {
        let c = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let (signer, other) = (generate_p256(c, &mut rng), generate_p256(c, &mut rng));
        let label = mesh_transcript("space", "p", "v", "n", "", "");
        let sig = sign(c, &signer, &label).unwrap();
        let did = did_of(&signer);
        assert!(verify(c, &did, &label, &sig));

        let bare = did.strip_prefix("did:key:").unwrap();
        for wrong in [
            did_of(&other),
            bare.to_string(),
            format!("did:web:{bare}"),
            format!("DID:KEY:{bare}"),
            format!("{did}#{bare}"),
            format!("{}x", &did[..did.len() - 1]),
            DidKey::Ed25519([7; 32]).to_did(),
        ] {
            assert!(!verify(c, &wrong, &label, &sig), "{wrong}");
        }
        assert!(!verify(c, &did, &format!("{label} "), &sig));
    }
}
