//! AIRC — draft 0.2, wire `airc/0.1` (`shared/specs/001_52d21deae8bd4dc4.txt`).
//!
//! Implemented so far:
//!
//! - [`audit`]: §4.9 and §13, the audit stream's kinds, subscriptions, scoping and the bound on
//!   what one subscriber is handed;
//! - [`address`]: §2.1–§2.6, parsing the network and local forms, the canonical form and address
//!   key, local-form resolution by face, delegation and reserved names;
//! - [`pattern`]: §2.7, the patterns binds and policy rules use, and their matching algorithm;
//! - [`framing`]: §3.2, newline-delimited JSON frames from a byte stream and back, with the 1 MiB
//!   limit;
//! - [`frame`]: §4, the frame catalogue, typed, and §14's registry of ack and error codes;
//! - [`bind`]: §4.3, binds and the resolving-client selection;
//! - [`client`]: the client machine: §3.3 hello first, welcome checks, reconnect with backoff and
//!   re-bind; §4 messages with fresh ids and one ack each, requests and their replies;
//! - [`discovery`]: §8.1 locating an authority (direct, static, SRV then `airc.<host>` then
//!   `<host>`, RFC 2782 ordering) and §8.2 published keys from `_airc.<realm>` TXT records, with
//!   the TTL-clamped, bounded cache; the host resolves DNS and feeds the answers in;
//! - [`spool`]: §7, the spool per destination key, expiry and duplicate suppression, and §6.6's
//!   settlement of late acks;
//! - [`signing`]: §9, the canonical strings of messages, hellos and welcomes, their Ed25519
//!   signatures, and §9.2's rule for verifying them;
//! - [`policy`]: §10, policy rules, §10.2's evaluation with the link decision handed in, and
//!   §10.3's bounded reply window;
//! - [`link`]: §11, links: the record (§11.1), the operations and their preconditions (§11.2),
//!   the decision rule policy calls (§11.3), control messages between realms and the notices
//!   they produce (§11.4), and the admission caps (§11.5);
//! - [`passport`]: §12.2, the three renderings of a passport (line, URL, file) and §12.1's token
//!   hash; [`passport::book`] the issuer's records, issuance, redemption checks and revocation
//!   (§12.1, §12.3, §12.5, §12.6);
//! - [`server`]: the realm server machine: §3.3 lifecycle, §4.3 binds, §6 routing with one ack
//!   per message and policy, §6.6 ack timeouts, §7 the spool, §8.4 peer links, §11 links, §12
//!   passports and §13 the audit stream;
//! - [`client`]: the client machine: §3.3 hello first, ping, reconnect with backoff and re-bind,
//!   §4.2–§4.4 sending with fresh ids and one ack per id.

pub mod address;
pub mod audit;
pub mod bind;
pub mod client;
pub mod discovery;
pub mod frame;
pub mod framing;
pub mod link;
pub mod passport;
pub mod pattern;
pub mod policy;
pub mod server;
pub mod signing;
pub mod spool;
