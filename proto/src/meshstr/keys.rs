//! Keys and identity (meshstr §2, §2.1, §2.3): `did:nostr`, multikeys with multibase `f`, and the
//! node profile a resolver emits for a DID with a live descriptor.
//!
//! A node holds three keys: the node key (secp256k1, multicodec `0xe7`, the DID subject), the
//! agreement key (X25519, `0xec`) and the transport key (Ed25519, `0xed`). Multikey values are
//! multibase `f` (base16, lower case) of the unsigned-varint multicodec followed by the key. The
//! node key is BIP-340 x-only; its multikey is the compressed point with the even `y` BIP-340
//! implies (`02 ‖ x`), as `did:nostr` writes it (`fe70102…`).

use alloc::string::String;
use alloc::vec::Vec;
use serde_json::{Value, json};

use super::lower_hex;
use crate::codec::hex;

/// The DID method prefix.
pub const DID_NOSTR_PREFIX: &str = "did:nostr:";

/// A key's role and curve (§2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// The node key: secp256k1, multicodec `0xe7`.
    Node,
    /// The agreement key: X25519, multicodec `0xec`.
    Agreement,
    /// The transport key: Ed25519, multicodec `0xed`.
    Transport,
}

impl KeyKind {
    /// The multicodec code.
    pub const fn multicodec(self) -> u16 {
        match self {
            KeyKind::Node => 0xe7,
            KeyKind::Agreement => 0xec,
            KeyKind::Transport => 0xed,
        }
    }

    /// The multikey prefix after `f`: the code as an unsigned varint, in hex (all three codes are
    /// two varint bytes, `xx 01`), then `02` for the node key's even-y compressed point.
    const fn hex_prefix(self) -> &'static str {
        match self {
            KeyKind::Node => "e70102",
            KeyKind::Agreement => "ec01",
            KeyKind::Transport => "ed01",
        }
    }
}

/// The multikey of a 32-byte key (x-only for [`KeyKind::Node`]): `f` + hex(varint ‖ key).
pub fn multikey(kind: KeyKind, key: &[u8; 32]) -> String {
    let mut s = String::with_capacity(1 + kind.hex_prefix().len() + 64);
    s.push('f');
    s.push_str(kind.hex_prefix());
    s.push_str(&hex::encode(key));
    s
}

/// Reads a multikey of `kind`: multibase `f` only (no document mixes bases), lower-case hex, the
/// right multicodec, and exactly 32 key bytes.
pub fn parse_multikey(kind: KeyKind, text: &str) -> Option<[u8; 32]> {
    let rest = text.strip_prefix('f')?.strip_prefix(kind.hex_prefix())?;
    lower_hex::<32>(rest)
}

/// `did:nostr:<64 hex>` of a node key.
pub fn did_nostr(key: &[u8; 32]) -> String {
    let mut s = String::from(DID_NOSTR_PREFIX);
    s.push_str(&hex::encode(key));
    s
}

/// The node key of a `did:nostr`: exactly 64 lower-case hex digits after the prefix.
pub fn did_nostr_key(did: &str) -> Option<[u8; 32]> {
    lower_hex::<32>(did.strip_prefix(DID_NOSTR_PREFIX)?)
}

/// A service endpoint a node profile lists (§2.3): its type and URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    /// `NostrRelay`, `BlossomServer`, `IrohNode` or `DIDCommMessaging`.
    pub kind: &'static str,
    /// Where.
    pub endpoint: String,
}

/// The minimal `did:nostr` document of a node key: what a resolver gives for any identity.
pub fn minimal_document(key: &[u8; 32]) -> Value {
    let did = did_nostr(key);
    json!({
        "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"],
        "id": did,
        "type": "DIDNostr",
        "verificationMethod": [{
            "id": alloc::format!("{did}#key1"),
            "type": "Multikey",
            "controller": did,
            "publicKeyMultibase": multikey(KeyKind::Node, key),
        }],
        "authentication": ["#key1"],
        "assertionMethod": ["#key1"],
    })
}

/// The node profile (§2.3): the minimal document plus `#agree` (X25519, `keyAgreement`) and
/// `#wire` (Ed25519) verification methods, and the services the live descriptor declared. The
/// caller passes keys from a descriptor it has already checked as live; without one, resolve to
/// [`minimal_document`] and change nothing.
pub fn node_profile(
    key: &[u8; 32],
    agreement: Option<&[u8; 32]>,
    transport: Option<&[u8; 32]>,
    services: &[Service],
) -> Value {
    let mut doc = minimal_document(key);
    let did = did_nostr(key);
    let vm = |frag: &str, kind: KeyKind, k: &[u8; 32]| {
        json!({
            "id": alloc::format!("{did}#{frag}"),
            "type": "Multikey",
            "controller": did,
            "publicKeyMultibase": multikey(kind, k),
        })
    };
    let methods = doc["verificationMethod"]
        .as_array_mut()
        .expect("built above");
    if let Some(a) = agreement {
        methods.push(vm("agree", KeyKind::Agreement, a));
    }
    if let Some(t) = transport {
        methods.push(vm("wire", KeyKind::Transport, t));
    }
    if agreement.is_some() {
        doc["keyAgreement"] = json!(["#agree"]);
    }
    let mut svc: Vec<Value> = Vec::new();
    for (i, s) in services.iter().enumerate() {
        svc.push(json!({
            "id": alloc::format!("#{}-{i}", s.kind),
            "type": s.kind,
            "serviceEndpoint": s.endpoint,
        }));
    }
    if !svc.is_empty() {
        doc["service"] = Value::Array(svc);
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn did_nostr_multikey_matches_the_did_nostr_vector() {
        // did:nostr's own example key (spec §2.5), as nostr-did's test vectors give it.
        let key: [u8; 32] =
            hex::decode_array("124c0fa99407182ece5a24fad9b7f6674902fc422843d3128d38a0afbee0fdd2")
                .unwrap();
        let mk = multikey(KeyKind::Node, &key);
        assert_eq!(
            mk,
            "fe70102124c0fa99407182ece5a24fad9b7f6674902fc422843d3128d38a0afbee0fdd2"
        );
        assert_eq!(parse_multikey(KeyKind::Node, &mk), Some(key));
    }

    #[test]
    fn multikeys_use_base16_lower_and_their_own_codec() {
        let k = [0xab; 32];
        let a = multikey(KeyKind::Agreement, &k);
        let t = multikey(KeyKind::Transport, &k);
        assert!(a.starts_with("fec01"));
        assert!(t.starts_with("fed01"));
        assert_eq!(parse_multikey(KeyKind::Agreement, &a), Some(k));
        // A transport key is not an agreement key, and no other base is read.
        assert_eq!(parse_multikey(KeyKind::Agreement, &t), None);
        assert_eq!(parse_multikey(KeyKind::Agreement, &a.to_uppercase()), None);
        assert_eq!(
            parse_multikey(KeyKind::Agreement, &a.replacen('f', "F", 1)),
            None
        );
        assert_eq!(
            parse_multikey(
                KeyKind::Agreement,
                "z6MkpTHR8VNsBxYAAWHut2Geadd9jSwuBV8xRoAnwWsdvktH"
            ),
            None
        );
        assert_eq!(parse_multikey(KeyKind::Agreement, &a[..a.len() - 2]), None);
        assert_eq!(
            parse_multikey(KeyKind::Agreement, &alloc::format!("{a}00")),
            None
        );
    }

    #[test]
    fn did_nostr_round_trips_and_refuses_other_spellings() {
        let k = [7; 32];
        let d = did_nostr(&k);
        assert_eq!(d.len(), 74);
        assert_eq!(did_nostr_key(&d), Some(k));
        assert_eq!(did_nostr_key(&d.to_uppercase()), None);
        assert_eq!(did_nostr_key("did:nostr:"), None);
        assert_eq!(did_nostr_key(&d.replace("did:nostr:", "did:key:")), None);
    }

    #[test]
    fn the_node_profile_adds_agree_wire_and_services() {
        let doc = node_profile(
            &[1; 32],
            Some(&[2; 32]),
            Some(&[3; 32]),
            &[Service {
                kind: "NostrRelay",
                endpoint: "wss://relay.example.org".into(),
            }],
        );
        let vms = doc["verificationMethod"].as_array().unwrap();
        assert_eq!(vms.len(), 3);
        assert!(vms[1]["id"].as_str().unwrap().ends_with("#agree"));
        assert!(vms[2]["id"].as_str().unwrap().ends_with("#wire"));
        assert_eq!(doc["keyAgreement"], json!(["#agree"]));
        assert_eq!(doc["service"][0]["type"], "NostrRelay");
        // Without a descriptor the answer is the minimal document, unchanged.
        assert_eq!(
            node_profile(&[1; 32], None, None, &[]),
            minimal_document(&[1; 32])
        );
    }
}
