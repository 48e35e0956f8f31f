//! The P-256 key files Minca's programs keep: the always-on node's session key (`weft relay
//! --node-key`, so its DID, and a client's pin on it (§5.2), survive a restart) and a node's
//! account root key (`weft node --key`).
//!
//! One rule for both, the one AIRC's realm key follows ([`crate::airc::realm_key`]): 64 hex
//! digits, whitespace around them ignored; a missing file is made with a fresh key, owner-only
//! from its first byte ([`crate::KEY_MODE`]); a file anyone but its owner may read or write is
//! refused, as ssh refuses a private key.

use std::io;
use std::path::Path;

use weft_proto::core::rand_core::CryptoRng;
use weft_proto::crypto::{CryptoProvider, P256Secret, generate_p256};

/// The key in `path`, or, if there is no file there, a fresh one drawn from `rng` and written
/// there with [`crate::KEY_MODE`]. Refused (`InvalidData`): a file others may read or write, one
/// that is not 64 hex digits, or one whose digits are no P-256 secret key
/// ([`crate::state_dir::load_or_make_key`]).
pub fn load_or_make(
    path: &Path,
    crypto: &dyn CryptoProvider,
    rng: &mut dyn CryptoRng,
) -> io::Result<P256Secret> {
    crate::state_dir::load_or_make_key(
        path,
        |raw| {
            let key = P256Secret::from_bytes(raw);
            crypto
                .p256_public_key(&key)
                .map(|_| key)
                .map_err(|_| "not a P-256 secret key")
        },
        || generate_p256(crypto, rng),
        P256Secret::expose,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::SeedableRng;
    use std::os::unix::fs::PermissionsExt;

    use crate::KEY_MODE;

    #[test]
    fn a_key_file_is_made_once_for_its_owner_and_refused_when_others_may_read_it_or_it_is_no_key() {
        let dir = std::env::temp_dir().join(format!("weft-key-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("node.key");
        let _ = std::fs::remove_file(&path);
        let crypto = weft_proto::crypto::default_provider();
        let mut rng = chacha20::ChaCha20Rng::seed_from_u64(1);
        let made = load_or_make(&path, crypto, &mut rng).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, KEY_MODE);
        let again = load_or_make(&path, crypto, &mut rng).unwrap();
        assert_eq!(again, made, "the DID survives a restart");

        let refused = |path: &Path| {
            let mut rng = chacha20::ChaCha20Rng::seed_from_u64(2);
            let e = load_or_make(path, crypto, &mut rng).unwrap_err();
            (e.kind(), e.to_string())
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let (kind, text) = refused(&path);
        assert_eq!(kind, io::ErrorKind::InvalidData);
        assert!(text.contains("mode 640"), "{text}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        for (content, why) in [
            ("not hex\n", "not 64 hex digits"),
            (&"00".repeat(32)[..], "not a P-256 secret key"),
            (&"ff".repeat(32)[..], "not a P-256 secret key"),
        ] {
            std::fs::write(&path, content).unwrap();
            let (kind, text) = refused(&path);
            assert_eq!(kind, io::ErrorKind::InvalidData);
            assert!(text.ends_with(why), "{content}: {text}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
