//! The AIRC peer face on real sockets (§8.3, §8.4): where a realm server listens for other
//! realms, and how it reaches one.
//!
//! Everything §8.4 means (hello and welcome, their signatures, which links are authenticated,
//! what may be sent on them) is the [`Server`](weft_proto::airc::server::Server)'s. This module
//! only turns a realm into a transport endpoint: TLS over TCP by default, QUIC when a static
//! entry says so, plain TCP only when a static entry says so (tests and loopback; §8.3 requires
//! TLS in production). The certificate of the accepting server is verified for the resolved host
//! by the adapter ([`crate::tls`]) before the machine hears the link is open.
//!
//! Resolution here covers §8.1 steps 1 (an IP literal: dialled directly, on its port or 2472)
//! and 2 (a static entry, `[peers."realm"]` in the configuration). A DNS name is found through
//! DNS (SRV, A/AAAA), which this module does not do: without a static entry it resolves to
//! nothing and the dial fails, so the spool keeps the realm's messages.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;

use serde::Deserialize;
use weft_proto::airc::address::Authority;

use crate::host::{Endpoint, SecureDial};
use crate::tls::TlsClient;

/// How a peer link is carried.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// TLS over TCP (§8.3), the default.
    #[default]
    Tls,
    /// QUIC with the same certificates, one bidirectional stream per link.
    Quic,
    /// Plain TCP: no transport security at all; for tests and loopback only.
    Tcp,
}

/// A static authority entry (§8.1 step 2), `[peers."realm"]` in the configuration file.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StaticPeer {
    /// `address`: where the realm's peer face listens (TCP for TLS and plain TCP, UDP for QUIC).
    pub address: SocketAddr,
    /// `transport`: `"tls"` (default), `"quic"` or `"tcp"`.
    #[serde(default)]
    pub transport: Transport,
    /// `name`: the host name (or IP) its certificate must be valid for; default the realm's
    /// host, since that is the host the dialler resolved.
    pub name: Option<String>,
}

/// The peer face of a server: its listeners and its static entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerConfig {
    /// `--peer-listen`: the TCP address other realms dial; TLS when `[tls]` names a certificate
    /// and key, plain TCP otherwise.
    pub listen: Option<SocketAddr>,
    /// `--peer-quic`: the UDP address other realms dial over QUIC; needs a certificate and key.
    pub quic: Option<SocketAddr>,
    /// The static authority entries, by realm.
    pub statics: BTreeMap<Authority, StaticPeer>,
}

/// Turns realms into endpoints for the host: the static entries, and the trust store every TLS
/// and QUIC dial verifies against.
#[derive(Clone, Debug)]
pub struct Dialer {
    statics: BTreeMap<Authority, StaticPeer>,
    trust: TlsClient,
}

impl Dialer {
    /// A dialer over `statics`, verifying certificates against `trust`.
    pub fn new(statics: BTreeMap<Authority, StaticPeer>, trust: TlsClient) -> Self {
        Self { statics, trust }
    }

    /// The endpoint for a link to `realm` at `addr`, found by discovery (§8.1) under the host
    /// name (or IP literal) `host`: over the transport and certificate name of the realm's static
    /// entry when `addr` is that entry's, else TLS verified for `host` (§8.3).
    pub fn endpoint(&self, realm: &Authority, addr: SocketAddr, host: &str) -> Option<Endpoint> {
        let (transport, name) = match self.statics.get(realm).filter(|e| e.address == addr) {
            Some(entry) => (
                entry.transport,
                entry.name.as_deref().unwrap_or(realm.host()),
            ),
            None => (Transport::Tls, host),
        };
        self.dial(addr, name, transport).ok()
    }

    /// The endpoint for `addr` over `transport`, verifying the certificate for `name`: the one
    /// place a resolved peer address becomes something the host dials.
    pub fn dial(&self, addr: SocketAddr, name: &str, transport: Transport) -> io::Result<Endpoint> {
        Ok(match transport {
            Transport::Tcp => Endpoint::Tcp(addr),
            Transport::Tls => Endpoint::Tls(SecureDial::new(addr, name, self.trust.clone())?),
            Transport::Quic => Endpoint::Quic(SecureDial::new(addr, name, self.trust.clone())?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn realm(s: &str) -> Authority {
        Authority::parse(s).unwrap()
    }

    fn dialer() -> Dialer {
        let statics = BTreeMap::from([
            (
                realm("b.example"),
                StaticPeer {
                    address: "192.0.2.1:7000".parse().unwrap(),
                    transport: Transport::Quic,
                    name: None,
                },
            ),
            (
                realm("c.example"),
                StaticPeer {
                    address: "192.0.2.2:7000".parse().unwrap(),
                    transport: Transport::Tls,
                    name: Some("peer.c.example".into()),
                },
            ),
            (
                realm("d.example"),
                StaticPeer {
                    address: "192.0.2.3:7000".parse().unwrap(),
                    transport: Transport::Tcp,
                    name: None,
                },
            ),
        ]);
        Dialer::new(statics, TlsClient::webpki_roots())
    }

    fn secure(e: Option<Endpoint>) -> (&'static str, SocketAddr, String) {
        match e {
            Some(Endpoint::Tls(d)) => ("tls", d.addr, d.name.to_str().into_owned()),
            Some(Endpoint::Quic(d)) => ("quic", d.addr, d.name.to_str().into_owned()),
            other => panic!("a secure endpoint expected, got {other:?}"),
        }
    }

    /// The endpoint `d` makes for `realm` at `addr` found under `host`.
    fn at(d: &Dialer, realm_name: &str, addr: &str, host: &str) -> Option<Endpoint> {
        d.endpoint(&realm(realm_name), addr.parse().unwrap(), host)
    }

    #[test]
    fn a_static_entry_selects_its_transport_and_verifies_the_realm_host_by_default() {
        let d = dialer();
        assert_eq!(
            secure(at(&d, "b.example", "192.0.2.1:7000", "192.0.2.1")),
            (
                "quic",
                "192.0.2.1:7000".parse().unwrap(),
                "b.example".into()
            )
        );
        assert_eq!(
            secure(at(&d, "c.example", "192.0.2.2:7000", "192.0.2.2")),
            (
                "tls",
                "192.0.2.2:7000".parse().unwrap(),
                "peer.c.example".into()
            )
        );
        assert_eq!(
            at(&d, "d.example", "192.0.2.3:7000", "192.0.2.3"),
            Some(Endpoint::Tcp("192.0.2.3:7000".parse().unwrap()))
        );
    }

    #[test]
    fn an_address_found_through_dns_is_dialled_over_tls_verified_for_the_host_it_was_found_under() {
        let d = dialer();
        assert_eq!(
            secure(at(
                &d,
                "elsewhere.example",
                "192.0.2.9:2472",
                "airc.elsewhere.example"
            )),
            (
                "tls",
                "192.0.2.9:2472".parse().unwrap(),
                "airc.elsewhere.example".into()
            )
        );
        // A static entry's transport is for its own address only.
        assert_eq!(
            secure(at(&d, "d.example", "192.0.2.4:2472", "d.example")).0,
            "tls"
        );
    }

    #[test]
    fn an_ip_literal_realm_is_dialled_over_tls_for_its_ip() {
        let d = dialer();
        assert_eq!(
            secure(at(&d, "[::1]:7001", "[::1]:7001", "::1")),
            ("tls", "[::1]:7001".parse().unwrap(), "::1".into())
        );
    }
}
