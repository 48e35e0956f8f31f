//! Who owns the other end of a loopback TCP connection, from `/proc/net/tcp` and `/proc/net/tcp6`.
//!
//! AIRC §5 lets a server take a client's identity from the transport; on loopback TCP the kernel
//! does not hand it over as `SO_PEERCRED` does on a Unix socket, but it lists every socket of the
//! network namespace with its owner's uid. The client's socket is the row whose local address is
//! the remote address the server sees and whose remote address is the server's own (the
//! listener's). Protocol-neutral: a machine mapping decides what a uid may do.
//!
//! A row is believed only while it is a live socket: connected, with a file, held by a process
//! of the uid it names ([`loopback_tcp_owner`]). A client that writes and closes before the
//! server accepts leaves an orphaned row that the kernel lists as uid 0 with inode 0; taken at
//! its word, that made any local user root.
//!
//! The kernel prints an IPv4 address as the `%08X` of its network-order 32-bit word read as a
//! native integer, an IPv6 address as four such words, and ports in host order. Addresses are
//! compared in canonical form, so a v4-mapped IPv6 address (`::ffff:127.0.0.1`, as a dual-stack
//! listener sees an IPv4 client) matches the IPv4 row and the other way round.

use std::io::{self, BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

/// The kernel's socket tables, IPv4 then IPv6.
pub const PROC_NET_TABLES: [&str; 2] = ["/proc/net/tcp", "/proc/net/tcp6"];

/// The `st` column of a connected socket (`TCP_ESTABLISHED`). Every other state is a socket on
/// its way out or not yet in: a client that wrote and closed at once is `FIN_WAIT2` or
/// `TIME_WAIT` by the time the server accepts, and the kernel lists such an orphan as uid 0.
pub const TCP_ESTABLISHED: u8 = 0x01;

/// The uid owning the live socket at `remote` that is connected to `local`, when both ends are
/// on loopback: the row must be [`live_owner`]'s, and a process of that uid must hold the
/// socket's inode right now ([`held_by_a_process`]). `None` otherwise (a non-loopback address, a
/// client that has already closed or exited, no `/proc`): never a default identity.
pub fn loopback_tcp_owner(remote: SocketAddr, local: SocketAddr) -> Option<u32> {
    if !is_loopback(remote) || !is_loopback(local) {
        return None;
    }
    // The kernel finds the one socket by its four-tuple; the tables, which list every socket of
    // the namespace, are read only where that interface is not there.
    let owner = match diag::lookup(remote, local) {
        Some(found) => found?,
        None => PROC_NET_TABLES.iter().find_map(|path| {
            let file = std::fs::File::open(path).ok()?;
            owner_in(
                BufReader::new(file),
                remote,
                local,
                cfg!(target_endian = "little"),
            )
            .ok()
            .flatten()
        })?,
    };
    held_by_a_process(owner.inode, owner.uid, Path::new("/proc")).then_some(owner.uid)
}

/// Whether `addr` is a loopback address, v4-mapped IPv6 included.
pub fn is_loopback(addr: SocketAddr) -> bool {
    addr.ip().to_canonical().is_loopback()
}

/// Who a live socket row names: its owner's uid and its inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The uid the kernel lists for the socket.
    pub uid: u32,
    /// The socket's inode, which a process holding it sees as `socket:[inode]`.
    pub inode: u64,
}

/// Scans a `/proc/net/tcp`-format table for the socket whose local address is `client` and
/// whose remote address is `server`, and returns its owner if the row is a live one
/// ([`live_owner`]). `little_endian` says how the table's words were printed (the host's order).
/// Rows that do not parse are skipped: the kernel's format is the only writer, and a row this
/// parser does not understand cannot be the one sought.
pub fn owner_in(
    table: impl BufRead,
    client: SocketAddr,
    server: SocketAddr,
    little_endian: bool,
) -> io::Result<Option<Owner>> {
    let (client, server) = (canonical(client), canonical(server));
    // The first line is the column header.
    for line in table.lines().skip(1) {
        let line = line?;
        if let Some(row) = Row::parse(&line, little_endian)
            && row.local == client
            && row.remote == server
        {
            return Ok(live_owner(row.state, row.uid, row.inode));
        }
    }
    Ok(None)
}

/// The rule for trusting a row's uid: the socket is connected ([`TCP_ESTABLISHED`]) and still
/// has a file (inode non-zero). An orphaned socket (its process closed it or exited) has inode 0
/// and is listed as uid 0 whoever made it, so its uid proves nothing.
fn live_owner(state: u8, uid: u32, inode: u64) -> Option<Owner> {
    (state == TCP_ESTABLISHED && inode != 0).then_some(Owner { uid, inode })
}

/// The kernel's socket diagnostics (`NETLINK_SOCK_DIAG`, `SOCK_DIAG_BY_FAMILY` with an exact
/// four-tuple): the one TCP socket asked for, with its state, uid and inode, whatever the number
/// of other sockets. Reading `/proc/net/tcp` costs a line for every socket of the namespace,
/// thousands when a client floods the face with connections that close.
mod diag {
    use super::{Owner, live_owner};
    use std::net::{IpAddr, Ipv6Addr, SocketAddr};
    use std::time::Duration;

    use rustix::net::netlink::{self, SocketAddrNetlink};
    use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketType};

    /// `SOCK_DIAG_BY_FAMILY`.
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    /// `NLMSG_ERROR`.
    const NLMSG_ERROR: u16 = 2;
    /// `NLM_F_REQUEST`.
    const NLM_F_REQUEST: u16 = 1;
    /// `AF_INET`, `AF_INET6` as the request's family byte.
    const AF_INET: u8 = 2;
    const AF_INET6: u8 = 10;
    /// `IPPROTO_TCP`.
    const IPPROTO_TCP: u8 = 6;
    /// `nlmsghdr`, then `inet_diag_req_v2` (or `inet_diag_msg`).
    const HEADER: usize = 16;
    const REQUEST: usize = 56;
    /// How long the lookup may wait for the kernel's answer, which is immediate: a bound, so the
    /// loop that asks can never hang on it.
    const ANSWER_WAIT: Duration = Duration::from_secs(1);

    /// The owner of the TCP socket at `client` connected to `server`: `Some(Some(_))` when the
    /// kernel lists it live, `Some(None)` when it does not (gone, or not connected), `None` when
    /// the interface cannot be used here.
    pub(super) fn lookup(client: SocketAddr, server: SocketAddr) -> Option<Option<Owner>> {
        let (client, server) = (canonical(client), canonical(server));
        let fd = rustix::net::socket(
            AddressFamily::NETLINK,
            SocketType::DGRAM,
            Some(netlink::SOCK_DIAG),
        )
        .ok()?;
        rustix::net::sockopt::set_socket_timeout(
            &fd,
            rustix::net::sockopt::Timeout::Recv,
            Some(ANSWER_WAIT),
        )
        .ok()?;
        // An IPv4 client's socket is AF_INET, or AF_INET6 with mapped addresses when it came
        // from a dual-stack socket; an IPv6 one is AF_INET6.
        let mut forms = Vec::new();
        if let (IpAddr::V4(c), IpAddr::V4(s)) = (client.ip(), server.ip()) {
            forms.push((AF_INET, v4_words(c.octets()), v4_words(s.octets())));
            forms.push((
                AF_INET6,
                c.to_ipv6_mapped().octets(),
                s.to_ipv6_mapped().octets(),
            ));
        } else {
            forms.push((AF_INET6, v6(client.ip()).octets(), v6(server.ip()).octets()));
        }
        for (family, src, dst) in forms {
            let request = request(family, client.port(), server.port(), &src, &dst);
            rustix::net::sendto(
                &fd,
                &request,
                SendFlags::empty(),
                &SocketAddrNetlink::new(0, 0),
            )
            .ok()?;
            let mut answer = [0u8; 8192];
            let (n, _) = rustix::net::recv(&fd, &mut answer[..], RecvFlags::empty()).ok()?;
            match parse(&answer[..n], client.port(), server.port())? {
                Answer::Found(owner) => return Some(owner),
                Answer::NotFound => continue,
            }
        }
        Some(None)
    }

    /// What the kernel said.
    enum Answer {
        /// The socket, live or not.
        Found(Option<Owner>),
        /// No such socket in this family.
        NotFound,
    }

    fn canonical(addr: SocketAddr) -> SocketAddr {
        SocketAddr::new(addr.ip().to_canonical(), addr.port())
    }

    fn v6(ip: IpAddr) -> Ipv6Addr {
        match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        }
    }

    /// An IPv4 address in the first of four address words.
    fn v4_words(octets: [u8; 4]) -> [u8; 16] {
        let mut words = [0u8; 16];
        words[..4].copy_from_slice(&octets);
        words
    }

    /// `nlmsghdr` + `inet_diag_req_v2` asking for one TCP socket by its four-tuple, in any state.
    pub(super) fn request(
        family: u8,
        sport: u16,
        dport: u16,
        src: &[u8; 16],
        dst: &[u8; 16],
    ) -> Vec<u8> {
        let mut m = Vec::with_capacity(HEADER + REQUEST);
        m.extend(((HEADER + REQUEST) as u32).to_ne_bytes());
        m.extend(SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        m.extend(NLM_F_REQUEST.to_ne_bytes());
        m.extend(1u32.to_ne_bytes()); // sequence
        m.extend(0u32.to_ne_bytes()); // port id: the kernel's
        m.extend([family, IPPROTO_TCP, 0, 0]);
        m.extend(u32::MAX.to_ne_bytes()); // every state: the rule below judges it
        m.extend(sport.to_be_bytes());
        m.extend(dport.to_be_bytes());
        m.extend(src);
        m.extend(dst);
        m.extend(0u32.to_ne_bytes()); // any interface
        m.extend([0xff; 8]); // INET_DIAG_NOCOOKIE
        m
    }

    /// The kernel's answer: one `inet_diag_msg` (state at 1, the ports at 4 and 6, uid at 64,
    /// inode at 68), or an `NLMSG_ERROR` (`ENOENT` when nothing matches). `None` for anything
    /// this parser does not understand, which makes the caller fall back.
    fn parse(answer: &[u8], sport: u16, dport: u16) -> Option<Answer> {
        let kind = u16::from_ne_bytes(answer.get(4..6)?.try_into().ok()?);
        let body = answer.get(HEADER..)?;
        match kind {
            SOCK_DIAG_BY_FAMILY => {
                let port = |at: usize| {
                    body.get(at..at + 2)
                        .map(|b| u16::from_be_bytes([b[0], b[1]]))
                };
                if port(4)? != sport || port(6)? != dport {
                    return None;
                }
                let word = |at: usize| {
                    body.get(at..at + 4)
                        .and_then(|b| b.try_into().ok())
                        .map(u32::from_ne_bytes)
                };
                Some(Answer::Found(live_owner(
                    *body.get(1)?,
                    word(64)?,
                    u64::from(word(68)?),
                )))
            }
            NLMSG_ERROR => {
                let errno = i32::from_ne_bytes(body.get(..4)?.try_into().ok()?);
                (errno == -(rustix::io::Errno::NOENT.raw_os_error())).then_some(Answer::NotFound)
            }
            _ => None,
        }
    }
}

/// Whether a process of `uid` holds the socket `inode`: some `<proc>/<pid>/fd/<n>` owned by
/// `uid` links to `socket:[inode]`. Only processes whose `/proc` entry `uid` owns are read,
/// which keeps the walk to the caller's own processes; a process this server may not read (a
/// server not running as root, looking at another user's processes) proves nothing, so such a
/// peer is refused rather than trusted.
pub fn held_by_a_process(inode: u64, uid: u32, proc_root: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let target = format!("socket:[{inode}]");
    let Ok(pids) = std::fs::read_dir(proc_root) else {
        return false;
    };
    pids.flatten()
        .filter(|pid| {
            pid.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter(|pid| pid.metadata().is_ok_and(|m| m.uid() == uid))
        .any(|pid| {
            let Ok(fds) = std::fs::read_dir(pid.path().join("fd")) else {
                return false;
            };
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|link| link.as_os_str() == target.as_str())
            })
        })
}

/// The columns of one socket row that say whose it is and whether it is live.
#[derive(Debug, PartialEq, Eq)]
struct Row {
    local: SocketAddr,
    remote: SocketAddr,
    state: u8,
    uid: u32,
    inode: u64,
}

impl Row {
    /// `sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode …`
    fn parse(line: &str, little_endian: bool) -> Option<Self> {
        let mut fields = line.split_whitespace();
        let _slot = fields.next()?;
        let local = parse_endpoint(fields.next()?, little_endian)?;
        let remote = parse_endpoint(fields.next()?, little_endian)?;
        let state = u8::from_str_radix(fields.next()?, 16).ok()?;
        let uid = fields.nth(3)?.parse().ok()?;
        let _timeout = fields.next()?;
        let inode = fields.next()?.parse().ok()?;
        Some(Self {
            local,
            remote,
            state,
            uid,
            inode,
        })
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
        .map(|o| o.uid)
    }

    /// Read off this machine's `/proc/net/tcp` (x86-64, as root, so every uid is 0) with a
    /// listener on 127.0.0.1:7000 and four clients: 40001 connected (`01`, its inode listed);
    /// 40002 closed by its client after the server accepted it (`05` FIN_WAIT2, inode 0, the
    /// server's side `08` CLOSE_WAIT); 40003 closed by both (`06` TIME_WAIT); 40004 wrote a byte
    /// and closed before the server accepted it (`05`, inode 0, while the server's side waits in
    /// the accept queue). The three rows of sockets whose process let go all show inode 0.
    const STATES: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   1: 0100007F:1B58 00000000:0000 0A 00000000:00000001 00:00000000 00000000     0        0 13401 2 000000005b186397 100 0 0 10 0
   2: 0100007F:9C41 0100007F:1B58 01 00000000:00000000 00:00000000 00000000     0        0 13402 2 000000002a455a06 20 0 0 10 -1
   3: 0100007F:9C42 0100007F:1B58 05 00000000:00000000 03:00001760 00000000     0        0 0 3 00000000c32aca45
   4: 0100007F:9C43 0100007F:1B58 06 00000000:00000000 03:00001765 00000000     0        0 0 3 000000008268bf90
   5: 0100007F:9C44 0100007F:1B58 05 00000000:00000000 03:0000176A 00000000     0        0 0 3 00000000d807ffd8
   6: 0100007F:1B58 0100007F:9C44 08 00000000:00000002 00:00000000 00000000     0        0 0 1 000000008fa44f6e 20 4 28 10 -1
   7: 0100007F:1B58 0100007F:9C42 08 00000000:00000001 00:00000000 00000000     0        0 13405 1 00000000f79f5200 20 4 0 10 -1
   8: 0100007F:1B58 0100007F:9C41 01 00000000:00000000 00:00000000 00000000     0        0 13403 1 00000000a04e880d 20 0 0 10 -1
";

    #[test]
    fn only_a_connected_socket_with_a_file_names_its_owner() {
        let lookup = |client: &str| {
            owner_in(
                STATES.as_bytes(),
                client.parse().unwrap(),
                "127.0.0.1:7000".parse().unwrap(),
                true,
            )
            .unwrap()
        };
        assert_eq!(
            lookup("127.0.0.1:40001"),
            Some(Owner {
                uid: 0,
                inode: 13402
            })
        );
        // The attack: write and close at once. By accept time the client's row is an orphan the
        // kernel lists as uid 0 (root); it must name nobody, whatever state it is in.
        for gone in ["127.0.0.1:40002", "127.0.0.1:40003", "127.0.0.1:40004"] {
            assert_eq!(lookup(gone), None, "{gone}");
        }
    }

    #[test]
    fn a_connected_row_without_an_inode_or_in_any_other_state_names_nobody() {
        let row = |st: &str, inode: &str| {
            format!(
                "header\n   2: 0100007F:9C41 0100007F:1B58 {st} 00000000:00000000 00:00000000 00000000  1001        0 {inode} 2 0 20 0 0 10 -1\n"
            )
        };
        let lookup = |table: String| owner(&table, "127.0.0.1:40001", "127.0.0.1:7000");
        assert_eq!(lookup(row("01", "77")), Some(1001));
        assert_eq!(lookup(row("01", "0")), None, "orphaned");
        // SYN_SENT, SYN_RECV, FIN_WAIT1, FIN_WAIT2, TIME_WAIT, CLOSE, CLOSE_WAIT, LAST_ACK,
        // LISTEN, CLOSING: each with a live-looking inode still names nobody.
        for st in ["02", "03", "04", "05", "06", "07", "08", "09", "0A", "0B"] {
            assert_eq!(lookup(row(st, "77")), None, "state {st}");
        }
    }

    /// The socket diagnostics answer for the one socket asked about: a connected client's uid
    /// and inode, and nobody once its process has closed it (an orphan in `FIN_WAIT2`, then
    /// gone), over IPv4 and IPv6.
    #[test]
    fn the_kernels_socket_diagnostics_name_a_live_socket_and_nobody_once_it_is_closed() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let me = rustix::process::geteuid().as_raw();
        for at in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(listener) = std::net::TcpListener::bind(at) else {
                println!("SKIP: {at}: no such loopback here");
                continue;
            };
            let server = listener.local_addr().unwrap();
            let client = std::net::TcpStream::connect(server).unwrap();
            let (_accepted, _) = listener.accept().unwrap();
            let inode = std::fs::metadata(format!("/proc/self/fd/{}", client.as_raw_fd()))
                .unwrap()
                .ino();
            let from = client.local_addr().unwrap();
            let Some(found) = diag::lookup(from, server) else {
                println!("SKIP: no NETLINK_SOCK_DIAG here; /proc/net/tcp is read instead");
                return;
            };
            assert_eq!(found, Some(Owner { uid: me, inode }), "{at}");
            drop(client);
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert_eq!(diag::lookup(from, server), Some(None), "{at}: closed");
            let unknown: SocketAddr = SocketAddr::new(server.ip(), 1);
            assert_eq!(diag::lookup(unknown, server), Some(None), "{at}: never was");
        }
    }

    #[test]
    fn a_socket_is_held_only_if_a_process_of_that_uid_has_it_open() {
        use std::os::unix::fs::MetadataExt;
        // A real connected pair in this process: its client socket's inode is held by us.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server_side, _) = listener.accept().unwrap();
        let inode = std::fs::metadata(format!("/proc/self/fd/{}", {
            use std::os::fd::AsRawFd;
            client.as_raw_fd()
        }))
        .unwrap()
        .ino();
        let me = rustix::process::geteuid().as_raw();
        let proc_root = Path::new("/proc");
        assert!(held_by_a_process(inode, me, proc_root));
        assert!(
            !held_by_a_process(inode, me.wrapping_add(1), proc_root),
            "not by another uid's processes"
        );
        assert!(
            !held_by_a_process(u64::MAX, me, proc_root),
            "an inode nobody holds"
        );
        let owner =
            loopback_tcp_owner(client.local_addr().unwrap(), listener.local_addr().unwrap());
        assert_eq!(owner, Some(me), "the live lookup end to end");
        drop(client);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(
            loopback_tcp_owner(
                "127.0.0.1:1".parse().unwrap(),
                listener.local_addr().unwrap()
            ),
            None
        );
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
            .unwrap()
            .map(|o| o.uid),
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
   6: 0100007F:9C40 0100007F:1B58 01 0:0 0:0 0 1004 0 99
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
