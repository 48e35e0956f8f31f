//! Addresses (AIRC §2.1–§2.6): parsing, the canonical form and address key, local-form
//! resolution, delegation and reserved names.
//!
//! - §2.1 grammar: [`Address::parse`] (network form) and [`Address::resolve`] (network or local
//!   form), with [`Authority::parse`] for the `host[:port]` part;
//! - §2.2 canonical form and equivalence: [`Address`]'s `Display` is the canonical URI form and
//!   [`Address::key`] the address key; `Eq`, `Ord` and `Hash` on [`Address`] compare keys only;
//! - §2.3 resolution context: [`Face`], as §6.2 applies it (client face: realm and first
//!   namespace; peer face: local forms invalid);
//! - §2.4 endpoint, namespace, fragment: [`Address::is_namespace`], [`Address::namespace`],
//!   [`Address::fragment`];
//! - §2.5 delegation: [`Address::delegated_remainder`];
//! - §2.6 reserved names: [`is_reserved_segment`], [`RESERVED_NAMES`].
//!
//! Every rejection is an [`AddressError`]; §6.2 answers all of them with an ack `failed` and code
//! [`AddressError::ACK_CODE`] (`bad_address`).

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

/// The scheme of the URI form, colon included (§2.1).
pub const SCHEME: &str = "airc:";

/// The most octets a whole address may have (§2.1).
///
/// Checked against the text as received and against the canonical URI form that would be written
/// to the wire (a `//host/…` or local form grows when `airc:`, the realm or the namespace is
/// added), so weft never emits an address a peer must refuse.
pub const MAX_ADDRESS_LEN: usize = 1024;

/// The most characters a path segment may have (§2.1).
pub const MAX_SEGMENT_LEN: usize = 63;

/// The port an authority without one means, omitted from the canonical form (§2.2, §15).
pub const DEFAULT_PORT: u16 = 2472;

/// The most octets a DNS host name may have, without its trailing dot.
///
/// §2.1 says only "labels per RFC 1123"; 253 is the longest name DNS can carry in text form
/// (RFC 1035's 255-octet wire limit less the length octets), so a longer one could never resolve.
pub const MAX_HOST_LEN: usize = 253;

/// The most characters an RFC 1123 label may have.
const MAX_LABEL_LEN: usize = 63;

/// The character that makes a segment reserved (§2.6).
pub const RESERVED_PREFIX: char = '_';

/// The realm's own resolver: a health check, and the `by` of `no_such_path` (§6.4).
pub const RESOLVER: &str = "_resolver";

/// Where passport redemptions are sent; handled by the server itself (§12.4, §12.5).
pub const PASSPORT: &str = "_passport";

/// The reserved names the spec defines (§2.6; its table was lost, these are the two names the
/// rest of the document gives meaning to).
pub const RESERVED_NAMES: [&str; 2] = [RESOLVER, PASSPORT];

/// Why a piece of text is not an AIRC address.
///
/// Every variant is a malformed address: a server answers it with an ack `failed` and code
/// [`AddressError::ACK_CODE`] (§6.2), or, for a bind name, with `bad_bind` (§4.3, see
/// [`crate::airc::pattern::PatternError`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddressError {
    /// Longer than [`MAX_ADDRESS_LEN`] octets, as received or in canonical form.
    TooLong {
        /// The length found, in octets.
        len: usize,
    },
    /// `airc:` not followed by `//` (`airc:foo`).
    MissingSlashes,
    /// A single leading `/`.
    LeadingSlash,
    /// The host is not a DNS name (RFC 1123 labels), an IPv4 address or a bracketed IPv6 address.
    InvalidHost,
    /// The port is not 1 to 5 digits with a value from 1 to 65535.
    InvalidPort,
    /// No path after the authority: an address names at least one segment.
    MissingPath,
    /// An empty segment (`a//b`).
    EmptySegment,
    /// A segment longer than [`MAX_SEGMENT_LEN`] characters.
    SegmentTooLong,
    /// A segment beginning or ending with `-`.
    SegmentHyphen,
    /// A `.` in a segment: the authority is the only dotted component.
    DotInSegment,
    /// A `%` in a segment: names are never percent-encoded.
    PercentEncoding,
    /// A character a segment may not hold (only ALPHA, DIGIT, `-` and `_` are allowed).
    InvalidCharacter {
        /// Byte offset of the character within its segment.
        position: usize,
    },
    /// The fragment holds a character that is not an RFC 3986 `pchar`, or a malformed `%XX`.
    InvalidFragment,
    /// A local form where only the URI form is valid (the peer face, §2.3).
    LocalForm,
}

impl AddressError {
    /// The ack code §6.2 gives every malformed address.
    pub const ACK_CODE: &'static str = "bad_address";

    /// The ack code to answer this error with: always [`Self::ACK_CODE`].
    pub fn code(&self) -> &'static str {
        Self::ACK_CODE
    }
}

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong { len } => {
                write!(f, "address is {len} octets, over {MAX_ADDRESS_LEN}")
            }
            Self::MissingSlashes => f.write_str("airc: must be followed by //"),
            Self::LeadingSlash => f.write_str("a single leading / is invalid"),
            Self::InvalidHost => f.write_str("invalid host"),
            Self::InvalidPort => f.write_str("port must be 1..65535"),
            Self::MissingPath => f.write_str("address has no path"),
            Self::EmptySegment => f.write_str("empty path segment"),
            Self::SegmentTooLong => write!(f, "segment longer than {MAX_SEGMENT_LEN} characters"),
            Self::SegmentHyphen => f.write_str("segment begins or ends with -"),
            Self::DotInSegment => f.write_str(". is not permitted in a segment"),
            Self::PercentEncoding => f.write_str("percent-encoding is not permitted in a name"),
            Self::InvalidCharacter { position } => {
                write!(f, "invalid character at byte {position} of a segment")
            }
            Self::InvalidFragment => f.write_str("invalid fragment"),
            Self::LocalForm => f.write_str("local form not valid here; use airc://"),
        }
    }
}

impl core::error::Error for AddressError {}

/// What kind of host an authority names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostKind {
    /// A DNS name.
    Dns,
    /// An IPv4 literal.
    Ipv4,
    /// An IPv6 literal (written in brackets).
    Ipv6,
}

/// The authority of an address, `host[:port]`, in canonical form (§2.2): lower-cased, without a
/// trailing `.`, and without the default port.
///
/// An IPv6 literal is canonicalized only by lower-casing, as §2.2 says; zeros are not compressed,
/// so `[::1]` and `[0::1]` are different realms (see [`Authority::parse`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Authority {
    host: String,
    port: Option<u16>,
    kind: HostKind,
}

impl Authority {
    /// Parses `host[:port]`: a DNS name of RFC 1123 labels (optionally with one trailing `.`), an
    /// IPv4 address, or `[IPv6]`, and a port from 1 to 65535 (1 to 5 digits).
    ///
    /// A DNS name whose last label is all digits must be a valid IPv4 address instead (RFC 1123
    /// §2.1: a host name's top label is never numeric), so `999.1.1.1` and `1.2.3` are refused.
    pub fn parse(text: &str) -> Result<Self, AddressError> {
        let (host, kind, port) = if let Some(rest) = text.strip_prefix('[') {
            let (v6, after) = rest.split_once(']').ok_or(AddressError::InvalidHost)?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or(AddressError::InvalidHost)?),
            };
            if !is_ipv6(v6) {
                return Err(AddressError::InvalidHost);
            }
            let mut host = String::with_capacity(v6.len() + 2);
            host.push('[');
            host.push_str(&v6.to_ascii_lowercase());
            host.push(']');
            (host, HostKind::Ipv6, port)
        } else {
            let (host, port) = match text.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (text, None),
            };
            let (host, kind) = canonical_host(host).ok_or(AddressError::InvalidHost)?;
            (host, kind, port)
        };
        let port = match port.map(parse_port).transpose()? {
            Some(DEFAULT_PORT) | None => None,
            Some(n) => Some(n),
        };
        Ok(Self { host, port, kind })
    }

    /// The host as written in an address: lower case, no trailing dot, an IPv6 literal in
    /// brackets.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Whether the host is a DNS name or an IP literal (which §8.1 connects to without DNS).
    pub fn kind(&self) -> HostKind {
        self.kind
    }

    /// The port, when one other than [`DEFAULT_PORT`] was given: §6.4's "explicit port". A
    /// written `:2472` is canonicalized away and so is not explicit.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// The port to connect to: the explicit one, else [`DEFAULT_PORT`].
    pub fn effective_port(&self) -> u16 {
        self.port.unwrap_or(DEFAULT_PORT)
    }
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.host)?;
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// Validates and canonicalizes a host that is not in brackets, or returns `None`.
fn canonical_host(host: &str) -> Option<(String, HostKind)> {
    if is_ipv4(host) {
        return Some((host.to_string(), HostKind::Ipv4));
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.is_empty() || name.len() > MAX_HOST_LEN {
        return None;
    }
    let mut last = "";
    for label in name.split('.') {
        let b = label.as_bytes();
        if b.is_empty()
            || b.len() > MAX_LABEL_LEN
            || b[0] == b'-'
            || b[b.len() - 1] == b'-'
            || !b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        {
            return None;
        }
        last = label;
    }
    // A numeric top label means an IP literal was meant: it is valid only as one, and an IP
    // literal takes no trailing dot.
    if last.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some((name.to_ascii_lowercase(), HostKind::Dns))
}

/// RFC 3986 `IPv4address`: four `dec-octet`s, no leading zeros.
fn is_ipv4(s: &str) -> bool {
    let mut n = 0;
    for part in s.split('.') {
        n += 1;
        let b = part.as_bytes();
        let ok = matches!(b.len(), 1..=3)
            && b.iter().all(u8::is_ascii_digit)
            && (b.len() == 1 || b[0] != b'0')
            && part.parse::<u16>().is_ok_and(|v| v <= 255);
        if !ok || n > 4 {
            return false;
        }
    }
    n == 4
}

/// RFC 3986 `IPv6address` (no zone identifier, no IPvFuture).
fn is_ipv6(s: &str) -> bool {
    // Counts the 16-bit groups in a `:`-separated run; an IPv4 tail counts as two.
    fn groups(part: &str, v4_tail: bool) -> Option<usize> {
        if part.is_empty() {
            return Some(0);
        }
        let mut n = 0;
        let mut pieces = part.split(':').peekable();
        while let Some(g) = pieces.next() {
            let last = pieces.peek().is_none();
            if last && v4_tail && g.contains('.') {
                if !is_ipv4(g) {
                    return None;
                }
                n += 2;
            } else if matches!(g.len(), 1..=4) && g.bytes().all(|c| c.is_ascii_hexdigit()) {
                n += 1;
            } else {
                return None;
            }
        }
        Some(n)
    }
    match s.split_once("::") {
        Some((head, tail)) => {
            if tail.contains("::") {
                return false;
            }
            match (groups(head, false), groups(tail, true)) {
                (Some(h), Some(t)) => h + t <= 7,
                _ => false,
            }
        }
        None => groups(s, true) == Some(8),
    }
}

/// `port = 1*5DIGIT`, value 1..65535.
fn parse_port(p: &str) -> Result<u16, AddressError> {
    if !matches!(p.len(), 1..=5) || !p.bytes().all(|c| c.is_ascii_digit()) {
        return Err(AddressError::InvalidPort);
    }
    match p.parse::<u32>() {
        Ok(n @ 1..=65535) => Ok(n as u16),
        _ => Err(AddressError::InvalidPort),
    }
}

/// Validates one segment (§2.1) and returns it lower-cased (§2.2).
pub(crate) fn canonical_segment(seg: &str) -> Result<String, AddressError> {
    let b = seg.as_bytes();
    if b.is_empty() {
        return Err(AddressError::EmptySegment);
    }
    for (position, &c) in b.iter().enumerate() {
        match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' => {}
            b'.' => return Err(AddressError::DotInSegment),
            b'%' => return Err(AddressError::PercentEncoding),
            _ => return Err(AddressError::InvalidCharacter { position }),
        }
    }
    if b.len() > MAX_SEGMENT_LEN {
        return Err(AddressError::SegmentTooLong);
    }
    if b[0] == b'-' || b[b.len() - 1] == b'-' {
        return Err(AddressError::SegmentHyphen);
    }
    Ok(seg.to_ascii_lowercase())
}

/// `path = segment *( "/" segment ) [ "/" ]`: the lower-cased segments and whether the path ends
/// in `/` (a namespace reference).
fn parse_path(path: &str) -> Result<(Vec<String>, bool), AddressError> {
    if path.is_empty() {
        return Err(AddressError::MissingPath);
    }
    if path.starts_with('/') {
        return Err(AddressError::LeadingSlash);
    }
    let (body, namespace) = match path.strip_suffix('/') {
        Some(b) => (b, true),
        None => (path, false),
    };
    let segments = body
        .split('/')
        .map(canonical_segment)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((segments, namespace))
}

/// `fragment = *pchar` (RFC 3986): unreserved, `%XX`, sub-delims, `:` and `@`.
fn check_fragment(frag: &str) -> Result<(), AddressError> {
    let b = frag.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = |j: usize| b.get(j).is_some_and(u8::is_ascii_hexdigit);
                if !(hex(i + 1) && hex(i + 2)) {
                    return Err(AddressError::InvalidFragment);
                }
                i += 3;
                continue;
            }
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => {}
            b'-' | b'.' | b'_' | b'~' => {}
            b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' => {}
            b':' | b'@' => {}
            _ => return Err(AddressError::InvalidFragment),
        }
        i += 1;
    }
    Ok(())
}

/// Strips the scheme, case-insensitively as RFC 3986 §3.1 allows, and returns what follows it.
pub(crate) fn strip_scheme(text: &str) -> Option<&str> {
    let head = text.get(..SCHEME.len())?;
    head.eq_ignore_ascii_case(SCHEME)
        .then(|| &text[SCHEME.len()..])
}

/// Splits off the network form's `//authority`, returning the authority text and the rest
/// (starting at the path's first character). Accepts `airc://…` and the bare `//…` that frames
/// use (`"to":"//partner.example/support/desk"`).
pub(crate) fn split_network(text: &str) -> Result<Option<(&str, &str)>, AddressError> {
    let rest = match strip_scheme(text) {
        Some(r) => r.strip_prefix("//").ok_or(AddressError::MissingSlashes)?,
        None => match text.strip_prefix("//") {
            Some(r) => r,
            None if text.starts_with('/') => return Err(AddressError::LeadingSlash),
            None => return Ok(None),
        },
    };
    let end = rest.find(['/', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    match path.strip_prefix('/') {
        Some(p) => Ok(Some((authority, p))),
        None => Err(AddressError::MissingPath),
    }
}

/// The address key of §2.2: the canonical URI form without the fragment. Every comparison of
/// addresses (binds, links, policy, dedupe, the spool) is a comparison of keys.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AddressKey(String);

impl AddressKey {
    /// The key as text, e.g. `airc://example.com/alice/x`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AddressKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A namespace of the connection's (§5), as a path prefix of zero or more segments: `alice`,
/// `alice/net-ops`, or the empty root.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace {
    segments: Vec<String>,
}

impl Namespace {
    /// Parses `seg/seg…` with an optional trailing `/`; the empty string is the root (what §6.2
    /// uses, `""`, when a connection has no namespaces).
    pub fn parse(text: &str) -> Result<Self, AddressError> {
        if text.is_empty() {
            return Ok(Self::default());
        }
        let (segments, _) = parse_path(text)?;
        Ok(Self { segments })
    }

    /// The root namespace: local forms resolve directly under the realm.
    pub fn root() -> Self {
        Self::default()
    }

    /// The namespace's segments, lower-cased.
    pub fn segments(&self) -> &[String] {
        &self.segments
    }
}

/// Where a piece of address text was received, which decides how a local form is resolved
/// (§2.3, as §6.2 applies it to both `from` and `to`).
#[derive(Clone, Copy, Debug)]
pub enum Face<'a> {
    /// The client face: local forms resolve against the server's realm and the sender's first
    /// namespace (§6.2's `ctx = C.namespaces[0] or ""`; pass [`Namespace::root`] for `""`).
    Client {
        /// The realm of the server the client is connected to.
        realm: &'a Authority,
        /// The connection's first namespace.
        namespace: &'a Namespace,
    },
    /// The peer face: only the URI form is valid; a local form is [`AddressError::LocalForm`].
    Peer,
}

/// An AIRC address in canonical form (§2.2).
///
/// `Eq`, `Ord` and `Hash` compare the [key](Address::key) only, so the fragment never takes part
/// in routing (§2.4); `Display` writes the canonical URI form with the fragment.
#[derive(Clone, Debug)]
pub struct Address {
    key: AddressKey,
    authority: Authority,
    segments: Vec<String>,
    namespace: bool,
    fragment: Option<String>,
}

impl Address {
    /// Parses the network form, `airc://authority/path[#fragment]` or `//authority/path[#…]`:
    /// what the peer face accepts.
    pub fn parse(text: &str) -> Result<Self, AddressError> {
        Self::resolve(text, Face::Peer)
    }

    /// Parses the network form, or on the client face also the local form `path[#fragment]`,
    /// which becomes `airc://<realm>/<namespace>/<path>[#fragment]`.
    pub fn resolve(text: &str, face: Face<'_>) -> Result<Self, AddressError> {
        if text.len() > MAX_ADDRESS_LEN {
            return Err(AddressError::TooLong { len: text.len() });
        }
        let (body, fragment) = match text.split_once('#') {
            Some((b, f)) => {
                check_fragment(f)?;
                (b, Some(f))
            }
            None => (text, None),
        };
        let (authority, mut segments, namespace) = match split_network(body)? {
            Some((authority, path)) => {
                let authority = Authority::parse(authority)?;
                let (segments, namespace) = parse_path(path)?;
                (authority, segments, namespace)
            }
            None => {
                let (realm, ns) = match face {
                    Face::Client { realm, namespace } => (realm, namespace),
                    Face::Peer => return Err(AddressError::LocalForm),
                };
                let (local, namespace) = parse_path(body)?;
                let mut segments = ns.segments.clone();
                segments.extend(local);
                (realm.clone(), segments, namespace)
            }
        };
        segments.shrink_to_fit();
        let address = Self::from_parts(authority, segments, namespace, fragment);
        let len = address.key.0.len() + address.fragment.as_ref().map_or(0, |f| f.len() + 1);
        if len > MAX_ADDRESS_LEN {
            return Err(AddressError::TooLong { len });
        }
        Ok(address)
    }

    fn from_parts(
        authority: Authority,
        segments: Vec<String>,
        namespace: bool,
        fragment: Option<&str>,
    ) -> Self {
        let mut key = String::from(SCHEME);
        key.push_str("//");
        key.push_str(&authority.to_string());
        for s in &segments {
            key.push('/');
            key.push_str(s);
        }
        if namespace {
            key.push('/');
        }
        Self {
            key: AddressKey(key),
            authority,
            segments,
            namespace,
            fragment: fragment.map(ToString::to_string),
        }
    }

    /// The address key (§2.2): the canonical URI form without the fragment.
    pub fn key(&self) -> &AddressKey {
        &self.key
    }

    /// The realm (authority) the address lives under, in canonical form.
    pub fn realm(&self) -> &Authority {
        &self.authority
    }

    /// The path's segments, lower-cased; never empty.
    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// The first segment: the namespace a local destination is spooled under (§7.1), and
    /// typically the user on a shared host.
    pub fn first_segment(&self) -> &str {
        self.segments.first().map_or("", String::as_str)
    }

    /// The segments before the last one (§1's "namespace" of a path).
    pub fn namespace(&self) -> &[String] {
        &self.segments[..self.segments.len().saturating_sub(1)]
    }

    /// Whether the path ends in `/`: a namespace reference, the set of endpoints beneath it
    /// (§2.4).
    pub fn is_namespace(&self) -> bool {
        self.namespace
    }

    /// Whether the path names an endpoint (no trailing `/`, §2.4).
    pub fn is_endpoint(&self) -> bool {
        !self.namespace
    }

    /// The fragment (an incarnation of the endpoint, §2.4), without `#`, exactly as received.
    pub fn fragment(&self) -> Option<&str> {
        self.fragment.as_deref()
    }

    /// The same address without its fragment.
    pub fn without_fragment(&self) -> Self {
        Self {
            fragment: None,
            ..self.clone()
        }
    }

    /// Whether any segment is reserved (§2.6): such a name is bindable only when the operator
    /// configures it.
    pub fn is_reserved(&self) -> bool {
        self.segments.iter().any(|s| is_reserved_segment(s))
    }

    /// Whether the path lies inside `ns` as §5 requires of `from`: `ns/…` with at least one
    /// segment after the namespace. The realm is not compared; §6.2 checks it separately.
    pub fn is_inside(&self, ns: &Namespace) -> bool {
        self.segments.len() > ns.segments.len() && self.segments.starts_with(&ns.segments)
    }

    /// Delegation (§2.5): when `self` is an endpoint P and `target` lies strictly beneath `P/`
    /// in the same realm, P is `target`'s resolver; returns the remaining segments, which the
    /// server forwards intact and never interprets. `None` otherwise (including when `self` is a
    /// namespace reference or `target` is P itself).
    pub fn delegated_remainder<'t>(&self, target: &'t Address) -> Option<&'t [String]> {
        (self.is_endpoint()
            && self.authority == target.authority
            && target.segments.len() > self.segments.len()
            && target.segments.starts_with(&self.segments))
        .then(|| &target.segments[self.segments.len()..])
    }

    /// Whether `self` is the resolver for `target` (§2.5); see [`Self::delegated_remainder`].
    pub fn is_resolver_for(&self, target: &Address) -> bool {
        self.delegated_remainder(target).is_some()
    }

    /// The keys of the namespace references this address lies beneath in its own realm (§2.4),
    /// shortest first: `airc://r/a/` and `airc://r/a/b/` for `airc://r/a/b/c` (or for
    /// `airc://r/a/b/c/`). Each is a prefix of [`Self::key`], so looking them up allocates
    /// nothing; a table keyed by address keys finds what "a namespace matches any endpoint
    /// beneath it" (§11.3) covers without scanning.
    pub(crate) fn enclosing_namespace_keys(&self) -> impl Iterator<Item = &str> {
        let key = self.key.as_str();
        let path: usize =
            self.segments.iter().map(|s| 1 + s.len()).sum::<usize>() + usize::from(self.namespace);
        // The `/` before the first segment; each step moves to the `/` after the next one.
        let mut end = key.len() - path;
        let enclosing = self.segments.split_last().map_or(&[][..], |(_, rest)| rest);
        enclosing.iter().map(move |s| {
            end += 1 + s.len();
            &key[..=end]
        })
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key.0)?;
        if let Some(frag) = &self.fragment {
            f.write_str("#")?;
            f.write_str(frag)?;
        }
        Ok(())
    }
}

impl PartialEq for Address {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for Address {}

impl PartialOrd for Address {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Address {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}

impl core::hash::Hash for Address {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.key.hash(state);
    }
}

/// Whether a segment is reserved (§2.6): it begins with [`RESERVED_PREFIX`].
pub fn is_reserved_segment(segment: &str) -> bool {
    segment.starts_with(RESERVED_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::ToString;

    fn key(s: &str) -> String {
        Address::parse(s).unwrap().key().to_string()
    }

    fn err(s: &str) -> AddressError {
        Address::parse(s).unwrap_err()
    }

    /// An `airc://example.com/…` address of exactly `len` octets.
    fn of_len(len: usize) -> String {
        let mut s = String::from("airc://example.com");
        while s.len() < len {
            let room = len - s.len() - 1;
            // Keep every segment valid: 1..63 characters, so never leave a 0-length remainder.
            let n = if room > 63 {
                if room - 63 >= 2 { 63 } else { 60 }
            } else {
                room
            };
            s.push('/');
            s.push_str(&"a".repeat(n));
        }
        s
    }

    #[test]
    fn length_1024_accepted_1025_refused() {
        let ok = of_len(MAX_ADDRESS_LEN);
        assert_eq!(ok.len(), 1024);
        assert_eq!(Address::parse(&ok).unwrap().to_string(), ok);
        let long = of_len(MAX_ADDRESS_LEN + 1);
        assert_eq!(long.len(), 1025);
        assert_eq!(err(&long), AddressError::TooLong { len: 1025 });
    }

    #[test]
    fn length_counts_the_fragment() {
        let base = of_len(1020);
        assert!(Address::parse(&format!("{base}#abc")).is_ok());
        assert_eq!(
            err(&format!("{base}#abcd")),
            AddressError::TooLong { len: 1025 }
        );
    }

    #[test]
    fn length_bounds_the_canonical_form() {
        // 1024 octets as `//…`, 1029 once written as the canonical `airc://…`.
        let bare = &of_len(1029)[SCHEME.len()..];
        assert_eq!(bare.len(), 1024);
        assert_eq!(err(bare), AddressError::TooLong { len: 1029 });
        let bare = &of_len(1024 + SCHEME.len() - 5)[SCHEME.len()..];
        assert!(Address::parse(bare).is_ok());
    }

    #[test]
    fn length_bounds_a_resolved_local_form() {
        let realm = Authority::parse("example.com").unwrap();
        let ns = Namespace::parse("alice").unwrap();
        let face = Face::Client {
            realm: &realm,
            namespace: &ns,
        };
        // `airc://example.com/alice/` is 25 octets; the local form brings the other 999.
        let fits = format!("{}b", "b/".repeat(499));
        assert_eq!(fits.len(), 999);
        let a = Address::resolve(&fits, face).unwrap();
        assert_eq!(a.to_string().len(), 1024);
        let over = format!("{fits}b");
        assert_eq!(
            Address::resolve(&over, face).unwrap_err(),
            AddressError::TooLong { len: 1025 }
        );
    }

    #[test]
    fn scheme_must_be_followed_by_two_slashes() {
        assert_eq!(err("airc:foo"), AddressError::MissingSlashes);
        assert_eq!(err("airc:/example.com/a"), AddressError::MissingSlashes);
        assert_eq!(err("airc:"), AddressError::MissingSlashes);
        assert_eq!(key("AIRC://example.com/a"), "airc://example.com/a");
    }

    #[test]
    fn bare_network_form_is_accepted() {
        let a = Address::parse("//partner.example/support/desk").unwrap();
        assert_eq!(a.to_string(), "airc://partner.example/support/desk");
    }

    #[test]
    fn single_leading_slash_is_invalid() {
        assert_eq!(err("/alice/x"), AddressError::LeadingSlash);
        let realm = Authority::parse("example.com").unwrap();
        let ns = Namespace::root();
        let face = Face::Client {
            realm: &realm,
            namespace: &ns,
        };
        assert_eq!(
            Address::resolve("/alice", face).unwrap_err(),
            AddressError::LeadingSlash
        );
        assert_eq!(err("airc:///alice"), AddressError::InvalidHost);
    }

    #[test]
    fn path_is_required() {
        assert_eq!(err("airc://example.com"), AddressError::MissingPath);
        assert_eq!(err("airc://example.com/"), AddressError::MissingPath);
        assert_eq!(err("airc://example.com#f"), AddressError::MissingPath);
        assert_eq!(err("airc://example.com//a"), AddressError::LeadingSlash);
        assert_eq!(err("airc://example.com/a//b"), AddressError::EmptySegment);
        assert_eq!(err("airc://example.com/a//"), AddressError::EmptySegment);
    }

    #[test]
    fn segment_length_63_accepted_64_refused() {
        let s63 = "a".repeat(63);
        assert!(Address::parse(&format!("airc://h/{s63}")).is_ok());
        let s64 = "a".repeat(64);
        assert_eq!(
            err(&format!("airc://h/{s64}")),
            AddressError::SegmentTooLong
        );
        assert!(Address::parse("airc://h/a").is_ok());
    }

    #[test]
    fn segment_characters() {
        assert_eq!(key("airc://h/Az09-_x/_r/a-b"), "airc://h/az09-_x/_r/a-b");
        assert_eq!(err("airc://h/-a"), AddressError::SegmentHyphen);
        assert_eq!(err("airc://h/a-"), AddressError::SegmentHyphen);
        assert_eq!(err("airc://h/-"), AddressError::SegmentHyphen);
        assert_eq!(err("airc://h/a.b"), AddressError::DotInSegment);
        assert_eq!(err("airc://h/a%20b"), AddressError::PercentEncoding);
        assert_eq!(err("airc://h/%61"), AddressError::PercentEncoding);
        assert_eq!(
            err("airc://h/a*"),
            AddressError::InvalidCharacter { position: 1 }
        );
        assert_eq!(
            err("airc://h/caf\u{e9}"),
            AddressError::InvalidCharacter { position: 3 }
        );
        assert_eq!(
            err("airc://h/a b"),
            AddressError::InvalidCharacter { position: 1 }
        );
        assert_eq!(
            err("airc://h/a?q"),
            AddressError::InvalidCharacter { position: 1 }
        );
    }

    #[test]
    fn dns_hosts() {
        assert_eq!(key("airc://Example.COM/a"), "airc://example.com/a");
        assert_eq!(key("airc://example.com./a"), "airc://example.com/a");
        assert_eq!(key("airc://localhost/a"), "airc://localhost/a");
        assert_eq!(key("airc://3com.example/a"), "airc://3com.example/a");
        assert_eq!(key("airc://a-b.c/a"), "airc://a-b.c/a");
        for bad in [
            "airc://-a.com/x",
            "airc://a-.com/x",
            "airc://a..com/x",
            "airc://.com/x",
            "airc://a_b.com/x",
            "airc://example.com../x",
            "airc://./x",
            "airc://user@host/x",
            "airc://999.1.1.1/x",
            "airc://1.2.3/x",
            "airc://123/x",
            "airc://1.2.3.4./x",
            "airc://h\u{e9}.com/x",
        ] {
            assert_eq!(err(bad), AddressError::InvalidHost, "{bad}");
        }
        let label63 = "a".repeat(63);
        assert!(Address::parse(&format!("airc://{label63}.com/x")).is_ok());
        let label64 = "a".repeat(64);
        assert_eq!(
            err(&format!("airc://{label64}.com/x")),
            AddressError::InvalidHost
        );
        // 253 octets of name is the most; a trailing dot does not count.
        let name253 = format!("{0}.{0}.{0}.{1}", label63, "a".repeat(61));
        assert_eq!(name253.len(), MAX_HOST_LEN);
        assert!(Address::parse(&format!("airc://{name253}./x")).is_ok());
        assert_eq!(
            err(&format!("airc://{name253}a/x")),
            AddressError::InvalidHost
        );
    }

    #[test]
    fn ipv4_hosts() {
        let a = Address::parse("airc://192.0.2.1/a").unwrap();
        assert_eq!(a.realm().kind(), HostKind::Ipv4);
        assert_eq!(a.realm().host(), "192.0.2.1");
        assert!(Address::parse("airc://0.0.0.0/a").is_ok());
        assert!(Address::parse("airc://255.255.255.255:80/a").is_ok());
        assert_eq!(err("airc://256.1.1.1/a"), AddressError::InvalidHost);
        assert_eq!(err("airc://01.1.1.1/a"), AddressError::InvalidHost);
        assert_eq!(err("airc://1.1.1.1.1/a"), AddressError::InvalidHost);
    }

    #[test]
    fn ipv6_hosts() {
        let a = Address::parse("airc://[2001:DB8::1]:7001/a").unwrap();
        assert_eq!(a.realm().kind(), HostKind::Ipv6);
        assert_eq!(a.realm().host(), "[2001:db8::1]");
        assert_eq!(a.realm().port(), Some(7001));
        assert_eq!(a.key().as_str(), "airc://[2001:db8::1]:7001/a");
        assert_eq!(key("airc://[::1]:2472/a"), "airc://[::1]/a");
        for ok in [
            "::",
            "::1",
            "1::",
            "1:2:3:4:5:6:7:8",
            "1:2:3:4:5:6:7::",
            "::2:3:4:5:6:7:8",
            "::ffff:192.0.2.1",
            "1:2:3:4:5:6:192.0.2.1",
            "fe80::1:2",
        ] {
            assert!(Address::parse(&format!("airc://[{ok}]/a")).is_ok(), "{ok}");
        }
        for bad in [
            "[]",
            "[1:2:3:4:5:6:7]",
            "[1:2:3:4:5:6:7:8:9]",
            "[1::2::3]",
            "[:::]",
            "[:1::]",
            "[1:2:3:4:5:6:7:8::]",
            "[12345::]",
            "[g::]",
            "[::1%25eth0]",
            "[v1.x]",
            "[::192.0.2.256]",
            "[1:2:3:4:5:6:7:192.0.2.1]",
            "[192.0.2.1::]",
            "::1",
            "[::1",
            "[::1]x",
            "[::1]:",
        ] {
            let e = Address::parse(&format!("airc://{bad}/a")).unwrap_err();
            assert!(
                matches!(e, AddressError::InvalidHost | AddressError::InvalidPort),
                "{bad}: {e:?}"
            );
        }
        // Only lower-casing: zero compression is not canonicalized (§2.2).
        assert_ne!(key("airc://[::1]/a"), key("airc://[0::1]/a"));
    }

    #[test]
    fn ports() {
        assert_eq!(err("airc://h:0/a"), AddressError::InvalidPort);
        assert_eq!(key("airc://h:1/a"), "airc://h:1/a");
        assert_eq!(key("airc://h:65535/a"), "airc://h:65535/a");
        assert_eq!(err("airc://h:65536/a"), AddressError::InvalidPort);
        assert_eq!(err("airc://h:/a"), AddressError::InvalidPort);
        assert_eq!(err("airc://h:-1/a"), AddressError::InvalidPort);
        assert_eq!(err("airc://h:+80/a"), AddressError::InvalidPort);
        assert_eq!(err("airc://h:000080/a"), AddressError::InvalidPort);
        assert_eq!(key("airc://h:00080/a"), "airc://h:80/a");
        assert_eq!(err("airc://h:80:80/a"), AddressError::InvalidPort);
        let a = Address::parse("airc://h:7001/a").unwrap();
        assert_eq!(a.realm().effective_port(), 7001);
    }

    #[test]
    fn default_port_dropped() {
        let a = Address::parse("airc://example.com:2472/a").unwrap();
        assert_eq!(a.key().as_str(), "airc://example.com/a");
        assert_eq!(a.realm().port(), None);
        assert_eq!(a.realm().effective_port(), DEFAULT_PORT);
        assert_eq!(a, Address::parse("airc://example.com/a").unwrap());
        assert_eq!(key("airc://example.com:02472/a"), "airc://example.com/a");
    }

    #[test]
    fn canonical_form_lower_cases_and_strips() {
        let a = Address::parse("AIRC://Example.COM.:2472/Alice/Net-Ops#Inc-1").unwrap();
        assert_eq!(a.key().as_str(), "airc://example.com/alice/net-ops");
        assert_eq!(a.to_string(), "airc://example.com/alice/net-ops#Inc-1");
        assert_eq!(a.segments(), ["alice", "net-ops"]);
        assert_eq!(a.realm().to_string(), "example.com");
    }

    #[test]
    fn fragment_kept_in_display_ignored_in_key() {
        let a = Address::parse("airc://h/a#one").unwrap();
        let b = Address::parse("airc://h/a#two").unwrap();
        let c = Address::parse("airc://h/a").unwrap();
        assert_eq!(a.fragment(), Some("one"));
        assert_eq!(c.fragment(), None);
        assert_eq!(a.to_string(), "airc://h/a#one");
        assert_eq!(a.key(), b.key());
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(a.cmp(&b), core::cmp::Ordering::Equal);
        assert_eq!(a.without_fragment().to_string(), "airc://h/a");
        let mut set = alloc::collections::BTreeSet::new();
        set.insert(a);
        assert!(!set.insert(b));
        // An empty fragment is present, and kept.
        assert_eq!(
            Address::parse("airc://h/a#").unwrap().to_string(),
            "airc://h/a#"
        );
    }

    #[test]
    fn fragment_is_pchars() {
        let f = "aZ9-._~!$&'()*+,;=:@%2F";
        let a = Address::parse(&format!("airc://h/a#{f}")).unwrap();
        assert_eq!(a.fragment(), Some(f));
        for bad in ["a/b", "a?b", "a#b", "%", "%2", "%zz", "a b", "\u{e9}"] {
            assert_eq!(
                err(&format!("airc://h/a#{bad}")),
                AddressError::InvalidFragment,
                "{bad}"
            );
        }
    }

    #[test]
    fn namespace_and_endpoint_differ() {
        let ns = Address::parse("airc://h/alice/").unwrap();
        let ep = Address::parse("airc://h/alice").unwrap();
        assert!(ns.is_namespace() && !ns.is_endpoint());
        assert!(ep.is_endpoint() && !ep.is_namespace());
        assert_ne!(ns, ep);
        assert_eq!(ns.key().as_str(), "airc://h/alice/");
        assert_eq!(
            Address::parse("//h/a").unwrap(),
            Address::parse("airc://h/a").unwrap()
        );
        assert_ne!(
            Address::parse("//h/a").unwrap(),
            Address::parse("//h/a/").unwrap()
        );
    }

    #[test]
    fn accessors() {
        let a = Address::parse("airc://h/alice/net-ops/bot").unwrap();
        assert_eq!(a.first_segment(), "alice");
        assert_eq!(a.namespace(), ["alice", "net-ops"]);
        let b = Address::parse("airc://h/solo").unwrap();
        assert_eq!(b.first_segment(), "solo");
        assert!(b.namespace().is_empty());
    }

    #[test]
    fn local_form_resolves_against_realm_and_first_namespace() {
        // Appendix A.1: client alice/x on example.com sends from "x".
        let realm = Authority::parse("example.com").unwrap();
        let ns = Namespace::parse("alice").unwrap();
        let face = Face::Client {
            realm: &realm,
            namespace: &ns,
        };
        let from = Address::resolve("x", face).unwrap();
        assert_eq!(from.to_string(), "airc://example.com/alice/x");
        let a = Address::resolve("Bob/Y/#inc", face).unwrap();
        assert_eq!(a.to_string(), "airc://example.com/alice/bob/y/#inc");
        assert!(a.is_namespace());
        // A URI form is taken as it is, on either face.
        let to = Address::resolve("//partner.example/support/desk", face).unwrap();
        assert_eq!(to.to_string(), "airc://partner.example/support/desk");
        // No namespaces: ctx = "" and the path sits directly under the realm.
        let root = Namespace::root();
        let face = Face::Client {
            realm: &realm,
            namespace: &root,
        };
        assert_eq!(
            Address::resolve("bob/y", face).unwrap().to_string(),
            "airc://example.com/bob/y"
        );
        // A realm with a port carries it into the resolved address.
        let realm = Authority::parse("Example.com:7001").unwrap();
        let ns = Namespace::parse("alice/net-ops/").unwrap();
        let face = Face::Client {
            realm: &realm,
            namespace: &ns,
        };
        assert_eq!(
            Address::resolve("x", face).unwrap().key().as_str(),
            "airc://example.com:7001/alice/net-ops/x"
        );
    }

    #[test]
    fn local_form_invalid_on_the_peer_face() {
        assert_eq!(
            Address::resolve("alice/x", Face::Peer).unwrap_err(),
            AddressError::LocalForm
        );
        assert_eq!(err("x#frag"), AddressError::LocalForm);
        assert!(Address::resolve("airc://example.com/alice/x", Face::Peer).is_ok());
    }

    #[test]
    fn local_form_follows_the_grammar() {
        let realm = Authority::parse("example.com").unwrap();
        let ns = Namespace::root();
        let face = Face::Client {
            realm: &realm,
            namespace: &ns,
        };
        for (bad, e) in [
            ("", AddressError::MissingPath),
            ("a.b", AddressError::DotInSegment),
            ("a//b", AddressError::EmptySegment),
            ("#f", AddressError::MissingPath),
            ("host:80/a", AddressError::InvalidCharacter { position: 4 }),
            ("-a", AddressError::SegmentHyphen),
        ] {
            assert_eq!(Address::resolve(bad, face).unwrap_err(), e, "{bad}");
        }
    }

    #[test]
    fn namespace_parse() {
        assert!(Namespace::parse("").unwrap().segments().is_empty());
        assert_eq!(Namespace::parse("Alice/").unwrap().segments(), ["alice"]);
        assert_eq!(Namespace::parse("/alice"), Err(AddressError::LeadingSlash));
        assert_eq!(Namespace::parse("a.b"), Err(AddressError::DotInSegment));
    }

    #[test]
    fn inside_a_namespace_needs_a_segment_after_it() {
        let alice = Namespace::parse("alice").unwrap();
        assert!(Address::parse("//h/alice/x").unwrap().is_inside(&alice));
        assert!(Address::parse("//h/alice/x/y").unwrap().is_inside(&alice));
        assert!(!Address::parse("//h/alice").unwrap().is_inside(&alice));
        assert!(!Address::parse("//h/alice/").unwrap().is_inside(&alice));
        assert!(!Address::parse("//h/alicex/y").unwrap().is_inside(&alice));
        assert!(!Address::parse("//h/bob/x").unwrap().is_inside(&alice));
    }

    #[test]
    fn enclosing_namespace_keys_are_the_key_prefixes_of_each_namespace_above() {
        let keys = |s: &str| -> Vec<String> {
            let a = Address::parse(s).unwrap();
            a.enclosing_namespace_keys().map(String::from).collect()
        };
        let want = ["airc://r.example:99/a/", "airc://r.example:99/a/b/"];
        assert_eq!(keys("airc://R.example:99/a/b/c#frag"), want);
        assert_eq!(keys("airc://r.example:99/a/b/c/"), want);
        assert!(keys("airc://r.example/a").is_empty());
        assert!(keys("airc://r.example/a/").is_empty());
        for k in keys("airc://r.example/a/b/c/d") {
            let ns = Address::parse(&k).unwrap();
            assert!(ns.is_namespace() && ns.key().as_str() == k, "{k}");
        }
    }

    #[test]
    fn delegation() {
        let p = Address::parse("//r/bob/research").unwrap();
        let beneath = Address::parse("//r/bob/research/spider1/run#2").unwrap();
        assert_eq!(
            p.delegated_remainder(&beneath),
            Some(&["spider1".to_string(), "run".to_string()][..])
        );
        assert!(p.is_resolver_for(&Address::parse("//r/bob/research/x/").unwrap()));
        // Not beneath: itself, its namespace, a sibling, another realm.
        assert!(!p.is_resolver_for(&p));
        assert!(!p.is_resolver_for(&Address::parse("//r/bob/research/").unwrap()));
        assert!(!p.is_resolver_for(&Address::parse("//r/bob/researchx/a").unwrap()));
        assert!(!p.is_resolver_for(&Address::parse("//r/bob/a").unwrap()));
        assert!(!p.is_resolver_for(&Address::parse("//r:7001/bob/research/a").unwrap()));
        // Only an endpoint resolves; a namespace reference is not one.
        let ns = Address::parse("//r/bob/research/").unwrap();
        assert!(!ns.is_resolver_for(&beneath));
    }

    #[test]
    fn reserved_names() {
        assert!(is_reserved_segment("_resolver"));
        assert!(is_reserved_segment("_"));
        assert!(!is_reserved_segment("a_b"));
        for name in RESERVED_NAMES {
            assert!(is_reserved_segment(name));
            assert!(
                Address::parse(&format!("//r/{name}"))
                    .unwrap()
                    .is_reserved()
            );
        }
        assert_eq!(RESERVED_NAMES, ["_resolver", "_passport"]);
        assert!(Address::parse("//r/alice/_inbox").unwrap().is_reserved());
        assert!(!Address::parse("//r/alice/in_box").unwrap().is_reserved());
    }

    #[test]
    fn every_error_maps_to_bad_address() {
        assert_eq!(err("airc:foo").code(), "bad_address");
        assert_eq!(AddressError::LocalForm.code(), AddressError::ACK_CODE);
        assert!(!AddressError::TooLong { len: 2000 }.to_string().is_empty());
    }

    #[test]
    fn display_reparses_to_the_same_key() {
        for s in [
            "AIRC://Example.COM.:2472/Alice/x/#Frag",
            "//[::FFFF:192.0.2.1]:99/a",
            "airc://10.0.0.1/_resolver",
        ] {
            let a = Address::parse(s).unwrap();
            let b = Address::parse(&a.to_string()).unwrap();
            assert_eq!(a.key(), b.key());
            assert_eq!(a.fragment(), b.fragment());
        }
    }
}
