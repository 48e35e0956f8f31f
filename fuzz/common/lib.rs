//! What more than one fuzz target needs: the driving of a machine through time, and a crypto
//! provider that remembers P-256 answers. A library of the fuzz crate so each target takes what
//! it uses and nothing is compiled twice.

pub mod advance;
pub mod memo_crypto;
