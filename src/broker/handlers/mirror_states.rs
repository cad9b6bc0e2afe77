//! KIP-1279's inter-broker RPCs: ReadMirrorStates and WriteMirrorStates (a partition leader
//! asking the broker that leads its `__mirror_state` shard) and BumpLeaderEpochs (a partition
//! leader asking for higher leader epochs).
//!
//! All three need CLUSTER_ACTION on the cluster (docs/design.md §7): brokers call them, clients
//! do not. The mirroring engine answers each whole (`engine::shard_service`,
//! `engine::epoch_bumps`); a refusal of the request is its top-level error.

use super::access::Access;
use crate::acl::Operation;
use kmirror_actors::engine::Engine;
use kmirror_actors::engine::epoch_bumps::ServeBumpLeaderEpochs;
use kmirror_actors::engine::shard_service::{ServeReadMirrorStates, ServeWriteMirrorStates};
use kmirror_actors::policy::MirrorError;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    BumpLeaderEpochsRequest, BumpLeaderEpochsResponse, ReadMirrorStatesRequest,
    ReadMirrorStatesResponse, WriteMirrorStatesRequest, WriteMirrorStatesResponse,
};

/// The engine's answer to `$message` as `$response`, after the CLUSTER_ACTION check.
macro_rules! serve {
    ($engine:expr, $access:expr, $message:expr, $response:ident) => {{
        let refused = |code: ErrorCode, message: String| $response {
            error_code: code.0,
            error_message: Some(message),
            ..Default::default()
        };
        if !$access.cluster(Operation::ClusterAction) {
            return refused(
                ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
                "CLUSTER_ACTION on the cluster is needed".into(),
            );
        }
        let Some(engine) = $engine else {
            let e = MirrorError::engine_not_running();
            return refused(e.code, e.message);
        };
        engine
            .ask($message)
            .await
            .unwrap_or_else(|e| refused(e.code, e.message))
    }};
}

pub(super) async fn read_states(
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: ReadMirrorStatesRequest,
) -> ReadMirrorStatesResponse {
    let message = ServeReadMirrorStates(request);
    serve!(engine, access, message, ReadMirrorStatesResponse)
}

pub(super) async fn write_states(
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: WriteMirrorStatesRequest,
) -> WriteMirrorStatesResponse {
    let message = ServeWriteMirrorStates(request);
    serve!(engine, access, message, WriteMirrorStatesResponse)
}

pub(super) async fn bump_leader_epochs(
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: BumpLeaderEpochsRequest,
) -> BumpLeaderEpochsResponse {
    let message = ServeBumpLeaderEpochs(request);
    serve!(engine, access, message, BumpLeaderEpochsResponse)
}
