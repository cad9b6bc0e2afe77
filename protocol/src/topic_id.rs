//! Kafka's text form of a topic id: the UUID's 16 bytes in URL-safe base64 without padding
//! (22 characters), as Java's `Uuid.toString()` prints it. The coordinator shard of a mirror
//! partition hashes this text, so it must match Java exactly.

use thiserror::Error;
use uuid::Uuid;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Why a string is not a Kafka topic id.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0:?} is not a topic id: expected 22 characters of URL-safe base64")]
pub struct InvalidTopicId(pub String);

/// Formats a UUID as Kafka does.
pub fn to_kafka_string(id: &Uuid) -> String {
    let bytes = id.as_bytes();
    let mut out = String::with_capacity(22);
    // 16 bytes = five 3-byte groups and one trailing byte.
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 0x3f) as usize]));
        }
    }
    out
}

/// Parses Kafka's text form of a UUID.
pub fn from_kafka_string(s: &str) -> Result<Uuid, InvalidTopicId> {
    let invalid = || InvalidTopicId(s.to_string());
    if s.len() != 22 {
        return Err(invalid());
    }
    let mut bits: u128 = 0;
    for (i, c) in s.bytes().enumerate() {
        let v = ALPHABET.iter().position(|&a| a == c).ok_or_else(invalid)? as u128;
        if i == 21 {
            // The last character carries 2 data bits and 4 zero padding bits.
            if v & 0x0f != 0 {
                return Err(invalid());
            }
            bits = (bits << 2) | (v >> 4);
        } else {
            bits = (bits << 6) | v;
        }
    }
    Ok(Uuid::from_u128(bits))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn matches_java_uuid_to_string() {
        // Values printed by Java's org.apache.kafka.common.Uuid for these bit patterns.
        let id = Uuid::from_u128(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        assert_eq!(to_kafka_string(&id), "ASNFZ4mrze_-3LqYdlQyEA");
        assert_eq!(to_kafka_string(&Uuid::nil()), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(to_kafka_string(&Uuid::max()), "_____________________w");
    }

    #[test]
    fn rejects_what_java_rejects() {
        for bad in [
            "",
            "short",
            "ASNFZ4mrze_-3LqYdlQyE=",
            "ASNFZ4mrze_+3LqYdlQyEA",
            "ASNFZ4mrze_-3LqYdlQyEB",
        ] {
            assert!(from_kafka_string(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn round_trips(raw in any::<u128>()) {
            let id = Uuid::from_u128(raw);
            let text = to_kafka_string(&id);
            prop_assert_eq!(text.len(), 22);
            prop_assert_eq!(from_kafka_string(&text), Ok(id));
        }
    }
}
