//! The relay messages that carry nearly all traffic, read straight from their text: `mail` and
//! `pong` on the client, `drop`, `fetch` and `ping` on the relay.
//!
//! The general path reads a frame into a `serde_json::Value` tree, an allocation per member, and
//! then the members from the tree. Here a frame is read into borrowed strings and numbers, and
//! the same checks ([`Topic::parse`], [`Blob::parse`](super::Blob::parse), `safe_integer`,
//! `check_seqs`) are applied.
//! These readers answer only where they are sure to answer as the general path would: a field
//! given twice (the tree keeps the last), an unknown field (serde skips it without the checks a
//! tree makes: nesting depth, numbers in range, escapes naming characters), `null` where the
//! general path wants a value, a float such as `1.0`, anything not an object and any error are
//! left to the general path, which gives its own answer or error. A `ping` or `pong` is taken
//! only as this crate writes it, byte for byte; any other spelling goes the general way.

use alloc::borrow::Cow;
use alloc::vec::Vec;

use serde::Deserialize;

use super::{
    ClientFrame, ItemRef, Items, MailRef, PING_TEXT, PONG_TEXT, RelayFrame, RelayWireError,
    TOPIC_CHARS, Topic, Ttl, check_blob, safe_integer,
};
use crate::codec::object::{self, Object, Text, integer_as_written, present};

/// A client → relay message; which members count depends on `type`, as on the general path.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientWire<'a> {
    #[serde(borrow, rename = "type")]
    kind: Text<'a>,
    #[serde(borrow)]
    topic: Text<'a>,
    #[serde(default, deserialize_with = "present")]
    after: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    watch: Option<bool>,
    #[serde(borrow, default, deserialize_with = "present")]
    blob: Option<Text<'a>>,
    #[serde(default, deserialize_with = "present")]
    ttl: Option<u64>,
}

/// A `mail` message.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MailWire<'a> {
    #[serde(borrow, rename = "type")]
    kind: Text<'a>,
    #[serde(borrow)]
    topic: Text<'a>,
    #[serde(borrow)]
    items: Vec<Object<ItemWire<'a>>>,
    #[serde(default, deserialize_with = "present")]
    more: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ItemWire<'a> {
    #[serde(borrow)]
    blob: Text<'a>,
    #[serde(default, deserialize_with = "present")]
    seq: Option<u64>,
}

/// See [`super::ClientMessage::from_text_common`].
pub(super) fn client_frame(text: &str) -> Option<ClientFrame<'_>> {
    if text == PING_TEXT {
        return Some(ClientFrame::Ping);
    }
    if let Some(drop) = drop_as_written(text) {
        return Some(drop);
    }
    let wire: ClientWire<'_> = object::read(text.as_bytes())?;
    let topic = Topic::parse(&wire.topic.0).ok()?;
    let optional = |n: Option<u64>, error| n.map(|n| safe_integer(Some(n), error)).transpose();
    match wire.kind.0.as_ref() {
        "fetch" => Some(ClientFrame::Fetch {
            topic,
            after: optional(wire.after, RelayWireError::BadAfter)
                .ok()?
                .unwrap_or(0),
            watch: wire.watch.unwrap_or(false),
        }),
        "drop" => Some(ClientFrame::Drop {
            topic,
            blob: checked_blob(wire.blob?.0)?,
            ttl: Ttl::from_millis(wire.ttl?).ok()?,
        }),
        _ => None,
    }
}

/// See [`super::RelayMessage::from_text_common`]; a `mail`'s blobs are decoded into `bytes` when
/// given (see [`MailRef::checked`]).
pub(super) fn relay_frame<'a>(
    text: &'a str,
    bytes: &mut Option<&'a mut Vec<u8>>,
) -> Option<RelayFrame<'a>> {
    if text == PONG_TEXT {
        return Some(RelayFrame::Pong);
    }
    if let Some(mail) = mail_as_written(text, bytes) {
        return Some(RelayFrame::Mail(mail));
    }
    let wire: MailWire<'_> = object::read(text.as_bytes())?;
    if wire.kind.0 != "mail" {
        return None;
    }
    let items = wire
        .items
        .into_iter()
        .map(|Object(item)| ItemRef::read(item.blob.0, item.seq))
        .collect();
    MailRef::checked(wire.topic.0, items, wire.more.unwrap_or(false), bytes)
        .ok()
        .map(RelayFrame::Mail)
}

/// A `mail` exactly as [`super::RelayMessage::to_text`] writes it (every relay of this crate),
/// read by position with no JSON parser: a relay's blob is most of each frame, and a parser looks
/// at every one of its bytes for escapes twice over. Only base64url text passes the checks that
/// follow, so a string here holds no escape and no control character, and is what a JSON parser
/// would read; any other spelling, or a check failing, is left to the paths above.
///
/// The topic and a lone item are found from their ends rather than by looking for the quote that
/// closes them: a topic that passes its check is [`TOPIC_CHARS`] long, and a blob that passes
/// its check holds no quote, so where the checks pass the blob ends where the search would have
/// stopped, without a pass over it before its decode (a pushed blob is nearly every frame).
fn mail_as_written<'a>(text: &'a str, bytes: &mut Option<&'a mut Vec<u8>>) -> Option<MailRef<'a>> {
    let rest = text.strip_prefix(r#"{"type":"mail","topic":""#)?;
    let topic = rest.get(..TOPIC_CHARS)?;
    let rest = rest.get(TOPIC_CHARS..)?.strip_prefix(r#"","items":["#)?;
    let (items, more) = match rest.strip_suffix(r#"],"more":false}"#) {
        Some(items) => (items, false),
        None => (rest.strip_suffix(r#"],"more":true}"#)?, true),
    };
    if let Some(item) = only_item(items) {
        let mut one = Items::default();
        one.push(item);
        if let Ok(mail) = MailRef::checked(topic.into(), one, more, bytes) {
            return Some(mail);
        }
    }
    // Several items (a page), or a lone one that failed its checks: read front to back.
    MailRef::checked(topic.into(), items_as_written(items)?, more, bytes).ok()
}

/// The one item `items` (the text between a `mail`'s brackets) would be, read from its end: the
/// blob is all between `{"blob":"` and the closing quote, so it is the item only if its check
/// passes (several items put quotes in it).
fn only_item(items: &str) -> Option<ItemRef<'_>> {
    let body = items.strip_prefix(r#"{"blob":""#)?.strip_suffix('}')?;
    let digits = body.bytes().rev().take_while(u8::is_ascii_digit).count();
    let (head, number) = body.split_at(body.len() - digits);
    let (blob, seq) = match head.strip_suffix(r#","seq":"#) {
        Some(blob) if digits > 0 => {
            let (n, after) = integer_as_written(number)?;
            debug_assert!(after.is_empty());
            (blob, Some(n))
        }
        _ => (body, None),
    };
    Some(ItemRef::read(blob.strip_suffix('"')?.into(), seq))
}

/// The items of `items` (the text between a `mail`'s brackets, all of it), front to back.
fn items_as_written(mut rest: &str) -> Option<Items<'_>> {
    let mut items = Items::default();
    if rest.is_empty() {
        return Some(items);
    }
    loop {
        let (blob, after) = rest.strip_prefix(r#"{"blob":""#)?.split_once('"')?;
        let (seq, after) = match after.strip_prefix(r#","seq":"#) {
            Some(number) => {
                let (n, after) = integer_as_written(number)?;
                (Some(n), after)
            }
            None => (None, after),
        };
        items.push(ItemRef::read(blob.into(), seq));
        let after = after.strip_prefix('}')?;
        if after.is_empty() {
            return Some(items);
        }
        rest = after.strip_prefix(',')?;
    }
}

/// A `drop` exactly as [`ClientMessage::to_text`](super::ClientMessage::to_text) writes it, read
/// by position as [`mail_as_written`] reads a `mail`, and for the same reasons. The blob is read
/// back from the frame's end: where this answers, the quote closing the blob is followed by
/// nothing but `,"ttl":`, digits and `}`, so it is the first quote after the blob's start, the
/// one a search from the front stops at.
fn drop_as_written(text: &str) -> Option<ClientFrame<'_>> {
    let rest = text.strip_prefix(r#"{"type":"drop","topic":""#)?;
    let topic = rest.get(..TOPIC_CHARS)?;
    let rest = rest.get(TOPIC_CHARS..)?.strip_prefix(r#"","blob":""#)?;
    let rest = rest.strip_suffix('}')?;
    let digits = rest.bytes().rev().take_while(u8::is_ascii_digit).count();
    let (rest, number) = rest.split_at(rest.len() - digits);
    let (ttl, _) = integer_as_written(number)?;
    let blob = rest.strip_suffix(r#"","ttl":"#)?;
    Some(ClientFrame::Drop {
        topic: Topic::parse(topic).ok()?,
        blob: checked_blob(blob.into())?,
        ttl: Ttl::from_millis(ttl).ok()?,
    })
}

/// `blob` where it passes [`super::Blob::parse`]'s check, kept as it was read.
fn checked_blob(blob: Cow<'_, str>) -> Option<Cow<'_, str>> {
    check_blob(&blob).ok()?;
    Some(blob)
}

#[cfg(test)]
mod tests {
    use super::super::{Blob, ClientMessage, RelayMessage};
    use super::*;
    use alloc::format;
    use alloc::string::String;
    use alloc::vec;

    const TOPIC: &str = "wXBid3pUqrPtazKRrLpWmkZp2Yo78jdDlSUx_3PweR0";

    /// Where a fast path answers, the general path gives the same message, and `parse` always
    /// answers as the general path; returns how many of the two fast paths answered.
    fn agrees(text: &str) -> usize {
        let client = ClientMessage::from_text_common(text);
        if let Some(m) = &client {
            assert_eq!(ClientMessage::parse_tree(text).as_ref(), Ok(m), "{text}");
        }
        if text.len() <= super::super::MAX_CLIENT_FRAME_BYTES {
            assert_eq!(
                ClientMessage::parse(text),
                ClientMessage::parse_tree(text),
                "{text}"
            );
        }
        let relay = RelayMessage::from_text_common(text);
        if let Some(m) = &relay {
            assert_eq!(RelayMessage::parse_tree(text).as_ref(), Ok(m), "{text}");
        }
        assert_eq!(
            RelayMessage::parse(text),
            RelayMessage::parse_tree(text),
            "{text}"
        );
        reads_agree(text);
        usize::from(client.is_some()) + usize::from(relay.is_some())
    }

    /// The borrowed readers answer as the owned ones: a relay's frame read into a buffer that
    /// held other bytes, with each blob's bytes what its [`Blob`] decodes to, and a client's
    /// frame with its blob as checked text.
    fn reads_agree(text: &str) {
        let mut bytes = vec![7; 5];
        let read = RelayMessage::read_into(text, &mut bytes);
        assert_eq!(read, RelayMessage::read(text), "{text}");
        assert_eq!(
            read.clone().map(RelayMessage::from),
            RelayMessage::parse(text)
        );
        if let Ok(RelayFrame::Mail(mail)) = &read {
            for (blob, decoded) in mail.blobs_decoded() {
                assert_eq!(Blob::parse(blob).map(|b| b.to_bytes()), Ok(decoded.into()));
            }
        }
        let frame = ClientMessage::read(text);
        if let Ok(ClientFrame::Drop { blob, .. }) = &frame {
            assert!(Blob::parse(blob).is_ok(), "{text}");
        }
        assert_eq!(frame.map(ClientMessage::from), ClientMessage::parse(text));
    }

    fn texts() -> vec::Vec<String> {
        let drop = format!(r#"{{"type":"drop","topic":"{TOPIC}","blob":"AQID","ttl":0}}"#);
        let fetch = format!(r#"{{"type":"fetch","topic":"{TOPIC}","after":3,"watch":true}}"#);
        let mail = format!(
            r#"{{"type":"mail","topic":"{TOPIC}","items":[{{"blob":"AQID","seq":1}},{{"blob":"BA"}}],"more":false}}"#
        );
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let mut out = vec![drop.clone(), fetch.clone(), mail.clone()];
        for base in [&drop, &fetch, &mail] {
            let mut edit = |from: &str, to: &str| out.push(base.replacen(from, to, 1));
            // Duplicate keys, plain and escaped.
            edit("{", r#"{"type":"ping","#);
            edit("{", r#"{"typ\u0065":"ping","#);
            edit("{", &format!(r#"{{"topic":"{TOPIC}","#));
            edit(r#""blob":"AQID""#, r#""blob":"AQID","blob":"BA""#);
            // Escaped keys and values.
            edit(r#""topic""#, r#""t\u006fpic""#);
            edit(r#""wX"#, r#""\u0077X"#);
            edit(r#""AQID""#, r#""AQI\u0044""#);
            edit(r#""AQID""#, r#""AQI\ud800""#);
            // Numbers as floats, negatives, huge; missing, null and wrong types.
            for n in [
                "01",
                "00",
                "0",
                "1.0",
                "-1",
                "-0",
                "1e2",
                "9007199254740991",
                "9007199254740992",
                "18446744073709551616",
                "1e400",
                "null",
                "true",
                r#""1""#,
            ] {
                edit(":0}", &format!(":{n}}}"));
                edit(r#""after":3"#, &format!(r#""after":{n}"#));
                edit(r#""seq":1"#, &format!(r#""seq":{n}"#));
            }
            for b in ["null", "1", r#""yes""#] {
                edit(":true", &format!(":{b}"));
                edit(":false", &format!(":{b}"));
            }
            edit(r#","ttl":0"#, "");
            edit(r#","after":3"#, "");
            edit(r#","watch":true"#, "");
            edit(r#","more":false"#, "");
            edit(r#","seq":1"#, "");
            edit(r#""seq":1"#, r#""seq":2},{"blob":"BA","seq":2"#);
            edit(r#""blob":"AQID","#, "");
            edit(&format!(r#""topic":"{TOPIC}","#), "");
            edit(r#""AQID""#, r#""""#);
            edit(r#""AQID""#, r#""AQ=""#);
            edit(TOPIC, &TOPIC[1..]);
            // Extra fields, nested junk, and what serde would skip unchecked.
            for junk in ["[1,{\"a\":null}]", r#""\ud800""#, "1e400", deep.as_str()] {
                edit("{", &format!(r#"{{"extra":{junk},"#));
                edit(r#""blob":"#, &format!(r#""extra":{junk},"blob":"#));
            }
            edit(r#"[{"blob""#, r#"[["AQID",1],{"blob""#);
            edit(r#""items":["#, r#""items":[null,"#);
            out.push(format!("[{base}]"));
            out.push(format!("{base} "));
            out.push(format!("{base},"));
        }
        // Mails as this crate writes them, and near misses.
        for items in [
            "",
            r#"{"blob":"AQID"}"#,
            r#"{"blob":"AQID","seq":0},{"blob":"BA","seq":9007199254740991}"#,
            r#"{"blob":"AQID","seq":9007199254740992}"#,
            r#"{"blob":"AQID","seq":2},{"blob":"BA","seq":2}"#,
            r#"{"blob":"AQI\u0044"}"#,
            r#"{"blob":"AQID",}"#,
            r#"{"blob":"AQID"},"#,
            r#"{"blob":"AQID","seq":1e1}"#,
            r#"{"blob":"AQID","seq":1}"#,
            r#"{"blob":"AQID","seq":01}"#,
            r#"{"blob":"AQID","seq":}"#,
            r#"{"blob":"AQID""seq":1}"#,
            r#"{"blob":"AQID1}"#,
            r#"{"blob":"AQID"1}"#,
            r#"{"blob":"AQ","seq":1},{"blob":"BA"}"#,
            r#"{"blob":"AQ"},{"blob":"BA","seq":3}"#,
            r#"{"blob":"AQ"},{"blob":"AQ"},{"blob":"BA"}"#,
            r#"{"blob":"A"Q"}"#,
            r#"{"blob":""}"#,
            r#"{"blob":"}"#,
            "{",
        ] {
            for more in ["true", "false", "1"] {
                out.push(format!(
                    r#"{{"type":"mail","topic":"{TOPIC}","items":[{items}],"more":{more}}}"#
                ));
            }
        }
        out.push(format!(r#"{{"type":"mail","topic":"{TOPIC}","items":[]}}"#));
        // Topics a character off, or with a quote or a multi-byte character where it should end.
        for topic in [
            format!("{TOPIC}A"),
            format!("{}\"", &TOPIC[1..]),
            format!("{}é", &TOPIC[2..]),
            format!("{}\",\"items\":[],\"more\":false}}", &TOPIC[..20]),
        ] {
            out.push(format!(
                r#"{{"type":"mail","topic":"{topic}","items":[{{"blob":"AQID"}}],"more":false}}"#
            ));
        }
        out.push(format!(r#"["drop","{TOPIC}","AQID",0]"#));
        // Drops read from their end: near misses around the blob's closing quote and the ttl.
        for tail in [
            r#"AQID","ttl":0}"#,
            r#"AQID","ttl":00}"#,
            r#"AQID","ttl":}"#,
            r#"AQID",ttl":1}"#,
            r#"AQID12}"#,
            r#"AQ","ttl":1,"blob":"BA","ttl":2}"#,
            r#"AQ"ID","ttl":2}"#,
            r#"","ttl":2}"#,
            r#"AQID","ttl":9007199254740992}"#,
            r#"AQID","ttl":1e3}"#,
        ] {
            out.push(format!(
                r#"{{"type":"drop","topic":"{TOPIC}","blob":"{tail}"#
            ));
            out.push(format!(
                r#"{{"type":"drop","topic":"{}","blob":"{tail}"#,
                &TOPIC[1..]
            ));
        }
        out.push(r#"{"type":"ping"}"#.into());
        out.push(r#"{"type":"pong"}"#.into());
        out
    }

    #[test]
    fn the_fast_paths_answer_as_the_general_path_or_not_at_all() {
        let texts = texts();
        let fast: usize = texts.iter().map(|t| agrees(t)).sum();
        // The plain messages, escaped members and extra items still read fast.
        assert!(fast >= 10, "{fast}");
        assert_eq!(agrees(&texts[0]) + agrees(&texts[1]) + agrees(&texts[2]), 3);
    }

    #[test]
    fn mails_as_this_crate_writes_them_are_read_by_position() {
        let topic = Topic::parse(TOPIC).unwrap();
        let item = |blob: &str, seq| super::super::MailItem {
            blob: Blob::parse(blob).unwrap(),
            seq,
        };
        for (items, more) in [
            (vec![], false),
            (vec![item("AQID", None)], false),
            (vec![item("AQID", Some(12))], true),
            (vec![item("BA", Some(0))], false),
            (vec![item("AQID", Some(0)), item("BA", None)], true),
            (
                vec![item("AQID", Some(7)), item("BA", Some(1 << 40))],
                false,
            ),
        ] {
            let mail = super::super::Mail {
                topic: topic.clone(),
                items,
                more,
            };
            let text = RelayMessage::Mail(mail.clone()).to_text();
            assert_eq!(
                mail_as_written(&text, &mut None).map(|m| m.to_mail()),
                Some(mail)
            );
        }
        for ttl in [0, 1, super::super::MAX_SAFE_INTEGER] {
            let drop = ClientMessage::Drop {
                topic: topic.clone(),
                blob: Blob::parse("AQID").unwrap(),
                ttl: Ttl::from_millis(ttl).unwrap(),
            };
            assert_eq!(
                drop_as_written(&drop.to_text()).map(ClientMessage::from),
                Some(drop)
            );
        }
    }
}
