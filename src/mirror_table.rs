//! The mirror table `kmirror mirrors --describe` prints (and `--watch` and `kmirror quickstart`
//! refresh): one row per mirror partition with its state, the source's and the destination's
//! offsets, the lag, the rate the destination grew at since the previous refresh, the retry
//! attempt and the error.

use kmirror_protocol::messages::DescribeMirrorsResponse;
use std::collections::HashMap;
use std::fmt::Write;
use std::time::Instant;

/// Destination offsets seen at a refresh, to compute rates at the next one.
#[derive(Debug, Default)]
pub(crate) struct Previous {
    at: Option<Instant>,
    offsets: HashMap<(String, String, i32), i64>,
}

/// The table of `answer`; the rate column compares with `previous` (then updated).
pub(crate) fn render(answer: &DescribeMirrorsResponse, previous: &mut Previous) -> String {
    let now = Instant::now();
    let elapsed = previous.at.map(|at| now.duration_since(at).as_secs_f64());
    let mut out = format!(
        "{:<16} {:<32} {:>9} {:<10} {:>12} {:>12} {:>10} {:>10} {:>6}  ERROR\n",
        "MIRROR",
        "TOPIC",
        "PARTITION",
        "STATE",
        "SRC-OFFSET",
        "DEST-OFFSET",
        "LAG",
        "RECORDS/S",
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
                let _ = writeln!(
                    out,
                    "{:<16} {:<32} {:>9} {:<10} {:>12} {:>12} {:>10} {:>10} {:>6}  {}",
                    m.mirror_name,
                    t.topic_name,
                    p.partition_index,
                    p.state,
                    p.source_offset,
                    p.destination_offset,
                    p.lag,
                    rate,
                    p.retry_attempt,
                    p.error_message.as_deref().unwrap_or("")
                );
            }
        }
    }
    previous.at = Some(now);
    previous.offsets = seen;
    out
}
