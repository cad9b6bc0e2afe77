//! ElectLeaders (`kafka-leader-election.sh`): preferred or unclean elections through the
//! controller (docs/replication.md §3, [`crate::controller::ElectionType`]). Needs ALTER on the
//! cluster (CLUSTER_AUTHORIZATION_FAILED otherwise). Version 0 asks for preferred elections;
//! no topic list means every partition, and then the partitions that needed no election are
//! left out of the answer, as Kafka's controller does.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::Broker;
use crate::controller::{Applied, ElectionType, MetadataCommand};
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::errors::ErrorCode;
use std::collections::BTreeMap;

pub(super) async fn handle(
    broker: &Broker,
    access: &Access<'_>,
    request: ElectLeadersRequest,
    version: i16,
) -> ElectLeadersResponse {
    let asked: Option<Vec<(String, i32)>> = request.topic_partitions.map(|topics| {
        topics
            .into_iter()
            .flat_map(|t| {
                let name = t.topic.0.to_string();
                t.partitions.into_iter().map(move |p| (name.clone(), p))
            })
            .collect()
    });
    let election = if version == 0 {
        Some(ElectionType::Preferred)
    } else {
        ElectionType::from_wire(request.election_type)
    };
    let refused = |code: ErrorCode, message: String| {
        let answers = asked
            .iter()
            .flatten()
            .map(|(topic, partition)| (topic.clone(), *partition, code.0))
            .collect();
        let response = answer(answers, Some(message));
        // Version 0 has no top-level error code: the partitions carry it.
        if version == 0 {
            response
        } else {
            response.with_error_code(code.0)
        }
    };
    if !access.cluster(Operation::Alter) {
        return refused(
            ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
            "ElectLeaders needs ALTER on the cluster".into(),
        );
    }
    let Some(election) = election else {
        return refused(
            ErrorCode::INVALID_REQUEST,
            format!("unknown election type {}", request.election_type),
        );
    };
    let command = MetadataCommand::ElectLeaders {
        election,
        partitions: asked.clone(),
    };
    match broker.write(command).await {
        Ok(Applied::Elections(answers)) => answer(answers, None),
        Ok(other) => refused(
            ErrorCode::UNKNOWN_SERVER_ERROR,
            format!("the controller answered {other:?}"),
        ),
        Err(e) => refused(ErrorCode(e.error_code()), e.to_string()),
    }
}

/// The response: each partition's code by topic; `message` on every failed one.
fn answer(answers: Vec<(String, i32, i16)>, message: Option<String>) -> ElectLeadersResponse {
    let mut by_topic: BTreeMap<String, Vec<PartitionResult>> = BTreeMap::new();
    for (topic, partition, code) in answers {
        let message = match (code, &message) {
            (0, _) => None,
            (_, Some(m)) => Some(m.clone()),
            (code, None) => Some(ErrorCode(code).name().to_string()),
        };
        by_topic.entry(topic).or_default().push(
            PartitionResult::default()
                .with_partition_id(partition)
                .with_error_code(code)
                .with_error_message(message.map(StrBytes::from_string)),
        );
    }
    ElectLeadersResponse::default().with_replica_election_results(
        by_topic
            .into_iter()
            .map(|(topic, results)| {
                ReplicaElectionResult::default()
                    .with_topic(TopicName(StrBytes::from_string(topic)))
                    .with_partition_result(results)
            })
            .collect(),
    )
}
