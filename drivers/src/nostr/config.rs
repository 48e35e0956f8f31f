//! `weft nostr serve --config FILE`: nostream's `settings.yaml`, read for the keys that have a
//! meaning here, so an operator's file carries over. Every other key is left alone (nostream has
//! payments, workers and more that weft does not have); a key that is read must have its type.
//!
//! | nostream key | weft |
//! | --- | --- |
//! | `info.relay_url` | [`ServeOptions::relay_url`] (NIP-42/NIP-62 `relay` tags) |
//! | `info.name`, `info.description`, `info.contact` | the NIP-11 document's fields |
//! | `info.pubkey` | NIP-11 `pubkey`, when it is 64 hex digits (nostream ships a placeholder) |
//! | `network.maxPayloadSize` | [`Limits::max_message_bytes`] (a larger frame closes 1009) |
//! | `limits.client.subscription.maxSubscriptions` | [`Limits::max_subscriptions`] |
//! | `limits.client.subscription.maxFilters` | [`Limits::max_filters`] |
//! | `limits.client.subscription.maxFilterValues` | [`Limits::max_filter_values`] |
//! | `limits.client.subscription.maxSubscriptionIdLength` | [`Limits::max_subscription_id_chars`], at most NIP-01's 64 |
//! | `limits.client.subscription.maxLimit` | [`Limits::max_limit`] |
//! | `limits.client.negentropy.maxItems`, `limits.client.negentropy.frameBytes` | [`Limits::max_neg_items`] (a `NEG-OPEN` over more is answered `blocked:`, NIP-77's "too large"), [`Limits::neg_frame_bytes`] (0, or at least 4 096) |
//! | `limits.event.createdAt.maxPositiveDelta` | [`Limits::max_future_secs`] (0: no bound, as in nostream) |
//! | `limits.message.rateLimits` | [`Limits::messages`]: of the `{period, rate}` entries, the slowest per second, as a bucket of `rate` refilling at `rate / period` (at least 1 a second) |
//! | `info.self`, `peering.*`, `limits.peer.*`, `admin.token` | [`ServeOptions::peering`] (the table in [`super::peering`]) |
//! | `peering.allowPrivateNetworks`, `peering.caFile`, `peering.sync.negFrameBytes` | [`ServeOptions::sync`] ([`super::sync::apply`]) |

use serde_json::Value;
use weft_proto::core::BucketConfig;
use weft_proto::nostr::limits::Limits;
use weft_proto::nostr::message::MAX_SUBSCRIPTION_ID_CHARS;

use super::serve::ServeOptions;

/// Applies the keys of nostream's `settings.yaml` text that weft reads to `options`. Fails with
/// the key and what is wrong with it when the text is no YAML map or a key read has the wrong
/// type.
pub fn apply_settings(text: &str, options: &mut ServeOptions) -> Result<(), String> {
    let doc: Value = serde_yaml::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    if !doc.is_object() {
        return Err("the settings are not a YAML map".into());
    }
    let settings = Settings(&doc);
    let at = |path: &str| settings.at(path);
    let text_at = |path: &str| -> Result<Option<String>, String> {
        at(path)
            .map(|v| {
                v.as_str()
                    .map(String::from)
                    .ok_or_else(|| format!("{path}: not a string"))
            })
            .transpose()
    };
    let number_at = |path: &str| settings.number_at(path);

    if let Some(url) = text_at("info.relay_url")? {
        options.relay_url = Some(url);
    }
    options.info.name = text_at("info.name")?.or(options.info.name.take());
    options.info.description = text_at("info.description")?.or(options.info.description.take());
    options.info.contact = text_at("info.contact")?.or(options.info.contact.take());
    if let Some(pubkey) = text_at("info.pubkey")?
        && pubkey.len() == 64
        && pubkey.bytes().all(|b| b.is_ascii_hexdigit())
    {
        options.info.pubkey = Some(pubkey.to_ascii_lowercase());
    }

    super::peering::apply(&doc, &mut options.peering)?;
    super::sync::apply(&doc, &mut options.sync)?;
    let l: &mut Limits = &mut options.limits;
    if let Some(n) = number_at("network.maxPayloadSize")? {
        l.max_message_bytes = size(n);
    }
    let sub = "limits.client.subscription";
    settings.subscription_counts(sub, l)?;
    if let Some(n) = number_at(&format!("{sub}.maxLimit"))? {
        l.max_limit = n;
    }
    settings.negentropy("limits.client.negentropy", l)?;
    if let Some(n) = number_at("limits.event.createdAt.maxPositiveDelta")? {
        l.max_future_secs = (n > 0).then_some(n);
    }
    if let Some(limits) = at("limits.message.rateLimits") {
        let entries = limits
            .as_array()
            .ok_or("limits.message.rateLimits: not a list")?;
        let mut slowest: Option<BucketConfig> = None;
        for (i, entry) in entries.iter().enumerate() {
            let field = |name: &str| {
                entry
                    .get(name)
                    .and_then(Value::as_u64)
                    .filter(|&n| n > 0)
                    .ok_or_else(|| {
                        format!("limits.message.rateLimits[{i}].{name}: not a positive integer")
                    })
            };
            let (period_ms, rate) = (field("period")?, field("rate")?);
            let per_second = (rate.saturating_mul(1_000) / period_ms).max(1);
            let bucket = BucketConfig::new(
                u32::try_from(rate).unwrap_or(u32::MAX),
                u32::try_from(per_second).unwrap_or(u32::MAX),
            );
            if slowest.is_none_or(|s| bucket.per_second < s.per_second) {
                slowest = Some(bucket);
            }
        }
        if let Some(bucket) = slowest {
            l.messages = bucket;
        }
    }
    Ok(())
}

/// A settings document read by dotted key path, as nostream's `settings.yaml` names its keys:
/// one reader for the relay's, peering's and the sync workers' keys.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings<'a>(pub(crate) &'a Value);

impl<'a> Settings<'a> {
    /// The value at `path` (`a.b.c`), absent or YAML `null` read as not set.
    pub(crate) fn at(self, path: &str) -> Option<&'a Value> {
        path.split('.')
            .try_fold(self.0, |v, key| v.get(key))
            .filter(|v| !v.is_null())
    }

    /// The non-negative integer at `path`; any other value is refused by name.
    pub(crate) fn number_at(self, path: &str) -> Result<Option<u64>, String> {
        self.at(path)
            .map(|v| {
                v.as_u64()
                    .ok_or_else(|| format!("{path}: not a non-negative integer"))
            })
            .transpose()
    }

    /// The subscription counts a client's and a peer's limits share (`{prefix}.maxSubscriptions`,
    /// `.maxFilters`, `.maxFilterValues`, `.maxSubscriptionIdLength`, the last capped at NIP-01's
    /// id length), read into `limits`.
    pub(crate) fn subscription_counts(
        self,
        prefix: &str,
        limits: &mut Limits,
    ) -> Result<(), String> {
        if let Some(n) = self.number_at(&format!("{prefix}.maxSubscriptions"))? {
            limits.max_subscriptions = size(n);
        }
        if let Some(n) = self.number_at(&format!("{prefix}.maxFilters"))? {
            limits.max_filters = size(n);
        }
        if let Some(n) = self.number_at(&format!("{prefix}.maxFilterValues"))? {
            limits.max_filter_values = size(n);
        }
        if let Some(n) = self.number_at(&format!("{prefix}.maxSubscriptionIdLength"))? {
            limits.max_subscription_id_chars = size(n).min(MAX_SUBSCRIPTION_ID_CHARS);
        }
        Ok(())
    }
}

impl Settings<'_> {
    /// The NIP-77 bounds a client's and a peer's limits share (`{prefix}.maxItems`, at least 1:
    /// the most stored events one session reconciles over; `{prefix}.frameBytes`, 0 or at least
    /// 4 096: the largest negentropy message the relay writes), read into `limits`. weft-only
    /// keys: nostream's file has no NIP-77 section.
    pub(crate) fn negentropy(self, prefix: &str, limits: &mut Limits) -> Result<(), String> {
        if let Some(n) = self.number_at(&format!("{prefix}.maxItems"))? {
            if n == 0 {
                return Err(format!("{prefix}.maxItems: not a positive integer"));
            }
            limits.max_neg_items = size(n);
        }
        if let Some(n) = self.number_at(&format!("{prefix}.frameBytes"))? {
            if n != 0 && n < 4_096 {
                return Err(format!("{prefix}.frameBytes: not 0 or at least 4096"));
            }
            limits.neg_frame_bytes = n;
        }
        Ok(())
    }
}

/// A count from the settings as a `usize`, saturating on a platform too small for it.
pub(crate) fn size(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn options() -> ServeOptions {
        ServeOptions::new("127.0.0.1:7777".parse().unwrap(), PathBuf::from("x"))
    }

    /// The keys weft reads, in the shape of nostream's file, among keys it does not.
    const SETTINGS: &str = r#"
info:
  relay_url: wss://relay.example.org
  name: relay.example.org
  description: An operator's relay.
  pubkey: replace-with-your-pubkey-in-hex
  contact: mailto:ops@example.org
payments:
  enabled: false
network:
  maxPayloadSize: 131072
limits:
  event:
    createdAt:
      maxPositiveDelta: 600
      maxNegativeDelta: 0
  client:
    subscription:
      maxSubscriptions: 10
      maxFilters: 10
      maxFilterValues: 2500
      maxSubscriptionIdLength: 256
      maxLimit: 5000
      minPrefixLength: 4
  message:
    rateLimits:
      - description: 240 raw messages/min
        period: 60000
        rate: 240
      - period: 1000
        rate: 30
"#;

    #[test]
    fn nostream_keys_carry_over_and_others_are_left_alone() {
        let mut o = options();
        apply_settings(SETTINGS, &mut o).unwrap();
        assert_eq!(o.relay_url.as_deref(), Some("wss://relay.example.org"));
        assert_eq!(o.info.name.as_deref(), Some("relay.example.org"));
        assert_eq!(o.info.contact.as_deref(), Some("mailto:ops@example.org"));
        // nostream's placeholder is no key.
        assert_eq!(o.info.pubkey, None);
        let l = o.limits;
        assert_eq!(l.max_message_bytes, 131_072);
        assert_eq!(l.max_subscriptions, 10);
        assert_eq!(l.max_filters, 10);
        assert_eq!(l.max_filter_values, 2_500);
        // NIP-01 caps subscription ids at 64 characters, whatever the file says.
        assert_eq!(l.max_subscription_id_chars, MAX_SUBSCRIPTION_ID_CHARS);
        assert_eq!(l.max_limit, 5_000);
        assert_eq!(l.max_future_secs, Some(600));
        // 240 a minute is 4 a second: slower than 30 a second.
        assert_eq!(l.messages, BucketConfig::new(240, 4));
        // What the file does not name keeps weft's default.
        assert_eq!(l.default_limit, Limits::DEFAULT.default_limit);
    }

    #[test]
    fn nip77_bounds_are_read_for_clients_and_peers_and_bad_ones_refused() {
        let mut o = options();
        apply_settings(
            "limits:\n  client:\n    negentropy:\n      maxItems: 50\n      frameBytes: 4096\n  \
             peer:\n    negentropy:\n      maxItems: 8\n",
            &mut o,
        )
        .unwrap();
        assert_eq!(
            (o.limits.max_neg_items, o.limits.neg_frame_bytes),
            (50, 4_096)
        );
        assert_eq!(o.peering.limits.max_neg_items, 8);
        assert_eq!(
            o.peering.limits.neg_frame_bytes,
            Limits::PEER_DEFAULT.neg_frame_bytes
        );
        for (text, key) in [
            (
                "limits:\n  peer:\n    negentropy:\n      maxItems: 0\n",
                "peer.negentropy.maxItems",
            ),
            (
                "limits:\n  client:\n    negentropy:\n      frameBytes: 100\n",
                "frameBytes",
            ),
            (
                "limits:\n  client:\n    negentropy:\n      maxItems: many\n",
                "maxItems",
            ),
        ] {
            let e = apply_settings(text, &mut options()).unwrap_err();
            assert!(e.contains(key), "{e}");
        }
    }

    #[test]
    fn a_key_read_with_the_wrong_type_is_refused_by_name() {
        let mut o = options();
        let e = apply_settings(
            "limits:\n  client:\n    subscription:\n      maxFilters: ten\n",
            &mut o,
        )
        .unwrap_err();
        assert!(e.contains("limits.client.subscription.maxFilters"), "{e}");
        let e = apply_settings(
            "limits:\n  message:\n    rateLimits:\n      - period: 0\n        rate: 3\n",
            &mut o,
        )
        .unwrap_err();
        assert!(e.contains("rateLimits[0].period"), "{e}");
        assert!(apply_settings("- a list", &mut o).is_err());
        assert!(apply_settings("info: [unclosed", &mut o).is_err());
        // Nothing was applied from the refused files.
        assert_eq!(o.limits, Limits::DEFAULT);
    }

    #[test]
    fn a_zero_future_delta_lifts_the_bound_and_a_hex_pubkey_is_advertised() {
        let mut o = options();
        let key = "AB".repeat(32);
        let text = format!(
            "info:\n  pubkey: {key}\nlimits:\n  event:\n    createdAt:\n      maxPositiveDelta: 0\n"
        );
        apply_settings(&text, &mut o).unwrap();
        assert_eq!(o.limits.max_future_secs, None);
        assert_eq!(o.info.pubkey, Some("ab".repeat(32)));
    }
}
