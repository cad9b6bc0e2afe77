//! The KIP-1279 requests, responses, coordinator records and control-record values, generated at
//! build time from `protocol/schemas/*.json` by `protocol/build.rs`.
//!
//! Each schema becomes a module (`create_mirror_request`, ...) holding the top-level type and its
//! nested structs; the top-level type is re-exported here. Every type implements
//! [`WireFormat`](crate::codec::WireFormat) for any version the schema defines. Requests and
//! responses also implement kafka-protocol's `Message`, `Encodable`, `Decodable`, `HeaderVersion`
//! (and `Request`), so the broker frames them exactly like Kafka's own APIs.
//!
//! Contract of the encoding, per Kafka's generator: a field outside its `versions` must hold its
//! default unless it is `ignorable`; a null is only accepted within `nullableVersions`; tagged
//! fields equal to their default are not written; unknown tagged fields are kept and re-written.

use crate::codec::CodecError;

include!(concat!(env!("OUT_DIR"), "/messages.rs"));

#[cfg(test)]
mod tests;
