//! Spec 002 §6: a peer's advertised `peering.scopes`, turned into NIP-01 filters, split when the
//! peer answers "too large", and checked against each event the worker receives.
//!
//! The spec names `peering.scopes`, "kind range", "time range" and a rolling `windowSeconds`
//! without giving the JSON shape. weft reads (docs/decisions.md, "peering scopes"):
//!
//! ```json
//! {"peering": {"scopes": [
//!   {"kinds": [1, 6, [30000, 30023]], "authors": ["<64 hex>"], "since": 1700000000,
//!    "windowSeconds": 2592000}
//! ]}}
//! ```
//!
//! - `kinds`: integers and inclusive `[first, last]` pairs; absent means every kind;
//! - `authors`: lower-case hex pubkeys; absent means every author;
//! - `since`: a fixed lower bound on `created_at`, in seconds;
//! - `windowSeconds`: a rolling lower bound, `now - windowSeconds`, computed from the current
//!   time at every use ("checked against the current time, and never widened past its own
//!   cutoff": the effective bound is the later of the two, and an event older than it is out of
//!   scope even while a reconciliation that began earlier is still running).
//!
//! Unknown keys are ignored; a scope whose known keys are malformed is skipped (counted by the
//! caller), and every list is bounded by a named constant.

use alloc::vec::Vec;

use serde_json::Value;

use crate::core::Timestamp;
use crate::nostr::event::{Event, parse_lower_hex};
use crate::nostr::message::Filter;

/// Most scopes read from one peer's document; more are ignored. Sized to fit one live `REQ`
/// (one filter per scope) within a relay's default filter cap.
pub const MAX_SCOPES: usize = 16;

/// Most `kinds` entries (integers or ranges) read from one scope.
pub const MAX_KIND_ENTRIES: usize = 64;

/// Most `authors` read from one scope.
pub const MAX_SCOPE_AUTHORS: usize = 256;

/// Most kinds one filter lists: a kind range wider than this is reconciled in chunks of at most
/// this many kinds (a relay's default cap on filter values is 1 000), and a live `REQ` leaves
/// `kinds` out of a scope wider than this (every event is still checked on arrival).
pub const MAX_FILTER_KINDS: usize = 500;

/// The rolling window of [`Scope::implicit`], the scope synced from a peer whose NIP-11 document
/// carries no `peering.scopes` at all: 30 days (docs/decisions.md, "a peer that advertises no
/// scope").
pub const IMPLICIT_SCOPE_WINDOW_SECS: u64 = 30 * 24 * 60 * 60;

/// An inclusive range of event kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KindRange {
    /// The first kind in the range.
    pub first: u16,
    /// The last kind in the range (at least `first`).
    pub last: u16,
}

impl KindRange {
    /// Every kind, 0 to 65535.
    pub const ALL: Self = Self {
        first: 0,
        last: u16::MAX,
    };

    /// How many kinds the range holds.
    pub fn width(&self) -> usize {
        usize::from(self.last - self.first) + 1
    }

    /// Whether `kind` is in the range.
    pub fn contains(&self, kind: u16) -> bool {
        (self.first..=self.last).contains(&kind)
    }

    /// The kinds as a filter's `kinds` list: `None` for every kind, else the list (callers keep
    /// the range within [`MAX_FILTER_KINDS`]).
    pub fn as_filter_kinds(&self) -> Option<Vec<u16>> {
        (*self != Self::ALL).then(|| (self.first..=self.last).collect())
    }
}

/// One advertised scope: the kinds, authors and time range a peer offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The kinds (every kind when it is [`KindRange::ALL`] alone).
    pub kinds: Vec<KindRange>,
    /// The authors, or every author.
    pub authors: Option<Vec<[u8; 32]>>,
    /// A fixed lower bound on `created_at`, in seconds.
    pub since: Option<u64>,
    /// A rolling window: `created_at` at or after `now - window_secs`.
    pub window_secs: Option<u64>,
}

impl Scope {
    /// A scope of every kind and author, without a time bound.
    pub fn everything() -> Self {
        Self {
            kinds: alloc::vec![KindRange::ALL],
            authors: None,
            since: None,
            window_secs: None,
        }
    }

    /// The scope synced from a peer whose document has no `peering.scopes` key (a relay that does
    /// not implement spec 002, configured as a peer by this relay's operator): every kind and
    /// author over the last [`IMPLICIT_SCOPE_WINDOW_SECS`]. Spec 002 §6 drives sync by the
    /// peer's advertisement and never by a feed list in this relay's configuration, so the rule is
    /// fixed here; the window keeps a peer that agreed to no scope from being asked for its whole
    /// history. An advertised empty list, or one with no valid scope, is not this: that peer
    /// offers nothing and is reported unusable.
    pub fn implicit() -> Self {
        Self {
            window_secs: Some(IMPLICIT_SCOPE_WINDOW_SECS),
            ..Self::everything()
        }
    }

    /// Reads one scope object. `None` when a known key is malformed.
    pub fn from_value(value: &Value) -> Option<Self> {
        let obj = value.as_object()?;
        let kinds = match obj.get("kinds") {
            None => alloc::vec![KindRange::ALL],
            Some(v) => {
                let arr = v.as_array()?;
                if arr.is_empty() || arr.len() > MAX_KIND_ENTRIES {
                    return None;
                }
                arr.iter().map(kind_entry).collect::<Option<Vec<_>>>()?
            }
        };
        let authors = match obj.get("authors") {
            None => None,
            Some(v) => {
                let arr = v.as_array()?;
                if arr.is_empty() || arr.len() > MAX_SCOPE_AUTHORS {
                    return None;
                }
                Some(
                    arr.iter()
                        .map(|a| a.as_str().and_then(parse_lower_hex::<32>))
                        .collect::<Option<Vec<_>>>()?,
                )
            }
        };
        let since = match obj.get("since") {
            None => None,
            Some(v) => Some(v.as_u64()?),
        };
        let window_secs = match obj.get("windowSeconds") {
            None => None,
            Some(v) => Some(v.as_u64().filter(|w| *w > 0)?),
        };
        Some(Self {
            kinds,
            authors,
            since,
            window_secs,
        })
    }

    /// The lower bound on `created_at` at `now`: the later of `since` and `now - windowSeconds`.
    pub fn cutoff(&self, now: Timestamp) -> u64 {
        let rolling = self
            .window_secs
            .map_or(0, |w| now.as_secs().saturating_sub(w));
        self.since.unwrap_or(0).max(rolling)
    }

    /// Whether `event` is in this scope at `now`: its kind and author listed, and not older than
    /// [`Scope::cutoff`] at `now`.
    pub fn admits(&self, event: &Event, now: Timestamp) -> bool {
        self.kinds.iter().any(|k| k.contains(event.kind))
            && self
                .authors
                .as_ref()
                .is_none_or(|a| a.contains(&event.pubkey))
            && event.created_at >= self.cutoff(now)
    }

    /// The filter of the live `REQ` for this scope at `now`: its kinds when they fit
    /// [`MAX_FILTER_KINDS`], its authors, and `since` the later of its cutoff and `from`.
    pub fn live_filter(&self, now: Timestamp, from: u64) -> Filter {
        let width: usize = self.kinds.iter().map(KindRange::width).sum();
        let kinds = (width <= MAX_FILTER_KINDS).then(|| {
            let mut k: Vec<u16> = self.kinds.iter().flat_map(|r| r.first..=r.last).collect();
            k.sort_unstable();
            k.dedup();
            k
        });
        Filter {
            kinds,
            authors: self.authors.clone(),
            since: Some(self.cutoff(now).max(from)),
            ..Filter::default()
        }
    }

    /// The pieces this scope (number `scope`) is first reconciled in at `now`: one per kind
    /// range, a range wider than [`MAX_FILTER_KINDS`] cut into chunks (every kind stays one
    /// piece), each from the scope's cutoff with no upper bound.
    pub fn pieces(&self, scope: usize, now: Timestamp) -> Vec<Piece> {
        let since = self.cutoff(now);
        let mut out = Vec::new();
        for range in &self.kinds {
            if *range == KindRange::ALL {
                out.push(Piece {
                    scope,
                    kinds: *range,
                    since,
                    until: None,
                });
                continue;
            }
            let mut first = u32::from(range.first);
            let last = u32::from(range.last);
            while first <= last {
                let end = (first + MAX_FILTER_KINDS as u32 - 1).min(last);
                out.push(Piece {
                    scope,
                    kinds: KindRange {
                        first: first as u16,
                        last: end as u16,
                    },
                    since,
                    until: None,
                });
                first = end + 1;
            }
        }
        out
    }
}

fn kind_entry(v: &Value) -> Option<KindRange> {
    let kind = |x: &Value| x.as_u64().and_then(|k| u16::try_from(k).ok());
    match v {
        Value::Array(pair) if pair.len() == 2 => {
            let (first, last) = (kind(&pair[0])?, kind(&pair[1])?);
            (first <= last).then_some(KindRange { first, last })
        }
        v => kind(v).map(|k| KindRange { first: k, last: k }),
    }
}

/// Reads `peering.scopes` from a NIP-11 document: the valid scopes (at most [`MAX_SCOPES`]) and
/// how many entries were skipped as malformed or over the cap. A document without the key (no
/// `peering` block, or one without `scopes`) gives [`Scope::implicit`] alone; a `scopes` that is
/// not a list gives nothing.
pub fn from_document(doc: &Value) -> (Vec<Scope>, usize) {
    let Some(listed) = doc.get("peering").and_then(|p| p.get("scopes")) else {
        return (alloc::vec![Scope::implicit()], 0);
    };
    let Some(list) = listed.as_array() else {
        return (Vec::new(), 1);
    };
    let mut scopes = Vec::new();
    let mut skipped = 0;
    for v in list {
        match Scope::from_value(v) {
            Some(s) if scopes.len() < MAX_SCOPES => scopes.push(s),
            _ => skipped += 1,
        }
    }
    (scopes, skipped)
}

/// One unit of reconciliation: some kinds of one scope over a time range, reconciled by one
/// NIP-77 session. A piece the peer answers "too large" is [`Piece::split`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Which scope (index into the peer's scopes).
    pub scope: usize,
    /// The kinds.
    pub kinds: KindRange,
    /// `created_at` at or after this.
    pub since: u64,
    /// `created_at` at or before this, or open.
    pub until: Option<u64>,
}

/// How a piece was split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Into two kind ranges.
    ByKind,
    /// Into two time ranges.
    ByTime,
}

impl Piece {
    /// The NIP-01 filter of this piece under `scope`.
    pub fn filter(&self, scope: &Scope) -> Filter {
        Filter {
            kinds: self.kinds.as_filter_kinds(),
            authors: scope.authors.clone(),
            since: Some(self.since),
            until: self.until,
            ..Filter::default()
        }
    }

    /// Two halves covering exactly this piece: by kind range while it holds more than one kind
    /// (and is not every kind, which no shorter list could name), then by time range, an open
    /// upper end taken as `horizon` (seconds). `None` when it is one kind over one second.
    pub fn split(&self, horizon: u64) -> Option<(Self, Self, Split)> {
        if self.kinds != KindRange::ALL && self.kinds.first < self.kinds.last {
            let mid = self.kinds.first + (self.kinds.last - self.kinds.first) / 2;
            let low = Self {
                kinds: KindRange {
                    first: self.kinds.first,
                    last: mid,
                },
                ..*self
            };
            let high = Self {
                kinds: KindRange {
                    first: mid + 1,
                    last: self.kinds.last,
                },
                ..*self
            };
            return Some((low, high, Split::ByKind));
        }
        let until = self.until.unwrap_or(horizon.max(self.since));
        if self.since >= until {
            return None;
        }
        let mid = self.since + (until - self.since) / 2;
        let low = Self {
            until: Some(mid),
            ..*self
        };
        let high = Self {
            since: mid + 1,
            ..*self
        };
        Some((low, high, Split::ByTime))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: Timestamp = Timestamp::from_secs(1_790_000_000);

    fn event(kind: u16, pubkey: u8, created_at: u64) -> Event {
        Event {
            id: [0; 32],
            pubkey: [pubkey; 32],
            created_at,
            kind,
            tags: Vec::new(),
            content: Default::default(),
            sig: [0; 64],
        }
    }

    #[test]
    fn scopes_read_kinds_ranges_authors_and_windows_and_skip_malformed_ones() {
        let a = "ab".repeat(32);
        let doc = json!({"peering": {"scopes": [
            {"kinds": [1, [30000, 30023]], "authors": [a], "since": 5, "windowSeconds": 60},
            {},
            {"kinds": [[7, 3]]},
            {"kinds": [70000]},
            {"kinds": []},
            {"authors": ["AB"]},
            {"windowSeconds": 0},
            {"since": -1},
            "nope",
            {"kinds": [1], "extra": true}
        ]}});
        let (scopes, skipped) = from_document(&doc);
        assert_eq!(skipped, 7);
        assert_eq!(scopes.len(), 3);
        assert_eq!(
            scopes[0],
            Scope {
                kinds: alloc::vec![
                    KindRange { first: 1, last: 1 },
                    KindRange {
                        first: 30000,
                        last: 30023
                    }
                ],
                authors: Some(alloc::vec![[0xab; 32]]),
                since: Some(5),
                window_secs: Some(60),
            }
        );
        assert_eq!(scopes[1], Scope::everything());
        assert_eq!(
            from_document(&json!({"peering": {"scopes": []}})),
            (Vec::new(), 0)
        );
        assert_eq!(
            from_document(&json!({"peering": {"scopes": {}}})),
            (Vec::new(), 1)
        );
        let many: Vec<Value> = (0..40).map(|_| json!({})).collect();
        let (scopes, skipped) = from_document(&json!({"peering": {"scopes": many}}));
        assert_eq!((scopes.len(), skipped), (MAX_SCOPES, 40 - MAX_SCOPES));
    }

    #[test]
    fn a_peer_advertising_no_scope_is_synced_over_the_implicit_window_and_an_empty_list_over_nothing()
     {
        // No `peering` block (rust-nostr's relay, nostr-rs-relay), or one without `scopes`.
        for doc in [
            json!({"supported_nips": [1, 11, 42, 77]}),
            json!({"peering": {"contact": "mailto:ops@example.org"}}),
        ] {
            assert_eq!(from_document(&doc), (alloc::vec![Scope::implicit()], 0));
        }
        let s = Scope::implicit();
        assert_eq!(s.kinds, alloc::vec![KindRange::ALL]);
        assert_eq!(s.authors, None);
        let t = NOW.as_secs();
        let window = IMPLICIT_SCOPE_WINDOW_SECS;
        // Every kind and author within the window; nothing older.
        for kind in [0, 1, 7, 30_023, u16::MAX] {
            assert!(s.admits(&event(kind, 9, t - window), NOW), "{kind}");
            assert!(!s.admits(&event(kind, 9, t - window - 1), NOW), "{kind}");
        }
        assert_eq!(s.cutoff(NOW), t - window);
        assert_eq!(s.pieces(0, NOW)[0].since, t - window);
        // The window rolls with the clock.
        let day_later = Timestamp::from_secs(t + 86_400);
        assert!(!s.admits(&event(1, 9, t - window), day_later));
        // Listed but empty, or listed with nothing valid: no scope at all.
        assert_eq!(
            from_document(&json!({"peering": {"scopes": []}})).0,
            Vec::new()
        );
        assert_eq!(
            from_document(&json!({"peering": {"scopes": [{"kinds": []}]}})),
            (Vec::new(), 1)
        );
    }

    #[test]
    fn a_rolling_window_follows_the_clock_and_never_widens_past_its_cutoff() {
        let s = Scope {
            window_secs: Some(3_600),
            ..Scope::everything()
        };
        let t = NOW.as_secs();
        assert!(s.admits(&event(1, 1, t - 3_600), NOW));
        assert!(!s.admits(&event(1, 1, t - 3_601), NOW));
        // An hour later the same event has left the window.
        let later = Timestamp::from_secs(t + 3_600);
        assert!(!s.admits(&event(1, 1, t - 3_600), later));
        // A live REQ opened with an overlap longer than the window starts at the cutoff.
        assert_eq!(s.live_filter(NOW, t - 10_000).since, Some(t - 3_600));
        assert_eq!(s.live_filter(NOW, t - 60).since, Some(t - 60));
        // A fixed since later than the window wins.
        let fixed = Scope {
            since: Some(t - 10),
            ..s.clone()
        };
        assert_eq!(fixed.cutoff(NOW), t - 10);
        assert!(!fixed.admits(&event(1, 1, t - 11), NOW));
    }

    #[test]
    fn events_outside_the_kinds_or_authors_are_out_of_scope() {
        let s = Scope {
            kinds: alloc::vec![
                KindRange { first: 1, last: 1 },
                KindRange {
                    first: 30000,
                    last: 30009
                }
            ],
            authors: Some(alloc::vec![[1; 32]]),
            since: None,
            window_secs: None,
        };
        assert!(s.admits(&event(1, 1, 0), NOW));
        assert!(s.admits(&event(30009, 1, 0), NOW));
        assert!(!s.admits(&event(30010, 1, 0), NOW));
        assert!(!s.admits(&event(2, 1, 0), NOW));
        assert!(!s.admits(&event(1, 2, 0), NOW));
        let live = s.live_filter(NOW, 0);
        assert_eq!(live.kinds.as_ref().map(Vec::len), Some(11));
        // Every kind, or too many to list: the live filter leaves kinds out.
        assert_eq!(Scope::everything().live_filter(NOW, 0).kinds, None);
    }

    #[test]
    fn pieces_cover_each_kind_range_in_listable_chunks() {
        let s = Scope {
            kinds: alloc::vec![
                KindRange { first: 1, last: 1 },
                KindRange {
                    first: 30000,
                    last: 31199
                },
                KindRange::ALL
            ],
            ..Scope::everything()
        };
        let p = s.pieces(3, NOW);
        assert_eq!(p.len(), 5);
        assert!(p.iter().all(|p| p.scope == 3 && p.until.is_none()));
        assert_eq!(
            p[1].kinds,
            KindRange {
                first: 30000,
                last: 30499
            }
        );
        assert_eq!(
            p[3].kinds,
            KindRange {
                first: 31000,
                last: 31199
            }
        );
        assert_eq!(p[4].filter(&s).kinds, None);
        assert!(
            p.iter()
                .all(|p| p.kinds.width() <= MAX_FILTER_KINDS || p.kinds == KindRange::ALL)
        );
    }

    #[test]
    fn a_piece_splits_by_kind_then_by_time_and_the_halves_cover_it_exactly() {
        let s = Scope::everything();
        let p = Piece {
            scope: 0,
            kinds: KindRange { first: 1, last: 4 },
            since: 100,
            until: None,
        };
        let (a, b, how) = p.split(200).unwrap();
        assert_eq!(how, Split::ByKind);
        assert_eq!(
            (a.kinds, b.kinds),
            (
                KindRange { first: 1, last: 2 },
                KindRange { first: 3, last: 4 }
            )
        );
        // Down to one kind, then by time; the open end stays open on the upper half.
        let one = Piece {
            kinds: KindRange { first: 1, last: 1 },
            ..p
        };
        let (a, b, how) = one.split(200).unwrap();
        assert_eq!(how, Split::ByTime);
        assert_eq!(
            (a.since, a.until, b.since, b.until),
            (100, Some(150), 151, None)
        );
        // Every kind splits by time at once.
        let all = Piece {
            kinds: KindRange::ALL,
            ..p
        };
        assert_eq!(all.split(200).unwrap().2, Split::ByTime);
        // Each half's filter admits exactly its events; together they cover the piece.
        for created_at in 100..=200 {
            let e = event(1, 9, created_at);
            let (a, b, _) = one.split(200).unwrap();
            assert!(
                a.filter(&s).matches(&e) ^ b.filter(&s).matches(&e),
                "{created_at}"
            );
        }
        // One kind over one second cannot split.
        let tiny = Piece {
            since: 5,
            until: Some(5),
            ..one
        };
        assert_eq!(tiny.split(200), None);
        // Repeated splitting ends.
        let mut stack = alloc::vec![all];
        let mut n = 0;
        while let Some(p) = stack.pop() {
            n += 1;
            assert!(n < 1_000);
            if let Some((a, b, _)) = p.split(200).filter(|_| p.since < 110) {
                stack.push(a);
                stack.push(b);
            }
        }
    }
}
