//! `weft circle serve --config FILE`: the shell's settings as TOML; an unknown key is refused.
//!
//! ```toml
//! listen = "127.0.0.1:7480"          # the napplet face (and the control face), loopback
//! member_listen = "0.0.0.0:7481"     # where members' WebSocket links come in (optional)
//! data_dir = "./weft-data/circle"    # the store, the pairings, the key (made 0700)
//! key = "./circle.key"               # the user's circle key (default: data_dir/circle.key)
//! origins = ["https://app.example"]  # web origins allowed to open the napplet face
//! publish_ttl = 3                    # the user's caps (NAP-MESH MeshLimits)
//! subscribe_ttl = 2
//! blobs_dir = "./blobs"              # blobs held here, one file per sha256 (hex name)
//! control_token = "…"                # opens /control (grants, pairing, counters)
//! members = ["ws://192.168.1.20:7481/member"]  # member links to dial
//!
//! [[napplet]]
//! name = "doorbell"
//! token = "…"                        # the napplet connects to /napplet?token=…
//! granted = true                     # holds the `mesh` capability from the start
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// The default napplet face.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7480";

/// The default data directory.
pub const DEFAULT_DATA_DIR: &str = "./weft-data/circle";

/// Most napplets one config may name (each a token and a grant).
pub const MAX_NAPPLETS: usize = 256;

/// Most member URLs dialled.
pub const MAX_MEMBER_URLS: usize = 64;

/// One napplet the shell serves.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NappletConfig {
    /// Its name (in logs and on the control face).
    pub name: String,
    /// The token it presents on `/napplet?token=…`.
    pub token: String,
    /// Whether it holds the `mesh` grant from the start.
    #[serde(default)]
    pub granted: bool,
}

/// The whole file.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CircleConfig {
    /// The napplet face.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Where members' WebSocket links come in.
    pub member_listen: Option<SocketAddr>,
    /// The data directory.
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// The key file (default `data_dir/circle.key`).
    pub key: Option<PathBuf>,
    /// Web origins allowed on the napplet face.
    #[serde(default)]
    pub origins: Vec<String>,
    /// The publish cap.
    #[serde(default = "default_publish_ttl")]
    pub publish_ttl: u8,
    /// The subscribe cap.
    #[serde(default = "default_subscribe_ttl")]
    pub subscribe_ttl: u8,
    /// Where this device's blobs are (one file per sha256, named by its lower-case hex).
    pub blobs_dir: Option<PathBuf>,
    /// The control face's token; no control face without one.
    pub control_token: Option<String>,
    /// Member links to dial.
    #[serde(default)]
    pub members: Vec<String>,
    /// The napplets.
    #[serde(default, rename = "napplet")]
    pub napplets: Vec<NappletConfig>,
}

fn default_listen() -> SocketAddr {
    DEFAULT_LISTEN.parse().expect("a socket address")
}
fn default_data_dir() -> PathBuf {
    PathBuf::from(DEFAULT_DATA_DIR)
}
fn default_publish_ttl() -> u8 {
    weft_proto::circle::DEFAULT_PUBLISH_TTL
}
fn default_subscribe_ttl() -> u8 {
    weft_proto::circle::DEFAULT_SUBSCRIBE_TTL
}

impl CircleConfig {
    /// Reads the TOML text; an unknown key, a duplicate napplet name or token, or a bound passed
    /// is an error naming it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let c: Self = toml::from_str(text).map_err(|e| e.to_string())?;
        if c.napplets.len() > MAX_NAPPLETS {
            return Err(format!("at most {MAX_NAPPLETS} napplets"));
        }
        if c.members.len() > MAX_MEMBER_URLS {
            return Err(format!("at most {MAX_MEMBER_URLS} members"));
        }
        let mut names = std::collections::BTreeSet::new();
        let mut tokens = std::collections::BTreeSet::new();
        for n in &c.napplets {
            if n.token.len() < 16 {
                return Err(format!(
                    "napplet {}: a token of at least 16 characters",
                    n.name
                ));
            }
            if !names.insert(&n.name) || !tokens.insert(&n.token) {
                return Err(format!("napplet {}: name or token used twice", n.name));
            }
        }
        if c.control_token.as_ref().is_some_and(|t| t.len() < 16) {
            return Err("control_token: at least 16 characters".into());
        }
        for m in &c.members {
            if !(m.starts_with("ws://") || m.starts_with("wss://")) {
                return Err(format!("member {m}: a ws:// or wss:// URL"));
            }
        }
        Ok(c)
    }

    /// The key file's path.
    pub fn key_path(&self) -> PathBuf {
        self.key
            .clone()
            .unwrap_or_else(|| self.data_dir.join("circle.key"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_short_tokens_and_duplicates_are_refused() {
        assert!(CircleConfig::parse("nope = 1").is_err());
        let ok = CircleConfig::parse(
            "[[napplet]]\nname = \"a\"\ntoken = \"0123456789abcdef\"\ngranted = true\n",
        )
        .unwrap();
        assert_eq!(ok.publish_ttl, 3);
        assert_eq!(ok.subscribe_ttl, 2);
        assert!(ok.napplets[0].granted);
        assert!(CircleConfig::parse("[[napplet]]\nname = \"a\"\ntoken = \"short\"\n").is_err());
        let twice = "[[napplet]]\nname = \"a\"\ntoken = \"0123456789abcdef\"\n\
                     [[napplet]]\nname = \"b\"\ntoken = \"0123456789abcdef\"\n";
        assert!(CircleConfig::parse(twice).is_err());
        assert!(CircleConfig::parse("members = [\"http://x\"]").is_err());
        // Members through Minca are not served yet: the section is refused, not ignored.
        assert!(CircleConfig::parse("[minca]\nrelays = []\nspace = \"s\"\n").is_err());
    }
}
