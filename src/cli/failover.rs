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
//!
//! `--max-lag-seconds S` bounds the lag in time instead of (or besides) records: a partition
//! may stop once it holds everything the source wrote up to S seconds ago (its
//! `MirroredThroughMs`, the broker's clock). `--dry-run` and `--consistent` are in
//! [`super::failover_plan`].

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
    /// How far behind a partition may be when it is stopped.
    pub(crate) limits: LagLimits,
    /// How long to wait for the lag.
    pub(crate) timeout: Duration,
    /// `--dry-run`: report what a stop would do now, change nothing.
    pub(crate) dry_run: bool,
    /// `--consistent`: stop every topic at one point in time.
    pub(crate) consistent: bool,
    /// `--discard-records N`: the records a consistent cut removes beyond the last stable
    /// offsets, confirmed.
    pub(crate) discard_records: Option<i64>,
    /// `--json` (with `--dry-run`).
    pub(crate) json: bool,
}

/// The lag a partition may have when it is stopped; neither set waits for nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LagLimits {
    /// `--max-lag`: in records.
    pub(crate) records: Option<i64>,
    /// `--max-lag-seconds`, in ms: in source time.
    pub(crate) ms: Option<i64>,
}

impl LagLimits {
    /// Whether any limit is set.
    fn any(&self) -> bool {
        self.records.is_some() || self.ms.is_some()
    }
}

/// What every step of a failover speaks to: the cluster, the mirror, its topics.
pub(crate) struct Scope<'a> {
    pub(crate) bootstrap: &'a str,
    pub(crate) connection: &'a Connection,
    pub(crate) mirror: &'a str,
    pub(crate) topics: &'a [String],
    /// Each topic's partition count on the destination.
    pub(crate) counts: &'a BTreeMap<String, i32>,
}

impl Scope<'_> {
    /// Every partition of the topics as every broker describes it now; `cut` asks where a stop
    /// (at that point in time, if `Some(Some(t))`) would cut each.
    pub(crate) async fn rows(&self, cut: Option<Option<i64>>) -> Result<Vec<Row>, Failure> {
        let request = DescribeMirrorsRequest {
            mirror_names: vec![self.mirror.to_string()],
            include_stop_cut: cut.is_some(),
            cut_timestamp_ms: cut.flatten().unwrap_or(-1),
            ..Default::default()
        };
        let answer = describe_every_broker(self.bootstrap, self.connection, &request).await?;
        mirror_error(&answer)?;
        rows(&answer, self.mirror, self.topics, self.counts)
    }
}

/// Milliseconds since the epoch, by this machine's clock.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// One partition at a check.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Row {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) state: String,
    /// The source's last stable offset (-1: unknown).
    pub(crate) source_offset: i64,
    /// The source's high watermark: every acknowledged record (-1: unknown).
    pub(crate) high_watermark: i64,
    pub(crate) destination_offset: i64,
    /// The destination's last stable offset: what a stop keeps (-1: unknown).
    pub(crate) destination_stable: i64,
    /// The source time through which the destination holds everything (-1: unknown).
    pub(crate) mirrored_through_ms: i64,
    /// Where a stop would cut, the records and transactions it removes (-1: not asked).
    pub(crate) cut_offset: i64,
    pub(crate) cut_records: i64,
    pub(crate) cut_open_transactions: i64,
    /// The point in time a consistent stop stopped its topic at (-1: none).
    pub(crate) stopped_at_ms: i64,
    pub(crate) error: Option<String>,
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

    /// How old the newest source record the destination may lack is, by `now_ms` (-1:
    /// unknown): the recovery point a stop now gives.
    pub(crate) fn lag_ms(&self, now_ms: i64) -> i64 {
        if self.mirrored_through_ms < 0 {
            -1
        } else {
            (now_ms - self.mirrored_through_ms).max(0)
        }
    }

    /// Why this partition may not be stopped yet under `limits` at `now_ms`, if it may not.
    fn holds_back(&self, limits: LagLimits, now_ms: i64) -> Option<Held> {
        if let Some(held) = self.holds_back_in_records(limits.records.unwrap_or(i64::MAX)) {
            return Some(held);
        }
        let max_ms = limits.ms?;
        match self.lag_ms(now_ms) {
            ..0 => Some(Held::Waiting(
                "lag in time unknown: nothing fetched since the broker started".into(),
            )),
            ms if ms > max_ms => Some(Held::Waiting(format!(
                "lag {:.1} s > {:.1} s: the destination holds what the source wrote up to {}",
                ms as f64 / 1e3,
                max_ms as f64 / 1e3,
                super::failover_plan::utc(self.mirrored_through_ms)
            ))),
            _ => None,
        }
    }

    /// Why this partition may not be stopped yet with at most `max_lag` records of lag.
    fn holds_back_in_records(&self, max_lag: i64) -> Option<Held> {
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
pub(crate) fn rows(
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
            mirrored_through_ms: p.mirrored_through_ms,
            cut_offset: p.stop_cut_offset,
            cut_records: p.stop_cut_records,
            cut_open_transactions: p.stop_cut_open_transactions,
            stopped_at_ms: t.stop_cut_timestamp_ms,
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
                    mirrored_through_ms: -1,
                    cut_offset: -1,
                    cut_records: -1,
                    cut_open_transactions: -1,
                    stopped_at_ms: t.stop_cut_timestamp_ms,
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
    let mirror = failover.mirror.clone();
    // A pattern also leaves auto-discovery with the stop (docs/wire.md).
    let (topics, patterns) = match failover.topics.clone() {
        TopicSelection::Names(names) => (names, Vec::new()),
        TopicSelection::Pattern(pattern) => (
            mirror_topics_matching(connection, &mirror, &pattern).await?,
            kept_pattern(pattern),
        ),
    };
    let counts = partition_counts(bootstrap, &topics).await?;
    let scope = Scope {
        bootstrap,
        connection,
        mirror: &mirror,
        topics: &topics,
        counts: &counts,
    };
    if failover.dry_run {
        return super::failover_plan::dry_run(&scope, &failover).await;
    }
    // A planned failover waits for no lag by default; a consistent one only when asked.
    let limits = match failover.limits {
        limits if limits.any() || failover.consistent => limits,
        _ => LagLimits {
            records: Some(0),
            ms: None,
        },
    };
    let caught_up = if limits.any() {
        wait_for_lag(&scope, limits, failover.timeout).await?
    } else {
        Vec::new()
    };
    if failover.consistent {
        return super::failover_plan::consistent_stop(&scope, &failover, patterns).await;
    }
    let per_topic = stop(&scope, -1, patterns).await?;
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
    report_stopped(per_topic)?;
    await_stopped(&scope, failover.timeout).await
}

/// Waits until every partition of the scope's topics is MIRRORING within `limits`; past
/// `timeout`, or at once for a partition that cannot get there, names those that held it back
/// and fails, having stopped nothing.
async fn wait_for_lag(
    scope: &Scope<'_>,
    limits: LagLimits,
    timeout: Duration,
) -> Result<Vec<Row>, Failure> {
    let deadline = Instant::now() + timeout;
    loop {
        let rows = scope.rows(None).await?;
        let now = now_ms();
        let held: Vec<(&Row, Held)> = rows
            .iter()
            .filter_map(|r| r.holds_back(limits, now).map(|why| (r, why)))
            .collect();
        if held.is_empty() && !rows.is_empty() {
            return Ok(rows);
        }
        let never = held.iter().any(|(_, h)| matches!(h, Held::Never(_)));
        if never || Instant::now() >= deadline {
            for (row, Held::Waiting(why) | Held::Never(why)) in &held {
                eprintln!("{}-{}: {why}", row.topic, row.partition);
            }
            let why = if never {
                "cannot fail over by waiting".to_string()
            } else {
                "did not get within the lag asked for (--max-lag, --max-lag-seconds) within \
                 --timeout"
                    .to_string()
            };
            return Err(Failure::Refused(format!(
                "{} partition(s) {why}: nothing was stopped (pause the producers and wait, raise \
                 --max-lag, --max-lag-seconds or --timeout; --stop fails over at once, whatever \
                 the lag)",
                held.len().max(1)
            )));
        }
        tokio::time::sleep(CHECK_EVERY).await;
    }
}

/// StopMirrorTopics of the scope's topics (and `patterns`), cutting at `cut_timestamp_ms` too
/// if it is not -1: each topic's result.
pub(crate) async fn stop(
    scope: &Scope<'_>,
    cut_timestamp_ms: i64,
    patterns: Vec<String>,
) -> Result<Vec<(String, i16, Option<String>)>, Failure> {
    let (error_code, error_message, per_topic) = change_topics(
        scope.connection,
        TopicChange::Stop { cut_timestamp_ms },
        scope.mirror.to_string(),
        scope.topics.to_vec(),
        patterns,
    )
    .await
    .map_err(|e| Failure::Unreachable(e.to_string()))?;
    if error_code != 0 {
        return Err(refused(error_code, error_message));
    }
    Ok(per_topic)
}

/// Prints each topic's stop result; fails if one was refused.
pub(crate) fn report_stopped(per_topic: Vec<(String, i16, Option<String>)>) -> Result<(), Failure> {
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

/// Waits until every partition of the scope's topics is in `state`, describing every broker
/// each [`CHECK_EVERY`]; past `timeout` names those that are not, and fails.
pub(crate) async fn await_state(
    scope: &Scope<'_>,
    state: &str,
    timeout: Duration,
) -> Result<(), Failure> {
    let deadline = Instant::now() + timeout;
    loop {
        let pending: Vec<Row> = match scope.rows(None).await {
            Ok(rows) => rows.into_iter().filter(|r| r.state != state).collect(),
            // A broker that does not answer now may later: its partitions count as pending.
            Err(Failure::Unreachable(why)) if Instant::now() < deadline => {
                eprintln!("kmirror mirrors: describing the mirror: {why}; trying again");
                tokio::time::sleep(CHECK_EVERY).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        if pending.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            for row in &pending {
                let why = row.error.as_deref().unwrap_or("not there yet");
                eprintln!("{}-{}: {}: {why}", row.topic, row.partition, row.state);
            }
            return Err(Failure::Refused(format!(
                "{} partition(s) are not {state} within {timeout:?} (see `kmirror mirrors \
                 --describe`)",
                pending.len()
            )));
        }
        tokio::time::sleep(CHECK_EVERY).await;
    }
}

/// Waits until every partition of the scope's topics is STOPPED (writable), and says so; past
/// `timeout` names those that are not (their failover goes on), and fails.
pub(crate) async fn await_stopped(scope: &Scope<'_>, timeout: Duration) -> Result<(), Failure> {
    await_state(scope, "STOPPED", timeout).await?;
    println!("every partition is STOPPED and writable: move the producers and consumers");
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
        let row = |state: &str, lso: i64, hw: i64, end: i64| Row {
            topic: "t".into(),
            partition: 0,
            state: state.into(),
            source_offset: lso,
            high_watermark: hw,
            destination_offset: end,
            destination_stable: end,
            ..Row::default()
        };
        assert_eq!(row("MIRRORING", 10, 10, 10).holds_back_in_records(0), None);
        assert_eq!(row("MIRRORING", 10, 10, 7).holds_back_in_records(5), None);
        assert!(matches!(
            row("MIRRORING", 10, 10, 7).holds_back_in_records(0),
            Some(Held::Waiting(_))
        ));
        assert!(matches!(
            row("MIRRORING", -1, -1, 7).holds_back_in_records(100),
            Some(Held::Waiting(_))
        ));
        // Caught up with the LSO, but acknowledged records wait behind an open transaction.
        let Some(Held::Waiting(why)) = row("MIRRORING", 30, 61, 30).holds_back_in_records(0) else {
            panic!("held back");
        };
        assert!(why.contains("transaction still open"), "{why}");
        assert!(matches!(
            row("PAUSED", 10, 10, 10).holds_back_in_records(0),
            Some(Held::Never(_))
        ));
        assert!(matches!(
            row("STOPPED", -1, -1, 11).holds_back_in_records(0),
            Some(Held::Never(_))
        ));
    }

    /// `--max-lag-seconds`: a partition holds back while the source time it holds everything
    /// through is older than the limit, or unknown; the records' limit applies beside it.
    #[test]
    fn the_lag_in_time_bounds_the_recovery_point() {
        let row = |through: i64| Row {
            state: "MIRRORING".into(),
            source_offset: 10,
            high_watermark: 10,
            destination_offset: 10,
            destination_stable: 10,
            mirrored_through_ms: through,
            ..Row::default()
        };
        let limits = LagLimits {
            records: None,
            ms: Some(5_000),
        };
        assert_eq!(row(98_000).holds_back(limits, 100_000), None);
        assert!(matches!(
            row(90_000).holds_back(limits, 100_000),
            Some(Held::Waiting(_))
        ));
        assert!(matches!(
            row(-1).holds_back(limits, 100_000),
            Some(Held::Waiting(_))
        ));
        let behind = Row {
            destination_stable: 4,
            ..row(99_000)
        };
        assert_eq!(behind.holds_back(limits, 100_000), None);
        let both = LagLimits {
            records: Some(0),
            ..limits
        };
        assert!(behind.holds_back(both, 100_000).is_some());
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
        assert!(matches!(
            missing.holds_back_in_records(0),
            Some(Held::Waiting(_))
        ));
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
            ..Row::default()
        };
        assert_eq!(row.lag(), 88);
        let Some(Held::Waiting(why)) = row.holds_back_in_records(5) else {
            panic!("a stop now cuts 86 records: --max-lag 5 must hold it back");
        };
        assert!(why.contains("last stable offset 10"), "{why}");
    }
}
