//! The realm's Ed25519 signing key (AIRC §9.1) on disk.
//!
//! A server with no key configured makes one on first start and keeps it in the data directory
//! ([`KEY_FILE`]), readable by its owner only, so the realm's published key (§8.2's TXT record)
//! stays valid across restarts. The file is PKCS#8 in PEM (RFC 8410), the form
//! `openssl genpkey -algorithm ed25519` writes, so an operator may bring their own key.
//!
//! A key file that anyone but its owner may read or write is refused, as ssh refuses a private
//! key: a signing key others can read is no longer the realm's alone.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use weft_proto::codec::base64;
use weft_proto::core::rand_core::CryptoRng;
use weft_proto::crypto::{CryptoProvider, Ed25519Seed, generate_ed25519};

/// The key's file name inside the data directory, when the configuration names no key.
pub const KEY_FILE: &str = "realm.key";

pub use crate::KEY_MODE;

/// The DER of an Ed25519 PKCS#8 v1 private key up to the 32 seed bytes (RFC 8410 §7):
/// SEQUENCE { INTEGER 0, SEQUENCE { OID 1.3.101.112 }, OCTET STRING { OCTET STRING (32) } }.
const PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

const PEM_BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
const PEM_END: &str = "-----END PRIVATE KEY-----";

fn invalid(path: &Path, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {what}", path.display()),
    )
}

/// The PEM text of `seed`.
pub fn to_pem(seed: &Ed25519Seed) -> String {
    let mut der = PKCS8_PREFIX.to_vec();
    der.extend_from_slice(seed.expose());
    format!("{PEM_BEGIN}\n{}\n{PEM_END}\n", base64::encode(&der))
}

/// The seed in PEM text, or why it is not an Ed25519 PKCS#8 key.
pub fn from_pem(text: &str) -> Result<Ed25519Seed, String> {
    let body = text
        .trim()
        .strip_prefix(PEM_BEGIN)
        .and_then(|rest| rest.strip_suffix(PEM_END))
        .ok_or("not a PEM \"PRIVATE KEY\" block")?;
    let b64: String = body.split_whitespace().collect();
    let der = base64::decode(&b64).map_err(|_| "its body is not base64")?;
    match der.strip_prefix(&PKCS8_PREFIX[..]) {
        Some(seed) => Ok(Ed25519Seed::from_bytes(
            seed.try_into().map_err(|_| "not an Ed25519 PKCS#8 key")?,
        )),
        None => Err("not an Ed25519 PKCS#8 key".into()),
    }
}

/// Reads the key at `path`, or, if there is no file there, makes one with `rng` and writes it
/// with [`KEY_MODE`]. A file others may read or write is refused.
pub fn load_or_create(path: &Path, rng: &mut dyn CryptoRng) -> io::Result<Ed25519Seed> {
    match std::fs::metadata(path) {
        Ok(meta) => {
            if meta.permissions().mode() & 0o077 != 0 {
                return Err(invalid(
                    path,
                    format!(
                        "mode {:o}: a signing key must be readable by its owner only (chmod 600)",
                        meta.permissions().mode() & 0o777
                    ),
                ));
            }
            let text = std::fs::read_to_string(path).map_err(|e| invalid(path, e))?;
            from_pem(&text).map_err(|e| invalid(path, e))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let seed = generate_ed25519(rng);
            // create_new: two servers starting on one directory must not both write a key. The
            // mode is set at creation, so the key is never readable by others, even briefly.
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(KEY_MODE)
                .open(path)
                .map_err(|e| invalid(path, e))?;
            file.write_all(to_pem(&seed).as_bytes())?;
            file.sync_all()?;
            Ok(seed)
        }
        Err(e) => Err(invalid(path, e)),
    }
}

/// The TXT record a realm publishes for `seed` at `_airc.<realm>` (§8.2).
pub fn txt_record(provider: &dyn CryptoProvider, seed: &Ed25519Seed) -> String {
    let public = provider.ed25519_public_key(seed);
    format!("v=airc1 k=ed25519 p={}", base64::encode(&public))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::SeedableRng;

    fn rng() -> chacha20::ChaCha20Rng {
        chacha20::ChaCha20Rng::seed_from_u64(4)
    }

    /// §18.2's DNS vector: the record the server tells operators to publish for the vector's
    /// seed is the spec's, byte for byte, and the resolver's parser reads back the same key.
    #[test]
    fn the_txt_record_to_publish_is_the_spec_vector_and_parses_back_to_the_key() {
        let vector: serde_json::Value =
            serde_json::from_str(include_str!("../../../vectors/airc/dns-txt.json")).unwrap();
        let seed: [u8; 32] = base64::decode(vector["seed_base64"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        let provider = weft_proto::crypto::default_provider();
        let record = txt_record(provider, &Ed25519Seed::from_bytes(seed));
        assert_eq!(record, vector["txt"].as_str().unwrap());
        let parsed = weft_proto::airc::discovery::keys_from_txt(&[&record]);
        assert_eq!(
            parsed,
            [provider.ed25519_public_key(&Ed25519Seed::from_bytes(seed))]
        );
    }

    fn dir(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("weft-realm-key-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_key_made_on_first_start_is_owner_only_and_the_same_on_the_next() {
        let path = dir("stable").join(KEY_FILE);
        let first = load_or_create(&path, &mut rng()).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Another generator would make another key: the second start reads the file.
        let mut other = chacha20::ChaCha20Rng::seed_from_u64(5);
        let again = load_or_create(&path, &mut other).unwrap();
        assert_eq!(first.expose(), again.expose());
    }

    #[test]
    fn a_key_file_others_may_read_is_refused() {
        let path = dir("open").join(KEY_FILE);
        load_or_create(&path, &mut rng()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = load_or_create(&path, &mut rng()).unwrap_err();
        assert!(err.to_string().contains("chmod 600"), "{err}");
    }

    #[test]
    fn the_pem_form_is_rfc_8410_pkcs8() {
        // RFC 8410 §10.3's example private key.
        let pem = "-----BEGIN PRIVATE KEY-----\n\
                   MC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC\n\
                   -----END PRIVATE KEY-----\n";
        let seed = from_pem(pem).unwrap();
        assert_eq!(
            weft_proto::codec::hex::encode(seed.expose()),
            "d4ee72dbf913584ad5b6d8f1f769f8ad3afe7c28cbf1d4fbe097a88f44755842"
        );
        assert_eq!(to_pem(&seed), pem);
        for bad in [
            "",
            "-----BEGIN PRIVATE KEY-----\n!!\n-----END PRIVATE KEY-----",
            &pem.replace("MC4CAQAw", "MC4CAQEw"),
        ] {
            assert!(from_pem(bad).is_err(), "{bad}");
        }
    }
}
