//! One std UDP socket moving a [`Transport`]'s datagrams (§5.1), for blocking loops and tests.
//!
//! The socket is non-blocking: [`UdpDriver::receive`] takes what has arrived, at most
//! [`MAX_DATAGRAMS_PER_PASS`], and [`UdpDriver::flush`] sends what the transport queued. How the
//! loop waits (a sleep, `poll(2)` on [`UdpDriver::socket`], a frame tick) is the caller's.

use std::io;
use std::net::{SocketAddr, UdpSocket};

use weft_proto::core::Timestamp;

use super::transport::Transport;

/// The most datagrams one [`UdpDriver::receive`] reads, so a flood cannot starve timers (the same
/// bound as the host loop's events per pass).
pub const MAX_DATAGRAMS_PER_PASS: usize = crate::host::MAX_EVENTS_PER_PASS;

/// The largest datagram read. str0m keeps its datagrams under the path MTU (about 1 200 bytes);
/// anything up to the largest UDP payload is read whole so a bigger one is refused by str0m, not
/// cut short here.
pub const MAX_DATAGRAM_BYTES: usize = 65_535;

/// A [`Transport`] on one UDP socket.
pub struct UdpDriver {
    socket: UdpSocket,
    /// The transport the socket serves.
    pub transport: Transport,
    buf: Vec<u8>,
}

impl UdpDriver {
    /// Binds `addr` and makes a transport whose one host candidate is the bound address, which
    /// therefore must not be a wildcard.
    pub fn bind(now: Timestamp, addr: SocketAddr) -> io::Result<Self> {
        let socket = UdpSocket::bind(addr)?;
        socket.set_nonblocking(true)?;
        let local = socket.local_addr()?;
        if local.ip().is_unspecified() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a wildcard address is no host candidate; bind an interface address",
            ));
        }
        Ok(Self {
            socket,
            transport: Transport::new(now, local, vec![local]),
            buf: vec![0; MAX_DATAGRAM_BYTES],
        })
    }

    /// The socket, for a loop that waits on it.
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Hands the transport what has arrived, at most [`MAX_DATAGRAMS_PER_PASS`] datagrams;
    /// returns how many.
    pub fn receive(&mut self, now: Timestamp) -> io::Result<usize> {
        for n in 0..MAX_DATAGRAMS_PER_PASS {
            match self.socket.recv_from(&mut self.buf) {
                Ok((len, from)) => self.transport.handle_datagram(now, from, &self.buf[..len]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(n),
                // An ICMP error from an earlier send (the peer's port closed) is that peer's
                // problem, not the socket's; str0m's timers notice the silence.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(MAX_DATAGRAMS_PER_PASS)
    }

    /// Sends every datagram the transport queued; returns how many. A datagram the kernel
    /// refuses is lost as UDP may lose it (str0m retransmits what matters); a full socket buffer
    /// loses that one too and stops the flush, and the rest waits for the next.
    pub fn flush(&mut self) -> io::Result<usize> {
        let mut sent = 0;
        while let Some(d) = self.transport.poll_transmit() {
            match self.socket.send_to(&d.bytes, d.to) {
                Ok(_) => sent += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(sent);
                }
                Err(_) => {}
            }
        }
        Ok(sent)
    }
}
