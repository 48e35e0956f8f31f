//! Relay URLs and relay lists (Minca 04 Network §1.2 and §4).
//!
//! §1.2: "A valid relay URL is a string of at most 200 characters that parses as a URL whose
//! scheme is `wss:`, or `<kind>+wss:` with `<kind>` matching `^[a-z][a-z0-9-]*$`; or the same with
//! `ws` in place of `wss` when the host is `localhost`, `127.0.0.1` or `[::1]`. A client dials the
//! URL with `<kind>+` taken off the scheme. A client MUST pass over a relay of a kind it doesn't
//! speak, and MUST NOT treat a list naming one as invalid for that."
//!
//! §4: a space's own list "has at most 8 entries, no duplicates, each a valid relay URL (§1.2), of a
//! kind the client speaks or not. An invalid list is not applied."
//!
//! The §1.2 table of kinds was lost; the prose names two (`wss://` and `nostr+wss://`, with the
//! example list `["wss://relay.example", "nostr+wss://relay.damus.io"]`), so a plain scheme is a
//! Minca relay (§1.4), `nostr+` a Nostr relay (§1.5), and every other kind is one weft passes over.
//!
//! There is no URL crate here: `url` 2.5 builds without `std`, but it brings `idna` and its Unicode
//! tables into a crate meant for constrained devices, and the rule only needs the scheme, the
//! authority and the host. So [`RelayUrl::parse`] is a small strict parser that accepts the subset
//! of WHATWG-valid URLs written in the form WHATWG would serialize them (ASCII, no whitespace, no
//! backslashes, lower-case scheme), which is every relay URL an app writes.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::net::Ipv6Addr;
use core::str::FromStr;

use serde_json::Value;

use crate::codec::js;

/// Longest valid relay URL, in characters (JavaScript's `length`, UTF-16 code units) (§1.2).
pub const MAX_RELAY_URL_CHARS: usize = 200;

/// Most entries a space's relay list may have (§4).
pub const MAX_SPACE_RELAYS: usize = 8;

/// The kind of a relay, read from its URL's scheme (§1.2).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RelayKind {
    /// A Minca relay (§1.4): a plain `wss:` (or local `ws:`) scheme.
    Minca,
    /// A Nostr relay (§1.5): `nostr+wss:` (or local `nostr+ws:`).
    Nostr,
    /// A kind this library does not speak, by the name before the `+`.
    Other(String),
}

impl RelayKind {
    /// Whether weft speaks this kind; a client passes over the others (§1.2).
    pub fn speaks(&self) -> bool {
        !matches!(self, Self::Other(_))
    }

    /// The `<kind>` written before `+wss:`, or `None` for a plain Minca scheme.
    pub fn prefix(&self) -> Option<&str> {
        match self {
            Self::Minca => None,
            Self::Nostr => Some(NOSTR_KIND),
            Self::Other(name) => Some(name),
        }
    }
}

/// The kind name that means a Nostr relay (§1.2, §1.5).
const NOSTR_KIND: &str = "nostr";

/// Why a string is not a valid relay URL (§1.2).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RelayUrlError {
    /// Longer than [`MAX_RELAY_URL_CHARS`].
    TooLong {
        /// Its length in characters (UTF-16 code units).
        chars: usize,
    },
    /// A character outside visible ASCII, or a backslash (whitespace and controls included).
    BadCharacter {
        /// Byte offset of the first such character.
        position: usize,
    },
    /// No `:` ending a scheme.
    NoScheme,
    /// The `<kind>` before `+` does not match `^[a-z][a-z0-9-]*$`.
    BadKind,
    /// The scheme (after any `<kind>+`) is neither `wss` nor `ws`.
    UnsupportedScheme,
    /// The scheme is not followed by `//`.
    MissingSlashes,
    /// The userinfo before `@` holds a character a URL does not allow there.
    BadUserinfo,
    /// No host.
    EmptyHost,
    /// The host is neither a name of letters, digits, `-`, `.` and `_`, nor a bracketed IPv6
    /// address.
    BadHost,
    /// The port is not a decimal number from 1 to 65535 without leading zeros.
    BadPort,
    /// `ws` (unencrypted) to a host other than `localhost`, `127.0.0.1` or `[::1]`.
    InsecureRemote,
}

impl fmt::Display for RelayUrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong { chars } => write!(
                f,
                "relay URL has {chars} characters, more than {MAX_RELAY_URL_CHARS}"
            ),
            Self::BadCharacter { position } => {
                write!(f, "relay URL has a forbidden character at byte {position}")
            }
            Self::NoScheme => f.write_str("relay URL has no scheme"),
            Self::BadKind => f.write_str("relay kind must match ^[a-z][a-z0-9-]*$"),
            Self::UnsupportedScheme => f.write_str("relay URL scheme must be wss or <kind>+wss"),
            Self::MissingSlashes => f.write_str("relay URL scheme must be followed by //"),
            Self::BadUserinfo => f.write_str("relay URL has malformed userinfo"),
            Self::EmptyHost => f.write_str("relay URL has no host"),
            Self::BadHost => f.write_str("relay URL has a malformed host"),
            Self::BadPort => f.write_str("relay URL port must be 1 to 65535"),
            Self::InsecureRemote => {
                f.write_str("ws is only allowed to localhost, 127.0.0.1 or [::1]")
            }
        }
    }
}

impl core::error::Error for RelayUrlError {}

/// A valid relay URL (§1.2), kept exactly as written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelayUrl {
    text: String,
    kind: RelayKind,
    /// Bytes of `<kind>+` at the start (0 for a plain scheme).
    kind_prefix: usize,
    secure: bool,
    /// Byte range of the host in `text`.
    host_start: usize,
    host_end: usize,
    port: Option<u16>,
    /// Where a `#fragment` starts, if there is one.
    fragment: Option<usize>,
}

impl RelayUrl {
    /// Checks `text` against the §1.2 validity rule.
    pub fn parse(text: &str) -> Result<Self, RelayUrlError> {
        let chars = js::utf16_len(text);
        if chars > MAX_RELAY_URL_CHARS {
            return Err(RelayUrlError::TooLong { chars });
        }
        // WHATWG would strip, percent-encode or normalise these; refusing them keeps one spelling
        // per URL, so a list that is valid here is valid everywhere.
        if let Some(position) = text
            .bytes()
            .position(|b| !(0x21..=0x7e).contains(&b) || b == b'\\')
        {
            return Err(RelayUrlError::BadCharacter { position });
        }
        let colon = text.find(':').ok_or(RelayUrlError::NoScheme)?;
        let scheme = &text[..colon];
        let (kind, kind_prefix, base) = match scheme.split_once('+') {
            Some((name, base)) => {
                if !is_kind_name(name) {
                    return Err(RelayUrlError::BadKind);
                }
                let kind = if name == NOSTR_KIND {
                    RelayKind::Nostr
                } else {
                    RelayKind::Other(name.to_string())
                };
                (kind, name.len() + 1, base)
            }
            None => (RelayKind::Minca, 0, scheme),
        };
        let secure = match base {
            "wss" => true,
            "ws" => false,
            _ => return Err(RelayUrlError::UnsupportedScheme),
        };
        let after_scheme = colon + 1;
        if !text[after_scheme..].starts_with("//") {
            return Err(RelayUrlError::MissingSlashes);
        }
        let authority_start = after_scheme + 2;
        let authority_end = text[authority_start..]
            .find(['/', '?', '#'])
            .map_or(text.len(), |i| authority_start + i);
        let authority = &text[authority_start..authority_end];
        // WHATWG splits at the last `@`: everything before it is userinfo.
        let host_start = match authority.rfind('@') {
            Some(at) => {
                if !authority[..at].bytes().all(is_userinfo_byte) {
                    return Err(RelayUrlError::BadUserinfo);
                }
                authority_start + at + 1
            }
            None => authority_start,
        };
        let host_port = &text[host_start..authority_end];
        let (host_len, local, port_text) = parse_host(host_port)?;
        let port = port_text.map(parse_port).transpose()?;
        if !secure && !local {
            return Err(RelayUrlError::InsecureRemote);
        }
        let fragment = text[authority_end..].find('#').map(|i| authority_end + i);
        Ok(Self {
            text: text.to_string(),
            kind,
            kind_prefix,
            secure,
            host_start,
            host_end: host_start + host_len,
            port,
            fragment,
        })
    }

    /// The URL exactly as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The relay's kind, from its scheme.
    pub fn kind(&self) -> &RelayKind {
        &self.kind
    }

    /// Whether weft speaks this relay's kind (§1.2: a client passes over the others).
    pub fn speaks(&self) -> bool {
        self.kind.speaks()
    }

    /// The URL a client dials: `<kind>+` taken off the scheme (§1.2).
    ///
    /// A `#fragment` is dropped too: a WebSocket URL may not carry one (the WHATWG WebSocket
    /// constructor refuses it), and it names nothing on the relay.
    pub fn dial_url(&self) -> String {
        let end = self.fragment.unwrap_or(self.text.len());
        self.text[self.kind_prefix..end].to_string()
    }

    /// Whether the dial URL is `wss:` (TLS); `false` only for a local `ws:` relay.
    pub fn is_secure(&self) -> bool {
        self.secure
    }

    /// The host as written (an IPv6 address keeps its brackets).
    pub fn host(&self) -> &str {
        &self.text[self.host_start..self.host_end]
    }

    /// The explicit port, if any.
    pub fn port(&self) -> Option<u16> {
        self.port
    }
}

impl fmt::Display for RelayUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for RelayUrl {
    type Err = RelayUrlError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// `^[a-z][a-z0-9-]*$`.
fn is_kind_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// RFC 3986 userinfo: unreserved, sub-delims, `:` and percent-escapes.
fn is_userinfo_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:%".contains(&b)
}

/// Splits `host[:port]`, checks the host, and says whether it is one `ws` may go to.
///
/// Returns the host's length in bytes, whether it is local, and the port text after `:`.
fn parse_host(host_port: &str) -> Result<(usize, bool, Option<&str>), RelayUrlError> {
    if let Some(bracketed) = host_port.strip_prefix('[') {
        let close = bracketed.find(']').ok_or(RelayUrlError::BadHost)?;
        let address =
            Ipv6Addr::from_str(&bracketed[..close]).map_err(|_| RelayUrlError::BadHost)?;
        let rest = &bracketed[close + 1..];
        let port = match rest {
            "" => None,
            _ => Some(rest.strip_prefix(':').ok_or(RelayUrlError::BadHost)?),
        };
        // Any spelling of ::1 is [::1] once parsed, as WHATWG serializes it.
        return Ok((close + 2, address == Ipv6Addr::LOCALHOST, port));
    }
    let (host, port) = match host_port.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (host_port, None),
    };
    if host.is_empty() {
        return Err(RelayUrlError::EmptyHost);
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    {
        return Err(RelayUrlError::BadHost);
    }
    // WHATWG lower-cases a special scheme's host, so LOCALHOST is localhost.
    let local = host.eq_ignore_ascii_case("localhost") || host == "127.0.0.1";
    Ok((host.len(), local, port))
}

/// Port digits: 1 to 65535, no sign, no leading zero.
fn parse_port(text: &str) -> Result<u16, RelayUrlError> {
    if text.is_empty() || text.starts_with('0') || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RelayUrlError::BadPort);
    }
    text.parse::<u16>().map_err(|_| RelayUrlError::BadPort)
}

/// Why a relay list was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RelayListError {
    /// An entry is not a valid relay URL (§1.2).
    InvalidUrl {
        /// Its index in the list.
        index: usize,
        /// What is wrong with it.
        error: RelayUrlError,
    },
    /// A space's list names more than [`MAX_SPACE_RELAYS`] relays (§4).
    TooMany {
        /// How many it names.
        count: usize,
    },
    /// A space's list names the same URL twice (§4).
    Duplicate {
        /// Index of the second occurrence.
        index: usize,
    },
    /// The `relays:space` record is not `{ "relays": [string, …] }` (§4).
    NotAList,
}

impl fmt::Display for RelayListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidUrl { index, error } => write!(f, "relay {index}: {error}"),
            Self::TooMany { count } => write!(
                f,
                "relay list names {count} relays, more than {MAX_SPACE_RELAYS}"
            ),
            Self::Duplicate { index } => write!(f, "relay {index} repeats an earlier one"),
            Self::NotAList => f.write_str("relays record is not {\"relays\": [url, ...]}"),
        }
    }
}

impl core::error::Error for RelayListError {}

/// The relays of `list` a client can use: every entry must be a valid relay URL, and those of a
/// kind weft doesn't speak are passed over without making the list invalid (§1.2).
///
/// An invalid entry is reported with its index: the caller decides whether that refuses the whole
/// list (a space's list, §4, via [`space_relays`]) or only that entry.
pub fn usable_relays(list: &[&str]) -> Result<Vec<RelayUrl>, RelayListError> {
    Ok(parse_all(list)?
        .into_iter()
        .filter(RelayUrl::speaks)
        .collect())
}

/// A space's own relay list (§4): at most [`MAX_SPACE_RELAYS`] entries, no duplicates, each a
/// valid relay URL of any kind. Returns every entry, spoken or not, in order; take
/// [`RelayUrl::speaks`] ones to dial.
pub fn space_relays(list: &[&str]) -> Result<Vec<RelayUrl>, RelayListError> {
    if list.len() > MAX_SPACE_RELAYS {
        return Err(RelayListError::TooMany { count: list.len() });
    }
    // Duplicates are the same string, as the reference compares list entries.
    if let Some(index) = (1..list.len()).find(|&i| list[..i].contains(&list[i])) {
        return Err(RelayListError::Duplicate { index });
    }
    parse_all(list)
}

/// [`space_relays`] over the body of the `relays:space` record, `{ "relays": [url, …] }` (§4).
pub fn space_relays_record(body: &Value) -> Result<Vec<RelayUrl>, RelayListError> {
    let entries = body
        .get("relays")
        .and_then(Value::as_array)
        .ok_or(RelayListError::NotAList)?;
    let list = entries
        .iter()
        .map(Value::as_str)
        .collect::<Option<Vec<&str>>>()
        .ok_or(RelayListError::NotAList)?;
    space_relays(&list)
}

/// The collection holding a space's relay list (§4).
pub const RELAYS_COLLECTION: &str = "sys.relays";

/// The key of the single record in [`RELAYS_COLLECTION`] whose body is the list (§4).
pub const SPACE_RELAYS_KEY: &str = "relays:space";

/// The relays a node joins a space's room on besides its configured ones (§4): the space's own
/// list once it names some; until then the relays named by the invite that brought the node.
/// `record` is the body of the space's `relays:space` record in `sys.relays`, if it has one
/// (chosen as 03 — Spaces says, which is not this library's). An invalid record is an error
/// and is not applied: the caller keeps the list it had.
pub fn room_relays(
    record: Option<&Value>,
    invite: &[RelayUrl],
) -> Result<Vec<RelayUrl>, RelayListError> {
    let named = match record {
        Some(body) => space_relays_record(body)?,
        None => Vec::new(),
    };
    Ok(if named.is_empty() {
        invite.to_vec()
    } else {
        named
    })
}

fn parse_all(list: &[&str]) -> Result<Vec<RelayUrl>, RelayListError> {
    list.iter()
        .enumerate()
        .map(|(index, text)| {
            RelayUrl::parse(text).map_err(|error| RelayListError::InvalidUrl { index, error })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::vec;

    fn url_of_len(n: usize) -> String {
        let prefix = "wss://";
        format!("{prefix}{}", "a".repeat(n - prefix.len()))
    }

    fn err(text: &str) -> RelayUrlError {
        RelayUrl::parse(text).unwrap_err()
    }

    #[test]
    fn url_of_at_most_200_characters_is_valid() {
        assert!(RelayUrl::parse(&url_of_len(200)).is_ok());
        assert_eq!(err(&url_of_len(201)), RelayUrlError::TooLong { chars: 201 });
    }

    #[test]
    fn plain_wss_is_a_minca_relay() {
        let u = RelayUrl::parse("wss://relay.example").unwrap();
        assert_eq!(u.kind(), &RelayKind::Minca);
        assert!(u.speaks());
        assert!(u.is_secure());
        assert_eq!(u.host(), "relay.example");
        assert_eq!(u.dial_url(), "wss://relay.example");
    }

    #[test]
    fn nostr_kind_is_a_nostr_relay_dialled_without_its_kind() {
        let u = RelayUrl::parse("nostr+wss://relay.damus.io").unwrap();
        assert_eq!(u.kind(), &RelayKind::Nostr);
        assert_eq!(u.kind().prefix(), Some("nostr"));
        assert!(u.speaks());
        assert_eq!(u.dial_url(), "wss://relay.damus.io");
        assert_eq!(u.as_str(), "nostr+wss://relay.damus.io");
    }

    #[test]
    fn unknown_kind_is_valid_but_not_spoken() {
        let u = RelayUrl::parse("carrier-pigeon2+wss://coop.example:8443/x").unwrap();
        assert_eq!(u.kind(), &RelayKind::Other("carrier-pigeon2".into()));
        assert!(!u.speaks());
        assert_eq!(u.dial_url(), "wss://coop.example:8443/x");
        assert_eq!(u.port(), Some(8443));
        // A Minca kind name is not one the spec gives: only the plain scheme means Minca.
        assert!(!RelayUrl::parse("minca+wss://r.example").unwrap().speaks());
    }

    #[test]
    fn kind_must_match_lower_case_pattern() {
        for bad in [
            "Foo+wss://r.example",
            "fOo+wss://r.example",
            "1a+wss://r.example",
            "-a+wss://r.example",
            "+wss://r.example",
            "a_b+wss://r.example",
            "a.b+wss://r.example",
        ] {
            assert_eq!(err(bad), RelayUrlError::BadKind, "{bad}");
        }
        assert!(RelayUrl::parse("a+wss://r.example").is_ok());
        assert!(RelayUrl::parse("a-1-+wss://r.example").is_ok());
    }

    #[test]
    fn scheme_must_be_wss_or_ws() {
        for bad in [
            "https://r.example",
            "WSS://r.example",
            "Wss://r.example",
            "nostr+https://r.example",
            "nostr+wss+wss://r.example",
            "wsss://r.example",
        ] {
            assert_eq!(err(bad), RelayUrlError::UnsupportedScheme, "{bad}");
        }
        assert_eq!(err("relay.example"), RelayUrlError::NoScheme);
        assert_eq!(err(""), RelayUrlError::NoScheme);
    }

    #[test]
    fn scheme_must_be_followed_by_two_slashes() {
        assert_eq!(err("wss:relay.example"), RelayUrlError::MissingSlashes);
        assert_eq!(err("wss:/relay.example"), RelayUrlError::MissingSlashes);
        assert_eq!(
            err("nostr+wss:relay.example"),
            RelayUrlError::MissingSlashes
        );
    }

    #[test]
    fn ws_is_valid_only_to_local_hosts() {
        for ok in [
            "ws://localhost",
            "ws://LocalHost:9000",
            "ws://127.0.0.1:8080",
            "ws://[::1]/",
            "ws://[0:0:0:0:0:0:0:1]:8080/relay",
            "nostr+ws://localhost:7777",
            "future+ws://127.0.0.1",
        ] {
            let u = RelayUrl::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert!(!u.is_secure());
        }
        for bad in [
            "ws://example.com",
            "ws://127.0.0.2",
            "ws://127.1",
            "ws://localhost.example.com",
            "ws://[::2]",
            "nostr+ws://relay.damus.io",
        ] {
            assert_eq!(err(bad), RelayUrlError::InsecureRemote, "{bad}");
        }
    }

    #[test]
    fn host_must_be_a_name_or_bracketed_ipv6() {
        assert_eq!(err("wss://"), RelayUrlError::EmptyHost);
        assert_eq!(err("wss:///path"), RelayUrlError::EmptyHost);
        assert_eq!(err("wss://:443"), RelayUrlError::EmptyHost);
        assert_eq!(err("wss://[zz::1]/"), RelayUrlError::BadHost);
        assert_eq!(err("wss://[::1"), RelayUrlError::BadHost);
        assert_eq!(err("wss://[::1]x"), RelayUrlError::BadHost);
        assert_eq!(err("wss://ex%61mple.com"), RelayUrlError::BadHost);
        assert_eq!(err("wss://a^b"), RelayUrlError::BadHost);
        let u = RelayUrl::parse("wss://[2001:db8::7]:443/").unwrap();
        assert_eq!(u.host(), "[2001:db8::7]");
        assert_eq!(u.port(), Some(443));
    }

    #[test]
    fn whitespace_controls_backslash_and_non_ascii_are_refused() {
        assert_eq!(
            err("wss://a b"),
            RelayUrlError::BadCharacter { position: 7 }
        );
        assert_eq!(err(" wss://a"), RelayUrlError::BadCharacter { position: 0 });
        assert_eq!(
            err("wss://a\n"),
            RelayUrlError::BadCharacter { position: 7 }
        );
        assert_eq!(
            err("wss:\\\\a"),
            RelayUrlError::BadCharacter { position: 4 }
        );
        assert_eq!(
            err("wss://bücher.example"),
            RelayUrlError::BadCharacter { position: 7 }
        );
    }

    #[test]
    fn port_is_1_to_65535() {
        assert_eq!(RelayUrl::parse("wss://r:1").unwrap().port(), Some(1));
        assert_eq!(
            RelayUrl::parse("wss://r:65535").unwrap().port(),
            Some(65535)
        );
        for bad in [
            "wss://r:0",
            "wss://r:65536",
            "wss://r:",
            "wss://r:080",
            "wss://r:+80",
            "wss://r:8a",
            "wss://r:99999999999999999999",
        ] {
            assert_eq!(err(bad), RelayUrlError::BadPort, "{bad}");
        }
    }

    #[test]
    fn userinfo_is_allowed_and_is_not_the_host() {
        let u = RelayUrl::parse("wss://user:p%40ss@relay.example/").unwrap();
        assert_eq!(u.host(), "relay.example");
        // The last `@` ends userinfo, so a look-alike host in userinfo cannot make ws local.
        assert_eq!(
            err("ws://localhost@evil.example"),
            RelayUrlError::InsecureRemote
        );
        assert_eq!(err("wss://a<b@r.example"), RelayUrlError::BadUserinfo);
    }

    #[test]
    fn path_query_and_fragment_are_kept_and_fragment_is_not_dialled() {
        let u = RelayUrl::parse("nostr+wss://r.example/a/b?c=d#frag").unwrap();
        assert_eq!(u.as_str(), "nostr+wss://r.example/a/b?c=d#frag");
        assert_eq!(u.dial_url(), "wss://r.example/a/b?c=d");
        let u = RelayUrl::parse("wss://r.example?x#").unwrap();
        assert_eq!(u.host(), "r.example");
        assert_eq!(u.dial_url(), "wss://r.example?x");
    }

    #[test]
    fn list_naming_an_unknown_kind_stays_valid_and_the_relay_is_passed_over() {
        let usable = usable_relays(&[
            "wss://relay.example",
            "telepathy+wss://mind.example",
            "nostr+wss://relay.damus.io",
        ])
        .unwrap();
        let dialled: Vec<String> = usable.iter().map(RelayUrl::dial_url).collect();
        assert_eq!(dialled, ["wss://relay.example", "wss://relay.damus.io"]);
        assert_eq!(
            usable_relays(&["telepathy+wss://mind.example"]).unwrap(),
            vec![]
        );
    }

    #[test]
    fn list_with_an_invalid_url_is_reported() {
        assert_eq!(
            usable_relays(&["wss://ok.example", "ws://example.com"]),
            Err(RelayListError::InvalidUrl {
                index: 1,
                error: RelayUrlError::InsecureRemote
            })
        );
    }

    #[test]
    fn space_list_has_at_most_8_entries_without_duplicates_of_any_kind() {
        let names: Vec<String> = (0..9).map(|i| format!("x{i}+wss://r{i}.example")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let all = space_relays(&refs[..8]).unwrap();
        assert_eq!(all.len(), 8);
        assert!(all.iter().all(|u| !u.speaks()));
        assert_eq!(
            space_relays(&refs),
            Err(RelayListError::TooMany { count: 9 })
        );
        assert_eq!(
            space_relays(&["wss://a.example", "wss://b.example", "wss://a.example"]),
            Err(RelayListError::Duplicate { index: 2 })
        );
        assert!(matches!(
            space_relays(&["wss:a"]),
            Err(RelayListError::InvalidUrl { index: 0, .. })
        ));
    }

    #[test]
    fn space_relays_record_is_an_object_with_a_list_of_strings() {
        let body =
            serde_json::json!({ "relays": ["wss://relay.example", "nostr+wss://relay.damus.io"] });
        assert_eq!(space_relays_record(&body).unwrap().len(), 2);
        for bad in [
            serde_json::json!({ "relays": "wss://relay.example" }),
            serde_json::json!({ "relays": ["wss://relay.example", 7] }),
            serde_json::json!(["wss://relay.example"]),
        ] {
            assert_eq!(space_relays_record(&bad), Err(RelayListError::NotAList));
        }
    }

    #[test]
    fn until_the_space_names_relays_the_invites_are_used() {
        let invite = [RelayUrl::parse("wss://invite.example").unwrap()];
        // No record, or a record naming none: the invite's relays.
        assert_eq!(room_relays(None, &invite).unwrap(), invite);
        let empty = serde_json::json!({ "relays": [] });
        assert_eq!(room_relays(Some(&empty), &invite).unwrap(), invite);
        // Once the space names some, those alone.
        let named = serde_json::json!({ "relays": ["wss://space.example", "x+wss://new.example"] });
        let relays = room_relays(Some(&named), &invite).unwrap();
        assert_eq!(
            relays.iter().map(RelayUrl::as_str).collect::<Vec<_>>(),
            ["wss://space.example", "x+wss://new.example"]
        );
        // An invalid list is not applied, not replaced by the invite's.
        let nine: Vec<String> = (0..9)
            .map(|i| alloc::format!("wss://r{i}.example"))
            .collect();
        let bad = serde_json::json!({ "relays": nine });
        assert_eq!(
            room_relays(Some(&bad), &invite),
            Err(RelayListError::TooMany { count: 9 })
        );
    }
}
