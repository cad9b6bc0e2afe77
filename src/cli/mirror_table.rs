//! The mirror table `kmirror mirrors --describe` prints (and `--watch` and `kmirror quickstart`
//! refresh): one row per mirror partition with its state, the source's and the destination's
//! offsets, the lag in records and in time, the rate the destination grew at since the
//! previous refresh, the records truncations removed, the offsets the source deleted before
//! they were mirrored (skipped), the retry attempt and a note.
//!
//! A figure that is not known shows `-`, never a number: the lag of a partition that fetches
//! nothing (PAUSED, STOPPED) or whose source did not answer. The note then says why, unless the
//! partition has an error of its own. [`json`] is the same content for `--json`.

use kmirror_protocol::messages::DescribeMirrorsResponse;
use kmirror_protocol::messages::describe_mirrors_response::DescribedPartition;
use std::collections::HashMap;
use std::fmt::Write;
use std::time::Instant;

/// Destination offsets seen at a refresh, to compute rates at the next one.
#[derive(Debug, Default)]
pub(crate) struct Previous {
    at: Option<Instant>,
    offsets: HashMap<(String, String, i32), i64>,
}

/// What the ERROR column says of a partition: its error, or why a figure is missing.
fn note(p: &DescribedPartition) -> String {
    if let Some(error) = &p.error_message {
        return error.clone();
    }
    match p.state.as_str() {
        "STOPPED" => "stopped (failed over): not mirroring, the topic is writable".into(),
        "STOPPING" => "stopping".into(),
        "PAUSED" | "PAUSING" => "paused: not fetching".into(),
        _ if p.lag < 0 => "the source's offset is not known (it did not answer in time)".into(),
        _ => String::new(),
    }
}

/// A count, or `-` when negative (unknown).
fn known(value: i64) -> String {
    if value < 0 {
        "-".into()
    } else {
        value.to_string()
    }
}

/// A lag in time, `-` when unknown: milliseconds below a second, then seconds, minutes, hours.
fn duration(ms: i64) -> String {
    match ms {
        ..0 => "-".into(),
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{:.1}s", ms as f64 / 1e3),
        60_000..3_600_000 => format!("{:.1}m", ms as f64 / 6e4),
        _ => format!("{:.1}h", ms as f64 / 3.6e6),
    }
}

/// The lag a row shows: none for partitions that fetch nothing.
fn lag(p: &DescribedPartition) -> (i64, i64) {
    match p.state.as_str() {
        "STOPPED" | "STOPPING" | "PAUSED" | "PAUSING" => (-1, -1),
        _ => (p.lag, p.lag_time_ms),
    }
}

/// The table of `answer`; the rate column compares with `previous` (then updated).
pub(crate) fn render(answer: &DescribeMirrorsResponse, previous: &mut Previous) -> String {
    let now = Instant::now();
    let elapsed = previous.at.map(|at| now.duration_since(at).as_secs_f64());
    let mut out = format!(
        "{:<16} {:<32} {:>9} {:<10} {:>12} {:>12} {:>10} {:>9} {:>10} {:>9} {:>9} {:>6}  ERROR\n",
        "MIRROR",
        "TOPIC",
        "PARTITION",
        "STATE",
        "SRC-OFFSET",
        "DEST-OFFSET",
        "LAG",
        "LAG-TIME",
        "RECORDS/S",
        "TRUNCATED",
        "SKIPPED",
        "RETRY"
    );
    let mut seen = HashMap::new();
    for m in &answer.mirrors {
        for t in &m.topics {
            for p in &t.partitions {
                let key = (
                    m.mirror_name.clone(),
                    t.topic_name.clone(),
                    p.partition_index,
                );
                let rate = match (elapsed, previous.offsets.get(&key)) {
                    (Some(seconds), Some(before)) if seconds > 0.0 => {
                        format!(
                            "{:.0}",
                            (p.destination_offset - before).max(0) as f64 / seconds
                        )
                    }
                    _ => "-".to_string(),
                };
                seen.insert(key, p.destination_offset);
                let (records, ms) = lag(p);
                let _ = writeln!(
                    out,
                    "{:<16} {:<32} {:>9} {:<10} {:>12} {:>12} {:>10} {:>9} {:>10} {:>9} {:>9} {:>6}  {}",
                    m.mirror_name,
                    t.topic_name,
                    p.partition_index,
                    p.state,
                    known(p.source_offset),
                    known(p.destination_offset),
                    known(records),
                    duration(ms),
                    rate,
                    p.truncated_at_stop_records + p.truncated_at_start_records,
                    p.skipped_offsets,
                    p.retry_attempt,
                    note(p)
                );
            }
        }
    }
    previous.at = Some(now);
    previous.offsets = seen;
    out
}

/// `--describe --json`: one row per partition, as the KIP prototype's `kafka-cluster-mirrors.sh
/// --describe --json` prints them (`mirror, topic, partition, sourceOffset, destinationOffset,
/// lag, state, retryAttempt, errorMessage`, -1 for a figure not known), so scripts written for it
/// read kmirror's too, with kmirror's figures after them (`null` when not known). A mirror that
/// could not be described is one row with no topic, its `errorCode` and its `errorMessage`.
pub(crate) fn json(answer: &DescribeMirrorsResponse) -> serde_json::Value {
    let or_null = |v: i64| (v >= 0).then_some(v);
    let known = |v: i64| v.max(-1);
    let mut rows = Vec::new();
    for m in &answer.mirrors {
        if m.error_code != 0 {
            rows.push(serde_json::json!({
                "mirror": m.mirror_name,
                "topic": null,
                "partition": -1,
                "sourceOffset": -1,
                "destinationOffset": -1,
                "lag": -1,
                "state": null,
                "retryAttempt": 0,
                "errorMessage": m.error_message,
                "errorCode": m.error_code,
            }));
            continue;
        }
        for t in &m.topics {
            for p in &t.partitions {
                let (records, ms) = lag(p);
                let note = note(p);
                rows.push(serde_json::json!({
                    "mirror": m.mirror_name,
                    "topic": t.topic_name,
                    "partition": p.partition_index,
                    "sourceOffset": known(p.source_offset),
                    "destinationOffset": known(p.destination_offset),
                    "lag": known(records),
                    "state": p.state,
                    "retryAttempt": p.retry_attempt,
                    "errorMessage": p.error_message,
                    "lagTimeMs": or_null(ms),
                    "truncatedAtStop": p.truncated_at_stop_records,
                    "truncatedAtStart": p.truncated_at_start_records,
                    "skippedOffsets": p.skipped_offsets,
                    "note": (!note.is_empty()).then_some(note),
                }));
            }
        }
    }
    serde_json::Value::Array(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_protocol::messages::describe_mirrors_response::{DescribedMirror, DescribedTopic};

    fn answer(partitions: Vec<DescribedPartition>) -> DescribeMirrorsResponse {
        DescribeMirrorsResponse {
            mirrors: vec![DescribedMirror {
                mirror_name: "dr".into(),
                topics: vec![DescribedTopic {
                    topic_name: "orders".into(),
                    partitions,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn unknown_figures_show_a_dash_and_the_reason() {
        let stopped = DescribedPartition {
            partition_index: 0,
            state: "STOPPED".into(),
            source_offset: -1,
            destination_offset: 120,
            lag: 7,
            lag_time_ms: 90_000,
            truncated_at_stop_records: 3,
            ..Default::default()
        };
        let unknown = DescribedPartition {
            partition_index: 1,
            state: "MIRRORING".into(),
            source_offset: -1,
            destination_offset: 40,
            lag: -1,
            lag_time_ms: 1500,
            truncated_at_start_records: 2,
            skipped_offsets: 17,
            ..Default::default()
        };
        let table = render(&answer(vec![stopped, unknown]), &mut Previous::default());
        let rows: Vec<&str> = table.lines().skip(1).collect();
        let stopped_row: Vec<&str> = rows[0].split_whitespace().collect();
        assert_eq!(
            &stopped_row[4..10],
            ["-", "120", "-", "-", "-", "3"],
            "{table}"
        );
        assert!(rows[0].contains("stopped (failed over)"), "{table}");
        let unknown_row: Vec<&str> = rows[1].split_whitespace().collect();
        assert_eq!(
            &unknown_row[4..11],
            ["-", "40", "-", "1.5s", "-", "2", "17"],
            "{table}"
        );
        assert!(rows[1].contains("not known"), "{table}");
        assert!(!table.contains("-1"), "{table}");
        let json = json(&answer(vec![DescribedPartition {
            state: "STOPPED".into(),
            lag: 5,
            ..Default::default()
        }]));
        // As the prototype prints a figure not known.
        assert_eq!(json[0]["lag"], -1);
    }
}
