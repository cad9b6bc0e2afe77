//! One handler per API. Each takes the decoded request and returns the response; `dispatch`
//! decodes and encodes at the request's version.

mod access;
mod acls;
mod alter_configs;
mod api_versions;
mod consumer_groups;
mod create_partitions;
mod create_topics;
mod delete_topics;
mod describe_cluster;
mod describe_configs;
mod elect_leaders;
mod fetch;
mod fetch_response;
mod find_coordinator;
mod group_admin;
mod group_membership;
mod group_offsets;
mod init_producer_id;
mod list_offsets;
mod metadata;
mod mirror_configs;
mod mirror_guards;
mod mirror_states;
mod mirror_topics;
mod mirrors;
mod offset_for_leader_epoch;
mod produce;
mod transactions;
mod verify_mirror;
mod write_txn_markers;

use super::Broker;
use super::coordinators::CoordinatorKind;
use crate::acl::Operation;
use access::Access;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse, RequestHeader, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use kmirror_actors::engine::Engine;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::MirrorApiKey;
use std::sync::Arc;

pub(super) use api_versions::unsupported as api_versions_unsupported;

/// What a handler answers.
pub(super) enum Response {
    /// An encoded response body.
    Body(Bytes),
    /// An encoded response body in pieces, written one after another (record batches are
    /// pieces of their own, not copied).
    Chunks(Vec<crate::storage::Records>),
    /// Nothing (produce with `acks=0`).
    None,
}

/// The versions this broker serves of each API; `None` for APIs it does not serve.
pub(super) fn supported(api: ApiKey) -> Option<(i16, i16)> {
    Some(match api {
        ApiKey::Produce => (3, 12),
        ApiKey::Fetch => (4, 16),
        ApiKey::ListOffsets => (1, 8),
        ApiKey::Metadata => (0, 12),
        ApiKey::OffsetForLeaderEpoch => (2, 4),
        ApiKey::ApiVersions => (0, 4),
        ApiKey::CreateTopics => (2, 7),
        ApiKey::InitProducerId => (0, 4),
        ApiKey::DescribeCluster => (0, 1),
        ApiKey::CreatePartitions => (0, 3),
        ApiKey::DescribeConfigs => (1, 4),
        ApiKey::IncrementalAlterConfigs => (0, 1),
        ApiKey::DeleteTopics => (1, 6),
        ApiKey::FindCoordinator => (0, 4),
        ApiKey::JoinGroup => (0, 9),
        ApiKey::SyncGroup => (0, 5),
        ApiKey::Heartbeat => (0, 4),
        ApiKey::LeaveGroup => (0, 5),
        ApiKey::OffsetCommit => (2, 9),
        ApiKey::OffsetFetch => (1, 9),
        ApiKey::ConsumerGroupHeartbeat => (0, 1),
        ApiKey::ConsumerGroupDescribe => (0, 1),
        ApiKey::ListGroups => (0, 4),
        ApiKey::DescribeGroups => (0, 5),
        ApiKey::DeleteGroups => (0, 2),
        // 4 is broker-to-broker (clients stay at 3); 5 and EndTxn/TxnOffsetCommit 5 belong to
        // transaction version 2, which this broker does not advertise.
        ApiKey::AddPartitionsToTxn => (0, 4),
        ApiKey::WriteTxnMarkers => (1, 1),
        ApiKey::AddOffsetsToTxn => (0, 4),
        ApiKey::TxnOffsetCommit => (0, 4),
        ApiKey::EndTxn => (0, 4),
        ApiKey::AlterConfigs => (0, 2),
        ApiKey::CreateAcls => (1, 3),
        ApiKey::DescribeAcls => (1, 3),
        ApiKey::DeleteAcls => (1, 3),
        ApiKey::ElectLeaders => (0, 2),
        _ => return None,
    })
}

/// The versions this broker serves of each KIP-1279 API; `None` for those it does not serve.
pub(super) fn supported_mirror(api: MirrorApiKey) -> Option<(i16, i16)> {
    match api {
        MirrorApiKey::CreateMirror
        | MirrorApiKey::ListMirrors
        | MirrorApiKey::DeleteMirror
        | MirrorApiKey::LastMirroredEpochs
        | MirrorApiKey::StartMirrorTopics
        | MirrorApiKey::StopMirrorTopics
        | MirrorApiKey::PauseMirrorTopics
        | MirrorApiKey::ResumeMirrorTopics
        | MirrorApiKey::DescribeMirrors
        | MirrorApiKey::ReadMirrorStates
        | MirrorApiKey::WriteMirrorStates
        | MirrorApiKey::BumpLeaderEpochs
        | MirrorApiKey::VerifyMirrorTopics => Some((0, 0)),
    }
}

/// Decodes a KIP-1279 request, runs its handler, encodes the response.
pub(super) async fn dispatch_mirror(
    broker: &Arc<Broker>,
    engine: Option<&Engine>,
    api: MirrorApiKey,
    version: i16,
    client_host: &str,
    body: &mut Bytes,
) -> anyhow::Result<Bytes> {
    let access = &Access::anonymous(broker, client_host);
    let mut out = BytesMut::new();
    match api {
        MirrorApiKey::CreateMirror => {
            mirrors::create(broker, engine, access, Decodable::decode(body, version)?)
                .await
                .encode(&mut out, version)?
        }
        MirrorApiKey::ListMirrors => {
            mirrors::list(broker, access, Decodable::decode(body, version)?)
                .encode(&mut out, version)?
        }
        MirrorApiKey::DeleteMirror => {
            mirrors::delete(broker, engine, access, Decodable::decode(body, version)?)
                .await
                .encode(&mut out, version)?
        }
        MirrorApiKey::LastMirroredEpochs => {
            let request = Decodable::decode(body, version)?;
            mirrors::last_mirrored_epochs(engine, access, request)
                .await
                .encode(&mut out, version)?
        }
        MirrorApiKey::StartMirrorTopics => {
            let request = Decodable::decode(body, version)?;
            mirror_topics::start_topics(broker, engine, access, request)
                .await
                .encode(&mut out, version)?
        }
        MirrorApiKey::StopMirrorTopics => {
            let request = Decodable::decode(body, version)?;
            mirror_topics::stop_topics(broker, engine, access, request)
                .await
                .encode(&mut out, version)?
        }
        MirrorApiKey::PauseMirrorTopics => {
            let request = Decodable::decode(body, version)?;
            mirror_topics::pause_topics(broker, engine, access, request)
                .await
                .encode(&mut out, version)?
        }
        MirrorApiKey::ResumeMirrorTopics => {
            let request = Decodable::decode(body, version)?;
            mirror_topics::resume_topics(broker, engine, access, request)
                .await
                .encode(&mut out, version)?
        }
        MirrorApiKey::DescribeMirrors => {
            let request = Decodable::decode(body, version)?;
            mirror_topics::describe(broker, engine, access, request)
                .await
                .encode(&mut out, version)?
        }
        MirrorApiKey::ReadMirrorStates => {
            let request = Decodable::decode(body, version)?;
            mirror_states::read_states(engine, access, request)
                .await
                .encode(&mut out, version)?
        }
        MirrorApiKey::WriteMirrorStates => {
            let request = Decodable::decode(body, version)?;
            mirror_states::write_states(engine, access, request)
                .await
                .encode(&mut out, version)?
        }
        MirrorApiKey::BumpLeaderEpochs => {
            mirror_states::bump_leader_epochs(engine, access, Decodable::decode(body, version)?)
                .await
                .encode(&mut out, version)?
        }
        MirrorApiKey::VerifyMirrorTopics => {
            verify_mirror::verify(engine, access, Decodable::decode(body, version)?)
                .await
                .encode(&mut out, version)?
        }
    }
    Ok(out.freeze())
}

/// What ApiVersions advertises of `api`: the versions served, except Produce, advertised from
/// v0 as Apache Kafka 4 does (KAFKA-18659): librdkafka up to 2.11 (kcat 1.7, confluent-kafka
/// 2.0) compresses only for a broker whose Produce range starts at v0, while no client it
/// negotiates with sends below v3. Produce v0-v2 requests are answered UNSUPPORTED_VERSION.
fn advertised(api: ApiKey) -> Option<(i16, i16)> {
    let (min, max) = supported(api)?;
    Some(if api == ApiKey::Produce {
        (0, max)
    } else {
        (min, max)
    })
}

/// Every API, with the versions ApiVersions advertises.
pub(super) fn served() -> Vec<(ApiKey, i16, i16)> {
    [
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::ListOffsets,
        ApiKey::Metadata,
        ApiKey::OffsetForLeaderEpoch,
        ApiKey::ApiVersions,
        ApiKey::CreateTopics,
        ApiKey::InitProducerId,
        ApiKey::DescribeCluster,
        ApiKey::CreatePartitions,
        ApiKey::DeleteTopics,
        ApiKey::DescribeConfigs,
        ApiKey::IncrementalAlterConfigs,
        ApiKey::FindCoordinator,
        ApiKey::JoinGroup,
        ApiKey::SyncGroup,
        ApiKey::Heartbeat,
        ApiKey::LeaveGroup,
        ApiKey::OffsetCommit,
        ApiKey::OffsetFetch,
        ApiKey::ListGroups,
        ApiKey::DescribeGroups,
        ApiKey::DeleteGroups,
        ApiKey::AddPartitionsToTxn,
        ApiKey::AddOffsetsToTxn,
        ApiKey::TxnOffsetCommit,
        ApiKey::EndTxn,
        ApiKey::WriteTxnMarkers,
        ApiKey::AlterConfigs,
        ApiKey::CreateAcls,
        ApiKey::DescribeAcls,
        ApiKey::DeleteAcls,
        ApiKey::ConsumerGroupHeartbeat,
        ApiKey::ConsumerGroupDescribe,
        ApiKey::ElectLeaders,
    ]
    .into_iter()
    .filter_map(|k| advertised(k).map(|(min, max)| (k, min, max)))
    .collect()
}

fn encode<T: Encodable>(body: &T, version: i16) -> anyhow::Result<Response> {
    let mut out = BytesMut::new();
    body.encode(&mut out, version)?;
    Ok(Response::Body(out.freeze()))
}

pub(super) async fn dispatch(
    broker: &Arc<Broker>,
    api: ApiKey,
    version: i16,
    header: &RequestHeader,
    client_host: &str,
    body: &mut Bytes,
) -> anyhow::Result<Response> {
    let access = &Access::anonymous(broker, client_host);
    // The classic group protocol needs READ on the group, and the group's coordinator; a
    // refusal is the whole answer.
    let group_refused = |group: &str| {
        if !access.group(Operation::Read, group) {
            Some(ErrorCode::GROUP_AUTHORIZATION_FAILED.0)
        } else if !broker.coordinates(CoordinatorKind::Group, group) {
            Some(ErrorCode::NOT_COORDINATOR.0)
        } else {
            None
        }
    };
    match api {
        ApiKey::ApiVersions => encode(
            &api_versions::handle(&Decodable::decode(body, version)?),
            version,
        ),
        ApiKey::Metadata => encode(
            &metadata::handle(broker, access, Decodable::decode(body, version)?, version).await,
            version,
        ),
        ApiKey::CreateTopics => encode(
            &create_topics::handle(broker, access, Decodable::decode(body, version)?).await,
            version,
        ),
        ApiKey::Produce => {
            match produce::handle(broker, access, Decodable::decode(body, version)?).await {
                Some(response) => encode(&response, version),
                None => Ok(Response::None),
            }
        }
        ApiKey::Fetch => {
            let request = Decodable::decode(body, version)?;
            let answer = fetch::handle(broker, access, request, version).await;
            Ok(Response::Chunks(answer.encode(version)?))
        }
        ApiKey::ListOffsets => encode(
            &list_offsets::handle(broker, access, Decodable::decode(body, version)?, version),
            version,
        ),
        ApiKey::OffsetForLeaderEpoch => encode(
            &offset_for_leader_epoch::handle(broker, access, Decodable::decode(body, version)?),
            version,
        ),
        ApiKey::InitProducerId => encode(
            &init_producer_id::handle(broker, access, Decodable::decode(body, version)?).await,
            version,
        ),
        ApiKey::DescribeCluster => encode(&describe_cluster::handle(broker, access), version),
        ApiKey::CreatePartitions => encode(
            &create_partitions::handle(broker, access, Decodable::decode(body, version)?).await,
            version,
        ),
        ApiKey::DeleteTopics => encode(
            &delete_topics::handle(broker, access, Decodable::decode(body, version)?).await,
            version,
        ),
        ApiKey::ElectLeaders => encode(
            &elect_leaders::handle(broker, access, Decodable::decode(body, version)?, version)
                .await,
            version,
        ),
        ApiKey::DescribeConfigs => encode(
            &describe_configs::handle(broker, access, Decodable::decode(body, version)?),
            version,
        ),
        ApiKey::IncrementalAlterConfigs => encode(
            &alter_configs::incremental(broker, access, Decodable::decode(body, version)?).await,
            version,
        ),
        ApiKey::AlterConfigs => encode(
            &alter_configs::legacy(broker, access, Decodable::decode(body, version)?).await,
            version,
        ),
        ApiKey::FindCoordinator => encode(
            &find_coordinator::handle(broker, access, Decodable::decode(body, version)?, version)
                .await,
            version,
        ),
        ApiKey::JoinGroup => {
            let request: JoinGroupRequest = Decodable::decode(body, version)?;
            if let Some(code) = group_refused(&request.group_id) {
                return encode(&JoinGroupResponse::default().with_error_code(code), version);
            }
            let client_id = header.client_id.as_deref().unwrap_or_default();
            encode(
                &group_membership::join(broker, request, version, client_id, client_host).await,
                version,
            )
        }
        ApiKey::SyncGroup => {
            let request: SyncGroupRequest = Decodable::decode(body, version)?;
            if let Some(code) = group_refused(&request.group_id) {
                return encode(&SyncGroupResponse::default().with_error_code(code), version);
            }
            encode(&group_membership::sync(broker, request).await, version)
        }
        ApiKey::Heartbeat => {
            let request: HeartbeatRequest = Decodable::decode(body, version)?;
            if let Some(code) = group_refused(&request.group_id) {
                return encode(&HeartbeatResponse::default().with_error_code(code), version);
            }
            encode(&group_membership::heartbeat(broker, request), version)
        }
        ApiKey::LeaveGroup => {
            let request: LeaveGroupRequest = Decodable::decode(body, version)?;
            if let Some(code) = group_refused(&request.group_id) {
                return encode(
                    &LeaveGroupResponse::default().with_error_code(code),
                    version,
                );
            }
            encode(&group_membership::leave(broker, request, version), version)
        }
        ApiKey::OffsetCommit => encode(
            &group_offsets::commit(broker, access, Decodable::decode(body, version)?).await,
            version,
        ),
        ApiKey::OffsetFetch => encode(
            &group_offsets::fetch(broker, access, Decodable::decode(body, version)?, version),
            version,
        ),
        ApiKey::ConsumerGroupHeartbeat => {
            let client_id = header.client_id.as_deref().unwrap_or_default();
            encode(
                &consumer_groups::heartbeat(
                    broker,
                    access,
                    Decodable::decode(body, version)?,
                    version,
                    client_id,
                    client_host,
                ),
                version,
            )
        }
        ApiKey::ConsumerGroupDescribe => encode(
            &consumer_groups::describe(broker, access, Decodable::decode(body, version)?),
            version,
        ),
        ApiKey::ListGroups => encode(
            &group_admin::list(broker, access, Decodable::decode(body, version)?),
            version,
        ),
        ApiKey::DescribeGroups => encode(
            &group_admin::describe(broker, access, Decodable::decode(body, version)?),
            version,
        ),
        ApiKey::DeleteGroups => encode(
            &group_admin::delete(broker, access, Decodable::decode(body, version)?).await,
            version,
        ),
        ApiKey::AddPartitionsToTxn => encode(
            &transactions::add_partitions(
                broker,
                access,
                Decodable::decode(body, version)?,
                version,
            ),
            version,
        ),
        ApiKey::AddOffsetsToTxn => encode(
            &transactions::add_offsets(broker, access, Decodable::decode(body, version)?),
            version,
        ),
        ApiKey::TxnOffsetCommit => encode(
            &transactions::commit_offsets(broker, access, Decodable::decode(body, version)?).await,
            version,
        ),
        ApiKey::EndTxn => encode(
            &transactions::end(broker, access, Decodable::decode(body, version)?).await,
            version,
        ),
        ApiKey::WriteTxnMarkers => encode(
            &write_txn_markers::handle(broker, access, Decodable::decode(body, version)?).await,
            version,
        ),
        ApiKey::CreateAcls => encode(
            &acls::create(broker, access, Decodable::decode(body, version)?).await,
            version,
        ),
        ApiKey::DescribeAcls => encode(
            &acls::describe(broker, access, Decodable::decode(body, version)?),
            version,
        ),
        ApiKey::DeleteAcls => encode(
            &acls::delete(broker, access, Decodable::decode(body, version)?).await,
            version,
        ),
        other => anyhow::bail!("{other:?} is not served"),
    }
}
