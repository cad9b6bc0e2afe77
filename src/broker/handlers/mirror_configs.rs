//! DescribeConfigs and IncrementalAlterConfigs (and the legacy AlterConfigs) on a mirror: the
//! KIP's CLUSTER_MIRROR config resource (type 64, named by the mirror). Describing needs
//! DESCRIBE_CONFIGS on the ClusterMirror resource and never shows a secret (every key Kafka
//! types PASSWORD, see [`mirror_configs::is_secret`]: flagged sensitive, value null, as Kafka shows them). Altering needs ALTER_CONFIGS; the result is checked as a whole by
//! [`kmirror_actors::engine::mirror_configs::validate`] and by building the source client from it
//! (stores read, keys decrypted: INVALID_CONFIG naming what is wrong), then written by
//! the controller; every broker's engine then drops the mirror's source connections, so the
//! next one uses the new credentials, certificates or bootstrap servers, without a restart.
//! `mirror.source.cluster.id` cannot change: it is what the mirror's cluster-id guard checks.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::Broker;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult;
use kafka_protocol::protocol::StrBytes;
use kmirror_actors::engine::mirror_configs;
use kmirror_protocol::errors::ErrorCode;
use std::collections::BTreeMap;

/// Kafka's config resource type of a cluster mirror.
pub(super) const CLUSTER_MIRROR: i8 = 64;
/// Config source of a mirror's keys, as Kafka numbers dynamic configs of other resources.
const DYNAMIC_CONFIG: i8 = 1;

/// The configs of mirror `name`, secrets hidden; `Err` is the error code and message.
pub(super) fn describe(
    broker: &Broker,
    access: &Access<'_>,
    name: &str,
) -> Result<Vec<DescribeConfigsResourceResult>, (i16, String)> {
    if !access.mirror(Operation::DescribeConfigs, name) {
        return Err((
            ErrorCode::CLUSTER_MIRROR_AUTHORIZATION_FAILED.0,
            format!("not authorized to describe the configs of mirror {name}"),
        ));
    }
    let configs = broker.mirrors().remove(name).ok_or_else(|| {
        (
            ErrorCode::UNKNOWN_CLUSTER_MIRROR.0,
            format!("no mirror named {name}"),
        )
    })?;
    Ok(configs
        .into_iter()
        .map(|(key, value)| {
            let secret = mirror_configs::is_secret(&key);
            DescribeConfigsResourceResult::default()
                .with_name(StrBytes::from_string(key))
                .with_value((!secret).then(|| StrBytes::from_string(value)))
                .with_is_sensitive(secret)
                .with_config_source(DYNAMIC_CONFIG)
                .with_read_only(false)
        })
        .collect())
}

/// Alters mirror `name` to `change(current configs)`; `Err` is the error code and message.
pub(super) async fn alter(
    broker: &Broker,
    access: &Access<'_>,
    name: &str,
    validate_only: bool,
    change: impl FnOnce(&BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String>,
) -> Result<(), (i16, String)> {
    if !access.mirror(Operation::AlterConfigs, name) {
        return Err((
            ErrorCode::CLUSTER_MIRROR_AUTHORIZATION_FAILED.0,
            format!("not authorized to alter the configs of mirror {name}"),
        ));
    }
    let current = broker.mirrors().remove(name).ok_or_else(|| {
        (
            ErrorCode::UNKNOWN_CLUSTER_MIRROR.0,
            format!("no mirror named {name}"),
        )
    })?;
    let invalid = |why: String| (ErrorCode::INVALID_CONFIG.0, why);
    let next = change(&current).map_err(invalid)?;
    let fetchers = broker.config().mirror_num_replica_fetchers;
    let settings = mirror_configs::check_change(&current, &next, fetchers).map_err(invalid)?;
    for (old, new) in &settings.renamed {
        tracing::warn!(mirror = name, "{}", mirror_configs::alias_warning(old, new));
    }
    if validate_only || next == current {
        return Ok(());
    }
    broker
        .set_mirror_configs(name, next, current)
        .await
        .map_err(|e| (e.error_code(), e.to_string()))
}
