//! AIRC on real sockets: the realm server as a host machine ([`host`]), `weft airc serve`
//! ([`serve`], configured by [`config`]) with its durable [`store`], its peer face over TLS and
//! QUIC ([`peer`]) and signing key ([`realm_key`]), and the client commands ([`client`]).
//!
//! Everything AIRC means lives in `weft_proto::airc`; these modules move bytes, time and records.

pub mod client;
pub mod config;
pub mod dns;
pub mod host;
pub mod peer;
pub mod realm_key;
pub mod serve;
pub mod store;
