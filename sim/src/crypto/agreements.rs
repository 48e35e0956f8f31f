//! ECDH agreements remembered by the Diffie-Hellman identity, and the public halves that let
//! one be recalled.
//!
//! A Minca seal (§2) draws a one-time key `e`, asks for its public half `E = e×G`, then agrees
//! `e×B` with the recipient's box `B = b×G`; the recipient later agrees `b×E`. Both are
//! `e×b×G`, so its x-coordinate, the agreement, is the same bytes: the recipient's variable-base
//! multiplication repeats the sender's. Any agreement `k×P` computed for real, with `K = k×G`
//! known, is remembered under `K` as `(P, x(k×P))`; a later agreement `s×K` is answered from
//! it exactly when `s×G = P` (then `s×K = s×k×G = k×P`). `K` came out of this provider's own
//! multiplication, so it is a point of the curve with a `02`/`03` tag, which every provider
//! takes. Nothing else is ever answered from memory, so a recalled value is the bytes the
//! plain provider gives, whoever asks.
//!
//! Knowing `s×G` cheaply is what makes a recall pay: [`Publics`] keeps the public half of the
//! last secret each thread asked for (a seal asks for `E` just before agreeing with `e`, and
//! an open asks for `B` just before agreeing with `b`) and of every secret a recall was tried
//! for (the long-term boxes seals are made to).
//!
//! Knowing the secret behind a point makes the sender's side cheaper: when `B = b×G` was
//! computed here from `b`, a seal's `e×B` is `e×b×G = (e·b mod n)×G`, one fixed-base
//! multiplication (several times cheaper than a variable-base one, and no decompression of
//! `B`). [`Publics`] keeps every public half it computes with its secret (up to
//! [`MAX_KNOWN_SECRETS`]: a box's half is computed when its node starts, long before the first
//! seal to it) and every box a recall kept. [`Publics::secret_of`] answers only for the exact
//! bytes this provider computed as `b×G` (a `02`/`03` point), so any other encoding, a point
//! whose secret is unknown, or bytes that are not a point go the ordinary way, and the
//! x-coordinate is the plain provider's bytes whichever way it went.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use p256::NonZeroScalar;
use weft_proto::crypto::P256Public;

/// The most agreements remembered, about 100 bytes an entry. A seal is opened soon after it is
/// made, so when full the memory starts again empty: only the seals in flight are lost, and
/// their agreements are then computed for real.
pub const MAX_REMEMBERED_AGREEMENTS: usize = 1 << 17;

/// The most secrets whose public halves are kept for recalls (one box per Minca node, so a
/// 10 000-node meetup keeps every one); past this many a public half is computed when needed.
pub const MAX_KEPT_PUBLICS: usize = 65_536;

/// The most public halves kept with their secrets for fixed-base agreements, about 100 bytes an
/// entry: every half computed here (most are seals' one-time keys, never agreed with, but a
/// 10 000-node meetup computes fewer than this many, boxes included) and every box a recall
/// kept. When full it starts again empty: a box is kept again at its owner's next open.
pub const MAX_KNOWN_SECRETS: usize = 1 << 17;

/// `K` → `(P, x(k×P))`, compressed points and the agreement. Only lookups are made, so a hash
/// map's order never shows.
type ByPublic = HashMap<[u8; 33], ([u8; 33], [u8; 32])>;

/// Agreements by the public half of the secret that made them; see the [module docs](self).
pub(super) struct Agreements {
    by_public: Mutex<Option<ByPublic>>,
}

impl std::fmt::Debug for Agreements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The agreements are shared secrets: only how many there are is shown.
        let map = self.by_public.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("Agreements")
            .field("remembered", &map.as_ref().map_or(0, HashMap::len))
            .finish()
    }
}

impl Agreements {
    /// Nothing remembered.
    pub(super) const fn new() -> Self {
        Self {
            by_public: Mutex::new(None),
        }
    }

    /// Remembers that the secret whose public half is `public` agreed `shared` with `peer`.
    pub(super) fn remember(&self, public: &P256Public, peer: &P256Public, shared: [u8; 32]) {
        // A poisoned lock only means another thread panicked mid-insert of an entry that is
        // right on its own: the map is still right.
        let mut map = self.by_public.lock().unwrap_or_else(|e| e.into_inner());
        let map = map.get_or_insert_with(HashMap::new);
        if map.len() >= MAX_REMEMBERED_AGREEMENTS {
            map.clear();
        }
        map.insert(public.0, (peer.0, shared));
    }

    /// What the secret whose public half is `peer` agreed, and with which point: the agreement
    /// of any secret whose public half is that point with `peer`.
    pub(super) fn recall(&self, peer: &P256Public) -> Option<(P256Public, [u8; 32])> {
        let map = self.by_public.lock().unwrap_or_else(|e| e.into_inner());
        let (point, shared) = map.as_ref()?.get(&peer.0)?;
        Some((P256Public(*point), *shared))
    }
}

thread_local! {
    /// The last secret this thread's provider computed a public half for, with it.
    static LAST: Cell<Option<([u8; 32], [u8; 33])>> = const { Cell::new(None) };
}

/// Public halves known without a multiplication: the last one each thread computed and those of
/// the secrets recalls were tried for; and the other way round, the secrets behind the halves
/// computed lately and behind those kept.
pub(super) struct Publics {
    kept: Mutex<Kept>,
}

/// Secrets and their public halves, as computed here.
struct Kept {
    /// The kept boxes: secret (its bytes) → public half.
    halves: BTreeMap<[u8; 32], [u8; 33]>,
    /// Public half (exactly as computed here) → secret: the kept boxes, and the halves computed
    /// lately. Empty (`None`) until first used, so it can start in a static.
    secrets: Option<HashMap<[u8; 33], NonZeroScalar>>,
}

impl Kept {
    /// Notes `secret` as the one behind `public`, starting again empty when full.
    fn know(&mut self, secret: &NonZeroScalar, public: &P256Public) {
        let secrets = self.secrets.get_or_insert_with(HashMap::new);
        if secrets.len() >= MAX_KNOWN_SECRETS {
            secrets.clear();
        }
        secrets.insert(public.0, *secret);
    }
}

impl std::fmt::Debug for Publics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secret material: only how many are kept is shown.
        let kept = self.lock();
        f.debug_struct("Publics")
            .field("kept", &kept.halves.len())
            .finish()
    }
}

impl Publics {
    /// None known.
    pub(super) const fn new() -> Self {
        Self {
            kept: Mutex::new(Kept {
                halves: BTreeMap::new(),
                secrets: None,
            }),
        }
    }

    /// The maps, locked.
    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        // A poisoned lock only means another thread panicked mid-insert of a pair that is
        // right on its own; a pair missing from one of the two maps is only a shortcut not
        // taken.
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `secret`'s public half, if known.
    pub(super) fn get(&self, secret: &[u8; 32]) -> Option<P256Public> {
        if let Some((last, public)) = LAST.get()
            && last == *secret
        {
            return Some(P256Public(public));
        }
        self.lock().halves.get(secret).copied().map(P256Public)
    }

    /// The secret whose public half this provider computed as exactly these bytes, if kept.
    pub(super) fn secret_of(&self, public: &P256Public) -> Option<NonZeroScalar> {
        self.lock().secrets.as_ref()?.get(&public.0).copied()
    }

    /// Notes `public` as the half of `secret` (whose bytes are `bytes`), just computed as
    /// `secret×G`: the thread's last, and known the other way round for a while.
    pub(super) fn computed(&self, bytes: &[u8; 32], secret: &NonZeroScalar, public: &P256Public) {
        LAST.set(Some((*bytes, public.0)));
        self.lock().know(secret, public);
    }

    /// Keeps `public` as the half of `secret` (whose bytes are `bytes`), both ways round, while
    /// fewer than [`MAX_KEPT_PUBLICS`] are kept. `public` must be `secret×G` as this provider
    /// computed it: [`Publics::secret_of`] answers agreements with it.
    pub(super) fn keep(&self, bytes: &[u8; 32], secret: &NonZeroScalar, public: &P256Public) {
        let mut kept = self.lock();
        if kept.halves.len() < MAX_KEPT_PUBLICS {
            kept.halves.insert(*bytes, public.0);
        }
        kept.know(secret, public);
    }
}
