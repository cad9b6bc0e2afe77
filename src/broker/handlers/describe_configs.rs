//! DescribeConfigs: a topic's effective log settings (its overrides, else the broker's) and its
//! other stored configs; `mirror.*` configs are internal and never shown. The broker resource
//! shows the broker's log defaults. Needs DESCRIBE_CONFIGS on the topic, or on the cluster for
//! the broker resource. A mirror's configs (resource type 64) are described by
//! [`super::mirror_configs`], secrets hidden.

use super::access::Access;
use super::mirror_configs;
use crate::acl::Operation;
use crate::broker::{Broker, internal_topics};
use crate::storage::LogConfig;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::errors::ErrorCode;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
/// Config sources, as Kafka numbers them.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const STATIC_BROKER_CONFIG: i8 = 4;

fn entry(name: &str, value: String, source: i8, read_only: bool) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_string(name.to_string()))
        .with_value(Some(StrBytes::from_string(value)))
        .with_config_source(source)
        .with_read_only(read_only)
}

/// The server.properties key behind a topic config's default.
fn broker_key(topic_key: &str) -> &str {
    match topic_key {
        "segment.bytes" => "log.segment.bytes",
        "segment.ms" => "log.roll.ms",
        "index.interval.bytes" => "log.index.interval.bytes",
        "retention.bytes" => "log.retention.bytes",
        "retention.ms" => "log.retention.ms",
        "flush.messages" => "log.flush.interval.messages",
        "flush.ms" => "log.flush.interval.ms",
        "max.message.bytes" => "message.max.bytes",
        other => other,
    }
}

pub(super) fn handle(
    broker: &Broker,
    access: &Access,
    request: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let results = request
        .resources
        .into_iter()
        .map(|resource| {
            let wanted = |name: &str| {
                resource
                    .configuration_keys
                    .as_ref()
                    .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
            };
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            let configs: Vec<DescribeConfigsResourceResult> = match resource.resource_type {
                TOPIC if !access.topic(Operation::DescribeConfigs, &resource.resource_name) => {
                    return result.with_error_code(ErrorCode::TOPIC_AUTHORIZATION_FAILED.0);
                }
                BROKER if !access.cluster(Operation::DescribeConfigs) => {
                    return result.with_error_code(ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0);
                }
                TOPIC => {
                    let Some(topic) = broker.topic(&resource.resource_name) else {
                        return result.with_error_code(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0);
                    };
                    let effective = internal_topics::log_config(
                        &broker.config().log,
                        &resource.resource_name,
                        &topic.configs,
                    );
                    let mut configs: Vec<_> = effective
                        .entries()
                        .into_iter()
                        .map(|(name, value)| {
                            let source = if topic.configs.contains_key(name) {
                                DYNAMIC_TOPIC_CONFIG
                            } else {
                                STATIC_BROKER_CONFIG
                            };
                            entry(name, value, source, false)
                        })
                        .collect();
                    for (name, value) in &topic.configs {
                        let shown = LogConfig::NAMES.contains(&name.as_str());
                        if !shown && !name.starts_with("mirror.") {
                            configs.push(entry(name, value.clone(), DYNAMIC_TOPIC_CONFIG, false));
                        }
                    }
                    configs
                }
                BROKER => broker
                    .config()
                    .log
                    .entries()
                    .into_iter()
                    .map(|(name, value)| entry(broker_key(name), value, STATIC_BROKER_CONFIG, true))
                    .collect(),
                mirror_configs::CLUSTER_MIRROR => {
                    match mirror_configs::describe(broker, access, &resource.resource_name) {
                        Ok(configs) => configs,
                        Err((code, message)) => {
                            return result
                                .with_error_code(code)
                                .with_error_message(Some(StrBytes::from_string(message)));
                        }
                    }
                }
                _ => return result.with_error_code(ErrorCode::INVALID_REQUEST.0),
            };
            result.with_configs(
                configs
                    .into_iter()
                    .filter(|c| wanted(c.name.as_str()))
                    .collect(),
            )
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}
