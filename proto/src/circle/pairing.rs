//! The circle: who the user's members are (NAP-MESH §1 "The circle is not the transport", §4's
//! first two rules, §5 "Trust, not proximity").
//!
//! An edge is a **mutual pairing**: one signed record from each side, each a NIP-01 event of kind
//! [`PAIRING_KIND`] by its author naming the other in a `p` tag. The edge exists only while both
//! records are held; either side ends it by withdrawing its own. Records are kept whether or not
//! any link to the peer exists ("kept while no link exists"); a link the transport reaches is
//! never a member by that alone.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec;

use crate::codec::hex;
use crate::crypto::{CryptoError, CryptoProvider, Secp256k1Secret};
use crate::nostr::event::{Event, UnsignedEvent};

/// The kind of a pairing record (weft's choice; the spec leaves the format to the shell): an
/// addressable kind, so a newer record from the same author about the same peer replaces the
/// older (`d` = the peer's key).
pub const PAIRING_KIND: u16 = 30_616;

/// Most peers the circle tracks (paired or half-paired). The spec sets no number; a circle is
/// people, and 256 is far above any household or friend group while bounding every per-member
/// table.
pub const MAX_PAIRINGS: usize = 256;

/// Why a pairing record was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PairingError {
    /// Not of [`PAIRING_KIND`], or without a `p` tag naming a 32-byte key in lower-case hex.
    NotAPairing,
    /// The id or signature does not verify.
    BadSignature,
    /// Neither by this user about someone, nor by someone about this user.
    NotOurs,
    /// [`MAX_PAIRINGS`] peers already tracked.
    Full,
}

/// Signs this user's pairing record naming `peer`.
pub fn pairing_record(
    provider: &dyn CryptoProvider,
    secret: &Secp256k1Secret,
    rng: &mut dyn rand_core::CryptoRng,
    peer: &[u8; 32],
    created_at: u64,
) -> Result<Event, CryptoError> {
    let p = hex::encode(peer);
    UnsignedEvent {
        created_at,
        kind: PAIRING_KIND,
        tags: vec![
            vec![String::from("d"), p.clone()],
            vec![String::from("p"), p],
        ],
        content: String::new(),
    }
    .sign(provider, secret, rng)
}

/// The peer a pairing record names (its first `p` tag), after checking kind and shape.
pub fn named_peer(record: &Event) -> Option<[u8; 32]> {
    if record.kind != PAIRING_KIND {
        return None;
    }
    let p = record.tag_value("p")?;
    if p.len() != 64 || !p.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    hex::decode_array::<32>(p).ok()
}

#[derive(Debug, Clone, Default)]
struct Pair {
    ours: Option<Event>,
    theirs: Option<Event>,
}

/// One user's circle: pairing records held, per peer.
#[derive(Debug, Clone)]
pub struct Circle {
    me: [u8; 32],
    pairs: BTreeMap<[u8; 32], Pair>,
}

impl Circle {
    /// The empty circle of the user whose key is `me`.
    pub fn new(me: [u8; 32]) -> Self {
        Self {
            me,
            pairs: BTreeMap::new(),
        }
    }

    /// Takes a pairing record (this user's about a peer, or a peer's about this user), checked in
    /// full. A newer record (by `created_at`) replaces an older one from the same side.
    pub fn add(
        &mut self,
        provider: &dyn CryptoProvider,
        record: &Event,
    ) -> Result<(), PairingError> {
        let named = named_peer(record).ok_or(PairingError::NotAPairing)?;
        record
            .verify(provider)
            .map_err(|_| PairingError::BadSignature)?;
        let (peer, ours) = if record.pubkey == self.me && named != self.me {
            (named, true)
        } else if named == self.me && record.pubkey != self.me {
            (record.pubkey, false)
        } else {
            return Err(PairingError::NotOurs);
        };
        if !self.pairs.contains_key(&peer) && self.pairs.len() >= MAX_PAIRINGS {
            return Err(PairingError::Full);
        }
        let pair = self.pairs.entry(peer).or_default();
        let slot = if ours {
            &mut pair.ours
        } else {
            &mut pair.theirs
        };
        if slot
            .as_ref()
            .is_none_or(|old| old.created_at <= record.created_at)
        {
            *slot = Some(record.clone());
        }
        Ok(())
    }

    /// Withdraws this user's record about `peer` (and forgets the peer's): the edge is gone.
    /// Whether anything was held.
    pub fn remove(&mut self, peer: &[u8; 32]) -> bool {
        self.pairs.remove(peer).is_some()
    }

    /// Whether `peer` is a member: both records held.
    pub fn is_member(&self, peer: &[u8; 32]) -> bool {
        self.pairs
            .get(peer)
            .is_some_and(|p| p.ours.is_some() && p.theirs.is_some())
    }

    /// The members, in key order.
    pub fn members(&self) -> impl Iterator<Item = &[u8; 32]> {
        self.pairs
            .iter()
            .filter(|(_, p)| p.ours.is_some() && p.theirs.is_some())
            .map(|(k, _)| k)
    }

    /// Whether any record about `peer` is held (paired or half-paired).
    pub fn tracks(&self, peer: &[u8; 32]) -> bool {
        self.pairs.contains_key(peer)
    }

    /// Peers tracked (paired or half-paired).
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether no peer is tracked.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

#[cfg(all(test, feature = "rustcrypto"))]
mod tests {
    use super::*;
    use crate::crypto::{default_provider, generate_secp256k1};
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    #[test]
    fn an_edge_needs_both_signed_records() {
        let p = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let (a, b, c) = (
            generate_secp256k1(p, &mut rng),
            generate_secp256k1(p, &mut rng),
            generate_secp256k1(p, &mut rng),
        );
        let key = |s: &Secp256k1Secret| p.schnorr_public_key(s).unwrap();
        let (ka, kb, kc) = (key(&a), key(&b), key(&c));
        let mut circle = Circle::new(ka);
        let ab = pairing_record(p, &a, &mut rng, &kb, 10).unwrap();
        let ba = pairing_record(p, &b, &mut rng, &ka, 11).unwrap();
        circle.add(p, &ab).unwrap();
        assert!(!circle.is_member(&kb), "our record alone is no edge");
        circle.add(p, &ba).unwrap();
        assert!(circle.is_member(&kb));
        // Records about strangers, or between others, are not ours to hold.
        let bc = pairing_record(p, &b, &mut rng, &kc, 12).unwrap();
        assert_eq!(circle.add(p, &bc), Err(PairingError::NotOurs));
        let mut forged = pairing_record(p, &c, &mut rng, &ka, 13).unwrap();
        forged.sig[0] ^= 1;
        assert_eq!(circle.add(p, &forged), Err(PairingError::BadSignature));
        let mut other_kind = ba.clone();
        other_kind.kind = 1;
        assert_eq!(circle.add(p, &other_kind), Err(PairingError::NotAPairing));
        // Their record alone is no edge either.
        let ca = pairing_record(p, &c, &mut rng, &ka, 14).unwrap();
        circle.add(p, &ca).unwrap();
        assert!(!circle.is_member(&kc));
        assert_eq!(circle.members().collect::<alloc::vec::Vec<_>>(), [&kb]);
        assert!(circle.remove(&kb));
        assert!(!circle.is_member(&kb));
    }
}
