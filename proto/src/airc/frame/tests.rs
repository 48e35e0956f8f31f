use super::*;
use crate::airc::framing::{FramingError, decode_line, encode};
use alloc::format;
use alloc::string::ToString;
use alloc::vec;

/// Appendix A's frames, each with the `t` it must read as. Elisions (`…`) are filled with
/// plausible values: message ids, link and passport records, nonces, and §18.2's signatures.
const APPENDIX_A: &[(&str, &str)] = &[
    // A.1 Cross-realm message.
    (
        "hello",
        r#"{"t":"hello","proto":"airc/0.1","role":"client","agent":"demo/1"}"#,
    ),
    (
        "welcome",
        r#"{"t":"welcome","realm":"example.com","ns":["alice"],"proto":"airc/0.1","server":"aircd/0.1.0"}"#,
    ),
    (
        "msg",
        r#"{"t":"msg","id":"5b1e0c2a-9b1d-4e77-a6c8-1d2e3f4a5b6c","from":"x","to":"//partner.example/support/desk","ts":1790380000.1,"body":"hello"}"#,
    ),
    (
        "hello",
        r#"{"t":"hello","proto":"airc/0.1","role":"peer","realm":"example.com","agent":"aircd/0.1.0","ts":1790380000,"nonce":"6f1d2c3b4a596877","sig":"ed25519:65b60673:U/YtYxDq0VDtg88OOULLf3Q1pJQr8frOI/pTV+mJRO8mawiFaj/E9aZHL3izuNMHesk/f4YXirxUYvjsqO1KCg=="}"#,
    ),
    (
        "welcome",
        r#"{"t":"welcome","realm":"partner.example","proto":"airc/0.1","server":"aircd/0.1.0","sig":"ed25519:65b60673:BnwUly7WPUSiAm2Hbwp1j9Aeqz6PcTRCr2E5Qq+bvT2BR48ujTUuyOKJ1ULDlAx9VzuqAQjydQe/IJAhC668DQ==","kid":"65b60673"}"#,
    ),
    (
        "msg",
        r#"{"t":"msg","id":"5b1e0c2a-9b1d-4e77-a6c8-1d2e3f4a5b6c","from":"airc://example.com/alice/x","to":"airc://partner.example/support/desk","ts":1790380000.1,"body":"hello","type":"text/plain","ttl":86400,"via":["example.com"],"hdr":{"sig":"ed25519:65b60673:oyBI45ZxQdCsc8sPRs4SMLnfo5jHuqHHuOQ9SG6WIhu+le9DbGRBzmrZQj+sli7/PNwS2aJWL4l+KVx2q/b3BA=="}}"#,
    ),
    (
        "ack",
        r#"{"t":"ack","id":"5b1e0c2a-9b1d-4e77-a6c8-1d2e3f4a5b6c","status":"delivered"}"#,
    ),
    // A.2 Link offer and accept, same realm.
    (
        "link",
        r#"{"t":"link","op":"offer","as":"alice/x","peer":"bob/y","label":"q4"}"#,
    ),
    (
        "linked",
        r#"{"t":"linked","ok":true,"link":{"id":"L1a2b3c4d","state":"pending","a":"airc://example.com/alice/x","b":"airc://example.com/bob/y","direction":"both","label":"q4","created":1790380000.1,"expires":null,"offered_by":"airc://example.com/alice/x"},"delivery":"delivered"}"#,
    ),
    (
        "msg",
        r#"{"t":"msg","from":"airc://example.com/alice/x","to":"airc://example.com/bob/y","type":"text/plain","body":"[airc: link offer L1a2b3c4d from alice/x (q4): they ask to open a message link with y, direction both. Accept: airc link accept L1a2b3c4d --as bob/y   Decline: airc link decline L1a2b3c4d --as bob/y]","hdr":{"airc-link":"L1a2b3c4d","airc-link-action":"offer"},"id":"7c2d9e10-1111-4a2b-8c3d-4e5f60718293","ts":1790380000.2}"#,
    ),
    (
        "ack",
        r#"{"t":"ack","id":"7c2d9e10-1111-4a2b-8c3d-4e5f60718293","status":"delivered"}"#,
    ),
    (
        "link",
        r#"{"t":"link","op":"accept","as":"bob/y","id":"L1a2b3c4d"}"#,
    ),
    (
        "linked",
        r#"{"t":"linked","ok":true,"link":{"id":"L1a2b3c4d","state":"active","a":"airc://example.com/alice/x","b":"airc://example.com/bob/y","direction":"both","label":"q4","created":1790380000.1,"expires":null,"offered_by":"airc://example.com/alice/x","accepted_at":1790380060.5},"delivery":"delivered"}"#,
    ),
    // A.3 Passport redemption across realms.
    (
        "passport",
        r#"{"t":"passport","op":"new","as":"alice/x","label":"vendor","to":"//partner.example/**"}"#,
    ),
    (
        "passported",
        r#"{"t":"passported","ok":true,"passport":{"id":"P9e8d7c6b","endpoint":"airc://example.com/alice/x","label":"vendor","direction":"both","created":1790380000,"expires":1790984800,"uses":1,"used":[],"bind_to":"//partner.example/**","link_ttl":2592000,"state":"active","issued_by":"airc://example.com/alice/x"},"line":"airc-passport:1;i=example.com;e=alice/x;t=Zk3fQ9uT2mH7wLp4Rb8yNc6VdX1aS0gE"}"#,
    ),
    (
        "passport",
        r#"{"t":"passport","op":"redeem","as":"support/desk","passport":"airc-passport:1;i=example.com;e=alice/x;t=Zk3fQ9uT2mH7wLp4Rb8yNc6VdX1aS0gE"}"#,
    ),
    (
        "msg",
        r#"{"t":"msg","id":"9a8b7c6d-0000-4e1f-9a2b-3c4d5e6f7a8b","from":"airc://partner.example/support/desk","to":"airc://example.com/_passport","ts":1790380100.25,"type":"application/airc-passport+json","body":"{\"action\":\"redeem\",\"token\":\"Zk3fQ9uT2mH7wLp4Rb8yNc6VdX1aS0gE\",\"redeemer\":\"airc://partner.example/support/desk\"}","ttl":600,"via":["partner.example"],"hdr":{"sig":["ed25519:65b60673:oyBI45ZxQdCsc8sPRs4SMLnfo5jHuqHHuOQ9SG6WIhu+le9DbGRBzmrZQj+sli7/PNwS2aJWL4l+KVx2q/b3BA=="]}}"#,
    ),
    (
        "ack",
        r#"{"t":"ack","id":"9a8b7c6d-0000-4e1f-9a2b-3c4d5e6f7a8b","status":"delivered","reason":"link L5e6f7a8b granted"}"#,
    ),
    (
        "passported",
        r#"{"t":"passported","ok":true,"status":"delivered","reason":"link L5e6f7a8b granted","link":{"id":"L5e6f7a8b","a":"airc://example.com/alice/x","b":"airc://partner.example/support/desk","direction":"both","label":"vendor","state":"active","offered_by":"airc://example.com/alice/x","origin":{"passport":"P9e8d7c6b","issued_by":"airc://example.com/alice/x","redeemed_by":"airc://partner.example/support/desk"}}}"#,
    ),
];

/// §4's own examples, and the frames Appendix A does not show.
const SECTION_4: &[(&str, &str)] = &[
    (
        "bind",
        r#"{"t":"bind","names":["alice/","bob/research","carol/*"]}"#,
    ),
    (
        "bound",
        r#"{"t":"bound","names":["//example.com/alice/","//example.com/bob/research","//example.com/carol/*"]}"#,
    ),
    ("ping", r#"{"t":"ping","n":7}"#),
    ("pong", r#"{"t":"pong","n":7}"#),
    ("ping", r#"{"t":"ping"}"#),
    (
        "error",
        r#"{"t":"error","code":"forbidden","reason":"alice/ is outside your namespaces"}"#,
    ),
    ("subscribe", r#"{"t":"subscribe","kinds":["msg","link"]}"#),
    (
        "subscribed",
        r#"{"t":"subscribed","kinds":["msg","link"],"scope":["alice"]}"#,
    ),
    (
        "subscribed",
        r#"{"t":"subscribed","kinds":[],"scope":"all"}"#,
    ),
    (
        "event",
        r#"{"t":"event","ts":1790380000.123,"kind":"msg.delivered","id":"5b1e0c2a","from":"airc://example.com/alice/x","to":"airc://partner.example/support/desk","status":"delivered","hop":"client","bytes":42}"#,
    ),
    ("stat", r#"{"t":"stat"}"#),
    ("stats", r#"{"t":"stats","msgs":12,"spool":{"alice":3}}"#),
    (
        "ack",
        r#"{"t":"ack","id":"m2","status":"failed","code":"no_such_path","by":"airc://example.com/_resolver"}"#,
    ),
    (
        "ack",
        r#"{"t":"ack","id":"m3","status":"queued","code":"no_ack"}"#,
    ),
    (
        "passport",
        r#"{"t":"passport","op":"revoke","as":"alice/x","id":"P9e8d7c6b","and_links":true}"#,
    ),
    (
        "passported",
        r#"{"t":"passported","ok":true,"passport":{"id":"P9e8d7c6b","state":"revoked"},"revoked_links":["L5e6f7a8b"]}"#,
    ),
    ("link", r#"{"t":"link","op":"list","as":"alice/x"}"#),
    (
        "linked",
        r#"{"t":"linked","ok":false,"code":"forbidden","reason":"carol/z is outside your namespaces"}"#,
    ),
];

/// Reads a line, checks its `t`, and checks that writing it back gives a line that reads back to
/// the same frame and, as JSON, to the same object (nothing known is lost or added).
fn round_trip(t: &str, line: &str) -> Frame {
    let frame = decode_line(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_eq!(frame.t(), t, "{line}");
    assert!(!matches!(frame, Frame::Unknown { .. }), "{line}");
    let out = encode(&frame);
    assert_eq!(out.last(), Some(&b'\n'));
    let again = decode_line(&out[..out.len() - 1]).unwrap();
    assert_eq!(again, frame, "{line}");
    let original: Value = serde_json::from_str(line).unwrap();
    let written: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(written, original, "{line}");
    frame
}

#[test]
fn every_appendix_a_frame_reads_as_its_type_and_round_trips() {
    for (t, line) in APPENDIX_A {
        round_trip(t, line);
    }
}

#[test]
fn every_section_4_example_reads_as_its_type_and_round_trips() {
    for (t, line) in SECTION_4 {
        round_trip(t, line);
    }
}

#[test]
fn every_catalogued_type_is_covered_by_an_example() {
    for t in TYPES {
        assert!(
            APPENDIX_A.iter().chain(SECTION_4).any(|(x, _)| x == t),
            "no example for {t}"
        );
    }
}

#[test]
fn appendix_a1_peer_msg_fields_read_typed() {
    let Frame::Msg(m) = round_trip("msg", APPENDIX_A[5].1) else {
        panic!("not a msg");
    };
    assert_eq!(m.ts, 1790380000.1);
    assert_eq!(m.kind.as_deref(), Some("text/plain"));
    assert_eq!(m.ttl, Some(86400));
    assert_eq!(m.via, Some(vec!["example.com".to_string()]));
    assert_eq!(m.sigstrings().len(), 1);
    assert!(m.sigstrings()[0].starts_with("ed25519:65b60673:"));
}

#[test]
fn hdr_sig_is_a_string_or_a_list() {
    let Frame::Msg(mut m) = round_trip("msg", APPENDIX_A[16].1) else {
        panic!("not a msg");
    };
    assert_eq!(m.sigstrings().len(), 1);
    m.set_sigstrings(&["ed25519:a:b", "ed25519:c:d"]);
    assert_eq!(m.sigstrings(), vec!["ed25519:a:b", "ed25519:c:d"]);
    m.set_sigstrings(&["ed25519:a:b"]);
    assert_eq!(
        m.hdr.as_ref().and_then(|h| h.get(HDR_SIG)),
        Some(&Value::from("ed25519:a:b"))
    );
    m.hdr = None;
    assert!(m.sigstrings().is_empty());
}

#[test]
fn msg_requires_id_from_to_ts_body() {
    let full = r#"{"t":"msg","id":"i","from":"f","to":"o","ts":1,"body":"b"}"#;
    assert!(decode_line(full.as_bytes()).is_ok());
    for field in ["id", "from", "to", "ts", "body"] {
        let mut v: Value = serde_json::from_str(full).unwrap();
        v.as_object_mut().unwrap().remove(field);
        assert!(
            matches!(Frame::from_json(&v), Err(FramingError::BadFields { .. })),
            "{field}"
        );
    }
}

#[test]
fn msg_field_types_are_checked() {
    for bad in [
        r#"{"t":"msg","id":"i","from":"f","to":"o","ts":1,"body":"b","ttl":-1}"#,
        r#"{"t":"msg","id":"i","from":"f","to":"o","ts":1,"body":"b","ttl":1.5}"#,
        r#"{"t":"msg","id":"i","from":"f","to":"o","ts":1,"body":"b","via":"example.com"}"#,
        r#"{"t":"msg","id":"i","from":"f","to":"o","ts":1,"body":"b","hdr":[]}"#,
        r#"{"t":"msg","id":"i","from":"f","to":"o","ts":1,"body":7}"#,
    ] {
        let e = decode_line(bad.as_bytes()).unwrap_err();
        assert!(
            matches!(&e, FramingError::BadFields { id: Some(id), .. } if id == "i"),
            "{bad}"
        );
    }
}

#[test]
fn ack_status_is_one_of_three() {
    for (s, status) in [
        ("delivered", AckStatus::Delivered),
        ("queued", AckStatus::Queued),
        ("failed", AckStatus::Failed),
    ] {
        let line = alloc::format!(r#"{{"t":"ack","id":"i","status":"{s}"}}"#);
        assert_eq!(
            decode_line(line.as_bytes()),
            Ok(Frame::Ack(Ack::new("i", status)))
        );
    }
    assert!(decode_line(br#"{"t":"ack","id":"i","status":"read"}"#).is_err());
}

#[test]
fn ack_code_unknown_to_the_registry_is_kept_for_relaying() {
    let Frame::Ack(a) = round_trip(
        "ack",
        r#"{"t":"ack","id":"i","status":"failed","code":"future_code"}"#,
    ) else {
        panic!("not an ack");
    };
    assert_eq!(a.code.as_deref(), Some("future_code"));
    assert_eq!(a.ack_code(), None);
    let a = Ack::with_code("i", AckStatus::Queued, AckCode::EndpointOffline);
    assert_eq!(a.ack_code(), Some(AckCode::EndpointOffline));
}

#[test]
fn hello_role_must_be_client_or_peer() {
    assert!(decode_line(br#"{"t":"hello","proto":"airc/0.1","role":"admin"}"#).is_err());
    assert!(decode_line(br#"{"t":"hello","proto":"airc/0.1"}"#).is_err());
}

#[test]
fn pong_echoes_the_ping_n() {
    for line in [
        r#"{"t":"ping","n":7}"#,
        r#"{"t":"ping","n":"abc"}"#,
        r#"{"t":"ping"}"#,
    ] {
        let Ok(Frame::Ping(p)) = decode_line(line.as_bytes()) else {
            panic!("not a ping");
        };
        let pong = encode(&Frame::Pong(p.pong()));
        let expected = line.replace("ping", "pong");
        assert_eq!(pong, alloc::format!("{expected}\n").into_bytes());
    }
}

#[test]
fn subscribed_scope_is_a_list_or_all() {
    assert!(decode_line(br#"{"t":"subscribed","kinds":[],"scope":"some"}"#).is_err());
    let Ok(Frame::Subscribed(s)) = decode_line(br#"{"t":"subscribed","kinds":[],"scope":"all"}"#)
    else {
        panic!("not subscribed");
    };
    assert_eq!(s.scope, Scope::All);
}

#[test]
fn stats_counters_are_every_field_but_t() {
    let Ok(Frame::Stats(s)) = decode_line(br#"{"t":"stats","msgs":12}"#) else {
        panic!("not stats");
    };
    assert_eq!(s.counters.len(), 1);
    assert_eq!(s.counters.get("msgs"), Some(&Value::from(12)));
}

#[test]
fn error_frame_carries_a_registry_code() {
    let f = ErrorFrame::new(ErrorCode::ExpectedHello, "send hello first");
    assert_eq!(
        encode(&Frame::Error(f.clone())),
        b"{\"t\":\"error\",\"code\":\"expected_hello\",\"reason\":\"send hello first\"}\n"
    );
    assert_eq!(f.error_code(), Some(ErrorCode::ExpectedHello));
}

#[test]
fn bad_fields_detail_is_bounded() {
    let long = "é".repeat(100_000);
    let line = alloc::format!(r#"{{"t":"bind","names":"{long}"}}"#);
    let Err(FramingError::BadFields { detail, .. }) = decode_line(line.as_bytes()) else {
        panic!("not bad fields");
    };
    assert!(detail.len() <= MAX_DETAIL_BYTES && !detail.is_empty());
}

/// The general path alone: the whole line as a `Value`, then the frame.
fn through_value(line: &str) -> Result<Frame, FramingError> {
    let value: Value = serde_json::from_str(line).map_err(|_| FramingError::BadJson)?;
    Frame::from_json(&value)
}

/// `msg` and `ack` are read straight from their text; whatever a line holds, the frame or error
/// is the one the general path gives.
#[test]
fn common_frames_and_plain_types_agree_with_the_general_path() {
    let msg = r#""id":"i","from":"//a/x","to":"//b/y","ts":1790380000.1,"body":"b""#;
    let lines = [
        format!(r#"{{"t":"msg",{msg}}}"#),
        format!(
            r#"  {{"t":"msg",{msg},"type":"x/y","re":"r","ttl":5,"via":["a"],"hdr":{{"sig":"s","k":[1,{{}}]}}}}"#
        ),
        format!(r#"{{{msg},"t":"msg","extra":{{"deep":[null,true,1e5]}}}}"#),
        format!(r#"{{"t":"msg",{msg},"id":"again"}}"#),
        format!(r#"{{"t":"msg","t":"ack",{msg}}}"#),
        format!(r#"{{"t":"ack","t":"msg",{msg}}}"#),
        format!(r#"{{"t":"m\u0073g",{msg}}}"#),
        format!(r#"{{"t":"msg",{msg},"hdr":{{"sig":"a","sig":"b"}}}}"#),
        format!(r#"{{"t":"msg",{msg},"ttl":null,"hdr":null}}"#),
        format!(r#"{{"t":"msg",{msg},"ttl":5.0}}"#),
        format!(r#"{{"t":"msg",{msg},"ttl":-1}}"#),
        format!(r#"{{"t":"msg",{msg}}} x"#),
        r#"{"t":"msg","id":"i","from":"a","to":"b","ts":5,"body":"b"}"#.to_string(),
        r#"{"t":"msg","id":"i","from":"a","to":"b","ts":-0,"body":"b"}"#.to_string(),
        r#"{"t":"msg","id":"i","from":"a","to":"b","body":"b"}"#.to_string(),
        r#"{"t":"msg","id":7,"from":"a","to":"b","ts":1,"body":"b"}"#.to_string(),
        r#"["msg","i","a","b",1,"b"]"#.to_string(),
        r#"{"t":"ack","id":"i","status":"delivered"}"#.to_string(),
        r#"{"t":"ack","id":"i","status":"queued","code":"x","reason":"r","by":"//a/_r"}"#
            .to_string(),
        r#"{"t":"ack","id":"i","status":"lost"}"#.to_string(),
        r#"{"t":"ack","id":"i","status":"failed","status":"delivered"}"#.to_string(),
        r#"{"t":"ack","id":"i","status":"delivered","code":null}"#.to_string(),
        r#"{"t":"ack"}"#.to_string(),
        r#"{"t":"ping"}"#.to_string(),
        r#"{"t":5,"id":"i"}"#.to_string(),
        r#"{"t":"msg""#.to_string(),
        // Members the frame does not name, which serde would skip unchecked: a lone surrogate,
        // a number out of range, nesting past the JSON tree's limit. Each is refused by the
        // general path, so the fast path must not read them either.
        format!(r#"{{"t":"msg",{msg},"extra":"\ud800"}}"#),
        format!(r#"{{"t":"msg",{msg},"extra":1e400}}"#),
        format!(r#"{{"t":"msg",{msg},"extra":{}}}"#, "[".repeat(200)),
        r#"{"t":"ack","id":"i","status":"delivered","extra":1e400}"#.to_string(),
    ];
    let appendix = APPENDIX_A.iter().map(|(_, line)| line.to_string());
    for line in lines.iter().cloned().chain(appendix) {
        let frame = decode_line(line.as_bytes());
        assert_eq!(frame, through_value(&line), "{line}");
        // A plain type is never contradicted by the frame the line reads as.
        if let (Some(t), Ok(frame)) = (plain_type(&line), &frame) {
            assert_eq!(frame.t(), t, "{line}");
        }
    }
}
