//! CreateTopics: through the controller, then the partition logs. Needs CREATE on the cluster
//! or on the topic. A topic created with `mirror.name` is refused (INVALID_CONFIG): only
//! StartMirrorTopics makes mirror topics (see `kmirror_actors::policy::guards`). An internal topic's name
//! is refused (INVALID_REQUEST, see [`crate::broker::internal_topics`]). Configs are checked
//! as IncrementalAlterConfigs checks them (only configs this broker enforces, within their
//! ranges: INVALID_CONFIG), so a topic never silently lacks what it was created with. One
//! request creates at most [`MAX_PARTITIONS_PER_REQUEST`] partitions (POLICY_VIOLATION). A
//! replication factor of 0, below -1 (`default.replication.factor`) or above the live brokers is
//! INVALID_REPLICATION_FACTOR, as Kafka answers (docs/errors.md). The controller places the
//! replicas (docs/replication.md §2); explicit replica assignments are not taken yet and are
//! refused (INVALID_REQUEST) rather than ignored.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::{Broker, internal_topics};
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;
use kmirror_actors::policy::guards;
use kmirror_protocol::errors::ErrorCode;
use std::collections::BTreeMap;

/// The most partitions one CreateTopics or CreatePartitions request may create: Kafka's bound on
/// the records one controller operation writes. Without it one request could make the broker
/// open, and later delete, hundreds of thousands of logs while answering nothing else.
pub(super) const MAX_PARTITIONS_PER_REQUEST: i64 = 10_000;

/// Takes `adding` partitions from a request's budget (`used` so far); the refusal when they do
/// not fit.
pub(super) fn take_partitions(used: &mut i64, adding: i64) -> Result<(), String> {
    if *used + adding.max(0) > MAX_PARTITIONS_PER_REQUEST {
        return Err(format!(
            "one request may create at most {MAX_PARTITIONS_PER_REQUEST} partitions; this one \
             asks for {}",
            *used + adding
        ));
    }
    *used += adding.max(0);
    Ok(())
}

/// Why a topic cannot have `factor` replicas with `live` brokers (-1 takes the default, one).
fn replication_refused(factor: i16, live: usize) -> Option<String> {
    if factor == 0 || factor < -1 {
        return Some(format!(
            "replication factor {factor}: it must be at least 1, or -1 for the default"
        ));
    }
    (usize::try_from(factor).is_ok_and(|f| f > live)).then(|| {
        format!("replication factor {factor} cannot be reached: only {live} broker(s) are live")
    })
}

pub(super) async fn handle(
    broker: &Broker,
    access: &Access<'_>,
    request: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let mut results = Vec::new();
    let mut budget = 0;
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let partitions = if topic.num_partitions == -1 {
            broker.config().num_partitions
        } else {
            topic.num_partitions
        };
        let configs: BTreeMap<String, String> = topic
            .configs
            .iter()
            .filter_map(|c| {
                c.value
                    .as_ref()
                    .map(|v| (c.name.to_string(), v.to_string()))
            })
            .collect();
        let mut result = CreatableTopicResult::default().with_name(topic.name.clone());
        if !access.cluster(Operation::Create) && !access.topic(Operation::Create, &name) {
            results.push(result.with_error_code(ErrorCode::TOPIC_AUTHORIZATION_FAILED.0));
            continue;
        }
        if let Some(why) = internal_topics::creation_refused(&name) {
            results.push(
                result
                    .with_error_code(ErrorCode::INVALID_REQUEST.0)
                    .with_error_message(Some(StrBytes::from_string(why))),
            );
            continue;
        }
        if topic
            .configs
            .iter()
            .any(|c| guards::managed_by_mirror_rpcs(&c.name))
        {
            results.push(
                result
                    .with_error_code(ErrorCode::INVALID_CONFIG.0)
                    .with_error_message(Some(StrBytes::from_static_str(
                        guards::MIRROR_NAME_REFUSED,
                    ))),
            );
            continue;
        }
        if !topic.assignments.is_empty() {
            results.push(
                result
                    .with_error_code(ErrorCode::INVALID_REQUEST.0)
                    .with_error_message(Some(StrBytes::from_static_str(
                        "explicit replica assignments are not supported: give the partition \
                         count and the replication factor, and the controller places the replicas",
                    ))),
            );
            continue;
        }
        if let Some(why) = replication_refused(topic.replication_factor, broker.live_brokers()) {
            results.push(
                result
                    .with_error_code(ErrorCode::INVALID_REPLICATION_FACTOR.0)
                    .with_error_message(Some(StrBytes::from_string(why))),
            );
            continue;
        }
        let changes: Vec<_> = configs
            .iter()
            .map(|(k, v)| (k.clone(), 0, Some(v.clone())))
            .collect();
        if let Err(why) = super::alter_configs::apply(&BTreeMap::new(), &changes) {
            results.push(
                result
                    .with_error_code(ErrorCode::INVALID_CONFIG.0)
                    .with_error_message(Some(StrBytes::from_string(why))),
            );
            continue;
        }
        if let Err(why) = take_partitions(&mut budget, i64::from(partitions)) {
            results.push(
                result
                    .with_error_code(ErrorCode::POLICY_VIOLATION.0)
                    .with_error_message(Some(StrBytes::from_string(why))),
            );
            continue;
        }
        let factor = i32::from(topic.replication_factor);
        let outcome = if request.validate_only {
            broker
                .check_create_topic(&name, partitions, factor)
                .map(|()| None)
        } else {
            broker
                .create_topic(&name, partitions, factor, configs, None)
                .await
                .map(Some)
        };
        match outcome {
            Ok(created) => {
                let replicas = created
                    .as_ref()
                    .and_then(|t| t.partitions.first())
                    .map_or(broker.replication_factor(factor), |p| {
                        p.replicas.len() as i32
                    });
                result = result
                    .with_num_partitions(partitions)
                    .with_replication_factor(i16::try_from(replicas).unwrap_or(i16::MAX))
                    .with_topic_id(created.map(|t| t.topic_id).unwrap_or_default());
            }
            Err(e) => {
                result = result
                    .with_error_code(e.error_code())
                    .with_error_message(Some(StrBytes::from_string(e.to_string())));
            }
        }
        results.push(result);
    }
    CreateTopicsResponse::default().with_topics(results)
}
