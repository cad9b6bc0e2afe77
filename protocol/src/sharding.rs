//! Routing to `__mirror_state` coordinator shards (docs/design.md §8).
//!
//! Java brokers and kmirror must agree on every shard, so the hash is Java's `String.hashCode`
//! (over UTF-16 code units, wrapping `i32` arithmetic) and the absolute value is Kafka's
//! `Utils.abs`, which maps `i32::MIN` to 0 instead of overflowing.

use crate::topic_id::to_kafka_string;
use uuid::Uuid;

/// Java's `String.hashCode`: `s[0]*31^(n-1) + ... + s[n-1]` over UTF-16 code units, wrapping.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// Kafka's `Utils.abs`: the absolute value, with `i32::MIN` mapped to 0.
pub fn kafka_abs(n: i32) -> i32 {
    if n == i32::MIN { 0 } else { n.abs() }
}

/// The `__mirror_state` partition holding a mirror partition's records:
/// `abs(java_hash(mirrorName + ":" + topicId + ":" + partition)) % num_partitions`.
///
/// `num_partitions` must be positive (it is a validated broker config).
pub fn mirror_partition_shard(
    mirror_name: &str,
    topic_id: &Uuid,
    partition: i32,
    num_partitions: i32,
) -> i32 {
    let key = format!("{mirror_name}:{}:{partition}", to_kafka_string(topic_id));
    kafka_abs(java_string_hash(&key)) % num_partitions
}

/// The `__mirror_state` partition whose leader runs a mirror's mirror-level work:
/// `abs(java_hash(mirrorName)) % num_partitions`.
pub fn mirror_shard(mirror_name: &str, num_partitions: i32) -> i32 {
    kafka_abs(java_string_hash(mirror_name)) % num_partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_goldens() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(kafka_abs(java_string_hash("polygenelubricants")), 0);
        assert_eq!(mirror_shard("polygenelubricants", 50), 0);
    }

    /// Printed by Java 17's `String.hashCode` for the same strings.
    #[test]
    fn shards_match_java() {
        let id = crate::topic_id::from_kafka_string("ASNFZ4mrze_-3LqYdlQyEA").expect("valid id");
        assert_eq!(
            java_string_hash("dr:ASNFZ4mrze_-3LqYdlQyEA:7"),
            -1_179_385_960
        );
        assert_eq!(mirror_partition_shard("dr", &id, 7, 50), 10);
        // Non-ASCII names hash by UTF-16 code units, surrogate pairs included.
        assert_eq!(
            java_string_hash("миррор-€:AAAAAAAAAAAAAAAAAAAAAA:0"),
            -1_791_943_277
        );
        assert_eq!(mirror_partition_shard("миррор-€", &Uuid::nil(), 0, 50), 27);
        assert_eq!(java_string_hash("\u{1F600}emoji"), -1_233_692_477);
        assert_eq!(java_string_hash("us-east"), -199_235_124);
        assert_eq!(mirror_shard("us-east", 50), 24);
    }
}
