//! A mirror's fetch settings, from its configs (docs/design.md §4, "Fetching across a WAN"):
//! how much one Fetch to the source asks for and how long it may wait, and how many Fetches to
//! each source broker may be in flight at most. A distant source needs many in flight (one
//! connection moves at most its window per round trip); the fetcher's pacing finds how many
//! within that ceiling. `mirror.replication.throttled.rate` caps what they fetch
//! ([`super::throttle`]).

use super::gap_policy::{GAP_POLICY, GapPolicy};
use std::collections::BTreeMap;

/// How a mirror fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchSettings {
    /// `fetch.max.bytes` (1 MiB): bytes asked per partition.
    pub partition_max_bytes: i32,
    /// `fetch.response.max.bytes` (10 MiB): bytes asked per Fetch.
    pub response_max_bytes: i32,
    /// `fetch.wait.max.ms` (500): how long the source may hold a Fetch with nothing new.
    pub wait_max_ms: i32,
    /// `fetch.min.bytes` (1): bytes the source waits for before answering.
    pub min_bytes: i32,
    /// `fetch.backoff.ms` (1000): how long a fetcher waits after a Fetch that failed.
    pub backoff_ms: i32,
    /// `mirror.replication.throttled.rate` (none: unlimited): bytes per second the mirror's
    /// fetchers on one broker may fetch together.
    pub throttled_rate: Option<u64>,
    /// `mirror.num.replica.fetchers` (the broker's, 256 by default): the most Fetches in flight
    /// to one source broker, each on a connection of its own.
    pub max_in_flight: usize,
}

impl Default for FetchSettings {
    fn default() -> Self {
        FetchSettings {
            partition_max_bytes: 1 << 20,
            response_max_bytes: 10 << 20,
            wait_max_ms: 500,
            min_bytes: 1,
            backoff_ms: 1000,
            throttled_rate: None,
            max_in_flight: 1,
        }
    }
}

/// A fetch setting out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}={value}: {reason}")]
pub struct InvalidFetchSetting {
    key: &'static str,
    value: String,
    reason: String,
}

/// The most Fetches in flight per source broker a mirror may allow (the broker's own
/// `mirror.num.replica.fetchers` has the same cap).
pub const MAX_FETCHES_IN_FLIGHT: i64 = 1024;

/// The broker's `mirror.num.replica.fetchers` when unset: enough for a 1 Gbit/s link at 150 ms
/// through sources with Kafka's default 100 KiB socket buffers (about 0.7 MB/s per connection
/// there: 180 connections carry 125 MB/s), at most about 300 MiB of answers in flight at the
/// default `fetch.max.bytes` (a Fetch ahead asks for its batches and half a batch more). The
/// pacing goes there only while the rate follows: a near source keeps one or two.
pub const DEFAULT_MAX_FETCHES_IN_FLIGHT: i64 = 256;

/// The integer config `key` of `configs`, `default` when absent; refused unless it parses and
/// lies in `min..=max`.
pub fn number_setting(
    configs: &BTreeMap<String, String>,
    key: &'static str,
    default: i64,
    min: i64,
    max: i64,
) -> Result<i64, InvalidFetchSetting> {
    let Some(value) = configs.get(key) else {
        return Ok(default);
    };
    let invalid = |reason: String| InvalidFetchSetting {
        key,
        value: value.clone(),
        reason,
    };
    let n: i64 = value
        .trim()
        .parse()
        .map_err(|_| invalid("not a number".into()))?;
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(invalid(format!("out of range ({min} to {max})")))
    }
}

impl FetchSettings {
    /// The settings a mirror's configs give, Fetches in flight defaulting to the broker's
    /// `mirror.num.replica.fetchers`.
    pub fn from_configs(
        configs: &BTreeMap<String, String>,
        broker_fetchers: usize,
    ) -> Result<FetchSettings, InvalidFetchSetting> {
        // Read where a gap is met (it changes at runtime); checked here with the rest.
        if let Some(value) = configs.get(GAP_POLICY) {
            GapPolicy::parse(value).map_err(|reason| InvalidFetchSetting {
                key: GAP_POLICY,
                value: value.clone(),
                reason,
            })?;
        }
        let defaults = FetchSettings::default();
        let number = |key, default, min, max| number_setting(configs, key, default, min, max);
        let int = i64::from(i32::MAX);
        Ok(FetchSettings {
            partition_max_bytes: number(
                "fetch.max.bytes",
                defaults.partition_max_bytes.into(),
                1,
                int,
            )? as i32,
            response_max_bytes: number(
                "fetch.response.max.bytes",
                defaults.response_max_bytes.into(),
                1,
                int,
            )? as i32,
            wait_max_ms: number("fetch.wait.max.ms", defaults.wait_max_ms.into(), 0, int)? as i32,
            min_bytes: number("fetch.min.bytes", defaults.min_bytes.into(), 0, int)? as i32,
            backoff_ms: number("fetch.backoff.ms", defaults.backoff_ms.into(), 0, int)? as i32,
            // Below 1 KiB/s a fetcher would wait minutes per batch: refused as a mistake.
            throttled_rate: match configs.get("mirror.replication.throttled.rate") {
                None => None,
                Some(_) => {
                    Some(number("mirror.replication.throttled.rate", -1, 1024, i64::MAX)? as u64)
                }
            },
            max_in_flight: number(
                "mirror.num.replica.fetchers",
                broker_fetchers as i64,
                1,
                MAX_FETCHES_IN_FLIGHT,
            )? as usize,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_configs_override_the_defaults_and_bad_values_are_refused() {
        let configs: BTreeMap<String, String> = [
            ("fetch.max.bytes", "8388608"),
            ("fetch.response.max.bytes", "67108864"),
            ("mirror.num.replica.fetchers", "4"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let settings = FetchSettings::from_configs(&configs, 1).expect("valid");
        assert_eq!(settings.partition_max_bytes, 8 << 20);
        assert_eq!(settings.response_max_bytes, 64 << 20);
        assert_eq!(settings.wait_max_ms, 500);
        assert_eq!(settings.max_in_flight, 4);
        assert_eq!(
            FetchSettings::from_configs(&BTreeMap::new(), 2)
                .expect("defaults")
                .max_in_flight,
            2
        );
        let bad: BTreeMap<String, String> =
            [("fetch.max.bytes".to_string(), "lots".to_string())].into();
        let e = FetchSettings::from_configs(&bad, 1).expect_err("refused");
        assert!(e.to_string().contains("fetch.max.bytes"), "{e}");
        let slow: BTreeMap<String, String> = [(
            "mirror.replication.throttled.rate".to_string(),
            "100".to_string(),
        )]
        .into();
        let e = FetchSettings::from_configs(&slow, 1).expect_err("too slow");
        assert!(e.to_string().contains("out of range"), "{e}");
    }
}
