//! DeleteTopics: by name (every version) or by topic id (v6+). Needs DELETE on the topic. A
//! mirroring or paused topic answers READ_ONLY_TOPIC, telling the operator to stop it first;
//! a stopped one (`<mirror>.removed`) is deleted like any topic (see `kmirror_actors::policy::guards`).
//! An internal topic is never deleted (INVALID_REQUEST, see [`crate::broker::internal_topics`]).

use super::access::Access;
use crate::acl::Operation;
use crate::broker::{Broker, internal_topics};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kmirror_actors::policy::guards;
use kmirror_protocol::errors::ErrorCode;

pub(super) async fn handle(
    broker: &Broker,
    access: &Access<'_>,
    request: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    let wanted: Vec<(Option<TopicName>, uuid::Uuid)> = if request.topics.is_empty() {
        request
            .topic_names
            .into_iter()
            .map(|n| (Some(n), uuid::Uuid::nil()))
            .collect()
    } else {
        request
            .topics
            .into_iter()
            .map(|t| (t.name, t.topic_id))
            .collect()
    };
    let mut responses = Vec::with_capacity(wanted.len());
    for (name, id) in wanted {
        // One topic's answer (an async block, so its early returns end only this topic).
        let answer = async {
            let name = match name {
                Some(name) => Some(name.0.to_string()),
                None => broker.topic_name(&id),
            };
            let Some(name) = name else {
                return DeletableTopicResult::default()
                    .with_topic_id(id)
                    .with_error_code(ErrorCode::UNKNOWN_TOPIC_ID.0);
            };
            let result = DeletableTopicResult::default()
                .with_name(Some(TopicName(StrBytes::from_string(name.clone()))));
            if !access.topic(Operation::Delete, &name) {
                return result
                    .with_topic_id(id)
                    .with_error_code(ErrorCode::TOPIC_AUTHORIZATION_FAILED.0);
            }
            if let Some(why) = internal_topics::deletion_refused(&name) {
                return result
                    .with_topic_id(id)
                    .with_error_code(ErrorCode::INVALID_REQUEST.0)
                    .with_error_message(Some(StrBytes::from_string(why)));
            }
            let refused = broker
                .topic(&name)
                .and_then(|t| guards::delete_refused(&name, &t.configs));
            if let Some(why) = refused {
                return result
                    .with_topic_id(id)
                    .with_error_code(ErrorCode::READ_ONLY_TOPIC.0)
                    .with_error_message(Some(StrBytes::from_string(why)));
            }
            match broker.delete_topic(&name).await {
                Ok(topic) => result.with_topic_id(topic.topic_id),
                Err(e) => result
                    .with_topic_id(id)
                    .with_error_code(e.error_code())
                    .with_error_message(Some(StrBytes::from_string(e.to_string()))),
            }
        };
        responses.push(answer.await);
    }
    DeleteTopicsResponse::default().with_responses(responses)
}
