//! `kmirror mirrors --failover --mirror M --topics X [--max-lag N] [--timeout DURATION]`: the
//! planned failover (a migration, a drill), as a gateway cutover does it. The producers to the
//! source are paused first (the operator's part); this command then waits until every partition
//! of the named topics is MIRRORING with a lag of at most N records (0 by default), and only
//! then stops them (StopMirrorTopics), printing each partition's source and destination offsets
//! at that moment. If the lag does not get there within the timeout (60 s by default), or a
//! partition is not mirroring, or the source's offsets cannot be read, it stops nothing and
//! names the partitions that held it back (exit 1). After the stop it waits (the same timeout
//! again) until every partition it stopped is STOPPED, i.e. writable: that is when producers may
//! move. Partitions that are not by then are named, and it exits 1.
//!
//! The lag is the source's high watermark (every record it acknowledged, asked at each check)
//! minus the destination's last stable offset: the stop keeps the destination's log up to its
//! LSO only (an open transaction's records above it are cut), so that is what survives it.
//! Records of a transaction still open on the source wait above its last stable offset (the
//! mirror copies committed data only), and the command says so. A partition STOPPED or PAUSED
//! cannot get there by waiting: refused at once. `--stop` is the disaster command: it stops at
//! once, whatever the lag and even with the source gone (docs/failover.md).

use super::describe::{describe_every_broker, mirror_error};
use super::failure::{Failure, refused};
use super::topics::{
    TopicChange, TopicSelection, change_topics, kept_pattern, mirror_topics_matching,
};
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::client::{ClientConfig, SourceClient};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{DescribeMirrorsRequest, DescribeMirrorsResponse};
use std::collections::BTreeMap;
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
    /// The source's last stable offset (-1: unknown).
    source_offset: i64,
    /// The source's high watermark: every acknowledged record (-1: unknown).
    high_watermark: i64,
    destination_offset: i64,
    /// The destination's last stable offset: what a stop keeps (-1: unknown).
    destination_stable: i64,
    error: Option<String>,
}

/// Why a partition may not be stopped by `--failover`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Held {
    /// It may get there: wait.
    Waiting(String),
    /// It cannot get there by waiting: refuse at once.
    Never(String),
}

impl Row {
    /// Records of what the source acknowledged that the destination will not hold after a
    /// stop (-1: unknown).
    fn lag(&self) -> i64 {
        if self.high_watermark < 0 || self.destination_stable < 0 {
            -1
        } else {
            (self.high_watermark - self.destination_stable).max(0)
        }
    }

    /// Why this partition may not be stopped yet, if it may not.
    fn holds_back(&self, max_lag: i64) -> Option<Held> {
        let lag = self.lag();
        match self.state.as_str() {
            "STOPPED" | "STOPPING" => {
                return Some(Held::Never(format!(
                    "{}: it already failed over",
                    self.state
                )));
            }
            "PAUSED" | "PAUSING" => {
                return Some(Held::Never(format!(
                    "{}: resume it first (--resume), then fail over",
                    self.state
                )));
            }
            "MIRRORING" => {}
            other => {
                let why = self.error.as_deref().unwrap_or("not mirroring yet");
                return Some(Held::Waiting(format!("{other}: {why}")));
            }
        }
        if lag < 0 {
            Some(Held::Waiting(format!(
                "lag unknown: {}",
                self.error
                    .as_deref()
                    .unwrap_or("the source's offsets could not be read")
            )))
        } else if lag > max_lag && self.destination_stable >= self.source_offset {
            Some(Held::Waiting(format!(
                "lag {lag} > {max_lag}: a transaction still open on the source holds back the \
                 {} acknowledged records above its last stable offset {}",
                self.high_watermark - self.source_offset,
                self.source_offset
            )))
        } else if lag > max_lag && self.destination_offset > self.destination_stable {
            Some(Held::Waiting(format!(
                "lag {lag} > {max_lag}: the destination holds {} offsets of a transaction whose \
                 marker it has not copied yet above its last stable offset {}, which a stop cuts",
                self.destination_offset - self.destination_stable,
                self.destination_stable
            )))
        } else if lag > max_lag {
            Some(Held::Waiting(format!("lag {lag} > {max_lag}")))
        } else {
            None
        }
    }
}

/// The partitions of `topics` in a describe answer; a topic the mirror does not have is refused.
/// Every partition of `counts` (each topic's partition count) has a row: one no broker described
/// (its leader did not answer) holds the failover back like any partition not there yet.
fn rows(
    answer: &DescribeMirrorsResponse,
    mirror: &str,
    topics: &[String],
    counts: &BTreeMap<String, i32>,
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
                ErrorCode::TOPIC_NOT_IN_CLUSTER_MIRROR.0,
                Some(format!("{topic} is not a topic of mirror {mirror}")),
            ));
        };
        rows.extend(t.partitions.iter().map(|p| Row {
            topic: topic.clone(),
            partition: p.partition_index,
            state: p.state.clone(),
            source_offset: p.source_offset,
            high_watermark: p.source_high_watermark,
            destination_offset: p.destination_offset,
            destination_stable: p.destination_last_stable_offset,
            error: p.error_message.clone(),
        }));
        let count = counts.get(topic).copied().unwrap_or(0);
        for partition in 0..count {
            if !t.partitions.iter().any(|p| p.partition_index == partition) {
                rows.push(Row {
                    topic: topic.clone(),
                    partition,
                    state: "UNKNOWN".into(),
                    source_offset: -1,
                    high_watermark: -1,
                    destination_offset: -1,
                    destination_stable: -1,
                    error: Some("not described: the broker leading it did not answer".into()),
                });
            }
        }
    }
    Ok(rows)
}

/// Each topic's partition count on the destination (`bootstrap`'s metadata).
async fn partition_counts(
    bootstrap: &str,
    topics: &[String],
) -> Result<BTreeMap<String, i32>, Failure> {
    let unreachable =
        |e: kmirror_protocol::client::ClientError| Failure::Unreachable(e.to_string());
    let cluster = SourceClient::connect(ClientConfig::plaintext(bootstrap))
        .await
        .map_err(unreachable)?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let metadata = cluster.metadata(Some(&names)).await.map_err(unreachable)?;
    Ok(topics
        .iter()
        .map(|t| {
            let count = metadata.topics.get(t).map_or(0, |m| m.partitions.len());
            (t.clone(), i32::try_from(count).unwrap_or(i32::MAX))
        })
        .collect())
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
    // A pattern also leaves auto-discovery with the stop (docs/wire.md).
    let (topics, patterns) = match topics {
        TopicSelection::Names(names) => (names, Vec::new()),
        TopicSelection::Pattern(pattern) => (
            mirror_topics_matching(connection, &mirror, &pattern).await?,
            kept_pattern(pattern),
        ),
    };
    let request = DescribeMirrorsRequest {
        mirror_names: vec![mirror.clone()],
        ..Default::default()
    };
    let counts = partition_counts(bootstrap, &topics).await?;
    let deadline = Instant::now() + timeout;
    let caught_up = loop {
        let answer = describe_every_broker(bootstrap, connection, &request).await?;
        mirror_error(&answer)?;
        let rows = rows(&answer, &mirror, &topics, &counts)?;
        let held: Vec<(&Row, Held)> = rows
            .iter()
            .filter_map(|r| r.holds_back(max_lag).map(|why| (r, why)))
            .collect();
        if held.is_empty() && !rows.is_empty() {
            break rows;
        }
        let never = held.iter().any(|(_, h)| matches!(h, Held::Never(_)));
        if never || Instant::now() >= deadline {
            for (row, Held::Waiting(why) | Held::Never(why)) in &held {
                eprintln!("{}-{}: {why}", row.topic, row.partition);
            }
            let why = if never {
                "cannot fail over by waiting".to_string()
            } else {
                format!("did not reach a lag of {max_lag} within {timeout:?}")
            };
            return Err(Failure::Refused(format!(
                "{} partition(s) {why}: nothing was stopped (pause the producers and wait, raise \
                 --max-lag or --timeout; --stop fails over at once, whatever the lag)",
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
        patterns,
    )
    .await
    .map_err(|e| Failure::Unreachable(e.to_string()))?;
    if error_code != 0 {
        return Err(refused(error_code, error_message));
    }
    println!(
        "{:<32} {:>9} {:>14} {:>19} {:>10}",
        "TOPIC", "PARTITION", "SOURCE-OFFSET", "DESTINATION-OFFSET", "LOST"
    );
    for row in &caught_up {
        println!(
            "{:<32} {:>9} {:>14} {:>19} {:>10}",
            row.topic,
            row.partition,
            row.high_watermark,
            row.destination_stable,
            row.lag()
        );
    }
    println!(
        "Records the source takes from now on are not on the destination: keep the producers \
         paused, then point them at the destination."
    );
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
    let stopped: Vec<String> = caught_up.iter().map(|r| r.topic.clone()).collect();
    await_stopped(
        bootstrap, connection, &request, &mirror, &stopped, &counts, timeout,
    )
    .await
}

/// Waits until every partition of `topics` is STOPPED (writable), describing every broker
/// each [`CHECK_EVERY`]; past `timeout` names those that are not, and fails.
async fn await_stopped(
    bootstrap: &str,
    connection: &Connection,
    request: &DescribeMirrorsRequest,
    mirror: &str,
    topics: &[String],
    counts: &BTreeMap<String, i32>,
    timeout: Duration,
) -> Result<(), Failure> {
    let mut topics = topics.to_vec();
    topics.dedup();
    let deadline = Instant::now() + timeout;
    loop {
        let pending: Vec<Row> = match describe_every_broker(bootstrap, connection, request).await {
            Ok(answer) => rows(&answer, mirror, &topics, counts)?
                .into_iter()
                .filter(|r| r.state != "STOPPED")
                .collect(),
            // A broker that does not answer now may later: its partitions count as pending.
            Err(Failure::Unreachable(why)) if Instant::now() < deadline => {
                eprintln!("kmirror mirrors: describing the mirror: {why}; trying again");
                tokio::time::sleep(CHECK_EVERY).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        if pending.is_empty() {
            println!("every partition is STOPPED and writable: move the producers and consumers");
            return Ok(());
        }
        if Instant::now() >= deadline {
            for row in &pending {
                let why = row
                    .error
                    .as_deref()
                    .unwrap_or("its failover has not finished");
                eprintln!("{}-{}: {}: {why}", row.topic, row.partition, row.state);
            }
            return Err(Failure::Refused(format!(
                "{} partition(s) are not STOPPED within {timeout:?}: they are not writable yet \
                 (their failover goes on; see `kmirror mirrors --describe`)",
                pending.len()
            )));
        }
        tokio::time::sleep(CHECK_EVERY).await;
    }
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
        let row = |state: &str, lso: i64, hw: i64, end: i64| Row {
            topic: "t".into(),
            partition: 0,
            state: state.into(),
            source_offset: lso,
            high_watermark: hw,
            destination_offset: end,
            destination_stable: end,
            error: None,
        };
        assert_eq!(row("MIRRORING", 10, 10, 10).holds_back(0), None);
        assert_eq!(row("MIRRORING", 10, 10, 7).holds_back(5), None);
        assert!(matches!(
            row("MIRRORING", 10, 10, 7).holds_back(0),
            Some(Held::Waiting(_))
        ));
        assert!(matches!(
            row("MIRRORING", -1, -1, 7).holds_back(100),
            Some(Held::Waiting(_))
        ));
        // Caught up with the LSO, but acknowledged records wait behind an open transaction.
        let Some(Held::Waiting(why)) = row("MIRRORING", 30, 61, 30).holds_back(0) else {
            panic!("held back");
        };
        assert!(why.contains("transaction still open"), "{why}");
        assert!(matches!(
            row("PAUSED", 10, 10, 10).holds_back(0),
            Some(Held::Never(_))
        ));
        assert!(matches!(
            row("STOPPED", -1, -1, 11).holds_back(0),
            Some(Held::Never(_))
        ));
    }

    /// A partition no broker described (its leader does not answer) holds the failover back,
    /// before the stop and while it waits for STOPPED (found by the review of issue 33: the
    /// command stopped the others and reported every partition STOPPED).
    #[test]
    fn an_undescribed_partition_holds_the_failover_back() {
        use kmirror_protocol::messages::describe_mirrors_response::{
            DescribedMirror, DescribedPartition, DescribedTopic,
        };
        let answer = DescribeMirrorsResponse {
            mirrors: vec![DescribedMirror {
                mirror_name: "m".into(),
                topics: vec![DescribedTopic {
                    topic_name: "t".into(),
                    partitions: vec![DescribedPartition {
                        partition_index: 1,
                        state: "STOPPED".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let counts = BTreeMap::from([("t".to_string(), 2)]);
        let Ok(rows) = rows(&answer, "m", &["t".to_string()], &counts) else {
            panic!("the topic is the mirror's");
        };
        assert_eq!(rows.len(), 2);
        let missing = rows.iter().find(|r| r.partition == 0).expect("a row");
        assert_ne!(missing.state, "STOPPED");
        assert!(matches!(missing.holds_back(0), Some(Held::Waiting(_))));
    }

    /// The review's finding 6: the lag bounds what the stop keeps (the destination LSO), not
    /// its log end. Source: T1 commits with its marker at 97, T2 is open from 96 (source LSO 96,
    /// HW 98); the destination fetched to 96, but without T1's marker its LSO is 10.
    #[test]
    fn the_lag_counts_what_the_stop_cuts() {
        let row = Row {
            topic: "t".into(),
            partition: 0,
            state: "MIRRORING".into(),
            source_offset: 96,
            high_watermark: 98,
            destination_offset: 96,
            destination_stable: 10,
            error: None,
        };
        assert_eq!(row.lag(), 88);
        let Some(Held::Waiting(why)) = row.holds_back(5) else {
            panic!("a stop now cuts 86 records: --max-lag 5 must hold it back");
        };
        assert!(why.contains("last stable offset 10"), "{why}");
    }
}
