//! Every version the broker advertises is served (issue 22): for each Kafka API in its
//! ApiVersions answer, a request with real content (an existing topic with records, a group with
//! members and offsets, configs, ACLs) is sent at each advertised version, and the answer must
//! decode at that version, carry no UNSUPPORTED_VERSION, and say what the newest version says
//! (the offsets, the coordinator, the configs). A response field set that an old version lacks
//! fails here as the encoder refuses it and the broker closes the connection, which is how
//! kcat's ListOffsets v2 failed.

use super::{connection, create, produce, shut, start};
use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Message, Request, StrBytes};
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::testing::BatchSpec;
use std::collections::HashMap;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn topic(text: &str) -> TopicName {
    TopicName(s(text))
}

fn group(text: &str) -> GroupId {
    GroupId(s(text))
}

/// The versions the broker advertises, by API key.
async fn advertised(conn: &Connection) -> HashMap<i16, (i16, i16)> {
    let (_, answer) = conn
        .send("ApiVersions", &ApiVersionsRequest::default(), 3)
        .await
        .expect("ApiVersions answers");
    answer
        .api_keys
        .iter()
        .map(|k| (k.api_key, (k.min_version, k.max_version)))
        .collect()
}

/// Sends `build(version)` at every advertised version of `R` on a fresh connection each (a
/// connection the broker closed must not hide the next version's answer) and hands each answer
/// to `check` with its version.
async fn each_version<R: Request + Message>(
    address: &str,
    versions: &HashMap<i16, (i16, i16)>,
    api: &'static str,
    build: impl Fn(i16) -> R,
    mut check: impl FnMut(i16, R::Response),
) {
    let (advertised_min, max) = *versions
        .get(&R::KEY)
        .unwrap_or_else(|| panic!("{api} is not advertised"));
    // Produce alone is advertised from v0, as Kafka 4 advertises it (see
    // `produce_v0_to_v2_are_advertised_and_answered_unsupported_version`).
    let min = if R::KEY == ProduceRequest::KEY {
        advertised_min.max(3)
    } else {
        advertised_min
    };
    assert!(
        min >= R::VERSIONS.min && max <= R::VERSIONS.max,
        "{api} advertised as v{min}-v{max}, beyond what the protocol layer knows"
    );
    for version in min..=max {
        let conn = connection(address).await;
        let (used, answer) = conn
            .send(api, &build(version), version)
            .await
            .unwrap_or_else(|e| panic!("{api} v{version}: {e}"));
        assert_eq!(used, version, "{api}");
        check(version, answer);
        // The connection still serves (nothing was left half-written).
        conn.send("ApiVersions", &ApiVersionsRequest::default(), 3)
            .await
            .unwrap_or_else(|e| panic!("after {api} v{version}: {e}"));
    }
}

/// Produce is advertised from v0 as Apache Kafka 4 does (KAFKA-18659: librdkafka up to 2.11
/// compresses only for a broker whose Produce range starts at 0); a v0-v2 request itself is
/// answered UNSUPPORTED_VERSION and the connection keeps serving.
#[tokio::test]
async fn produce_v0_to_v2_are_advertised_and_answered_unsupported_version() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let versions = advertised(&connection(&running.address).await).await;
    assert_eq!(
        versions[&ProduceRequest::KEY].0,
        0,
        "Produce advertised from v0"
    );
    for version in 0..3i16 {
        let mut stream = tokio::net::TcpStream::connect(&running.address)
            .await
            .expect("connects");
        // Header v1 (key, version, correlation id, null client id), then a v0 body: acks,
        // timeout, no topics.
        let mut body = Vec::new();
        body.extend_from_slice(&0i16.to_be_bytes());
        body.extend_from_slice(&version.to_be_bytes());
        body.extend_from_slice(&77i32.to_be_bytes());
        body.extend_from_slice(&(-1i16).to_be_bytes());
        body.extend_from_slice(&(-1i16).to_be_bytes());
        body.extend_from_slice(&5000i32.to_be_bytes());
        body.extend_from_slice(&0i32.to_be_bytes());
        let mut frame = (body.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        stream.write_all(&frame).await.expect("sends");
        let size = stream.read_i32().await.expect("an answer");
        let mut answer = vec![0; usize::try_from(size).expect("a size")];
        stream.read_exact(&mut answer).await.expect("the answer");
        assert_eq!(&answer[..4], &77i32.to_be_bytes(), "Produce v{version}");
        assert_eq!(
            &answer[4..6],
            &ErrorCode::UNSUPPORTED_VERSION.0.to_be_bytes(),
            "Produce v{version}: UNSUPPORTED_VERSION"
        );
    }
    shut(running).await;
}

#[tokio::test]
async fn every_advertised_version_of_every_api_is_served() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let address = running.address.clone();
    let versions = advertised(&connection(&address).await).await;
    assert_eq!(create(&address, "events", 2).await, 0);
    let batch = BatchSpec {
        records: 10,
        ..BatchSpec::default()
    }
    .build();
    assert_eq!(
        produce(&address, "events", 0, batch, -1).await,
        Some((0, 0))
    );

    each_version(
        &address,
        &versions,
        "ApiVersions",
        |_| ApiVersionsRequest::default(),
        |v, r| {
            assert_eq!(r.error_code, 0, "ApiVersions v{v}");
            assert!(!r.api_keys.is_empty());
        },
    )
    .await;

    each_version(
        &address,
        &versions,
        "Metadata",
        |v| {
            let wanted =
                metadata_request::MetadataRequestTopic::default().with_name(Some(topic("events")));
            MetadataRequest::default()
                .with_topics(Some(vec![wanted]))
                .with_allow_auto_topic_creation(v < 4)
        },
        |v, r| {
            assert_eq!(r.brokers.len(), 1, "Metadata v{v}");
            assert_eq!(r.topics.len(), 1, "Metadata v{v}");
            assert_eq!(r.topics[0].error_code, 0, "Metadata v{v}");
            assert_eq!(r.topics[0].partitions.len(), 2, "Metadata v{v}");
        },
    )
    .await;

    each_version(
        &address,
        &versions,
        "ListOffsets",
        |_| {
            ListOffsetsRequest::default().with_topics(vec![
                list_offsets_request::ListOffsetsTopic::default()
                    .with_name(topic("events"))
                    .with_partitions(vec![
                        list_offsets_request::ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_timestamp(-2),
                    ]),
            ])
        },
        |v, r| {
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0, "ListOffsets v{v}");
            assert_eq!(p.offset, 0, "ListOffsets v{v}: the earliest offset");
        },
    )
    .await;
    each_version(
        &address,
        &versions,
        "ListOffsets",
        |_| {
            ListOffsetsRequest::default().with_topics(vec![
                list_offsets_request::ListOffsetsTopic::default()
                    .with_name(topic("events"))
                    .with_partitions(vec![
                        list_offsets_request::ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_timestamp(-1),
                    ]),
            ])
        },
        |v, r| {
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0, "ListOffsets v{v}");
            assert_eq!(p.offset, 10, "ListOffsets v{v}: the latest offset");
            let epoch = if v >= 4 { 0 } else { -1 };
            assert_eq!(p.leader_epoch, epoch, "ListOffsets v{v}");
        },
    )
    .await;

    each_version(
        &address,
        &versions,
        "Produce",
        |_| {
            ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(5000)
                .with_topic_data(vec![
                    produce_request::TopicProduceData::default()
                        .with_name(topic("events"))
                        .with_partition_data(vec![
                            produce_request::PartitionProduceData::default()
                                .with_index(1)
                                .with_records(Some(
                                    BatchSpec {
                                        records: 1,
                                        ..BatchSpec::default()
                                    }
                                    .build(),
                                )),
                        ]),
                ])
        },
        |v, r| {
            let p = &r.responses[0].partition_responses[0];
            assert_eq!(p.error_code, 0, "Produce v{v}");
            assert!(p.base_offset >= 0, "Produce v{v}");
        },
    )
    .await;

    let events_id = {
        let (_, meta) = connection(&address)
            .await
            .send(
                "Metadata",
                &MetadataRequest::default().with_topics(Some(vec![
                    metadata_request::MetadataRequestTopic::default()
                        .with_name(Some(topic("events"))),
                ])),
                12,
            )
            .await
            .expect("Metadata answers");
        meta.topics[0].topic_id
    };
    each_version(
        &address,
        &versions,
        "Fetch",
        |v| {
            let mut wanted = fetch_request::FetchTopic::default().with_partitions(vec![
                fetch_request::FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20),
            ]);
            if v >= 13 {
                wanted = wanted.with_topic_id(events_id);
            } else {
                wanted = wanted.with_topic(topic("events"));
            }
            FetchRequest::default()
                .with_max_wait_ms(10)
                .with_max_bytes(1 << 20)
                .with_topics(vec![wanted])
        },
        |v, r| {
            let p = &r.responses[0].partitions[0];
            assert_eq!(p.error_code, 0, "Fetch v{v}");
            assert_eq!(p.high_watermark, 10, "Fetch v{v}");
            assert!(
                p.records.as_ref().is_some_and(|r| !r.is_empty()),
                "Fetch v{v}: records"
            );
        },
    )
    .await;

    each_version(
        &address,
        &versions,
        "OffsetForLeaderEpoch",
        |_| {
            OffsetForLeaderEpochRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![
                    offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                        .with_topic(topic("events"))
                        .with_partitions(vec![
                            offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                                .with_partition(0)
                                .with_current_leader_epoch(-1)
                                .with_leader_epoch(0),
                        ]),
                ])
        },
        |v, r| {
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0, "OffsetForLeaderEpoch v{v}");
            assert_eq!(
                (p.leader_epoch, p.end_offset),
                (0, 10),
                "OffsetForLeaderEpoch v{v}"
            );
        },
    )
    .await;

    each_version(
        &address,
        &versions,
        "CreateTopics",
        |v| {
            CreateTopicsRequest::default()
                .with_timeout_ms(5000)
                .with_topics(vec![
                    create_topics_request::CreatableTopic::default()
                        .with_name(topic(&format!("created-v{v}")))
                        .with_num_partitions(1)
                        .with_replication_factor(1),
                ])
        },
        |v, r| assert_eq!(r.topics[0].error_code, 0, "CreateTopics v{v}"),
    )
    .await;

    each_version(
        &address,
        &versions,
        "CreatePartitions",
        |v| {
            CreatePartitionsRequest::default()
                .with_timeout_ms(5000)
                .with_topics(vec![
                    create_partitions_request::CreatePartitionsTopic::default()
                        .with_name(topic(&format!("created-v{}", v + 2)))
                        .with_count(2),
                ])
        },
        |v, r| assert_eq!(r.results[0].error_code, 0, "CreatePartitions v{v}"),
    )
    .await;

    each_version(
        &address,
        &versions,
        "DeleteTopics",
        |v| {
            let name = topic(&format!("created-v{}", v + 1));
            let request = DeleteTopicsRequest::default().with_timeout_ms(5000);
            if v >= 6 {
                request.with_topics(vec![
                    delete_topics_request::DeleteTopicState::default().with_name(Some(name)),
                ])
            } else {
                request.with_topic_names(vec![name])
            }
        },
        |v, r| assert_eq!(r.responses[0].error_code, 0, "DeleteTopics v{v}"),
    )
    .await;

    each_version(
        &address,
        &versions,
        "DescribeConfigs",
        |_| {
            DescribeConfigsRequest::default().with_resources(vec![
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("events"))
                    .with_configuration_keys(Some(vec![s("retention.ms")])),
            ])
        },
        |v, r| {
            let result = &r.results[0];
            assert_eq!(result.error_code, 0, "DescribeConfigs v{v}");
            assert_eq!(result.configs.len(), 1, "DescribeConfigs v{v}");
        },
    )
    .await;

    each_version(
        &address,
        &versions,
        "AlterConfigs",
        |_| {
            AlterConfigsRequest::default().with_resources(vec![
                alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("events"))
                    .with_configs(vec![
                        alter_configs_request::AlterableConfig::default()
                            .with_name(s("retention.ms"))
                            .with_value(Some(s("86400000"))),
                    ]),
            ])
        },
        |v, r| assert_eq!(r.responses[0].error_code, 0, "AlterConfigs v{v}"),
    )
    .await;

    each_version(
        &address,
        &versions,
        "IncrementalAlterConfigs",
        |_| {
            IncrementalAlterConfigsRequest::default().with_resources(vec![
                incremental_alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("events"))
                    .with_configs(vec![
                        incremental_alter_configs_request::AlterableConfig::default()
                            .with_name(s("retention.ms"))
                            .with_config_operation(0)
                            .with_value(Some(s("172800000"))),
                    ]),
            ])
        },
        |v, r| assert_eq!(r.responses[0].error_code, 0, "IncrementalAlterConfigs v{v}"),
    )
    .await;

    each_version(
        &address,
        &versions,
        "DescribeCluster",
        |_| DescribeClusterRequest::default(),
        |v, r| {
            assert_eq!(r.error_code, 0, "DescribeCluster v{v}");
            assert_eq!(r.brokers.len(), 1, "DescribeCluster v{v}");
        },
    )
    .await;

    each_version(
        &address,
        &versions,
        "ElectLeaders",
        |_| {
            ElectLeadersRequest::default()
                .with_election_type(0)
                .with_topic_partitions(Some(vec![
                    elect_leaders_request::TopicPartitions::default()
                        .with_topic(topic("events"))
                        .with_partitions(vec![0]),
                ]))
                .with_timeout_ms(5_000)
        },
        |v, r| {
            assert_eq!(r.error_code, 0, "ElectLeaders v{v}");
            let answer = &r.replica_election_results[0].partition_result[0];
            assert_eq!(
                answer.error_code,
                ErrorCode::ELECTION_NOT_NEEDED.0,
                "ElectLeaders v{v}: its one replica leads already"
            );
        },
    )
    .await;

    each_version(
        &address,
        &versions,
        "FindCoordinator",
        |v| {
            let request = FindCoordinatorRequest::default();
            if v >= 4 {
                request.with_coordinator_keys(vec![s("readers")])
            } else {
                request.with_key(s("readers"))
            }
        },
        |v, r| {
            if v >= 4 {
                assert_eq!(r.coordinators[0].error_code, 0, "FindCoordinator v{v}");
                assert_eq!(r.coordinators[0].node_id.0, 1, "FindCoordinator v{v}");
            } else {
                assert_eq!(r.error_code, 0, "FindCoordinator v{v}");
                assert_eq!(r.node_id.0, 1, "FindCoordinator v{v}");
            }
        },
    )
    .await;

    classic_group_at_every_version(&address, &versions).await;
    transactions_at_every_version(&address, &versions).await;
    acls_at_every_version(&address, &versions).await;
    consumer_group_at_every_version(&address, &versions).await;

    // No advertised Kafka API is left out above.
    let covered = [
        ApiKey::ApiVersions,
        ApiKey::Metadata,
        ApiKey::ListOffsets,
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::OffsetForLeaderEpoch,
        ApiKey::CreateTopics,
        ApiKey::CreatePartitions,
        ApiKey::DeleteTopics,
        ApiKey::DescribeConfigs,
        ApiKey::AlterConfigs,
        ApiKey::IncrementalAlterConfigs,
        ApiKey::DescribeCluster,
        ApiKey::FindCoordinator,
        ApiKey::JoinGroup,
        ApiKey::SyncGroup,
        ApiKey::Heartbeat,
        ApiKey::OffsetCommit,
        ApiKey::OffsetFetch,
        ApiKey::DescribeGroups,
        ApiKey::ListGroups,
        ApiKey::LeaveGroup,
        ApiKey::DeleteGroups,
        ApiKey::InitProducerId,
        ApiKey::AddPartitionsToTxn,
        ApiKey::AddOffsetsToTxn,
        ApiKey::TxnOffsetCommit,
        ApiKey::EndTxn,
        ApiKey::WriteTxnMarkers,
        ApiKey::CreateAcls,
        ApiKey::DescribeAcls,
        ApiKey::DeleteAcls,
        ApiKey::ConsumerGroupHeartbeat,
        ApiKey::ConsumerGroupDescribe,
        ApiKey::ElectLeaders,
    ]
    .map(|k| k as i16);
    let mirror: Vec<i16> = kmirror_protocol::messages::MirrorApiKey::ALL
        .into_iter()
        .map(|k| k.key())
        .collect();
    let untested: Vec<i16> = versions
        .keys()
        .filter(|k| !covered.contains(k) && !mirror.contains(k))
        .copied()
        .collect();
    assert!(
        untested.is_empty(),
        "advertised but not tested: {untested:?}"
    );
    shut(running).await;
}

/// JoinGroup, SyncGroup, Heartbeat, OffsetCommit, OffsetFetch, DescribeGroups, ListGroups,
/// LeaveGroup and DeleteGroups at each version, each on a group of its own (a lone member joins,
/// syncs its assignment, commits offset 7 and reads it back).
async fn classic_group_at_every_version(address: &str, versions: &HashMap<i16, (i16, i16)>) {
    let join = |group_id: &str, member: &str| {
        JoinGroupRequest::default()
            .with_group_id(group(group_id))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(s(member))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![
                join_group_request::JoinGroupRequestProtocol::default()
                    .with_name(s("range"))
                    .with_metadata(Bytes::from_static(b"subscription")),
            ])
    };
    // JoinGroup: from v4 a first join without a member id is answered MEMBER_ID_REQUIRED with
    // the id to join with.
    let mut members: HashMap<i16, (String, i32)> = HashMap::new();
    for version in versions[&JoinGroupRequest::KEY].0..=versions[&JoinGroupRequest::KEY].1 {
        let group_id = format!("g-v{version}");
        let conn = connection(address).await;
        let (_, first) = conn
            .send("JoinGroup", &join(&group_id, ""), version)
            .await
            .unwrap_or_else(|e| panic!("JoinGroup v{version}: {e}"));
        let answer = if first.error_code == ErrorCode::MEMBER_ID_REQUIRED.0 {
            assert!(version >= 4, "MEMBER_ID_REQUIRED at JoinGroup v{version}");
            conn.send("JoinGroup", &join(&group_id, &first.member_id), version)
                .await
                .unwrap_or_else(|e| panic!("JoinGroup v{version}: {e}"))
                .1
        } else {
            first
        };
        assert_eq!(answer.error_code, 0, "JoinGroup v{version}");
        assert_eq!(answer.leader, answer.member_id, "JoinGroup v{version}");
        members.insert(
            version,
            (answer.member_id.to_string(), answer.generation_id),
        );
    }
    // SyncGroup at each version on the group of the same JoinGroup version where there is one.
    let group_of = |v: i16| {
        let (min, max) = versions[&JoinGroupRequest::KEY];
        v.clamp(min, max)
    };
    let sync_versions = versions[&SyncGroupRequest::KEY];
    for version in sync_versions.0..=sync_versions.1 {
        let g = group_of(version);
        let (member, generation) = members[&g].clone();
        let mut request = SyncGroupRequest::default()
            .with_group_id(group(&format!("g-v{g}")))
            .with_generation_id(generation)
            .with_member_id(s(&member))
            .with_assignments(vec![
                sync_group_request::SyncGroupRequestAssignment::default()
                    .with_member_id(s(&member))
                    .with_assignment(Bytes::from_static(b"events-0")),
            ]);
        if version >= 5 {
            request = request
                .with_protocol_type(Some(s("consumer")))
                .with_protocol_name(Some(s("range")));
        }
        let (_, answer) = connection(address)
            .await
            .send("SyncGroup", &request, version)
            .await
            .unwrap_or_else(|e| panic!("SyncGroup v{version}: {e}"));
        assert_eq!(answer.error_code, 0, "SyncGroup v{version}");
        assert_eq!(&answer.assignment[..], b"events-0", "SyncGroup v{version}");
    }
    each_version(
        address,
        versions,
        "Heartbeat",
        |v| {
            let g = group_of(v);
            let (member, generation) = members[&g].clone();
            HeartbeatRequest::default()
                .with_group_id(group(&format!("g-v{g}")))
                .with_generation_id(generation)
                .with_member_id(s(&member))
        },
        |v, r| assert_eq!(r.error_code, 0, "Heartbeat v{v}"),
    )
    .await;
    each_version(
        address,
        versions,
        "OffsetCommit",
        |v| {
            let g = group_of(v);
            let (member, generation) = members[&g].clone();
            OffsetCommitRequest::default()
                .with_group_id(group(&format!("g-v{g}")))
                .with_generation_id_or_member_epoch(generation)
                .with_member_id(s(&member))
                .with_topics(vec![
                    offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(topic("events"))
                        .with_partitions(vec![
                            offset_commit_request::OffsetCommitRequestPartition::default()
                                .with_partition_index(0)
                                .with_committed_offset(i64::from(v) + 1),
                        ]),
                ])
        },
        |v, r| assert_eq!(r.topics[0].partitions[0].error_code, 0, "OffsetCommit v{v}"),
    )
    .await;
    let commit_versions = versions[&OffsetCommitRequest::KEY];
    each_version(
        address,
        versions,
        "OffsetFetch",
        |v| {
            let g = format!("g-v{}", group_of(v));
            if v >= 8 {
                OffsetFetchRequest::default().with_groups(vec![
                    offset_fetch_request::OffsetFetchRequestGroup::default()
                        .with_group_id(group(&g))
                        .with_topics(Some(vec![
                            offset_fetch_request::OffsetFetchRequestTopics::default()
                                .with_name(topic("events"))
                                .with_partition_indexes(vec![0]),
                        ])),
                ])
            } else {
                OffsetFetchRequest::default()
                    .with_group_id(group(&g))
                    .with_topics(Some(vec![
                        offset_fetch_request::OffsetFetchRequestTopic::default()
                            .with_name(topic("events"))
                            .with_partition_indexes(vec![0]),
                    ]))
            }
        },
        |v, r| {
            // The offset the OffsetCommit of the same version committed to this group (or the
            // highest OffsetCommit version's, for groups beyond it).
            let committed = (commit_versions.0..=commit_versions.1)
                .filter(|c| group_of(*c) == group_of(v))
                .max()
                .map_or(-1, |c| i64::from(c) + 1);
            let offset = if v >= 8 {
                assert_eq!(r.groups[0].error_code, 0, "OffsetFetch v{v}");
                r.groups[0].topics[0].partitions[0].committed_offset
            } else {
                assert_eq!(r.error_code, 0, "OffsetFetch v{v}");
                r.topics[0].partitions[0].committed_offset
            };
            assert_eq!(offset, committed, "OffsetFetch v{v}");
        },
    )
    .await;
    each_version(
        address,
        versions,
        "DescribeGroups",
        |v| {
            DescribeGroupsRequest::default()
                .with_groups(vec![group(&format!("g-v{}", group_of(v)))])
        },
        |v, r| {
            assert_eq!(r.groups[0].error_code, 0, "DescribeGroups v{v}");
            assert_eq!(r.groups[0].members.len(), 1, "DescribeGroups v{v}");
        },
    )
    .await;
    each_version(
        address,
        versions,
        "ListGroups",
        |_| ListGroupsRequest::default(),
        |v, r| {
            assert_eq!(r.error_code, 0, "ListGroups v{v}");
            assert!(!r.groups.is_empty(), "ListGroups v{v}");
        },
    )
    .await;
    each_version(
        address,
        versions,
        "LeaveGroup",
        |v| {
            let g = group_of(v);
            let (member, _) = members[&g].clone();
            let request = LeaveGroupRequest::default().with_group_id(group(&format!("g-v{g}")));
            if v >= 3 {
                request.with_members(vec![
                    leave_group_request::MemberIdentity::default().with_member_id(s(&member)),
                ])
            } else {
                request.with_member_id(s(&member))
            }
        },
        |v, r| {
            assert!(
                matches!(
                    ErrorCode(r.error_code),
                    ErrorCode::NONE | ErrorCode::UNKNOWN_MEMBER_ID
                ),
                "LeaveGroup v{v}: {}",
                r.error_code
            )
        },
    )
    .await;
    each_version(
        address,
        versions,
        "DeleteGroups",
        |v| {
            DeleteGroupsRequest::default()
                .with_groups_names(vec![group(&format!("g-v{}", group_of(v)))])
        },
        |v, r| {
            assert!(
                matches!(
                    ErrorCode(r.results[0].error_code),
                    ErrorCode::NONE | ErrorCode::GROUP_ID_NOT_FOUND
                ),
                "DeleteGroups v{v}"
            )
        },
    )
    .await;
}

/// InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn at each
/// version, each in a transaction of its own.
async fn transactions_at_every_version(address: &str, versions: &HashMap<i16, (i16, i16)>) {
    let init = |id: String, v: i16| async move {
        let (_, answer) = connection(address)
            .await
            .send(
                "InitProducerId",
                &InitProducerIdRequest::default()
                    .with_transactional_id(Some(TransactionalId(s(&id))))
                    .with_transaction_timeout_ms(60_000),
                v,
            )
            .await
            .unwrap_or_else(|e| panic!("InitProducerId v{v}: {e}"));
        assert_eq!(answer.error_code, 0, "InitProducerId v{v}");
        (answer.producer_id, answer.producer_epoch)
    };
    let (min, max) = versions[&InitProducerIdRequest::KEY];
    for v in min..=max {
        init(format!("init-v{v}"), v).await;
    }
    let txn_max = versions[&EndTxnRequest::KEY].1;
    for api in [
        "AddPartitionsToTxn",
        "AddOffsetsToTxn",
        "TxnOffsetCommit",
        "EndTxn",
    ] {
        let key = match api {
            "AddPartitionsToTxn" => AddPartitionsToTxnRequest::KEY,
            "AddOffsetsToTxn" => AddOffsetsToTxnRequest::KEY,
            "TxnOffsetCommit" => TxnOffsetCommitRequest::KEY,
            _ => EndTxnRequest::KEY,
        };
        let (min, max) = versions[&key];
        for v in min..=max {
            let id = format!("{api}-v{v}");
            let (pid, epoch) = init(id.clone(), max.min(txn_max).min(4)).await;
            let conn = connection(address).await;
            let partitions = vec![
                add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(topic("events"))
                    .with_partitions(vec![0]),
            ];
            // Version 4 is the brokers' batched form (one transaction of the batch here).
            let batched = api == "AddPartitionsToTxn" && v >= 4;
            let add_partitions = if batched {
                AddPartitionsToTxnRequest::default().with_transactions(vec![
                    add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                        .with_transactional_id(TransactionalId(s(&id)))
                        .with_producer_id(pid)
                        .with_producer_epoch(epoch)
                        .with_topics(partitions),
                ])
            } else {
                AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(TransactionalId(s(&id)))
                    .with_v3_and_below_producer_id(pid)
                    .with_v3_and_below_producer_epoch(epoch)
                    .with_v3_and_below_topics(partitions)
            };
            let at = |wanted: &str| if wanted == api { v } else { 3 };
            let (_, added) = conn
                .send(
                    "AddPartitionsToTxn",
                    &add_partitions,
                    at("AddPartitionsToTxn"),
                )
                .await
                .unwrap_or_else(|e| panic!("{api} v{v}: AddPartitionsToTxn: {e}"));
            let results = if batched {
                &added.results_by_transaction[0].topic_results
            } else {
                &added.results_by_topic_v3_and_below
            };
            let code = results[0].results_by_partition[0].partition_error_code;
            assert_eq!(code, 0, "{api} v{v}: AddPartitionsToTxn");
            let (_, offsets) = conn
                .send(
                    "AddOffsetsToTxn",
                    &AddOffsetsToTxnRequest::default()
                        .with_transactional_id(TransactionalId(s(&id)))
                        .with_producer_id(pid)
                        .with_producer_epoch(epoch)
                        .with_group_id(group(&id)),
                    at("AddOffsetsToTxn"),
                )
                .await
                .unwrap_or_else(|e| panic!("{api} v{v}: AddOffsetsToTxn: {e}"));
            assert_eq!(offsets.error_code, 0, "{api} v{v}: AddOffsetsToTxn");
            let (_, committed) = conn
                .send(
                    "TxnOffsetCommit",
                    &TxnOffsetCommitRequest::default()
                        .with_transactional_id(TransactionalId(s(&id)))
                        .with_group_id(group(&id))
                        .with_producer_id(pid)
                        .with_producer_epoch(epoch)
                        .with_topics(vec![
                            txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                                .with_name(topic("events"))
                                .with_partitions(vec![
                                    txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                                        .with_partition_index(0)
                                        .with_committed_offset(3),
                                ]),
                        ]),
                    at("TxnOffsetCommit"),
                )
                .await
                .unwrap_or_else(|e| panic!("{api} v{v}: TxnOffsetCommit: {e}"));
            assert_eq!(
                committed.topics[0].partitions[0].error_code, 0,
                "{api} v{v}: TxnOffsetCommit"
            );
            let (_, ended) = conn
                .send(
                    "EndTxn",
                    &EndTxnRequest::default()
                        .with_transactional_id(TransactionalId(s(&id)))
                        .with_producer_id(pid)
                        .with_producer_epoch(epoch)
                        .with_committed(false),
                    at("EndTxn"),
                )
                .await
                .unwrap_or_else(|e| panic!("{api} v{v}: EndTxn: {e}"));
            assert_eq!(ended.error_code, 0, "{api} v{v}: EndTxn");
        }
    }
    // WriteTxnMarkers, as another broker's coordinator sends it: an abort marker for a
    // producer that added the partition, written at each version.
    let (min, max) = versions[&WriteTxnMarkersRequest::KEY];
    for v in min..=max {
        let id = format!("WriteTxnMarkers-v{v}");
        let (pid, epoch) = init(id.clone(), 4).await;
        let marker = write_txn_markers_request::WritableTxnMarker::default()
            .with_producer_id(pid)
            .with_producer_epoch(epoch)
            .with_transaction_result(false)
            .with_topics(vec![
                write_txn_markers_request::WritableTxnMarkerTopic::default()
                    .with_name(topic("events"))
                    .with_partition_indexes(vec![0]),
            ]);
        let (_, written) = connection(address)
            .await
            .send(
                "WriteTxnMarkers",
                &WriteTxnMarkersRequest::default().with_markers(vec![marker]),
                v,
            )
            .await
            .unwrap_or_else(|e| panic!("WriteTxnMarkers v{v}: {e}"));
        assert_eq!(
            written.markers[0].topics[0].partitions[0].error_code, 0,
            "WriteTxnMarkers v{v}"
        );
    }
}

/// CreateAcls, DescribeAcls and DeleteAcls at each version.
async fn acls_at_every_version(address: &str, versions: &HashMap<i16, (i16, i16)>) {
    // Topic READ for a principal of its own per version; literal patterns (3) everywhere.
    let principal = |v: i16| s(&format!("User:reader-v{v}"));
    each_version(
        address,
        versions,
        "CreateAcls",
        |v| {
            CreateAclsRequest::default().with_creations(vec![
                create_acls_request::AclCreation::default()
                    .with_resource_type(2)
                    .with_resource_name(s("events"))
                    .with_resource_pattern_type(3)
                    .with_principal(principal(v))
                    .with_host(s("*"))
                    .with_operation(3)
                    .with_permission_type(3),
            ])
        },
        |v, r| assert_eq!(r.results[0].error_code, 0, "CreateAcls v{v}"),
    )
    .await;
    each_version(
        address,
        versions,
        "DescribeAcls",
        |v| {
            // (kafka-protocol's defaults for the nullable filters are "", not null.)
            DescribeAclsRequest::default()
                .with_resource_type_filter(2)
                .with_resource_name_filter(None)
                .with_host_filter(None)
                .with_pattern_type_filter(3)
                .with_principal_filter(Some(principal(v)))
                .with_operation(1)
                .with_permission_type(1)
        },
        |v, r| {
            assert_eq!(r.error_code, 0, "DescribeAcls v{v}");
            assert_eq!(r.resources.len(), 1, "DescribeAcls v{v}");
        },
    )
    .await;
    each_version(
        address,
        versions,
        "DeleteAcls",
        |v| {
            DeleteAclsRequest::default().with_filters(vec![
                delete_acls_request::DeleteAclsFilter::default()
                    .with_resource_type_filter(2)
                    .with_resource_name_filter(None)
                    .with_host_filter(None)
                    .with_pattern_type_filter(3)
                    .with_principal_filter(Some(principal(v)))
                    .with_operation(1)
                    .with_permission_type(1),
            ])
        },
        |v, r| {
            assert_eq!(r.filter_results[0].error_code, 0, "DeleteAcls v{v}");
            assert_eq!(
                r.filter_results[0].matching_acls.len(),
                1,
                "DeleteAcls v{v}"
            );
        },
    )
    .await;
}

/// ConsumerGroupHeartbeat at each version, each in a group of its own (v0: the broker names the
/// member; v1: the client does), the member getting both partitions of `events`; then
/// ConsumerGroupDescribe at each version shows it, and OffsetCommit / OffsetFetch v9 with its
/// member epoch commit and read back offset 3.
async fn consumer_group_at_every_version(address: &str, versions: &HashMap<i16, (i16, i16)>) {
    let topic_id = {
        let (_, metadata) = connection(address)
            .await
            .send(
                "Metadata",
                &MetadataRequest::default().with_topics(Some(vec![
                    metadata_request::MetadataRequestTopic::default()
                        .with_name(Some(topic("events"))),
                ])),
                12,
            )
            .await
            .expect("Metadata answers");
        metadata.topics[0].topic_id
    };
    let mut members: HashMap<i16, (String, i32)> = HashMap::new();
    each_version(
        address,
        versions,
        "ConsumerGroupHeartbeat",
        |v| {
            let member = if v == 0 {
                String::new()
            } else {
                format!("member-v{v}")
            };
            ConsumerGroupHeartbeatRequest::default()
                .with_group_id(group(&format!("new-protocol-v{v}")))
                .with_member_id(s(&member))
                .with_member_epoch(0)
                .with_rebalance_timeout_ms(30_000)
                .with_subscribed_topic_names(Some(vec![topic("events")]))
                .with_topic_partitions(Some(Vec::new()))
        },
        |v, r| {
            assert_eq!(
                r.error_code, 0,
                "ConsumerGroupHeartbeat v{v}: {:?}",
                r.error_message
            );
            assert!(r.member_epoch > 0, "ConsumerGroupHeartbeat v{v}");
            let member = r.member_id.as_deref().unwrap_or_default().to_string();
            assert!(
                !member.is_empty(),
                "ConsumerGroupHeartbeat v{v} names the member"
            );
            if v >= 1 {
                assert_eq!(member, format!("member-v{v}"), "v{v} keeps the client's id");
            }
            let assigned = r.assignment.expect("an assignment");
            assert_eq!(assigned.topic_partitions.len(), 1, "v{v}");
            assert_eq!(assigned.topic_partitions[0].topic_id, topic_id, "v{v}");
            assert_eq!(assigned.topic_partitions[0].partitions, vec![0, 1], "v{v}");
            members.insert(v, (member, r.member_epoch));
        },
    )
    .await;
    let (member, epoch) = members.values().next().cloned().expect("a member");
    let group_id = members
        .iter()
        .find(|(_, (m, _))| *m == member)
        .map(|(v, _)| format!("new-protocol-v{v}"))
        .expect("its group");
    each_version(
        address,
        versions,
        "ConsumerGroupDescribe",
        |_| ConsumerGroupDescribeRequest::default().with_group_ids(vec![group(&group_id)]),
        |v, r| {
            let g = &r.groups[0];
            assert_eq!(
                g.error_code, 0,
                "ConsumerGroupDescribe v{v}: {:?}",
                g.error_message
            );
            assert_eq!(&*g.group_state, "Stable", "ConsumerGroupDescribe v{v}");
            assert_eq!(g.members.len(), 1, "ConsumerGroupDescribe v{v}");
            assert_eq!(&*g.members[0].member_id, member.as_str());
            assert_eq!(g.members[0].member_epoch, epoch);
            assert_eq!(
                g.members[0].assignment.topic_partitions[0].partitions,
                vec![0, 1]
            );
        },
    )
    .await;
    let conn = connection(address).await;
    let commit = |member_epoch: i32| {
        OffsetCommitRequest::default()
            .with_group_id(group(&group_id))
            .with_generation_id_or_member_epoch(member_epoch)
            .with_member_id(s(&member))
            .with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(topic("events"))
                    .with_partitions(vec![
                        offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(3),
                    ]),
            ])
    };
    for (sent, expected) in [(epoch - 1, 113), (epoch + 1, 110), (epoch, 0)] {
        let (_, r) = conn
            .send("OffsetCommit", &commit(sent), 9)
            .await
            .expect("OffsetCommit v9 answers");
        assert_eq!(
            r.topics[0].partitions[0].error_code, expected,
            "OffsetCommit v9 at member epoch {sent} (the member's is {epoch})"
        );
    }
    let (_, r) = conn
        .send(
            "OffsetFetch",
            &OffsetFetchRequest::default().with_groups(vec![
                offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(group(&group_id))
                    .with_member_id(Some(s(&member)))
                    .with_member_epoch(epoch)
                    .with_topics(Some(vec![
                        offset_fetch_request::OffsetFetchRequestTopics::default()
                            .with_name(topic("events"))
                            .with_partition_indexes(vec![0]),
                    ])),
            ]),
            9,
        )
        .await
        .expect("OffsetFetch v9 answers");
    assert_eq!(r.groups[0].error_code, 0);
    assert_eq!(r.groups[0].topics[0].partitions[0].committed_offset, 3);
}
