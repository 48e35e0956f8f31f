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

/// How long an agreement key is meant to serve (§2.1: it SHOULD rotate every 90 days, overlapping
/// one window): the advisory expiry a maker writes when none is given. A descriptor may carry two
/// agreement keys while one rotates out.
pub const AGREEMENT_ROTATION_SECS: u64 = 90 * 24 * 3600;

/// Why a 32-byte value is not an X25519 agreement key a node may publish (§2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgreementKeyError {
    /// Not the canonical RFC 7748 encoding of a u-coordinate: the top bit is set, or the value is
    /// not below 2^255 − 19. Another spelling of a key is another string, and §2.1 binds keys by
    /// the string a descriptor carries.
    NonCanonical,
    /// A point of small order (order 1, 2, 4 or 8, on the curve or its twist): every X25519 with
    /// it gives the all-zero shared secret, so ECDH-ES and ECDH-1PU to it (§4) would encrypt
    /// under a key anybody knows.
    SmallOrder,
}

/// The u-coordinates below 2^255 − 19 of the points of small order on Curve25519 and its twist
/// (RFC 7748 §6.1; the list libsodium refuses): 0, 1, two points of order 8, and p − 1.
pub const X25519_SMALL_ORDER: [[u8; 32]; 5] = [
    [0; 32],
    {
        let mut one = [0; 32];
        one[0] = 1;
        one
    },
    [
        0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4,
        0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49,
        0xb8, 0x00,
    ],
    [
        0x5f, 0x9c, 0x95, 0xbc, 0xa3, 0x50, 0x8c, 0x24, 0xb1, 0xd0, 0xb1, 0x55, 0x9c, 0x83, 0xef,
        0x5b, 0x04, 0x44, 0x5c, 0xc4, 0x58, 0x1c, 0x8e, 0x86, 0xd8, 0x22, 0x4e, 0xdd, 0xd0, 0x9f,
        0x11, 0x57,
    ],
    {
        let mut p_minus_1 = [0xff; 32];
        p_minus_1[0] = 0xec;
        p_minus_1[31] = 0x7f;
        p_minus_1
    },
];

/// Checks an X25519 public key as §2.1 and §4 need it: the canonical little-endian encoding of a
/// u-coordinate below 2^255 − 19 with the top bit clear (RFC 7748 §5), and not a point of small
/// order, whose shared secret with any scalar is zero (RFC 7748 §6.1). Any other 32 bytes are a
/// point on the curve or its twist, and X25519 with a clamped scalar on either gives a secret
/// only the two holders know.
pub fn check_agreement_key(key: &[u8; 32]) -> Result<(), AgreementKeyError> {
    if key[31] & 0x80 != 0 {
        return Err(AgreementKeyError::NonCanonical);
    }
    // u ≥ p = 2^255 − 19 with the top bit clear: bytes 1..31 all 0xff, byte 31 0x7f, byte 0 ≥ 0xed.
    if key[31] == 0x7f && key[1..31].iter().all(|b| *b == 0xff) && key[0] >= 0xed {
        return Err(AgreementKeyError::NonCanonical);
    }
    if X25519_SMALL_ORDER.contains(key) {
        return Err(AgreementKeyError::SmallOrder);
    }
    Ok(())
}

/// Reads an agreement key's multikey (`fec01…`) and checks the key ([`check_agreement_key`]).
pub fn parse_agreement_key(text: &str) -> Result<[u8; 32], Option<AgreementKeyError>> {
    let key = parse_multikey(KeyKind::Agreement, text).ok_or(None)?;
    check_agreement_key(&key).map_err(Some)?;
    Ok(key)
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

    /// X25519 with a clamped scalar, by curve25519-dalek (not weft's rule).
    fn x25519(scalar: [u8; 32], u: [u8; 32]) -> [u8; 32] {
        curve25519_dalek::montgomery::MontgomeryPoint(u)
            .mul_clamped(scalar)
            .to_bytes()
    }

    fn h32(s: &str) -> [u8; 32] {
        hex::decode_array(s).unwrap()
    }

    #[test]
    fn agreement_keys_are_canonical_x25519_keys_of_large_order() {
        // RFC 7748 §6.1's Alice and Bob: real keys, accepted, and the secret they agree is the RFC's.
        let alice = h32("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
        let alice_pub = h32("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
        let bob_pub = h32("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
        assert_eq!(check_agreement_key(&alice_pub), Ok(()));
        assert_eq!(check_agreement_key(&bob_pub), Ok(()));
        assert_eq!(
            hex::encode(&x25519(alice, bob_pub)),
            "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
        );
        let mk = multikey(KeyKind::Agreement, &alice_pub);
        assert_eq!(parse_agreement_key(&mk), Ok(alice_pub));

        // Every refused small-order key gives the all-zero secret whoever agrees with it.
        let scalars = [alice, [0x42; 32], h32(&"5a".repeat(32))];
        for k in X25519_SMALL_ORDER {
            assert_eq!(check_agreement_key(&k), Err(AgreementKeyError::SmallOrder));
            assert_eq!(
                parse_agreement_key(&multikey(KeyKind::Agreement, &k)),
                Err(Some(AgreementKeyError::SmallOrder))
            );
            for s in scalars {
                assert_eq!(x25519(s, k), [0; 32], "{}", hex::encode(&k));
            }
        }
        // The other spellings: u ≥ p (p and p + 1 are 0 and 1 again, small order too), and the top
        // bit set, which RFC 7748 masks so that one key would have two strings.
        for low in 0xedu8..=0xff {
            let mut u = [0xff; 32];
            u[0] = low;
            u[31] = 0x7f;
            assert_eq!(
                check_agreement_key(&u),
                Err(AgreementKeyError::NonCanonical)
            );
        }
        let mut p = [0xff; 32];
        p[0] = 0xed;
        p[31] = 0x7f;
        assert_eq!(x25519(alice, p), [0; 32], "p is 0 again");
        let mut high = alice_pub;
        high[31] |= 0x80;
        assert_eq!(
            check_agreement_key(&high),
            Err(AgreementKeyError::NonCanonical)
        );
        assert_eq!(
            x25519(alice, high),
            x25519(alice, alice_pub),
            "the same key as the masked one"
        );
        // Everything else agrees a secret that is not zero: seeded draws, and the neighbours of
        // the refused values.
        let mut draws: Vec<[u8; 32]> = (0u8..=255)
            .map(|i| {
                let p: &dyn crate::crypto::CryptoProvider = crate::crypto::default_provider();
                let mut u = p.sha256(&[b"x25519 draw".as_slice(), &[i]]);
                u[31] &= 0x7f;
                u
            })
            .collect();
        let mut two = [0; 32];
        two[0] = 2;
        let mut nine = [0; 32];
        nine[0] = 9;
        let mut p_minus_2 = [0xff; 32];
        p_minus_2[0] = 0xeb;
        p_minus_2[31] = 0x7f;
        draws.extend([two, nine, p_minus_2]);
        for u in draws {
            let ok = check_agreement_key(&u).is_ok();
            assert!(ok, "{}", hex::encode(&u));
            assert_ne!(x25519(alice, u), [0; 32], "{}", hex::encode(&u));
        }
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
