//! Topic config changes: IncrementalAlterConfigs (SET, DELETE, APPEND and SUBTRACT on list
//! values) and the legacy AlterConfigs (the given set replaces the topic's visible configs; the
//! internal `mirror.*` ones stay). The result is validated as a whole, then written by the
//! controller and applied to the open logs. Only configs this broker enforces are accepted (the
//! log settings and `mirror.*`); anything else is INVALID_CONFIG rather than stored and ignored.
//! `mirror.name` is refused (INVALID_CONFIG), and so are changes of a mirror topic's synced or
//! retention configs until it is stopped (POLICY_VIOLATION), both judged on the change as a
//! whole (see [`super::mirror_guards`]), validate-only requests too; so are changes of an
//! internal topic's retention or cleanup policy (POLICY_VIOLATION, see
//! [`crate::broker::internal_topics`]). Broker configs are static.
//! Needs ALTER_CONFIGS on the topic. A mirror's configs (resource type 64) change through
//! [`super::mirror_configs`].

use super::access::Access;
use super::mirror_configs;
use super::mirror_guards;
use crate::acl::Operation;
use crate::broker::{Broker, internal_topics};
use crate::storage::LogConfig;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, alter_configs_response, incremental_alter_configs_response,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_actors::policy::guards;
use kmirror_protocol::errors::ErrorCode;
use std::collections::BTreeMap;

const TOPIC: i8 = 2;
const SET: i8 = 0;

/// One requested change: name, operation (IncrementalAlterConfigs numbering), value.
type Change = (String, i8, Option<String>);

/// The topic configs after `changes`, or why they are refused.
pub(super) fn apply(
    current: &BTreeMap<String, String>,
    changes: &[Change],
) -> Result<BTreeMap<String, String>, String> {
    let known = LogConfig::NAMES;
    for (name, operation, value) in changes {
        if !known.contains(&name.as_str()) && !name.starts_with("mirror.") {
            return Err(format!("{name} is not a topic config this broker supports"));
        }
        if known.contains(&name.as_str()) {
            match *operation {
                SET => LogConfig::check(name, value.as_deref().unwrap_or_default())?,
                2 | 3 => return Err(format!("{name} is not a list config")),
                _ => {}
            }
        }
    }
    apply_operations(current, changes)
}

/// `changes` applied in order: SET, DELETE, APPEND and SUBTRACT (on comma-separated lists).
pub(super) fn apply_operations(
    current: &BTreeMap<String, String>,
    changes: &[Change],
) -> Result<BTreeMap<String, String>, String> {
    let mut out = current.clone();
    for (name, operation, value) in changes {
        let name = name.clone();
        let value = value.clone().unwrap_or_default();
        let list = |v: &str| -> Vec<String> {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        };
        match *operation {
            SET => {
                out.insert(name, value);
            }
            1 => {
                out.remove(&name);
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

/// Alters one resource; `Err` is the error code and message.
async fn alter(
    broker: &Broker,
    access: &Access<'_>,
    resource_type: i8,
    name: &str,
    validate_only: bool,
    changes: impl FnOnce(&BTreeMap<String, String>) -> (BTreeMap<String, String>, Vec<Change>),
) -> Result<(), (i16, String)> {
    if resource_type == mirror_configs::CLUSTER_MIRROR {
        return mirror_configs::alter(broker, access, name, validate_only, |current| {
            let (base, changes) = changes(current);
            apply_operations(&base, &changes)
        })
        .await;
    }
    if resource_type != TOPIC {
        return Err((
            ErrorCode::INVALID_REQUEST.0,
            "only topic and mirror configs can change; broker configs come from \
             server.properties"
                .to_string(),
        ));
    }
    if !access.topic(Operation::AlterConfigs, name) {
        return Err((
            ErrorCode::TOPIC_AUTHORIZATION_FAILED.0,
            format!("not authorized to alter the configs of {name}"),
        ));
    }
    let Some(topic) = broker.topic(name) else {
        return Err((
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0,
            format!("unknown topic {name}"),
        ));
    };
    let (base, changes) = changes(&topic.configs);
    let named: Vec<&str> = changes.iter().map(|(name, _, _)| name.as_str()).collect();
    if named.iter().any(|key| guards::managed_by_mirror_rpcs(key)) {
        return Err((
            ErrorCode::INVALID_CONFIG.0,
            guards::MIRROR_NAME_REFUSED.to_string(),
        ));
    }
    let configs = apply(&base, &changes).map_err(|why| (ErrorCode::INVALID_CONFIG.0, why))?;
    if let Some(why) = internal_topics::config_change_refused(name, &topic.configs, &configs) {
        return Err((ErrorCode::POLICY_VIOLATION.0, why));
    }
    if let Some(refused) =
        mirror_guards::config_change_refused(broker, name, &topic.configs, &configs)
    {
        return Err((refused.code.0, refused.message));
    }
    if validate_only {
        return Ok(());
    }
    broker
        .set_topic_configs(name, configs)
        .await
        .map(|_| ())
        .map_err(|e| (e.error_code(), e.to_string()))
}

pub(super) async fn incremental(
    broker: &Broker,
    access: &Access<'_>,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
        responses.push({
            let changes: Vec<Change> = resource
                .configs
                .iter()
                .map(|c| {
                    let value = c.value.as_ref().map(|v| v.to_string());
                    (c.name.to_string(), c.config_operation, value)
                })
                .collect();
            let outcome = alter(
                broker,
                access,
                resource.resource_type,
                &resource.resource_name,
                request.validate_only,
                |current| (current.clone(), changes),
            )
            .await;
            let answer =
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_resource_type(resource.resource_type)
                    .with_resource_name(resource.resource_name);
            match outcome {
                Ok(()) => answer,
                Err((code, message)) => answer
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_string(message))),
            }
        });
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

pub(super) async fn legacy(
    broker: &Broker,
    access: &Access<'_>,
    request: AlterConfigsRequest,
) -> AlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
        responses.push({
            let changes: Vec<Change> = resource
                .configs
                .iter()
                .map(|c| {
                    (
                        c.name.to_string(),
                        SET,
                        c.value.as_ref().map(|v| v.to_string()),
                    )
                })
                .collect();
            let outcome = alter(
                broker,
                access,
                resource.resource_type,
                &resource.resource_name,
                request.validate_only,
                |current| {
                    let internal = current
                        .iter()
                        .filter(|(k, _)| k.starts_with("mirror."))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    (internal, changes)
                },
            )
            .await;
            let answer = alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name);
            match outcome {
                Ok(()) => answer,
                Err((code, message)) => answer
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_string(message))),
            }
        });
    }
    AlterConfigsResponse::default().with_responses(responses)
}
