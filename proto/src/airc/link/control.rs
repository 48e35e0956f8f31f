//! Link control messages (AIRC §11.4) and the plain-text notices endpoints are sent (§11.4 step
//! 4, Appendix A.2).

use alloc::format;
use alloc::string::{String, ToString};

use serde_json::Value;

use super::LinkRefusal;
use super::record::{Link, to_secs};
use crate::airc::address::Address;
use crate::airc::frame::{Msg, Object};
use crate::core::Timestamp;

/// The `type` of a link control message (§11.4).
pub const CONTROL_TYPE: &str = "application/airc-link+json";

/// The header naming the link id, on control messages and notices (§11.4, Appendix A.2).
pub const HDR_LINK: &str = "airc-link";

/// The header naming the action, on notices (Appendix A.2); weft puts it on control messages
/// too, where it is unsigned routing metadata a reader may use without parsing the body.
pub const HDR_LINK_ACTION: &str = "airc-link-action";

/// The `type` of a notice (§11.4 "a plain text/plain message").
const NOTICE_TYPE: &str = "text/plain";

/// A control message's `action` (§11.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// A new pending link.
    Offer,
    /// The offeree made it active.
    Accept,
    /// The offeree declined it.
    Decline,
    /// A party revoked it.
    Revoke,
    /// A redeemed passport created it active (§12.5).
    Grant,
}

impl Action {
    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Offer => "offer",
            Self::Accept => "accept",
            Self::Decline => "decline",
            Self::Revoke => "revoke",
            Self::Grant => "grant",
        }
    }

    /// The action a wire string names, or `None`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "offer" => Some(Self::Offer),
            "accept" => Some(Self::Accept),
            "decline" => Some(Self::Decline),
            "revoke" => Some(Self::Revoke),
            "grant" => Some(Self::Grant),
            _ => None,
        }
    }

    /// The state the record carries after this action.
    pub const fn state(self) -> super::LinkState {
        use super::LinkState;
        match self {
            Self::Offer => LinkState::Pending,
            Self::Accept | Self::Grant => LinkState::Active,
            Self::Decline => LinkState::Declined,
            Self::Revoke => LinkState::Revoked,
        }
    }

    /// The audit event kind (§13): `link.offer`, `link.accept`, ….
    pub const fn event_kind(self) -> &'static str {
        match self {
            Self::Offer => "link.offer",
            Self::Accept => "link.accept",
            Self::Decline => "link.decline",
            Self::Revoke => "link.revoke",
            Self::Grant => "link.grant",
        }
    }
}

/// A control message to send (§11.4): `from` the acting endpoint, `to` the other one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlMessage {
    /// The action.
    pub action: Action,
    /// The record as the sender stored it.
    pub link: Link,
    /// The acting endpoint.
    pub from: Address,
    /// The other endpoint (a namespace reference when the link's `b` is one and `a` acts).
    pub to: Address,
}

impl ControlMessage {
    /// A control message.
    pub fn new(action: Action, link: Link, from: Address, to: Address) -> Self {
        Self {
            action,
            link,
            from,
            to,
        }
    }

    /// The body: `{"action": …, "link": <record>}` (§11.4).
    pub fn body(&self) -> String {
        let mut o = Object::new();
        o.insert("action".into(), Value::String(self.action.as_str().into()));
        o.insert("link".into(), Value::Object(self.link.to_object()));
        Value::Object(o).to_string()
    }

    /// The `msg` that carries it, with the id and `ts` the sending server chose.
    pub fn to_msg(&self, id: String, ts: Timestamp) -> Msg {
        Msg {
            id,
            from: self.from.key().to_string(),
            to: self.to.key().to_string(),
            ts: to_secs(ts),
            body: self.body(),
            kind: Some(CONTROL_TYPE.into()),
            re: None,
            ttl: None,
            via: None,
            hdr: Some(link_hdr(&self.link.id, self.action)),
        }
    }
}

/// A notice for a local endpoint about a link (§11.4 step 4, Appendix A.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// What happened.
    pub action: Action,
    /// The link id.
    pub link_id: String,
    /// The acting endpoint, the notice's `from`.
    pub from: Address,
    /// The local endpoint told.
    pub to: Address,
    /// The text.
    pub body: String,
}

impl Notice {
    /// A notice of `action` on `link` by `acting`, for `recipient` (for the same-realm case of
    /// Appendix A.2, where the server notifies directly instead of receiving a control message).
    pub fn new(action: Action, link: &Link, acting: &Address, recipient: &Address) -> Self {
        Self {
            action,
            link_id: link.id.clone(),
            from: acting.without_fragment(),
            to: recipient.without_fragment(),
            body: notice_text(action, link, acting, recipient),
        }
    }

    /// The `text/plain` `msg` that carries it, with `hdr` `airc-link` and `airc-link-action`.
    pub fn to_msg(&self, id: String, ts: Timestamp) -> Msg {
        Msg {
            id,
            from: self.from.key().to_string(),
            to: self.to.key().to_string(),
            ts: to_secs(ts),
            body: self.body.clone(),
            kind: Some(NOTICE_TYPE.into()),
            re: None,
            ttl: None,
            via: None,
            hdr: Some(link_hdr(&self.link_id, self.action)),
        }
    }
}

fn link_hdr(id: &str, action: Action) -> Object {
    let mut hdr = Object::new();
    hdr.insert(HDR_LINK.into(), Value::String(id.into()));
    hdr.insert(
        HDR_LINK_ACTION.into(),
        Value::String(action.as_str().into()),
    );
    hdr
}

/// Reads a control message: its action, record, `from` and `to`.
pub(super) fn parse(msg: &Msg) -> Result<(Action, Link, Address, Address), LinkRefusal> {
    if msg.kind.as_deref() != Some(CONTROL_TYPE) {
        return Err(LinkRefusal::BadControl(
            "type is not application/airc-link+json",
        ));
    }
    let from = Address::parse(&msg.from)
        .map_err(|_| LinkRefusal::BadControl("from is not an address"))?
        .without_fragment();
    let to = Address::parse(&msg.to)
        .map_err(|_| LinkRefusal::BadControl("to is not an address"))?
        .without_fragment();
    let body: Value =
        serde_json::from_str(&msg.body).map_err(|_| LinkRefusal::BadControl("body is not JSON"))?;
    let action = body
        .get("action")
        .and_then(Value::as_str)
        .and_then(Action::parse)
        .ok_or(LinkRefusal::BadControl("no known action"))?;
    let link =
        Link::from_value(body.get("link").unwrap_or(&Value::Null)).map_err(LinkRefusal::Invalid)?;
    if let Some(h) = msg.hdr.as_ref().and_then(|h| h.get(HDR_LINK))
        && h.as_str() != Some(link.id.as_str())
    {
        return Err(LinkRefusal::BadControl("airc-link names another link"));
    }
    Ok((action, link, from, to))
}

/// How `addr` is named to `reader`: its path in the reader's own realm (`alice/x`, `bob/` for a
/// namespace), its key otherwise, so a foreign endpoint never reads like a local peer (§16.4).
fn name(addr: &Address, reader: &Address) -> String {
    if addr.realm() == reader.realm() {
        let mut s = addr.segments().join("/");
        if addr.is_namespace() {
            s.push('/');
        }
        s
    } else {
        addr.key().to_string()
    }
}

/// The name of side `b` as the offer text uses it (`y` in Appendix A.2): an endpoint's last
/// segment, a namespace reference as its path.
fn b_name(link: &Link, reader: &Address) -> String {
    if link.b.is_namespace() {
        name(&link.b, reader)
    } else {
        link.b.segments().last().cloned().unwrap_or_default()
    }
}

/// ` (label)`, or nothing. The label is the offerer's text (§16.5): characters that could end
/// the bracketed notice or start a new line are replaced, so it cannot pass as the server's.
fn label_part(link: &Link) -> String {
    match &link.label {
        None => String::new(),
        Some(l) => {
            let shown: String = l
                .chars()
                .map(|c| match c {
                    '[' => '(',
                    ']' => ')',
                    c if c.is_control() => ' ',
                    c => c,
                })
                .collect();
            format!(" ({shown})")
        }
    }
}

/// The notice the issuing endpoint gets when its passport is redeemed (§12.5): who redeemed,
/// the link id, the uses left and how to revoke, in the shape of Appendix A.3.
pub fn redeemed_text(
    passport: &str,
    link: &Link,
    redeemer: &Address,
    endpoint: &Address,
    uses_left: u64,
) -> String {
    let who = name(redeemer, endpoint);
    let me = name(endpoint, endpoint);
    let label = label_part(link);
    let id = &link.id;
    format!(
        "[airc: {who} redeemed your passport {passport}{label}: link {id} is open, \
         {uses_left} uses left. Revoke the link: airc link revoke {id} --as {me}   \
         Revoke the passport: airc passport revoke {passport} --as {me}]"
    )
}

/// The notice text for `action` on `link` by `acting`, read by `recipient` (§11.4 step 4).
///
/// Offer and accept are Appendix A.2's texts byte for byte; decline and revoke follow the
/// accept's shape; a grant, like the offer, names the command available (revoke).
pub fn notice_text(action: Action, link: &Link, acting: &Address, recipient: &Address) -> String {
    let id = &link.id;
    let who = name(acting, recipient);
    let me = name(recipient, recipient);
    match action {
        Action::Offer => format!(
            "[airc: link offer {id} from {who}{label}: they ask to open a message link with {y}, \
             direction {dir}. Accept: airc link accept {id} --as {me}   \
             Decline: airc link decline {id} --as {me}]",
            label = label_part(link),
            y = b_name(link, recipient),
            dir = link.direction,
        ),
        Action::Accept => format!("[airc: link {id} with {who} accepted.]"),
        Action::Decline => format!("[airc: link {id} with {who} declined.]"),
        Action::Revoke => format!("[airc: link {id} with {who} revoked.]"),
        Action::Grant => format!(
            "[airc: link {id} with {who} granted{label}: a message link is open, direction \
             {dir}. Revoke: airc link revoke {id} --as {me}]",
            label = label_part(link),
            dir = link.direction,
        ),
    }
}

/// The notice when `auto_accept` took an offer (§11.4: "tells the endpoint the link opened
/// automatically").
pub(super) fn auto_accepted_text(link: &Link, acting: &Address, recipient: &Address) -> String {
    let id = &link.id;
    format!(
        "[airc: link offer {id} from {who}{label} was accepted automatically: a message link \
         with {y} is open, direction {dir}. Revoke: airc link revoke {id} --as {me}]",
        who = name(acting, recipient),
        label = label_part(link),
        y = b_name(link, recipient),
        dir = link.direction,
        me = name(recipient, recipient),
    )
}
