//! The `group.consumer.*` keys of `server.properties`: how KIP-848 consumer groups are run
//! (session and heartbeat timing, group size, the server-side assignors). Defaults and bounds
//! are Apache Kafka 4's; the bounds keys limit what the timing keys may be set to, as Kafka's do.

use super::config_error::{ConfigError, invalid};
use crate::groups::assignors::Assignor;
use crate::groups::consumer::ConsumerSettings;
use std::collections::BTreeMap;
use std::time::Duration;

/// The keys read here.
pub(super) const KEYS: &[&str] = &[
    "group.consumer.session.timeout.ms",
    "group.consumer.min.session.timeout.ms",
    "group.consumer.max.session.timeout.ms",
    "group.consumer.heartbeat.interval.ms",
    "group.consumer.min.heartbeat.interval.ms",
    "group.consumer.max.heartbeat.interval.ms",
    "group.consumer.max.size",
    "group.consumer.assignors",
];

/// An assignor by its short name or Kafka's class name.
fn assignor(name: &str) -> Option<Assignor> {
    Assignor::parse(name).or(match name {
        "org.apache.kafka.coordinator.group.assignor.UniformAssignor" => Some(Assignor::Uniform),
        "org.apache.kafka.coordinator.group.assignor.RangeAssignor" => Some(Assignor::Range),
        _ => None,
    })
}

/// Reads [`KEYS`]; absent keys take Kafka's defaults.
pub(super) fn from_properties(
    props: &BTreeMap<String, String>,
) -> Result<ConsumerSettings, ConfigError> {
    let number = |key: &str, default: i64| -> Result<i64, ConfigError> {
        match props.get(key) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|n| (1..=i64::from(i32::MAX)).contains(n))
                .ok_or_else(|| invalid(key, v, "expected a whole number in [1, 2147483647]")),
        }
    };
    let bounded = |key: &str, default: i64, min_key: &str, max_key: &str, bounds: (i64, i64)| {
        let min = number(min_key, bounds.0)?;
        let max = number(max_key, bounds.1)?;
        if min > max {
            return Err(invalid(
                min_key,
                &min.to_string(),
                format!("must not exceed {max_key}"),
            ));
        }
        let value = number(key, default)?;
        if !(min..=max).contains(&value) {
            return Err(invalid(
                key,
                &value.to_string(),
                format!("must lie in [{min_key}, {max_key}] = [{min}, {max}]"),
            ));
        }
        Ok(value)
    };
    let session = bounded(
        "group.consumer.session.timeout.ms",
        45_000,
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
        (45_000, 60_000),
    )?;
    let heartbeat = bounded(
        "group.consumer.heartbeat.interval.ms",
        5_000,
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
        (5_000, 15_000),
    )?;
    if heartbeat >= session {
        return Err(invalid(
            "group.consumer.heartbeat.interval.ms",
            &heartbeat.to_string(),
            "must be less than group.consumer.session.timeout.ms",
        ));
    }
    let max_size = number("group.consumer.max.size", i64::from(i32::MAX))?;
    let assignors = match props.get("group.consumer.assignors") {
        None => vec![Assignor::Uniform, Assignor::Range],
        Some(list) => {
            let mut out = Vec::new();
            for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let a = assignor(name).ok_or_else(|| {
                    invalid(
                        "group.consumer.assignors",
                        list,
                        format!("{name} is not an assignor (uniform, range)"),
                    )
                })?;
                if !out.contains(&a) {
                    out.push(a);
                }
            }
            if out.is_empty() {
                return Err(invalid(
                    "group.consumer.assignors",
                    list,
                    "names no assignor",
                ));
            }
            out
        }
    };
    Ok(ConsumerSettings {
        session_timeout: Duration::from_millis(session as u64),
        heartbeat_interval_ms: heartbeat as i32,
        max_size: usize::try_from(max_size).unwrap_or(usize::MAX),
        assignors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_are_kafkas() {
        let s = from_properties(&BTreeMap::new()).expect("valid");
        assert_eq!(s.session_timeout, Duration::from_secs(45));
        assert_eq!(s.heartbeat_interval_ms, 5_000);
        assert_eq!(s.assignors, vec![Assignor::Uniform, Assignor::Range]);
    }

    #[test]
    fn timing_outside_its_bounds_names_the_bounds() {
        let e = from_properties(&props(&[("group.consumer.session.timeout.ms", "6000")]))
            .expect_err("below the minimum");
        assert!(
            e.to_string()
                .contains("group.consumer.min.session.timeout.ms"),
            "{e}"
        );
        let s = from_properties(&props(&[
            ("group.consumer.session.timeout.ms", "6000"),
            ("group.consumer.min.session.timeout.ms", "6000"),
            ("group.consumer.heartbeat.interval.ms", "500"),
            ("group.consumer.min.heartbeat.interval.ms", "500"),
        ]))
        .expect("lowered bounds");
        assert_eq!(s.heartbeat_interval_ms, 500);
        let e = from_properties(&props(&[
            ("group.consumer.session.timeout.ms", "6000"),
            ("group.consumer.min.session.timeout.ms", "6000"),
            ("group.consumer.heartbeat.interval.ms", "7000"),
            ("group.consumer.min.heartbeat.interval.ms", "500"),
        ]))
        .expect_err("heartbeat beyond the session");
        assert!(e.to_string().contains("less than"), "{e}");
    }

    #[test]
    fn assignors_by_short_or_class_name_and_unknown_ones_refused() {
        let s = from_properties(&props(&[(
            "group.consumer.assignors",
            "org.apache.kafka.coordinator.group.assignor.RangeAssignor, uniform",
        )]))
        .expect("valid");
        assert_eq!(s.assignors, vec![Assignor::Range, Assignor::Uniform]);
        let e = from_properties(&props(&[("group.consumer.assignors", "sticky")]))
            .expect_err("unknown");
        assert!(e.to_string().contains("sticky is not an assignor"), "{e}");
    }
}
