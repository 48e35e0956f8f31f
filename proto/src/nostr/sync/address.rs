//! Spec 002 §6 step 1: "URL literals and resolved DNS addresses that are loopback, private, or
//! link-local are refused, including on redirects."
//!
//! The worker never resolves a name itself (that is I/O): the driver resolves the peer's host,
//! follows redirects, and runs every address it would connect to through [`check`] (or the URL
//! through [`check_url`] when its host is an address literal). One setting,
//! `peering.allowPrivateNetworks` (off by default), lets a LAN or a test reach such addresses.
//!
//! The refused classes go past the spec's three words to everything that is not a globally
//! routable unicast address: a relay that refused `10.0.0.1` but dialled `0.0.0.0`, `100.64.0.1`
//! (carrier-grade NAT), `fc00::/7` (IPv6 unique local) or `::ffff:127.0.0.1` (an IPv4-mapped
//! loopback) would be as open to server-side request forgery as one that refused nothing.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What kind of address an IP address is, as far as peering's address policy cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AddressClass {
    /// A globally routable unicast address: always allowed.
    Public,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// `169.254/16`, `fe80::/10`.
    LinkLocal,
    /// `0.0.0.0/8` ("this network"), `::`.
    Unspecified,
    /// IPv6 unique local addresses, `fc00::/7` (the IPv6 private range).
    UniqueLocal,
    /// RFC 6598 shared address space (carrier-grade NAT), `100.64/10`.
    SharedCgnat,
    /// Multicast: `224/4`, `ff00::/8`.
    Multicast,
    /// The limited broadcast address `255.255.255.255`.
    Broadcast,
    /// Documentation and benchmarking ranges (`192.0.2/24`, `198.51.100/24`, `203.0.113/24`,
    /// `198.18/15`, `2001:db8::/32`): never a real peer.
    Documentation,
    /// Everything else not globally routable: IETF protocol assignments `192.0.0/24`, the
    /// reserved `240/4`, IPv6 site-local `fec0::/10`, the discard prefix `100::/64`.
    Reserved,
}

impl AddressClass {
    /// Whether an address of this class is refused unless `allowPrivateNetworks` is set.
    pub fn is_restricted(self) -> bool {
        self != Self::Public
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Public => "public",
            Self::Loopback => "loopback",
            Self::Private => "private",
            Self::LinkLocal => "link-local",
            Self::Unspecified => "unspecified",
            Self::UniqueLocal => "unique-local",
            Self::SharedCgnat => "shared (CGNAT)",
            Self::Multicast => "multicast",
            Self::Broadcast => "broadcast",
            Self::Documentation => "documentation",
            Self::Reserved => "reserved",
        })
    }
}

/// An address the policy refuses, with its class (for the log line and the status row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The refused address, as given (an IPv4-mapped IPv6 address is reported as given).
    pub addr: IpAddr,
    /// Why: the class it falls in.
    pub class: AddressClass,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} address {} refused", self.class, self.addr)
    }
}

impl core::error::Error for Refused {}

/// The class of `addr`. An IPv4-mapped (`::ffff:a.b.c.d`) or IPv4-compatible-with-loopback
/// IPv6 address is classed as the IPv4 address it carries, since that is where a socket to it
/// goes; NAT64's well-known prefix `64:ff9b::/96` likewise carries its IPv4 address.
pub fn classify(addr: IpAddr) -> AddressClass {
    match addr {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// Whether `addr` may be dialled: `Ok` for a public address, or any address when
/// `allow_private_networks` is set; otherwise the refusal with its class.
pub fn check(addr: IpAddr, allow_private_networks: bool) -> Result<(), Refused> {
    let class = classify(addr);
    if class.is_restricted() && !allow_private_networks {
        Err(Refused { addr, class })
    } else {
        Ok(())
    }
}

/// What the URL check decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlHost<'a> {
    /// The host is an address literal the policy allows: connect to it, no resolution.
    Literal(IpAddr),
    /// The host is a name: resolve it, then [`check`] every address before connecting to it.
    Name(&'a str),
}

/// Why a URL is refused before any connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlError {
    /// No `scheme://host`, or an empty host.
    NoHost,
    /// The host is an address literal in a refused class.
    Refused(Refused),
    /// `localhost` or a name under `.localhost` (RFC 6761: always loopback), refused as its
    /// address would be.
    Localhost,
}

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoHost => f.write_str("URL without a host"),
            Self::Refused(r) => r.fmt(f),
            Self::Localhost => f.write_str("localhost refused"),
        }
    }
}

impl core::error::Error for UrlError {}

/// The first check on a URL (the configured `relayUrl`, and every redirect's `Location`): a host
/// that is an address literal (`ws://10.0.0.1/`, `wss://[::1]:7777/`, and the legacy forms a URL
/// parser accepts for IPv4, see [`parse_v4_literal`]) is classified now; a name must still be
/// resolved and each address [`check`]ed.
pub fn check_url(url: &str, allow_private_networks: bool) -> Result<UrlHost<'_>, UrlError> {
    let host = crate::nostr::auth::host_of(url).ok_or(UrlError::NoHost)?;
    let literal = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        // A zone id (`fe80::1%eth0`) names an interface: link-local by construction.
        let inner = inner.split('%').next().unwrap_or(inner);
        match inner.parse::<Ipv6Addr>() {
            Ok(v6) => Some(IpAddr::V6(v6)),
            Err(_) => return Err(UrlError::NoHost),
        }
    } else {
        parse_v4_literal(host).map(IpAddr::V4)
    };
    if let Some(addr) = literal {
        check(addr, allow_private_networks).map_err(UrlError::Refused)?;
        return Ok(UrlHost::Literal(addr));
    }
    let bare = host.trim_end_matches('.');
    let is_localhost = bare.eq_ignore_ascii_case("localhost")
        || bare.len() > 10 && bare[bare.len() - 10..].eq_ignore_ascii_case(".localhost");
    if is_localhost && !allow_private_networks {
        return Err(UrlError::Localhost);
    }
    Ok(UrlHost::Name(host))
}

/// Parses an IPv4 literal as WHATWG URL parsers and `inet_aton` do, so that `http://2130706433/`,
/// `http://0x7f.1/` and `http://017700000001/` are seen as the loopback address they reach, not
/// as names: one to four dot-separated parts, each decimal, `0x` hex or `0` octal, the last part
/// filling the remaining bytes. `None` when it is not such a literal (a name).
pub fn parse_v4_literal(host: &str) -> Option<Ipv4Addr> {
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() {
        return None;
    }
    let mut parts = [0u64; 4];
    let mut n = 0;
    for part in host.split('.') {
        if n == 4 || part.is_empty() {
            return None;
        }
        let (digits, radix) =
            if let Some(h) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
                (h, 16)
            } else if part.len() > 1 && part.starts_with('0') {
                (&part[1..], 8)
            } else {
                (part, 10)
            };
        let value = if digits.is_empty() {
            0
        } else {
            if digits.len() > 12 {
                return None;
            }
            u64::from_str_radix(digits, radix).ok()?
        };
        parts[n] = value;
        n += 1;
    }
    let last_bits = 8 * (5 - n as u32);
    let mut out: u64 = 0;
    for (i, &p) in parts[..n - 1].iter().enumerate() {
        if p > 255 {
            return None;
        }
        out |= p << (24 - 8 * i as u32);
    }
    let last = parts[n - 1];
    if last_bits < 64 && last >= 1u64 << last_bits {
        return None;
    }
    out |= last;
    u32::try_from(out).ok().map(Ipv4Addr::from)
}

fn classify_v4(a: Ipv4Addr) -> AddressClass {
    let o = a.octets();
    match o {
        [0, ..] => AddressClass::Unspecified,
        [127, ..] => AddressClass::Loopback,
        [10, ..] => AddressClass::Private,
        [172, b, ..] if (16..32).contains(&b) => AddressClass::Private,
        [192, 168, ..] => AddressClass::Private,
        [169, 254, ..] => AddressClass::LinkLocal,
        [100, b, ..] if (64..128).contains(&b) => AddressClass::SharedCgnat,
        [255, 255, 255, 255] => AddressClass::Broadcast,
        [224..=239, ..] => AddressClass::Multicast,
        [240..=255, ..] => AddressClass::Reserved,
        [192, 0, 0, _] => AddressClass::Reserved,
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => AddressClass::Documentation,
        [198, 18 | 19, ..] => AddressClass::Documentation,
        _ => AddressClass::Public,
    }
}

fn classify_v6(a: Ipv6Addr) -> AddressClass {
    if let Some(v4) = a.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    let s = a.segments();
    // NAT64 well-known prefix 64:ff9b::/96 reaches the IPv4 address in its low 32 bits.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let o = a.octets();
        return classify_v4(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    if a.is_unspecified() {
        return AddressClass::Unspecified;
    }
    if a.is_loopback() {
        return AddressClass::Loopback;
    }
    // The deprecated IPv4-compatible form ::a.b.c.d: class it by the IPv4 address it names.
    if s[..6] == [0; 6] {
        let o = a.octets();
        return classify_v4(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    match s[0] {
        x if x & 0xfe00 == 0xfc00 => AddressClass::UniqueLocal,
        x if x & 0xffc0 == 0xfe80 => AddressClass::LinkLocal,
        x if x & 0xffc0 == 0xfec0 => AddressClass::Reserved,
        x if x & 0xff00 == 0xff00 => AddressClass::Multicast,
        0x2001 if s[1] == 0x0db8 => AddressClass::Documentation,
        0x0100 if s[1..4] == [0, 0, 0] => AddressClass::Reserved,
        // Only 2000::/3 is allocated global unicast.
        x if x & 0xe000 == 0x2000 => AddressClass::Public,
        _ => AddressClass::Reserved,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn every_non_public_class_is_refused_unless_private_networks_are_allowed() {
        use AddressClass::*;
        let table: &[(&str, AddressClass)] = &[
            ("8.8.8.8", Public),
            ("1.1.1.1", Public),
            ("172.15.255.255", Public),
            ("172.32.0.0", Public),
            ("100.63.255.255", Public),
            ("100.128.0.0", Public),
            ("192.169.0.1", Public),
            ("127.0.0.1", Loopback),
            ("127.255.255.254", Loopback),
            ("10.0.0.1", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("169.254.169.254", LinkLocal),
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("100.64.0.1", SharedCgnat),
            ("100.127.255.255", SharedCgnat),
            ("224.0.0.1", Multicast),
            ("239.255.255.255", Multicast),
            ("255.255.255.255", Broadcast),
            ("240.0.0.1", Reserved),
            ("192.0.0.8", Reserved),
            ("192.0.2.1", Documentation),
            ("198.51.100.1", Documentation),
            ("203.0.113.9", Documentation),
            ("198.18.0.1", Documentation),
            ("2606:4700:4700::1111", Public),
            ("2a00:1450::1", Public),
            ("::1", Loopback),
            ("::", Unspecified),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("fc00::1", UniqueLocal),
            ("fd12:3456::1", UniqueLocal),
            ("fec0::1", Reserved),
            ("ff02::1", Multicast),
            ("2001:db8::1", Documentation),
            ("100::1", Reserved),
            ("4000::1", Reserved),
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:10.1.2.3", Private),
            ("::ffff:169.254.0.1", LinkLocal),
            ("::ffff:8.8.8.8", Public),
            ("::127.0.0.1", Loopback),
            ("::10.0.0.1", Private),
            ("64:ff9b::7f00:1", Loopback),
            ("64:ff9b::808:808", Public),
        ];
        for &(text, class) in table {
            let addr = ip(text);
            assert_eq!(classify(addr), class, "{text}");
            if class == Public {
                assert_eq!(check(addr, false), Ok(()), "{text}");
            } else {
                assert_eq!(check(addr, false), Err(Refused { addr, class }), "{text}");
            }
            assert_eq!(
                check(addr, true),
                Ok(()),
                "{text} with private networks allowed"
            );
        }
    }

    #[test]
    fn url_literals_are_checked_and_names_left_to_resolve() {
        assert_eq!(
            check_url("wss://relay.example.com/", false),
            Ok(UrlHost::Name("relay.example.com"))
        );
        assert_eq!(
            check_url("wss://8.8.8.8:443/", false),
            Ok(UrlHost::Literal(ip("8.8.8.8")))
        );
        assert_eq!(
            check_url("wss://[2606:4700::1]:7777/x", false),
            Ok(UrlHost::Literal(ip("2606:4700::1")))
        );
        for url in [
            "ws://127.0.0.1:7777",
            "ws://10.0.0.1/",
            "ws://[::1]:80/",
            "ws://[::ffff:127.0.0.1]/",
            "ws://[fe80::1%25eth0]/",
            "ws://user@192.168.0.1:80/",
            "ws://2130706433/",
            "ws://0x7f.1/",
            "ws://017700000001/",
            "ws://127.1/",
            "ws://0/",
        ] {
            assert!(
                matches!(check_url(url, false), Err(UrlError::Refused(_))),
                "{url}"
            );
            assert!(
                matches!(check_url(url, true), Ok(UrlHost::Literal(_))),
                "{url} allowed"
            );
        }
        for url in [
            "ws://localhost:7777/",
            "ws://LOCALHOST./",
            "ws://a.localhost/",
        ] {
            assert_eq!(check_url(url, false), Err(UrlError::Localhost), "{url}");
            assert!(
                matches!(check_url(url, true), Ok(UrlHost::Name(_))),
                "{url}"
            );
        }
        assert_eq!(check_url("relay.example.com", false), Err(UrlError::NoHost));
        assert_eq!(check_url("ws://[zz]/", false), Err(UrlError::NoHost));
        // Names that only look numeric in part stay names.
        assert_eq!(
            check_url("wss://1.2.3.example/", false),
            Ok(UrlHost::Name("1.2.3.example"))
        );
        assert!(matches!(
            check_url("wss://0x/", false),
            Err(UrlError::Refused(_))
        ));
    }

    #[test]
    fn legacy_ipv4_literals_parse_as_a_url_parser_reads_them() {
        let cases: &[(&str, Option<&str>)] = &[
            ("1.2.3.4", Some("1.2.3.4")),
            ("127.1", Some("127.0.0.1")),
            ("10.1.2", Some("10.1.0.2")),
            ("2130706433", Some("127.0.0.1")),
            ("0x7f000001", Some("127.0.0.1")),
            ("0177.0.0.1", Some("127.0.0.1")),
            ("1.2.3.4.", Some("1.2.3.4")),
            ("256.1.1.1", None),
            ("1.2.3.256", None),
            ("4294967296", None),
            ("1.2.3.4.5", None),
            ("example.com", None),
            ("1..2", None),
            ("08.1.1.1", None),
            ("", None),
        ];
        for &(text, want) in cases {
            assert_eq!(
                parse_v4_literal(text),
                want.map(|w| w.parse().unwrap()),
                "{text}"
            );
        }
    }
}
