//! Patterns (AIRC §2.7), as binds (§4.3) and policy rules (§10) use them.
//!
//! A pattern is a network-form address in which the authority may be `*`, a segment may be `*`
//! (exactly one segment), the last segment may be `**`, a trailing `/` matches everything
//! strictly beneath the prefix, and the whole pattern may be `*`. [`Pattern::matches`] is §2.7's
//! algorithm step for step, against the address's key.
//!
//! Two consequences of that algorithm are kept exactly, because §2.7 makes them observable:
//!
//! - the address's own trailing `/` does not take part (`//h/a` matches `airc://h/a/`);
//! - a pattern in namespace form compares its prefix segments literally, so a `*` or `**` before
//!   a trailing `/` (`//h/a/*/`) matches nothing.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use super::address::{
    Address, AddressError, Authority, MAX_ADDRESS_LEN, canonical_segment, is_reserved_segment,
    split_network, strip_scheme,
};

/// The pattern, authority or segment that stands for "any" (§2.7).
pub const ANY: &str = "*";

/// The last segment that stands for "one or more segments" (§2.7).
pub const REST: &str = "**";

/// Why a piece of text is not a pattern.
///
/// A bind name that fails is answered with error [`PatternError::BIND_CODE`] (§4.3); a policy rule
/// that fails is a configuration error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PatternError {
    /// The text breaks an address rule (§2.1) outside the wildcards §2.7 allows.
    Address(AddressError),
    /// `**` somewhere other than the last segment.
    RestNotLast,
    /// A `#fragment`: patterns match keys, which have none.
    Fragment,
}

impl PatternError {
    /// The error frame code §4.3 gives a bind that cannot be accepted.
    pub const BIND_CODE: &'static str = "bad_bind";

    /// The error frame code to answer a bind with: always [`Self::BIND_CODE`].
    pub fn code(&self) -> &'static str {
        Self::BIND_CODE
    }
}

impl From<AddressError> for PatternError {
    fn from(e: AddressError) -> Self {
        Self::Address(e)
    }
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Address(e) => write!(f, "invalid pattern: {e}"),
            Self::RestNotLast => f.write_str("** may only be the last segment"),
            Self::Fragment => f.write_str("a pattern has no fragment"),
        }
    }
}

impl core::error::Error for PatternError {}

/// One segment of a pattern.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PatternSegment {
    /// A segment that must equal the address's, lower-cased as keys are.
    Literal(String),
    /// `*`: exactly one segment.
    One,
    /// `**`: one or more segments (last only).
    Rest,
}

impl PatternSegment {
    fn as_str(&self) -> &str {
        match self {
            Self::Literal(s) => s,
            Self::One => ANY,
            Self::Rest => REST,
        }
    }
}

/// A parsed §2.7 pattern, in canonical form (authority and literal segments as in a key).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pattern {
    /// `None` for the whole pattern `*`.
    path: Option<PathPattern>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct PathPattern {
    /// `None` for the authority `*`.
    authority: Option<Authority>,
    segments: Vec<PatternSegment>,
    namespace: bool,
}

impl Pattern {
    /// Parses an absolute pattern: `*`, or `[airc:]//authority/path` with the wildcards of §2.7.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        if text == ANY {
            return Ok(Self { path: None });
        }
        check_len(text)?;
        let (authority, path) = split_network(text)?.ok_or(AddressError::MissingSlashes)?;
        let authority = match authority {
            ANY => None,
            a => Some(Authority::parse(a)?),
        };
        Self::with_path(authority, path)
    }

    /// Parses a bind name (§4.3), which is relative to the realm (`alice/`, `carol/*`), into the
    /// absolute pattern the server replies with; an absolute pattern or `*` is parsed as by
    /// [`Pattern::parse`].
    pub fn parse_in_realm(text: &str, realm: &Authority) -> Result<Self, PatternError> {
        if text == ANY || text.starts_with('/') || strip_scheme(text).is_some() {
            return Self::parse(text);
        }
        check_len(text)?;
        Self::with_path(Some(realm.clone()), text)
    }

    fn with_path(authority: Option<Authority>, path: &str) -> Result<Self, PatternError> {
        if path.contains('#') {
            return Err(PatternError::Fragment);
        }
        if path.is_empty() {
            return Err(AddressError::MissingPath.into());
        }
        let (body, namespace) = match path.strip_suffix('/') {
            Some(b) => (b, true),
            None => (path, false),
        };
        let mut segments = Vec::new();
        let mut pieces = body.split('/').peekable();
        while let Some(s) = pieces.next() {
            segments.push(match s {
                ANY => PatternSegment::One,
                REST if pieces.peek().is_none() => PatternSegment::Rest,
                REST => return Err(PatternError::RestNotLast),
                s => PatternSegment::Literal(canonical_segment(s)?),
            });
        }
        Ok(Self {
            path: Some(PathPattern {
                authority,
                segments,
                namespace,
            }),
        })
    }

    /// Whether this is the whole pattern `*`, which matches every address.
    pub fn is_all(&self) -> bool {
        self.path.is_none()
    }

    /// The authority the pattern requires, or `None` when it is `*` (or the whole pattern is).
    pub fn authority(&self) -> Option<&Authority> {
        self.path.as_ref().and_then(|p| p.authority.as_ref())
    }

    /// The pattern's segments (empty for the whole pattern `*`).
    pub fn segments(&self) -> &[PatternSegment] {
        self.path.as_ref().map_or(&[], |p| &p.segments)
    }

    /// Whether the pattern ends in `/`: it matches everything strictly beneath the prefix.
    pub fn is_namespace(&self) -> bool {
        self.path.as_ref().is_some_and(|p| p.namespace)
    }

    /// Whether any literal segment is reserved (§2.6), which a bind may name only when the
    /// operator configures it (§4.3).
    pub fn has_reserved_segment(&self) -> bool {
        self.segments()
            .iter()
            .any(|s| matches!(s, PatternSegment::Literal(l) if is_reserved_segment(l)))
    }

    /// §2.7's matching algorithm, against `address`'s key.
    pub fn matches(&self, address: &Address) -> bool {
        // if P == "*": match
        let Some(p) = &self.path else {
            return true;
        };
        // if host != "*" and host != A.authority: no match
        if p.authority.as_ref().is_some_and(|h| h != address.realm()) {
            return false;
        }
        let path = address.segments();
        let segs = &p.segments;
        // if segs is empty: no match (parse never produces one; kept for the algorithm's sake)
        if segs.is_empty() {
            return false;
        }
        // if ns_form: match iff len(A.path) > len(segs) and A.path[:len(segs)] == segs
        if p.namespace {
            return path.len() > segs.len()
                && segs.iter().zip(path).all(|(s, a)| s.as_str() == a);
        }
        for (i, s) in segs.iter().enumerate() {
            match s {
                PatternSegment::Rest => return i < path.len(),
                _ if i >= path.len() => return false,
                PatternSegment::Literal(l) if *l != path[i] => return false,
                _ => {}
            }
        }
        segs.len() == path.len()
    }
}

/// Patterns are held to the address bound: a pattern is an address with wildcards (§2.7).
fn check_len(text: &str) -> Result<(), PatternError> {
    if text.len() > MAX_ADDRESS_LEN {
        return Err(AddressError::TooLong { len: text.len() }.into());
    }
    Ok(())
}

impl fmt::Display for Pattern {
    /// `*`, or `//authority/path` as §4.3's `bound` reply writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(p) = &self.path else {
            return f.write_str(ANY);
        };
        f.write_str("//")?;
        match &p.authority {
            Some(a) => write!(f, "{a}")?,
            None => f.write_str(ANY)?,
        }
        for s in &p.segments {
            f.write_str("/")?;
            f.write_str(s.as_str())?;
        }
        if p.namespace {
            f.write_str("/")?;
        }
        Ok(())
    }
}
