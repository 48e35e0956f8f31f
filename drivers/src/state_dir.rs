//! A server's state directory and the files in it, private to the account that runs it.
//!
//! What a server keeps (spooled bodies, links, the audit stream, events, keys) is nobody else's
//! to read: the directory is created `0700` and every file `0600`, at creation, so nothing is
//! readable by others even for a moment; a directory or file that already exists with read or
//! write bits for anyone else, or that another account owns, is refused at start with the
//! command that fixes it, never silently changed.
//!
//! One exception keeps §5 of AIRC working: when the server's client socket lives inside the
//! directory (its default), other users must reach that socket by name, so the directory is
//! created `0711`, which lets them pass through it but not list or read it.

use std::fs::{DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode a state directory is created with.
pub const DIR_MODE: u32 = 0o700;

/// The mode of a state directory that holds a socket other users connect to: they may pass
/// through it to the socket's name, not list or read it.
pub const DIR_MODE_WITH_SOCKET: u32 = 0o711;

/// The mode every state file is created with.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` (and any missing parents) with [`DIR_MODE`], or [`DIR_MODE_WITH_SOCKET`] when
/// `holds_socket`; an existing one is checked: it must be a directory this account owns that
/// nobody else may read or write.
pub fn prepare_dir(dir: &Path, holds_socket: bool) -> io::Result<()> {
    if !dir.exists() {
        let mode = if holds_socket {
            DIR_MODE_WITH_SOCKET
        } else {
            DIR_MODE
        };
        DirBuilder::new().recursive(true).mode(mode).create(dir)?;
    }
    let meta = std::fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(refused(dir, "is not a directory".into()));
    }
    check_owner_and_mode(dir, &meta, 0o066, "chmod 700")
}

/// Creates `file` empty with [`FILE_MODE`] if it does not exist; an existing one must be this
/// account's and readable and writable by it alone.
pub fn prepare_file(file: &Path) -> io::Result<()> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(file)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let meta = std::fs::metadata(file)?;
            check_owner_and_mode(file, &meta, 0o077, "chmod 600")
        }
        Err(e) => Err(e),
    }
}

fn check_owner_and_mode(
    path: &Path,
    meta: &std::fs::Metadata,
    forbidden: u32,
    fix: &str,
) -> io::Result<()> {
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(refused(
            path,
            format!(
                "is owned by uid {}, not by this server's uid {me} (chown {me} {})",
                meta.uid(),
                path.display()
            ),
        ));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & forbidden != 0 {
        return Err(refused(
            path,
            format!(
                "has mode {mode:o}: other users could read or change the server's state ({fix} {})",
                path.display()
            ),
        ));
    }
    Ok(())
}

fn refused(path: &Path, why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{}: {why}", path.display()),
    )
}

/// The rule every weft key file follows: 64 hex digits, whitespace around them ignored. The key
/// in `path` as `parse` reads its 32 bytes (its `Err` names what they are not), or, when there is
/// no file there, `fresh()` written there with [`crate::KEY_MODE`] (`bytes` gives what to write),
/// owner-only from its first byte. Refused (`InvalidData`): a file others may read or write (as
/// ssh refuses a private key), one that is not 64 hex digits, or one `parse` refuses.
pub fn load_or_make_key<K>(
    path: &Path,
    parse: impl FnOnce([u8; 32]) -> Result<K, &'static str>,
    fresh: impl FnOnce() -> K,
    bytes: impl FnOnce(&K) -> &[u8; 32],
) -> io::Result<K> {
    let invalid = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {what}", path.display()),
        )
    };
    match std::fs::metadata(path) {
        Ok(meta) => {
            let mode = meta.permissions().mode();
            if mode & 0o077 != 0 {
                return Err(invalid(&format!(
                    "mode {:o}: a key must be readable by its owner only (chmod 600)",
                    mode & 0o777
                )));
            }
            let text = std::fs::read_to_string(path)?;
            let raw = weft_proto::codec::hex::decode_array::<32>(text.trim())
                .map_err(|_| invalid("not 64 hex digits"))?;
            parse(raw).map_err(invalid)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let key = fresh();
            // create_new: two programs starting on one path must not both write a key.
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(crate::KEY_MODE)
                .open(path)?;
            writeln!(file, "{}", weft_proto::codec::hex::encode(bytes(&key)))?;
            file.sync_all()?;
            Ok(key)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::Permissions;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("weft-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_directory_and_file_are_private_from_the_start() {
        let dir = scratch("new").join("nested");
        prepare_dir(&dir, false).unwrap();
        assert_eq!(mode(&dir), DIR_MODE);
        let file = dir.join("state.db");
        prepare_file(&file).unwrap();
        assert_eq!(mode(&file), FILE_MODE);
        // Opening again is fine.
        prepare_dir(&dir, false).unwrap();
        prepare_file(&file).unwrap();
        let with_socket = scratch("socket");
        prepare_dir(&with_socket, true).unwrap();
        assert_eq!(mode(&with_socket), DIR_MODE_WITH_SOCKET);
    }

    #[test]
    fn a_directory_others_can_read_or_write_is_refused_with_the_fix() {
        let dir = scratch("open");
        std::fs::create_dir_all(&dir).unwrap();
        for open in [0o755, 0o750, 0o705, 0o722, 0o777] {
            std::fs::set_permissions(&dir, Permissions::from_mode(open)).unwrap();
            let err = prepare_dir(&dir, true).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{open:o}");
            assert!(err.to_string().contains("chmod 700"), "{err}");
        }
        std::fs::set_permissions(&dir, Permissions::from_mode(0o711)).unwrap();
        prepare_dir(&dir, true).unwrap();
    }

    #[test]
    fn a_file_others_can_read_or_write_is_refused_with_the_fix() {
        let dir = scratch("file");
        prepare_dir(&dir, false).unwrap();
        let file = dir.join("airc.redb");
        std::fs::write(&file, b"").unwrap();
        for open in [0o644, 0o640, 0o604, 0o660, 0o601] {
            std::fs::set_permissions(&file, Permissions::from_mode(open)).unwrap();
            let err = prepare_file(&file).unwrap_err();
            assert!(err.to_string().contains("chmod 600"), "{open:o}: {err}");
        }
        std::fs::set_permissions(&file, Permissions::from_mode(0o600)).unwrap();
        prepare_file(&file).unwrap();
    }

    #[test]
    fn a_file_another_account_owns_is_refused() {
        if rustix::process::geteuid().as_raw() != 0 {
            println!("SKIP: changing a file's owner needs root");
            return;
        }
        let dir = scratch("owner");
        prepare_dir(&dir, false).unwrap();
        let file = dir.join("theirs");
        prepare_file(&file).unwrap();
        std::os::unix::fs::chown(&file, Some(64_002), None).unwrap();
        let err = prepare_file(&file).unwrap_err();
        assert!(err.to_string().contains("owned by uid 64002"), "{err}");
    }
}
