//! weft's own machine-readable schema of meshstr (§10): `kinds.json`, `messages.json` and
//! `constants.json`, derived from the text and shipped in `proto/src/meshstr/schema/`, and the
//! protocol digest a weft node declares over them.
//!
//! The reference's three files were not handed over, so the digest the text prints
//! (`04cf011f…e563`) cannot be reproduced; weft declares the digest of its own files instead
//! ([`DIGEST_HEX`]), which means a weft node declines to peer with the reference implementation
//! (§10: different digests decline rather than half-speak) until the reference files are had and
//! these are replaced by them (docs/decisions.md). A test holds the files and the Rust constants
//! to each other, so neither can move alone.

use alloc::string::String;
use serde_json::Value;

use super::protocol_digest;
use crate::codec::hex;
use crate::crypto::CryptoProvider;

/// `kinds.json`, as shipped.
pub const KINDS_JSON: &str = include_str!("schema/kinds.json");
/// `messages.json`, as shipped.
pub const MESSAGES_JSON: &str = include_str!("schema/messages.json");
/// `constants.json`, as shipped.
pub const CONSTANTS_JSON: &str = include_str!("schema/constants.json");

/// The digest the text prints for `meshstr/0-draft` (§10), over files weft does not have.
pub const SPEC_DIGEST_HEX: &str =
    "04cf011f80b295a1f49d6c69e081b8158d603cfa5172163c4400e282fa53e563";

/// The digest of weft's own three files: what a weft node declares in its `protocol` tag.
pub const DIGEST_HEX: &str = "69b1e1fff8e1a6bf1a610271c228cd361ab895cd88c3fabebc26fd595a96ceba";

/// Parses one shipped file (they are checked by the tests, so a parse failure is a build bug,
/// answered with `Null` rather than a panic).
fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// The three shipped files, parsed: kinds, messages, constants.
pub fn files() -> (Value, Value, Value) {
    (
        parse(KINDS_JSON),
        parse(MESSAGES_JSON),
        parse(CONSTANTS_JSON),
    )
}

/// The protocol digest over the shipped files (§10): a pure function of their text.
pub fn digest(provider: &dyn CryptoProvider) -> [u8; 32] {
    let (k, m, c) = files();
    protocol_digest(provider, &k, &m, &c)
}

/// The `protocol` tag value pair weft declares: the name and the digest in lower-case hex.
pub fn declared(provider: &dyn CryptoProvider) -> (&'static str, String) {
    (super::events::PROTOCOL_NAME, hex::encode(&digest(provider)))
}

/// Splits a version line `name@digest` (§10's printed form) into its name and 32-byte digest.
pub fn parse_version(line: &str) -> Option<(&str, [u8; 32])> {
    let (name, d) = line.split_once('@')?;
    if name.is_empty() {
        return None;
    }
    Some((name, super::lower_hex::<32>(d)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::default_provider;
    use crate::meshstr::events::{self, KindClass, kind_class};
    use crate::meshstr::limits::{CEILINGS, Counter, Limit, OPENING_LIMIT_FRACTION, Tier};
    use crate::meshstr::{
        capacity, compute, grant, handover, hop, receipt, replication, report, strain, transport,
        trust, window,
    };
    use alloc::vec::Vec;

    fn u(v: &Value) -> u64 {
        v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
    }

    fn strs(v: &Value) -> Vec<&str> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect()
    }

    #[test]
    fn the_shipped_digest_is_recorded_and_the_version_line_parses() {
        let p = default_provider();
        assert_eq!(hex::encode(&digest(p)), DIGEST_HEX);
        assert_eq!(declared(p), ("meshstr/0-draft", String::from(DIGEST_HEX)));
        let printed = alloc::format!("meshstr/0-draft@{SPEC_DIGEST_HEX}");
        let (name, d) = parse_version(&printed).unwrap();
        assert_eq!(name, events::PROTOCOL_NAME);
        assert_eq!(hex::encode(&d), SPEC_DIGEST_HEX);
        assert_ne!(
            SPEC_DIGEST_HEX, DIGEST_HEX,
            "weft's files are not the reference's"
        );
        assert_eq!(parse_version("meshstr/0-draft@04CF"), None);
        assert_eq!(parse_version("@00"), None);
        // Any change to any file moves the digest; the files are each canonicalised first.
        let (k, m, mut c) = files();
        c["decay_idle_windows"] = Value::from(7);
        assert_ne!(protocol_digest(p, &k, &m, &c), digest(p));
        let (k, m, c) = files();
        let spaced: Value =
            serde_json::from_str(&serde_json::to_string_pretty(&k).unwrap()).unwrap();
        assert_eq!(protocol_digest(p, &spaced, &m, &c), digest(p));
    }

    #[test]
    fn kinds_json_agrees_with_the_validators() {
        let (k, _, _) = files();
        let kinds = k["kinds"].as_object().unwrap();
        let mut listed: Vec<u16> = kinds.keys().map(|n| n.parse().unwrap()).collect();
        listed.sort_unstable();
        let mut ours = events::KINDS.to_vec();
        ours.sort_unstable();
        assert_eq!(listed, ours);
        for (n, spec) in kinds {
            let kind: u16 = n.parse().unwrap();
            let class = match kind_class(kind) {
                KindClass::Replaceable => "replaceable",
                KindClass::Ephemeral => "ephemeral",
                KindClass::Addressable => "addressable",
                KindClass::Regular => "regular",
            };
            assert_eq!(spec["class"], class, "{kind}");
        }
        let ask = &kinds["30810"];
        let mut tags = strs(&ask["required"]);
        tags.extend(strs(&ask["optional"]));
        tags.sort_unstable();
        let mut ours = compute::ASK_TAGS.to_vec();
        ours.sort_unstable();
        assert_eq!(tags, ours);
        assert_eq!(
            u(&k["never_replicated"][0]),
            u64::from(replication::NIP46_KIND)
        );
        assert!(!replication::bulk_replicable(replication::GIFT_WRAP_KIND));
    }

    #[test]
    fn messages_json_agrees_with_the_protocol_constants() {
        let (_, m, _) = files();
        assert_eq!(m["piuri_base"], events::PIURI_BASE);
        let protocols: Vec<&str> = m["protocols"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut ours = events::PROTOCOLS.to_vec();
        ours.sort_unstable();
        assert_eq!(protocols, ours);
        assert_eq!(strs(&m["required"]), events::REQUIRED_PROTOCOLS.to_vec());
        let statuses = strs(&m["receipt_ack_status"]);
        for s in [
            receipt::AckStatus::Accepted,
            receipt::AckStatus::Divergent,
            receipt::AckStatus::Final,
        ] {
            assert!(statuses.contains(&s.as_str()));
        }
        assert_eq!(statuses.len(), 3);
        let causes = strs(&m["amend_cause"]);
        for c in [
            window::AmendCause::Remedy,
            window::AmendCause::Capacity,
            window::AmendCause::Operator,
            window::AmendCause::Disuse,
        ] {
            assert!(causes.contains(&c.as_str()));
        }
        let declines = strs(&m["decline"]);
        for d in [
            events::Decline::DigestMismatch,
            events::Decline::BadDescriptor,
            events::Decline::UnsupportedProtocol,
        ] {
            assert!(declines.contains(&d.code()));
        }
        assert!(declines.contains(&capacity::DECLINE_CODE));
        let t = &m["transport"];
        assert_eq!(t["iroh_alpn"], transport::IROH_ALPN);
        assert_eq!(t["libp2p"], transport::LIBP2P_PROTOCOL);
        assert_eq!(t["https_path"], transport::HTTPS_PATH);
        assert_eq!(
            u(&t["gift_wrap_live"]),
            u64::from(transport::GIFT_WRAP_LIVE)
        );
        assert_eq!(
            u(&t["gift_wrap_stored"]),
            u64::from(transport::GIFT_WRAP_STORED)
        );
        assert_eq!(t["announce_topic"], transport::ANNOUNCE_TOPIC);
        // The bodies weft builds have exactly the members listed.
        let b = &m["bodies"];
        let handover_members = strs(&b["sync/1.0/handover"]);
        assert_eq!(handover_members.len(), 11);
        let accept = compute::accept_body(
            &compute::Job {
                module: [0; 32],
                input: [0; 32],
            },
            &[0; 32],
        );
        let mut keys: Vec<&str> = accept
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, strs(&b["compute/1.0/accept"]));
        assert_eq!(strs(&b["budget/1.0/receipt"]).len(), 8);
    }

    #[test]
    fn constants_json_agrees_with_the_rust_constants() {
        let (_, _, c) = files();
        assert_eq!(c["protocol"], events::PROTOCOL_NAME);
        for l in Limit::ALL {
            assert_eq!(c["counter_of"][l.as_str()], l.counter().as_str());
            for (i, t) in Tier::ALL.into_iter().enumerate() {
                assert_eq!(u(&c["ceilings"][l.as_str()][i]), CEILINGS[l as usize][i]);
                assert_eq!(c["tiers"][i], t.as_str());
                assert_eq!(u(&c["tier_weight_milli"][t.as_str()]), t.weight_milli());
            }
            assert_eq!(
                strs(&c["structural_limits"]).contains(&l.as_str()),
                l.is_structural()
            );
        }
        let counters: Vec<&str> = Counter::ALL.iter().map(|x| x.as_str()).collect();
        assert_eq!(strs(&c["counters"]), counters);
        let pair = |v: &Value| (u(&v[0]), u(&v[1]));
        assert_eq!(pair(&c["opening_limit_fraction"]), OPENING_LIMIT_FRACTION);
        assert_eq!(
            u(&c["decay_idle_windows"]),
            u64::from(window::DECAY_IDLE_WINDOWS)
        );
        let cl = &c["class"];
        assert_eq!(u(&cl["s3_overrun_milli"]), window::S3_OVERRUN_MILLI);
        assert_eq!(u(&cl["s2_overrun_milli"]), window::S2_OVERRUN_MILLI);
        assert_eq!(u(&cl["s1_overrun_milli"]), window::S1_OVERRUN_MILLI);
        assert_eq!(u(&cl["divergence_milli"]), window::DIVERGENCE_MILLI);
        assert_eq!(
            u(&cl["dup_ratio_ceiling_milli"]),
            window::DUP_RATIO_CEILING_MILLI
        );
        assert_eq!(u(&c["s3_suspension_seconds"]), window::S3_SUSPENSION_SECS);
        let cap = &c["capacity"];
        for r in [
            capacity::Rung::RefusePeerings,
            capacity::Rung::NarrowScope,
            capacity::Rung::AmendDown,
            capacity::Rung::LeafBehaviour,
        ] {
            assert_eq!(u(&cap[r.as_str()]), r.threshold_hundredths(), "{r:?}");
        }
        assert_eq!(u(&cap["release"]), capacity::RELEASE_HUNDREDTHS);
        assert_eq!(
            pair(&cap["shed_floor_fraction"]),
            capacity::SHED_FLOOR_FRACTION
        );
        assert_eq!(
            pair(&cap["amend_down_fraction"]),
            capacity::AMEND_DOWN_FRACTION
        );
        assert_eq!(
            u(&c["max_clock_skew_seconds"]),
            receipt::MAX_CLOCK_SKEW_SECS
        );
        let (n, d) = pair(&c["close_grace_fraction"]);
        assert_eq!(receipt::grace_secs(3600), 3600 * n / d);
        let b = &c["blinding"];
        for (name, which) in [
            ("grant", grant::Blinding::Grant),
            ("job", grant::Blinding::Job),
        ] {
            assert_eq!(b[name]["salt"].as_str().unwrap().as_bytes(), which.salt());
            assert_eq!(b[name]["info"].as_str().unwrap().as_bytes(), which.info());
        }
        assert_eq!(
            b["ask"]["salt"].as_str().unwrap().as_bytes(),
            compute::ASK_D_SALT
        );
        assert_eq!(
            b["ask"]["info"].as_str().unwrap().as_bytes(),
            compute::ASK_D_INFO
        );
        assert_eq!(c["commitment"]["scheme"], grant::COMMITMENT_SCHEME);
        assert_eq!(
            u(&c["commitment"]["blinding_factor"]),
            grant::BLINDING_BYTES as u64
        );
        assert_eq!(c["hop"]["tag"], hop::HOP_TAG);
        assert_eq!(u(&c["hop"]["max_hops"]), hop::MAX_HOPS as u64);
        assert_eq!(u(&c["handover"]["max_links"]), handover::MAX_LINKS as u64);
        let desc = &c["descriptor"];
        assert_eq!(u(&desc["pow_bits"]), u64::from(events::DESCRIPTOR_POW_BITS));
        for class in [
            events::NodeClass::Leaf,
            events::NodeClass::Edge,
            events::NodeClass::Anchor,
        ] {
            assert_eq!(
                u(&desc["max_lifetime_seconds"][class.as_str()]),
                class.max_descriptor_lifetime_secs()
            );
        }
        assert_eq!(
            u(&c["heartbeat"]["anchor_max_interval_seconds"]),
            events::ANCHOR_HEARTBEAT_SECS
        );
        assert_eq!(strs(&c["verify_modes"]), events::VERIFY_MODES.to_vec());
        assert_eq!(strs(&c["completeness"]), events::COMPLETENESS.to_vec());
        assert_eq!(u(&c["compute"]["fuel_unit"]), compute::FUEL_UNIT);
        assert_eq!(
            u(&c["compute"]["max_runtimes"]),
            compute::MAX_RUNTIMES as u64
        );
        let s = &c["strain"];
        assert_eq!(
            u(&s["direction_worth_milli"]),
            strain::DIRECTION_WORTH_MILLI
        );
        assert_eq!(
            u(&s["reserve_cap_directions"]),
            strain::RESERVE_CAP_DIRECTIONS
        );
        assert_eq!(
            u(&s["flag_tree_share_milli"]),
            strain::FLAG_TREE_SHARE_MILLI
        );
        assert_eq!(
            u(&s["flag_tree_min_records"]),
            strain::FLAG_TREE_MIN_RECORDS
        );
        for (i, sev) in ["S1", "S2", "S3", "S4"].into_iter().enumerate() {
            assert_eq!(u(&c["trust_penalty_milli"][sev]), trust::PENALTY_MILLI[i]);
        }
        let bo = &c["bounds"];
        assert_eq!(
            u(&bo["max_repeated_tags"]),
            events::MAX_REPEATED_TAGS as u64
        );
        assert_eq!(
            u(&bo["max_tag_value_bytes"]),
            events::MAX_TAG_VALUE_BYTES as u64
        );
        assert_eq!(u(&bo["max_evidence"]), report::MAX_EVIDENCE as u64);
        assert_eq!(
            u(&bo["max_forwarded_for"]),
            receipt::MAX_FORWARDED_FOR as u64
        );
        assert_eq!(u(&bo["max_ref_bytes"]), receipt::MAX_REF_BYTES as u64);
        assert_eq!(u(&bo["max_tombstones"]), replication::MAX_TOMBSTONES as u64);
        assert_eq!(u(&bo["max_strain_peers"]), strain::MAX_STRAIN_PEERS as u64);
        assert_eq!(
            u(&bo["max_directions_per_peer"]),
            strain::MAX_DIRECTIONS_PER_PEER as u64
        );
    }
}
