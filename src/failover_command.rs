//! `kmirror mirrors --failover --mirror M --topics X [--max-lag N] [--timeout DURATION]`: the
//! planned failover (a migration, a drill), as a gateway cutover does it. The producers to the
//! source are paused first (the operator's part); this command then waits until every partition
//! of the named topics is MIRRORING with a lag of at most N records (0 by default), and only
//! then stops them (StopMirrorTopics), printing each partition's source and destination offsets
//! at that moment. If the lag does not get there within the timeout (60 s by default), or a
//! partition is not mirroring, or the source's offsets cannot be read, it stops nothing and
//! names the partitions that held it back (exit 1).
//!
//! The lag is the source's last stable offset (asked at each check) minus the destination's log
//! end. `--stop` is the disaster command: it stops at once, whatever the lag and even with the
//! source gone (docs/failover.md).

use crate::mirrors_command::{
    Failure, TopicChange, TopicSelection, change_topics, describe_every_broker, mirror_error,
    mirror_topics_matching, refused,
};
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{DescribeMirrorsRequest, DescribeMirrorsResponse};
use std::time::Duration;
use tokio::time::Instant;

/// How often the lag is checked while waiting.
const CHECK_EVERY: Duration = Duration::from_millis(500);

/// What `--failover` was asked.
#[derive(Debug, Clone)]
pub(crate) struct Failover {
    pub(crate) mirror: String,
    pub(crate) topics: TopicSelection,
    /// The greatest lag in records a partition may have when it is stopped.
    pub(crate) max_lag: i64,
    /// How long to wait for the lag.
    pub(crate) timeout: Duration,
}

/// One partition at a check.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    topic: String,
    partition: i32,
    state: String,
    source_offset: i64,
    destination_offset: i64,
    lag: i64,
    error: Option<String>,
}

impl Row {
    /// Why this partition may not be stopped yet, if it may not.
    fn holds_back(&self, max_lag: i64) -> Option<String> {
        if self.state != "MIRRORING" {
            Some(format!("{} (not MIRRORING)", self.state))
        } else if self.lag < 0 {
            Some(format!(
                "lag unknown: {}",
                self.error
                    .as_deref()
                    .unwrap_or("the source's offset could not be read")
            ))
        } else if self.lag > max_lag {
            Some(format!("lag {} > {max_lag}", self.lag))
        } else {
            None
        }
    }
}

/// The partitions of `topics` in a describe answer; a topic the mirror does not have is refused.
fn rows(
    answer: &DescribeMirrorsResponse,
    mirror: &str,
    topics: &[String],
) -> Result<Vec<Row>, Failure> {
    let described = answer.mirrors.iter().find(|m| m.mirror_name == mirror);
    let mut rows = Vec::new();
    for topic in topics {
        let Some(t) = described
            .into_iter()
            .flat_map(|m| &m.topics)
            .find(|t| &t.topic_name == topic)
        else {
            return Err(refused(
                ErrorCode::TOPIC_NOT_IN_MIRROR.0,
                Some(format!("{topic} is not a topic of mirror {mirror}")),
            ));
        };
        rows.extend(t.partitions.iter().map(|p| Row {
            topic: topic.clone(),
            partition: p.partition_index,
            state: p.state.clone(),
            source_offset: p.source_offset,
            destination_offset: p.destination_offset,
            lag: p.lag,
            error: p.error_message.clone(),
        }));
    }
    Ok(rows)
}

/// Runs `--failover` against the cluster `connection` reaches (`bootstrap` for the others).
pub(crate) async fn run(
    bootstrap: &str,
    connection: &Connection,
    failover: Failover,
) -> Result<(), Failure> {
    let Failover {
        mirror,
        topics,
        max_lag,
        timeout,
    } = failover;
    let topics = match topics {
        TopicSelection::Names(names) => names,
        TopicSelection::Pattern(pattern) => {
            mirror_topics_matching(connection, &mirror, &pattern).await?
        }
    };
    let request = DescribeMirrorsRequest {
        mirror_names: vec![mirror.clone()],
        ..Default::default()
    };
    let deadline = Instant::now() + timeout;
    let caught_up = loop {
        let answer = describe_every_broker(bootstrap, connection, &request).await?;
        mirror_error(&answer)?;
        let rows = rows(&answer, &mirror, &topics)?;
        let held: Vec<(&Row, String)> = rows
            .iter()
            .filter_map(|r| r.holds_back(max_lag).map(|why| (r, why)))
            .collect();
        if held.is_empty() && !rows.is_empty() {
            break rows;
        }
        if Instant::now() >= deadline {
            for (row, why) in &held {
                eprintln!("{}-{}: {why}", row.topic, row.partition);
            }
            return Err(Failure::Refused(format!(
                "{} partition(s) did not reach a lag of {max_lag} within {timeout:?}: nothing was \
                 stopped (resume the lagging partitions or raise --max-lag; --stop fails over at \
                 once, whatever the lag)",
                held.len().max(1)
            )));
        }
        tokio::time::sleep(CHECK_EVERY).await;
    };
    let (error_code, error_message, per_topic) = change_topics(
        connection,
        TopicChange::Stop,
        mirror.clone(),
        topics,
        Vec::new(),
    )
    .await
    .map_err(|e| Failure::Unreachable(e.to_string()))?;
    if error_code != 0 {
        return Err(refused(error_code, error_message));
    }
    println!(
        "{:<32} {:>9} {:>14} {:>19}",
        "TOPIC", "PARTITION", "SOURCE-OFFSET", "DESTINATION-OFFSET"
    );
    for row in &caught_up {
        println!(
            "{:<32} {:>9} {:>14} {:>19}",
            row.topic, row.partition, row.source_offset, row.destination_offset
        );
    }
    let mut refused_topics = 0;
    for (topic, code, message) in per_topic {
        if code == 0 {
            println!("{topic}: stopped");
        } else {
            refused_topics += 1;
            let name = ErrorCode(code).name();
            println!("{topic}: {name} ({code}) {}", message.unwrap_or_default());
        }
    }
    if refused_topics > 0 {
        return Err(Failure::Refused(format!(
            "{refused_topics} topic(s) were refused the stop"
        )));
    }
    Ok(())
}

/// Reads `--timeout`: a number with a unit (`500ms`, `30s`, `5m`, `1h`); a bare number is
/// seconds.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("--timeout {text:?}: expected a number with ms, s, m or h"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "" | "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        other => Err(format!(
            "--timeout {text:?}: unknown unit {other:?} (ms, s, m or h)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_operators_write_them() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5 days").is_err());
    }

    #[test]
    fn only_mirroring_partitions_within_the_lag_may_stop() {
        let row = |state: &str, lag: i64| Row {
            topic: "t".into(),
            partition: 0,
            state: state.into(),
            source_offset: 10,
            destination_offset: 10 - lag.max(0),
            lag,
            error: None,
        };
        assert_eq!(row("MIRRORING", 0).holds_back(0), None);
        assert_eq!(row("MIRRORING", 3).holds_back(5), None);
        assert!(row("MIRRORING", 3).holds_back(0).is_some());
        assert!(row("MIRRORING", -1).holds_back(100).is_some());
        assert!(row("PAUSED", 0).holds_back(0).is_some());
    }
}
