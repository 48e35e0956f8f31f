//! Replays every worked example of `docs/interop.md` against weft, from the data files in
//! `vectors/interop/`, so the guide cannot drift from the code.
//!
//! Each case of a file has an `id`, its `inputs` and the `outputs` weft must give from them. The
//! replay computes every output through weft's own functions and machines (with a random source
//! that gives exactly the bytes the case lists, so nonces and ephemeral keys are inputs too) and
//! compares; where the guide describes a construction (an envelope, the key of a sealed-to
//! envelope, a note's signing input) the replay also builds it from the crypto primitives alone,
//! as a second implementation would, and checks weft's bytes against that. Then every case's id
//! and every output string must appear verbatim in `docs/interop.md`.
//!
//! After a deliberate change of a choice (and its `docs/decisions.md` entry), run once with
//! `WEFT_BLESS_INTEROP=1` to write the new outputs into the data files, then update the guide:
//! the doc check fails until every new output is shown there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};
use weft_proto::airc::address::Address;
use weft_proto::airc::frame::{self as airc_frame, Ack, AckCode, AckStatus, Frame as AircFrame};
use weft_proto::airc::{framing, signing};
use weft_proto::circle::link::{LinkAuth, Output as LinkOutput, Step};
use weft_proto::circle::member::MemberFrame;
use weft_proto::circle::{self, link, pairing};
use weft_proto::codec::did_key::DidKey;
use weft_proto::codec::{base64url, hex, js, json as cjson};
use weft_proto::core::{Machine, Timestamp};
use weft_proto::crypto::Secp256k1Secret;
use weft_proto::crypto::{CryptoProvider, P256Public, P256Secret};
use weft_proto::meshstr::grant::{self, Blinding, Envelope};
use weft_proto::meshstr::keys::{self, KeyKind};
use weft_proto::meshstr::limits::Counters;
use weft_proto::meshstr::receipt::{self, Receipt};
use weft_proto::meshstr::{events, nip44};
use weft_proto::minca::mesh::frame::Frame;
use weft_proto::minca::mesh::introduction::{self, Signal, SignalKind};
use weft_proto::minca::mesh::signal_frame;
use weft_proto::minca::node_socket::{
    self, ClientSocket, CloseCode, Input as SocketInput, NodeSocket, Output as SocketOutput,
    Session,
};
use weft_proto::minca::note::{Es256Notes, Note, NoteChecker};
use weft_proto::minca::relay_server::{self, Refusal};
use weft_proto::minca::rendezvous::message::{self, Kind, Message};
use weft_proto::minca::room::Room;
use weft_proto::minca::space_access::MemorySpace;
use weft_proto::minca::turn::TurnCredential;
use weft_proto::minca::{auth, envelope, read_proof};
use weft_proto::nostr::auth::check as nostr_auth_check;
use weft_proto::nostr::event::{self, Event, UnsignedEvent};
use weft_proto::nostr::peering::identity::{self, RelayKey};
use weft_proto::nostr::peering::limiter::{self, Admission, PeerRequestLimiter, RequestBudget};
use weft_proto::nostr::sync::scope;
use weft_proto::nostr::sync::worker::{LIVE_OVERLAP, LIVE_SUB};
use weft_proto::nostr::{ClientMessage, Filter, RelayMessage};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn providers() -> Vec<&'static dyn CryptoProvider> {
    vec![
        weft_proto::crypto::default_provider(),
        &weft_drivers::fast_crypto::FastCrypto,
    ]
}

/// A random source that gives exactly the bytes it was handed, in order, and fails the test if
/// asked for more: what a case lists as "random" is all a replay may draw.
struct Listed {
    bytes: Vec<u8>,
    at: usize,
}

impl Listed {
    fn new(parts: &[&[u8]]) -> Self {
        Self {
            bytes: parts.concat(),
            at: 0,
        }
    }

    fn used_up(&self) -> bool {
        self.at == self.bytes.len()
    }
}

impl rand_core::TryRng for Listed {
    type Error = rand_core::Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        let mut b = [0; 4];
        self.try_fill_bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        let mut b = [0; 8];
        self.try_fill_bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        let end = self.at + dst.len();
        assert!(
            end <= self.bytes.len(),
            "weft drew more random bytes than the case lists ({} > {})",
            end,
            self.bytes.len()
        );
        dst.copy_from_slice(&self.bytes[self.at..end]);
        self.at = end;
        Ok(())
    }
}
impl rand_core::TryCryptoRng for Listed {}

/// One case being replayed: its inputs, and the outputs computed so far (compared with the file,
/// or written into it when blessing).
struct Case<'a> {
    id: String,
    inputs: &'a Value,
    expected: &'a Value,
    computed: Map<String, Value>,
}

impl Case<'_> {
    fn s(&self, key: &str) -> &str {
        self.inputs[key]
            .as_str()
            .unwrap_or_else(|| panic!("{}: input {key} is not a string", self.id))
    }

    fn u(&self, key: &str) -> u64 {
        self.inputs[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{}: input {key} is not an integer", self.id))
    }

    fn bytes(&self, key: &str) -> Vec<u8> {
        hex::decode(self.s(key)).unwrap_or_else(|_| panic!("{}: input {key} is not hex", self.id))
    }

    fn secret(&self, key: &str) -> P256Secret {
        P256Secret::from_bytes(
            self.bytes(key)
                .try_into()
                .unwrap_or_else(|_| panic!("{}: {key} is not 32 bytes", self.id)),
        )
    }

    fn key32(&self, key: &str) -> [u8; 32] {
        self.bytes(key)
            .try_into()
            .unwrap_or_else(|_| panic!("{}: {key} is not 32 bytes", self.id))
    }

    fn out(&mut self, key: &str, value: impl Into<Value>) {
        let value = value.into();
        assert!(
            self.computed.insert(key.into(), value).is_none(),
            "{}: output {key} computed twice",
            self.id
        );
    }

    /// An output computed earlier in this case.
    fn got(&self, key: &str) -> &str {
        self.computed[key].as_str().expect("a string output")
    }
}

fn did_of(crypto: &dyn CryptoProvider, secret: &P256Secret) -> String {
    DidKey::P256(crypto.p256_public_key(secret).unwrap().0).to_did()
}

fn box_of(crypto: &dyn CryptoProvider, secret: &P256Secret) -> P256Public {
    crypto.p256_public_key(secret).unwrap()
}

/// HKDF-SHA256 for one 32-byte block (RFC 5869), from HMAC alone.
fn hkdf32(crypto: &dyn CryptoProvider, salt: &[u8], ikm: &[u8], info: &[u8]) -> [u8; 32] {
    let prk = crypto.hmac_sha256(salt, &[ikm]);
    crypto.hmac_sha256(&prk, &[info, &[1]])
}

/// `label ‖ 0x00 ‖ bound_json`, built by hand.
fn aad_by_hand(label: &str, bound_json: &str) -> Vec<u8> {
    [label.as_bytes(), &[0], bound_json.as_bytes()].concat()
}

/// `0x01 ‖ nonce ‖ AES-256-GCM(key, nonce, aad, plaintext)`, built from the primitive.
fn envelope_by_hand(
    crypto: &dyn CryptoProvider,
    key: &[u8; 32],
    nonce: &[u8],
    aad: &[u8],
    plaintext: &[u8],
) -> Vec<u8> {
    let n: [u8; 12] = nonce.try_into().unwrap();
    [
        &[1u8][..],
        nonce,
        &crypto.aes256gcm_seal(key, &n, aad, plaintext),
    ]
    .concat()
}

fn aad(c: &mut Case<'_>) {
    let label = c.s("label").to_string();
    let bound = &c.inputs["bound"];
    let bound_json = cjson::canonical(bound);
    let aad = envelope::aad(&label, bound);
    assert_eq!(aad, aad_by_hand(&label, &bound_json), "{}", c.id);
    // The rendezvous' own writers of its two bounds give the same bytes.
    if label == message::BLOB_LABEL {
        assert_eq!(message::blob_aad(bound["topic"].as_str().unwrap()), aad);
    }
    if label == message::SIGNAL_LABEL {
        let f = |k: &str| bound[k].as_str().unwrap();
        assert_eq!(
            message::signal_aad(f("topic"), f("from"), f("to"), f("box")),
            aad
        );
    }
    c.out("bound_json", bound_json);
    c.out("aad_hex", hex::encode(&aad));
}

fn hello(c: &mut Case<'_>) {
    for p in providers() {
        let room = Room::of_space(p, c.s("space_id"));
        let (topic, room_key) = (room.topic(p), room.key(p));
        let session = c.secret("session_secret_hex");
        let from = did_of(p, &session);
        let box_ = base64url::encode(&box_of(p, &c.secret("box_secret_hex")).0);
        let at = c.u("at");
        let mut m = Message {
            kind: Kind::Hello,
            at,
            from: from.clone(),
            box_: box_.clone(),
            signal: None,
            half_signal: false,
            sig: String::new(),
        };
        let signed = m.signed_text(&topic);
        m.sig = auth::sign(p, &session, &signed).unwrap();
        assert!(auth::verify(p, &from, &signed, &m.sig));
        let text = m.to_json_text();
        assert_eq!(Message::parse(text.as_bytes()), Ok(m.clone()));
        assert_eq!(
            Message::from_text_as_written(text.as_bytes()),
            Some(m.clone())
        );
        let nonce = c.bytes("blob_nonce_hex");
        let aad = message::blob_aad(&topic);
        let sealed = envelope::seal_bound(
            p,
            &mut Listed::new(&[&nonce]),
            &room_key,
            &aad,
            text.as_bytes(),
        );
        assert_eq!(
            sealed,
            envelope_by_hand(p, &room_key, &nonce, &aad, text.as_bytes())
        );
        let blob = base64url::encode(&sealed);
        assert_eq!(
            message::open_blob(p, &room_key, &topic, &blob).as_deref(),
            Some(text.as_bytes())
        );
        if c.computed.is_empty() {
            c.out("topic", topic);
            c.out("room_key_hex", hex::encode(&room_key));
            c.out("from", from);
            c.out("box", box_);
            c.out("signed_text", signed);
            c.out("sig", m.sig.clone());
            c.out("message_json", text);
            c.out("envelope_hex", hex::encode(&sealed));
            c.out("blob", blob);
        } else {
            assert_eq!(c.got("blob"), blob, "{}: {}", c.id, p.name());
        }
    }
}

fn description(c: &mut Case<'_>) {
    let d = &c.inputs["description"];
    let text = message::description_text(d);
    let back: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, d);
    c.out("description_json", text);
}

fn offer(c: &mut Case<'_>) {
    for p in providers() {
        let room = Room::of_space(p, c.s("space_id"));
        let (topic, room_key) = (room.topic(p), room.key(p));
        let session = c.secret("session_secret_hex");
        let from = did_of(p, &session);
        let box_secret = c.secret("box_secret_hex");
        let box_ = base64url::encode(&box_of(p, &box_secret).0);
        let to = did_of(p, &c.secret("recipient_session_secret_hex"));
        let recipient_secret = c.secret("recipient_box_secret_hex");
        let recipient = box_of(p, &recipient_secret);
        let description = message::description_text(&c.inputs["description"]);

        // The sealed-to envelope, by weft and by hand.
        let bound = json!({"topic": topic, "from": from, "to": to, "box": box_});
        let bound_json = cjson::canonical(&bound);
        let aad = message::signal_aad(&topic, &from, &to, &box_);
        assert_eq!(aad, aad_by_hand(message::SIGNAL_LABEL, &bound_json));
        let (e, nonce) = (c.secret("ephemeral_secret_hex"), c.bytes("sdp_nonce_hex"));
        let mut rng = Listed::new(&[&c.bytes("ephemeral_secret_hex"), &nonce]);
        let sdp =
            message::seal_description(p, &mut rng, &recipient, &aad, &c.inputs["description"])
                .unwrap();
        assert!(rng.used_up());
        let e_public = box_of(p, &e);
        let shared = p.p256_ecdh(&e, &recipient).unwrap();
        assert_eq!(shared, p.p256_ecdh(&recipient_secret, &e_public).unwrap());
        let key = hkdf32(
            p,
            &[&e_public.0[..], &recipient.0[..]].concat(),
            &shared,
            message::SIGNAL_LABEL.as_bytes(),
        );
        let inner = envelope_by_hand(p, &key, &nonce, &aad, description.as_bytes());
        let sealed = [&[1u8][..], &e_public.0, &inner[1..]].concat();
        assert_eq!(base64url::encode(&sealed), sdp, "{}", p.name());
        let opened =
            message::open_description(p, &recipient_secret, &recipient, &aad, &sdp).unwrap();
        assert_eq!(&opened, &c.inputs["description"]);

        // The message, signed and sealed under the room key.
        let mut m = Message {
            kind: Kind::Offer,
            at: c.u("at"),
            from: from.clone(),
            box_: box_.clone(),
            signal: Some((to.clone(), sdp.clone())),
            half_signal: false,
            sig: String::new(),
        };
        let signed = m.signed_text(&topic);
        m.sig = auth::sign(p, &session, &signed).unwrap();
        let text = m.to_json_text();
        assert_eq!(
            Message::from_text_as_written(text.as_bytes()),
            Some(m.clone())
        );
        let blob_nonce = c.bytes("blob_nonce_hex");
        let blob = message::seal_message(
            p,
            &mut Listed::new(&[&blob_nonce]),
            &room_key,
            &message::blob_aad(&topic),
            &m,
        );
        assert_eq!(
            base64url::decode(&blob).unwrap(),
            envelope_by_hand(
                p,
                &room_key,
                &blob_nonce,
                &message::blob_aad(&topic),
                text.as_bytes()
            )
        );
        if c.computed.is_empty() {
            c.out("topic", topic);
            c.out("from", from);
            c.out("box", box_);
            c.out("to", to);
            c.out("recipient_box", base64url::encode(&recipient.0));
            c.out("description_json", description);
            c.out("signal_bound_json", bound_json);
            c.out("ephemeral_public_hex", hex::encode(&e_public.0));
            c.out("ecdh_hex", hex::encode(&shared));
            c.out("sealed_to_key_hex", hex::encode(&key));
            c.out("sdp", sdp);
            c.out("signed_text", signed);
            c.out("sig", m.sig.clone());
            c.out("message_json", text);
            c.out("blob", blob);
        } else {
            assert_eq!(c.got("blob"), blob, "{}: {}", c.id, p.name());
        }
    }
}

fn note_claims(c: &Case<'_>, crypto: &dyn CryptoProvider) -> Note {
    let iss = did_of(crypto, &c.secret("root_secret_hex"));
    Note {
        iss: iss.clone(),
        aud: did_of(crypto, &c.secret("session_secret_hex")),
        sub: iss,
        cmd: c.s("cmd").into(),
        pol: c.inputs["pol"].as_array().unwrap().clone(),
        exp: c.u("exp"),
        nbf: None,
    }
}

fn note(c: &mut Case<'_>) {
    for p in providers() {
        let claims = note_claims(c, p);
        let root = c.secret("root_secret_hex");
        let token = Es256Notes::new(p).issue(&root, &claims).unwrap();
        let mut parts = token.split('.');
        let (h, pl, sig) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let header = String::from_utf8(base64url::decode(h).unwrap()).unwrap();
        let payload = String::from_utf8(base64url::decode(pl).unwrap()).unwrap();
        // The payload is the canonical JSON of the claims, by hand: keys sorted.
        let by_hand = json!({
            "aud": claims.aud, "cmd": claims.cmd, "exp": claims.exp, "iss": claims.iss,
            "pol": claims.pol, "sub": claims.sub,
        });
        assert_eq!(payload, cjson::canonical(&by_hand));
        let signing_input = format!("{h}.{pl}");
        assert!(auth::verify(p, &claims.iss, &signing_input, sig));
        let now = Timestamp::from_millis(c.u("check_at_ms"));
        assert_eq!(Es256Notes::new(p).check(&token, now), Ok(claims.clone()));
        let late = Timestamp::from_millis(claims.exp * 1000);
        assert!(Es256Notes::new(p).check(&token, late).is_err());
        if c.computed.is_empty() {
            c.out("iss", claims.iss.clone());
            c.out("aud", claims.aud.clone());
            c.out("header_json", header);
            c.out("payload_json", payload);
            c.out("signing_input", signing_input);
            c.out("token", token);
        } else {
            assert_eq!(c.got("token"), token, "{}: {}", c.id, p.name());
        }
    }
}

fn member(c: &mut Case<'_>, cases: &BTreeMap<String, Map<String, Value>>) {
    let token = cases[c.s("note_case")]["token"]
        .as_str()
        .unwrap()
        .to_string();
    let seal_key = c.key32("seal_key_hex");
    let nonce = c.bytes("nonce_hex");
    let space = c.s("space_id").to_string();
    for p in providers() {
        let plaintext = js::stringify(&json!(token));
        let bound = json!({ "space": space });
        let sealed = envelope::seal(
            p,
            &mut Listed::new(&[&nonce]),
            &seal_key,
            read_proof::MEMBERSHIP_LABEL,
            &bound,
            plaintext.as_bytes(),
        );
        let aad = aad_by_hand(read_proof::MEMBERSHIP_LABEL, &cjson::canonical(&bound));
        assert_eq!(
            sealed,
            envelope_by_hand(p, &seal_key, &nonce, &aad, plaintext.as_bytes())
        );
        let member = base64url::encode(&sealed);
        if c.computed.is_empty() {
            c.out("plaintext", plaintext);
            c.out("aad_hex", hex::encode(&aad));
            c.out("member", member);
        } else {
            assert_eq!(c.got("member"), member);
        }
    }
}

/// Runs a `/peer` node socket and a client socket against each other until neither has anything
/// more to say, and shows the handshake's three text frames, the labels they sign, and each
/// side's first binary frame (its `who`), with the same `who` wrapped in a mesh frame.
fn peer_handshake(c: &mut Case<'_>, cases: &BTreeMap<String, Map<String, Value>>) {
    let crypto = weft_proto::crypto::default_provider();
    let now = Timestamp::from_millis(c.u("now_ms"));
    let space = c.s("space_id").to_string();
    let token = cases[c.s("note_case")]["token"]
        .as_str()
        .unwrap()
        .to_string();
    let node_session = Session::new(crypto, c.secret("node_secret_hex"), None).unwrap();
    let client_session =
        Session::new(crypto, c.secret("client_secret_hex"), Some(token.clone())).unwrap();
    let (node_did, client_did) = (
        node_session.did().to_string(),
        client_session.did().to_string(),
    );
    let (node_nonce, client_nonce) = (c.bytes("node_random_hex"), c.bytes("client_random_hex"));
    let mut node = NodeSocket::new(
        crypto,
        Es256Notes::new(crypto),
        Listed::new(&[&node_nonce]),
        node_session,
        &space,
        Some(MemorySpace::public(&space)),
        now,
    );
    let mut client = ClientSocket::new(
        crypto,
        Es256Notes::new(crypto),
        Listed::new(&[&client_nonce]),
        client_session,
        MemorySpace::public(&space),
        None,
        now,
    );
    let mut sent: Vec<(&str, String)> = Vec::new();
    for _ in 0..8 {
        let mut quiet = true;
        while let Some(o) = node.poll() {
            quiet = false;
            match o {
                SocketOutput::SendText(t) => {
                    sent.push(("node text", t.clone()));
                    client.handle(now, SocketInput::Text(t));
                }
                SocketOutput::SendBinary(b) => {
                    sent.push(("node binary", String::from_utf8(b.clone()).unwrap()));
                    client.handle(now, SocketInput::Binary(b));
                }
                SocketOutput::Close(code) => panic!("{}: node closed {code:?}", c.id),
                _ => {}
            }
        }
        while let Some(o) = client.poll() {
            quiet = false;
            match o {
                SocketOutput::SendText(t) => {
                    sent.push(("client text", t.clone()));
                    node.handle(now, SocketInput::Text(t));
                }
                SocketOutput::SendBinary(b) => {
                    sent.push(("client binary", String::from_utf8(b.clone()).unwrap()));
                    node.handle(now, SocketInput::Binary(b));
                }
                SocketOutput::Close(code) => panic!("{}: client closed {code:?}", c.id),
                _ => {}
            }
        }
        if quiet {
            break;
        }
    }
    assert_eq!(node.peer(), Some(client_did.as_str()));
    assert_eq!(client.peer(), Some(node_did.as_str()));
    let names = [
        ("node text", "challenge"),
        ("client text", "hello"),
        ("node text", "welcome"),
    ];
    assert!(sent.len() >= 5, "{}: {sent:?}", c.id);
    for (i, (who, name)) in names.iter().enumerate() {
        assert_eq!(sent[i].0, *who, "{}: frame {i}", c.id);
        c.out(name, sent[i].1.clone());
    }
    // After the welcome each side's first binary frame is its `who`.
    let who_of = |side: &str| {
        sent.iter()
            .find(|(w, _)| *w == side)
            .map(|(_, t)| t.clone())
            .unwrap()
    };
    let challenge: Value = serde_json::from_str(c.got("challenge")).unwrap();
    let n_s = challenge["nonce"].as_str().unwrap().to_string();
    assert_eq!(n_s, base64url::encode(&node_nonce));
    let hello: Value = serde_json::from_str(c.got("hello")).unwrap();
    let n_c = hello["nonce"].as_str().unwrap().to_string();
    assert_eq!(n_c, base64url::encode(&client_nonce));
    let h = auth::peer_client_label(&space, &client_did, &node_did, &n_s);
    let w = auth::peer_server_label(&space, &node_did, &n_c);
    assert!(auth::verify(
        crypto,
        &client_did,
        &h,
        hello["sig"].as_str().unwrap()
    ));
    let welcome: Value = serde_json::from_str(c.got("welcome")).unwrap();
    assert!(auth::verify(
        crypto,
        &node_did,
        &w,
        welcome["sig"].as_str().unwrap()
    ));
    c.out("H", h);
    c.out("W", w);
    c.out("who_from_client", who_of("client binary"));
    c.out("who_from_node", who_of("node binary"));
    // The same `who`, wrapped in a mesh frame (§7.1, §9.1), with a note and without.
    let room = Room::of_space(crypto, &space);
    let with_note = Frame {
        room: room.as_str().into(),
        kind: node_socket::WHO.into(),
        payload: json!({ "note": token }),
    };
    let without = Frame {
        room: room.as_str().into(),
        kind: node_socket::WHO.into(),
        payload: json!({}),
    };
    c.out(
        "mesh_who_with_note",
        String::from_utf8(with_note.to_bytes(&client_did)).unwrap(),
    );
    c.out(
        "mesh_who_without_note",
        String::from_utf8(without.to_bytes(&node_did)).unwrap(),
    );
}

fn close_codes(c: &mut Case<'_>) {
    let show = |code: CloseCode| format!("{} {}", code.code, code.reason);
    c.out("peer_protocol_error", show(node_socket::PROTOCOL_ERROR));
    c.out("peer_refused", show(node_socket::REFUSED));
    c.out("peer_let_go", show(node_socket::LET_GO));
    c.out(
        "peer_handshake_timeout",
        show(node_socket::HANDSHAKE_TIMEOUT),
    );
    c.out("peer_too_big", show(node_socket::TOO_BIG));
    c.out(
        "peer_handshake_wait_ms",
        node_socket::HANDSHAKE_WAIT.as_millis().to_string(),
    );
    c.out("relay_rate", relay_server::CLOSE_RATE.to_string());
    c.out("relay_silent", relay_server::CLOSE_SILENT.to_string());
    c.out("relay_full", relay_server::CLOSE_FULL.to_string());
    for (name, r) in [
        ("relay_refused_address", Refusal::AddressFull),
        ("relay_refused_full", Refusal::RelayFull),
    ] {
        c.out(name, format!("{} {}", r.http_status(), r.reason()));
    }
}

fn turn(c: &mut Case<'_>) {
    let random: [u8; 9] = c.bytes("random_hex").try_into().unwrap();
    let secret = c.s("secret").as_bytes().to_vec();
    for p in providers() {
        let now = Timestamp::from_millis(c.u("now_ms"));
        let issued =
            TurnCredential::issue(p, &mut Listed::new(&[&random]), &secret, now, c.u("ttl_s"));
        let by_hand = TurnCredential::new(p, &secret, c.u("now_ms") / 1000 + c.u("ttl_s"), &random);
        assert_eq!(issued, by_hand);
        if c.computed.is_empty() {
            c.out("username", issued.username.clone());
            c.out("credential", issued.credential.clone());
            c.out("expires_at_ms", (issued.expires_s * 1000).to_string());
        } else {
            assert_eq!(c.got("credential"), issued.credential);
        }
    }
}

fn signal(c: &mut Case<'_>) {
    for p in providers() {
        let room = Room::of_space(p, c.s("space_id"));
        let key = c.secret("origin_secret_hex");
        let origin = did_of(p, &key);
        let target = did_of(p, &c.secret("target_secret_hex"));
        let kind = match c.s("kind") {
            "offer" => SignalKind::Offer,
            _ => SignalKind::Answer,
        };
        let (sdp, at) = (c.s("sdp").to_string(), c.u("at"));
        let label = introduction::label(room.as_str(), &origin, &target, kind, at, &sdp);
        let s = Signal::new(p, &key, room.as_str(), &origin, &target, kind, &sdp, at).unwrap();
        assert!(auth::verify(p, &origin, &label, &s.sig));
        let frame = String::from_utf8(signal_frame::write(room.as_str(), &origin, &s)).unwrap();
        let parsed = Frame::parse(frame.as_bytes()).unwrap();
        assert_eq!(Signal::parse(&parsed.payload), Ok(s.clone()));
        if c.computed.is_empty() {
            c.out("room", room.as_str().to_string());
            c.out("origin", origin);
            c.out("target", target);
            c.out("signed_text", label);
            c.out("sig", s.sig.clone());
            c.out("frame", frame);
        } else {
            assert_eq!(c.got("frame"), frame);
        }
    }
}

fn airc_addresses(c: &mut Case<'_>) {
    for text in c.inputs["addresses"].as_array().unwrap().clone() {
        let text = text.as_str().unwrap();
        let shown = match Address::parse(text) {
            Ok(a) => {
                // A canonical address reads back as itself.
                let canonical = a.to_string();
                assert_eq!(Address::parse(&canonical).unwrap().to_string(), canonical);
                canonical
            }
            Err(e) => format!("refused: {e}"),
        };
        c.out(text, shown);
    }
}

fn airc_ts_ms(c: &mut Case<'_>) {
    for ts in c.inputs["ts"].as_array().unwrap().clone() {
        let key = ts.to_string();
        let ms = signing::ts_ms(ts.as_f64().unwrap());
        c.out(&key, ms.map_or("invalid".into(), |m| m.to_string()));
    }
}

fn airc_ack(c: &mut Case<'_>) {
    let mut queued = Ack::with_code(c.s("id"), AckStatus::Queued, AckCode::EndpointOffline);
    queued.by = Some(c.s("by").into());
    let delivered = Ack::new(c.s("id"), AckStatus::Delivered);
    for (name, ack) in [("queued_line", queued), ("delivered_line", delivered)] {
        let frame = AircFrame::Ack(ack);
        let line = String::from_utf8(framing::encode(&frame)).unwrap();
        let text = line.strip_suffix('\n').expect("a frame ends in a newline");
        let value: Value = serde_json::from_str(text).unwrap();
        assert_eq!(AircFrame::from_json(&value).unwrap(), frame);
        c.out(name, text.to_string());
    }
}

fn airc_message_id(c: &mut Case<'_>) {
    let random = c.bytes("random_hex");
    let mut rng = Listed::new(&[&random]);
    let id = airc_frame::message_id(&mut rng);
    assert!(rng.used_up());
    c.out("id", id);
}

fn k1_secret(c: &Case<'_>, key: &str) -> Secp256k1Secret {
    Secp256k1Secret::from_bytes(c.key32(key))
}

/// The NIP-01 id serialization of an event, by hand: `[0,pubkey,created_at,kind,tags,content]`
/// as `JSON.stringify` writes it (no control characters occur in the examples).
fn id_text_by_hand(e: &Event) -> String {
    js::stringify(&json!([
        0,
        hex::encode(&e.pubkey),
        e.created_at,
        e.kind,
        e.tags,
        e.content
    ]))
}

/// Checks a signed event from the primitives alone: its id is SHA-256 of the serialization
/// built by hand, and its signature verifies over that id.
fn check_event_by_hand(crypto: &dyn CryptoProvider, e: &Event) -> String {
    let text = id_text_by_hand(e);
    assert_eq!(
        text,
        event::id_serialization(&e.pubkey, e.created_at, e.kind, &e.tags, &e.content)
    );
    assert_eq!(crypto.sha256(&[text.as_bytes()]), e.id);
    assert!(crypto.schnorr_verify(&e.pubkey, &e.id, &e.sig));
    text
}

fn nostr_auth(c: &mut Case<'_>) {
    // The relay key from SECRET, as vectors/nostr/relay-identity.json's first case has it.
    let relay_identity: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("vectors/nostr/relay-identity.json")).unwrap(),
    )
    .unwrap();
    let listed = &relay_identity["cases"][0];
    assert_eq!(listed["secret"], c.inputs["secret"], "{}", c.id);
    assert_eq!(listed["relay_url"], c.inputs["relay_url"], "{}", c.id);
    let now = Timestamp::from_secs(c.u("now_s"));
    let aux = c.bytes("aux_hex");
    for p in providers() {
        let derived = identity::derive_secret(p, c.s("secret").as_bytes(), c.s("relay_url"));
        assert_eq!(
            derived,
            p.hmac_sha256(c.s("secret").as_bytes(), &[c.s("relay_url").as_bytes()])
        );
        assert_eq!(
            hex::encode(&derived),
            listed["private_key_hex"].as_str().unwrap()
        );
        let key = RelayKey::derive(p, c.s("secret").as_bytes(), c.s("relay_url")).unwrap();
        assert_eq!(key.pubkey_hex(), listed["pubkey_hex"].as_str().unwrap());
        let mut rng = Listed::new(&[&aux]);
        let event = key
            .sign_auth(p, &mut rng, now, c.s("peer_url"), c.s("challenge"))
            .unwrap();
        assert!(rng.used_up());
        let id_text = check_event_by_hand(p, &event);
        // The peer it is sent to accepts it, as this relay's key.
        assert_eq!(
            nostr_auth_check(p, &event, now, c.s("peer_url"), c.s("challenge")),
            Ok(key.pubkey())
        );
        let frame = ClientMessage::Auth(event.clone()).to_text();
        assert_eq!(
            ClientMessage::parse(&frame),
            Ok(ClientMessage::Auth(event.clone()))
        );
        if c.computed.is_empty() {
            c.out("private_key_hex", hex::encode(&derived));
            c.out("pubkey_hex", key.pubkey_hex());
            c.out("id_serialization", id_text);
            c.out("id", event.id_hex());
            c.out("auth_frame", frame);
        } else {
            assert_eq!(c.got("auth_frame"), frame, "{}: {}", c.id, p.name());
        }
    }
}

fn nostr_scopes(c: &mut Case<'_>) {
    let now = Timestamp::from_secs(c.u("now_s"));
    let doc = &c.inputs["nip11"];
    let (scopes, skipped) = scope::from_document(doc);
    let from = now.saturating_sub(LIVE_OVERLAP).as_secs();
    let filters: Vec<Filter> = scopes.iter().map(|s| s.live_filter(now, from)).collect();
    // By hand: each listed scope's kinds expanded and sorted, `since` the latest of its `since`,
    // `now - windowSeconds` and `now - 120`.
    let listed = doc["peering"]["scopes"].as_array().unwrap();
    let mut valid = 0;
    for s in listed {
        let Some(kinds) = s["kinds"].as_array() else {
            continue;
        };
        let mut expanded: Vec<u64> = Vec::new();
        let mut ok = true;
        for k in kinds {
            match k {
                Value::Array(pair) => {
                    let (a, b) = (pair[0].as_u64().unwrap(), pair[1].as_u64().unwrap());
                    ok &= a <= b;
                    expanded.extend(a..=b);
                }
                other => expanded.push(other.as_u64().unwrap()),
            }
        }
        if !ok {
            continue;
        }
        expanded.sort_unstable();
        expanded.dedup();
        let since = [
            s["since"].as_u64().unwrap_or(0),
            s["windowSeconds"]
                .as_u64()
                .map_or(0, |w| c.u("now_s").saturating_sub(w)),
            c.u("now_s") - LIVE_OVERLAP.as_secs(),
        ]
        .into_iter()
        .max()
        .unwrap();
        let f = filters[valid].to_value();
        assert_eq!(f["kinds"], json!(expanded), "{}: scope {valid}", c.id);
        assert_eq!(f["since"], json!(since), "{}: scope {valid}", c.id);
        valid += 1;
    }
    assert_eq!(valid, scopes.len(), "{}", c.id);
    assert_eq!(skipped, listed.len() - valid, "{}", c.id);
    c.out("skipped", skipped.to_string());
    // The reconciliation pieces start at each scope's cutoff, without the live overlap.
    let pieces: Vec<Value> = scopes
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            s.pieces(i, now)
                .into_iter()
                .map(move |piece| {
                    assert_eq!(piece.since, s.cutoff(now));
                    piece.filter(s).to_value()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    c.out("reconcile_filters", js::stringify(&Value::Array(pieces)));
    c.out(
        "live_req",
        ClientMessage::Req {
            subscription: LIVE_SUB.to_string(),
            filters,
        }
        .to_text(),
    );
}

fn nostr_rate_limited(c: &mut Case<'_>) {
    let now = Timestamp::from_secs(c.u("now_s"));
    let (peer, other) = ([1u8; 32], [2u8; 32]);
    let mut limiter = PeerRequestLimiter::new(RequestBudget::default(), 1);
    let mut granted = 0;
    let refused = loop {
        match limiter.admit(now, &peer) {
            Admission::Granted => granted += 1,
            refused => break refused,
        }
        assert!(granted <= 300, "{}: no refusal", c.id);
    };
    assert_eq!(granted, 300, "{}: the default budget is 300 a minute", c.id);
    // A second peer on a table sized for one: the limiter cannot keep its budget.
    let unavailable = limiter.admit(now, &other);
    assert_eq!(unavailable, Admission::Unavailable);
    assert_eq!(limiter::refusal_reason(Admission::Granted), None);
    let sub = c.s("subscription").to_string();
    for (name, a) in [
        ("closed_spent", refused),
        ("closed_unavailable", unavailable),
    ] {
        let reason = limiter::refusal_reason(a).unwrap();
        assert!(reason.starts_with("rate-limited: "));
        let frame = RelayMessage::Closed {
            subscription: sub.clone(),
            message: reason,
        }
        .to_text();
        c.out(name, frame);
    }
}

/// A NIP-01 event signed with the case's `author_secret_hex` and `aux_hex`.
fn case_event(c: &Case<'_>, p: &dyn CryptoProvider) -> Event {
    let mut rng = Listed::new(&[&c.bytes("aux_hex")]);
    let e = UnsignedEvent {
        created_at: c.u("created_at"),
        kind: c.u("kind") as u16,
        tags: vec![],
        content: c.s("content").into(),
    }
    .sign(p, &k1_secret(c, "author_secret_hex"), &mut rng)
    .unwrap();
    assert!(rng.used_up());
    e
}

fn circle_member(c: &mut Case<'_>) {
    let p = weft_proto::crypto::default_provider();
    let event = case_event(c, p);
    check_event_by_hand(p, &event);
    let filters = vec![Filter::from_value(&c.inputs["filter"]).unwrap()];
    let qid = c.s("qid").to_string();
    let publish = |ttl: u8| MemberFrame::Publish {
        ttl,
        event: event.clone(),
    };
    let req = |ttl: u8, budget_ms: u64| MemberFrame::Req {
        ttl,
        qid: qid.clone(),
        budget_ms,
        filters: filters.clone(),
    };
    // As the originating device writes them: the default caps less its own hop, a request's
    // whole budget less one hop's cost.
    let own_budget = circle::BACKLOG_BUDGET_MS - circle::BACKLOG_HOP_COST_MS;
    assert_eq!(own_budget, 8_000);
    // One forward of frames arriving with more hops than the clamp: at most FORWARD_CLAMP less
    // one, the budget less one hop's cost.
    let arriving = c.u("arriving_ttl") as u8;
    let hops = arriving.min(circle::FORWARD_CLAMP) - 1;
    assert_eq!(hops, arriving.min(3) - 1);
    for (name, frame) in [
        ("publish", publish(circle::DEFAULT_PUBLISH_TTL - 1)),
        ("req", req(circle::DEFAULT_SUBSCRIBE_TTL - 1, own_budget)),
        ("publish_arriving", publish(arriving)),
        ("publish_forwarded", publish(hops)),
        ("req_arriving", req(arriving, own_budget)),
        (
            "req_forwarded",
            req(hops, own_budget - circle::BACKLOG_HOP_COST_MS),
        ),
    ] {
        let text = frame.to_text();
        assert_eq!(
            MemberFrame::parse(&text),
            Ok(frame.clone()),
            "{}: {name}",
            c.id
        );
        // The event rides byte-identical as the inner NIP-01 message.
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v[0], "MESH");
        if let MemberFrame::Publish { .. } = frame {
            let inner = ClientMessage::Event(event.clone()).to_text();
            assert!(text.ends_with(&format!(",{inner}]")), "{}: {name}", c.id);
        }
        c.out(name, text);
    }
}

fn circle_pairing(c: &mut Case<'_>) {
    for p in providers() {
        let me = k1_secret(c, "author_secret_hex");
        let peer = p
            .schnorr_public_key(&k1_secret(c, "peer_secret_hex"))
            .unwrap();
        let mut rng = Listed::new(&[&c.bytes("aux_hex")]);
        let record = pairing::pairing_record(p, &me, &mut rng, &peer, c.u("created_at")).unwrap();
        assert!(rng.used_up());
        let id_text = check_event_by_hand(p, &record);
        assert_eq!(record.kind, 30_616);
        assert_eq!(pairing::named_peer(&record), Some(peer));
        let text = record.to_json();
        if c.computed.is_empty() {
            c.out("peer_pubkey_hex", hex::encode(&peer));
            c.out("id_serialization", id_text);
            c.out("record", text);
        } else {
            assert_eq!(c.got("record"), text, "{}: {}", c.id, p.name());
        }
    }
}

fn circle_link(c: &mut Case<'_>) {
    let p = weft_proto::crypto::default_provider();
    let now = Timestamp::from_millis(c.u("now_ms"));
    let (sa, sb) = (k1_secret(c, "a_secret_hex"), k1_secret(c, "b_secret_hex"));
    let (na, nb) = (c.key32("a_nonce_hex"), c.key32("b_nonce_hex"));
    let (ka, kb) = (
        p.schnorr_public_key(&sa).unwrap(),
        p.schnorr_public_key(&sb).unwrap(),
    );
    let mut a = LinkAuth::new(p, sa, &mut Listed::new(&[&na]), now).unwrap();
    let mut b = LinkAuth::new(p, sb, &mut Listed::new(&[&nb]), now).unwrap();
    let sent = |m: &mut LinkAuth| match m.poll() {
        Some(LinkOutput::Send(t)) => t,
        other => panic!("expected a frame, got {other:?}"),
    };
    let (hello_a, hello_b) = (sent(&mut a), sent(&mut b));
    assert_eq!(a.handle_text(&hello_b), Step::Taken);
    assert_eq!(b.handle_text(&hello_a), Step::Taken);
    let (proof_a, proof_b) = (sent(&mut a), sent(&mut b));
    assert_eq!(a.handle_text(&proof_b), Step::Proven(kb));
    assert_eq!(b.handle_text(&proof_a), Step::Proven(ka));
    // By hand: A signs SHA-256(context ‖ B's nonce ‖ A's nonce ‖ A's key ‖ B's key), with aux
    // SHA-256(A's nonce ‖ B's nonce).
    let msg_a = p.sha256(&[link::PROOF_CONTEXT, &nb, &na, &ka, &kb]);
    let aux_a = p.sha256(&[&na, &nb]);
    let sig_a = p
        .schnorr_sign(&k1_secret(c, "a_secret_hex"), &msg_a, &aux_a)
        .unwrap();
    assert_eq!(
        proof_a,
        js::stringify(&json!(["CIRCLE", "proof", hex::encode(&sig_a)]))
    );
    assert_eq!(
        hello_a,
        js::stringify(&json!([
            "CIRCLE",
            "hello",
            hex::encode(&ka),
            hex::encode(&na)
        ]))
    );
    c.out("hello_a", hello_a);
    c.out("hello_b", hello_b);
    c.out("signed_by_a_hex", hex::encode(&msg_a));
    c.out("aux_a_hex", hex::encode(&aux_a));
    c.out("proof_a", proof_a);
    c.out("proof_b", proof_b);
}

fn meshstr_node_key(c: &mut Case<'_>) {
    let p = weft_proto::crypto::default_provider();
    let x = p.schnorr_public_key(&k1_secret(c, "secret_hex")).unwrap();
    let mk = keys::multikey(KeyKind::Node, &x);
    assert_eq!(mk, format!("fe70102{}", hex::encode(&x)));
    assert_eq!(keys::parse_multikey(KeyKind::Node, &mk), Some(x));
    let did = keys::did_nostr(&x);
    assert_eq!(did, format!("did:nostr:{}", hex::encode(&x)));
    c.out("x_hex", hex::encode(&x));
    c.out("multikey", mk);
    c.out("did", did);
}

fn meshstr_receipt(c: &mut Case<'_>) {
    let counters: Vec<u64> = c.inputs["counters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let secret = k1_secret(c, "subject_secret_hex");
    let aux = c.key32("aux_hex");
    for p in providers() {
        let subject = p.schnorr_public_key(&secret).unwrap();
        let mut r = Receipt {
            grant: c.s("grant").into(),
            window: receipt::window_of(c.u("at"), c.u("window_secs")),
            seq: 0,
            prev: [0; 32],
            counters: Counters(counters.clone().try_into().unwrap()),
            forwarded_for: vec![],
            at: c.u("at"),
            sig: None,
        };
        r.sign(p, &secret, &aux).unwrap();
        assert!(r.verify(p, &subject));
        let signed = r.to_value();
        // By hand: the link is SHA-256 of the canonical body without `sig`.
        let mut body = signed.as_object().unwrap().clone();
        assert!(body.remove("sig").is_some());
        let body_text = cjson::canonical(&Value::Object(body));
        let link = p.sha256(&[body_text.as_bytes()]);
        assert_eq!(r.link(p), link);
        assert_eq!(Receipt::from_value(&signed), Ok(r.clone()));
        // The next receipt in the window chains to this one's link.
        let mut next = r.clone();
        next.seq = 1;
        next.prev = link;
        next.sig = None;
        next.sign(p, &secret, &aux).unwrap();
        let signed_text = cjson::canonical(&signed);
        if c.computed.is_empty() {
            c.out("window", r.window.to_string());
            c.out("link_input", body_text);
            c.out("link_hex", hex::encode(&link));
            c.out("receipt", signed_text);
            c.out("next_link_input", {
                let mut b = next.to_value().as_object().unwrap().clone();
                b.remove("sig");
                cjson::canonical(&Value::Object(b))
            });
        } else {
            assert_eq!(c.got("receipt"), signed_text, "{}: {}", c.id, p.name());
        }
    }
}

fn meshstr_grant(c: &mut Case<'_>) {
    let (issuer, subject) = (
        k1_secret(c, "issuer_secret_hex"),
        k1_secret(c, "subject_secret_hex"),
    );
    let (blinding, nonce) = (c.key32("blinding_hex"), c.key32("nonce_hex"));
    let body = c.inputs["body"].clone();
    let env = Envelope {
        kind: events::GRANT,
        window_secs: c.u("window_secs"),
        epoch: c.u("epoch"),
        created_at: c.u("created_at"),
        expiration: c.u("expiration"),
    };
    for p in providers() {
        let issuer_pk = p.schnorr_public_key(&issuer).unwrap();
        let subject_pk = p.schnorr_public_key(&subject).unwrap();
        let unsigned =
            grant::seal(p, &issuer, &subject_pk, &env, &body, &blinding, &nonce).unwrap();
        // By hand: d = HKDF-SHA256(salt, ECDH x, info), the same from either side.
        let shared = p.secp256k1_ecdh(&issuer, &subject_pk).unwrap();
        let d = hkdf32(p, b"meshstr/blinding/grant/1", &shared, b"meshstr grant d");
        assert_eq!(
            grant::blinded_d(p, &subject, &issuer_pk, Blinding::Grant).unwrap(),
            d
        );
        let plain = cjson::canonical(&json!({"blinding": hex::encode(&blinding), "body": body}));
        let commit = p.sha256(&[&blinding, cjson::canonical(&body).as_bytes()]);
        let tag = |n: &str| {
            unsigned
                .tags
                .iter()
                .find(|t| t[0] == n)
                .map(|t| t[1].clone())
                .unwrap()
        };
        assert_eq!(tag("d"), hex::encode(&d));
        assert_eq!(tag("commit"), hex::encode(&commit));
        assert_eq!(tag("scheme"), "sha256-blinded/1");
        // The content is NIP-44 v2 of the plaintext, and opens as the subject.
        let ck = nip44::conversation_key(p, &issuer, &subject_pk).unwrap();
        assert_eq!(nip44::decrypt(p, &ck, &unsigned.content).unwrap(), plain);
        let mut rng = Listed::new(&[&c.bytes("aux_hex")]);
        let event = unsigned.clone().sign(p, &issuer, &mut rng).unwrap();
        check_event_by_hand(p, &event);
        assert_eq!(grant::open(p, &subject, &event).unwrap(), body);
        let tags = js::stringify(&json!(unsigned.tags));
        if c.computed.is_empty() {
            c.out("ecdh_x_hex", hex::encode(&shared));
            c.out("d_hex", hex::encode(&d));
            c.out("plaintext", plain);
            c.out("commit_hex", hex::encode(&commit));
            c.out("conversation_key_hex", hex::encode(&ck));
            c.out("content", unsigned.content.clone());
            c.out("tags", tags);
        } else {
            assert_eq!(c.got("content"), unsigned.content, "{}: {}", c.id, p.name());
        }
    }
}

fn meshstr_window(c: &mut Case<'_>) {
    for pair in c.inputs["at_window"].as_array().unwrap().clone() {
        let (at, w) = (pair[0].as_u64().unwrap(), pair[1].as_u64().unwrap());
        let index = receipt::window_of(at, w);
        assert_eq!(index, at / w);
        c.out(&format!("{at}/{w}"), index.to_string());
    }
}

/// Every string in `v`, nested ones included.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

fn replay_file(path: &str) {
    let full = root().join(path);
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut file: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let bless = std::env::var_os("WEFT_BLESS_INTEROP").is_some();
    let mut done: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    let cases = file["cases"].as_array().expect("a cases array").clone();
    assert!(!cases.is_empty(), "{path}: no cases");
    for (i, case) in cases.iter().enumerate() {
        let id = case["id"].as_str().expect("an id").to_string();
        let mut c = Case {
            id: id.clone(),
            inputs: &case["inputs"],
            expected: &case["outputs"],
            computed: Map::new(),
        };
        match case["replay"].as_str().expect("a replay name") {
            "aad" => aad(&mut c),
            "hello" => hello(&mut c),
            "description" => description(&mut c),
            "offer" => offer(&mut c),
            "note" => note(&mut c),
            "member" => member(&mut c, &done),
            "peer-handshake" => peer_handshake(&mut c, &done),
            "close-codes" => close_codes(&mut c),
            "turn" => turn(&mut c),
            "signal" => signal(&mut c),
            "airc-addresses" => airc_addresses(&mut c),
            "airc-ts-ms" => airc_ts_ms(&mut c),
            "airc-ack" => airc_ack(&mut c),
            "airc-message-id" => airc_message_id(&mut c),
            "nostr-auth" => nostr_auth(&mut c),
            "nostr-scopes" => nostr_scopes(&mut c),
            "nostr-rate-limited" => nostr_rate_limited(&mut c),
            "circle-member" => circle_member(&mut c),
            "circle-pairing" => circle_pairing(&mut c),
            "circle-link" => circle_link(&mut c),
            "meshstr-node-key" => meshstr_node_key(&mut c),
            "meshstr-receipt" => meshstr_receipt(&mut c),
            "meshstr-grant" => meshstr_grant(&mut c),
            "meshstr-window" => meshstr_window(&mut c),
            other => panic!("{path}: case {id} names no replay {other}"),
        }
        let computed = Value::Object(c.computed.clone());
        if bless {
            file["cases"][i]["outputs"] = computed;
        } else {
            assert_eq!(
                c.expected, &computed,
                "{path}: case {id}: weft's outputs differ from the file's (a changed choice? see this file's docs)"
            );
        }
        assert!(
            done.insert(id.clone(), c.computed).is_none(),
            "{path}: {id} twice"
        );
    }
    if bless {
        let mut text = serde_json::to_string_pretty(&file).unwrap();
        text.push('\n');
        std::fs::write(&full, text).unwrap();
    }
    // The guide shows every case: its id, and each output as it is.
    let guide = std::fs::read_to_string(root().join("docs/interop.md")).unwrap();
    for (id, outputs) in &done {
        assert!(
            guide.contains(id.as_str()),
            "docs/interop.md does not show case {id}"
        );
        let mut shown = Vec::new();
        strings(&Value::Object(outputs.clone()), &mut shown);
        for s in shown {
            // A text with line ends or other controls is shown as JSON writes it, escaped.
            let escaped = js::stringify(&Value::from(s.as_str()));
            let escaped = &escaped[1..escaped.len() - 1];
            assert!(
                guide.contains(&s) || guide.contains(escaped),
                "docs/interop.md does not show case {id}'s output {s}"
            );
        }
    }
}

#[test]
fn minca_interop_examples_replay_against_weft_and_the_guide_shows_them() {
    replay_file("vectors/interop/minca.json");
}

#[test]
fn airc_interop_examples_replay_against_weft_and_the_guide_shows_them() {
    replay_file("vectors/interop/airc.json");
}

#[test]
fn nostr_peering_interop_examples_replay_against_weft_and_the_guide_shows_them() {
    replay_file("vectors/interop/nostr.json");
}

#[test]
fn nap_mesh_interop_examples_replay_against_weft_and_the_guide_shows_them() {
    replay_file("vectors/interop/circle.json");
}

#[test]
fn meshstr_interop_examples_replay_against_weft_and_the_guide_shows_them() {
    replay_file("vectors/interop/meshstr.json");
}
