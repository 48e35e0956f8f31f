//! NAP-MESH (`shared/specs/003_ce770fdbd3db194d.txt`, draft PR #122): hop-limited publish and
//! subscribe over the user's **circle**, the devices of people the user deliberately paired with.
//!
//! - [`napplet`]: the napplet face, §3.1–§3.4 (`mesh.info|publish|subscribe|close|blobs`, their
//!   results and the deliveries `mesh.event|eose|closed`);
//! - [`member`]: the member wire (the spec leaves it to the shell; weft adopts the reference
//!   anchor's `["MESH", {"ttl", "qid", "budgetMs"}, <NIP-01 message>]`, docs/decisions.md);
//! - [`pairing`]: the circle itself, §1 and §5: mutual signed pairings, never the transport;
//! - [`invite`]: making a pairing on purpose from both sides, with an invite string carrying the
//!   inviter's npub and a one-time secret;
//! - [`shell`]: the [`Shell`] machine, §2.2 and §4: grants, ttl clamping, signing,
//!   keeping, floods (each id forwarded at most once, clamped by the shell's own cap, per-member
//!   decline), backlog requests bounded by a shrinking time budget, blob counts, dedupe;
//! - [`link`]: proving a circle key on a fresh link of any transport, before the shell hears of it;
//! - [`harness`]: N shells over in-memory links in virtual time, for tests and the simulator.
//!
//! Every number the spec leaves open is one constant here, with its row in docs/decisions.md.

pub mod harness;
pub mod invite;
pub mod link;
pub mod member;
pub mod napplet;
pub mod pairing;
pub mod shell;

pub use napplet::{Limits, Reply, Request};
pub use shell::{Input, NappletId, Output, Shell, ShellConfig};

/// Most sha256 hashes one `mesh.blobs` may ask about (§2.1); more is refused whole (§3.4).
pub const MAX_HASHES: usize = 64;

/// The default `publishTtl`, the user's cap on a publish's hops: the spec's examples' value (§3.3).
pub const DEFAULT_PUBLISH_TTL: u8 = 3;

/// The default `subscribeTtl`: lower than the publish cap, as §4 expects ("a flooded read costs
/// more than a flooded write"); the spec's examples' value (§3.3).
pub const DEFAULT_SUBSCRIBE_TTL: u8 = 2;

/// The shell's own forwarding clamp for events and backlog requests arriving from members (§4,
/// §5 "Amplification"): whatever budget a member's frame carries, this device passes it on with at
/// most this many hops left, less one. No napplet message reaches it. 3, as the reference anchor.
pub const FORWARD_CLAMP: u8 = 3;

/// How many event ids the flood remembers as seen (forwarded at most once, §4). 4 096, as the
/// reference anchor.
pub const SEEN_CAPACITY: usize = 4_096;

/// How long a seen id is remembered, in milliseconds: far longer than any flood takes to cross a
/// circle (hops × link latency), so a copy by a second path still finds it.
pub const SEEN_RETENTION_MS: u64 = 10 * 60 * 1_000;

/// A backlog request's whole time budget, in milliseconds (§4 "bound a backlog request in
/// time"): 10 s, as the reference anchor's backlog pull. Late answers are dropped.
pub const BACKLOG_BUDGET_MS: u64 = 10_000;

/// How much of the budget each hop spends, in milliseconds: a member forwards a request with its
/// budget less this, and not at all when less than this is left, so every hop's window lies
/// inside the one before and a request ends within [`BACKLOG_BUDGET_MS`] whatever its `ttl`.
pub const BACKLOG_HOP_COST_MS: u64 = 2_000;

/// How long one member has to answer one blob question, in milliseconds (§4: per-request time).
pub const BLOB_REQUEST_TIMEOUT_MS: u64 = 2_000;

/// How long one `mesh.blobs` call may take in all, in milliseconds (§4: per-call time): members
/// not answered by then count as not holding (§2.2).
pub const BLOB_CALL_TIMEOUT_MS: u64 = 5_000;

/// How long an answer about one member and one blob is remembered, in milliseconds (§4: "a
/// short memory of recent answers"): a napplet polling faster asks nobody again.
pub const BLOB_CACHE_MS: u64 = 30_000;

/// Most (member, blob) answers remembered.
pub const BLOB_CACHE_CAPACITY: usize = 4_096;

/// Most `mesh.blobs` calls in progress at once, all napplets together (§4: concurrency); a call
/// beyond it is answered with an error at once.
pub const MAX_BLOB_CALLS: usize = 4;

/// Most blob questions to members in flight at once; the rest of a call's questions wait for a
/// slot (and for the call's deadline).
pub const MAX_BLOB_REQUESTS_IN_FLIGHT: usize = 16;

/// Most live subscriptions per napplet.
pub const MAX_SUBS_PER_NAPPLET: usize = 32;

/// Most live subscriptions on this shell, all napplets together.
pub const MAX_SUBS: usize = 1_024;

/// Most event ids remembered per subscription for dedupe (§4 SHOULD); the oldest go first.
pub const SUB_DEDUPE_CAPACITY: usize = 1_024;

/// Most napplets holding a grant.
pub const MAX_GRANTS: usize = 1_024;

/// Most transport links tracked (members and strangers).
pub const MAX_LINKS: usize = 1_024;

/// Most members' backlog requests this device passes on and answers at once.
pub const MAX_RELAYED_QUERIES: usize = 256;

/// Most store reads and blob checks the shell waits on from its host at once.
pub const MAX_PENDING_LOOKUPS: usize = 256;

/// Most request ids remembered (each for its budget), so a request reaching a device by two
/// paths is answered and passed on once.
pub const QID_CAPACITY: usize = 4_096;

/// How fast one member may ask this device things that cost it work (backlog requests, blob
/// questions): a burst of 32, then 8 a second. Each request costs a store read, and a backlog
/// request is passed on to every other member, so a member asking faster is answered with an end
/// at once (`EOSE`, an empty `HAS`) and counted, never looked up or passed on.
pub const MEMBER_REQUEST_RATE: crate::core::BucketConfig = crate::core::BucketConfig::new(32, 8);

/// What a runtime says in words when a napplet is granted `mesh` (§5 "Acting as the user":
/// runtimes SHOULD say so at grant time, as for `relay`). One text, so every host says the same.
pub const GRANT_NOTICE: &str = "may now publish as you to all your circle members, and through \
     them to their members, repeatedly and with no prompt per event, until the grant is revoked";

/// Whether `kind` is ephemeral (NIP-01: 20000–29999): delivered, kept nowhere, never backlog.
pub fn is_ephemeral(kind: u16) -> bool {
    (20_000..30_000).contains(&kind)
}
