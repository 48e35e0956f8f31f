//! The `weft airc` client commands, one function each, over a connected [`Client`]: each sends
//! its §4 frame, prints the server's answer frame as one JSON line on `out`, and says whether the
//! server refused ([`Refusal`]) so the caller can exit non-zero with the code and reason.
//!
//! `send` → `msg`/`ack` (§4.2, §4.4), `listen` → `bind`/`bound` then `msg`s acked `delivered`
//! (§4.3) and framed for the reader as §16.4 asks ([`listen_line`]), `link` → `link`/`linked`
//! (§4.6, §11), `passport` → `passport`/`passported` (§4.7, §12), `subscribe` →
//! `subscribe`/`subscribed` then `event`s (§4.9, §13), `stat` → `stat`/`stats` (§4.10).

use std::io::{self, Write};

use serde_json::{Map, Value};
use weft_proto::airc::address::Namespace;
use weft_proto::airc::client::foreign;
use weft_proto::airc::client::{Reply, Request};
use weft_proto::airc::frame::{AckStatus, Frame, LinkRequest, Msg, PassportRequest, Subscribe};

use super::{Client, Refusal, frame_line, protocol};

/// The exit status of a command the server refused: a `failed` ack, `ok: false`, an `error`.
pub const EXIT_REFUSED: u8 = 1;

/// The exit status of a command that could not ask, or could not read the answer: no server at
/// the socket, a closed connection, a frame that does not parse. (2 is a usage error's, clap's.)
pub const EXIT_UNREACHABLE: u8 = 3;

/// A command's result: `Ok(Err(refusal))` when the server said no, `Err` when it could not be
/// asked or its answer could not be read.
pub type Answered = io::Result<Result<(), Refusal>>;

fn print(out: &mut dyn Write, line: &str) -> io::Result<()> {
    writeln!(out, "{line}")?;
    // Lines go out as they come: a reader on a pipe must not wait for a buffer to fill.
    out.flush()
}

/// `send`: the message, then its one ack printed. `failed` is a refusal; `delivered` and
/// `queued` (a server holds a copy, §4.4) are success.
pub fn send(c: &mut Client, msg: Msg, out: &mut dyn Write) -> Answered {
    let ack = match c.request_ack(msg)? {
        Ok(ack) => ack,
        Err(r) => return Ok(Err(r)),
    };
    print(out, &frame_line(&Frame::Ack(ack.clone())))?;
    Ok(match ack.status {
        AckStatus::Failed => Err(Refusal::new(ack.code.as_deref(), ack.reason.as_deref())),
        AckStatus::Delivered | AckStatus::Queued => Ok(()),
    })
}

/// The JSON line `listen` prints for `m`, read by the holder of `namespaces`: the `msg` frame's
/// fields as they came, plus `foreign`, `sender` and `text` as [`foreign::frame`] frames them.
/// An agent reads `text` and `sender`; `body` and `from` stay as the wire had them.
pub fn listen_line(m: &Msg, namespaces: &[Namespace]) -> Value {
    let framed = foreign::frame(m, namespaces);
    let mut line: Map<String, Value> =
        serde_json::from_str(&frame_line(&Frame::Msg(m.clone()))).unwrap_or_default();
    line.insert("foreign".into(), framed.foreign.into());
    line.insert("sender".into(), framed.sender.into());
    line.insert("text".into(), framed.text.into());
    Value::Object(line)
}

/// `listen`: binds `names` (the absolute patterns go to `err`), then prints each message as
/// [`listen_line`] and acks it `delivered`; stops after `count` messages if given.
pub fn listen(
    c: &mut Client,
    names: Vec<String>,
    count: Option<u64>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Answered {
    let bound = match c.request_bind(names)? {
        Ok(b) => b,
        Err(r) => return Ok(Err(r)),
    };
    for pattern in bound {
        writeln!(err, "bound {pattern}")?;
    }
    err.flush()?;
    let namespaces = foreign::namespaces(c.welcome.ns.as_deref().unwrap_or_default());
    let mut n = 0;
    while count.is_none_or(|c| n < c) {
        // Printed before the ack: a message is `delivered` only once the reader has it.
        c.receive_with(|m| print(out, &listen_line(m, &namespaces).to_string()))?;
        n += 1;
    }
    Ok(Ok(()))
}

/// A reply of another kind than asked: the machine pairs replies with requests by kind, so
/// this is a reply it should not have given.
fn mismatched(reply: &Reply) -> io::Error {
    protocol(format!("a reply of another kind than asked: {reply:?}"))
}

/// `link`: the request, then `linked` printed. `ok: false` is a refusal, and so is a
/// `delivery` of `failed`: the change is stored here but the other side will never hear of it.
pub fn link(c: &mut Client, req: LinkRequest, out: &mut dyn Write) -> Answered {
    let linked = match c.request(Request::Link(req))? {
        Ok(Reply::Linked(l)) => l,
        Ok(other) => return Err(mismatched(&other)),
        Err(r) => return Ok(Err(r)),
    };
    print(out, &frame_line(&Frame::Linked(linked.clone())))?;
    let failed = !linked.ok || linked.delivery.as_deref() == Some("failed");
    Ok(if failed {
        Err(Refusal::new(
            linked.code.as_deref(),
            linked.reason.as_deref(),
        ))
    } else {
        Ok(())
    })
}

/// `passport`: the request, then `passported` printed; `ok: false` is a refusal (for a
/// redemption, its `failed` ack, §12.4).
pub fn passport(c: &mut Client, req: PassportRequest, out: &mut dyn Write) -> Answered {
    let p = match c.request(Request::Passport(req))? {
        Ok(Reply::Passported(p)) => p,
        Ok(other) => return Err(mismatched(&other)),
        Err(r) => return Ok(Err(r)),
    };
    print(out, &frame_line(&Frame::Passported(p.clone())))?;
    Ok(if p.ok {
        Ok(())
    } else {
        Err(Refusal::new(p.code.as_deref(), p.reason.as_deref()))
    })
}

/// `subscribe`: the request, `subscribed` on `err`, then every `event` as a JSON line on `out`,
/// until the server closes or `count` events were printed.
pub fn subscribe(
    c: &mut Client,
    kinds: Vec<String>,
    count: Option<u64>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Answered {
    let kinds = (!kinds.is_empty()).then_some(kinds);
    let subscribed = match c.request(Request::Subscribe(Subscribe { kinds }))? {
        Ok(Reply::Subscribed(s)) => s,
        Ok(other) => return Err(mismatched(&other)),
        Err(r) => return Ok(Err(r)),
    };
    print(err, &frame_line(&Frame::Subscribed(subscribed)))?;
    c.wait_forever()?;
    let mut n = 0;
    while count.is_none_or(|c| n < c) {
        match c.event()? {
            Ok(e) => print(out, &frame_line(&Frame::Event(e)))?,
            Err(r) => return Ok(Err(r)),
        }
        n += 1;
    }
    Ok(Ok(()))
}

/// `stat`: the server's counters (§4.10), printed.
pub fn stat(c: &mut Client, out: &mut dyn Write) -> Answered {
    match c.request(Request::Stat)? {
        Ok(Reply::Stats(s)) => print(out, &frame_line(&Frame::Stats(s))).map(Ok),
        Ok(other) => Err(mismatched(&other)),
        Err(r) => Ok(Err(r)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_foreign_message_is_printed_with_its_framing_and_the_wire_fields_as_they_came() {
        let m = super::super::new_message(
            "m1".into(),
            "airc://example.com/ops/bot",
            "airc://example.com/alice/inbox",
            "hello",
            None,
        );
        let line = listen_line(&m, &foreign::namespaces(&["alice".into(), "ops".into()]));
        assert_eq!(line["t"], "msg");
        assert_eq!(line["foreign"], true);
        assert_eq!(line["sender"], "airc://example.com/ops/bot");
        assert_eq!(line["body"], "hello", "the wire's body is kept as it came");
        assert_eq!(line["from"], "airc://example.com/ops/bot");
        let text = line["text"].as_str().unwrap();
        assert_eq!(
            text.lines().next().unwrap(),
            foreign::banner("airc://example.com/ops/bot")
        );
        assert!(text.ends_with("\nhello"));
    }
}
