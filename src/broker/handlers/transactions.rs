//! The transactional producer's coordinator APIs: AddPartitionsToTxn (client versions 0-3, and
//! version 4 between brokers: a leader verifying a transactional produce),
//! AddOffsetsToTxn, TxnOffsetCommit and EndTxn. Each is one transition of the transaction
//! coordinator; EndTxn then writes the markers before answering, so a client that sees its
//! commit acknowledged finds the records readable with READ_COMMITTED. A read-only (mirror)
//! partition cannot join a transaction (READ_ONLY_TOPIC, the others of the request not
//! attempted), so no marker is ever due in one. Every one needs WRITE on
//! the transactional id; adding partitions WRITE on their topics; offsets READ on the group (and
//! on the topics, for TxnOffsetCommit).

use super::access::Access;
use crate::acl::Operation;
use crate::broker::coordinators::CoordinatorKind;
use crate::broker::{Broker, now_ms};
use crate::groups::Committed;
use crate::txn::TxnError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse, TransactionalId,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kmirror_protocol::errors::ErrorCode;
use std::sync::atomic::Ordering;

fn code(result: Result<(), TxnError>) -> i16 {
    result.err().map_or(0, TxnError::code)
}

pub(super) fn add_partitions(
    broker: &Broker,
    access: &Access<'_>,
    request: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    if version < 4 {
        let results = add_one(
            broker,
            access,
            &request.v3_and_below_transactional_id,
            (
                request.v3_and_below_producer_id.0,
                request.v3_and_below_producer_epoch,
            ),
            request.v3_and_below_topics,
        );
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
    }
    // Version 4: brokers batching transactions, or a partition leader verifying that a
    // transactional produce belongs to an ongoing transaction (docs/cluster.md).
    if !access.cluster(Operation::ClusterAction) {
        return AddPartitionsToTxnResponse::default()
            .with_error_code(ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0);
    }
    let results = request
        .transactions
        .into_iter()
        .map(|txn| {
            let producer = (txn.producer_id.0, txn.producer_epoch);
            let topic_results = if txn.verify_only {
                let coordinates =
                    broker.coordinates(CoordinatorKind::Transaction, &txn.transactional_id);
                let id = txn.transactional_id.0.to_string();
                partition_results(txn.topics, |name, index| {
                    if !coordinates {
                        ErrorCode::NOT_COORDINATOR.0
                    } else if name == CoordinatorKind::Group.topic() {
                        // A group coordinator verifying offsets committed in the transaction.
                        let group_partition =
                            |g: &str| broker.coordinator_partition_of(CoordinatorKind::Group, g);
                        code(
                            broker.transactions().check_offsets(&id, producer, |g| {
                                group_partition(g) == Some(index)
                            }),
                        )
                    } else if broker.transactions().includes(producer, name, index) {
                        0
                    } else {
                        ErrorCode::INVALID_TXN_STATE.0
                    }
                })
            } else {
                add_one(broker, access, &txn.transactional_id, producer, txn.topics)
            };
            AddPartitionsToTxnResult::default()
                .with_transactional_id(txn.transactional_id)
                .with_topic_results(topic_results)
        })
        .collect();
    AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
}

/// Adds partitions to one transaction (all or nothing): each partition's outcome.
fn add_one(
    broker: &Broker,
    access: &Access<'_>,
    transactional_id: &TransactionalId,
    producer: (i64, i16),
    topics: Vec<AddPartitionsToTxnTopic>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let id_allowed = access.transactional_id(Operation::Write, transactional_id);
    let requested: Vec<(String, i32)> = topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), *p)))
        .collect();
    let unknown: Vec<&(String, i32)> = requested
        .iter()
        .filter(|(topic, index)| !broker.partition_exists(topic, *index))
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
    } else if !broker.coordinates(CoordinatorKind::Transaction, transactional_id) {
        ErrorCode::NOT_COORDINATOR.0
    } else if unknown.is_empty() && denied.is_empty() && read_only.is_empty() {
        code(
            broker
                .transactions()
                .add(&transactional_id.0, producer, &requested, None, now_ms()),
        )
    } else {
        ErrorCode::OPERATION_NOT_ATTEMPTED.0
    };
    partition_results(topics, |name, index| {
        let partition = (name.to_string(), index);
        if !id_allowed || outcome == ErrorCode::NOT_COORDINATOR.0 {
            outcome
        } else if denied.iter().any(|t| *t == name) {
            ErrorCode::TOPIC_AUTHORIZATION_FAILED.0
        } else if unknown.contains(&&partition) {
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0
        } else if read_only.contains(&&partition) {
            ErrorCode::READ_ONLY_TOPIC.0
        } else {
            outcome
        }
    })
}

/// Each partition's result, its error code from `code(topic, partition)`.
fn partition_results(
    topics: Vec<AddPartitionsToTxnTopic>,
    mut code: impl FnMut(&str, i32) -> i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            let partitions = topic
                .partitions
                .iter()
                .map(|index| {
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(*index)
                        .with_partition_error_code(code(&name, *index))
                })
                .collect();
            AddPartitionsToTxnTopicResult::default()
                .with_name(topic.name)
                .with_results_by_partition(partitions)
        })
        .collect()
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
    if !broker.coordinates(CoordinatorKind::Transaction, &request.transactional_id) {
        return AddOffsetsToTxnResponse::default().with_error_code(ErrorCode::NOT_COORDINATOR.0);
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

/// TxnOffsetCommit, at the group's coordinator: once the transaction coordinator confirms the
/// producer's ongoing transaction added the group, the offsets wait there for the
/// transaction's marker ([`crate::groups::GroupCoordinator::commit_pending`]).
pub(super) async fn commit_offsets(
    broker: &Broker,
    access: &Access<'_>,
    request: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let group = request.group_id.0.to_string();
    let refused = if !access.transactional_id(Operation::Write, &request.transactional_id) {
        Some(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.0)
    } else if !access.group(Operation::Read, &group) {
        Some(ErrorCode::GROUP_AUTHORIZATION_FAILED.0)
    } else if !broker.coordinates(CoordinatorKind::Group, &group) {
        Some(ErrorCode::NOT_COORDINATOR.0)
    } else {
        None
    };
    let denied = |topic: &str| !access.topic(Operation::Read, topic);
    let mut known = Vec::new();
    let mut codes: Vec<Vec<i16>> = Vec::new();
    for topic in &request.topics {
        let name = topic.name.0.to_string();
        let mut topic_codes = Vec::new();
        for p in &topic.partitions {
            let code = match refused {
                Some(code) => code,
                None if denied(&name) => ErrorCode::TOPIC_AUTHORIZATION_FAILED.0,
                None if !broker.partition_exists(&name, p.partition_index) => {
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0
                }
                None => {
                    let committed = Committed {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                    };
                    known.push((name.clone(), p.partition_index, committed));
                    0
                }
            };
            topic_codes.push(code);
        }
        codes.push(topic_codes);
    }
    // Kafka commits all or nothing: a refused partition leaves the others not attempted.
    let any_refused = codes.iter().flatten().any(|c| *c != 0);
    // The transaction coordinator confirms the producer's ongoing transaction added the group.
    let verified = if any_refused || known.is_empty() {
        0
    } else {
        let producer = (request.producer_id.0, request.producer_epoch);
        broker
            .verify_txn_offsets(&request.transactional_id, producer, &group)
            .await
    };
    let mut written = if any_refused || known.is_empty() || verified != 0 {
        Vec::new()
    } else {
        broker.groups().commit_pending(
            &group,
            (request.producer_id.0, request.producer_epoch),
            request.generation_id,
            &request.member_id,
            known,
        )
    };
    // Answered once the group's partition replicas hold the offsets (a new coordinator has
    // them pending).
    if written.contains(&0)
        && let Err(code) = broker.group_writes_replicated(&group).await
    {
        written
            .iter_mut()
            .filter(|c| **c == 0)
            .for_each(|c| *c = code);
    }
    let mut written = written.into_iter();
    let topics = request
        .topics
        .into_iter()
        .zip(codes)
        .map(|(topic, topic_codes)| {
            let partitions = topic
                .partitions
                .iter()
                .zip(topic_codes)
                .map(|(p, code)| {
                    let code = match code {
                        0 if any_refused => ErrorCode::OPERATION_NOT_ATTEMPTED.0,
                        0 if verified != 0 => verified,
                        0 => written.next().unwrap_or(0),
                        refused => refused,
                    };
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

pub(super) async fn end(
    broker: &Broker,
    access: &Access<'_>,
    request: EndTxnRequest,
) -> EndTxnResponse {
    let producer = (request.producer_id.0, request.producer_epoch);
    if !access.transactional_id(Operation::Write, &request.transactional_id) {
        return EndTxnResponse::default()
            .with_error_code(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.0)
            .with_producer_id(request.producer_id)
            .with_producer_epoch(request.producer_epoch);
    }
    if !broker.coordinates(CoordinatorKind::Transaction, &request.transactional_id) {
        return EndTxnResponse::default()
            .with_error_code(ErrorCode::NOT_COORDINATOR.0)
            .with_producer_id(request.producer_id)
            .with_producer_epoch(request.producer_epoch);
    }
    let ended = broker.transactions().end(
        &request.transactional_id.0,
        producer,
        request.committed,
        now_ms(),
    );
    let result = match ended {
        // The decision is durable; housekeeping finishes the markers, and the client's
        // retry (CONCURRENT_TRANSACTIONS is retriable) then finds the transaction ended.
        Ok(Some(completion)) => broker
            .complete_transaction(&completion)
            .await
            .map_err(|_| TxnError::ConcurrentTransactions),
        Ok(None) => Ok(()),
        Err(e) => Err(e),
    };
    EndTxnResponse::default()
        .with_error_code(code(result))
        .with_producer_id(request.producer_id)
        .with_producer_epoch(request.producer_epoch)
}
