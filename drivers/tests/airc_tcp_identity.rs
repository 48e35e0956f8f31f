//! AIRC §5 on loopback TCP: the realm server learns a TCP client's uid from the owner of its
//! socket in `/proc/net/tcp` (and `tcp6`), and grants that uid's namespaces from the operator's
//! table, exactly as the Unix socket's `SO_PEERCRED` path does.

#[path = "common/adapter.rs"]
mod adapter;
#[path = "common/airc_tcp.rs"]
mod airc_tcp;
mod common;

use adapter::Running;
use common::tcp_welcome_namespaces;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use weft_drivers::airc::serve::{ServeConfig, open};
use weft_proto::airc::address::Namespace;

/// A realm server on the smol adapter, and its client face's TCP address.
struct Server {
    running: Running<()>,
    tcp: SocketAddr,
}

impl Server {
    fn stop(self) {
        self.running.stop();
    }
}

/// Serves a realm whose client face also listens on `tcp`, with `table` as its uid → namespaces.
fn start(dir: &Path, tcp: &str, table: BTreeMap<u32, Vec<Namespace>>) -> Server {
    let mut config = ServeConfig::local(dir, "me").unwrap();
    config.namespaces = table;
    config.client_tcp = Some(tcp.parse().unwrap());
    let (running, tcp) = airc_tcp::serve_with_tcp_face(config);
    Server { running, tcp }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-airc-tcp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A server refuses a state directory other users can read (weft_drivers::state_dir).
    weft_drivers::state_dir::prepare_dir(&dir, true).unwrap();
    dir
}

fn my_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

fn ns(names: &[&str]) -> Vec<Namespace> {
    names.iter().map(|n| Namespace::parse(n).unwrap()).collect()
}

#[test]
fn a_loopback_tcp_client_gets_the_namespaces_of_the_uid_owning_its_socket() {
    let dir = temp_dir("v4");
    let table = BTreeMap::from([(my_uid(), ns(&["me", "team"])), (my_uid() + 1, ns(&["x"]))]);
    let server = start(&dir, "127.0.0.1:0", table);
    assert_eq!(
        tcp_welcome_namespaces(server.tcp).unwrap_or_default(),
        ["me", "team"]
    );
    server.stop();
}

#[test]
fn an_ipv6_loopback_tcp_client_gets_the_namespaces_of_its_uid() {
    let dir = temp_dir("v6");
    let server = start(&dir, "[::1]:0", BTreeMap::from([(my_uid(), ns(&["me"]))]));
    assert_eq!(
        tcp_welcome_namespaces(server.tcp).unwrap_or_default(),
        ["me"]
    );
    server.stop();
}

#[test]
fn a_tcp_client_whose_uid_is_not_in_the_table_gets_no_namespaces() {
    let dir = temp_dir("stranger");
    let table = BTreeMap::from([(my_uid().wrapping_add(1), ns(&["other"]))]);
    let server = start(&dir, "127.0.0.1:0", table);
    assert_eq!(
        tcp_welcome_namespaces(server.tcp).unwrap_or_default(),
        Vec::<String>::new()
    );
    server.stop();
}

#[test]
fn a_non_loopback_client_tcp_address_is_refused_at_start() {
    let dir = temp_dir("refused");
    let mut config = ServeConfig::local(&dir, "me").unwrap();
    for addr in ["0.0.0.0:0", "[::]:0", "192.0.2.1:2472"] {
        config.client_tcp = Some(addr.parse().unwrap());
        let err = open(&config).err().expect("refused");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{addr}");
        assert!(err.to_string().contains("not a loopback address"), "{err}");
    }
}
