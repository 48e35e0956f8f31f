//! weft-drivers (being written)
