//! Relay peering on `weft nostr serve` (spec 002), the driver's part: reading the settings keys,
//! resolving the relay's key from its environment, NIP-11's `self` and `peering` block, the
//! `GET /admin/peering` answer, and the two commands that read them (`weft nostr info`,
//! `weft nostr peering`). Every rule is in [`weft_proto::nostr::peering`]; this moves values.
//!
//! | settings key | weft |
//! | --- | --- |
//! | `info.self` | must equal the signing pubkey when readable ([`advertised_self`]) |
//! | `peering.enabled` | whether NIP-11 carries the `peering` block |
//! | `peering.contact`, `peering.endpoint`, `peering.terms` (strings), `peering.scopes` (a list) | the `peering` block, as written |
//! | `peering.peers` | the trust list ([`TrustList::from_value`]) |
//! | `limits.peer.subscription.{maxSubscriptions,maxFilters,maxFilterValues,maxSubscriptionIdLength,maxLimit}` | the peer's [`Limits`] |
//! | `limits.peer.negentropy.{maxItems,frameBytes}` | the peer's NIP-77 bounds (as `limits.client.negentropy`) |
//! | `limits.peer.message.rateLimits` | the peer's message bucket (as `limits.message.rateLimits`) |
//! | `limits.peer.request.rateLimits` | the per-peer request budget ([`RequestBudget`]) |
//! | `admin.token` | the bearer token `GET /admin/peering` asks for |
//!
//! The key comes from the environment only: `RELAY_PRIVATE_KEY` (hex) wins, else `SECRET`. It is
//! never read from or written to the settings file, never logged and never printed.

use std::fmt;
use std::io::{Read, Write};
use std::time::Duration;

use serde_json::{Map, Value, json};
use weft_proto::codec::bech32;
use weft_proto::core::BucketConfig;
use weft_proto::crypto::CryptoProvider;
use weft_proto::nostr::limits::Limits;
use weft_proto::nostr::peering::identity::IdentityError;
use weft_proto::nostr::peering::trust::MAX_PEERS;
use weft_proto::nostr::peering::{
    PeerRequestLimiter, PeerStatus, PeerTreatment, RelayKey, RequestBudget, StatusTable, TrustList,
    advertised_self,
};

use crate::ws::{HttpAnswer, Request};

/// The environment variable holding the relay's private key (64 hex digits).
pub const ENV_RELAY_PRIVATE_KEY: &str = "RELAY_PRIVATE_KEY";

/// The environment variable the relay's key is derived from when [`ENV_RELAY_PRIVATE_KEY`] is
/// unset.
pub const ENV_SECRET: &str = "SECRET";

/// The environment variable `weft nostr peering` reads the admin token from when no `--config`
/// names one.
pub const ENV_ADMIN_TOKEN: &str = "WEFT_ADMIN_TOKEN";

/// The path of the per-peer status rows.
pub const ADMIN_PEERING_PATH: &str = "/admin/peering";

/// The bearer token of the admin endpoints. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl AdminToken {
    /// A token; `None` when empty.
    pub fn new(token: &str) -> Option<Self> {
        (!token.is_empty()).then(|| Self(token.to_string()))
    }

    /// Whether `presented` is this token, compared in time independent of where they differ.
    pub fn matches(&self, presented: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), presented.as_bytes());
        let mut diff = u8::from(a.len() != b.len());
        for (i, x) in a.iter().enumerate() {
            diff |= x ^ b.get(i).copied().unwrap_or(0);
        }
        diff == 0
    }

    /// The token, to present it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

/// What the settings file says about peering.
#[derive(Clone, Debug)]
pub struct PeeringOptions {
    /// `peering.enabled`: whether NIP-11 advertises the `peering` block.
    pub enabled: bool,
    /// The block's fields (`contact`, `endpoint`, `scopes`, `terms`), as written.
    pub advertisement: Map<String, Value>,
    /// `peering.peers`.
    pub trust: TrustList,
    /// The bounds on a peer's connection.
    pub limits: Limits,
    /// The per-peer request budget.
    pub budget: RequestBudget,
    /// `info.self`, as written.
    pub info_self: Option<String>,
    /// `admin.token`: `GET /admin/peering` is refused 403 without one configured.
    pub admin_token: Option<AdminToken>,
}

impl Default for PeeringOptions {
    fn default() -> Self {
        Self {
            enabled: false,
            advertisement: Map::new(),
            trust: TrustList::empty(),
            limits: Limits::PEER_DEFAULT,
            budget: RequestBudget::default(),
            info_self: None,
            admin_token: None,
        }
    }
}

impl PeeringOptions {
    /// What relay sessions need to recognise peers.
    pub fn treatment(&self) -> PeerTreatment {
        PeerTreatment::new(&self.trust, self.limits)
    }

    /// The relay-wide request budget, one entry per configured peer at most.
    pub fn limiter(&self) -> PeerRequestLimiter {
        PeerRequestLimiter::new(self.budget.clone(), self.trust.len().clamp(1, MAX_PEERS))
    }
}

/// Reads nostream-style `{period, rate}` entries as one bucket: the slowest per second, `rate`
/// at once refilling `rate / period` (at least 1 a second). The same reading as
/// `limits.message.rateLimits`.
pub fn message_bucket(entries: &Value, key: &str) -> Result<Option<BucketConfig>, String> {
    let entries = entries
        .as_array()
        .ok_or_else(|| format!("{key}: not a list"))?;
    let mut slowest: Option<BucketConfig> = None;
    for (period_ms, rate) in period_rate_pairs(entries, key)? {
        let per_second = (rate.saturating_mul(1_000) / period_ms).max(1);
        let bucket = BucketConfig::new(
            u32::try_from(rate).unwrap_or(u32::MAX),
            u32::try_from(per_second).unwrap_or(u32::MAX),
        );
        if slowest.is_none_or(|s| bucket.per_second < s.per_second) {
            slowest = Some(bucket);
        }
    }
    Ok(slowest)
}

fn period_rate_pairs(entries: &[Value], key: &str) -> Result<Vec<(u64, u64)>, String> {
    entries
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let field = |name: &str| {
                entry
                    .get(name)
                    .and_then(Value::as_u64)
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("{key}[{i}].{name}: not a positive integer"))
            };
            Ok((field("period")?, field("rate")?))
        })
        .collect()
}

/// Applies the peering keys of a settings document to `options`.
pub fn apply(doc: &Value, options: &mut PeeringOptions) -> Result<(), String> {
    let settings = super::config::Settings(doc);
    let at = |path: &str| settings.at(path);
    let number_at = |path: &str| settings.number_at(path);
    if let Some(v) = at("info.self") {
        options.info_self = Some(v.as_str().ok_or("info.self: not a string")?.to_string());
    }
    if let Some(v) = at("peering.enabled") {
        options.enabled = v.as_bool().ok_or("peering.enabled: not true or false")?;
    }
    for field in ["contact", "endpoint", "terms"] {
        if let Some(v) = at(&format!("peering.{field}")) {
            if !v.is_string() {
                return Err(format!("peering.{field}: not a string"));
            }
            options.advertisement.insert(field.into(), v.clone());
        }
    }
    if let Some(v) = at("peering.scopes") {
        if !v.is_array() {
            return Err("peering.scopes: not a list".into());
        }
        options.advertisement.insert("scopes".into(), v.clone());
    }
    if let Some(v) = at("peering.peers") {
        options.trust = TrustList::from_value(v).map_err(|e| e.to_string())?;
    }
    let sub = "limits.peer.subscription";
    let l = &mut options.limits;
    settings.subscription_counts(sub, l)?;
    if let Some(n) = number_at(&format!("{sub}.maxLimit"))? {
        l.set_peer_max_limit(n);
    }
    settings.negentropy("limits.peer.negentropy", l)?;
    if let Some(v) = at("limits.peer.message.rateLimits")
        && let Some(bucket) = message_bucket(v, "limits.peer.message.rateLimits")?
    {
        l.messages = bucket;
    }
    if let Some(v) = at("limits.peer.request.rateLimits") {
        let key = "limits.peer.request.rateLimits";
        let list = v.as_array().ok_or_else(|| format!("{key}: not a list"))?;
        let pairs = period_rate_pairs(list, key)?;
        options.budget = RequestBudget::from_millis(&pairs).map_err(|e| e.to_string())?;
    }
    if let Some(v) = at("admin.token") {
        options.admin_token = AdminToken::new(v.as_str().ok_or("admin.token: not a string")?);
    }
    Ok(())
}

/// The relay's identity from its environment (`env` looks a variable up): `None` when neither
/// variable is set, which is refused when peering needs an identity (`peering.enabled`, or
/// `info.self` set).
pub fn resolve_key(
    provider: &dyn CryptoProvider,
    env: impl Fn(&str) -> Option<String>,
    relay_url: &str,
    peering: &PeeringOptions,
) -> Result<Option<(RelayKey, [u8; 32])>, IdentityError> {
    let private = env(ENV_RELAY_PRIVATE_KEY).filter(|k| !k.is_empty());
    let secret = env(ENV_SECRET).filter(|s| !s.is_empty());
    if private.is_none() && secret.is_none() {
        return if peering.enabled || peering.info_self.is_some() {
            Err(IdentityError::NoKeyMaterial)
        } else {
            Ok(None)
        };
    }
    let key = RelayKey::from_env(provider, private.as_deref(), secret.as_deref(), relay_url)?;
    let advertised = advertised_self(peering.info_self.as_deref(), &key.pubkey())?;
    Ok(Some((key, advertised)))
}

/// The NIP-11 fields peering adds: `self` (the advertised pubkey, hex) and, only when
/// `peering.enabled`, the `peering` block.
pub fn nip11_fields(advertised: Option<&[u8; 32]>, peering: &PeeringOptions) -> Map<String, Value> {
    let mut m = Map::new();
    if let Some(pk) = advertised {
        m.insert("self".into(), json!(weft_proto::codec::hex::encode(pk)));
    }
    if peering.enabled {
        m.insert(
            "peering".into(),
            Value::Object(peering.advertisement.clone()),
        );
    }
    m
}

/// The answer to an HTTP request for [`ADMIN_PEERING_PATH`], or `None` for another path:
/// 403 when no admin token is configured, 401 without the right `Authorization: Bearer`, 405
/// for another method, else 200 with the rows as a JSON list.
pub fn admin_answer(
    request: &Request,
    token: Option<&AdminToken>,
    status: &StatusTable,
) -> Option<HttpAnswer> {
    let path = request.path.split('?').next().unwrap_or("");
    if path != ADMIN_PEERING_PATH {
        return None;
    }
    let plain = |status: u16, body: &str, headers: Vec<(String, String)>| HttpAnswer {
        status,
        content_type: "text/plain".into(),
        headers,
        body: body.into(),
    };
    let Some(token) = token else {
        return Some(plain(
            403,
            "the admin endpoints are off: set admin.token\n",
            vec![],
        ));
    };
    let presented = request
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if !presented.is_some_and(|p| token.matches(p)) {
        return Some(plain(
            401,
            "unauthorized\n",
            vec![("www-authenticate".into(), "Bearer".into())],
        ));
    }
    if request.method != "GET" {
        return Some(plain(
            405,
            "GET only\n",
            vec![("allow".into(), "GET".into())],
        ));
    }
    Some(HttpAnswer {
        status: 200,
        content_type: "application/json".into(),
        headers: vec![("cache-control".into(), "no-store".into())],
        body: status.to_json().to_string(),
    })
}

/// What `weft nostr info` prints: the relay's self pubkey, hex and npub, and where the key came
/// from. Never the private key.
pub fn info_text(key: &RelayKey, advertised: &[u8; 32]) -> String {
    let source = match key.source() {
        weft_proto::nostr::peering::identity::KeySource::PrivateKey => ENV_RELAY_PRIVATE_KEY,
        weft_proto::nostr::peering::identity::KeySource::Secret => "SECRET and info.relay_url",
    };
    format!(
        "self: {}\nnpub: {}\nkey from: {source}\n",
        weft_proto::codec::hex::encode(advertised),
        bech32::encode_npub(advertised)
    )
}

/// Reads `GET /admin/peering` from a relay at `base` (`http://host:port` or `ws://host:port`)
/// with `token`: the rows. Plain HTTP over TCP with a timeout; no TLS.
pub fn fetch_status(base: &str, token: &str) -> Result<Vec<PeerStatus>, String> {
    let rest = base
        .strip_prefix("http://")
        .or_else(|| base.strip_prefix("ws://"))
        .ok_or("the relay address must be http:// or ws:// (TLS is not read here)")?;
    let host = rest.split('/').next().unwrap_or(rest);
    let addr = std::net::ToSocketAddrs::to_socket_addrs(host)
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))?;
    let timeout = Duration::from_secs(10);
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {ADMIN_PEERING_PATH} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    s.take(16 << 20)
        .read_to_end(&mut response)
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP response")?;
    let status = head.split(' ').nth(1).unwrap_or("");
    if status != "200" {
        return Err(format!("the relay answered {status}: {}", body.trim()));
    }
    let rows: Value = serde_json::from_str(body).map_err(|e| e.to_string())?;
    rows.as_array()
        .ok_or("not a list")?
        .iter()
        .map(|v| PeerStatus::from_json(v).ok_or_else(|| format!("a row does not read: {v}")))
        .collect()
}

/// The rows as the table `weft nostr peering` prints: the last column, `DETAIL`, says why a peer
/// is unusable or backing off (`-` when nothing is wrong).
pub fn status_table(rows: &[PeerStatus]) -> String {
    let mut out = format!(
        "{:<64}  {:<11}  {:<10}  {:>8}  {:>8}  {:>9}  {:>9}  {}  {}\n",
        "PUBKEY", "STATUS", "LAST SYNC", "LAG S", "MISSING", "REQUESTS", "EVENTS", "URL", "DETAIL"
    );
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |n| n.to_string());
    for r in rows {
        out.push_str(&format!(
            "{:<64}  {:<11}  {:<10}  {:>8}  {:>8}  {:>9}  {:>9}  {}  {}\n",
            weft_proto::codec::hex::encode(&r.pubkey),
            r.status.as_str(),
            opt(r.last_reconciliation.map(|t| t.as_secs())),
            opt(r.lag_secs),
            opt(r.missing),
            r.requests_served,
            r.events_served,
            r.relay_url,
            r.detail.as_deref().unwrap_or("-")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nostr::serve::{NostrRelay, RelayInfo, ServeInput, ServeOptions, session_config};
    use crate::ws::WsMachine;
    use std::path::PathBuf;
    use weft_proto::core::rand_core::SeedableRng;
    use weft_proto::core::{ConnId, Machine, Timestamp};
    use weft_proto::nostr::peering::SyncStatus;
    use weft_proto::nostr::relay::{Input, MemoryStore};

    const URL: &str = "wss://relay.example.com";

    fn doc(text: &str) -> Value {
        serde_yaml::from_str(text).unwrap()
    }

    fn request(path: &str, auth: Option<&str>) -> Request {
        let mut headers = vec![];
        if let Some(a) = auth {
            headers.push(("authorization".to_string(), a.to_string()));
        }
        Request {
            method: "GET".into(),
            path: path.into(),
            headers,
        }
    }

    #[test]
    fn peering_keys_are_read_and_the_trust_list_is_independent_of_the_advertisement() {
        let k = RelayKey::derive(crate::server_provider(), b"s", URL).unwrap();
        let mut o = PeeringOptions::default();
        apply(
            &doc(&format!(
                "info:\n  self: {}\npeering:\n  enabled: false\n  contact: c\n  peers:\n    - pubkey: {}\n      relayUrl: wss://p.example\n\
                 limits:\n  peer:\n    subscription:\n      maxFilters: 40\n      maxLimit: 0\n    message:\n      rateLimits:\n        - period: 1000\n          rate: 900\n    request:\n      rateLimits:\n        - period: 60000\n          rate: 10\n\
                 admin:\n  token: t0k\n",
                k.npub(),
                k.npub()
            )),
            &mut o,
        )
        .unwrap();
        assert!(!o.enabled);
        assert_eq!(o.info_self.as_deref(), Some(k.npub().as_str()));
        // Advertisement off, the peer is still trusted.
        assert!(o.treatment().is_peer(&k.pubkey()));
        assert_eq!(o.limits.max_filters, 40);
        assert_eq!(o.limits.stored_events_for(None), u64::MAX);
        assert_eq!(o.limits.messages, BucketConfig::new(900, 900));
        assert_eq!(
            o.budget,
            RequestBudget::from_millis(&[(60_000, 10)]).unwrap()
        );
        assert!(o.admin_token.as_ref().unwrap().matches("t0k"));
        // The token never shows in Debug.
        assert!(!format!("{o:?}").contains("t0k"));
        assert!(nip11_fields(None, &o).get("peering").is_none());
        o.enabled = true;
        assert_eq!(nip11_fields(None, &o)["peering"]["contact"], "c");
    }

    #[test]
    fn bad_peering_settings_are_refused_by_name() {
        for (text, needle) in [
            (
                "peering:\n  peers:\n    - pubkey: nope\n      relayUrl: wss://a\n",
                "peering.peers[0].pubkey",
            ),
            ("peering:\n  enabled: yes-please\n", "peering.enabled"),
            ("peering:\n  scopes: all\n", "peering.scopes"),
            (
                "limits:\n  peer:\n    request:\n      rateLimits:\n        - period: 1500\n          rate: 1\n",
                "rateLimits[0]",
            ),
            (
                "limits:\n  peer:\n    subscription:\n      maxFilters: -1\n",
                "maxFilters",
            ),
        ] {
            let e = apply(&doc(text), &mut PeeringOptions::default()).unwrap_err();
            assert!(e.contains(needle), "{e} / {needle}");
        }
    }

    #[test]
    fn the_key_comes_from_the_environment_and_info_self_must_match() {
        let p = crate::server_provider();
        fn env(pairs: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<String> {
            move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        }
        let mut o = PeeringOptions::default();
        assert!(resolve_key(p, env(vec![]), URL, &o).unwrap().is_none());
        let (key, advertised) = resolve_key(p, env(vec![("SECRET", "s".into())]), URL, &o)
            .unwrap()
            .unwrap();
        assert_eq!(
            key.pubkey(),
            RelayKey::derive(p, b"s", URL).unwrap().pubkey()
        );
        assert_eq!(advertised, key.pubkey());
        let private = "11".repeat(32);
        let both = vec![
            ("SECRET", "s".into()),
            ("RELAY_PRIVATE_KEY", private.clone()),
        ];
        let (key2, _) = resolve_key(p, env(both), URL, &o).unwrap().unwrap();
        assert_eq!(
            key2.pubkey(),
            RelayKey::from_private_key_hex(p, &private)
                .unwrap()
                .pubkey()
        );
        // info.self naming another key: refused; peering without key material: refused.
        o.info_self = Some(key2.pubkey_hex());
        assert!(matches!(
            resolve_key(p, env(vec![("SECRET", "s".into())]), URL, &o),
            Err(IdentityError::SelfMismatch { .. })
        ));
        o.info_self = None;
        o.enabled = true;
        assert_eq!(
            resolve_key(p, env(vec![]), URL, &o).unwrap_err(),
            IdentityError::NoKeyMaterial
        );
        // What `info` prints: the pubkey, the npub, never the secret.
        let text = info_text(&key2, &key2.pubkey());
        assert!(text.contains(&key2.pubkey_hex()) && text.contains(&key2.npub()));
        assert!(!text.contains(&private));
    }

    #[test]
    fn admin_rows_need_the_configured_token() {
        let table = StatusTable::default();
        let token = AdminToken::new("secret-token").unwrap();
        let status = |r: Option<HttpAnswer>| r.map(|a| a.status);
        assert_eq!(
            status(admin_answer(&request("/", None), Some(&token), &table)),
            None
        );
        assert_eq!(
            status(admin_answer(
                &request(ADMIN_PEERING_PATH, None),
                None,
                &table
            )),
            Some(403)
        );
        assert_eq!(
            status(admin_answer(
                &request(ADMIN_PEERING_PATH, Some("Bearer secret-token")),
                None,
                &table
            )),
            Some(403)
        );
        for bad in [
            None,
            Some("Bearer secret-toke"),
            Some("Bearer secret-tokenX"),
            Some("secret-token"),
            Some("Basic secret-token"),
        ] {
            assert_eq!(
                status(admin_answer(
                    &request(ADMIN_PEERING_PATH, bad),
                    Some(&token),
                    &table
                )),
                Some(401),
                "{bad:?}"
            );
        }
        let ok = admin_answer(
            &request("/admin/peering?x=1", Some("Bearer secret-token")),
            Some(&token),
            &table,
        )
        .unwrap();
        assert_eq!((ok.status, ok.body.as_str()), (200, "[]"));
    }

    #[test]
    fn the_relay_answers_budget_asks_relay_wide_and_counts_what_peers_were_served() {
        let p = crate::server_provider();
        let peer = RelayKey::derive(p, b"peer", "wss://peer.example").unwrap();
        let mut options = ServeOptions::new("127.0.0.1:7777".parse().unwrap(), PathBuf::from("x"));
        apply(
            &doc(&format!(
                "peering:\n  peers:\n    - pubkey: {}\n      relayUrl: wss://peer.example\n\
                 limits:\n  peer:\n    request:\n      rateLimits:\n        - period: 60000\n          rate: 3\n\
                 admin:\n  token: tok\n",
                peer.pubkey_hex()
            )),
            &mut options.peering,
        )
        .unwrap();
        let config = session_config(&options, options.listen);
        let url = config.relay_url.clone();
        let mut relay = NostrRelay::new(
            config,
            &RelayInfo::default(),
            MemoryStore::default(),
            chacha20::ChaCha20Rng::seed_from_u64(1),
        )
        .with_peering(&options.peering);
        let now = Timestamp::from_secs(1_790_000_000);
        let mut challenges = vec![];
        for n in [1, 2] {
            relay.handle(now, ServeInput::Opened(ConnId(n)));
            let out: Vec<_> = std::iter::from_fn(|| relay.poll()).collect();
            let crate::nostr::serve::ServeOutput::Text(_, text) = &out[0] else {
                panic!("{out:?}")
            };
            let v: Value = serde_json::from_str(text).unwrap();
            challenges.push(v[1].as_str().unwrap().to_string());
        }
        let frame = |n: u64, text: String| ServeInput::Session(ConnId(n), Input::Frame(text));
        for (n, ch) in [1u64, 2].into_iter().zip(&challenges) {
            let e = peer
                .sign_auth(
                    p,
                    &mut chacha20::ChaCha20Rng::seed_from_u64(n),
                    now,
                    &url,
                    ch,
                )
                .unwrap();
            relay.handle(now, frame(n, json!(["AUTH", e.to_value()]).to_string()));
        }
        let _: Vec<_> = std::iter::from_fn(|| relay.poll()).collect();
        for (i, n) in [1u64, 2, 1, 2].into_iter().enumerate() {
            relay.handle(now, frame(n, format!(r#"["REQ","s{i}",{{"limit":0}}]"#)));
        }
        let texts: Vec<String> = std::iter::from_fn(|| relay.poll())
            .filter_map(|o| match o {
                crate::nostr::serve::ServeOutput::Text(_, t) => Some(t),
                _ => None,
            })
            .collect();
        assert_eq!(
            texts.iter().filter(|t| t.starts_with("[\"EOSE\"")).count(),
            3,
            "{texts:?}"
        );
        assert!(
            texts
                .iter()
                .any(|t| t.starts_with("[\"CLOSED\",\"s3\",\"rate-limited:")),
            "{texts:?}"
        );
        let row = relay.status().get(&peer.pubkey()).unwrap();
        assert_eq!((row.requests_served, row.status), (3, SyncStatus::Idle));
        let answer = relay
            .http(&request(ADMIN_PEERING_PATH, Some("Bearer tok")))
            .unwrap();
        assert!(
            answer.body.contains("\"requestsServed\":3"),
            "{}",
            answer.body
        );
        assert_eq!(
            relay
                .http(&request(ADMIN_PEERING_PATH, None))
                .unwrap()
                .status,
            401
        );
    }
}
