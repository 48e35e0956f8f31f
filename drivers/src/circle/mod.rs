//! `weft circle`: the NAP-MESH shell of [`weft_proto::circle`] as a program.
//!
//! - [`config`]: `--config FILE` (TOML, unknown keys refused): the faces, the caps, the napplets
//!   with their tokens and grants, the member links to dial;
//! - [`key`]: the user's circle key in a file only its owner may read;
//! - [`serve`]: `weft circle serve`, the shell over the WebSocket layer, the embedded store and
//!   the blob directory;
//! - [`run`]: binding, starting and stopping it, and the control client the commands use;
//! - [`cli`]: the `weft circle` and `weft sim circle` commands.
//!
//! Every decision is the shell's or the link proof's ([`weft_proto::circle::link`]); this module
//! maps sockets, files and time to their inputs and outputs.

use std::io;
use std::path::Path;

pub mod cli;
pub mod config;
pub mod key;
pub mod run;
pub mod serve;

/// Writes `text` to `path`, owner-only from its first byte (replacing a file there).
pub fn write_private(path: &Path, text: &str) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(crate::KEY_MODE)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(tmp, path)
}
