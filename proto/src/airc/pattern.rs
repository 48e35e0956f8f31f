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
            return path.len() > segs.len() && segs.iter().zip(path).all(|(s, a)| s.as_str() == a);
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

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    fn m(pattern: &str, address: &str) -> bool {
        Pattern::parse(pattern)
            .unwrap()
            .matches(&Address::parse(address).unwrap())
    }

    #[test]
    fn section_18_1_namespace_pattern_does_not_match_the_endpoint() {
        assert!(!m("//example.com/alice/", "airc://example.com/alice"));
    }

    #[test]
    fn section_18_1_patterns_against_alice_aih() {
        let a = "airc://example.com/alice/aih";
        assert!(m("//example.com/alice/", a));
        assert!(m("//example.com/alice/aih", a));
        assert!(m("//example.com/alice/*", a));
        assert!(m("//example.com/*/aih", a));
        assert!(m("//example.com/alice/**", a));
        assert!(m("//example.com/**", a));
        assert!(m("//*/alice/aih", a));
        assert!(m("*", a));
        assert!(m("airc://Example.COM:2472/Alice/AIH", a));
        assert!(!m("//example.com/alice", a));
        assert!(!m("//example.com/alice/aih/", a));
        assert!(!m("//example.com/alice/aih/**", a));
        assert!(!m("//example.com/alice/aih/*", a));
        assert!(!m("//example.com/*", a));
        assert!(!m("//example.com/bob/", a));
        assert!(!m("//partner.example/alice/aih", a));
        assert!(!m("//example.com:7001/alice/aih", a));
    }

    #[test]
    fn whole_star_matches_every_address() {
        let p = Pattern::parse("*").unwrap();
        assert!(p.is_all());
        assert_eq!(p.to_string(), "*");
        for a in ["//a/b", "//[::1]:9/x/y/", "//10.0.0.1/_resolver#f"] {
            assert!(p.matches(&Address::parse(a).unwrap()), "{a}");
        }
    }

    #[test]
    fn authority_star_matches_any_authority() {
        assert!(m("//*/a", "airc://x.example/a"));
        assert!(m("//*/a", "airc://[::1]:7001/a"));
        assert!(!m("//*/a", "airc://x.example/b"));
        assert_eq!(
            Pattern::parse("//*:80/a"),
            Err(PatternError::Address(AddressError::InvalidHost))
        );
        assert_eq!(Pattern::parse("//*/a").unwrap().authority(), None);
    }

    #[test]
    fn authority_compared_with_the_key() {
        assert!(m("//EXAMPLE.com./a", "airc://example.com:2472/a"));
        assert!(m("//h:7001/a", "airc://h:7001/a"));
        assert!(!m("//h:7001/a", "airc://h/a"));
        assert!(!m("//h/a", "airc://h:7001/a"));
    }

    #[test]
    fn star_segment_is_exactly_one() {
        assert!(m("//h/carol/*", "airc://h/carol/x"));
        assert!(!m("//h/carol/*", "airc://h/carol"));
        assert!(!m("//h/carol/*", "airc://h/carol/x/y"));
        assert!(m("//h/*/x", "airc://h/a/x"));
        assert!(!m("//h/*/x", "airc://h/a/y"));
        assert!(m("//h/*", "airc://h/a"));
    }

    #[test]
    fn double_star_is_one_or_more_and_last_only() {
        // Appendix A.3's passport `to`.
        assert!(m(
            "//partner.example/**",
            "airc://partner.example/support/desk"
        ));
        assert!(m("//h/a/**", "airc://h/a/b"));
        assert!(m("//h/a/**", "airc://h/a/b/c/d"));
        assert!(!m("//h/a/**", "airc://h/a"));
        assert!(!m("//h/a/**", "airc://h/b/c"));
        assert!(m("//h/**", "airc://h/a"));
        assert_eq!(Pattern::parse("//h/**/a"), Err(PatternError::RestNotLast));
        assert_eq!(Pattern::parse("//h/a/**").unwrap().to_string(), "//h/a/**");
    }

    #[test]
    fn trailing_slash_matches_strictly_beneath() {
        assert!(m("//h/alice/", "airc://h/alice/x"));
        assert!(m("//h/alice/", "airc://h/alice/x/y"));
        assert!(m("//h/alice/", "airc://h/alice/x/"));
        assert!(!m("//h/alice/", "airc://h/alice"));
        assert!(!m("//h/alice/", "airc://h/alice/"));
        assert!(!m("//h/alice/", "airc://h/alicex/y"));
    }

    #[test]
    fn namespace_form_compares_its_prefix_literally() {
        // As written in §2.7: `A.path[:len(segs)] == segs`, so wildcards there match nothing.
        assert!(!m("//h/a/*/", "airc://h/a/b/c"));
        assert!(!m("//h/**/", "airc://h/a/b"));
    }

    #[test]
    fn address_trailing_slash_is_not_compared() {
        // §2.7 compares segments only.
        assert!(m("//h/alice", "airc://h/alice/"));
        assert!(m("//h/alice/*", "airc://h/alice/x/"));
    }

    #[test]
    fn fragment_never_matters() {
        assert!(m("//h/a", "airc://h/a#incarnation-2"));
        assert_eq!(Pattern::parse("//h/a#f"), Err(PatternError::Fragment));
    }

    #[test]
    fn pattern_grammar() {
        assert!(Pattern::parse("airc://h/a").is_ok());
        assert_eq!(
            Pattern::parse("airc:h/a"),
            Err(PatternError::Address(AddressError::MissingSlashes))
        );
        assert_eq!(
            Pattern::parse("h/a"),
            Err(PatternError::Address(AddressError::MissingSlashes))
        );
        assert_eq!(
            Pattern::parse("/h/a"),
            Err(PatternError::Address(AddressError::LeadingSlash))
        );
        assert_eq!(
            Pattern::parse("//h"),
            Err(PatternError::Address(AddressError::MissingPath))
        );
        assert_eq!(
            Pattern::parse("//h/"),
            Err(PatternError::Address(AddressError::MissingPath))
        );
        assert_eq!(
            Pattern::parse("//h/a//b"),
            Err(PatternError::Address(AddressError::EmptySegment))
        );
        assert_eq!(
            Pattern::parse("//h/a*"),
            Err(PatternError::Address(AddressError::InvalidCharacter {
                position: 1
            }))
        );
        assert_eq!(
            Pattern::parse("//h/a.b"),
            Err(PatternError::Address(AddressError::DotInSegment))
        );
        assert_eq!(
            Pattern::parse("//h/***"),
            Err(PatternError::Address(AddressError::InvalidCharacter {
                position: 0
            }))
        );
        let long = alloc::format!("//h/{}", "a/".repeat(600));
        assert!(matches!(
            Pattern::parse(&long),
            Err(PatternError::Address(AddressError::TooLong { .. }))
        ));
        assert_eq!(Pattern::parse("//h/-").unwrap_err().code(), "bad_bind");
    }

    #[test]
    fn star_is_not_an_address_character() {
        assert!(Address::parse("//h/*").is_err());
        assert!(Address::parse("//*/a").is_err());
    }

    #[test]
    fn bind_names_resolve_in_the_realm() {
        // §4.3's example: bind names and the bound reply.
        let realm = Authority::parse("example.com").unwrap();
        let bound: alloc::vec::Vec<String> = ["alice/", "bob/research", "carol/*"]
            .iter()
            .map(|n| Pattern::parse_in_realm(n, &realm).unwrap().to_string())
            .collect();
        assert_eq!(
            bound,
            [
                "//example.com/alice/",
                "//example.com/bob/research",
                "//example.com/carol/*"
            ]
        );
        for b in &bound {
            assert_eq!(Pattern::parse(b).unwrap().to_string(), *b);
        }
        assert!(Pattern::parse_in_realm("*", &realm).unwrap().is_all());
        assert_eq!(
            Pattern::parse_in_realm("//other/x", &realm)
                .unwrap()
                .to_string(),
            "//other/x"
        );
        assert_eq!(
            Pattern::parse_in_realm("/alice", &realm),
            Err(PatternError::Address(AddressError::LeadingSlash))
        );
    }

    #[test]
    fn section_18_5_binds_match_by_pattern() {
        let a = |s: &str| Address::parse(s).unwrap();
        let ns = Pattern::parse("//r/alice/").unwrap();
        let research = Pattern::parse("//r/alice/research").unwrap();
        let spider = Pattern::parse("//r/alice/research/spider1").unwrap();
        let target = a("airc://r/alice/research/spider1");
        assert!(ns.matches(&target) && spider.matches(&target));
        assert!(!research.matches(&target));
        // Beneath research: the pattern does not match, delegation (§2.5) applies instead.
        let deep = a("airc://r/alice/research/spider2");
        assert!(!research.matches(&deep));
        assert!(a("airc://r/alice/research").is_resolver_for(&deep));
    }

    #[test]
    fn accessors_and_reserved() {
        let p = Pattern::parse("//H/Alice/*/**").unwrap();
        assert_eq!(p.authority().unwrap().host(), "h");
        assert_eq!(
            p.segments(),
            [
                PatternSegment::Literal("alice".to_string()),
                PatternSegment::One,
                PatternSegment::Rest
            ]
        );
        assert!(!p.is_namespace() && !p.is_all());
        assert!(Pattern::parse("//h/a/").unwrap().is_namespace());
        assert!(
            Pattern::parse("//h/_passport")
                .unwrap()
                .has_reserved_segment()
        );
        assert!(Pattern::parse("//h/a/_x/").unwrap().has_reserved_segment());
        assert!(!Pattern::parse("//h/a/*").unwrap().has_reserved_segment());
    }
}
