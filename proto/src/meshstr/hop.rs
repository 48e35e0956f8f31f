//! Delivery hops (meshstr §5): every node that forwards an event appends a hop `{node, at, sig}`.
//!
//! ```text
//! msg = SHA256("meshstr/hop/1" || "|" || event_id || "|" || prev_hop || "|" || at)
//! sig = BIP-340(node_key, msg)
//! ```
//!
//! `event_id` is 64 lower-case hex, `prev_hop` the previous hop's `node` string exactly as
//! written (empty for the first hop), `at` the hop's own Unix seconds in decimal. A path is at
//! most three hops, and a receiver charges every node in it that it holds a grant with. `node` is
//! the forwarder's `did:nostr` (docs/decisions.md), which is how its key is found.

use alloc::string::String;
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::keys::did_nostr_key;
use super::lower_hex;
use crate::codec::hex;
use crate::crypto::{CryptoError, CryptoProvider, Secp256k1Secret};

/// The domain tag of a hop message.
pub const HOP_TAG: &str = "meshstr/hop/1";

/// A path never exceeds three hops (§5).
pub const MAX_HOPS: usize = 3;

/// One hop of a delivery envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    /// The forwarder, as `did:nostr:<64 hex>`.
    pub node: String,
    /// The forwarder's own Unix seconds.
    pub at: u64,
    /// BIP-340 by the forwarder's node key over [`message`].
    pub sig: [u8; 64],
}

/// Why a path was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HopError {
    /// More than [`MAX_HOPS`] hops: a hop-limit violation.
    TooManyHops,
    /// Not a hop object: a member missing, unknown, or of the wrong type.
    Shape,
    /// A `node` that is not a `did:nostr` with a 64-hex key.
    BadNode,
    /// A hop whose signature does not verify (the index of the first).
    BadSignature(usize),
}

/// The 32-byte message a hop signs.
pub fn message(
    provider: &dyn CryptoProvider,
    event_id: &[u8; 32],
    prev_hop: &str,
    at: u64,
) -> [u8; 32] {
    let id = hex::encode(event_id);
    let at = alloc::format!("{at}");
    provider.sha256(&[
        HOP_TAG.as_bytes(),
        b"|",
        id.as_bytes(),
        b"|",
        prev_hop.as_bytes(),
        b"|",
        at.as_bytes(),
    ])
}

/// Appends this node's hop to `path` for the event `event_id`; refuses to make a fourth.
pub fn append(
    provider: &dyn CryptoProvider,
    path: &mut Vec<Hop>,
    secret: &Secp256k1Secret,
    node: &str,
    event_id: &[u8; 32],
    at: u64,
    aux: &[u8; 32],
) -> Result<(), AppendError> {
    if path.len() >= MAX_HOPS {
        return Err(AppendError::PathFull);
    }
    let prev = path.last().map_or("", |h| h.node.as_str());
    let msg = message(provider, event_id, prev, at);
    let sig = provider
        .schnorr_sign(secret, &msg, aux)
        .map_err(AppendError::Crypto)?;
    path.push(Hop {
        node: node.into(),
        at,
        sig,
    });
    Ok(())
}

/// Why a hop could not be appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendError {
    /// The path already has [`MAX_HOPS`] hops.
    PathFull,
    /// The secret is not a valid key.
    Crypto(CryptoError),
}

/// Checks a whole path for `event_id`: at most three hops, each `node` a `did:nostr`, each
/// signature by that node's key over its message. Returns each hop's key, in path order.
pub fn verify_path(
    provider: &dyn CryptoProvider,
    event_id: &[u8; 32],
    path: &[Hop],
) -> Result<Vec<[u8; 32]>, HopError> {
    if path.len() > MAX_HOPS {
        return Err(HopError::TooManyHops);
    }
    let mut keys = Vec::with_capacity(path.len());
    let mut prev = "";
    for (i, h) in path.iter().enumerate() {
        let key = did_nostr_key(&h.node).ok_or(HopError::BadNode)?;
        let msg = message(provider, event_id, prev, h.at);
        if !provider.schnorr_verify(&key, &msg, &h.sig) {
            return Err(HopError::BadSignature(i));
        }
        keys.push(key);
        prev = &h.node;
    }
    Ok(keys)
}

/// The nodes of a verified path the receiver charges: every one it holds a grant with, each once,
/// in path order.
pub fn charged(keys: &[[u8; 32]], holds_grant: impl Fn(&[u8; 32]) -> bool) -> Vec<[u8; 32]> {
    let mut out: Vec<[u8; 32]> = Vec::new();
    for k in keys {
        if holds_grant(k) && !out.contains(k) {
            out.push(*k);
        }
    }
    out
}

impl Hop {
    /// The hop as JSON: `{"node", "at", "sig"}` with `sig` in lower-case hex.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("node".into(), Value::from(self.node.as_str()));
        m.insert("at".into(), Value::from(self.at));
        m.insert("sig".into(), Value::from(hex::encode(&self.sig)));
        Value::Object(m)
    }

    /// Reads one hop: exactly `node`, `at`, `sig`.
    pub fn from_value(v: &Value) -> Result<Self, HopError> {
        let m = v.as_object().ok_or(HopError::Shape)?;
        if m.len() != 3 {
            return Err(HopError::Shape);
        }
        let node = m
            .get("node")
            .and_then(Value::as_str)
            .ok_or(HopError::Shape)?;
        if node.len() > super::receipt::MAX_REF_BYTES {
            return Err(HopError::BadNode);
        }
        Ok(Hop {
            node: node.into(),
            at: m.get("at").and_then(Value::as_u64).ok_or(HopError::Shape)?,
            sig: m
                .get("sig")
                .and_then(Value::as_str)
                .and_then(lower_hex::<64>)
                .ok_or(HopError::Shape)?,
        })
    }
}

/// Reads a path (a JSON array of hops), refusing more than [`MAX_HOPS`] before reading any.
pub fn path_from_value(v: &Value) -> Result<Vec<Hop>, HopError> {
    let a = v.as_array().ok_or(HopError::Shape)?;
    if a.len() > MAX_HOPS {
        return Err(HopError::TooManyHops);
    }
    a.iter().map(Hop::from_value).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{default_provider, generate_secp256k1};
    use crate::meshstr::keys::did_nostr;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    #[test]
    fn the_message_is_the_pipe_joined_text() {
        let p = default_provider();
        let id = [0xab; 32];
        let text = alloc::format!("meshstr/hop/1|{}|did:nostr:x|1787003600", "ab".repeat(32));
        assert_eq!(
            message(p, &id, "did:nostr:x", 1787003600),
            p.sha256(&[text.as_bytes()])
        );
        let first = alloc::format!("meshstr/hop/1|{}||0", "ab".repeat(32));
        assert_eq!(message(p, &id, "", 0), p.sha256(&[first.as_bytes()]));
    }

    fn three(rng: &mut ChaCha20Rng) -> (Vec<Secp256k1Secret>, Vec<String>) {
        let p = default_provider();
        let secrets: Vec<_> = (0..4).map(|_| generate_secp256k1(p, rng)).collect();
        let nodes = secrets
            .iter()
            .map(|s| did_nostr(&p.schnorr_public_key(s).unwrap()))
            .collect();
        (secrets, nodes)
    }

    #[test]
    fn a_path_of_three_verifies_and_a_fourth_is_refused() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let (secrets, nodes) = three(&mut rng);
        let id = [1; 32];
        let mut path = Vec::new();
        for i in 0..3 {
            append(
                p,
                &mut path,
                &secrets[i],
                &nodes[i],
                &id,
                100 + i as u64,
                &[0; 32],
            )
            .unwrap();
        }
        let keys = verify_path(p, &id, &path).unwrap();
        assert_eq!(keys.len(), 3);
        assert_eq!(
            append(p, &mut path, &secrets[3], &nodes[3], &id, 104, &[0; 32]),
            Err(AppendError::PathFull)
        );
        // A fourth hop forged onto the path anyway is refused on reading and on checking.
        let mut long = path.clone();
        long.push(path[0].clone());
        assert_eq!(verify_path(p, &id, &long), Err(HopError::TooManyHops));
        let v = Value::Array(long.iter().map(Hop::to_value).collect());
        assert_eq!(path_from_value(&v), Err(HopError::TooManyHops));
        let v = Value::Array(path.iter().map(Hop::to_value).collect());
        assert_eq!(path_from_value(&v).unwrap(), path);
    }

    #[test]
    fn at_and_order_are_signed() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(6);
        let (secrets, nodes) = three(&mut rng);
        let id = [2; 32];
        let mut path = Vec::new();
        append(p, &mut path, &secrets[0], &nodes[0], &id, 10, &[0; 32]).unwrap();
        append(p, &mut path, &secrets[1], &nodes[1], &id, 11, &[0; 32]).unwrap();
        let mut moved = path.clone();
        moved[1].at = 12;
        assert_eq!(verify_path(p, &id, &moved), Err(HopError::BadSignature(1)));
        // Dropping the first hop breaks the second (its prev_hop was the first's node).
        assert_eq!(
            verify_path(p, &id, &path[1..]),
            Err(HopError::BadSignature(0))
        );
        // Another event id: nothing verifies.
        assert_eq!(
            verify_path(p, &[3; 32], &path),
            Err(HopError::BadSignature(0))
        );
        let mut renamed = path.clone();
        renamed[0].node = "npub1xyz".into();
        assert_eq!(verify_path(p, &id, &renamed), Err(HopError::BadNode));
    }

    #[test]
    fn every_granted_node_in_the_path_is_charged_once() {
        let keys = [[1; 32], [2; 32], [1; 32]];
        assert_eq!(charged(&keys, |k| k[0] == 1), alloc::vec![[1; 32]]);
        assert_eq!(charged(&keys, |_| true), alloc::vec![[1; 32], [2; 32]]);
        assert!(charged(&keys, |_| false).is_empty());
    }
}
