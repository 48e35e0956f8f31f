//! TLS for the host layer: the certificate a listener presents and the trust store a dialler
//! verifies against, on rustls with its ring provider.
//!
//! A machine never sees TLS: an [`Endpoint::Tls`](crate::host::Endpoint) or
//! [`Endpoint::Quic`](crate::host::Endpoint) names where to dial and which host name the
//! accepting side's certificate must carry, and a [`Listener::Tls`](crate::host::Listener) or
//! [`Listener::Quic`](crate::host::Listener) carries the certificate it presents. The adapter
//! runs the handshake before it reports the connection open, so a failed verification is a failed
//! dial and an accepted connection's first bytes are already plaintext (AIRC §8.3: "the dialler
//! verifies the accepting server's certificate for the resolved target host against its trust
//! store").
//!
//! Certificates, keys and trust anchors are read from PEM files, the form every CA and
//! `openssl` hands out. The dialler's default trust store is the Mozilla root program
//! (`webpki-roots`), so a build behaves the same on every host; a CA file replaces it for private
//! deployments and tests.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// How long a TLS or QUIC handshake may take, on either side, before the connection is dropped
/// (a dial then fails). It bounds how long a peer that opens a socket and says nothing holds a
/// handshake slot.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most handshakes a TLS or QUIC listener runs at once; a connection beyond it is dropped
/// unanswered, so a flood of half-open connections costs a bounded amount of memory.
pub const MAX_PENDING_HANDSHAKES: usize = 256;

/// The ALPN protocol a QUIC peer link negotiates (QUIC requires one, RFC 9001 §8.1): the wire
/// version AIRC's hello carries.
pub const QUIC_ALPN: &[u8] = weft_proto::airc::frame::PROTO.as_bytes();

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn invalid(what: impl fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Reads a PEM file, naming it in any error.
fn read_pem(path: &Path) -> io::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// What a listener presents: a certificate chain and its private key.
#[derive(Clone)]
pub struct TlsServer {
    config: Arc<rustls::ServerConfig>,
}

impl fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key stays out of logs.
        f.write_str("TlsServer")
    }
}

impl TlsServer {
    /// From PEM text: `chain` holds the certificate first, then any intermediates; `key` holds
    /// one private key (PKCS#8, PKCS#1 or SEC1).
    pub fn from_pem(chain: &[u8], key: &[u8]) -> io::Result<Self> {
        let certs = CertificateDer::pem_slice_iter(chain)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(format!("certificate: {e}")))?;
        if certs.is_empty() {
            return Err(invalid("certificate: no CERTIFICATE block"));
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| invalid(format!("key: {e}")))?;
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(invalid)?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| invalid(format!("certificate and key: {e}")))?;
        Ok(Self {
            config: Arc::new(config),
        })
    }

    /// From PEM files.
    pub fn from_files(chain: &Path, key: &Path) -> io::Result<Self> {
        Self::from_pem(&read_pem(chain)?, &read_pem(key)?)
    }

    /// The rustls configuration for TLS over TCP.
    pub fn config(&self) -> Arc<rustls::ServerConfig> {
        self.config.clone()
    }

    /// The same certificate for QUIC, with [`QUIC_ALPN`].
    pub fn quic(&self) -> io::Result<quinn::ServerConfig> {
        let mut tls = (*self.config).clone();
        tls.alpn_protocols = vec![QUIC_ALPN.to_vec()];
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).map_err(invalid)?;
        let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        config.transport_config(transport());
        Ok(config)
    }
}

/// What a dialler trusts: the roots a certificate must chain to.
#[derive(Clone)]
pub struct TlsClient {
    config: Arc<rustls::ClientConfig>,
}

impl fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsClient")
    }
}

/// Two clients are the same when they share one configuration: trust stores are not compared
/// root by root.
impl PartialEq for TlsClient {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.config, &other.config)
    }
}

impl Eq for TlsClient {}

impl TlsClient {
    /// Trusting the Mozilla root program, as shipped in `webpki-roots`.
    pub fn webpki_roots() -> Self {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        Self::with_roots(roots)
    }

    /// Trusting exactly the CA certificates in PEM text.
    pub fn from_pem(cas: &[u8]) -> io::Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(cas) {
            let cert = cert.map_err(|e| invalid(format!("trust: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| invalid(format!("trust: {e}")))?;
        }
        if roots.is_empty() {
            return Err(invalid("trust: no CERTIFICATE block"));
        }
        Ok(Self::with_roots(roots))
    }

    /// Trusting exactly the CA certificates in a PEM file.
    pub fn from_file(path: &Path) -> io::Result<Self> {
        Self::from_pem(&read_pem(path)?).map_err(|e| invalid(format!("{}: {e}", path.display())))
    }

    fn with_roots(roots: rustls::RootCertStore) -> Self {
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring's default provider supports the safe default versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Self {
            config: Arc::new(config),
        }
    }

    /// The rustls configuration for TLS over TCP.
    pub fn config(&self) -> Arc<rustls::ClientConfig> {
        self.config.clone()
    }

    /// The same trust for QUIC, with [`QUIC_ALPN`].
    pub fn quic(&self) -> io::Result<quinn::ClientConfig> {
        let mut tls = (*self.config).clone();
        tls.alpn_protocols = vec![QUIC_ALPN.to_vec()];
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(invalid)?;
        let mut config = quinn::ClientConfig::new(Arc::new(crypto));
        config.transport_config(transport());
        Ok(config)
    }
}

/// How often an idle QUIC link sends a keep-alive, well inside quinn's 30 s idle timeout: a link
/// stays up until the machine closes it (AIRC §8.4 lets a server close a dialled link idle for
/// 600 s; that is the machine's decision, not the transport's).
pub const QUIC_KEEP_ALIVE: Duration = Duration::from_secs(10);

/// How long a QUIC link may hear nothing (not even a keep-alive) before quinn ends it: three
/// keep-alives missed. quinn's own default (30 s) would do; it is set here so that it is a named
/// choice and not a library's.
pub const QUIC_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The bidirectional streams a peer may open on one QUIC connection: one, the link (an AIRC peer
/// link is one ordered byte stream, §3.1). A peer opening more gets no credit for them.
pub const QUIC_MAX_BIDI_STREAMS: u32 = 1;

/// How many bytes a peer may have in flight on the link's stream, and on the whole connection:
/// one largest frame. The machine reads a frame at a time, so a larger window is only memory a
/// peer could fill.
pub const QUIC_RECEIVE_WINDOW: u32 = weft_proto::airc::framing::MAX_FRAME_BYTES as u32;

/// The transport settings of every QUIC connection, dialled or accepted: one bidirectional
/// stream, no unidirectional ones, receive windows of one frame, an idle timeout, keep-alives.
pub fn transport() -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.keep_alive_interval(Some(QUIC_KEEP_ALIVE));
    t.max_concurrent_bidi_streams(QUIC_MAX_BIDI_STREAMS.into());
    t.max_concurrent_uni_streams(0u32.into());
    t.stream_receive_window(QUIC_RECEIVE_WINDOW.into());
    t.receive_window(QUIC_RECEIVE_WINDOW.into());
    t.max_idle_timeout(Some(
        QUIC_IDLE_TIMEOUT
            .try_into()
            .expect("30 s is a valid QUIC idle timeout"),
    ));
    Arc::new(t)
}

/// Where a TLS or QUIC dial goes and what it verifies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecureDial {
    /// The address to connect to.
    pub addr: std::net::SocketAddr,
    /// The host name (or IP address) the accepting side's certificate must be valid for.
    pub name: ServerName<'static>,
    /// The trust store.
    pub client: TlsClient,
}

impl SecureDial {
    /// A dial to `addr` verifying `name` (a DNS name or an IP literal) against `client`.
    pub fn new(addr: std::net::SocketAddr, name: &str, client: TlsClient) -> io::Result<Self> {
        let name = ServerName::try_from(name.to_string())
            .map_err(|e| invalid(format!("{name:?} is not a host name: {e}")))?;
        Ok(Self { addr, name, client })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trust_file_without_a_certificate_is_refused() {
        let err = TlsClient::from_pem(b"not a pem").unwrap_err();
        assert!(err.to_string().contains("no CERTIFICATE"), "{err}");
    }

    #[test]
    fn a_listener_without_its_key_is_refused() {
        let err = TlsServer::from_pem(b"", b"").unwrap_err();
        assert!(err.to_string().contains("certificate"), "{err}");
    }

    #[test]
    fn a_dial_name_must_be_a_host_name_or_an_ip() {
        let addr = "127.0.0.1:1".parse().unwrap();
        let client = TlsClient::webpki_roots();
        assert!(SecureDial::new(addr, "b.example", client.clone()).is_ok());
        assert!(SecureDial::new(addr, "127.0.0.1", client.clone()).is_ok());
        assert!(SecureDial::new(addr, "not a name", client).is_err());
    }
}
