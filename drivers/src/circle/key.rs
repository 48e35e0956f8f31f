//! The user's circle key file: one secp256k1 secret as 64 hex digits (whitespace around them
//! ignored), the rule every weft key file follows (as [`crate::minca::key_file`]): a missing
//! file is made with a fresh key, owner-only from its first byte ([`crate::KEY_MODE`]); a file
//! anyone but its owner may read or write is refused, as ssh refuses a private key.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use weft_proto::codec::hex;
use weft_proto::core::rand_core::CryptoRng;
use weft_proto::crypto::{CryptoProvider, Secp256k1Secret, generate_secp256k1};

use crate::KEY_MODE;

fn invalid(path: &Path, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {what}", path.display()),
    )
}

/// The key in `path`, or a fresh one written there (owner-only) when there is no file.
pub fn load_or_make(
    path: &Path,
    crypto: &dyn CryptoProvider,
    rng: &mut dyn CryptoRng,
) -> io::Result<Secp256k1Secret> {
    match std::fs::metadata(path) {
        Ok(meta) => {
            let mode = meta.permissions().mode();
            if mode & 0o077 != 0 {
                return Err(invalid(
                    path,
                    format!(
                        "mode {:o}: a key must be readable by its owner only (chmod 600)",
                        mode & 0o777
                    ),
                ));
            }
            let text = std::fs::read_to_string(path)?;
            let bytes = hex::decode_array::<32>(text.trim())
                .map_err(|_| invalid(path, "not 64 hex digits"))?;
            let key = Secp256k1Secret::from_bytes(bytes);
            crypto
                .schnorr_public_key(&key)
                .map_err(|_| invalid(path, "not a secp256k1 secret key"))?;
            Ok(key)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let key = generate_secp256k1(crypto, rng);
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(KEY_MODE)
                .open(path)?;
            file.write_all(format!("{}\n", hex::encode(key.expose())).as_bytes())?;
            file.sync_all()?;
            Ok(key)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
