//! Who owns the other end of a loopback TCP connection, from `/proc/net/tcp` and `/proc/net/tcp6`.
//!
//! AIRC §5 lets a server take a client's identity from the transport; on loopback TCP the kernel
//! does not hand it over as `SO_PEERCRED` does on a Unix socket, but it lists every socket of the
//! network namespace with its owner's uid. The client's socket is the row whose local address is
//! the remote address the server sees and whose remote address is the server's own (the
//! listener's). Protocol-neutral: a machine mapping decides what a uid may do.
//!
//! The kernel prints an IPv4 address as the `%08X` of its network-order 32-bit word read as a
//! native integer, an IPv6 address as four such words, and ports in host order. Addresses are
//! compared in canonical form, so a v4-mapped IPv6 address (`::ffff:127.0.0.1`, as a dual-stack
//! listener sees an IPv4 client) matches the IPv4 row and the other way round.

use std::io::{self, BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The kernel's socket tables, IPv4 then IPv6.
pub const PROC_NET_TABLES: [&str; 2] = ["/proc/net/tcp", "/proc/net/tcp6"];

/// The uid owning the socket at `remote` that is connected to `local`, when both ends are on
/// loopback and the kernel lists it; `None` otherwise (a non-loopback address, a client that has
/// already gone, no `/proc`).
pub fn loopback_tcp_owner(remote: SocketAddr, local: SocketAddr) -> Option<u32> {
    if !is_loopback(remote) || !is_loopback(local) {
        return None;
    }
    PROC_NET_TABLES.iter().find_map(|path| {
        let file = std::fs::File::open(path).ok()?;
        owner_in(
            BufReader::new(file),
            remote,
            local,
            cfg!(target_endian = "little"),
        )
        .ok()
        .flatten()
    })
}

/// Whether `addr` is a loopback address, v4-mapped IPv6 included.
pub fn is_loopback(addr: SocketAddr) -> bool {
    addr.ip().to_canonical().is_loopback()
}

/// Scans a `/proc/net/tcp`-format table for the socket whose local address is `client` and
/// whose remote address is `server`, and returns its uid. `little_endian` says how the table's
/// words were printed (the host's order). Rows that do not parse are skipped: the kernel's format
/// is the only writer, and a row this parser does not understand cannot be the one sought.
pub fn owner_in(
    table: impl BufRead,
    client: SocketAddr,
    server: SocketAddr,
    little_endian: bool,
) -> io::Result<Option<u32>> {
    let (client, server) = (canonical(client), canonical(server));
    // The first line is the column header.
    for line in table.lines().skip(1) {
        let line = line?;
        if let Some(row) = Row::parse(&line, little_endian)
            && row.local == client
            && row.remote == server
        {
            return Ok(Some(row.uid));
        }
    }
    Ok(None)
}

/// The columns of one socket row that say whose it is.
#[derive(Debug, PartialEq, Eq)]
struct Row {
    local: SocketAddr,
    remote: SocketAddr,
    uid: u32,
}

impl Row {
    /// `sl local_address rem_address st tx:rx tr:when retrnsmt uid …`
    fn parse(line: &str, little_endian: bool) -> Option<Self> {
        let mut fields = line.split_whitespace();
        let _slot = fields.next()?;
        let local = parse_endpoint(fields.next()?, little_endian)?;
        let remote = parse_endpoint(fields.next()?, little_endian)?;
        let uid = fields.nth(4)?.parse().ok()?;
        Some(Self { local, remote, uid })
    }
}

/// `ADDR:PORT` in the kernel's hex, 8 digits of address for IPv4 and 32 for IPv6.
fn parse_endpoint(field: &str, little_endian: bool) -> Option<SocketAddr> {
    let (addr, port) = field.split_once(':')?;
    if port.len() != 4 {
        return None;
    }
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(addr, little_endian)?)),
        32 => {
            let mut octets = [0u8; 16];
            for (i, chunk) in octets.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(&addr[i * 8..i * 8 + 8], little_endian)?);
            }
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        _ => return None,
    };
    Some(canonical(SocketAddr::new(ip, port)))
}

/// One printed 32-bit word back to the four bytes it held in memory (network order).
fn word(hex: &str, little_endian: bool) -> Option<[u8; 4]> {
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let value = u32::from_str_radix(hex, 16).ok()?;
    Some(if little_endian {
        value.to_le_bytes()
    } else {
        value.to_be_bytes()
    })
}

fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As an x86-64 kernel prints it: a listener on 127.0.0.1:7000 (uid 1000), a client socket of
    /// uid 1001 from port 40000 connected to it, and the server's accepted side of it.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1B58 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:9C40 0100007F:1B58 01 00000000:00000000 00:00000000 00000000  1001        0 222 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:1B58 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 333 1 0000000000000000 20 4 30 10 -1
";

    /// A listener on [::1]:7000 (uid 0), a client of uid 1002 on [::1]:40001, and a dual-stack
    /// client of uid 1003 at ::ffff:127.0.0.2:40002 connected to ::ffff:127.0.0.1:7000.
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1B58 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 444 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:9C41 00000000000000000000000001000000:1B58 01 00000000:00000000 00:00000000 00000000  1002        0 555 1 0000000000000000 20 4 30 10 -1
   2: 0000000000000000FFFF00000200007F:9C42 0000000000000000FFFF00000100007F:1B58 01 00000000:00000000 00:00000000 00000000  1003        0 666 1 0000000000000000 20 4 30 10 -1
";

    fn owner(table: &str, client: &str, server: &str) -> Option<u32> {
        owner_in(
            table.as_bytes(),
            client.parse().unwrap(),
            server.parse().unwrap(),
            true,
        )
        .unwrap()
    }

    #[test]
    fn the_owner_of_an_ipv4_client_socket_is_its_rows_uid() {
        assert_eq!(owner(TCP, "127.0.0.1:40000", "127.0.0.1:7000"), Some(1001));
    }

    #[test]
    fn the_servers_own_side_of_a_connection_is_not_mistaken_for_the_client() {
        // Swapped ends name the server's accepted socket, which is the server's uid: the lookup
        // must match local = client and remote = server, never the other way round.
        assert_eq!(owner(TCP, "127.0.0.1:7000", "127.0.0.1:40000"), Some(1000));
        assert_eq!(owner(TCP, "127.0.0.1:40000", "127.0.0.1:7001"), None);
    }

    #[test]
    fn a_connection_the_table_does_not_list_has_no_owner() {
        assert_eq!(owner(TCP, "127.0.0.1:40009", "127.0.0.1:7000"), None);
        assert_eq!(owner("", "127.0.0.1:40000", "127.0.0.1:7000"), None);
    }

    #[test]
    fn the_owner_of_an_ipv6_client_socket_is_its_rows_uid() {
        assert_eq!(owner(TCP6, "[::1]:40001", "[::1]:7000"), Some(1002));
    }

    #[test]
    fn a_v4_mapped_row_matches_the_ipv4_addresses_and_the_mapped_ones() {
        assert_eq!(owner(TCP6, "127.0.0.2:40002", "127.0.0.1:7000"), Some(1003));
        assert_eq!(
            owner(TCP6, "[::ffff:127.0.0.2]:40002", "[::ffff:127.0.0.1]:7000"),
            Some(1003)
        );
    }

    #[test]
    fn big_endian_tables_read_their_words_in_big_endian_order() {
        let row = "   1: 7F000001:9C40 7F000001:1B58 01 00000000:00000000 00:00000000 00000000  1001        0 222";
        let table = format!("header\n{row}\n");
        assert_eq!(
            owner_in(
                table.as_bytes(),
                "127.0.0.1:40000".parse().unwrap(),
                "127.0.0.1:7000".parse().unwrap(),
                false
            )
            .unwrap(),
            Some(1001)
        );
    }

    #[test]
    fn malformed_rows_are_skipped_without_panicking() {
        let table = "header
   0: 0100007G:9C40 0100007F:1B58 01 0:0 0:0 0 1001
   1: 0100007F:9C4 0100007F:1B58 01 0:0 0:0 0 1001
   2: 0100007F 0100007F:1B58 01 0:0 0:0 0 1001
   3: 0100007F:9C40 0100007F:1B58 01 0:0 0:0 0 notauid
   4: 0100007F:9C40 0100007F:1B58 01
   5: 0100007F0100:9C40 0100007F:1B58 01 0:0 0:0 0 1001
   6: 0100007F:9C40 0100007F:1B58 01 0:0 0:0 0 1004
";
        assert_eq!(
            owner(table, "127.0.0.1:40000", "127.0.0.1:7000"),
            Some(1004)
        );
    }

    #[test]
    fn only_loopback_addresses_are_looked_up() {
        let lo: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let far: SocketAddr = "192.0.2.1:40000".parse().unwrap();
        assert!(is_loopback("[::ffff:127.0.0.5]:1".parse().unwrap()));
        assert!(!is_loopback(far));
        assert_eq!(loopback_tcp_owner(far, lo), None);
        assert_eq!(loopback_tcp_owner(lo, far), None);
    }
}
