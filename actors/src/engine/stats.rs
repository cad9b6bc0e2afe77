//! A mirror's live figures on this broker, kept by its fetchers and published as metrics:
//! fetch requests, bytes and errors, each partition's lag, and (each second, by the
//! MirrorSystem) the greatest lag and the age of the last successful fetch.
//!
//! A partition's lag is the source's high watermark in its last fetch answer minus the local
//! log end after that answer was applied; it is forgotten when the partition leaves its fetcher.

use crate::host::TopicPartition;
use crate::metrics;
use ::metrics::{Counter, Gauge};
use dashmap::DashMap;
use std::sync::atomic::{AtomicI64, Ordering};

/// One mirror's figures.
#[derive(Debug)]
pub struct MirrorStats {
    mirror: String,
    lags: DashMap<TopicPartition, i64>,
    /// When a fetch last succeeded (ms since the epoch), -1 before the first.
    last_success_ms: AtomicI64,
    // Registered once: a fetch only adds to them.
    requests: Counter,
    fetched_bytes: Counter,
    errors: Counter,
    violations: Counter,
    truncated_lso: Counter,
    truncated_lme: Counter,
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
        MirrorStats {
            mirror: mirror.to_string(),
            lags: DashMap::new(),
            last_success_ms: AtomicI64::new(-1),
            requests: counter(metrics::FETCH_REQUESTS),
            fetched_bytes: counter(metrics::FETCH_BYTES),
            errors: counter(metrics::FETCH_ERRORS),
            violations: counter(metrics::INVARIANT_VIOLATIONS),
            truncated_lso: truncated("lso"),
            truncated_lme: truncated("lme"),
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

    /// A fetched batch was refused: it would break the log's invariants.
    pub fn invariant_violated(&self) {
        self.violations.increment(1);
    }

    /// A stop's truncation to the last stable offset removed `records`.
    pub fn truncated_at_stop(&self, records: u64) {
        self.truncated_lso.increment(records);
    }

    /// A start's or failback's truncation to the last mirrored epoch removed `records`.
    pub fn truncated_at_start(&self, records: u64) {
        self.truncated_lme.increment(records);
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

    /// Publishes the greatest lag and the age of the last successful fetch.
    pub fn publish(&self, now_ms: i64) {
        ::metrics::gauge!(metrics::MAX_LAG, "mirror" => self.mirror.clone())
            .set(self.max_lag() as f64);
        let last = self.last_success_ms.load(Ordering::Relaxed);
        if last >= 0 {
            ::metrics::gauge!(metrics::FETCH_AGE, "mirror" => self.mirror.clone())
                .set((now_ms - last).max(0) as f64 / 1000.0);
        }
    }
}
