//! A mirror's configs, checked as a whole in one place: CreateMirror refuses
//! what [`validate`] refuses, naming the key, and the engine loads a mirror through the same
//! function, so a stored mirror runs with exactly what was checked. The parsing itself belongs
//! to the parts that use each key: [`FetchSettings`] (`mirror.fetch.*`,
//! `mirror.num.replica.fetchers`), [`SyncFilters`] (the group, property and ACL patterns) and
//! [`ClientConfig`] (the source client's connection and security keys); this module adds what
//! none of them checks: `bootstrap.servers` as a `host:port` list, `mirror.fetch.backoff.ms`,
//! and that every `mirror.*` key is one a mirror has. Keys outside `mirror.*` are the source
//! client's; those it does not know are ignored, as Kafka's clients ignore them.
//!
//! [`check_not_this_cluster`] refuses a mirror whose source is the destination cluster itself
//! (starting a topic through it would truncate the topic it reads from).
//!
//! docs/mirror-configs.md is the operators' reference of these keys; keep the two together.

use super::fetch_settings::{FetchSettings, number_setting};
use super::sync_plan::SyncFilters;
use kmirror_protocol::client::ClientConfig;
use std::collections::{BTreeMap, HashMap};

/// Every `mirror.*` key a mirror's configs may hold.
pub const MIRROR_KEYS: &[&str] = &[
    "mirror.source.cluster.id",
    "mirror.fetch.max.bytes",
    "mirror.fetch.response.max.bytes",
    "mirror.fetch.wait.max.ms",
    "mirror.fetch.min.bytes",
    "mirror.fetch.backoff.ms",
    "mirror.num.replica.fetchers",
    "mirror.socket.receive.buffer.bytes",
    "mirror.groups.include",
    "mirror.groups.exclude",
    "mirror.acls.include",
    "mirror.topic.properties.exclude",
];

/// A mirror config that cannot be used; the message names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MirrorConfigError {
    /// A key's value is missing, does not parse or is out of range, or the key is unknown.
    #[error("{0}")]
    Invalid(String),
    /// The source is the destination cluster.
    #[error(
        "mirror.source.cluster.id {0} is this cluster's own id: the mirror's bootstrap.servers \
         reach this cluster, and a mirror's source must be another cluster"
    )]
    ThisCluster(String),
}

/// What a mirror runs with, once its configs are checked.
#[derive(Debug, Clone)]
pub struct MirrorSettings {
    /// How it fetches.
    pub fetch: FetchSettings,
    /// How it reaches the source.
    pub client: ClientConfig,
    /// What its metadata sync copies.
    pub filters: SyncFilters,
}

/// Checks every config of a mirror; `broker_fetchers` is the broker's
/// `mirror.num.replica.fetchers`, the default of the mirror's own.
pub fn validate(
    configs: &BTreeMap<String, String>,
    broker_fetchers: usize,
) -> Result<MirrorSettings, MirrorConfigError> {
    let invalid = |e: &dyn std::fmt::Display| MirrorConfigError::Invalid(e.to_string());
    if let Some(key) = configs
        .keys()
        .find(|k| k.starts_with("mirror.") && !MIRROR_KEYS.contains(&k.as_str()))
    {
        return Err(MirrorConfigError::Invalid(format!(
            "{key} is not a mirror config (see docs/mirror-configs.md)"
        )));
    }
    check_bootstrap(configs.get("bootstrap.servers").map(String::as_str))?;
    if configs
        .get("mirror.source.cluster.id")
        .is_some_and(|id| id.trim().is_empty())
    {
        return Err(MirrorConfigError::Invalid(
            "mirror.source.cluster.id is empty".into(),
        ));
    }
    let fetch = FetchSettings::from_configs(configs, broker_fetchers).map_err(|e| invalid(&e))?;
    // A documented mirror key the fetcher does not read yet: a value stored now must be one it
    // can use later.
    number_setting(
        configs,
        "mirror.fetch.backoff.ms",
        1000,
        0,
        i64::from(i32::MAX),
    )
    .map_err(|e| invalid(&e))?;
    let filters = SyncFilters::from_configs(configs).map_err(|e| invalid(&e))?;
    let props: HashMap<String, String> = configs.clone().into_iter().collect();
    let client = ClientConfig::from_properties(&props).map_err(|e| invalid(&e))?;
    Ok(MirrorSettings {
        fetch,
        client,
        filters,
    })
}

/// `bootstrap.servers`: required, comma-separated `host:port` entries (an IPv6 host in
/// brackets), no empty entry.
fn check_bootstrap(value: Option<&str>) -> Result<(), MirrorConfigError> {
    let invalid = |why: String| MirrorConfigError::Invalid(format!("bootstrap.servers {why}"));
    let value = value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| invalid("(the source cluster) is required".into()))?;
    for entry in value.split(',').map(str::trim) {
        let valid = entry.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty()
                && !host.contains(char::is_whitespace)
                && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !valid {
            return Err(invalid(format!(
                "{value:?}: {entry:?} is not host:port (a comma-separated list of host:port)"
            )));
        }
    }
    Ok(())
}

/// Refuses a mirror whose source cluster id is `own_cluster_id`.
pub fn check_not_this_cluster(
    source_cluster_id: &str,
    own_cluster_id: &str,
) -> Result<(), MirrorConfigError> {
    if source_cluster_id == own_cluster_id {
        Err(MirrorConfigError::ThisCluster(
            source_cluster_id.to_string(),
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn bootstrap_servers_is_a_host_port_list() {
        for good in ["a:9092", "a:9092, b.example:19092", "[::1]:9092"] {
            assert!(
                validate(&configs(&[("bootstrap.servers", good)]), 1).is_ok(),
                "{good}"
            );
        }
        for bad in [
            "", "a", "a:", ":9092", "a:0", "a:70000", "a:9092,", "a b:9092",
        ] {
            let e = validate(&configs(&[("bootstrap.servers", bad)]), 1).expect_err(bad);
            assert!(e.to_string().contains("bootstrap.servers"), "{e}");
        }
    }

    #[test]
    fn the_source_may_not_be_this_cluster() {
        assert!(check_not_this_cluster("A", "B").is_ok());
        let e = check_not_this_cluster("A", "A").expect_err("refused");
        assert!(e.to_string().contains("this cluster"), "{e}");
    }
}
