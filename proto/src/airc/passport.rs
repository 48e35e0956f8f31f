//! Passport renderings (AIRC §12.2), the token hash of §12.1 and the redemption message's
//! constants (§12.4); the issuer's records and rules are in [`book`].
//!
//! A passport reaches a redeemer as a line, a URL whose fragment is the line, or a JSON file; "a
//! redeemer MUST accept all three. Only issuer and token are needed to redeem; the rest is for
//! display."

pub mod book;

use alloc::string::{String, ToString};
use core::fmt;

use crate::codec::hex;
use crate::crypto::CryptoProvider;

/// The `type` of a redemption message (§6.3, §12.4).
pub const PASSPORT_TYPE: &str = "application/airc-passport+json";

/// The reserved endpoint a redemption is addressed to (§12.4), handled by the server itself.
pub use super::address::PASSPORT as PASSPORT_ENDPOINT;

/// The `ttl` of a redemption message (§12.4: "SHOULD be short (600 s)").
pub const REDEMPTION_TTL: u64 = 600;

/// What every line starts with: the format and its version.
const LINE_PREFIX: &str = "airc-passport:1;";

/// Why a passport could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PassportError {
    /// Not a line, a URL with a line in its fragment, or a passport file.
    NotAPassport,
    /// A version other than 1.
    UnsupportedVersion,
    /// The issuer (`i=`) is missing or empty.
    MissingIssuer,
    /// The token (`t=`) is missing or empty.
    MissingToken,
    /// A field out of order, repeated, unknown, or holding a character it may not.
    Malformed,
}

impl fmt::Display for PassportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotAPassport => "not a passport line, URL or file",
            Self::UnsupportedVersion => "unsupported passport version",
            Self::MissingIssuer => "passport has no issuer",
            Self::MissingToken => "passport has no token",
            Self::Malformed => "malformed passport",
        })
    }
}

impl core::error::Error for PassportError {}

/// A passport as a redeemer holds it: what it needs to redeem (issuer, token) and the endpoint
/// for display.
#[derive(Clone, PartialEq, Eq)]
pub struct Passport {
    /// The issuing realm (`i=`).
    pub issuer: String,
    /// The inviting endpoint's path (`e=`), when given.
    pub endpoint: Option<String>,
    /// The bearer token (`t=`). A secret: `Debug` does not show it.
    pub token: String,
}

impl Passport {
    /// Reads any of the three renderings of §12.2: a line, a URL whose fragment is a line, or a
    /// passport file (`{"airc_passport":1,"issuer":…,"token":…}`).
    pub fn parse(s: &str) -> Result<Self, PassportError> {
        let s = s.trim();
        if s.starts_with('{') {
            return Self::parse_file(s);
        }
        if s.starts_with("airc-passport:") {
            return Self::parse_line(s);
        }
        match s.split_once('#') {
            Some((_, fragment)) if fragment.starts_with("airc-passport:") => {
                Self::parse_line(fragment)
            }
            _ => Err(PassportError::NotAPassport),
        }
    }

    /// Reads a line: `airc-passport:1;i=<issuer>;[e=<endpoint-path>;]t=<token>`.
    pub fn parse_line(line: &str) -> Result<Self, PassportError> {
        let rest = line.strip_prefix(LINE_PREFIX).ok_or_else(|| {
            if line.starts_with("airc-passport:") {
                PassportError::UnsupportedVersion
            } else {
                PassportError::NotAPassport
            }
        })?;
        let rest = rest
            .strip_prefix("i=")
            .ok_or(PassportError::MissingIssuer)?;
        let (issuer, rest) = rest.split_once(';').ok_or(PassportError::MissingToken)?;
        let (endpoint, rest) = match rest.strip_prefix("e=") {
            Some(r) => {
                let (e, r) = r.split_once(';').ok_or(PassportError::MissingToken)?;
                (Some(field(e, PassportError::Malformed)?), r)
            }
            None => (None, rest),
        };
        let token = rest.strip_prefix("t=").ok_or(PassportError::MissingToken)?;
        Ok(Self {
            issuer: field(issuer, PassportError::MissingIssuer)?,
            endpoint,
            token: field(token, PassportError::MissingToken)?,
        })
    }

    fn parse_file(s: &str) -> Result<Self, PassportError> {
        let v: serde_json::Value =
            serde_json::from_str(s).map_err(|_| PassportError::NotAPassport)?;
        match v.get("airc_passport").and_then(|n| n.as_u64()) {
            Some(1) => {}
            Some(_) => return Err(PassportError::UnsupportedVersion),
            None => return Err(PassportError::NotAPassport),
        }
        let text = |k: &str| v.get(k).and_then(|x| x.as_str()).filter(|x| !x.is_empty());
        let issuer = text("issuer").ok_or(PassportError::MissingIssuer)?;
        let token = text("token").ok_or(PassportError::MissingToken)?;
        Ok(Self {
            issuer: field(issuer, PassportError::MissingIssuer)?,
            endpoint: text("endpoint")
                .map(|e| field(e, PassportError::Malformed))
                .transpose()?,
            token: field(token, PassportError::MissingToken)?,
        })
    }

    /// The line rendering.
    pub fn line(&self) -> String {
        let mut s = String::from(LINE_PREFIX);
        s.push_str("i=");
        s.push_str(&self.issuer);
        s.push(';');
        if let Some(e) = &self.endpoint {
            s.push_str("e=");
            s.push_str(e);
            s.push(';');
        }
        s.push_str("t=");
        s.push_str(&self.token);
        s
    }

    /// The URL rendering: the token stays in the fragment, never sent to the web server.
    pub fn url(&self, web_base: &str) -> String {
        let mut s = String::from(web_base);
        s.push('#');
        s.push_str(&self.line());
        s
    }
}

impl fmt::Debug for Passport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Passport")
            .field("issuer", &self.issuer)
            .field("endpoint", &self.endpoint)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// A line field: non-empty (else `missing`), and none of the characters that delimit or end a
/// line.
fn field(s: &str, missing: PassportError) -> Result<String, PassportError> {
    if s.is_empty() {
        return Err(missing);
    }
    if s.chars()
        .any(|c| c == ';' || c == '#' || c.is_whitespace() || c.is_control())
    {
        return Err(PassportError::Malformed);
    }
    Ok(s.to_string())
}

/// `token_hash` of §12.1: the lower-case hex SHA-256 of the token. The issuer stores only this.
pub fn token_hash(crypto: &dyn CryptoProvider, token: &str) -> String {
    hex::encode(&crypto.sha256(&[token.as_bytes()]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "airc-passport:1;i=example.com;e=alice/x;t=Zk3fQ9uT2mH7wLp4Rb8yNc6VdX1aS0gE";

    #[test]
    fn all_three_renderings_read_the_same() {
        let p = Passport::parse(LINE).unwrap();
        assert_eq!(p.line(), LINE);
        let url = p.url("https://airc.example/p/");
        assert_eq!(Passport::parse(&url).unwrap(), p);
        let file = r#"{"airc_passport":1,"issuer":"example.com","endpoint":"airc://example.com/alice/x",
            "token":"Zk3fQ9uT2mH7wLp4Rb8yNc6VdX1aS0gE","label":"x","uses":1}"#;
        let f = Passport::parse(file).unwrap();
        assert_eq!(
            (f.issuer.as_str(), f.token.as_str()),
            ("example.com", p.token.as_str())
        );
    }

    #[test]
    fn endpoint_is_optional() {
        let p = Passport::parse("airc-passport:1;i=r.example;t=abc").unwrap();
        assert_eq!(p.endpoint, None);
        assert_eq!(p.line(), "airc-passport:1;i=r.example;t=abc");
    }

    #[test]
    fn bad_lines_are_refused_with_a_reason() {
        use PassportError::*;
        for (s, e) in [
            ("hello", NotAPassport),
            ("https://x/#nothing", NotAPassport),
            ("airc-passport:2;i=a;t=b", UnsupportedVersion),
            ("airc-passport:1;t=b", MissingIssuer),
            ("airc-passport:1;i=;t=b", MissingIssuer),
            ("airc-passport:1;i=a", MissingToken),
            ("airc-passport:1;i=a;t=", MissingToken),
            ("airc-passport:1;i=a;x=1;t=b", MissingToken),
            ("airc-passport:1;i=a;t=b;c", Malformed),
            ("airc-passport:1;i=a b;t=c", Malformed),
            (r#"{"airc_passport":1,"issuer":"a"}"#, MissingToken),
            (
                r#"{"airc_passport":3,"issuer":"a","token":"b"}"#,
                UnsupportedVersion,
            ),
            ("{not json", NotAPassport),
        ] {
            assert_eq!(Passport::parse(s), Err(e), "{s}");
        }
    }

    #[test]
    fn debug_never_shows_the_token() {
        let p = Passport::parse(LINE).unwrap();
        assert!(!alloc::format!("{p:?}").contains("Zk3f"));
    }
}
