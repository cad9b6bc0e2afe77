//! IncrementalAlterConfigs on topics: SET, DELETE, APPEND and SUBTRACT (list values) applied to
//! the stored configs, validated as a whole, then written by the controller and applied to the
//! open logs. Only configs this broker enforces are accepted (the log settings and `mirror.*`);
//! anything else is INVALID_CONFIG rather than stored and ignored. Broker configs are static.

use crate::broker::Broker;
use crate::storage::LogConfig;
use kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use kafka_protocol::protocol::StrBytes;
use std::collections::BTreeMap;

const TOPIC: i8 = 2;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_CONFIG: i16 = 40;
const INVALID_REQUEST: i16 = 42;

/// The configs after `changes`, or why they are refused.
fn apply(
    current: &BTreeMap<String, String>,
    changes: &[AlterableConfig],
) -> Result<BTreeMap<String, String>, String> {
    let known = LogConfig::NAMES;
    let mut out = current.clone();
    for change in changes {
        let name = change.name.to_string();
        if !known.contains(&name.as_str()) && !name.starts_with("mirror.") {
            return Err(format!("{name} is not a topic config this broker supports"));
        }
        let value = change
            .value
            .as_ref()
            .map(|v| v.to_string())
            .unwrap_or_default();
        let list = |v: &str| -> Vec<String> {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        };
        match change.config_operation {
            0 => {
                if known.contains(&name.as_str()) && value.trim().parse::<i64>().is_err() {
                    return Err(format!("{name}={value:?} is not a number"));
                }
                out.insert(name, value);
            }
            1 => {
                out.remove(&name);
            }
            2 | 3 if known.contains(&name.as_str()) => {
                return Err(format!("{name} is not a list config"));
            }
            2 => {
                let mut items = list(out.get(&name).map_or("", String::as_str));
                items.extend(
                    list(&value)
                        .into_iter()
                        .filter(|v| !items.contains(v))
                        .collect::<Vec<_>>(),
                );
                out.insert(name, items.join(","));
            }
            3 => {
                let remove = list(&value);
                let items: Vec<String> = list(out.get(&name).map_or("", String::as_str))
                    .into_iter()
                    .filter(|v| !remove.contains(v))
                    .collect();
                out.insert(name, items.join(","));
            }
            op => return Err(format!("unknown config operation {op}")),
        }
    }
    Ok(out)
}

pub(super) fn handle(
    broker: &Broker,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let responses = request
        .resources
        .into_iter()
        .map(|resource| {
            let answer = AlterConfigsResourceResponse::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            let refuse = |code: i16, message: String| {
                answer
                    .clone()
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_string(message)))
            };
            if resource.resource_type != TOPIC {
                return refuse(
                    INVALID_REQUEST,
                    "only topic configs can change; broker configs come from server.properties"
                        .to_string(),
                );
            }
            let name = resource.resource_name.to_string();
            let Some(topic) = broker.topics().get(&name).cloned() else {
                return refuse(UNKNOWN_TOPIC_OR_PARTITION, format!("unknown topic {name}"));
            };
            let configs = match apply(&topic.configs, &resource.configs) {
                Ok(configs) => configs,
                Err(why) => return refuse(INVALID_CONFIG, why),
            };
            if request.validate_only {
                return answer;
            }
            match broker.set_topic_configs(&name, configs) {
                Ok(_) => answer,
                Err(e) => refuse(e.error_code(), e.to_string()),
            }
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}
