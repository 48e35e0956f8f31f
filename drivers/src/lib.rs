//! weft-drivers (being written)

#[cfg(feature = "fast-crypto")]
pub mod fast_crypto;
