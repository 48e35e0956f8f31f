//! Node URLs (Minca 04 Network §5.2): where a client dials an always-on node, and the pin.
//!
//! "A node URL MUST be `wss://`, or `ws://` only to `localhost`, `127.0.0.1` or `[::1]`. […] A
//! client MUST refuse any other URL without dialling it." A node URL "MAY pin the node by a DID
//! in its fragment. The fragment is the DID itself, percent-decoded. The client strips it before
//! dialling, so the node never sees it, and puts `?space=` before it. A fragment that is not a
//! `did:key:` makes the URL unusable." The socket is opened to
//! `<node URL>?space=<encodeURIComponent(spaceId)>`, with `&space=` if the URL already has a
//! query.
//!
//! The scheme, host and `ws`-only-to-loopback checks are §1.2's for a relay URL, so the part
//! before the fragment is checked by [`RelayUrl::parse`], and a `<kind>+` scheme (a relay kind,
//! not a node) is refused.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use super::relay_url::{RelayKind, RelayUrl, RelayUrlError};
use crate::codec::did_key::DidKey;

/// The prefix a pin must have (§5.2).
const DID_KEY: &str = "did:key:";

/// Why a node URL is unusable (§5.2). A client refuses it without dialling.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeUrlError {
    /// The URL before the fragment fails the §1.2 checks (scheme, host, `ws` only to loopback).
    Url(RelayUrlError),
    /// A `<kind>+` scheme: a relay's, not a node's.
    RelayKind,
    /// The fragment, percent-decoded, is not a did:key.
    BadPin,
}

impl fmt::Display for NodeUrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Url(e) => write!(f, "node URL: {e}"),
            Self::RelayKind => f.write_str("node URL has a relay kind in its scheme"),
            Self::BadPin => f.write_str("node URL fragment is not a did:key"),
        }
    }
}

impl core::error::Error for NodeUrlError {}

/// A usable node URL: where to dial, and the pinned DID if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeUrl {
    base: RelayUrl,
    pin: Option<String>,
}

impl NodeUrl {
    /// Checks `text` against the §5.2 rules.
    pub fn parse(text: &str) -> Result<Self, NodeUrlError> {
        let (base, fragment) = match text.split_once('#') {
            Some((base, fragment)) => (base, Some(fragment)),
            None => (text, None),
        };
        let base = RelayUrl::parse(base).map_err(NodeUrlError::Url)?;
        if *base.kind() != RelayKind::Minca {
            return Err(NodeUrlError::RelayKind);
        }
        // An empty fragment is no fragment, as a URL parser reports it (`hash` is "").
        let pin = match fragment.filter(|f| !f.is_empty()) {
            None => None,
            Some(f) => {
                let did = percent_decode(f).ok_or(NodeUrlError::BadPin)?;
                if !did.starts_with(DID_KEY) || DidKey::parse(&did).is_err() {
                    return Err(NodeUrlError::BadPin);
                }
                Some(did)
            }
        };
        Ok(Self { base, pin })
    }

    /// The pinned DID, if the URL pins the node.
    pub fn pin(&self) -> Option<&str> {
        self.pin.as_deref()
    }

    /// The URL to dial for `space_id`: the fragment stripped, `?space=` (or `&space=` after an
    /// existing query) with the space id as `encodeURIComponent` writes it.
    pub fn dial_url(&self, space_id: &str) -> String {
        let base = self.base.as_str();
        let mut out = String::with_capacity(base.len() + 7 + space_id.len() * 3);
        out.push_str(base);
        out.push(if base.contains('?') { '&' } else { '?' });
        out.push_str("space=");
        out.push_str(&encode_uri_component(space_id));
        out
    }
}

/// JavaScript's `encodeURIComponent`: every UTF-8 byte percent-encoded in upper-case hex except
/// ASCII letters, digits and `-_.!~*'()`.
pub fn encode_uri_component(text: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
    out
}

/// JavaScript's `decodeURIComponent`: `None` where it would throw (a `%` not followed by two hex
/// digits, or bytes that are not UTF-8).
pub(crate) fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = core::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIN: &str = "did:key:zDnaerDaTF5BXEavCrfRZEk316dpbLsfPDZ3WJ5hRTPFU2169";

    #[test]
    fn a_node_url_is_wss_or_ws_only_to_loopback() {
        for ok in [
            "wss://node.example.com/peer",
            "ws://localhost:8080/peer",
            "ws://127.0.0.1/peer",
            "ws://[::1]:9/peer",
        ] {
            assert!(NodeUrl::parse(ok).is_ok(), "{ok}");
        }
        assert_eq!(
            NodeUrl::parse("ws://node.example.com/peer"),
            Err(NodeUrlError::Url(RelayUrlError::InsecureRemote))
        );
        assert!(matches!(
            NodeUrl::parse("https://node.example.com/peer"),
            Err(NodeUrlError::Url(_))
        ));
        assert_eq!(
            NodeUrl::parse("nostr+wss://node.example.com/peer"),
            Err(NodeUrlError::RelayKind)
        );
    }

    #[test]
    fn the_space_goes_in_the_query_encoded_as_encode_uri_component() {
        let u = NodeUrl::parse("wss://node.example.com/peer").unwrap();
        assert_eq!(
            u.dial_url("abc123"),
            "wss://node.example.com/peer?space=abc123"
        );
        assert_eq!(
            u.dial_url("a b/c?d&é!~*'()"),
            "wss://node.example.com/peer?space=a%20b%2Fc%3Fd%26%C3%A9!~*'()"
        );
        let q = NodeUrl::parse("wss://node.example.com/peer?x=1").unwrap();
        assert_eq!(q.dial_url("s"), "wss://node.example.com/peer?x=1&space=s");
    }

    #[test]
    fn pinning_the_node_takes_the_percent_decoded_fragment_and_strips_it_before_dialling() {
        let u = NodeUrl::parse(&alloc::format!("wss://node.example.com/peer#{PIN}")).unwrap();
        assert_eq!(u.pin(), Some(PIN));
        assert_eq!(
            u.dial_url("abc123"),
            "wss://node.example.com/peer?space=abc123"
        );
        let encoded = PIN.replace(':', "%3A");
        let e = NodeUrl::parse(&alloc::format!("wss://n.example/peer?x=1#{encoded}")).unwrap();
        assert_eq!(e.pin(), Some(PIN));
        assert_eq!(e.dial_url("s"), "wss://n.example/peer?x=1&space=s");
        assert_eq!(NodeUrl::parse("wss://n.example/peer").unwrap().pin(), None);
        assert_eq!(NodeUrl::parse("wss://n.example/peer#").unwrap().pin(), None);
    }

    #[test]
    fn a_fragment_that_is_not_a_did_key_makes_the_url_unusable() {
        for bad in [
            "wss://n.example/peer#node",
            "wss://n.example/peer#did:web:n.example",
            "wss://n.example/peer#did:key:zzzz",
            "wss://n.example/peer#did%3Akey%3",
            "wss://n.example/peer#%FF",
        ] {
            assert_eq!(NodeUrl::parse(bad), Err(NodeUrlError::BadPin), "{bad}");
        }
    }
}
