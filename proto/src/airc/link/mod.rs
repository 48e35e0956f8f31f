//! Links (AIRC §11): the record, the table of links a server keeps, the operations that change
//! it, the decision policy asks of it, and the control messages realms exchange about it.
//!
//! - §11.1 the record: [`Link`], with its JSON form, and the forward-only state order
//!   ([`LinkState::can_become`], [`Link::merge`]);
//! - §11.2 operations: [`LinkTable::offer`], [`LinkTable::accept`], [`LinkTable::decline`],
//!   [`LinkTable::revoke`], [`LinkTable::grant`] and [`LinkTable::list`], each with its
//!   preconditions, refusing with a [`LinkRefusal`];
//! - §11.3 the decision rule: [`LinkTable::decide`] and [`LinkTable::link_decision`], which
//!   §10.2's policy calls;
//! - §11.4 control messages: [`LinkTable::receive`] (the five steps for a control message from
//!   another realm), [`ControlMessage`] (the body and `msg` for each action) and [`Notice`] (the
//!   plain-text notification, byte for byte as Appendix A.2 shows it);
//! - §11.5 admission and §16.5/§16.7: [`MAX_PENDING_OFFERS`] per offerer, [`OFFER_RATE`] per
//!   source (for every control message that would store a new record), [`MAX_LINKS_PER_PARTY`]
//!   per endpoint, `accept_offers` and `auto_accept` in [`LinkConfig`].
//!
//! §11.2's table of operations was lost from the copy of the spec; the preconditions here are
//! the ones §11.4 step 2 restates for control messages, applied to the acting endpoint.

mod control;
mod index;
mod record;

#[cfg(test)]
mod tests;

pub use control::{
    Action, CONTROL_TYPE, ControlMessage, HDR_LINK, HDR_LINK_ACTION, Notice, notice_text,
    redeemed_text,
};
pub(crate) use record::to_secs;
pub use record::{
    Direction, ID_HEX_DIGITS, ID_PREFIX, Link, LinkOrigin, LinkState, MAX_LABEL_BYTES, Merge,
    RecordError, is_link_id,
};

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use crate::airc::address::{Address, Authority};
use crate::airc::frame::AckCode;
use crate::airc::pattern::Pattern;
use crate::codec::hex;
use crate::core::Timestamp;
use crate::core::bounded::{BoundedMap, MapInsert};
use crate::core::bucket::{BucketConfig, TokenBucket};
use index::{Index, Rank};

/// Pending offers one offerer may have outstanding at once (§11.5: "MUST cap pending offers per
/// offerer (20)"). An expired pending offer no longer counts: it has no effect (§11.1).
pub const MAX_PENDING_OFFERS: usize = 20;

/// The rate of offers per source (§11.5 "SHOULD rate-limit offers per source"; the spec names
/// no number): a burst of 10, then one a second.
///
/// A grant, or a revoke of an id never seen, from a control message (§11.4) draws on the same
/// bucket: each stores a new record with no word from the local endpoint, like an offer, and
/// §16.5 asks that control traffic admitted across policy be capped and rate-limited. A control
/// message about a record already held is never limited, so a revocation always lands.
pub const OFFER_RATE: BucketConfig = BucketConfig::new(10, 1);

/// Sources whose offer rate is tracked at once. When full the source first seen is forgotten
/// and starts again with a full bucket; the pending cap still bounds what it can store.
pub const MAX_OFFER_SOURCES: usize = 4096;

/// Link records a table holds at most. The spec sets none; a full table refuses new records
/// rather than evicting one, because forgetting a revocation would turn a denial back into no
/// decision.
pub const MAX_LINKS: usize = 100_000;

/// Link records one party may be named in (as `a`, or as `b`; a namespace `b` counts for the
/// namespace, not for the endpoints beneath it) with counterparts of one source (the other
/// side's [`OFFER_RATE`] source: another realm as a whole, or one local namespace). The spec
/// sets none (§15's table was lost).
///
/// A hundredth of [`MAX_LINKS`], so records one source piles onto one endpoint (offers or grants
/// naming it, or a peer realm's grants and revokes of unknown ids) fill that source's share of
/// the endpoint and not the table; and fifty times [`MAX_PENDING_OFFERS`], far more than one
/// endpoint links with one realm. Per source, because revocations are never dropped from the
/// table (other records after [`LINK_RETENTION`]): a cap per endpoint alone would be a budget
/// any realm could spend for it, cutting it off from everyone. A new record past it is refused
/// ([`LinkRefusal::PartyFull`]) rather than evicting one, for the reason [`MAX_LINKS`] gives.
pub const MAX_LINKS_PER_PARTY: usize = 1_000;

/// How long a record that can no longer decide anything is kept before it is forgotten: a
/// declined offer from when it was declined, a pending offer or a link with an `expires` from
/// then. The spec keeps records without saying for how long (§11.1); kept for ever, they would
/// fill [`MAX_LINKS`] in the end however slowly they came. Thirty days, as long as a redeemed
/// passport's link lasts by default (the example's `link_ttl`, §12.1,
/// `passport::book::DEFAULT_LINK_TTL`; a separate choice that happens to match), leaves them in
/// `list` for a while and is far past the duplicate window (`spool::DUPLICATE_WINDOW`), within
/// which a replayed control message is suppressed rather than taken for new. Revocations are never forgotten (a revocation denies for as long as it is
/// the newest record of its pair), nor links without an end.
pub const LINK_RETENTION: Duration = Duration::from_secs(30 * 86_400);

/// Fresh ids tried before an offer or grant gives up (a collision among 2³² ids is rare; eight in
/// a row means the table is nearly full of ids, or the random source is broken).
pub const MAX_ID_ATTEMPTS: usize = 8;

/// What a realm's operator configures about links (§11.4, §11.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkConfig {
    /// `accept_offers`: whether offers to local endpoints are taken at all (§11.5).
    pub accept_offers: bool,
    /// `auto_accept`: local endpoints whose offers are accepted on arrival (§11.4).
    pub auto_accept: Vec<Pattern>,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            accept_offers: true,
            auto_accept: Vec::new(),
        }
    }
}

/// Why an operation or a control message was refused. Every refusal is sent with code
/// [`LinkRefusal::CODE`] (`refused`) and the [`Display`](fmt::Display) text as `reason`: in a
/// `linked` answer (§4.6) or an ack `failed` (§11.4).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkRefusal {
    /// The record in a control message is not valid (§11.1).
    Invalid(RecordError),
    /// The control message is not one: wrong `type`, a body that is not `{action, link}`,
    /// addresses that do not parse, or an `airc-link` header naming another id.
    BadControl(&'static str),
    /// The control message is for an endpoint of another realm.
    NotLocal,
    /// The acting endpoint is a namespace reference; only endpoints act.
    NotAnEndpoint,
    /// An offer or grant to oneself (or to a namespace one lies beneath).
    SelfLink,
    /// No link has this id.
    Unknown(String),
    /// The control message's `from` and `to` are not the record's `a` and `b` (§11.4 step 1),
    /// or the stored link with this id joins other endpoints.
    NotTheParties(String),
    /// The actor is not the one §11.2 allows (the offeree for accept and decline, a party for
    /// revoke, `a` for a grant, the offerer for an offer).
    NotAllowed {
        /// The link id.
        id: String,
        /// Who may perform it.
        who: &'static str,
    },
    /// The link is not in a state the action applies to.
    WrongState {
        /// The link id.
        id: String,
        /// Its state.
        state: LinkState,
    },
    /// The link's `expires` has passed.
    Expired(String),
    /// A new offer's `expires` is not in the future.
    ExpiresInPast,
    /// The realm takes no offers (`accept_offers: false`, §11.5).
    OffersRefused,
    /// The offerer has [`MAX_PENDING_OFFERS`] pending already (§11.5).
    TooManyPending,
    /// The source has used its [`OFFER_RATE`] (§11.5), with offers, grants or revokes that
    /// would store a new record.
    RateLimited,
    /// The label is longer than [`MAX_LABEL_BYTES`].
    LabelTooLong,
    /// [`MAX_LINKS`] records are held.
    TableFull,
    /// A side of the new record is named in [`MAX_LINKS_PER_PARTY`] records with counterparts
    /// of the other side's source.
    PartyFull {
        /// The side's key.
        party: String,
        /// The other side's source.
        source: String,
    },
    /// [`MAX_ID_ATTEMPTS`] fresh ids all collided.
    NoFreeId,
}

impl LinkRefusal {
    /// The code every refusal carries (§14.1 `refused`: a request the realm will not carry out).
    pub const CODE: AckCode = AckCode::Refused;
}

impl fmt::Display for LinkRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(e) => write!(f, "{e}"),
            Self::BadControl(why) => write!(f, "not a link control message: {why}"),
            Self::NotLocal => f.write_str("link control for another realm"),
            Self::NotAnEndpoint => f.write_str("only an endpoint may act on a link"),
            Self::SelfLink => f.write_str("a link joins two different endpoints"),
            Self::Unknown(id) => write!(f, "link {id} unknown"),
            Self::NotTheParties(id) => write!(f, "link {id} is between other endpoints"),
            Self::NotAllowed { id, who } => write!(f, "link {id}: only {who} may do that"),
            Self::WrongState { id, state } => write!(f, "link {id} is {state}"),
            Self::Expired(id) => write!(f, "link {id} expired"),
            Self::ExpiresInPast => f.write_str("expires is not in the future"),
            Self::OffersRefused => f.write_str("this realm accepts no link offers"),
            Self::TooManyPending => write!(f, "too many pending offers ({MAX_PENDING_OFFERS})"),
            Self::RateLimited => f.write_str("too many new links from this source; try later"),
            Self::LabelTooLong => write!(f, "label longer than {MAX_LABEL_BYTES} bytes"),
            Self::TableFull => f.write_str("link table full"),
            Self::PartyFull { party, source } => {
                write!(
                    f,
                    "too many links for {party} with {source} ({MAX_LINKS_PER_PARTY})"
                )
            }
            Self::NoFreeId => f.write_str("no free link id"),
        }
    }
}

impl core::error::Error for LinkRefusal {}

/// A new offer from a local endpoint (§11.2, `link op=offer`, §4.6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    /// `as`: the offering endpoint, already checked against the connection's namespaces (§5).
    pub acting: Address,
    /// `peer`: the other endpoint, or a namespace reference.
    pub peer: Address,
    /// `direction` (default [`Direction::Both`]).
    pub direction: Direction,
    /// `label`.
    pub label: Option<String>,
    /// When the link would stop having effect; `None` for never.
    pub expires: Option<Timestamp>,
}

/// A link granted outright, as a redeemed passport creates one (§11.4 `grant`, §12.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The issuing endpoint, which becomes `a` and `offered_by`.
    pub a: Address,
    /// The redeemer.
    pub b: Address,
    /// The passport's direction.
    pub direction: Direction,
    /// The passport's label.
    pub label: Option<String>,
    /// `now + link_ttl`.
    pub expires: Option<Timestamp>,
    /// The passport it came from.
    pub origin: Option<LinkOrigin>,
}

/// A local operation done: the record as stored, and the control message to send to the other
/// side (§11.2: "the server performs the state change locally first, then sends the control
/// message").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// The record after the operation, for `linked.link`.
    pub link: Link,
    /// The control message for the other endpoint.
    pub control: ControlMessage,
}

/// What storing a control message's record did (§11.4 step 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// A record this realm had not seen.
    New,
    /// The stored record moved forward.
    Advanced,
    /// The stored record already had this state (a retry).
    Unchanged,
}

/// A control message taken (§11.4): ack it `delivered`, then send `notice` (whose failure does
/// not change the ack) and `reply` when there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The action.
    pub action: Action,
    /// The record as stored now.
    pub link: Link,
    /// What storing did.
    pub stored: Stored,
    /// The notification for the local endpoint; `None` when nothing changed.
    pub notice: Option<Notice>,
    /// The accept to send back when `auto_accept` took the offer (§11.4).
    pub reply: Option<ControlMessage>,
}

/// What the links say about a message from F to T (§11.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkDecision {
    /// An active link lets F start.
    Allow {
        /// The deciding link.
        id: String,
    },
    /// The newest decisive record is a revocation.
    Revoked {
        /// The deciding link.
        id: String,
    },
    /// The newest decisive record is an active one-way link F may only answer on: allow inside
    /// the reply window, deny otherwise.
    ReplyOnly {
        /// The deciding link.
        id: String,
        /// Its direction.
        direction: Direction,
    },
    /// No record decides.
    None,
}

impl LinkDecision {
    /// Resolves to §10.2's `link_decision`: `Some(true)` allow, `Some(false)` deny, `None` no
    /// decision. `in_reply_window` is asked only for a [`LinkDecision::ReplyOnly`].
    pub fn resolve(&self, in_reply_window: impl FnOnce() -> bool) -> Option<bool> {
        match self {
            Self::Allow { .. } => Some(true),
            Self::Revoked { .. } => Some(false),
            Self::ReplyOnly { .. } => Some(in_reply_window()),
            Self::None => None,
        }
    }

    /// The deny reason of §11.3 for a message from `from`: `link <id> revoked`, or `<id> is
    /// <direction>; <from> may only reply`. `None` for a decision that is not a denial.
    pub fn deny_reason(&self, from: &Address) -> Option<String> {
        match self {
            Self::Revoked { id } => Some(format!("link {id} revoked")),
            Self::ReplyOnly { id, direction } => Some(format!(
                "{id} is {direction}; {} may only reply",
                from.key()
            )),
            _ => None,
        }
    }
}

/// The links a realm's server holds (§11), bounded by [`MAX_LINKS`], and by
/// [`MAX_LINKS_PER_PARTY`] for one endpoint with one source.
///
/// Records are kept by id, and indexed newest first (§11.3's order) by each side's key and, for
/// those that can decide, by pair. So every output is in a defined order without sorting, a
/// decision reads only records of its own pair (however many either endpoint has with others),
/// and the pending-offer cap counts only the offerer's unexpired pending offers.
#[derive(Clone, Debug)]
pub struct LinkTable {
    realm: Authority,
    config: LinkConfig,
    links: BTreeMap<String, Link>,
    /// Changed only with the record, through [`LinkTable::change`] and [`LinkTable::put`].
    index: Index,
    /// How many records name each party with a counterpart of each source, for
    /// [`MAX_LINKS_PER_PARTY`]; counted in [`LinkTable::put`] and [`LinkTable::forget_lapsed`].
    shares: BTreeMap<(String, String), usize>,
    offer_rate: BoundedMap<String, TokenBucket>,
}

impl LinkTable {
    /// An empty table for the server of `realm`.
    pub fn new(realm: Authority, config: LinkConfig) -> Self {
        Self {
            realm,
            config,
            links: BTreeMap::new(),
            index: Index::default(),
            shares: BTreeMap::new(),
            offer_rate: BoundedMap::new(MAX_OFFER_SOURCES),
        }
    }

    /// The realm this table serves.
    pub fn realm(&self) -> &Authority {
        &self.realm
    }

    /// The configuration.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// The record with this id.
    pub fn get(&self, id: &str) -> Option<&Link> {
        self.links.get(id)
    }

    /// How many records are held.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// Puts back a record read from durable storage after a restart. Validity was checked when
    /// it was first stored; a record already held is merged forward-only.
    ///
    /// [`MAX_LINKS_PER_PARTY`] is not applied again: the record was admitted when first stored,
    /// and dropping it now could forget a revocation, turning a denial into no decision.
    pub fn restore(&mut self, link: Link) -> Result<Stored, LinkRefusal> {
        self.put(link, false)
    }

    /// Forgets the records that lost all effect [`LINK_RETENTION`] ago or more (declined, or
    /// past their `expires`) and returns their ids, for the host to forget too. No decision
    /// changes by it: §11.3 passes over such records. What changes is what may come after: a
    /// forgotten record can no longer be revoked by its id (the other realm's revoke of it is
    /// stored as one of a link never seen), and its offer, were it replayed past the duplicate
    /// window, would be taken as new. Costs what it forgets.
    pub fn forget_lapsed(&mut self, now: Timestamp) -> Vec<String> {
        let mut gone = Vec::new();
        while let Some((at, id)) = self.index.lapsing.first().cloned() {
            if at > now {
                break;
            }
            match self.links.remove(&id) {
                Some(link) => {
                    self.index.remove(&link);
                    for share in self.shares_of((&link.a, &link.b)) {
                        if let Some(n) = self.shares.get_mut(&share) {
                            *n -= 1;
                            if *n == 0 {
                                self.shares.remove(&share);
                            }
                        }
                    }
                }
                None => unreachable!("{id} lapsing but not held"),
            }
            gone.push(id);
        }
        gone
    }

    /// The links `endpoint` is a party to (as `a`, as `b`, or beneath a namespace `b`), newest
    /// first (§4.6 `list`).
    pub fn list(&self, endpoint: &Address) -> Vec<&Link> {
        let own = self.index.by_party.get(endpoint.key().as_str());
        let mut beneath = endpoint
            .enclosing_namespace_keys()
            .filter_map(|ns| self.index.by_party.get(ns))
            .flatten()
            .filter(|r| self.get(r.id()).is_some_and(|l| l.is_b(endpoint)))
            .peekable();
        let ranks: Vec<&Rank> = if beneath.peek().is_none() {
            own.into_iter().flatten().collect()
        } else {
            // Merged (and any record seen twice kept once) in rank order.
            let mut all: BTreeSet<&Rank> = beneath.collect();
            all.extend(own.into_iter().flatten());
            all.into_iter().collect()
        };
        ranks.into_iter().filter_map(|r| self.get(r.id())).collect()
    }

    /// Every link, newest first: what an administrator connection may list (§5).
    pub fn list_all(&self) -> Vec<&Link> {
        self.index
            .newest
            .iter()
            .filter_map(|r| self.get(r.id()))
            .collect()
    }

    /// §11.2 offer: a new pending link from `offer.acting` (side `a`) to `offer.peer` (side `b`).
    ///
    /// Preconditions: the actor is an endpoint; the peer is another endpoint (or a namespace the
    /// actor is not beneath); the label fits; `expires`, if given, is in the future; a local
    /// offeree's realm takes offers; the offerer has fewer than [`MAX_PENDING_OFFERS`] pending;
    /// the source is within [`OFFER_RATE`]; the table has room.
    pub fn offer(
        &mut self,
        now: Timestamp,
        rng: &mut dyn rand_core::CryptoRng,
        offer: Offer,
    ) -> Result<Operation, LinkRefusal> {
        check_pair(&offer.acting, &offer.peer)?;
        check_label(offer.label.as_deref())?;
        if offer.expires.is_some_and(|e| e <= now) {
            return Err(LinkRefusal::ExpiresInPast);
        }
        if offer.peer.realm() == &self.realm && !self.config.accept_offers {
            return Err(LinkRefusal::OffersRefused);
        }
        self.admit_offer(now, &offer.acting, None, (&offer.acting, &offer.peer))?;
        let id = self.fresh_id(rng)?;
        let link = Link {
            id,
            a: offer.acting.without_fragment(),
            b: offer.peer.without_fragment(),
            direction: offer.direction,
            label: offer.label,
            created: now,
            expires: offer.expires,
            state: LinkState::Pending,
            offered_by: offer.acting.without_fragment(),
            origin: None,
            accepted_at: None,
            declined_at: None,
            revoked_at: None,
            revoked_by: None,
        };
        self.store(link.clone())?;
        let control =
            ControlMessage::new(Action::Offer, link.clone(), link.a.clone(), link.b.clone());
        Ok(Operation { link, control })
    }

    /// §11.2 accept: the offeree turns a pending, unexpired offer active.
    pub fn accept(
        &mut self,
        now: Timestamp,
        acting: &Address,
        id: &str,
    ) -> Result<Operation, LinkRefusal> {
        self.answer(now, acting, id, Action::Accept)
    }

    /// §11.2 decline: the offeree turns a pending offer declined.
    pub fn decline(
        &mut self,
        now: Timestamp,
        acting: &Address,
        id: &str,
    ) -> Result<Operation, LinkRefusal> {
        self.answer(now, acting, id, Action::Decline)
    }

    /// §11.2 revoke: either party ends a link in any state but revoked ("any → revoked").
    pub fn revoke(
        &mut self,
        now: Timestamp,
        acting: &Address,
        id: &str,
    ) -> Result<Operation, LinkRefusal> {
        if acting.is_namespace() {
            return Err(LinkRefusal::NotAnEndpoint);
        }
        let link = self
            .links
            .get(id)
            .ok_or_else(|| LinkRefusal::Unknown(id.to_string()))?;
        if !link.is_party(acting) {
            return Err(LinkRefusal::NotAllowed {
                id: id.to_string(),
                who: "a party",
            });
        }
        if link.state == LinkState::Revoked {
            return Err(LinkRefusal::WrongState {
                id: id.to_string(),
                state: link.state,
            });
        }
        let link = self
            .change(id, |link| {
                link.state = LinkState::Revoked;
                link.revoked_at = Some(now);
                link.revoked_by = Some(acting.without_fragment());
                link.clone()
            })
            .ok_or_else(|| LinkRefusal::Unknown(id.to_string()))?;
        let to = other_side(&link, acting);
        let control =
            ControlMessage::new(Action::Revoke, link.clone(), acting.without_fragment(), to);
        Ok(Operation { link, control })
    }

    /// §11.4/§12.5 grant: a new active link from `a` to `b`, as a client's `grant` or a redeemed
    /// passport creates. Preconditions: `a` is an endpoint other than `b`, the label fits, the
    /// table and both parties' shares have room, and a client's own grant (no `origin`) is within
    /// its source's [`OFFER_RATE`].
    pub fn grant(
        &mut self,
        now: Timestamp,
        rng: &mut dyn rand_core::CryptoRng,
        grant: Grant,
    ) -> Result<Operation, LinkRefusal> {
        check_pair(&grant.a, &grant.b)?;
        check_label(grant.label.as_deref())?;
        // A client's own grant stores a record for good, like an offer it needs no one's word
        // for: it draws on its source's rate. A redemption's is bounded by the passport's uses
        // and §12.5's failure limit, and ends (`link_ttl`).
        if grant.origin.is_none() {
            self.admit_record(now, &grant.a, (&grant.a, &grant.b))?;
        }
        let id = self.fresh_id(rng)?;
        let link = Link {
            id,
            a: grant.a.without_fragment(),
            b: grant.b.without_fragment(),
            direction: grant.direction,
            label: grant.label,
            created: now,
            expires: grant.expires,
            state: LinkState::Active,
            offered_by: grant.a.without_fragment(),
            origin: grant.origin,
            accepted_at: None,
            declined_at: None,
            revoked_at: None,
            revoked_by: None,
        };
        self.store(link.clone())?;
        let control =
            ControlMessage::new(Action::Grant, link.clone(), link.a.clone(), link.b.clone());
        Ok(Operation { link, control })
    }

    /// §11.3: what the records joining `from` and `to` decide, newest first by `created`.
    ///
    /// Records created at the same instant are taken revoked first, then by id, so a tie can
    /// only deny and never depends on storage order.
    ///
    /// The first record in that order that is revoked, or active and unexpired, decides; pending
    /// and declined ones never do. So this reads only the active and revoked records whose `a`
    /// is one endpoint and whose `b` is the other or a namespace above it, each pair's newest
    /// first, and stops in each at its first deciding record: what it reads grows with the
    /// records of this pair (the active ones that have expired), never with the links either
    /// endpoint has with anyone else.
    pub fn decide(&self, now: Timestamp, from: &Address, to: &Address) -> LinkDecision {
        let mut first: Option<(&Rank, &Link)> = None;
        for (a, b) in [(from, to), (to, from)] {
            let Some(by_b) = self.index.decisive.get(a.key().as_str()) else {
                continue;
            };
            let b_keys = core::iter::once(b.key().as_str()).chain(b.enclosing_namespace_keys());
            for ranks in b_keys.filter_map(|k| by_b.get(k)) {
                let found = ranks
                    .iter()
                    // Past the best so far nothing can win.
                    .take_while(|r| first.is_none_or(|(best, _)| *r < best))
                    .filter_map(|r| Some((r, self.get(r.id())?)))
                    .find(|(_, l)| l.joins(from, to) && decides(l, now));
                if found.is_some() {
                    first = found;
                }
            }
        }
        if let Some((_, rec)) = first {
            if rec.state == LinkState::Revoked {
                return LinkDecision::Revoked { id: rec.id.clone() };
            }
            let f_is_a = rec.is_a(from);
            let starts = match rec.direction {
                Direction::Both => true,
                Direction::AInitiates => f_is_a,
                Direction::BInitiates => !f_is_a,
            };
            return if starts {
                LinkDecision::Allow { id: rec.id.clone() }
            } else {
                LinkDecision::ReplyOnly {
                    id: rec.id.clone(),
                    direction: rec.direction,
                }
            };
        }
        LinkDecision::None
    }

    /// §10.2's `link_decision(from, to)`: `Some(true)` allow, `Some(false)` deny, `None` no
    /// decision. `in_reply_window(F, T)` is §10.3's test that T messaged F recently; it is asked
    /// only when an active one-way link leaves F only a reply.
    pub fn link_decision(
        &self,
        now: Timestamp,
        from: &Address,
        to: &Address,
        in_reply_window: impl FnOnce(&Address, &Address) -> bool,
    ) -> Option<bool> {
        self.decide(now, from, to)
            .resolve(|| in_reply_window(from, to))
    }

    /// §11.4: a link control message for a local endpoint, from another realm (or from this
    /// one, routed as a message). `msg.from` and `msg.to` are the canonical URIs routing has
    /// already authenticated (§6.2).
    ///
    /// Steps: (1) validate the record and require `from`/`to` to be its `a` and `b`; (2) apply
    /// the action's preconditions; (3) store or merge forward-only; (4) return what to ack and
    /// the notice for the local endpoint. A refusal is acked `failed` with
    /// [`LinkRefusal::CODE`] and its text as reason.
    pub fn receive(
        &mut self,
        now: Timestamp,
        msg: &crate::airc::frame::Msg,
    ) -> Result<Received, LinkRefusal> {
        let (action, incoming, from, to) = control::parse(msg)?;
        if to.realm() != &self.realm {
            return Err(LinkRefusal::NotLocal);
        }
        // Step 1.
        let id = incoming.id.clone();
        if !incoming.joins(&from, &to) {
            return Err(LinkRefusal::NotTheParties(id));
        }
        let existing = self.links.get(&id);
        if existing.is_some_and(|e| e.a != incoming.a || e.b != incoming.b) {
            return Err(LinkRefusal::NotTheParties(id));
        }
        // Step 2.
        if incoming.state != action.state() {
            return Err(LinkRefusal::WrongState {
                id,
                state: incoming.state,
            });
        }
        let mut incoming = incoming;
        match action {
            Action::Offer => {
                if incoming.offered_by != from {
                    return Err(LinkRefusal::NotAllowed {
                        id,
                        who: "the offerer",
                    });
                }
                if incoming.is_expired(now) {
                    return Err(LinkRefusal::Expired(id));
                }
                if !self.config.accept_offers {
                    return Err(LinkRefusal::OffersRefused);
                }
                if existing.is_none() {
                    self.admit_offer(now, &from, Some(&id), (&incoming.a, &incoming.b))?;
                }
            }
            Action::Accept | Action::Decline => {
                let Some(stored) = existing else {
                    return Err(LinkRefusal::Unknown(id));
                };
                if !stored.is_offeree(&from) {
                    return Err(LinkRefusal::NotAllowed {
                        id,
                        who: "the offeree",
                    });
                }
                if !stored.state.can_become(incoming.state) {
                    return Err(LinkRefusal::WrongState {
                        id,
                        state: stored.state,
                    });
                }
                // A decline is taken as of now at the latest: a time ahead of ours would keep the
                // record from being forgotten (`LINK_RETENTION`) for as long as the peer liked.
                incoming.declined_at = incoming.declined_at.map(|at| at.min(now));
            }
            Action::Grant => {
                if incoming.a != from || !incoming.is_b(&to) {
                    return Err(LinkRefusal::NotAllowed { id, who: "side a" });
                }
                if let Some(stored) = existing
                    && !stored.state.can_become(incoming.state)
                {
                    return Err(LinkRefusal::WrongState {
                        id,
                        state: stored.state,
                    });
                }
            }
            Action::Revoke => {
                // Any party (step 1 checked that `from` is one); the server vouches for who.
                incoming.revoked_by = Some(from.clone());
                if incoming.revoked_at.is_none() {
                    incoming.revoked_at = Some(now);
                }
            }
        }
        // A grant or a revoke that would store a record never seen counts against the source's
        // rate like an offer (see `OFFER_RATE`); one about a held record only merges.
        if matches!(action, Action::Grant | Action::Revoke) && !self.links.contains_key(&id) {
            self.admit_record(now, &from, (&incoming.a, &incoming.b))?;
        }
        // Step 3.
        let stored = self.store(incoming)?;
        // Step 4.
        let mut reply = None;
        let mut auto = false;
        if action == Action::Offer
            && stored == Stored::New
            && self.config.auto_accept.iter().any(|p| p.matches(&to))
            && let Some(link) = self.change(&id, |link| {
                link.state = LinkState::Active;
                link.accepted_at = Some(now);
                link.clone()
            })
        {
            reply = Some(ControlMessage::new(
                Action::Accept,
                link,
                to.clone(),
                from.clone(),
            ));
            auto = true;
        }
        let link = self
            .links
            .get(&id)
            .cloned()
            .ok_or(LinkRefusal::Unknown(id))?;
        let notice = (stored != Stored::Unchanged).then(|| {
            let body = if auto {
                control::auto_accepted_text(&link, &from, &to)
            } else {
                control::notice_text(action, &link, &from, &to)
            };
            Notice {
                action,
                link_id: link.id.clone(),
                from: from.clone(),
                to: to.clone(),
                body,
            }
        });
        Ok(Received {
            action,
            link,
            stored,
            notice,
            reply,
        })
    }

    /// The accept and decline of §11.2.
    fn answer(
        &mut self,
        now: Timestamp,
        acting: &Address,
        id: &str,
        action: Action,
    ) -> Result<Operation, LinkRefusal> {
        if acting.is_namespace() {
            return Err(LinkRefusal::NotAnEndpoint);
        }
        let link = self
            .links
            .get(id)
            .ok_or_else(|| LinkRefusal::Unknown(id.to_string()))?;
        if !link.is_offeree(acting) {
            return Err(LinkRefusal::NotAllowed {
                id: id.to_string(),
                who: "the offeree",
            });
        }
        if link.state != LinkState::Pending {
            return Err(LinkRefusal::WrongState {
                id: id.to_string(),
                state: link.state,
            });
        }
        if link.is_expired(now) {
            return Err(LinkRefusal::Expired(id.to_string()));
        }
        let link = self
            .change(id, |link| {
                if action == Action::Accept {
                    link.state = LinkState::Active;
                    link.accepted_at = Some(now);
                } else {
                    link.state = LinkState::Declined;
                    link.declined_at = Some(now);
                }
                link.clone()
            })
            .ok_or_else(|| LinkRefusal::Unknown(id.to_string()))?;
        let to = link.offered_by.clone();
        let control = ControlMessage::new(action, link.clone(), acting.without_fragment(), to);
        Ok(Operation { link, control })
    }

    /// §11.5 for a new offer by `offerer` of a record joining `sides`: the pending cap, then
    /// [`LinkTable::admit_record`]. `replacing` is an id not to count.
    fn admit_offer(
        &mut self,
        now: Timestamp,
        offerer: &Address,
        replacing: Option<&String>,
        sides: (&Address, &Address),
    ) -> Result<(), LinkRefusal> {
        if self.pending_offers(now, offerer, replacing) >= MAX_PENDING_OFFERS {
            return Err(LinkRefusal::TooManyPending);
        }
        self.admit_record(now, offerer, sides)
    }

    /// `offerer`'s pending offers that still count at `now` (unexpired, other than
    /// `replacing`), counted up to [`MAX_PENDING_OFFERS`], which is all the cap asks: the
    /// offerer's index holds them in expiry order, so the expired ones are skipped unread.
    fn pending_offers(
        &self,
        now: Timestamp,
        offerer: &Address,
        replacing: Option<&String>,
    ) -> usize {
        self.index
            .pending
            .get(offerer.key().as_str())
            .into_iter()
            .flat_map(|ids| ids.range((now, String::new())..))
            .filter(|(_, id)| Some(id) != replacing)
            .take(MAX_PENDING_OFFERS)
            .count()
    }

    /// Whether a new record joining `sides`, made by `actor`, may be stored: the table and both
    /// parties have room, then `actor`'s source is within [`OFFER_RATE`] (last, so a refused
    /// record spends no token).
    fn admit_record(
        &mut self,
        now: Timestamp,
        actor: &Address,
        sides: (&Address, &Address),
    ) -> Result<(), LinkRefusal> {
        self.has_room(sides, true)?;
        let source = self.source_of(actor);
        let allowed = match self.offer_rate.get_mut(&source) {
            Some(bucket) => bucket.try_take(now),
            None => {
                let mut bucket = OFFER_RATE.bucket(now);
                let ok = bucket.try_take(now);
                // An evicted source only restarts with a full bucket; nothing to count here.
                let _: MapInsert<_, _> = self.offer_rate.insert(source, bucket);
                ok
            }
        };
        if allowed {
            Ok(())
        } else {
            Err(LinkRefusal::RateLimited)
        }
    }

    /// Whether one more record joining `sides` fits: under [`MAX_LINKS`] and, when `per_party`,
    /// under [`MAX_LINKS_PER_PARTY`] for each side with the other's source.
    fn has_room(&self, sides: (&Address, &Address), per_party: bool) -> Result<(), LinkRefusal> {
        if self.links.len() >= MAX_LINKS {
            return Err(LinkRefusal::TableFull);
        }
        if per_party {
            for share in self.shares_of(sides) {
                if self.shares.get(&share).copied().unwrap_or(0) >= MAX_LINKS_PER_PARTY {
                    let (party, source) = share;
                    return Err(LinkRefusal::PartyFull { party, source });
                }
            }
        }
        Ok(())
    }

    /// The two (party key, counterpart source) shares a record joining `(a, b)` counts in.
    fn shares_of(&self, (a, b): (&Address, &Address)) -> [(String, String); 2] {
        [
            (a.key().to_string(), self.source_of(b)),
            (b.key().to_string(), self.source_of(a)),
        ]
    }

    /// The source an offer's rate is counted against (§11.5 "per source"): another realm as a
    /// whole, since its server vouches only for its realm (§1 "No transit"); a local offerer by
    /// its first namespace, the granularity identity has on a shared host (§5). A record's share
    /// of a party ([`MAX_LINKS_PER_PARTY`]) is by its other side's source the same way.
    fn source_of(&self, offerer: &Address) -> String {
        if offerer.realm() == &self.realm {
            format!("local:{}", offerer.first_segment())
        } else {
            format!("realm:{}", offerer.realm())
        }
    }

    /// A fresh id, `L` + 8 hex from `rng`, not held by the table.
    fn fresh_id(&self, rng: &mut dyn rand_core::CryptoRng) -> Result<String, LinkRefusal> {
        for _ in 0..MAX_ID_ATTEMPTS {
            let mut bytes = [0u8; ID_HEX_DIGITS / 2];
            rng.fill_bytes(&mut bytes);
            let mut id = String::with_capacity(1 + ID_HEX_DIGITS);
            id.push(ID_PREFIX);
            id.push_str(&hex::encode(&bytes));
            if !self.links.contains_key(&id) {
                return Ok(id);
            }
        }
        Err(LinkRefusal::NoFreeId)
    }

    /// Stores a new record or merges it into the one with its id (forward-only).
    fn store(&mut self, link: Link) -> Result<Stored, LinkRefusal> {
        self.put(link, true)
    }

    /// [`LinkTable::store`], applying [`MAX_LINKS_PER_PARTY`] to a new record when `per_party`.
    fn put(&mut self, link: Link, per_party: bool) -> Result<Stored, LinkRefusal> {
        if let Some(stored) = self.links.get(&link.id) {
            if stored.a != link.a || stored.b != link.b {
                return Err(LinkRefusal::NotTheParties(link.id));
            }
            let merged = self.change(&link.id, |stored| stored.merge(&link));
            return Ok(match merged {
                Some(Merge::Advanced) => Stored::Advanced,
                _ => Stored::Unchanged,
            });
        }
        self.has_room((&link.a, &link.b), per_party)?;
        for share in self.shares_of((&link.a, &link.b)) {
            *self.shares.entry(share).or_default() += 1;
        }
        self.index.add(&link);
        self.links.insert(link.id.clone(), link);
        Ok(Stored::New)
    }

    /// Changes the record with this id through `f`, keeping the index right: the only way a
    /// stored record changes. `None` when no record has the id.
    fn change<R>(&mut self, id: &str, f: impl FnOnce(&mut Link) -> R) -> Option<R> {
        let link = self.links.get_mut(id)?;
        self.index.remove(link);
        let out = f(link);
        self.index.add(link);
        Some(out)
    }
}

/// Whether a record joining the pair decides at `now` (§11.3): a revocation always, an active
/// link until it expires.
fn decides(link: &Link, now: Timestamp) -> bool {
    link.state == LinkState::Revoked || (link.state == LinkState::Active && !link.is_expired(now))
}

/// The preconditions on the two sides of a new link: the actor is an endpoint, and the peer is
/// neither the actor nor a namespace the actor lies beneath.
fn check_pair(actor: &Address, peer: &Address) -> Result<(), LinkRefusal> {
    if actor.is_namespace() {
        return Err(LinkRefusal::NotAnEndpoint);
    }
    if actor == peer || record::covers(peer, actor) {
        return Err(LinkRefusal::SelfLink);
    }
    Ok(())
}

fn check_label(label: Option<&str>) -> Result<(), LinkRefusal> {
    if label.is_some_and(|l| l.len() > MAX_LABEL_BYTES) {
        return Err(LinkRefusal::LabelTooLong);
    }
    Ok(())
}

/// The side of `link` that `acting` is not: `b` for `a`, else `a`.
fn other_side(link: &Link, acting: &Address) -> Address {
    if link.is_a(acting) {
        link.b.clone()
    } else {
        link.a.clone()
    }
}
