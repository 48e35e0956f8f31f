//! The transport ladder (meshstr §4.1): the DIDComm bindings' names, and the ranking both peers
//! compute for data transport so that both pick the same rung.
//!
//! Both peers rank the schemes their descriptors share by the sum of the two advertised
//! preference values, low first; equal sums rank by scheme name, ascending bytewise. Where one
//! descriptor lists a scheme more than once its lowest preference counts (docs/decisions.md).
//! A peer is unreachable only when every shared rung has failed.

use alloc::string::String;
use alloc::vec::Vec;

/// iroh ALPN of the DIDComm binding.
pub const IROH_ALPN: &str = "meshstr/didcomm/1";
/// libp2p protocol id of the DIDComm binding.
pub const LIBP2P_PROTOCOL: &str = "/meshstr/didcomm/1.0.0";
/// HTTPS binding path (`POST /didcomm`).
pub const HTTPS_PATH: &str = "/didcomm";
/// Gift wrap kind for live control messages, the default.
pub const GIFT_WRAP_LIVE: u16 = 21059;
/// Gift wrap kind when store-and-forward is required.
pub const GIFT_WRAP_STORED: u16 = 1059;
/// The gossipsub topic descriptors are announced on (§3).
pub const ANNOUNCE_TOPIC: &str = "/meshstr/announce/1";

/// One rung: a shared scheme and the sum of the two preferences.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rung {
    /// The scheme.
    pub scheme: String,
    /// Our preference plus theirs.
    pub sum: u64,
}

fn lowest(endpoints: &[(String, u32)], scheme: &str) -> Option<u32> {
    endpoints
        .iter()
        .filter(|(s, _)| s == scheme)
        .map(|&(_, p)| p)
        .min()
}

/// The ladder of the schemes both descriptors declare, best first. The result is the same
/// whichever side computes it.
pub fn ladder(ours: &[(String, u32)], theirs: &[(String, u32)]) -> Vec<Rung> {
    let mut schemes: Vec<&str> = ours.iter().map(|(s, _)| s.as_str()).collect();
    schemes.sort_unstable();
    schemes.dedup();
    let mut out: Vec<Rung> = schemes
        .into_iter()
        .filter_map(|s| {
            let a = lowest(ours, s)?;
            let b = lowest(theirs, s)?;
            Some(Rung {
                scheme: s.into(),
                sum: u64::from(a) + u64::from(b),
            })
        })
        .collect();
    out.sort_by(|x, y| {
        x.sum
            .cmp(&y.sum)
            .then_with(|| x.scheme.as_bytes().cmp(y.scheme.as_bytes()))
    });
    out
}

/// Whether a peer may be reported unreachable: only once every shared rung has failed.
pub fn unreachable(ladder: &[Rung], failed: &[&str]) -> bool {
    ladder.iter().all(|r| failed.contains(&r.scheme.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn eps(v: &[(&str, u32)]) -> Vec<(String, u32)> {
        v.iter().map(|&(s, p)| (String::from(s), p)).collect()
    }

    #[test]
    fn binding_names() {
        assert_eq!(IROH_ALPN, "meshstr/didcomm/1");
        assert_eq!(LIBP2P_PROTOCOL, "/meshstr/didcomm/1.0.0");
        assert_eq!(HTTPS_PATH, "/didcomm");
        assert_eq!((GIFT_WRAP_LIVE, GIFT_WRAP_STORED), (21059, 1059));
        assert_eq!(ANNOUNCE_TOPIC, "/meshstr/announce/1");
    }

    #[test]
    fn ranks_by_sum_then_scheme_bytes_and_agrees_both_ways() {
        let a = eps(&[("iroh", 10), ("libp2p", 20), ("wss", 40), ("https", 5)]);
        let b = eps(&[("wss", 0), ("libp2p", 10), ("iroh", 20), ("quic", 1)]);
        let l = ladder(&a, &b);
        let names: Vec<_> = l.iter().map(|r| (r.scheme.as_str(), r.sum)).collect();
        // iroh 30, libp2p 30 (tie: "iroh" < "libp2p" bytewise), wss 40; https and quic unshared.
        assert_eq!(names, vec![("iroh", 30), ("libp2p", 30), ("wss", 40)]);
        assert_eq!(ladder(&b, &a), l);
    }

    #[test]
    fn ties_break_bytewise_not_by_locale() {
        let a = eps(&[("Zed", 1), ("abc", 1), ("ab", 1)]);
        let l = ladder(&a, &a);
        let names: Vec<_> = l.iter().map(|r| r.scheme.as_str()).collect();
        assert_eq!(names, vec!["Zed", "ab", "abc"]);
    }

    #[test]
    fn a_repeated_scheme_counts_at_its_lowest_preference() {
        let a = eps(&[("wss", 40), ("wss", 5)]);
        let b = eps(&[("wss", 1)]);
        assert_eq!(
            ladder(&a, &b),
            vec![Rung {
                scheme: "wss".into(),
                sum: 6
            }]
        );
    }

    #[test]
    fn unreachable_only_when_every_shared_rung_failed() {
        let l = ladder(
            &eps(&[("iroh", 1), ("wss", 2)]),
            &eps(&[("iroh", 1), ("wss", 2)]),
        );
        assert!(!unreachable(&l, &["iroh"]));
        assert!(unreachable(&l, &["wss", "iroh"]));
    }
}
