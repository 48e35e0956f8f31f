//! Helpers the AIRC driver tests share.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use weft_proto::airc::frame::{Frame, Hello, PROTO, Role};
use weft_proto::airc::framing::{self, FrameDecoder};

/// Says a client hello over TCP and returns the welcome's namespaces (§5: what the transport
/// proved), `None` when the welcome names none.
pub(crate) fn tcp_welcome_namespaces(addr: SocketAddr) -> Option<Vec<String>> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let hello = Hello {
        proto: PROTO.into(),
        role: Role::Client,
        agent: None,
        realm: None,
        ts: None,
        nonce: None,
        sig: None,
    };
    s.write_all(&framing::encode(&Frame::Hello(hello))).unwrap();
    let mut decoder = FrameDecoder::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(frame) = decoder.next() {
            match frame.unwrap() {
                Frame::Welcome(w) => return w.ns,
                other => panic!("expected welcome, got {}", other.t()),
            }
        }
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the server closed before its welcome");
        decoder.push(&buf[..n]);
    }
}
