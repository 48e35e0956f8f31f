//! Introductions (§8): `__peers` lists and `__signal` offers and answers carried over the mesh.
//!
//! Once connected to one peer, its data channel arranges the next connection, so a relay is needed
//! only to meet the first peer in a room. This module holds the rules of the two messages: which
//! entries of a peer list count and who offers (§8, §7.3), a signal's shape, signature and checks,
//! and the memory that acts on each signal once and passes each on at most once.

use alloc::borrow::Cow;
use alloc::string::String;
use core::cmp::Ordering;
use core::time::Duration;

use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::codec::js;
use crate::core::{ExpiringSet, ReplayWindow, Timestamp, replay};
use crate::crypto::{CryptoProvider, P256Secret};
use crate::minca::auth;
use crate::minca::mesh::memory_key::{Acted, ActedKey, ActedRef, Passed, PassedKey};
use crate::minca::room::MAX_ROOM_PEERS;

/// A receiver takes at most the first 64 entries of a peer list (§8).
pub const MAX_PEER_LIST: usize = 64;

/// A DID in a peer list or a signal is at most 256 characters (§8).
pub const MAX_DID_CHARS: usize = 256;

/// `sdp` is a string of at most 32 000 characters (§8), counted as JavaScript counts them.
pub const MAX_SDP_CHARS: usize = 32_000;

/// `at` must lie within 2 minutes of the receiver's clock (§8).
pub const SIGNAL_WINDOW: Duration = Duration::from_secs(120);

/// `hops` is clamped to 3 before it is decremented (§8: `hops = min(hops, 3) − 1`).
pub const MAX_HOPS: u64 = 3;

/// Times remembered per origin per room: a receiver MAY stop hearing an origin that sent more
/// than 256 within the window (§8).
pub const MAX_TIMES_PER_ORIGIN: usize = 256;

/// Origins remembered: a receiver MAY stop hearing a new origin while it holds 1 024 (§8).
pub const MAX_ORIGINS: usize = 1024;

/// Signals remembered as passed on, by (room, origin, at). §8 says only "a bounded number": this
/// holds the join burst of a full room (`MAX_ROOM_PEERS` = 64 peers meeting at once, an offer and
/// an answer a pair: 64 · 63 = 4 032 signals within the two minutes), so no copy of a burst
/// arrives after its entry was forgotten and is passed on again. The table grows only with what
/// a node's rooms send: a room of a handful of peers fills a few dozen entries of it. With 1 024
/// the simulator's introductions-never-loop invariant failed for 64 nodes in one room
/// (docs/reliability.md).
pub const MAX_PASSED_ON: usize = MAX_ROOM_PEERS * MAX_ROOM_PEERS;

/// The label a signal's origin signs (§8).
pub const LABEL_PREFIX: &str = "minca/introduction/v1";

/// Whether `s` may name a peer (§8): a string of at most 256 characters matching
/// `^did:key:z[1-9A-HJ-NP-Za-km-z]+$`.
pub fn is_did(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("did:key:z") else {
        return false;
    };
    s.len() <= MAX_DID_CHARS && !rest.is_empty() && rest.bytes().all(|b| BASE58[usize::from(b)])
}

/// Which bytes are base58btc digits, as a table: every copy of a flooded signal checks two DIDs
/// a byte at a time, and one load a byte is cheaper than the alphabet's five ranges.
const BASE58: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < table.len() {
        table[b] = matches!(b as u8, b'1'..=b'9' | b'A'..=b'H' | b'J'..=b'N' | b'P'..=b'Z' | b'a'..=b'k' | b'm'..=b'z');
        b += 1;
    }
    table
};

/// Whether this node offers to `theirs`: the lexically smaller DID offers, compared as JavaScript
/// compares strings (UTF-16 code units), so both sides agree and exactly one offers (§7.3, §8).
pub fn we_offer(ours: &str, theirs: &str) -> bool {
    js::cmp(ours, theirs) == Ordering::Less
}

/// The peers a `__peers` payload names that count (§8): see [`listed`].
pub fn peer_list<'a>(payload: &'a Value, ours: &str) -> impl Iterator<Item = &'a str> {
    listed(
        payload.as_array().into_iter().flatten().map(Value::as_str),
        ours,
    )
}

/// The peers a `__peers` list's `entries` name that count (§8), `None` standing for an entry
/// that is not a string: the first 64 entries, skipping anything that is not a DID, and this
/// node itself (it cannot connect to itself).
pub fn listed<'a>(
    entries: impl IntoIterator<Item = Option<&'a str>>,
    ours: &str,
) -> impl Iterator<Item = &'a str> {
    entries
        .into_iter()
        .take(MAX_PEER_LIST)
        .flatten()
        .filter(move |did| is_did(did) && *did != ours)
}

/// The `__peers` payload naming `peers`.
pub fn peer_list_payload<'a>(peers: impl IntoIterator<Item = &'a str>) -> Value {
    Value::Array(peers.into_iter().map(|p| Value::String(p.into())).collect())
}

/// Whether a signal carries an offer or an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SignalKind {
    /// A session description offering a connection.
    Offer,
    /// The answer to an offer.
    Answer,
}

impl SignalKind {
    /// The wire spelling, `offer` or `answer`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Offer => "offer",
            Self::Answer => "answer",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "offer" => Some(Self::Offer),
            "answer" => Some(Self::Answer),
            _ => None,
        }
    }
}

/// A `__signal` payload (§8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signal {
    /// The DID wanting to connect, who signed it.
    pub origin: String,
    /// The DID it wants.
    pub target: String,
    /// Offer or answer (`kind`, and `data.type`, which must agree).
    pub kind: SignalKind,
    /// The session description (`data.sdp`).
    pub sdp: String,
    /// When it was sent, Unix ms; each signal an origin sends has a greater `at` than the last.
    pub at: u64,
    /// base64url ECDSA P-256 signature by `origin` over [`label`].
    pub sig: String,
    /// How many more times it may be passed on; signed by no one.
    pub hops: u64,
}

/// The string a signal's origin signs (§8): `prefix|room|origin|target|kind|at|sdp`. Built
/// piece by piece into one allocation of the right size: every new signal a node receives is
/// verified over it, and `format!` cost ten times the copying.
pub fn label(
    room: &str,
    origin: &str,
    target: &str,
    kind: SignalKind,
    at: u64,
    sdp: &str,
) -> String {
    use core::fmt::Write;
    let parts = [LABEL_PREFIX, room, origin, target, kind.as_str()];
    let size = parts.iter().map(|p| p.len() + 1).sum::<usize>() + 21 + sdp.len();
    let mut l = String::with_capacity(size);
    for p in parts {
        l.push_str(p);
        l.push('|');
    }
    // Writing to a `String` cannot fail.
    let _ = write!(l, "{at}|");
    l.push_str(sdp);
    l
}

/// Why a received signal is dropped. Every drop is silent on the wire (§8 names no answer); the
/// reason is for counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dropped {
    /// It came from a peer not admitted in its room (§8: taken "only from a peer admitted in that
    /// room").
    NotAdmitted,
    /// Not the shape §8 gives: origin or target not a DID, kind and `data.type` disagreeing or
    /// unknown, `sdp` not a string of at most 32 000 characters, `at` not an integer.
    Malformed,
    /// `origin` is this node.
    FromSelf,
    /// `at` is more than 2 minutes from this node's clock.
    Stale,
    /// Acted on or passed on before (a copy, or a replay).
    Again,
    /// The signature does not verify against the key `origin` names.
    BadSignature,
    /// Not for this node and no hops left.
    NoHops,
    /// The origin sent more than 256 signals within the window, or 1 024 origins are held.
    Busy,
}

/// A `__signal` payload's fields as read, before §8's checks: `None` where a field is missing or
/// not of its JSON type (a string, or for `at` and `hops` an integer as `integer` reads one;
/// `data_type` and `sdp` are `None` too when `data` is not an object). Both readers, through a
/// `Value` and straight from text, fill this, so the checks live once in [`Signal::from_fields`].
/// The texts a signal keeps (origin, target, SDP, signature) live as long as `'a`; `kind` and
/// `data.type`, only compared, as long as `'b`.
pub(crate) struct Fields<'a, 'b> {
    pub(crate) origin: Option<&'a str>,
    pub(crate) target: Option<&'a str>,
    pub(crate) kind: Option<&'b str>,
    pub(crate) data_type: Option<&'b str>,
    /// Owned when reading it unescaped it: taken as it is, not copied again.
    pub(crate) sdp: Option<Cow<'a, str>>,
    pub(crate) at: Option<u64>,
    pub(crate) sig: Option<Cow<'a, str>>,
    pub(crate) hops: Option<u64>,
}

/// What to do with a received signal: an owned [`Signal`], or inside the crate one still
/// borrowed from its frame (`SignalRef`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict<S = Signal> {
    /// It is for this node: act on it as a signal from `origin` (§7.3), once.
    Act(S),
    /// Pass it on to every peer admitted in the room except the one it came from; `hops` is
    /// already decremented.
    Forward(S),
    /// Drop it.
    Drop(Dropped),
}

impl<S> Verdict<S> {
    /// The same verdict about `f` of the signal.
    pub fn map<T>(self, f: impl FnOnce(S) -> T) -> Verdict<T> {
        match self {
            Verdict::Act(s) => Verdict::Act(f(s)),
            Verdict::Forward(s) => Verdict::Forward(f(s)),
            Verdict::Drop(d) => Verdict::Drop(d),
        }
    }
}

impl Verdict {
    /// The verdict about the signal borrowed.
    pub(crate) fn as_ref(&self) -> Verdict<SignalRef<'_>> {
        match self {
            Verdict::Act(s) => Verdict::Act(s.as_ref()),
            Verdict::Forward(s) => Verdict::Forward(s.as_ref()),
            Verdict::Drop(d) => Verdict::Drop(*d),
        }
    }
}

/// A signal whose texts are borrowed from where it was read (its SDP and signature copied only
/// if they held an escape): what a receiver checks, verifies and passes on without copying it.
/// [`Signal`] is its owned form; the shape checks, the label, the signature and the payload's
/// layout are this type's, and an owned signal goes through them borrowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SignalRef<'a> {
    pub(crate) origin: &'a str,
    pub(crate) target: &'a str,
    pub(crate) kind: SignalKind,
    pub(crate) sdp: Cow<'a, str>,
    pub(crate) at: u64,
    pub(crate) sig: Cow<'a, str>,
    pub(crate) hops: u64,
}

/// What a signal is for, when [`Introductions::check_copy`] finds it new.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum New {
    /// Its target is this node: act on it once its signature checks out.
    ForUs,
    /// For another, with hops left: pass it on once its signature checks out.
    ToPassOn,
}

/// The fields a copy of a signal is recognised by (§8), borrowed from wherever they were read:
/// a [`Signal`] ([`Signal::routing`]) or a frame's text read no further
/// ([`crate::minca::mesh::signal_peek::peek`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Routing<'a> {
    /// `origin`.
    pub origin: &'a str,
    /// `target`.
    pub target: &'a str,
    /// `at`, Unix ms.
    pub at: u64,
    /// `hops`, 0 where the signal gives none.
    pub hops: u64,
}

/// Whether `sdp` is at most [`MAX_SDP_CHARS`] as JavaScript counts. A string never has more
/// UTF-16 code units than UTF-8 bytes, so one within the limit in bytes (every SDP in practice)
/// is not counted character by character; every copy of a flooded signal is checked.
fn within_sdp_limit(sdp: &str) -> bool {
    sdp.len() <= MAX_SDP_CHARS || js::utf16_len(sdp) <= MAX_SDP_CHARS
}

fn integer(value: Option<&Value>) -> Option<u64> {
    match value? {
        Value::Number(n) => n.as_u64().or_else(|| {
            // JavaScript's Number.isInteger accepts 1.0; so does the reference receiver.
            let f = n.as_f64()?;
            let max = crate::minca::relay_wire::MAX_SAFE_INTEGER as f64;
            // `as` saturates, so the round trip is exact only for an integer in range.
            (f >= 0.0 && f <= max && (f as u64) as f64 == f).then_some(f as u64)
        }),
        _ => None,
    }
}

impl Signal {
    /// A signal from `origin` (whose session key is `key`) to `target`, signed. `target` and
    /// `sdp` are taken as they are when owned (the mesh's own signals), not copied.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        crypto: &dyn CryptoProvider,
        key: &P256Secret,
        room: &str,
        origin: &str,
        target: impl Into<String>,
        kind: SignalKind,
        sdp: impl Into<String>,
        at: u64,
    ) -> Option<Self> {
        let (target, sdp) = (target.into(), sdp.into());
        let sig = auth::sign(crypto, key, &label(room, origin, &target, kind, at, &sdp))?;
        Some(Self {
            origin: origin.into(),
            target,
            kind,
            sdp,
            at,
            sig,
            hops: MAX_HOPS,
        })
    }

    /// Reads a `__signal` payload, checking its shape only (not its time or signature).
    pub fn parse(payload: &Value) -> Result<Self, Dropped> {
        let p = payload.as_object().ok_or(Dropped::Malformed)?;
        fn text(v: Option<&Value>) -> Option<&str> {
            v.and_then(Value::as_str)
        }
        let data = p.get("data").and_then(Value::as_object);
        Self::from_fields(Fields {
            origin: text(p.get("origin")),
            target: text(p.get("target")),
            kind: text(p.get("kind")),
            data_type: data.and_then(|d| text(d.get("type"))),
            sdp: data.and_then(|d| text(d.get("sdp"))).map(Cow::Borrowed),
            at: integer(p.get("at")),
            sig: text(p.get("sig")).map(Cow::Borrowed),
            hops: integer(p.get("hops")),
        })
    }

    /// The shape checks of §8, on fields however they were read (see [`Fields`]).
    pub(crate) fn from_fields(f: Fields<'_, '_>) -> Result<Self, Dropped> {
        SignalRef::from_fields(f).map(SignalRef::into_owned)
    }

    /// The signal borrowed.
    pub(crate) fn as_ref(&self) -> SignalRef<'_> {
        SignalRef {
            origin: &self.origin,
            target: &self.target,
            kind: self.kind,
            sdp: Cow::Borrowed(&self.sdp),
            at: self.at,
            sig: Cow::Borrowed(&self.sig),
            hops: self.hops,
        }
    }

    /// The fields a copy of this signal is recognised by.
    pub fn routing(&self) -> Routing<'_> {
        self.as_ref().routing()
    }

    /// The `__signal` payload.
    pub fn to_payload(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Whether `sig` verifies against the key `origin` names, for a signal in `room`.
    pub fn verify(&self, crypto: &dyn CryptoProvider, room: &str) -> bool {
        self.as_ref().verify(crypto, room)
    }
}

impl<'a> SignalRef<'a> {
    /// The shape checks of §8 (see [`Signal::from_fields`]), keeping the texts as given.
    pub(crate) fn from_fields(f: Fields<'a, '_>) -> Result<Self, Dropped> {
        let did = |s: Option<&'a str>| match s {
            Some(s) if is_did(s) => Ok(s),
            _ => Err(Dropped::Malformed),
        };
        let origin = did(f.origin)?;
        let target = did(f.target)?;
        let kind = f
            .kind
            .and_then(SignalKind::parse)
            .ok_or(Dropped::Malformed)?;
        if f.data_type != Some(kind.as_str()) {
            return Err(Dropped::Malformed);
        }
        let sdp = match f.sdp {
            Some(s) if within_sdp_limit(&s) => s,
            _ => return Err(Dropped::Malformed),
        };
        let at = f.at.ok_or(Dropped::Malformed)?;
        let sig = f.sig.ok_or(Dropped::Malformed)?;
        // Unsigned routing data: anything but a non-negative integer leaves no hops.
        let hops = f.hops.unwrap_or(0);
        Ok(Self {
            origin,
            target,
            kind,
            sdp,
            at,
            sig,
            hops,
        })
    }

    /// The signal owned.
    pub(crate) fn into_owned(self) -> Signal {
        Signal {
            origin: self.origin.into(),
            target: self.target.into(),
            kind: self.kind,
            sdp: self.sdp.into_owned(),
            at: self.at,
            sig: self.sig.into_owned(),
            hops: self.hops,
        }
    }

    /// The fields a copy of this signal is recognised by.
    pub(crate) fn routing(&self) -> Routing<'a> {
        Routing {
            origin: self.origin,
            target: self.target,
            at: self.at,
            hops: self.hops,
        }
    }

    /// [`Signal::verify`] of the signal as read.
    fn verify(&self, crypto: &dyn CryptoProvider, room: &str) -> bool {
        let label = label(
            room,
            self.origin,
            self.target,
            self.kind,
            self.at,
            &self.sdp,
        );
        auth::verify(crypto, self.origin, &label, &self.sig)
    }
}

/// The `__signal` payload (§8), written from the signal's fields: a flood writes it once per
/// signal it passes on, so no JSON tree is built for it. [`Signal::to_payload`] goes through here
/// too, so the shape lives in this one place.
impl Serialize for SignalRef<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Members in the order a `serde_json::Map` keeps them (sorted), so the bytes are what
        // the payload built as a `Value` gives.
        #[derive(Serialize)]
        struct Payload<'a> {
            at: u64,
            data: Data<'a>,
            hops: u64,
            kind: &'a str,
            origin: &'a str,
            sig: &'a str,
            target: &'a str,
        }
        #[derive(Serialize)]
        struct Data<'a> {
            sdp: &'a str,
            #[serde(rename = "type")]
            kind: &'a str,
        }
        Payload {
            at: self.at,
            data: Data {
                sdp: &self.sdp,
                kind: self.kind.as_str(),
            },
            hops: self.hops,
            kind: self.kind.as_str(),
            origin: self.origin,
            sig: &self.sig,
            target: self.target,
        }
        .serialize(serializer)
    }
}

/// Written as its borrowed form (`SignalRef`) writes it.
impl Serialize for Signal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.as_ref().serialize(serializer)
    }
}

/// Gives each signal an origin sends a greater `at` than the last (§8), even when the clock
/// stands still or steps back.
#[derive(Clone, Copy, Debug, Default)]
pub struct SignalClock {
    last: u64,
}

impl SignalClock {
    /// The `at` for a signal sent at `now`.
    pub fn next(&mut self, now: Timestamp) -> u64 {
        self.last = now.as_millis().max(self.last.saturating_add(1));
        self.last
    }
}

/// What a node remembers of the signals it acted on and passed on, across its rooms (§8).
///
/// The memory expires lazily: what has aged out is dropped when the memory is next written
/// ([`Introductions::receive_new`]) or when its owner calls [`Introductions::prune`], never on a
/// wakeup of its own. An aged-out entry answers nothing meanwhile (both tables judge by `now`),
/// and each table prunes before it refuses at its bound, so the bounds hold exactly as when it
/// was pruned the moment anything expired; a wakeup per expiry was a node event that did nothing
/// else.
#[derive(Clone, Debug)]
pub struct Introductions {
    // Keys put their most discriminating part first: every copy of a flooded signal is looked
    // up, and a room compared first would compare equal in full every time, then the DIDs'
    // common `did:key:zDn` prefix (an acted-on key leads with an integer of the origin's tail,
    // `memory_key::Acted`). The order is internal: neither table is iterated in key order for
    // anything that leaves the node (evictions go by time and insertion order).
    /// Times acted on, per (origin, room).
    acted: ReplayWindow<Acted>,
    /// Signals passed on, by (at, origin, room).
    passed: ExpiringSet<Passed>,
}

impl Default for Introductions {
    fn default() -> Self {
        Self::new()
    }
}

impl Introductions {
    /// Empty memory, bounded by the constants above.
    pub fn new() -> Self {
        Self {
            acted: ReplayWindow::new(SIGNAL_WINDOW, MAX_TIMES_PER_ORIGIN, MAX_ORIGINS),
            passed: ExpiringSet::new(MAX_PASSED_ON),
        }
    }

    /// Decides what to do with a `__signal` payload that arrived in `room` from a peer that is
    /// (`from_admitted`) or is not admitted there, at this node (`ours`).
    ///
    /// The order is §8's: who sent it, its shape, its time, then whether it was acted on or passed
    /// on before — checked before the signature, so a copy arriving again costs nothing — and only
    /// then the signature. A signal is recorded only once its signature checks out, so a forgery
    /// cannot block the genuine one.
    pub fn receive(
        &mut self,
        now: Timestamp,
        crypto: &dyn CryptoProvider,
        room: &str,
        ours: &str,
        from_admitted: bool,
        payload: &Value,
    ) -> Verdict {
        if !from_admitted {
            return Verdict::Drop(Dropped::NotAdmitted);
        }
        match Signal::parse(payload) {
            Ok(s) => self.receive_signal(now, crypto, room, ours, s),
            Err(d) => Verdict::Drop(d),
        }
    }

    /// [`Introductions::receive`] for a signal from an admitted peer whose payload is already
    /// read: the same checks from
    /// its origin on.
    pub fn receive_signal(
        &mut self,
        now: Timestamp,
        crypto: &dyn CryptoProvider,
        room: &str,
        ours: &str,
        signal: Signal,
    ) -> Verdict {
        match self.check_copy(now, room, ours, &signal.routing()) {
            Ok(new) => self.receive_new(now, crypto, room, new, signal),
            Err(d) => Verdict::Drop(d),
        }
    }

    /// The rest of [`Introductions::receive_signal`] for a signal that
    /// [`Introductions::check_copy`] found `new`, at the same `now`, in the same `room`: its
    /// signature, then acting on it or passing it on, and remembering that. For a caller that
    /// checked for a copy before reading the signal in full.
    pub fn receive_new(
        &mut self,
        now: Timestamp,
        crypto: &dyn CryptoProvider,
        room: &str,
        new: New,
        signal: Signal,
    ) -> Verdict {
        let hops = self
            .receive_new_ref(now, crypto, room, new, signal.as_ref())
            .map(|s| s.hops);
        hops.map(|hops| Signal { hops, ..signal })
    }

    /// [`Introductions::receive_new`] for a signal still borrowed from its frame: the one place
    /// its rules live. The machine passes a signal on or acts on it from the borrow.
    pub(crate) fn receive_new_ref<'a>(
        &mut self,
        now: Timestamp,
        crypto: &dyn CryptoProvider,
        room: &str,
        new: New,
        mut signal: SignalRef<'a>,
    ) -> Verdict<SignalRef<'a>> {
        if !signal.verify(crypto, room) {
            return Verdict::Drop(Dropped::BadSignature);
        }
        let at = Timestamp::from_millis(signal.at);
        self.prune(now);
        match new {
            New::ForUs => {
                let key = Acted::new(signal.origin, room);
                match self.acted.accept(now, key, at) {
                    replay::Verdict::Fresh => Verdict::Act(signal),
                    _ => Verdict::Drop(Dropped::Busy),
                }
            }
            New::ToPassOn => {
                // Remembered until its `at` leaves the window: a copy after that is refused as
                // stale.
                let expires = at
                    .saturating_add(SIGNAL_WINDOW)
                    .saturating_add(Duration::from_millis(1));
                let id = Passed::new(signal.at, signal.origin, room);
                self.passed.insert(now, id, expires);
                signal.hops = signal.hops.min(MAX_HOPS) - 1;
                Verdict::Forward(signal)
            }
        }
    }

    /// §8's checks of a signal in `room` at this node (`ours`) that come before its signature:
    /// from this node itself, its time, then whether it was acted on or passed on before, so a
    /// copy arriving again costs nothing. `Err` is why it is dropped; `Ok` says what the signal
    /// is for, once its signature checks out. Its shape is not checked here: this looks at only
    /// what it is given, so a frame read no further than that (a copy, most often) is answered
    /// by the same rule as a signal read in full.
    pub fn check_copy(
        &self,
        now: Timestamp,
        room: &str,
        ours: &str,
        signal: &Routing<'_>,
    ) -> Result<New, Dropped> {
        if signal.origin == ours {
            return Err(Dropped::FromSelf);
        }
        let at = Timestamp::from_millis(signal.at);
        if at.abs_diff(now) > SIGNAL_WINDOW {
            return Err(Dropped::Stale);
        }
        if signal.target == ours {
            let key: &dyn ActedKey = &ActedRef::new(signal.origin, room);
            return match self.acted.check(now, key, at) {
                replay::Verdict::Fresh => Ok(New::ForUs),
                replay::Verdict::Replay => Err(Dropped::Again),
                replay::Verdict::OutsideWindow => Err(Dropped::Stale),
                _ => Err(Dropped::Busy),
            };
        }
        if signal.hops == 0 {
            return Err(Dropped::NoHops);
        }
        let id: &dyn PassedKey = &(signal.at, signal.origin, room);
        if self.passed.contains(now, id) {
            return Err(Dropped::Again);
        }
        Ok(New::ToPassOn)
    }

    /// Forgets what has aged out of the window. Cheap when nothing has: both tables keep their
    /// soonest expiry at hand, and the acted-on table, whose pruning visits every origin, is
    /// pruned only once a whole origin has aged out (its other origins' old times are dropped
    /// as they send again).
    pub fn prune(&mut self, now: Timestamp) {
        if self.acted.next_expiry().is_some_and(|at| at <= now) {
            self.acted.prune(now);
        }
        self.passed.prune(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::did_key::DidKey;
    use crate::crypto::{default_provider, generate_p256};
    use alloc::vec::Vec;
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;
    use serde_json::json;

    const ROOM: &str = "tr3o3btwwyb36pwbt3bcr3za7o5kn76p";
    const T0: u64 = 1_790_000_000_000;

    struct Peer {
        key: P256Secret,
        did: String,
    }

    fn peers(n: usize) -> Vec<Peer> {
        let c = default_provider();
        let mut rng = ChaCha20Rng::seed_from_u64(8);
        (0..n)
            .map(|_| {
                let key = generate_p256(c, &mut rng);
                let did = DidKey::P256(c.p256_public_key(&key).unwrap().0).to_did();
                Peer { key, did }
            })
            .collect()
    }

    fn signal(from: &Peer, to: &str, at: u64) -> Signal {
        Signal::new(
            default_provider(),
            &from.key,
            ROOM,
            &from.did,
            to,
            SignalKind::Offer,
            "v=0",
            at,
        )
        .unwrap()
    }

    fn now(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn receive(i: &mut Introductions, at: u64, me: &str, payload: &Value) -> Verdict {
        i.receive(now(at), default_provider(), ROOM, me, true, payload)
    }

    #[test]
    fn the_label_is_the_fields_joined_by_bars() {
        for (kind, at, sdp) in [
            (SignalKind::Offer, 0, ""),
            (SignalKind::Answer, u64::MAX, "v=0\r\n|é"),
        ] {
            assert_eq!(
                label(ROOM, "did:key:zA", "did:key:zB", kind, at, sdp),
                alloc::format!(
                    "{LABEL_PREFIX}|{ROOM}|did:key:zA|did:key:zB|{}|{at}|{sdp}",
                    kind.as_str()
                )
            );
        }
    }

    #[test]
    fn a_borrowed_signal_gets_the_verdict_the_owned_one_does() {
        let p = peers(3);
        let mut forged = signal(&p[0], &p[1].did, T0);
        forged.sdp = "v=1".into();
        let mut hopless = signal(&p[0], &p[2].did, T0);
        hopless.hops = 7;
        for (s, me) in [
            (signal(&p[0], &p[1].did, T0), &p[1].did),
            (hopless, &p[1].did),
            (forged.clone(), &p[1].did),
            (forged, &p[2].did),
        ] {
            let (mut owned, mut borrowed) = (Introductions::new(), Introductions::new());
            for _ in 0..2 {
                let new = owned.check_copy(now(T0), ROOM, me, &s.routing());
                assert_eq!(new, borrowed.check_copy(now(T0), ROOM, me, &s.routing()));
                let Ok(new) = new else { continue };
                let c = default_provider();
                let a = owned.receive_new(now(T0), c, ROOM, new, s.clone());
                let b = borrowed.receive_new_ref(now(T0), c, ROOM, new, s.as_ref());
                assert_eq!(a, b.map(SignalRef::into_owned));
            }
        }
    }

    #[test]
    fn the_sdp_limit_counts_utf16_code_units_whatever_the_bytes() {
        let n = MAX_SDP_CHARS;
        for (sdp, ok) in [
            ("x".repeat(n), true),
            ("x".repeat(n + 1), false),
            // Two bytes, one unit each: over the limit in bytes, within it in units.
            ("é".repeat(n), true),
            ("é".repeat(n + 1), false),
            // Four bytes, two units each.
            ("😀".repeat(n / 2), true),
            (alloc::format!("{}x", "😀".repeat(n / 2)), false),
        ] {
            assert_eq!(within_sdp_limit(&sdp), ok, "{} bytes", sdp.len());
            assert_eq!(within_sdp_limit(&sdp), js::utf16_len(&sdp) <= n);
        }
    }

    #[test]
    fn a_did_is_a_did_key_z_base58_string_of_at_most_256_characters() {
        assert!(is_did(
            "did:key:zDnaeV1SzGREx4fjGtUofWfZfnH42TV5EboaJ6deJLxvmo6jd"
        ));
        for bad in [
            "did:key:z",
            "did:key:zO",
            "did:key:z0",
            "did:key:zl",
            "did:key:zI",
            "did:web:x",
            "did:key:DnaE",
            "did:key:z a",
        ] {
            assert!(!is_did(bad), "{bad}");
        }
        let at_limit = alloc::format!("did:key:z{}", "a".repeat(MAX_DID_CHARS - 9));
        assert!(is_did(&at_limit));
        let over = alloc::format!("did:key:z{}", "a".repeat(MAX_DID_CHARS - 8));
        assert!(!is_did(&over));
        // The table is base58btc's alphabet, and nothing else.
        let alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
        for b in 0..=u8::MAX {
            assert_eq!(
                BASE58[usize::from(b)],
                alphabet.as_bytes().contains(&b),
                "{b}"
            );
        }
    }

    #[test]
    fn a_peer_list_counts_its_first_64_entries_and_skips_anything_not_a_did() {
        let mut entries: Vec<Value> = (0..70)
            .map(|i| Value::String(alloc::format!("did:key:z{}", "a".repeat(i + 1))))
            .collect();
        entries[1] = json!(7);
        entries[2] = json!("https://example");
        entries[3] = json!("did:key:zme");
        let list = Value::Array(entries);
        let got: Vec<&str> = peer_list(&list, "did:key:zme").collect();
        assert_eq!(got.len(), 64 - 3);
        assert_eq!(got[0], "did:key:za");
        assert!(got.last().unwrap().len() == "did:key:z".len() + 64);
        assert_eq!(peer_list(&json!({"a": 1}), "x").count(), 0);
    }

    #[test]
    fn the_lexically_smaller_did_offers_comparing_utf16_code_units() {
        assert!(we_offer("did:key:zA", "did:key:zB"));
        assert!(!we_offer("did:key:zB", "did:key:zA"));
        assert!(!we_offer("did:key:zA", "did:key:zA"));
        // U+1F600 is D83D DE00 in UTF-16, below U+FF5E, though above it by code point.
        assert!(we_offer("\u{1F600}", "\u{FF5E}"));
    }

    #[test]
    fn a_signal_round_trips_and_verifies_only_in_its_room() {
        let p = peers(2);
        let s = signal(&p[0], &p[1].did, T0);
        assert_eq!(s.hops, MAX_HOPS);
        let back = Signal::parse(&s.to_payload()).unwrap();
        assert_eq!(back, s);
        assert!(back.verify(default_provider(), ROOM));
        assert!(!back.verify(default_provider(), "another-room"));
    }

    #[test]
    fn a_signal_for_this_node_is_acted_on_once_per_at_in_any_order() {
        let p = peers(3);
        let (me, a) = (&p[0].did, &p[1]);
        let mut i = Introductions::new();
        let late = signal(a, me, T0 + 500).to_payload();
        let early = signal(a, me, T0).to_payload();
        assert!(matches!(
            receive(&mut i, T0 + 600, me, &late),
            Verdict::Act(_)
        ));
        assert!(matches!(
            receive(&mut i, T0 + 700, me, &early),
            Verdict::Act(_)
        ));
        assert_eq!(
            receive(&mut i, T0 + 800, me, &early),
            Verdict::Drop(Dropped::Again)
        );
        assert_eq!(
            receive(&mut i, T0 + 900, me, &late),
            Verdict::Drop(Dropped::Again)
        );
    }

    #[test]
    fn a_signal_is_taken_only_from_a_peer_admitted_in_that_room() {
        let p = peers(2);
        let mut i = Introductions::new();
        let s = signal(&p[1], &p[0].did, T0).to_payload();
        let v = i.receive(now(T0), default_provider(), ROOM, &p[0].did, false, &s);
        assert_eq!(v, Verdict::Drop(Dropped::NotAdmitted));
        assert!(matches!(
            receive(&mut i, T0, &p[0].did, &s),
            Verdict::Act(_)
        ));
    }

    #[test]
    fn a_signal_passed_on_in_someone_elses_name_is_ignored_and_does_not_block_the_genuine_one() {
        let p = peers(3);
        let (me, a, mallory) = (&p[0].did, &p[1], &p[2]);
        let mut i = Introductions::new();
        let mut forged = signal(mallory, me, T0);
        forged.origin = a.did.clone();
        assert_eq!(
            receive(&mut i, T0, me, &forged.to_payload()),
            Verdict::Drop(Dropped::BadSignature)
        );
        let genuine = signal(a, me, T0).to_payload();
        assert!(matches!(receive(&mut i, T0, me, &genuine), Verdict::Act(_)));
    }

    #[test]
    fn a_copy_is_recognised_before_its_signature_is_checked() {
        let p = peers(2);
        let (me, a) = (&p[0].did, &p[1]);
        let mut i = Introductions::new();
        let genuine = signal(a, me, T0);
        assert!(matches!(
            receive(&mut i, T0, me, &genuine.to_payload()),
            Verdict::Act(_)
        ));
        let mut copy = genuine.clone();
        copy.sig = "x".repeat(86);
        assert_eq!(
            receive(&mut i, T0, me, &copy.to_payload()),
            Verdict::Drop(Dropped::Again)
        );
    }

    #[test]
    fn a_signal_of_the_wrong_shape_is_dropped() {
        let p = peers(2);
        let (me, a) = (&p[0].did, &p[1]);
        let mut i = Introductions::new();
        let good = signal(a, me, T0).to_payload();
        let mut cases: Vec<Value> = Vec::new();
        let mut v = good.clone();
        v["data"]["type"] = json!("answer");
        cases.push(v);
        let mut v = good.clone();
        v["kind"] = json!("candidate");
        v["data"]["type"] = json!("candidate");
        cases.push(v);
        let mut v = good.clone();
        v["data"]["sdp"] = json!("x".repeat(MAX_SDP_CHARS + 1));
        cases.push(v);
        let mut v = good.clone();
        v["at"] = json!(1.5);
        cases.push(v);
        let mut v = good.clone();
        v["at"] = json!(-1);
        cases.push(v);
        let mut v = good.clone();
        v["origin"] = json!("alice");
        cases.push(v);
        let mut v = good.clone();
        v["target"] = json!(null);
        cases.push(v);
        let mut v = good.clone();
        v.as_object_mut().unwrap().remove("sig");
        cases.push(v);
        cases.push(json!("not an object"));
        for case in &cases {
            assert_eq!(
                receive(&mut i, T0, me, case),
                Verdict::Drop(Dropped::Malformed),
                "{case}"
            );
        }
    }

    #[test]
    fn an_at_written_as_a_whole_float_is_an_integer() {
        let p = peers(2);
        let (me, a) = (&p[0].did, &p[1]);
        let mut i = Introductions::new();
        let mut v = signal(a, me, T0).to_payload();
        v["at"] = json!(T0 as f64);
        assert!(matches!(receive(&mut i, T0, me, &v), Verdict::Act(_)));
    }

    #[test]
    fn an_at_more_than_2_minutes_from_the_clock_is_stale() {
        let p = peers(2);
        let (me, a) = (&p[0].did, &p[1]);
        let mut i = Introductions::new();
        let edge = 120_000;
        let s = signal(a, me, T0).to_payload();
        assert_eq!(
            receive(&mut i, T0 + edge + 1, me, &s),
            Verdict::Drop(Dropped::Stale)
        );
        assert_eq!(
            receive(&mut i, T0 - edge - 1, me, &s),
            Verdict::Drop(Dropped::Stale)
        );
        assert!(matches!(
            receive(&mut i, T0 + edge, me, &s),
            Verdict::Act(_)
        ));
    }

    #[test]
    fn a_signal_from_this_node_itself_is_dropped() {
        let p = peers(2);
        let mut i = Introductions::new();
        let s = signal(&p[0], &p[1].did, T0).to_payload();
        assert_eq!(
            receive(&mut i, T0, &p[0].did, &s),
            Verdict::Drop(Dropped::FromSelf)
        );
    }

    #[test]
    fn a_signal_for_another_is_forwarded_once_with_hops_clamped_to_3_and_decremented() {
        let p = peers(3);
        let (me, a, b) = (&p[0].did, &p[1], &p[2]);
        let mut i = Introductions::new();
        let mut s = signal(a, &b.did, T0);
        s.hops = 9;
        match receive(&mut i, T0, me, &s.to_payload()) {
            Verdict::Forward(f) => assert_eq!(f.hops, 2),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            receive(&mut i, T0, me, &s.to_payload()),
            Verdict::Drop(Dropped::Again)
        );
        let mut one = signal(a, &b.did, T0 + 1);
        one.hops = 1;
        match receive(&mut i, T0, me, &one.to_payload()) {
            Verdict::Forward(f) => assert_eq!(f.hops, 0),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_signal_for_another_with_no_hops_left_goes_no_further() {
        let p = peers(3);
        let (me, a, b) = (&p[0].did, &p[1], &p[2]);
        let mut i = Introductions::new();
        let mut s = signal(a, &b.did, T0);
        s.hops = 0;
        assert_eq!(
            receive(&mut i, T0, me, &s.to_payload()),
            Verdict::Drop(Dropped::NoHops)
        );
        let mut v = signal(a, &b.did, T0 + 1).to_payload();
        v.as_object_mut().unwrap().remove("hops");
        assert_eq!(receive(&mut i, T0, me, &v), Verdict::Drop(Dropped::NoHops));
    }

    #[test]
    fn a_forged_signal_is_not_forwarded_and_does_not_block_the_genuine_one() {
        let p = peers(4);
        let (me, a, b, mallory) = (&p[0].did, &p[1], &p[2], &p[3]);
        let mut i = Introductions::new();
        let mut forged = signal(mallory, &b.did, T0);
        forged.origin = a.did.clone();
        assert_eq!(
            receive(&mut i, T0, me, &forged.to_payload()),
            Verdict::Drop(Dropped::BadSignature)
        );
        let genuine = signal(a, &b.did, T0).to_payload();
        assert!(matches!(
            receive(&mut i, T0, me, &genuine),
            Verdict::Forward(_)
        ));
    }

    #[test]
    fn an_origin_that_sent_more_than_256_in_the_window_is_not_heard() {
        let p = peers(2);
        let (me, a) = (&p[0].did, &p[1]);
        let mut i = Introductions::new();
        for k in 0..MAX_TIMES_PER_ORIGIN as u64 {
            let s = signal(a, me, T0 + k).to_payload();
            assert!(matches!(receive(&mut i, T0 + k, me, &s), Verdict::Act(_)));
        }
        let s = signal(a, me, T0 + 300).to_payload();
        assert_eq!(
            receive(&mut i, T0 + 300, me, &s),
            Verdict::Drop(Dropped::Busy)
        );
        // Once the first ones age out of the window, it is heard again.
        let later = T0 + 120_001 + 10;
        let s = signal(a, me, later).to_payload();
        assert!(matches!(receive(&mut i, later, me, &s), Verdict::Act(_)));
    }

    #[test]
    fn the_memory_of_passed_on_signals_ages_out_with_the_window() {
        let p = peers(3);
        let (me, a, b) = (&p[0].did, &p[1], &p[2]);
        let mut i = Introductions::new();
        let s = signal(a, &b.did, T0).to_payload();
        assert!(matches!(receive(&mut i, T0, me, &s), Verdict::Forward(_)));
        assert_eq!(i.passed.len(), 1);
        // Still inside the window at its edge: a copy, and pruning keeps it.
        i.prune(now(T0 + 120_000));
        assert_eq!(i.passed.len(), 1);
        assert_eq!(
            receive(&mut i, T0 + 120_000, me, &s),
            Verdict::Drop(Dropped::Again)
        );
        i.prune(now(T0 + 120_001));
        assert!(i.passed.is_empty());
        // A copy after that is refused by its time, never passed on again.
        assert_eq!(
            receive(&mut i, T0 + 120_001, me, &s),
            Verdict::Drop(Dropped::Stale)
        );
    }

    /// Fills the acted-on table with `n` origins named from `name` (not real DIDs: the table
    /// does not care) that each acted once at `at`.
    fn fill_acted(i: &mut Introductions, name: &str, n: usize, at: u64) {
        for k in 0..n {
            let key = Acted::new(&alloc::format!("{name}{k}"), ROOM);
            let v = i.acted.accept(now(at), key, now(at));
            assert_eq!(v, replay::Verdict::Fresh);
        }
    }

    /// Fills the passed-on table with `n` signals from one origin, sent at `at`.
    fn fill_passed(i: &mut Introductions, n: usize, at: u64) {
        for k in 0..n as u64 {
            let id = Passed::new(at + k, "did:key:zFiller", ROOM);
            let expires = now(at + k) + SIGNAL_WINDOW + Duration::from_millis(1);
            i.passed.insert(now(at), id, expires);
        }
    }

    /// Whether the passed-on table holds the filler signal sent at `at`, live at `t`.
    fn passed_holds(i: &Introductions, t: u64, at: u64) -> bool {
        let id: &dyn PassedKey = &(at, "did:key:zFiller", ROOM);
        i.passed.contains(now(t), id)
    }

    #[test]
    fn a_full_rooms_join_burst_is_passed_on_once_each() {
        // A room of 64 meeting at once: every peer sends every other a signal within ten
        // seconds, and a 65th node passes each on. When each arrives again (from another peer of
        // the room, later in the burst), it is still remembered.
        let p = peers(MAX_ROOM_PEERS + 1);
        let (me, room) = (&p[MAX_ROOM_PEERS].did, &p[..MAX_ROOM_PEERS]);
        let mut i = Introductions::new();
        let burst: Vec<Value> = (0..room.len())
            .flat_map(|o| {
                (0..room.len())
                    .filter(move |&t| t != o)
                    .map(move |t| (o, t))
            })
            .enumerate()
            .map(|(k, (o, t))| signal(&room[o], &room[t].did, T0 + k as u64).to_payload())
            .collect();
        assert_eq!(burst.len(), 4_032);
        for (k, s) in burst.iter().enumerate() {
            let v = receive(&mut i, T0 + k as u64, me, s);
            assert!(matches!(v, Verdict::Forward(_)), "signal {k}: {v:?}");
        }
        let end = T0 + 10_000;
        for (k, s) in burst.iter().enumerate() {
            let v = receive(&mut i, end, me, s);
            assert_eq!(v, Verdict::Drop(Dropped::Again), "copy of signal {k}");
        }
        assert_eq!(i.passed.len(), burst.len());
    }

    #[test]
    fn the_memory_forgets_what_aged_out_when_next_written() {
        let p = peers(4);
        let (me, a, b, c) = (&p[0].did, &p[1], &p[2], &p[3]);
        let mut i = Introductions::new();
        for k in 0..10 {
            let s = signal(a, &b.did, T0 + k).to_payload();
            assert!(matches!(
                receive(&mut i, T0 + k, me, &s),
                Verdict::Forward(_)
            ));
        }
        let s = signal(a, me, T0).to_payload();
        assert!(matches!(receive(&mut i, T0, me, &s), Verdict::Act(_)));
        assert_eq!((i.passed.len(), i.acted.len_senders()), (10, 1));
        // Long after, with no pruning in between: what aged out is still held, and answers
        // nothing (a copy is stale by its time).
        let later = T0 + 10 * 120_000;
        assert_eq!(
            receive(&mut i, later, me, &s),
            Verdict::Drop(Dropped::Stale)
        );
        assert_eq!((i.passed.len(), i.acted.len_senders()), (10, 1));
        // The next signal written forgets it all, whichever table it goes to.
        let fresh = signal(c, &b.did, later).to_payload();
        assert!(matches!(
            receive(&mut i, later, me, &fresh),
            Verdict::Forward(_)
        ));
        assert_eq!((i.passed.len(), i.acted.len_senders()), (1, 0));
    }

    #[test]
    fn an_aged_out_entry_is_not_a_replay_even_before_it_is_pruned() {
        let p = peers(2);
        let (me, a) = (&p[0].did, &p[1]);
        let mut i = Introductions::new();
        // Held but aged out at `later`: the tables answer by `now`, not by what they hold.
        fill_passed(&mut i, 1, T0);
        let key = Acted::new(a.did.as_str(), ROOM);
        assert!(i.acted.accept(now(T0), key.clone(), now(T0)).is_fresh());
        let later = T0 + 120_001;
        assert_eq!(
            i.acted.check(now(later), &key, now(T0)),
            replay::Verdict::OutsideWindow
        );
        assert_eq!(i.acted.len_senders(), 1);
        let gone = Routing {
            origin: "did:key:zFiller",
            target: &a.did,
            at: T0,
            hops: 3,
        };
        assert!(passed_holds(&i, T0 + 120_000, T0));
        assert!(!passed_holds(&i, later, T0));
        assert_eq!(
            i.check_copy(now(later), ROOM, me, &gone),
            Err(Dropped::Stale)
        );
        // The origin's old time neither blocks nor counts against a new one.
        let s = signal(a, me, later).to_payload();
        assert!(matches!(receive(&mut i, later, me, &s), Verdict::Act(_)));
        assert_eq!(i.passed.len(), 0);
    }

    #[test]
    fn the_tables_stay_bounded_however_long_the_run() {
        let p = peers(3);
        let (me, a, b) = (&p[0].did, &p[1], &p[2]);
        let mut i = Introductions::new();
        // Full tables, then new signals well after the window, many times over.
        for round in 0..4u64 {
            let t = T0 + round * 200_000;
            fill_acted(&mut i, "o", MAX_ORIGINS, t);
            fill_passed(&mut i, MAX_PASSED_ON, t);
            assert_eq!(i.acted.len_senders(), MAX_ORIGINS);
            assert_eq!(i.passed.len(), MAX_PASSED_ON);
            let s = signal(a, &b.did, t + 150_000).to_payload();
            assert!(matches!(
                receive(&mut i, t + 150_000, me, &s),
                Verdict::Forward(_)
            ));
            assert_eq!((i.acted.len_senders(), i.passed.len()), (0, 1));
        }
    }

    #[test]
    fn the_refusal_at_the_bound_prunes_first_and_refuses_only_live_entries() {
        let p = peers(3);
        let (me, a, b) = (&p[0].did, &p[1], &p[2]);
        // 1 024 live origins: a new one is not heard.
        let mut i = Introductions::new();
        fill_acted(&mut i, "o", MAX_ORIGINS, T0);
        let s = signal(a, me, T0 + 1).to_payload();
        assert_eq!(
            receive(&mut i, T0 + 1, me, &s),
            Verdict::Drop(Dropped::Busy)
        );
        // One of them aged out, none pruned: the new origin takes its place.
        let mut i = Introductions::new();
        fill_acted(&mut i, "old", 1, T0);
        fill_acted(&mut i, "new", MAX_ORIGINS - 1, T0 + 2);
        assert_eq!(i.acted.len_senders(), MAX_ORIGINS);
        let later = T0 + 120_001;
        let s = signal(a, me, later).to_payload();
        assert!(matches!(receive(&mut i, later, me, &s), Verdict::Act(_)));
        assert_eq!(i.acted.len_senders(), MAX_ORIGINS);
        // A full passed-on table with one aged-out entry: pruned, not a live entry evicted.
        let mut i = Introductions::new();
        fill_passed(&mut i, MAX_PASSED_ON, T0);
        let later = T0 + 120_001;
        let s = signal(a, &b.did, later).to_payload();
        assert!(matches!(
            receive(&mut i, later, me, &s),
            Verdict::Forward(_)
        ));
        assert_eq!(i.passed.len(), MAX_PASSED_ON);
        assert!(!passed_holds(&i, later, T0));
        assert!(passed_holds(&i, later, T0 + 1));
    }

    #[test]
    fn each_signal_an_origin_sends_has_a_greater_at_than_the_last() {
        let mut c = SignalClock::default();
        let a = c.next(now(T0));
        let b = c.next(now(T0));
        let d = c.next(now(T0 - 5_000));
        assert_eq!(a, T0);
        assert!(a < b && b < d);
        assert_eq!(c.next(now(T0 + 10_000)), T0 + 10_000);
    }
}
