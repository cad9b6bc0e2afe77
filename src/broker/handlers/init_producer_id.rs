//! InitProducerId: a fresh producer id for an idempotent producer; for a transactional id, the
//! coordinator's id with a bumped epoch (fencing older producers), after aborting a transaction
//! the previous producer left open. A transactional id needs WRITE on it; an idempotent producer
//! IDEMPOTENT_WRITE on the cluster or WRITE on some topic.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::coordinators::CoordinatorKind;
use crate::broker::{Broker, now_ms};
use crate::txn::{InitOutcome, TxnError};
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kmirror_protocol::errors::ErrorCode;

fn answer(producer_id: i64, producer_epoch: i16, error: i16) -> InitProducerIdResponse {
    InitProducerIdResponse::default()
        .with_error_code(error)
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(producer_epoch)
}

pub(super) async fn handle(
    broker: &Broker,
    access: &Access<'_>,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    broker.ensure_producer_ids().await;
    let Some(transactional_id) = &request.transactional_id else {
        let may_write = access.cluster(Operation::IdempotentWrite)
            || broker
                .topics()
                .keys()
                .any(|t| access.topic(Operation::Write, t));
        if !may_write {
            return answer(-1, -1, ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0);
        }
        return match broker.allocate_producer_id() {
            Ok(id) => answer(id, 0, 0),
            Err(e) => {
                tracing::error!(error = %e, "allocating a producer id");
                answer(-1, -1, e.error_code())
            }
        };
    };
    if !access.transactional_id(Operation::Write, transactional_id) {
        return answer(-1, -1, ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.0);
    }
    if !broker.coordinates(CoordinatorKind::Transaction, transactional_id) {
        return answer(-1, -1, ErrorCode::NOT_COORDINATOR.0);
    }
    let expected =
        (request.producer_id.0 >= 0).then_some((request.producer_id.0, request.producer_epoch));
    match init_transactional(
        broker,
        transactional_id,
        request.transaction_timeout_ms,
        expected,
    )
    .await
    {
        Ok((id, epoch)) => answer(id, epoch, 0),
        Err(e) => answer(-1, -1, e.code()),
    }
}

async fn init_transactional(
    broker: &Broker,
    transactional_id: &str,
    timeout_ms: i32,
    mut expected: Option<(i64, i16)>,
) -> Result<(i64, i16), TxnError> {
    let allocate = || broker.allocate_producer_id();
    // At most one open transaction to abort, then the epoch for the new producer.
    for _ in 0..2 {
        let outcome = broker.transactions().init_producer_id(
            transactional_id,
            timeout_ms,
            expected,
            now_ms(),
            &allocate,
        )?;
        match outcome {
            InitOutcome::Ready(m) => return Ok((m.producer_id, m.producer_epoch)),
            InitOutcome::AbortFirst(aborting, completion) => {
                // The open transaction ends aborted (markers written now); the caller's
                // expected epoch was consumed by that bump.
                broker
                    .complete_transaction(&completion)
                    .await
                    .map_err(|_| TxnError::ConcurrentTransactions)?;
                if expected.is_some() {
                    expected = Some((aborting.producer_id, aborting.producer_epoch));
                }
            }
        }
    }
    Err(TxnError::ConcurrentTransactions)
}
