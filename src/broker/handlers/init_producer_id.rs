//! InitProducerId for idempotent producers (a transactional id is answered
//! COORDINATOR_NOT_AVAILABLE until the transaction coordinator exists).

use crate::broker::Broker;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const KAFKA_STORAGE_ERROR: i16 = 56;

pub(super) fn handle(broker: &Broker, request: InitProducerIdRequest) -> InitProducerIdResponse {
    if request.transactional_id.is_some() {
        return InitProducerIdResponse::default()
            .with_error_code(COORDINATOR_NOT_AVAILABLE)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
    }
    match broker.allocate_producer_id() {
        Ok(id) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(e) => {
            tracing::error!(error = %e, "allocating a producer id");
            InitProducerIdResponse::default()
                .with_error_code(KAFKA_STORAGE_ERROR)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        }
    }
}
