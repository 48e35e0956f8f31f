//! A test certificate authority for the TLS and QUIC tests, made with rcgen.

#![allow(dead_code)]

use std::path::Path;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use weft_drivers::airc::config::TlsFiles;

/// A test CA: its PEM, and what it needs to sign leaf certificates.
pub(crate) struct Ca {
    /// The CA certificate, PEM.
    pub(crate) pem: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    /// A fresh CA.
    pub(crate) fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Self {
            pem: issuer.pem(),
            issuer,
        }
    }

    /// Writes a certificate for `host` and its key under `dir`, and this CA as `ca.pem`.
    pub(crate) fn files(&self, dir: &Path, host: &str) -> TlsFiles {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![host.to_string()])
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        let files = TlsFiles {
            cert: Some(dir.join("cert.pem")),
            key: Some(dir.join("key.pem")),
            trust: Some(dir.join("ca.pem")),
        };
        std::fs::write(files.cert.as_ref().unwrap(), cert.pem()).unwrap();
        std::fs::write(files.key.as_ref().unwrap(), key.serialize_pem()).unwrap();
        std::fs::write(files.trust.as_ref().unwrap(), &self.pem).unwrap();
        files
    }
}
