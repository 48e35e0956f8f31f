//! The frame catalogue (AIRC §4): one typed struct per frame type `t`, and [`Frame`], which is
//! any of them.
//!
//! Implements §3.2's frame rules above the line level ("every frame has a string field `t`",
//! "unknown fields MUST be ignored") and the fields of §4.1–§4.10. §4's field tables were lost
//! from the copy of the spec weft builds from; the fields here are reconstructed from the prose of
//! §4–§13 and the frames of Appendix A, and each struct says which are required. Where that
//! reconstruction had to decide something the spec does not say, the item's doc says so.
//!
//! Addresses stay strings here: checking them is the address module's job (§2), and a frame
//! with a bad address is still a well-formed frame (§6.2 answers it with an ack, not a close).
//!
//! Reading a line into a [`Frame`] is [`Frame::from_json`]; the newline framing around it is
//! [`super::framing`].

mod code;

pub use code::{AckCode, ErrorCode, PassportRefusal};

use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use super::framing::FramingError;
use crate::codec::object::read_named;

/// The wire protocol version a `hello` and `welcome` carry in `proto` (§4.1).
pub const PROTO: &str = "airc/0.1";

/// A JSON object, for the records frames carry (links §11.1, passports §12.1, a passport file
/// §12.2) whose fields belong to the modules that own them.
pub type Object = Map<String, Value>;

/// One frame, of any type.
///
/// Equality is structural (`ts` is a float, so there is no `Eq`). The two largest frames, which
/// are also the rarest, are boxed so that a `Frame` stays the size of a `msg`.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    /// `hello` (§4.1).
    Hello(Hello),
    /// `welcome` (§4.1).
    Welcome(Welcome),
    /// `msg` (§4.2).
    Msg(Msg),
    /// `bind` (§4.3).
    Bind(Bind),
    /// `bound` (§4.3).
    Bound(Bound),
    /// `ack` (§4.4).
    Ack(Ack),
    /// `ping` (§4.5).
    Ping(Ping),
    /// `pong` (§4.5).
    Pong(Pong),
    /// `link` (§4.6).
    Link(LinkRequest),
    /// `linked` (§4.6).
    Linked(Linked),
    /// `passport` (§4.7).
    Passport(PassportRequest),
    /// `passported` (§4.7).
    Passported(Box<Passported>),
    /// `error` (§4.8).
    Error(ErrorFrame),
    /// `subscribe` (§4.9).
    Subscribe(Subscribe),
    /// `subscribed` (§4.9).
    Subscribed(Subscribed),
    /// `event` (§4.9, §13).
    Event(Box<Event>),
    /// `stat` (§4.10).
    Stat(Stat),
    /// `stats` (§4.10).
    Stats(Stats),
    /// A well-formed frame whose `t` this catalogue does not define. On an established
    /// connection that is a protocol error: send `error` with [`UNKNOWN_TYPE`] and close
    /// (§3.2). Kept apart from a known `t` with bad fields, which is a [`FramingError`].
    Unknown {
        /// The frame's `t`.
        t: String,
    },
}

/// The `error` code weft sends for a frame whose `t` it does not know (§3.2 says "send error and
/// close" without naming the code; the type is valid JSON but not expected here).
pub const UNKNOWN_TYPE: ErrorCode = ErrorCode::UnexpectedFrame;

/// Which side a `hello` says it is (§3.1, §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A client, on the client face.
    Client,
    /// Another realm's server, on the peer face.
    Peer,
}

/// `hello`, sent first by the connecting side (§3.3, §4.1, §8.4).
///
/// Required: `proto`, `role`. A peer's hello also carries `realm`, `ts`, `nonce` and, when the
/// dialler has a key, `sig` (§8.4); those are optional here because a client's hello has none of
/// them, and the server machine checks them for the peer face.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// `proto` (R): the wire version, [`PROTO`].
    pub proto: String,
    /// `role` (R).
    pub role: Role,
    /// `agent`: software name and version, informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// `realm`: the dialling realm (peer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realm: Option<String>,
    /// `ts`: Unix seconds, an integer, as signed (§9.4) (peer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<u64>,
    /// `nonce`: random, echoed into the welcome's signature (peer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    /// `sig`: a sigstring over the hello's canonical string (§9.2, §9.4) (peer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
}

/// `welcome`, the accepting side's answer to a `hello` (§4.1, §5, §8.4).
///
/// Required: `realm`, `proto`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// `realm` (R): the accepting realm; a dialler drops the link if it is not the one resolved.
    pub realm: String,
    /// `proto` (R).
    pub proto: String,
    /// `ns`: the namespaces the client may act for, derived from the transport (§5) (client face).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ns: Option<Vec<String>>,
    /// `server`: software name and version, informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// `sig`: a sigstring over the welcome's canonical string (§9.4) (peer face, when keyed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
    /// `kid`: the signing key's id (§9.1) (peer face, when keyed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
}

/// `msg`, a message (§4.2, §6, §9.3).
///
/// Required: `id`, `from`, `to`, `ts`, `body` (§6.2 validates their types and answers a bad one
/// with ack `failed bad_address`, which is why a `msg` with bad fields surfaces its `id`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Msg {
    /// `id` (R): chosen by the origin; the key of dedupe (§7.3).
    pub id: String,
    /// `from` (R): a URI on the wire between servers; a client may send a local form (§2.3).
    pub from: String,
    /// `to` (R): likewise.
    pub to: String,
    /// `ts` (R): Unix seconds, a JSON number with a fraction (signed as `round(ts × 1000)`, §9.3).
    pub ts: f64,
    /// `body` (R): the text.
    pub body: String,
    /// `type`: a media type; `text/plain` when absent (§9.3).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `re`: the id this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub re: Option<String>,
    /// `ttl`: seconds from `ts` (default 86 400, §7.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u64>,
    /// `via`: the realms the message has left, in order (§6.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<Vec<String>>,
    /// `hdr`: headers; `sig` (§9.2), `airc-link` (§11.4) and others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hdr: Option<Object>,
}

/// Random bytes in a message id weft makes (§4.2 leaves the format to the origin; 128 bits make
/// a collision inside the 172 800 s duplicate window negligible).
pub const MESSAGE_ID_BYTES: usize = 16;

/// A fresh message id: [`MESSAGE_ID_BYTES`] random bytes from the injected RNG, as hex.
pub fn message_id(rng: &mut (impl rand_core::Rng + ?Sized)) -> String {
    let mut b = [0u8; MESSAGE_ID_BYTES];
    rng.fill_bytes(&mut b);
    crate::codec::hex::encode(&b)
}

/// The header a message's signatures travel in (§9.2).
pub const HDR_SIG: &str = "sig";

impl Msg {
    /// The sigstrings in `hdr.sig`, which is one string or a list of them (§9.2). Empty when
    /// there are none; entries that are not strings are skipped, since they cannot verify.
    pub fn sigstrings(&self) -> Vec<&str> {
        match self.hdr.as_ref().and_then(|h| h.get(HDR_SIG)) {
            Some(Value::String(s)) => alloc::vec![s.as_str()],
            Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        }
    }

    /// Sets `hdr.sig`: one sigstring as a string, several as a list (§9.2).
    pub fn set_sigstrings(&mut self, sigs: &[&str]) {
        let value = match sigs {
            [one] => Value::String((*one).to_string()),
            many => Value::Array(
                many.iter()
                    .map(|s| Value::String((*s).to_string()))
                    .collect(),
            ),
        };
        self.hdr
            .get_or_insert_with(Object::new)
            .insert(HDR_SIG.to_string(), value);
    }
}

/// `bind`, a client asking to receive for names (§4.3). Client face only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bind {
    /// `names` (R): patterns relative to the realm (§2.7).
    pub names: Vec<String>,
}

/// `bound`, the accepted absolute patterns (§4.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bound {
    /// `names` (R).
    pub names: Vec<String>,
}

/// An ack's `status` (§4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AckStatus {
    /// The destination endpoint, or its relay, has taken the message.
    Delivered,
    /// A server holds a copy and will keep trying until the ttl expires.
    Queued,
    /// The message will not be delivered.
    Failed,
}

/// `ack`, the one answer to every accepted `msg` (§4.4, §6.6).
///
/// Required: `id`, `status`. `code` is a string so that a hop relays a code it does not know
/// unchanged (§6.6); [`Ack::ack_code`] reads it against the registry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    /// `id` (R): the message's id.
    pub id: String,
    /// `status` (R).
    pub status: AckStatus,
    /// `code`: why, from §14.1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// `reason`: human-readable detail; `link:`-prefixed on a failed link (§6.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `by`: the address that decided, e.g. `airc://R/_resolver` (§6.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl Ack {
    /// An ack with a status and nothing else.
    pub fn new(id: impl Into<String>, status: AckStatus) -> Self {
        Self {
            id: id.into(),
            status,
            code: None,
            reason: None,
            by: None,
        }
    }

    /// An ack with a status and a registry code.
    pub fn with_code(id: impl Into<String>, status: AckStatus, code: AckCode) -> Self {
        Self {
            code: Some(code.as_str().to_string()),
            ..Self::new(id, status)
        }
    }

    /// The code, when present and in the registry.
    pub fn ack_code(&self) -> Option<AckCode> {
        self.code.as_deref().and_then(AckCode::parse)
    }
}

/// `ping` (§4.5). Either side may send it; the other MUST answer `pong` with the same `n`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ping {
    /// `n`: optional and echoed. Any JSON value is accepted and echoed verbatim, so a keepalive
    /// never closes a connection over its counter's type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<Value>,
}

/// `pong`, the answer to `ping` (§4.5).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pong {
    /// `n`: the ping's, echoed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<Value>,
}

impl Ping {
    /// The pong that answers this ping.
    pub fn pong(&self) -> Pong {
        Pong { n: self.n.clone() }
    }
}

/// `link`, a client managing links for an endpoint it may act for (§4.6, §11.2, Appendix A.2).
/// Client face only.
///
/// Required: `op`. `op` stays a string so that an unknown operation gets a `linked` refusal
/// rather than closing the connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkRequest {
    /// `op` (R): `offer`, `accept`, `decline`, `revoke`, `grant` or `list`.
    pub op: String,
    /// `as`: the acting endpoint; must lie inside the connection's namespaces (§5).
    #[serde(rename = "as", default, skip_serializing_if = "Option::is_none")]
    pub acting: Option<String>,
    /// `peer`: the other endpoint (offer, grant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// `id`: the link id (accept, decline, revoke).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `label` (offer, grant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// `direction` (offer, grant): `both`, `a-initiates` or `b-initiates` (§11.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<String>,
}

/// `linked`, the answer to `link` (§4.6, Appendix A.2).
///
/// Required: `ok`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Linked {
    /// `ok` (R).
    pub ok: bool,
    /// `link`: the record (§11.1) after the operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<Object>,
    /// `links`: the records (list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<Vec<Object>>,
    /// `delivery`: the ack status of the control message sent to the other side (§11.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<String>,
    /// `code`: why not, when `ok` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// `reason`: detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `passport`, a client managing passports (§4.7, §12.3, §12.4, §12.6, Appendix A.3). Client
/// face only.
///
/// Required: `op`, a string for the same reason as [`LinkRequest::op`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassportRequest {
    /// `op` (R): `new`, `list`, `redeem` or `revoke`.
    pub op: String,
    /// `as`: the issuing (new) or redeeming (redeem) endpoint (§5, §12.4).
    #[serde(rename = "as", default, skip_serializing_if = "Option::is_none")]
    pub acting: Option<String>,
    /// `passport`: any rendering of §12.2 (redeem), or a passport id (revoke).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passport: Option<String>,
    /// `id`: a passport id (revoke).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `label` (new).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// `to` (new): a pattern redeemers must match, stored as the record's `bind_to` (§12.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// `uses` (new): default 1, capped at 100 (§12.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<u64>,
    /// `ttl` (new): the passport's lifetime in seconds; default 7 days, capped at 90 (§12.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u64>,
    /// `direction` (new): of the link it creates; default `both` (§12.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<String>,
    /// `link_ttl` (new): the created link's lifetime in seconds; default 30 days (§12.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_ttl: Option<u64>,
    /// `and_links` (revoke): also revoke the links the passport created (§12.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub and_links: Option<bool>,
}

/// `passported`, the answer to `passport` (§4.7, Appendix A.3).
///
/// Required: `ok`. Which other fields appear depends on the op: `passport`, `line`, `file`, `url`
/// for new; `passports` for list; `status`, `reason`, `code`, `link` for redeem; `passport`,
/// `revoked_links` for revoke.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Passported {
    /// `ok` (R).
    pub ok: bool,
    /// `passport`: the record (§12.1) without its token hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passport: Option<Object>,
    /// `line`: the line rendering (§12.2), shown once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
    /// `file`: the file rendering (§12.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<Object>,
    /// `url`: the URL rendering, when the realm configures a web base (§12.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `passports`: the records (list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passports: Option<Vec<Object>>,
    /// `status`: the redemption message's ack status (redeem).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AckStatus>,
    /// `reason`: the ack's reason (redeem), or why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `code`: the ack's code (redeem), or why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// `link`: the granted link's record (redeem, on success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<Object>,
    /// `revoked_links`: the ids of the links revoked with the passport (revoke).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_links: Option<Vec<String>>,
}

/// `error`, sent before closing a connection for a protocol violation (§4.8).
///
/// Required: `code`. `code` is a string so that a code from a newer peer still reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorFrame {
    /// `code` (R): from §14.2.
    pub code: String,
    /// `reason`: human-readable detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ErrorFrame {
    /// An error frame with a registry code and a reason.
    pub fn new(code: ErrorCode, reason: impl Into<String>) -> Self {
        Self {
            code: code.as_str().to_string(),
            reason: Some(reason.into()),
        }
    }

    /// The code, when in the registry.
    pub fn error_code(&self) -> Option<ErrorCode> {
        ErrorCode::parse(&self.code)
    }
}

/// `subscribe`, asking for the live audit stream (§4.9, §13). Client face only.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscribe {
    /// `kinds`: full kinds or prefixes (`msg`); absent means every kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<String>>,
}

/// The namespaces a subscriber sees (§4.9).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ScopeWire", into = "ScopeWire")]
pub enum Scope {
    /// `"all"`: an administrator.
    All,
    /// A list of namespaces.
    Namespaces(Vec<String>),
}

/// The two JSON shapes of a scope.
#[derive(Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum ScopeWire {
    Word(String),
    List(Vec<String>),
}

/// The one word a scope may be instead of a list.
const SCOPE_ALL: &str = "all";

impl TryFrom<ScopeWire> for Scope {
    type Error = &'static str;
    fn try_from(w: ScopeWire) -> Result<Self, Self::Error> {
        match w {
            ScopeWire::Word(s) if s == SCOPE_ALL => Ok(Scope::All),
            ScopeWire::Word(_) => Err("scope must be a list of namespaces or \"all\""),
            ScopeWire::List(l) => Ok(Scope::Namespaces(l)),
        }
    }
}

impl From<Scope> for ScopeWire {
    fn from(s: Scope) -> Self {
        match s {
            Scope::All => ScopeWire::Word(SCOPE_ALL.to_string()),
            Scope::Namespaces(l) => ScopeWire::List(l),
        }
    }
}

/// `subscribed`, the answer to `subscribe` (§4.9).
///
/// Required: `kinds`, `scope`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscribed {
    /// `kinds` (R): the filter in force.
    pub kinds: Vec<String>,
    /// `scope` (R).
    pub scope: Scope,
}

/// `event`, one audit record (§4.9, §13). Never carries a body.
///
/// Required: `ts`, `kind`; the rest "as applicable" (§13).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// `ts` (R): Unix seconds, fractional.
    pub ts: f64,
    /// `kind` (R): e.g. `msg.delivered`, `link.offer`, `peer.up` (§13).
    pub kind: String,
    /// `id`: the message id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `from`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// `to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// `status`: an ack status, or `failed` on a refused redemption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// `code`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// `reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `by`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// `hop`: `client`, `peer`, `local` or `spool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hop: Option<String>,
    /// `type`: the message type, when not `text/plain`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind_of_msg: Option<String>,
    /// `re`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub re: Option<String>,
    /// `bytes`: the body's length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// `link`: a link id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// `passport`: a passport id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passport: Option<String>,
    /// `endpoint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// `realm`: a peer realm (`peer.up`, `peer.down`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realm: Option<String>,
    /// `authenticated`: whether a peer link is (§8.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authenticated: Option<bool>,
    /// `outbound`: whether this side dialled the peer link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbound: Option<bool>,
    /// `label`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// `state`: a link's or passport's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// `uses`: a passport's uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<u64>,
    /// `uses_left`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses_left: Option<u64>,
}

/// `stat`, asking for counters (§4.10). Servers MAY restrict it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {}

/// `stats`, implementation-defined counters (§4.10): every field but `t`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// The counters.
    #[serde(flatten)]
    pub counters: Object,
}

/// The `t` of every frame type the catalogue defines.
pub const TYPES: &[&str] = &[
    "hello",
    "welcome",
    "msg",
    "bind",
    "bound",
    "ack",
    "ping",
    "pong",
    "link",
    "linked",
    "passport",
    "passported",
    "error",
    "subscribe",
    "subscribed",
    "event",
    "stat",
    "stats",
];

impl Frame {
    /// The frame's `t`.
    pub fn t(&self) -> &str {
        match self {
            Frame::Hello(_) => "hello",
            Frame::Welcome(_) => "welcome",
            Frame::Msg(_) => "msg",
            Frame::Bind(_) => "bind",
            Frame::Bound(_) => "bound",
            Frame::Ack(_) => "ack",
            Frame::Ping(_) => "ping",
            Frame::Pong(_) => "pong",
            Frame::Link(_) => "link",
            Frame::Linked(_) => "linked",
            Frame::Passport(_) => "passport",
            Frame::Passported(_) => "passported",
            Frame::Error(_) => "error",
            Frame::Subscribe(_) => "subscribe",
            Frame::Subscribed(_) => "subscribed",
            Frame::Event(_) => "event",
            Frame::Stat(_) => "stat",
            Frame::Stats(_) => "stats",
            Frame::Unknown { t } => t,
        }
    }

    /// Reads a parsed JSON value as a frame (§3.2): it must be an object with a string `t`; a
    /// known `t` must have its required fields with the right types; unknown fields are ignored;
    /// an unknown `t` is [`Frame::Unknown`].
    pub fn from_json(value: &Value) -> Result<Frame, FramingError> {
        let Value::Object(obj) = value else {
            return Err(FramingError::NotObject);
        };
        let Some(Value::String(t)) = obj.get("t") else {
            return Err(FramingError::MissingType);
        };
        let t = t.as_str();
        Ok(match t {
            "hello" => Frame::Hello(fields(t, value)?),
            "welcome" => Frame::Welcome(fields(t, value)?),
            "msg" => Frame::Msg(fields(t, value)?),
            "bind" => Frame::Bind(fields(t, value)?),
            "bound" => Frame::Bound(fields(t, value)?),
            "ack" => Frame::Ack(fields(t, value)?),
            "ping" => Frame::Ping(fields(t, value)?),
            "pong" => Frame::Pong(fields(t, value)?),
            "link" => Frame::Link(fields(t, value)?),
            "linked" => Frame::Linked(fields(t, value)?),
            "passport" => Frame::Passport(fields(t, value)?),
            "passported" => Frame::Passported(Box::new(fields(t, value)?)),
            "error" => Frame::Error(fields(t, value)?),
            "subscribe" => Frame::Subscribe(fields(t, value)?),
            "subscribed" => Frame::Subscribed(fields(t, value)?),
            "event" => Frame::Event(Box::new(fields(t, value)?)),
            "stat" => Frame::Stat(fields(t, value)?),
            "stats" => {
                let mut stats: Stats = fields(t, value)?;
                // `flatten` collects every field, the tag included; the tag is not a counter.
                stats.counters.remove("t");
                Frame::Stats(stats)
            }
            _ => Frame::Unknown { t: t.to_string() },
        })
    }
}

/// The tag alone, borrowed: a `t` with escapes fails to borrow and takes the general path.
#[derive(Deserialize)]
struct Tag<'a> {
    t: &'a str,
}

/// A line's `t`, read without building the frame, when the line is plainly one frame of that
/// type: a JSON object with exactly one `t`, a string without escapes. `None` says nothing (the
/// line may still read as a frame, or not); `Some(t)` means
/// [`decode_line`](crate::airc::framing::decode_line) gives a frame of type `t` or an error,
/// never a frame of another type.
pub fn plain_type(text: &str) -> Option<&str> {
    // A derived struct also reads a JSON array; the general path refuses one.
    if text
        .trim_start_matches([' ', '\t', '\r', '\n'])
        .as_bytes()
        .first()
        != Some(&b'{')
    {
        return None;
    }
    serde_json::from_str::<Tag>(text).ok().map(|tag| tag.t)
}

impl Frame {
    /// The frames that carry nearly all traffic (`msg`, `ack`) read straight from their text,
    /// without the `Value` tree [`Frame::from_json`] reads, which costs an allocation per field.
    /// `None` for every other frame and for any text this path could read differently from
    /// the general one (not an object, a field given twice, any error), so that path decides
    /// those, with its own errors. [`crate::airc::framing::decode_line`] is the way to read a
    /// line; this is public so that a fuzz target can hold the two paths to the same answer.
    pub fn from_text_common(text: &str) -> Option<Frame> {
        // Only the members the frame names (and `t`): serde would skip any other unchecked,
        // where the general path refuses a bad one (codec::object::read_named).
        let bytes = text.as_bytes();
        match plain_type(text)? {
            "msg" => read_named(bytes, &["t"]).map(Frame::Msg),
            "ack" => read_named(bytes, &["t"]).map(Frame::Ack),
            _ => None,
        }
    }
}

/// Reads a known frame type's fields, reporting a failure with the frame's `t` and, because a
/// `msg` with bad fields is answered by an ack (§6.2), its `id` when that is a string.
fn fields<T: DeserializeOwned>(t: &str, value: &Value) -> Result<T, FramingError> {
    T::deserialize(value).map_err(|e| FramingError::BadFields {
        t: t.to_string(),
        id: value.get("id").and_then(Value::as_str).map(str::to_string),
        detail: bounded(e.to_string()),
    })
}

/// The longest `detail` a [`FramingError::BadFields`] keeps, in bytes.
pub const MAX_DETAIL_BYTES: usize = 256;

/// Cuts a detail to [`MAX_DETAIL_BYTES`] on a character boundary. serde's messages quote the
/// offending value, which may be most of a megabyte; echoed whole into an `error` frame's reason
/// it could make that frame too large to send.
fn bounded(mut detail: String) -> String {
    if detail.len() > MAX_DETAIL_BYTES {
        let mut end = MAX_DETAIL_BYTES;
        while !detail.is_char_boundary(end) {
            end -= 1;
        }
        detail.truncate(end);
    }
    detail
}

/// A frame's fields with its `t` first, which is how every frame is written.
#[derive(Serialize)]
struct Tagged<'a, T: Serialize> {
    t: &'a str,
    #[serde(flatten)]
    fields: &'a T,
}

impl Serialize for Frame {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        fn tagged<S: Serializer, T: Serialize>(
            s: S,
            t: &str,
            fields: &T,
        ) -> Result<S::Ok, S::Error> {
            Tagged { t, fields }.serialize(s)
        }
        let t = self.t();
        match self {
            Frame::Hello(f) => tagged(s, t, f),
            Frame::Welcome(f) => tagged(s, t, f),
            Frame::Msg(f) => tagged(s, t, f),
            Frame::Bind(f) => tagged(s, t, f),
            Frame::Bound(f) => tagged(s, t, f),
            Frame::Ack(f) => tagged(s, t, f),
            Frame::Ping(f) => tagged(s, t, f),
            Frame::Pong(f) => tagged(s, t, f),
            Frame::Link(f) => tagged(s, t, f),
            Frame::Linked(f) => tagged(s, t, f),
            Frame::Passport(f) => tagged(s, t, f),
            Frame::Passported(f) => tagged(s, t, f),
            Frame::Error(f) => tagged(s, t, f),
            Frame::Subscribe(f) => tagged(s, t, f),
            Frame::Subscribed(f) => tagged(s, t, f),
            Frame::Event(f) => tagged(s, t, f),
            Frame::Stat(f) => tagged(s, t, f),
            Frame::Stats(f) => {
                // A counter named `t` would write the tag twice; the tag wins.
                let mut counters = f.counters.clone();
                counters.remove("t");
                tagged(s, t, &Stats { counters })
            }
            Frame::Unknown { .. } => tagged(s, t, &Stat {}),
        }
    }
}

#[cfg(test)]
mod tests;
