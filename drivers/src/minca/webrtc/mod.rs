//! WebRTC data channels through str0m for the Minca mesh (Minca 04 Network §5.1; the channel
//! binding §6.2 signs over; the transport half of §7.3).
//!
//! The [`Mesh`](weft_proto::minca::mesh::Mesh) machine decides who connects and asks a transport
//! for connections through its outputs (`CreateOffer`, `CreateAnswer`, `ApplyAnswer`, `Send`,
//! `Close`); [`Transport`] carries them out with one str0m `Rtc` per connection, all over one UDP
//! socket, and hands back `LocalDescription`, `Opened` (with the channel-binding fingerprints),
//! `Closed` and `Frame` as mesh inputs. It is sans-IO like the machines: the caller moves
//! datagrams and time, so any loop can drive it.
//!
//! - [`fingerprint`]: §5.1 channel binding, a pure function over a description.
//! - [`transport`]: [`Transport`], the connections and the rules of §5.1.
//! - [`turn`]: TURN relay candidates beside str0m (§5.1, §1.4, §10), one allocation per server.
//! - [`udp`]: [`UdpDriver`], one non-blocking std UDP socket moving a transport's datagrams.

pub mod fingerprint;
pub mod transport;
pub mod turn;
pub mod udp;

pub use fingerprint::channel_binding;
pub use transport::{Counters, Datagram, IceTransportPolicy, Transport};
pub use udp::UdpDriver;
