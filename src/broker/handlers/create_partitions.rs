//! CreatePartitions: grows topics through the controller (one node: manual assignments are
//! ignored, every partition lives here). Needs ALTER on the topic. A mirror topic that is not
//! stopped answers READ_ONLY_TOPIC, validate-only too: its partition count follows the source's
//! (see [`super::mirror_guards`]). An internal topic keeps its partition count
//! (POLICY_VIOLATION, see [`crate::broker::internal_topics`]). One request adds at most
//! [`super::create_topics::MAX_PARTITIONS_PER_REQUEST`] partitions (POLICY_VIOLATION).

use super::access::Access;
use super::mirror_guards;
use crate::acl::Operation;
use crate::broker::{Broker, internal_topics};
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::errors::ErrorCode;

pub(super) async fn handle(
    broker: &Broker,
    access: &Access<'_>,
    request: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut budget = 0;
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        // One topic's answer (an async block, so its early returns end only this topic).
        let answer = async {
            let name = topic.name.0.to_string();
            let result = CreatePartitionsTopicResult::default().with_name(topic.name);
            if !access.topic(Operation::Alter, &name) {
                return result.with_error_code(ErrorCode::TOPIC_AUTHORIZATION_FAILED.0);
            }
            if let Some(why) = internal_topics::create_partitions_refused(&name) {
                return result
                    .with_error_code(ErrorCode::POLICY_VIOLATION.0)
                    .with_error_message(Some(StrBytes::from_string(why)));
            }
            if let Some(why) = mirror_guards::create_partitions_refused(broker, &name) {
                return result
                    .with_error_code(ErrorCode::READ_ONLY_TOPIC.0)
                    .with_error_message(Some(StrBytes::from_string(why)));
            }
            let current = broker.topic(&name).map_or(0, |t| t.partitions.len() as i64);
            let adding = i64::from(topic.count) - current;
            if let Err(why) = super::create_topics::take_partitions(&mut budget, adding) {
                return result
                    .with_error_code(ErrorCode::POLICY_VIOLATION.0)
                    .with_error_message(Some(StrBytes::from_string(why)));
            }
            let outcome = if request.validate_only {
                broker.check_create_partitions(&name, topic.count)
            } else {
                broker
                    .create_partitions(&name, topic.count)
                    .await
                    .map(|_| ())
            };
            match outcome {
                Ok(()) => result,
                Err(e) => result
                    .with_error_code(e.error_code())
                    .with_error_message(Some(StrBytes::from_string(e.to_string()))),
            }
        };
        results.push(answer.await);
    }
    CreatePartitionsResponse::default().with_results(results)
}
