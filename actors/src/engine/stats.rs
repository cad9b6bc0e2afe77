//! A mirror's live figures on this broker, kept by its fetchers and partitions and published as
//! metrics: fetch requests, bytes and errors, each partition's lag in records and in time, the
//! records its truncations removed, and (each second, by its Mirror actor) the greatest lags
//! and the age of the last successful fetch.
//!
//! A partition's lag is the source's high watermark in its last fetch answer minus the local
//! log end after that answer was applied; it is forgotten when the partition leaves its fetcher.
//!
//! Its lag in time is how old the oldest source record it has not mirrored is. Batches carry
//! their newest record's timestamp; while a partition is behind, the oldest record it lacks
//! follows the newest one it mirrored, so the lag in time is now minus that record's timestamp
//! (exact for log-append time and for producers whose clocks agree, an upper bound otherwise),
//! and 0 once caught up. It grows while the partition stays behind (the source unreachable,
//! the mirror throttled). A partition that has mirrored nothing yet while behind counts from
//! when it was first seen behind.
//!
//! Truncation counts ([`Truncated`]) are records in the batches a stop (to the last stable
//! offset) or the leader epochs (a start's or failback's alignment to the last mirrored epoch,
//! a fetch that found the log diverged from the source's) removed, since this broker started;
//! each truncation also logs its count; `gap` truncations (a restart at the source's log start
//! past a gap) count with the start's. Skipped offsets are those the source deleted before
//! they were mirrored (docs/failover.md, "Gaps"), counted per partition since this broker
//! started; each gap also logs its range.

use crate::host::TopicPartition;
use crate::invariant::Invariant;
use crate::metrics;
use ::metrics::{Counter, Gauge};
use dashmap::DashMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};

/// Records a partition's truncations removed here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Truncated {
    /// By stops: truncation to the last stable offset.
    pub at_stop: u64,
    /// By leader epochs: a start's or failback's truncation to the last mirrored epoch, or a
    /// fetch's to where the log diverged from the source's.
    pub at_start: u64,
}

/// What the lag in time of a partition is measured from.
#[derive(Debug, Clone, Copy)]
struct Behind {
    /// The timestamp of the newest record mirrored while behind, or when the partition was
    /// first seen behind with nothing mirrored; `None` when caught up.
    since_ms: Option<i64>,
    /// The gauge shows 0 already (a caught-up partition is not published again).
    published_zero: bool,
}

/// One mirror's figures.
#[derive(Debug)]
pub struct MirrorStats {
    mirror: String,
    lags: DashMap<TopicPartition, i64>,
    behind: DashMap<TopicPartition, Behind>,
    truncations: DashMap<TopicPartition, Truncated>,
    /// Per partition, the source time through which it holds everything ([`Self::mirrored`]);
    /// kept when it leaves its fetcher (a paused partition still holds what it held).
    through: DashMap<TopicPartition, i64>,
    /// The differing offsets the verifications of a partition found and none since compared
    /// again and found equal.
    differing: DashMap<TopicPartition, std::collections::BTreeSet<i64>>,
    /// Offsets the source deleted before they were mirrored, per partition.
    skipped: DashMap<TopicPartition, u64>,
    /// When a fetch last succeeded (ms since the epoch), -1 before the first.
    last_success_ms: AtomicI64,
    // Registered once: a fetch only adds to them.
    requests: Counter,
    fetched_bytes: Counter,
    errors: Counter,
    violations: HashMap<Invariant, Counter>,
    truncated_lso: Counter,
    truncated_lme: Counter,
    truncated_gap: Counter,
    throttle_wait: Counter,
    auto_started: Counter,
    groups_skipped: Counter,
    /// Since when (ms since the epoch) the mirror's fetches fail, and the last error; cleared by
    /// a fetch that succeeds. DescribeMirrors shows it for partitions that wait on the source.
    failing: std::sync::Mutex<Option<(i64, String)>>,
}

impl MirrorStats {
    /// The figures of `mirror`, all zero (so a scrape shows the mirror before its first fetch).
    pub fn new(mirror: &str) -> MirrorStats {
        let counter = |name: &'static str| {
            let counter = ::metrics::counter!(name, "mirror" => mirror.to_string());
            counter.increment(0);
            counter
        };
        let truncated = |reason: &'static str| {
            let counter = ::metrics::counter!(
                metrics::TRUNCATED_RECORDS,
                "mirror" => mirror.to_string(),
                "reason" => reason
            );
            counter.increment(0);
            counter
        };
        ::metrics::gauge!(metrics::MAX_LAG_SECONDS, "mirror" => mirror.to_string()).set(0.0);
        ::metrics::counter!(metrics::READ_AHEAD_BYTES, "mirror" => mirror.to_string()).increment(0);
        MirrorStats {
            mirror: mirror.to_string(),
            lags: DashMap::new(),
            behind: DashMap::new(),
            truncations: DashMap::new(),
            skipped: DashMap::new(),
            differing: DashMap::new(),
            through: DashMap::new(),
            last_success_ms: AtomicI64::new(-1),
            requests: counter(metrics::FETCH_REQUESTS),
            fetched_bytes: counter(metrics::FETCH_BYTES),
            errors: counter(metrics::FETCH_ERRORS),
            violations: Invariant::ALL
                .into_iter()
                .map(|invariant| {
                    let counter = ::metrics::counter!(
                        metrics::INVARIANT_VIOLATIONS,
                        "mirror" => mirror.to_string(),
                        "invariant" => invariant.name(),
                    );
                    counter.increment(0);
                    (invariant, counter)
                })
                .collect(),
            truncated_lso: truncated("lso"),
            truncated_lme: truncated("lme"),
            truncated_gap: truncated("gap"),
            throttle_wait: counter(metrics::THROTTLE_WAIT),
            auto_started: counter(metrics::AUTO_STARTED_TOPICS),
            groups_skipped: counter(metrics::GROUPS_SKIPPED),
            failing: std::sync::Mutex::new(None),
        }
    }

    /// A fetch answered with `bytes` of records.
    pub fn fetched(&self, bytes: u64, now_ms: i64) {
        self.requests.increment(1);
        self.fetched_bytes.increment(bytes);
        self.last_success_ms.store(now_ms, Ordering::Relaxed);
        *self.failing.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// What the pacing of the fetcher of source broker `leader` measured and decided.
    pub fn paced(&self, leader: i32, report: &crate::fetch_pacing::PacingReport) {
        let labels = [
            ("mirror", self.mirror.clone()),
            ("source_broker", leader.to_string()),
        ];
        ::metrics::gauge!(metrics::FETCHES_IN_FLIGHT, &labels).set(report.in_flight as f64);
        if let Some(ms) = report.round_trip_ms {
            ::metrics::gauge!(metrics::FETCH_ROUND_TRIP, &labels).set(ms as f64 / 1000.0);
        }
        ::metrics::gauge!(metrics::FETCH_ANSWER_BYTES, &labels).set(report.bytes_per_answer as f64);
    }

    /// `bytes` fetched ahead of a partition's log end are being applied.
    pub fn read_ahead(&self, bytes: u64) {
        ::metrics::counter!(metrics::READ_AHEAD_BYTES, "mirror" => self.mirror.clone())
            .increment(bytes);
    }

    /// A fetch failed with `error`.
    pub fn fetch_failed(&self, error: &str, now_ms: i64) {
        self.requests.increment(1);
        self.errors.increment(1);
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        let since = failing.as_ref().map_or(now_ms, |(since, _)| *since);
        *failing = Some((since, error.to_string()));
    }

    /// Since when fetches fail and why, while they do.
    pub fn failing(&self) -> Option<(i64, String)> {
        self.failing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A fetched batch was refused: it would break `invariant` of the log.
    pub fn invariant_violated(&self, invariant: Invariant) {
        if let Some(counter) = self.violations.get(&invariant) {
            counter.increment(1);
        }
    }

    /// A stop's truncation to the last stable offset removed `records` of the partition.
    pub fn truncated_at_stop(&self, key: &TopicPartition, records: u64) {
        self.truncated_lso.increment(records);
        self.truncations.entry(key.clone()).or_default().at_stop += records;
    }

    /// A start's or failback's truncation to the last mirrored epoch removed `records` of the
    /// partition.
    pub fn truncated_at_start(&self, key: &TopicPartition, records: u64) {
        self.truncated_lme.increment(records);
        self.truncations.entry(key.clone()).or_default().at_start += records;
    }

    /// The source deleted `offsets` of the partition before they were mirrored (its log start
    /// passed the partition's log end).
    pub fn skipped(&self, key: &TopicPartition, offsets: u64) {
        self.skipped_counter(key).increment(offsets);
        *self.skipped.entry(key.clone()).or_default() += offsets;
    }

    fn skipped_counter(&self, key: &TopicPartition) -> Counter {
        ::metrics::counter!(
            metrics::SKIPPED_OFFSETS,
            "mirror" => self.mirror.clone(),
            "topic" => key.topic.clone(),
            "partition" => key.partition.to_string()
        )
    }

    /// The offsets of the partition the source deleted before they were mirrored, since this
    /// broker started.
    pub fn skipped_offsets(&self, key: &TopicPartition) -> u64 {
        self.skipped.get(key).map(|n| *n).unwrap_or_default()
    }

    /// A verification of the partition compared up to `verified.to`, finding a difference or
    /// not, at `now_ms`.
    pub fn verified(&self, key: &TopicPartition, verified: &super::verify::Verified, now_ms: i64) {
        let labels = [
            ("mirror", self.mirror.clone()),
            ("topic", key.topic.clone()),
            ("partition", key.partition.to_string()),
        ];
        ::metrics::gauge!(metrics::VERIFIED_OFFSET, &labels).set(verified.to as f64);
        // A difference found stays reported until a verification compares its offset again
        // and finds none (a partial run elsewhere says nothing of it).
        let mut differing = self.differing.entry(key.clone()).or_default();
        differing.retain(|offset| !(verified.from..verified.to).contains(offset));
        if let Some(found) = &verified.difference {
            differing.insert(found.offset);
        }
        ::metrics::gauge!(metrics::VERIFY_DIFFERENCE, &labels).set(if differing.is_empty() {
            0.0
        } else {
            1.0
        });
        ::metrics::gauge!(metrics::VERIFY_TIMESTAMP, &labels).set(now_ms as f64 / 1000.0);
        ::metrics::counter!(metrics::VERIFIED_BYTES, "mirror" => self.mirror.clone())
            .increment(verified.bytes);
    }

    /// The mirror these figures are of.
    pub fn mirror(&self) -> &str {
        &self.mirror
    }

    /// A gap in the source restarted the partition's log past its end, removing the `records`
    /// it held (counted with the start's truncations in describe).
    pub fn truncated_for_gap(&self, key: &TopicPartition, records: u64) {
        self.truncated_gap.increment(records);
        self.truncations.entry(key.clone()).or_default().at_start += records;
    }

    /// The records the partition's truncations removed here.
    pub fn truncations(&self, key: &TopicPartition) -> Truncated {
        self.truncations.get(key).map(|t| *t).unwrap_or_default()
    }

    /// A fetch answer was applied: the partition is `behind` the source or not, and
    /// `newest_ms` is the timestamp of the newest record the answer appended, if any.
    pub fn mirrored(
        &self,
        key: &TopicPartition,
        behind: bool,
        newest_ms: Option<i64>,
        now_ms: i64,
    ) {
        if !self.behind.contains_key(key) {
            // Shown at 0 from the partition's first answer, so a gap is an increase.
            self.skipped_counter(key).increment(0);
        }
        let mut entry = self.behind.entry(key.clone()).or_insert(Behind {
            since_ms: None,
            published_zero: false,
        });
        entry.since_ms = match (behind, newest_ms, entry.since_ms) {
            (false, _, _) => None,
            (true, Some(newest), _) => Some(newest),
            (true, None, Some(since)) => Some(since),
            (true, None, None) => Some(now_ms),
        };
        if entry.since_ms.is_some() {
            entry.published_zero = false;
        }
        // Caught up, it holds everything the source had when it answered; behind, everything
        // up to the newest record it copied (exact for log-append time).
        let through = match (behind, newest_ms) {
            (false, _) => Some(now_ms),
            (true, newest) => newest,
        };
        if let Some(through) = through {
            self.through.insert(key.clone(), through);
        }
    }

    /// A fetch left the partition out of its answer (an incremental session's "nothing new"):
    /// caught up at its last answer, it holds everything the source wrote up to `now_ms`.
    pub fn still_caught_up(&self, key: &TopicPartition, now_ms: i64) {
        if self.behind.get(key).is_some_and(|b| b.since_ms.is_none()) {
            self.through.insert(key.clone(), now_ms);
        }
    }

    /// The source time (ms since the epoch) through which the partition holds everything the
    /// source wrote, as its fetch answers here last showed; `None` before the first.
    pub fn mirrored_through_ms(&self, key: &TopicPartition) -> Option<i64> {
        self.through.get(key).map(|t| *t)
    }

    /// How old the oldest source record the partition has not mirrored is (0: caught up);
    /// `None` before its first fetch answer.
    pub fn lag_ms(&self, key: &TopicPartition, now_ms: i64) -> Option<i64> {
        self.behind
            .get(key)
            .map(|b| b.since_ms.map_or(0, |since| (now_ms - since).max(0)))
    }

    /// A fetcher waited `wait` for the mirror's throttle.
    pub fn throttled(&self, wait: std::time::Duration) {
        self.throttle_wait.increment(wait.as_millis() as u64);
    }

    /// A source topic was started because it matches `topics.include`.
    pub fn auto_started(&self) {
        self.auto_started.increment(1);
    }

    /// The offset sync left a group alone: it has members on the destination.
    pub fn group_skipped(&self) {
        self.groups_skipped.increment(1);
    }

    /// The partition is `lag` records behind the source.
    pub fn lag(&self, key: &TopicPartition, lag: i64) {
        let lag = lag.max(0);
        // Most answers leave the lag as it was (an idle partition stays at 0): the gauge is
        // only looked up, labels built, when it moves.
        if self.lags.get(key).is_some_and(|known| *known == lag) {
            return;
        }
        self.lag_gauge(key).set(lag as f64);
        self.lags.insert(key.clone(), lag);
    }

    /// The partition left its fetcher.
    pub fn forget(&self, key: &TopicPartition) {
        if self.lags.remove(key).is_some() {
            self.lag_gauge(key).set(0.0);
        }
        if self.behind.remove(key).is_some() {
            self.time_lag_gauge(key).set(0.0);
        }
    }

    fn time_lag_gauge(&self, key: &TopicPartition) -> Gauge {
        ::metrics::gauge!(
            metrics::PARTITION_LAG_SECONDS,
            "mirror" => self.mirror.clone(),
            "topic" => key.topic.clone(),
            "partition" => key.partition.to_string()
        )
    }

    fn lag_gauge(&self, key: &TopicPartition) -> Gauge {
        ::metrics::gauge!(
            metrics::PARTITION_LAG,
            "mirror" => self.mirror.clone(),
            "topic" => key.topic.clone(),
            "partition" => key.partition.to_string()
        )
    }

    /// The greatest lag of the mirror's partitions on this broker.
    pub fn max_lag(&self) -> i64 {
        self.lags.iter().map(|e| *e.value()).max().unwrap_or(0)
    }

    /// Publishes the lags in time, the greatest lags and the age of the last successful fetch.
    pub fn publish(&self, now_ms: i64) {
        ::metrics::gauge!(metrics::MAX_LAG, "mirror" => self.mirror.clone())
            .set(self.max_lag() as f64);
        let mut max_ms = 0;
        for mut entry in self.behind.iter_mut() {
            match entry.since_ms {
                Some(since) => {
                    let lag_ms = (now_ms - since).max(0);
                    max_ms = max_ms.max(lag_ms);
                    self.time_lag_gauge(entry.key()).set(lag_ms as f64 / 1000.0);
                }
                // Caught-up partitions are published once, not every second.
                None if !entry.published_zero => {
                    self.time_lag_gauge(entry.key()).set(0.0);
                    entry.published_zero = true;
                }
                None => {}
            }
        }
        ::metrics::gauge!(metrics::MAX_LAG_SECONDS, "mirror" => self.mirror.clone())
            .set(max_ms as f64 / 1000.0);
        let last = self.last_success_ms.load(Ordering::Relaxed);
        if last >= 0 {
            ::metrics::gauge!(metrics::FETCH_AGE, "mirror" => self.mirror.clone())
                .set((now_ms - last).max(0) as f64 / 1000.0);
        }
    }
}
