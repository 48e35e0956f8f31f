//! weft-sim (being written)
