//! meshstr (`meshstr/0-draft`, `shared/specs/004_38a2d0b232bbbb97.txt`): every artefact and every
//! piece of arithmetic, as pure functions.
//!
//! The spec has no section numbers; the `§` numbers follow `docs/conformance/meshstr.md`.
//!
//! - [`keys`]: `did:nostr`, multikeys with multibase `f`, the resolved node profile (§2, §2.1,
//!   §2.3);
//! - [`events`]: the kinds of §9 and their tag rules, the node descriptor built and checked with
//!   its proof of work (§2.2, §3), the heartbeat and its endpoint digest (§3.3);
//! - [`transport`]: the bindings' names and the transport ladder (§4.1);
//! - [`replication`]: fingerprint-set membership, enumeration order, and the kinds that never
//!   cross (§5);
//! - [`handover`]: handover chains checked whole, and the bar on their signers (§3.1, §3.2);
//! - [`hop`]: delivery hops, their signatures and the three-hop bound (§5);
//! - [`limits`]: tiers, the ceiling table and tier weights (§6.6), opening limits (§6.3), receipt
//!   counters and `counter_of` (§6.2);
//! - [`window`]: `overrun`, `divergence`, `class()`, the window's severity and active silence,
//!   the AIMD update with its remedies and the tier clamp (§6.2, §6.3, §6.5, §7);
//! - [`capacity`]: the node's own ceiling, the capacity ladder and the shed floor (§6.4);
//! - [`receipt`]: the receipt body, its chain link and signature, the issuer's head and
//!   `receipt-ack` (§6.2);
//! - [`grant`]: the grant and job receipt envelopes: HKDF-blinded `d`, commitment, NIP-44 body
//!   (§6.1, §8.1);
//! - [`nip44`]: NIP-44 v2, the encryption of grant and job receipt envelopes (§6.1, §8.1);
//! - [`giftwrap`]: NIP-59 gift wrap, kinds 21059 and 1059, the nostr binding of the control plane
//!   (§4.1, §9.2);
//! - [`compute`]: compute offers per runtime, asks that price without describing, job
//!   receipts, and the verification modes with the evidence each admits (§8, §8.1, §8.2);
//! - [`report`]: a report's admissibility as a reader checks it, and when one may be published
//!   (§4, §7.1);
//! - [`strain`]: strain records, local and defensive only: reserves by direction weighted by
//!   tier, the flag tree (§6.5);
//! - [`trust`]: trust aggregation (§6.6, §7.1);
//! - [`schema`]: weft's own `kinds.json`, `messages.json` and `constants.json` and the protocol
//!   digest over them (§10);
//! - [`canonical`] and [`digest`]: the canonical form every digest uses (§6.2) and its SHA-256.
//!
//! Values the text leaves open (its `constants.json` was not handed over) are each one named
//! constant, recorded in `docs/decisions.md`.

pub mod capacity;
pub mod compute;
pub mod events;
pub mod giftwrap;
pub mod grant;
pub mod handover;
pub mod hop;
pub mod keys;
pub mod limits;
pub mod nip44;
pub mod receipt;
pub mod replication;
pub mod report;
pub mod schema;
pub mod strain;
pub mod transport;
pub mod trust;
pub mod window;

use alloc::string::String;
use serde_json::Value;

use crate::crypto::CryptoProvider;

/// The canonical form of §6.2 (`canonical` in `constants.json`): JSON, UTF-8, object keys sorted
/// ascending by code point, no whitespace between tokens. It is [`crate::codec::json::canonical`].
pub fn canonical(value: &Value) -> String {
    crate::codec::json::canonical(value)
}

/// SHA-256 of the canonical form of `value`: how a receipt is chained and cited, how a handover
/// and a report's evidence are named.
pub fn digest(provider: &dyn CryptoProvider, value: &Value) -> [u8; 32] {
    provider.sha256(&[canonical(value).as_bytes()])
}

/// SHA-256 of the canonical form of an object with its `sig` member excluded: the chain link of
/// a receipt and the name of a handover (§3.1, §6.2). A value that is not an object is hashed as
/// it is.
pub fn digest_without_sig(provider: &dyn CryptoProvider, value: &Value) -> [u8; 32] {
    match value {
        Value::Object(m) if m.contains_key("sig") => {
            let mut m = m.clone();
            m.remove("sig");
            digest(provider, &Value::Object(m))
        }
        other => digest(provider, other),
    }
}

/// The schema digest a node declares in its `protocol` tag (§10): SHA-256 over `kinds.json`,
/// `messages.json` and `constants.json`, each in canonical form (sorted keys, no whitespace),
/// concatenated in that order.
pub fn protocol_digest(
    provider: &dyn CryptoProvider,
    kinds: &Value,
    messages: &Value,
    constants: &Value,
) -> [u8; 32] {
    provider.sha256(&[
        canonical(kinds).as_bytes(),
        canonical(messages).as_bytes(),
        canonical(constants).as_bytes(),
    ])
}

/// Decodes exactly `N` bytes from lower-case hex: meshstr's binary fields have one spelling, so a
/// digest or a signature over the text cannot be sidestepped by a second one.
pub(crate) fn lower_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    crate::codec::hex::decode_array::<N>(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::hex;
    use serde_json::json;

    #[test]
    fn canonical_sorts_keys_by_code_point_without_whitespace() {
        let v = json!({"b": 1, "a": {"z": [1, {"y": 2, "x": 3}], "é": 0, "Z": true}});
        assert_eq!(
            canonical(&v),
            r#"{"a":{"Z":true,"z":[1,{"x":3,"y":2}],"é":0},"b":1}"#
        );
    }

    #[test]
    fn the_protocol_digest_concatenates_the_three_canonical_files_in_order() {
        let p = crate::crypto::default_provider();
        let k = json!({"b": 1, "a": [2]});
        let m = json!({"peering/1.0": ["propose"]});
        let c = json!({"x": 0});
        let want = p.sha256(&[br#"{"a":[2],"b":1}{"peering/1.0":["propose"]}{"x":0}"#]);
        assert_eq!(protocol_digest(p, &k, &m, &c), want);
        assert_ne!(protocol_digest(p, &m, &k, &c), want, "order matters");
    }

    #[test]
    fn the_link_excludes_sig_so_signing_does_not_move_it() {
        let p = crate::crypto::default_provider();
        let body = json!({"seq": 0, "at": 1});
        let mut signed = body.clone();
        signed["sig"] = json!("00");
        assert_eq!(digest_without_sig(p, &body), digest_without_sig(p, &signed));
        assert_ne!(digest(p, &body), digest(p, &signed));
        assert_eq!(
            hex::encode(&digest(p, &json!({}))),
            // SHA-256 of the two bytes `{}`.
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
