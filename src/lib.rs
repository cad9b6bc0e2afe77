//! kmirror: the reference broker runtime that embeds the KIP-1279 mirroring engine.
//!
//! - [`storage`]: durable partition logs of raw record batches.

pub mod storage;
