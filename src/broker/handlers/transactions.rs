//! The transactional producer's coordinator APIs: AddPartitionsToTxn (client versions 0-3),
//! AddOffsetsToTxn, TxnOffsetCommit and EndTxn. Each is one transition of the transaction
//! coordinator; EndTxn then writes the markers before answering, so a client that sees its
//! commit acknowledged finds the records readable with READ_COMMITTED. A read-only (mirror)
//! partition cannot join a transaction (READ_ONLY_TOPIC, the others of the request not
//! attempted), so no marker is ever due in one. Every one needs WRITE on
//! the transactional id; adding partitions WRITE on their topics; offsets READ on the group (and
//! on the topics, for TxnOffsetCommit).

use super::access::Access;
use crate::acl::Operation;
use crate::broker::{Broker, now_ms};
use crate::groups::Committed;
use crate::txn::TxnError;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
};
use kmirror_protocol::errors::ErrorCode;
use std::sync::atomic::Ordering;

fn code(result: Result<(), TxnError>) -> i16 {
    result.err().map_or(0, TxnError::code)
}

pub(super) fn add_partitions(
    broker: &Broker,
    access: &Access,
    request: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    let id_allowed =
        access.transactional_id(Operation::Write, &request.v3_and_below_transactional_id);
    let topics = request.v3_and_below_topics;
    let requested: Vec<(String, i32)> = topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), *p)))
        .collect();
    let unknown: Vec<&(String, i32)> = requested
        .iter()
        .filter(|(topic, index)| broker.partition(topic, *index).is_none())
        .collect();
    let read_only: Vec<&(String, i32)> = requested
        .iter()
        .filter(|(topic, index)| {
            broker
                .partition(topic, *index)
                .is_some_and(|p| p.read_only.load(Ordering::SeqCst))
        })
        .collect();
    let denied: Vec<&String> = requested
        .iter()
        .map(|(topic, _)| topic)
        .filter(|topic| !access.topic(Operation::Write, topic))
        .collect();
    // Kafka adds all or nothing: one refused partition leaves the others not attempted.
    let outcome = if !id_allowed {
        ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.0
    } else if unknown.is_empty() && denied.is_empty() && read_only.is_empty() {
        code(broker.transactions().add(
            &request.v3_and_below_transactional_id.0,
            (
                request.v3_and_below_producer_id.0,
                request.v3_and_below_producer_epoch,
            ),
            &requested,
            None,
            now_ms(),
        ))
    } else {
        ErrorCode::OPERATION_NOT_ATTEMPTED.0
    };
    let results = topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            let partitions = topic
                .partitions
                .iter()
                .map(|index| {
                    let error = if !id_allowed {
                        outcome
                    } else if denied.contains(&&name) {
                        ErrorCode::TOPIC_AUTHORIZATION_FAILED.0
                    } else if unknown.contains(&&(name.clone(), *index)) {
                        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0
                    } else if read_only.contains(&&(name.clone(), *index)) {
                        ErrorCode::READ_ONLY_TOPIC.0
                    } else {
                        outcome
                    };
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(*index)
                        .with_partition_error_code(error)
                })
                .collect();
            AddPartitionsToTxnTopicResult::default()
                .with_name(topic.name)
                .with_results_by_partition(partitions)
        })
        .collect();
    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results)
}

pub(super) fn add_offsets(
    broker: &Broker,
    access: &Access,
    request: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    if !access.transactional_id(Operation::Write, &request.transactional_id) {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.0);
    }
    if !access.group(Operation::Read, &request.group_id) {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(ErrorCode::GROUP_AUTHORIZATION_FAILED.0);
    }
    let result = broker.transactions().add(
        &request.transactional_id.0,
        (request.producer_id.0, request.producer_epoch),
        &[],
        Some(&request.group_id.0),
        now_ms(),
    );
    AddOffsetsToTxnResponse::default().with_error_code(code(result))
}

pub(super) fn commit_offsets(
    broker: &Broker,
    access: &Access,
    request: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let refused = if !access.transactional_id(Operation::Write, &request.transactional_id) {
        Some(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.0)
    } else if !access.group(Operation::Read, &request.group_id) {
        Some(ErrorCode::GROUP_AUTHORIZATION_FAILED.0)
    } else {
        None
    };
    let offsets: Vec<(String, i32, Committed)> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let committed = Committed {
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                };
                (t.name.0.to_string(), p.partition_index, committed)
            })
        })
        .collect();
    let (known, unknown): (Vec<_>, Vec<_>) = offsets
        .into_iter()
        .partition(|(topic, index, _)| broker.partition(topic, *index).is_some());
    let denied = |topic: &str| !access.topic(Operation::Read, topic);
    let outcome = match refused {
        Some(code) => code,
        None if known.iter().any(|(topic, _, _)| denied(topic)) => {
            ErrorCode::OPERATION_NOT_ATTEMPTED.0
        }
        None => code(broker.transactions().commit_offsets(
            &request.transactional_id.0,
            (request.producer_id.0, request.producer_epoch),
            &request.group_id.0,
            &known,
            now_ms(),
        )),
    };
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let is_unknown = unknown
                        .iter()
                        .any(|(t, i, _)| *t == name && *i == p.partition_index);
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(if refused.is_none() && denied(&name) {
                            ErrorCode::TOPIC_AUTHORIZATION_FAILED.0
                        } else if is_unknown {
                            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0
                        } else {
                            outcome
                        })
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

pub(super) fn end(broker: &Broker, access: &Access, request: EndTxnRequest) -> EndTxnResponse {
    let producer = (request.producer_id.0, request.producer_epoch);
    if !access.transactional_id(Operation::Write, &request.transactional_id) {
        return EndTxnResponse::default()
            .with_error_code(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.0)
            .with_producer_id(request.producer_id)
            .with_producer_epoch(request.producer_epoch);
    }
    let result = broker
        .transactions()
        .end(
            &request.transactional_id.0,
            producer,
            request.committed,
            now_ms(),
        )
        .and_then(|completion| match completion {
            // The decision is durable; housekeeping finishes the markers, and the client's
            // retry (CONCURRENT_TRANSACTIONS is retriable) then finds the transaction ended.
            Some(completion) => broker
                .complete_transaction(&completion)
                .map_err(|_| TxnError::ConcurrentTransactions),
            None => Ok(()),
        });
    EndTxnResponse::default()
        .with_error_code(code(result))
        .with_producer_id(request.producer_id)
        .with_producer_epoch(request.producer_epoch)
}
