//! `weft airc serve --config FILE`: the operator's TOML file, mapped onto [`ServeConfig`].
//!
//! It carries what the realm server supports today: the uid → namespaces table and the
//! administrators' uids (AIRC §5),
//! `known_keys` (§8.2), realms trusted unsigned (§6.2, §8.4), policy rules (§10.1),
//! `accept_offers` and `auto_accept` (§11.4, §11.5), and the peer face (§8.1 static entries,
//! §8.3 TLS certificate, key and trust store, the signing key of §9.1), and passports (§12.2's
//! web base, §12.3's issuance mode). A key the file does not know is refused with its name, so a typo
//! never silently leaves a realm open. Flags given on the command line override the file; that
//! precedence is the caller's, which applies its flags after [`FileConfig::apply`].
//!
//! ```toml
//! realm = "example.com"
//! data_dir = "/var/lib/weft/airc"
//! client_tcp = "127.0.0.1:2473"
//! accept_offers = true
//! auto_accept = ["alice/desk"]
//! trusted_unsigned = ["lab.example.net"]
//!
//! [namespaces]
//! 1000 = ["alice", "ops"]
//!
//! [known_keys]
//! "example.org" = ["<standard base64 of a 32-byte Ed25519 public key>"]
//!
//! [[policy]]
//! from = "//example.com/*"
//! to = "*"
//! allow = true
//!
//! [passports]
//! mode = "owner-only"
//! web_base = "https://example.com/join"
//! ```

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use weft_proto::airc::address::{Authority, Namespace};
use weft_proto::airc::passport::book::Issuance;
use weft_proto::airc::pattern::Pattern;
use weft_proto::airc::policy::Policy;
use weft_proto::codec::base64;

use super::peer::StaticPeer;
use super::serve::ServeConfig;

/// The largest configuration file read: far above any real realm's, small enough that a wrong
/// path (a log, a device) is refused rather than read into memory.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The TOML file, as written. Every field is optional; what is absent keeps its default.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `realm`: the realm this server routes for.
    pub realm: Option<String>,
    /// `data_dir`: where durable state lives.
    pub data_dir: Option<PathBuf>,
    /// `client_socket`: the client-face Unix socket.
    pub client_socket: Option<PathBuf>,
    /// `client_tcp`: a loopback TCP address for the client face.
    pub client_tcp: Option<SocketAddr>,
    /// `client_ws`: a loopback TCP address for the client face over WebSocket (§3.1), or a
    /// `[client_ws]` table with `listen` and the web `origins` allowed to open it.
    pub client_ws: Option<ClientWs>,
    /// `[namespaces]`: uid (as a key) → namespaces; replaces the default table when present.
    #[serde(default)]
    pub namespaces: BTreeMap<String, Vec<String>>,
    /// `administrators`: uids whose connections are administrators' (§5), besides root and the
    /// account the server runs as, which always are.
    #[serde(default)]
    pub administrators: Vec<u32>,
    /// `[known_keys]`: realm → its Ed25519 public keys, standard base64 as in §8.2's `p=`.
    #[serde(default)]
    pub known_keys: BTreeMap<String, Vec<String>>,
    /// `trusted_unsigned`: realms whose traffic is accepted unsigned.
    #[serde(default)]
    pub trusted_unsigned: Vec<String>,
    /// `[[policy]]`: the ordered rules of §10.1, with §10.1's field names.
    #[serde(default)]
    pub policy: Vec<serde_json::Value>,
    /// `policy_default_allow`: what a message no rule decides gets (default: allow).
    pub policy_default_allow: Option<bool>,
    /// `accept_offers`: whether link offers are taken at all (default: true).
    pub accept_offers: Option<bool>,
    /// `auto_accept`: local endpoint patterns whose offers are accepted on arrival.
    #[serde(default)]
    pub auto_accept: Vec<String>,
    /// `[tls]`: the peer face's certificate and key, and the dialler's trust store.
    pub tls: Option<TlsFiles>,
    /// `peer_listen`: the peer face's TCP address (TLS when `[tls]` has a certificate).
    pub peer_listen: Option<SocketAddr>,
    /// `peer_quic`: the peer face's QUIC (UDP) address.
    pub peer_quic: Option<SocketAddr>,
    /// `[peers."realm"]`: static authority entries (§8.1 step 2).
    #[serde(default)]
    pub peers: BTreeMap<String, StaticPeer>,
    /// `signing_key`: the realm's Ed25519 key, a PKCS#8 PEM file (default: made on first start
    /// in the data directory).
    pub signing_key: Option<PathBuf>,
    /// `[dns]`: how discovery reaches DNS (§8.1–§8.2).
    pub dns: Option<DnsSection>,
    /// `[passports]`: who may issue passports and the web base of their URLs (§12.2, §12.3).
    pub passports: Option<PassportsSection>,
}

/// `client_ws`: an address alone, or `[client_ws]` with the origins a browser may open it from.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum ClientWs {
    /// `client_ws = "127.0.0.1:2474"`: no browser origin allowed.
    Listen(SocketAddr),
    /// `[client_ws]`.
    Table(ClientWsSection),
}

/// `[client_ws]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClientWsSection {
    /// `listen`: the loopback TCP address.
    pub listen: SocketAddr,
    /// `origins`: web origins (`https://app.example`, as a browser writes `Origin`) allowed to
    /// upgrade; empty, the default, allows none (command-line clients send no `Origin`).
    #[serde(default)]
    pub origins: Vec<String>,
}

/// `[passports]`: §12.3's issuance mode and §12.2's web base.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PassportsSection {
    /// `mode`: `"agents"` (any endpoint, for itself; the default), `"owner-only"`
    /// (administrator connections) or `"off"` (nobody), §12.3's three words.
    pub mode: Option<String>,
    /// `web_base`: an `https://` (or `http://`) URL; `passport new` then also answers with
    /// `url = web_base "#" line` (§12.2). It may not have a fragment of its own, since the
    /// passport line is the fragment.
    pub web_base: Option<String>,
}

/// The longest `web_base` accepted: a URL a person can still paste, far below a frame's size.
pub const MAX_WEB_BASE_BYTES: usize = 2048;

/// §12.3's issuance mode from its word in the file.
fn issuance(mode: &str) -> io::Result<Issuance> {
    match mode {
        "agents" => Ok(Issuance::Agents),
        "owner-only" => Ok(Issuance::OwnerOnly),
        "off" => Ok(Issuance::Off),
        other => Err(invalid(format!(
            "passports.mode: {other:?} is not one of \"agents\", \"owner-only\", \"off\""
        ))),
    }
}

/// Checks a `web_base`: the URL rendering is `web_base "#" line` (§12.2), so the base must be an
/// absolute http(s) URL with no fragment, no whitespace and no control characters, else the
/// rendered passport would not survive being pasted.
fn web_base(base: &str) -> io::Result<String> {
    let err = |why: &str| invalid(format!("passports.web_base {base:?}: {why}"));
    let rest = base
        .strip_prefix("https://")
        .or_else(|| base.strip_prefix("http://"))
        .ok_or_else(|| err("not an https:// or http:// URL"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(err("no host"));
    }
    if base.len() > MAX_WEB_BASE_BYTES {
        return Err(err(&format!("longer than {MAX_WEB_BASE_BYTES} bytes")));
    }
    if base.contains('#') {
        return Err(err("has a fragment; the passport line is the fragment"));
    }
    if base.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(err("has whitespace or control characters"));
    }
    Ok(base.to_string())
}

/// `[dns]`: the resolver discovery uses.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DnsSection {
    /// `nameserver`: an `IP:port` asked over UDP and TCP instead of the system's nameservers.
    pub nameserver: Option<SocketAddr>,
}

/// `[tls]`: PEM files for the peer face.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// `cert`: the certificate chain the peer face presents (with `key`).
    pub cert: Option<PathBuf>,
    /// `key`: its private key.
    pub key: Option<PathBuf>,
    /// `trust`: the CA certificates a dialled realm's certificate must chain to, replacing the
    /// default (the Mozilla roots of `webpki-roots`).
    pub trust: Option<PathBuf>,
}

fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

impl FileConfig {
    /// Reads and parses `path`; errors name the file.
    pub fn load(path: &Path) -> io::Result<Self> {
        let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let len = std::fs::metadata(path).map_err(named)?.len();
        if len > MAX_CONFIG_BYTES {
            return Err(named(invalid(format!(
                "{len} bytes, more than the {MAX_CONFIG_BYTES} a configuration may have"
            ))));
        }
        Self::parse(&std::fs::read_to_string(path).map_err(named)?).map_err(named)
    }

    /// Parses TOML text; an unknown key is an error naming it.
    pub fn parse(text: &str) -> io::Result<Self> {
        toml::from_str(text).map_err(invalid)
    }

    /// Sets in `config` everything the file names, checking each value; what it does not name
    /// is left as it was.
    pub fn apply(&self, config: &mut ServeConfig) -> io::Result<()> {
        if let Some(realm) = &self.realm {
            config.realm = authority("realm", realm)?;
        }
        if let Some(dir) = &self.data_dir {
            config.data_dir.clone_from(dir);
        }
        if let Some(socket) = &self.client_socket {
            config.client_socket.clone_from(socket);
        }
        if self.client_tcp.is_some() {
            config.client_tcp = self.client_tcp;
        }
        match &self.client_ws {
            Some(ClientWs::Listen(addr)) => config.client_ws = Some(*addr),
            Some(ClientWs::Table(table)) => {
                config.client_ws = Some(table.listen);
                config.client_ws_origins.clone_from(&table.origins);
            }
            None => {}
        }
        if !self.namespaces.is_empty() {
            config.namespaces.clear();
            for (uid, list) in &self.namespaces {
                let uid = parse_uid(uid).map_err(|e| invalid(format!("namespaces: {e}")))?;
                let ns = parse_namespaces(list.iter().map(String::as_str))
                    .map_err(|e| invalid(format!("namespaces.{uid}: {e}")))?;
                config.namespaces.entry(uid).or_default().extend(ns);
            }
        }
        config
            .administrators
            .extend(self.administrators.iter().copied());
        for (realm, keys) in &self.known_keys {
            let at = authority("known_keys", realm)?;
            let keys = keys
                .iter()
                .map(|k| public_key(k).map_err(|e| invalid(format!("known_keys.{realm}: {e}"))))
                .collect::<io::Result<Vec<_>>>()?;
            config.known_keys.entry(at).or_default().extend(keys);
        }
        for realm in &self.trusted_unsigned {
            config
                .trusted_unsigned
                .push(authority("trusted_unsigned", realm)?);
        }
        if !self.policy.is_empty() {
            config.policy = Policy::from_value(&serde_json::Value::Array(self.policy.clone()))
                .map_err(|e| invalid(format!("policy: {e}")))?;
        }
        if let Some(allow) = self.policy_default_allow {
            config.policy = config.policy.clone().with_default_allow(allow);
        }
        if let Some(accept) = self.accept_offers {
            config.links.accept_offers = accept;
        }
        for p in &self.auto_accept {
            let pattern = Pattern::parse_in_realm(p, &config.realm)
                .map_err(|e| invalid(format!("auto_accept {p:?}: {e}")))?;
            // §11.4 accepts offers for local endpoints only: another realm's pattern could never
            // match, so it is a mistake to report, not a rule to keep.
            if pattern.authority().is_some_and(|a| *a != config.realm) {
                return Err(invalid(format!(
                    "auto_accept {p:?}: not an endpoint of realm {}",
                    config.realm
                )));
            }
            config.links.auto_accept.push(pattern);
        }
        if self.tls.is_some() {
            config.tls.clone_from(&self.tls);
        }
        if let Some(ns) = self.dns.as_ref().and_then(|d| d.nameserver) {
            config.nameserver = Some(ns);
        }
        if self.peer_listen.is_some() {
            config.peer.listen = self.peer_listen;
        }
        if self.peer_quic.is_some() {
            config.peer.quic = self.peer_quic;
        }
        for (realm, entry) in &self.peers {
            config
                .peer
                .statics
                .insert(authority("peers", realm)?, entry.clone());
        }
        if self.signing_key.is_some() {
            config.signing_key.clone_from(&self.signing_key);
        }
        if let Some(section) = &self.passports {
            if let Some(mode) = &section.mode {
                config.passports.issuance = issuance(mode)?;
            }
            if let Some(base) = &section.web_base {
                config.passports.web_base = Some(web_base(base)?);
            }
        }
        Ok(())
    }
}

/// The `weft airc serve` flags that also have a key in the file; each one given wins over it.
#[derive(Clone, Debug, Default)]
pub struct Flags {
    /// `--realm`.
    pub realm: Option<String>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--client-socket`.
    pub client_socket: Option<PathBuf>,
    /// `--client-tcp`.
    pub client_tcp: Option<SocketAddr>,
    /// `--client-ws`.
    pub client_ws: Option<SocketAddr>,
    /// `--namespaces UID=NS[,NS…]`, repeatable; any replace the file's whole table.
    pub namespaces: Vec<String>,
    /// `--dns IP:PORT`: the nameserver discovery asks (`[dns] nameserver`).
    pub nameserver: Option<SocketAddr>,
    /// `--peer-listen`.
    pub peer_listen: Option<SocketAddr>,
    /// `--peer-quic`.
    pub peer_quic: Option<SocketAddr>,
    /// `--tls-cert`, `--tls-key`, `--tls-trust`: each replaces the file's `[tls]` entry.
    pub tls: TlsFiles,
    /// `--signing-key`.
    pub signing_key: Option<PathBuf>,
}

/// Where durable state lives when neither the flags nor the file say.
pub const DEFAULT_DATA_DIR: &str = "./weft-data/airc";

/// The server configuration from embedded defaults (the invoking uid → `default_namespace`),
/// then `file`, then `flags`.
pub fn serve_config(
    file: &FileConfig,
    flags: &Flags,
    default_namespace: &str,
) -> io::Result<ServeConfig> {
    let data_dir = flags
        .data_dir
        .clone()
        .or_else(|| file.data_dir.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    let mut config = ServeConfig::local(&data_dir, default_namespace)?;
    file.apply(&mut config)?;
    config.data_dir = data_dir;
    if let Some(realm) = &flags.realm {
        config.realm =
            Authority::parse(realm).map_err(|e| invalid(format!("--realm {realm}: {e}")))?;
    }
    if let Some(socket) = &flags.client_socket {
        config.client_socket.clone_from(socket);
    }
    if flags.client_tcp.is_some() {
        config.client_tcp = flags.client_tcp;
    }
    if flags.client_ws.is_some() {
        config.client_ws = flags.client_ws;
    }
    if flags.nameserver.is_some() {
        config.nameserver = flags.nameserver;
    }
    if !flags.namespaces.is_empty() {
        config.namespaces.clear();
        for entry in &flags.namespaces {
            let (uid, ns) = namespace_entry(entry)?;
            config.namespaces.entry(uid).or_default().extend(ns);
        }
    }
    config.peer.listen = flags.peer_listen.or(config.peer.listen);
    config.peer.quic = flags.peer_quic.or(config.peer.quic);
    if flags.tls != TlsFiles::default() {
        let tls = config.tls.get_or_insert_default();
        for (flag, file) in [
            (&flags.tls.cert, &mut tls.cert),
            (&flags.tls.key, &mut tls.key),
            (&flags.tls.trust, &mut tls.trust),
        ] {
            if flag.is_some() {
                file.clone_from(flag);
            }
        }
    }
    if flags.signing_key.is_some() {
        config.signing_key.clone_from(&flags.signing_key);
    }
    Ok(config)
}

fn authority(key: &str, text: &str) -> io::Result<Authority> {
    Authority::parse(text).map_err(|e| invalid(format!("{key}: {text:?}: {e}")))
}

fn parse_uid(text: &str) -> Result<u32, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not a uid (a decimal number)"))
}

fn parse_namespaces<'a>(list: impl Iterator<Item = &'a str>) -> Result<Vec<Namespace>, String> {
    list.map(|ns| Namespace::parse(ns).map_err(|e| format!("{ns:?}: {e}")))
        .collect()
}

fn public_key(text: &str) -> Result<[u8; 32], String> {
    let bytes = base64::decode(text).map_err(|_| format!("{text:?} is not standard base64"))?;
    bytes
        .as_slice()
        .try_into()
        .map_err(|_| format!("a key is 32 bytes, not {}", bytes.len()))
}

/// Parses one `--namespaces` entry, `UID=NS[,NS…]`: the same table the file's `[namespaces]`
/// fills.
pub fn namespace_entry(entry: &str) -> io::Result<(u32, Vec<Namespace>)> {
    let err = |e: String| invalid(format!("--namespaces {entry}: {e}"));
    let (uid, list) = entry
        .split_once('=')
        .ok_or_else(|| err("want UID=NS[,NS…]".into()))?;
    Ok((
        parse_uid(uid).map_err(err)?,
        parse_namespaces(list.split(',')).map_err(err)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::airc::passport::book::PassportConfig;

    const KEY: &str = "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=";

    fn base() -> ServeConfig {
        ServeConfig::local(Path::new("/tmp/weft-config-test"), "me").unwrap()
    }

    fn applied(text: &str) -> io::Result<ServeConfig> {
        let mut config = base();
        FileConfig::parse(text)?.apply(&mut config)?;
        Ok(config)
    }

    #[test]
    fn an_empty_file_changes_nothing() {
        let config = applied("").unwrap();
        let before = base();
        assert_eq!(config.realm, before.realm);
        assert_eq!(config.namespaces, before.namespaces);
        assert_eq!(config.links, before.links);
        assert_eq!(config.policy, before.policy);
    }

    #[test]
    fn client_ws_as_a_table_carries_the_browser_origins_allowed() {
        let config = applied(
            r#"
[client_ws]
listen = "127.0.0.1:2474"
origins = ["https://app.example"]
"#,
        )
        .unwrap();
        assert_eq!(config.client_ws, Some("127.0.0.1:2474".parse().unwrap()));
        assert_eq!(config.client_ws_origins, ["https://app.example"]);
        let plain = applied(r#"client_ws = "127.0.0.1:2474""#).unwrap();
        assert!(plain.client_ws_origins.is_empty(), "no origin by default");
        assert!(
            applied("[client_ws]\nlisten = \"127.0.0.1:1\"\norigin = [\"x\"]\n").is_err(),
            "an unknown key in the table is refused"
        );
    }

    #[test]
    fn every_option_reaches_the_serve_config() {
        let config = applied(&format!(
            r#"
realm = "example.com"
data_dir = "/srv/airc"
client_socket = "/run/airc.sock"
client_tcp = "127.0.0.1:2473"
client_ws = "127.0.0.1:2474"
trusted_unsigned = ["lab.example.net"]
administrators = [1001, 1002]
accept_offers = false
auto_accept = ["alice/desk"]
policy_default_allow = false
peer_listen = "0.0.0.0:2472"
peer_quic = "0.0.0.0:2472"
signing_key = "/etc/weft/realm.key"

[namespaces]
1000 = ["alice", "ops"]
1001 = ["bob"]

[known_keys]
"example.org" = ["{KEY}"]

[[policy]]
from = "//example.com/*"
to = "*"
allow = true
note = "ours may write anywhere"

[[policy]]
links = true

[tls]
cert = "/etc/weft/cert.pem"
key = "/etc/weft/key.pem"
trust = "/etc/weft/ca.pem"

[peers."example.org"]
address = "192.0.2.7:2472"
transport = "quic"
name = "airc.example.org"

[dns]
nameserver = "127.0.0.1:5353"
"#
        ))
        .unwrap();
        assert_eq!(config.realm, Authority::parse("example.com").unwrap());
        assert_eq!(config.data_dir, Path::new("/srv/airc"));
        assert_eq!(config.client_socket, Path::new("/run/airc.sock"));
        assert_eq!(config.client_tcp, Some("127.0.0.1:2473".parse().unwrap()));
        assert_eq!(config.client_ws, Some("127.0.0.1:2474".parse().unwrap()));
        assert_eq!(
            config.namespaces,
            BTreeMap::from([
                (
                    1000,
                    vec![
                        Namespace::parse("alice").unwrap(),
                        Namespace::parse("ops").unwrap()
                    ]
                ),
                (1001, vec![Namespace::parse("bob").unwrap()]),
            ])
        );
        let key: [u8; 32] = base64::decode(KEY).unwrap().try_into().unwrap();
        assert_eq!(
            config.known_keys,
            BTreeMap::from([(Authority::parse("example.org").unwrap(), vec![key])])
        );
        assert_eq!(
            config.trusted_unsigned,
            [Authority::parse("lab.example.net").unwrap()]
        );
        assert_eq!(config.administrators, [1001, 1002]);
        let rules = serde_json::json!([
            {"from": "//example.com/*", "to": "*", "allow": true, "note": "ours may write anywhere"},
            {"links": true}
        ]);
        assert_eq!(
            config.policy,
            Policy::from_value(&rules)
                .unwrap()
                .with_default_allow(false)
        );
        assert!(!config.links.accept_offers);
        assert_eq!(
            config.links.auto_accept,
            [Pattern::parse_in_realm("alice/desk", &config.realm).unwrap()]
        );
        assert_eq!(config.nameserver, Some("127.0.0.1:5353".parse().unwrap()));
        assert_eq!(
            config.tls,
            Some(TlsFiles {
                cert: Some("/etc/weft/cert.pem".into()),
                key: Some("/etc/weft/key.pem".into()),
                trust: Some("/etc/weft/ca.pem".into()),
            })
        );
        assert_eq!(config.peer.listen, Some("0.0.0.0:2472".parse().unwrap()));
        assert_eq!(config.peer.quic, Some("0.0.0.0:2472".parse().unwrap()));
        assert_eq!(
            config.signing_key.as_deref(),
            Some(Path::new("/etc/weft/realm.key"))
        );
        assert_eq!(
            config.peer.statics,
            BTreeMap::from([(
                Authority::parse("example.org").unwrap(),
                StaticPeer {
                    address: "192.0.2.7:2472".parse().unwrap(),
                    transport: super::super::peer::Transport::Quic,
                    name: Some("airc.example.org".into()),
                }
            )])
        );
    }

    #[test]
    fn an_unknown_key_is_refused_naming_it() {
        for (text, key) in [
            ("realmm = \"x\"", "realmm"),
            ("admins = [0]", "admins"),
            ("[tls]\ncert = \"a\"\nkey = \"b\"\nchain = \"c\"", "chain"),
            (
                "[peers.\"b.example\"]\naddress = \"127.0.0.1:1\"\nport = 1",
                "port",
            ),
        ] {
            let err = FileConfig::parse(text).unwrap_err();
            assert!(err.to_string().contains(key), "{text}: {err}");
        }
        let err =
            applied("[[policy]]\nfrom = \"*\"\nto = \"*\"\nallow = true\nwhen = 1").unwrap_err();
        assert!(err.to_string().contains("when"), "{err}");
    }

    #[test]
    fn malformed_values_are_refused_naming_where_they_are() {
        for (text, needle) in [
            ("realm = \"bad realm\"", "realm"),
            ("[namespaces]\nroot = [\"a\"]", "namespaces"),
            ("[namespaces]\n1000 = [\"a b\"]", "namespaces.1000"),
            ("[known_keys]\n\"example.org\" = [\"AAAA\"]", "32 bytes"),
            ("[known_keys]\n\"example.org\" = [\"!\"]", "base64"),
            ("trusted_unsigned = [\"\"]", "trusted_unsigned"),
            ("auto_accept = [\"//other.example/x\"]", "auto_accept"),
            ("auto_accept = [\"a//b\"]", "auto_accept"),
            ("[[policy]]\nfrom = \"*\"\nto = \"*\"", "policy"),
            ("client_tcp = \"nowhere\"", "client_tcp"),
            ("accept_offers = \"yes\"", "accept_offers"),
            ("administrators = [\"root\"]", "administrators"),
            ("administrators = [-1]", "administrators"),
            ("[peers.\"b example\"]\naddress = \"127.0.0.1:1\"", "peers"),
            (
                "[peers.\"b.example\"]\naddress = \"127.0.0.1:1\"\ntransport = \"udp\"",
                "transport",
            ),
        ] {
            let err = applied(text).unwrap_err();
            assert!(err.to_string().contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn flags_override_the_file_and_the_file_overrides_the_defaults() {
        let file = FileConfig::parse(
            r#"
realm = "file.example"
data_dir = "/srv/file"
client_tcp = "127.0.0.1:1"
[namespaces]
5 = ["five"]
"#,
        )
        .unwrap();
        let from_file = serve_config(&file, &Flags::default(), "me").unwrap();
        assert_eq!(from_file.realm, Authority::parse("file.example").unwrap());
        assert_eq!(from_file.data_dir, Path::new("/srv/file"));
        assert_eq!(from_file.client_socket, Path::new("/srv/file/airc.sock"));
        assert_eq!(from_file.client_tcp, Some("127.0.0.1:1".parse().unwrap()));
        assert_eq!(from_file.namespaces.keys().collect::<Vec<_>>(), [&5]);

        let flags = Flags {
            realm: Some("flag.example".into()),
            data_dir: Some("/srv/flag".into()),
            client_socket: Some("/run/flag.sock".into()),
            client_tcp: Some("127.0.0.1:2".parse().unwrap()),
            client_ws: Some("127.0.0.1:4".parse().unwrap()),
            namespaces: vec!["6=six".into()],
            nameserver: Some("127.0.0.1:53".parse().unwrap()),
            peer_listen: Some("127.0.0.1:3".parse().unwrap()),
            tls: TlsFiles {
                trust: Some("/flag/ca.pem".into()),
                ..TlsFiles::default()
            },
            ..Flags::default()
        };
        let over = serve_config(&file, &flags, "me").unwrap();
        assert_eq!(over.realm, Authority::parse("flag.example").unwrap());
        assert_eq!(over.data_dir, Path::new("/srv/flag"));
        assert_eq!(over.client_socket, Path::new("/run/flag.sock"));
        assert_eq!(over.client_tcp, Some("127.0.0.1:2".parse().unwrap()));
        assert_eq!(over.client_ws, Some("127.0.0.1:4".parse().unwrap()));
        assert_eq!(over.nameserver, Some("127.0.0.1:53".parse().unwrap()));
        assert_eq!(
            over.namespaces,
            BTreeMap::from([(6, vec![Namespace::parse("six").unwrap()])])
        );

        let defaults = serve_config(&FileConfig::default(), &Flags::default(), "me").unwrap();
        assert_eq!(defaults.realm, Authority::parse("localhost").unwrap());
        assert_eq!(defaults.data_dir, Path::new(DEFAULT_DATA_DIR));
        assert_eq!(defaults.client_tcp, None);
    }

    #[test]
    fn the_passports_section_sets_the_issuance_mode_and_web_base() {
        assert_eq!(base().passports, PassportConfig::default());
        for (word, mode) in [
            ("agents", Issuance::Agents),
            ("owner-only", Issuance::OwnerOnly),
            ("off", Issuance::Off),
        ] {
            let config = applied(&format!(
                "[passports]\nmode = \"{word}\"\nweb_base = \"https://example.com/join\""
            ))
            .unwrap();
            assert_eq!(
                config.passports,
                PassportConfig {
                    issuance: mode,
                    web_base: Some("https://example.com/join".into()),
                }
            );
        }
        let only_base = applied("[passports]\nweb_base = \"http://127.0.0.1:8080/\"").unwrap();
        assert_eq!(only_base.passports.issuance, Issuance::Agents);
        assert_eq!(
            only_base.passports.web_base.as_deref(),
            Some("http://127.0.0.1:8080/")
        );
    }

    #[test]
    fn a_bad_passport_mode_or_web_base_is_refused_naming_it() {
        let long = format!("https://example.com/{}", "a".repeat(MAX_WEB_BASE_BYTES));
        for (text, needle) in [
            ("[passports]\nmode = \"everyone\"", "passports.mode"),
            ("[passports]\nmode = \"owner_only\"", "owner-only"),
            ("[passports]\nmode = 1", "mode"),
            ("[passports]\nweb_base = \"example.com\"", "https://"),
            ("[passports]\nweb_base = \"ftp://example.com\"", "web_base"),
            ("[passports]\nweb_base = \"https://\"", "no host"),
            ("[passports]\nweb_base = \"https://e.com/#x\"", "fragment"),
            (
                "[passports]\nweb_base = \"https://e.com/a b\"",
                "whitespace",
            ),
            (
                &format!("[passports]\nweb_base = \"{long}\""),
                "longer than",
            ),
            ("[passports]\nissuance = \"off\"", "issuance"),
        ] {
            let err = applied(text).unwrap_err();
            assert!(err.to_string().contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn a_namespaces_flag_entry_parses_uid_and_list() {
        assert_eq!(
            namespace_entry("1000=alice,ops").unwrap(),
            (
                1000,
                vec![
                    Namespace::parse("alice").unwrap(),
                    Namespace::parse("ops").unwrap()
                ]
            )
        );
        for bad in ["1000", "x=alice", "1000=a b"] {
            assert!(namespace_entry(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_file_larger_than_the_bound_is_refused_before_it_is_read() {
        let path = std::env::temp_dir().join(format!("weft-config-big-{}", std::process::id()));
        std::fs::write(&path, vec![b'#'; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        let err = FileConfig::load(&path).unwrap_err();
        let _ = std::fs::remove_file(&path);
        assert!(err.to_string().contains("more than"), "{err}");
    }
}
