//! The user's circle key file: one secp256k1 secret as 64 hex digits (whitespace around them
//! ignored), the rule every weft key file follows (as [`crate::minca::key_file`]): a missing
//! file is made with a fresh key, owner-only from its first byte ([`crate::KEY_MODE`]); a file
//! anyone but its owner may read or write is refused, as ssh refuses a private key.

use std::io;
use std::path::Path;

use weft_proto::core::rand_core::CryptoRng;
use weft_proto::crypto::{CryptoProvider, Secp256k1Secret, generate_secp256k1};

/// The key in `path`, or a fresh one written there (owner-only) when there is no file
/// ([`crate::state_dir::load_or_make_key`]).
pub fn load_or_make(
    path: &Path,
    crypto: &dyn CryptoProvider,
    rng: &mut dyn CryptoRng,
) -> io::Result<Secp256k1Secret> {
    crate::state_dir::load_or_make_key(
        path,
        |raw| {
            let key = Secp256k1Secret::from_bytes(raw);
            crypto
                .schnorr_public_key(&key)
                .map(|_| key)
                .map_err(|_| "not a secp256k1 secret key")
        },
        || generate_secp256k1(crypto, rng),
        Secp256k1Secret::expose,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use weft_proto::core::rand_core::SeedableRng;

    #[test]
    fn a_key_is_made_owner_only_read_back_and_refused_when_others_may_read_it() {
        let dir = std::env::temp_dir().join(format!("weft-circle-key-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("k");
        let p = crate::server_provider();
        let mut rng = chacha20::ChaCha20Rng::seed_from_u64(1);
        let a = load_or_make(&path, p, &mut rng).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let b = load_or_make(&path, p, &mut rng).unwrap();
        assert_eq!(a.expose(), b.expose());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(load_or_make(&path, p, &mut rng).is_err());
        std::fs::write(dir.join("bad"), "zz").unwrap();
        std::fs::set_permissions(dir.join("bad"), std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(load_or_make(&dir.join("bad"), p, &mut rng).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
