//! The specs' test vectors live in this folder as data files; `tests/replay.rs` replays them.
