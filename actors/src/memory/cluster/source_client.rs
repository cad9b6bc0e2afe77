//! A client of a memory cluster, as a mirror of it connects: the [`Source`] that answers what a
//! Kafka broker would (metadata, ListOffsets, READ_COMMITTED fetches with divergence and
//! out-of-range answers, LastMirroredEpochs from its own `__mirror_state` records).

use super::*;

/// A client of a memory cluster, through its network.
#[derive(Debug)]
pub struct MemorySourceClient {
    pub(super) network: MemoryNetwork,
    pub(super) address: String,
}

impl MemorySourceClient {
    fn cluster(&self) -> Result<MemoryCluster, ClientError> {
        self.network.reach(&self.address)
    }
}

/// One partition's answer to a fetch, as a Kafka leader gives it.
fn fetched(
    state: &State,
    cluster_id: &str,
    leader: i32,
    asked: &kmirror_protocol::client::FetchPartitionSpec,
) -> FetchedPartition {
    let mut answer = FetchedPartition {
        topic_id: asked.topic_id,
        topic: asked.topic.clone(),
        partition: asked.partition,
        error: ErrorCode::NONE,
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        records: bytes::Bytes::new(),
        aborted_transactions: Vec::new(),
        diverging_epoch: None,
        current_leader: None,
    };
    let topic = state.topics.get(&asked.topic);
    let (Some(topic), Some(log)) = (
        topic,
        state.logs.get(&(asked.topic.clone(), asked.partition)),
    ) else {
        answer.error = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
        return answer;
    };
    if !asked.topic_id.is_nil() && topic.topic_id != asked.topic_id {
        answer.error = ErrorCode::UNKNOWN_TOPIC_ID;
        return answer;
    }
    let Some(meta) = topic.partitions.get(asked.partition as usize) else {
        answer.error = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
        return answer;
    };
    if meta.leader != leader {
        answer.error = ErrorCode::NOT_LEADER_OR_FOLLOWER;
        return answer;
    }
    if asked.current_leader_epoch >= 0 && asked.current_leader_epoch < meta.leader_epoch {
        answer.error = ErrorCode::FENCED_LEADER_EPOCH;
        return answer;
    }
    let request = FetchRequest {
        offset: asked.offset,
        last_fetched_epoch: (asked.last_fetched_epoch >= 0).then_some(asked.last_fetched_epoch),
        max_bytes: usize::try_from(asked.max_bytes).unwrap_or(usize::MAX),
    };
    let source = MemorySource {
        cluster_id: cluster_id.to_string(),
        log: Some(log),
        lmes: HashMap::new(),
        unreachable: None,
    };
    answer.high_watermark = log.log_end_offset();
    answer.last_stable_offset = log.last_stable_offset();
    answer.log_start_offset = log.log_start_offset();
    match source.fetch(&request) {
        Ok(FetchResponse::Records { records, .. }) => answer.records = records,
        Ok(FetchResponse::Diverging { epoch, end_offset }) => {
            answer.diverging_epoch = Some((epoch, end_offset));
        }
        Ok(FetchResponse::OffsetOutOfRange { .. }) => {
            answer.error = ErrorCode::OFFSET_OUT_OF_RANGE;
        }
        Err(_) => answer.error = ErrorCode::UNKNOWN_SERVER_ERROR,
    }
    answer
}

/// The LME `cluster` recorded for `partition` of `topic` in any mirror whose source is
/// `asking`, from its `__mirror_state` records (-1: none).
fn recorded_lme(state: &State, asking: &str, topic: &str, topic_id: Uuid, partition: i32) -> i32 {
    let shards = state
        .topics
        .get(MIRROR_STATE_TOPIC)
        .map_or(0, |t| t.partitions.len() as i32);
    let mirrors = state
        .mirrors
        .iter()
        .filter(|(_, c)| c.get("mirror.source.cluster.id").map(String::as_str) == Some(asking));
    for (mirror, _) in mirrors {
        let index = mirror_partition_shard(mirror, &topic_id, partition, shards.max(1));
        let mut shard = Shard::new(index, shards.max(1));
        if let Some(log) = state.logs.get(&(MIRROR_STATE_TOPIC.to_string(), index)) {
            for batch in log.batches() {
                for record in coordinator_records(batch).unwrap_or_default() {
                    shard.replay(&record);
                }
            }
        }
        shard.loaded();
        if let Some(lme) = shard.last_mirrored_epoch(mirror, topic, partition) {
            return lme;
        }
    }
    -1
}

impl Source for MemorySourceClient {
    fn cluster_id(&self) -> impl Future<Output = Result<String, ClientError>> {
        std::future::ready(self.cluster().map(|c| c.inner.cluster_id.clone()))
    }

    fn metadata(
        &self,
        topics: Option<&[&str]>,
    ) -> impl Future<Output = Result<ClusterMetadata, ClientError>> {
        let answer = self.cluster().map(|cluster| {
            let state = cluster.state();
            let wanted = |name: &str| topics.is_none_or(|t| t.contains(&name));
            ClusterMetadata {
                cluster_id: Some(cluster.inner.cluster_id.clone()),
                brokers: HashMap::from([(NODE, cluster.address())]),
                topics: state
                    .topics
                    .iter()
                    .filter(|(name, _)| wanted(name) && !name.starts_with("__"))
                    .map(|(name, t)| {
                        let partitions = (0..)
                            .zip(&t.partitions)
                            .map(|(partition, p)| PartitionMetadata {
                                partition,
                                leader: p.leader,
                                leader_epoch: p.leader_epoch,
                                replicas: vec![p.leader],
                                isr: vec![p.leader],
                            })
                            .collect();
                        let topic = TopicMetadata {
                            name: name.clone(),
                            topic_id: t.topic_id,
                            partitions,
                        };
                        (name.clone(), topic)
                    })
                    .collect(),
                refused: HashMap::new(),
            }
        });
        std::future::ready(answer)
    }

    fn list_offsets(
        &self,
        _leader: i32,
        topic: &str,
        partition: i32,
        timestamp: i64,
        isolation: Isolation,
    ) -> impl Future<Output = Result<(i64, i32), ClientError>> {
        let answer = self.cluster().and_then(|cluster| {
            let state = cluster.state();
            let log = state
                .logs
                .get(&(topic.to_string(), partition))
                .ok_or_else(|| ClientError::NotFound(format!("{topic}-{partition}")))?;
            let epoch = leader_epoch(&state, topic, partition).unwrap_or(-1);
            let offset = match (timestamp, isolation) {
                (EARLIEST, _) => log.log_start_offset(),
                (_, Isolation::ReadCommitted) => log.last_stable_offset(),
                (_, Isolation::ReadUncommitted) => log.log_end_offset(),
            };
            Ok((offset, epoch))
        });
        std::future::ready(answer)
    }

    fn connect(
        &self,
        _broker: i32,
    ) -> impl Future<Output = Result<Option<std::time::Duration>, ClientError>> {
        // An in-memory cluster has no connection to open, nor a round trip to tell.
        std::future::ready(self.cluster().map(|_| None))
    }

    fn fetch(
        &self,
        leader: i32,
        spec: &FetchSpec,
    ) -> impl Future<Output = Result<Vec<FetchedPartition>, ClientError>> {
        let answer = self.cluster().map(|cluster| {
            let state = cluster.state();
            spec.partitions
                .iter()
                .map(|asked| fetched(&state, &cluster.inner.cluster_id, leader, asked))
                .collect()
        });
        async move {
            // A fetch with nothing new waits a little, as a broker's long poll does.
            if answer
                .as_ref()
                .is_ok_and(|a: &Vec<FetchedPartition>| a.iter().all(|p| p.records.is_empty()))
            {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            answer
        }
    }

    fn last_mirrored_epochs(
        &self,
        cluster_id: &str,
        topic: &str,
        topic_id: Uuid,
        partitions: &[i32],
    ) -> impl Future<Output = Result<Vec<PartitionLme>, ClientError>> {
        let answer = self.cluster().map(|cluster| {
            let state = cluster.state();
            partitions
                .iter()
                .map(|p| Ok(recorded_lme(&state, cluster_id, topic, topic_id, *p)))
                .collect()
        });
        std::future::ready(answer)
    }

    fn describe_topic_configs(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<Vec<ConfigEntry>, ClientError>> {
        let answer = self.cluster().map(|cluster| {
            cluster
                .state()
                .topics
                .get(topic)
                .map(|t| {
                    t.configs
                        .iter()
                        .map(|(name, value)| ConfigEntry {
                            name: name.clone(),
                            value: Some(value.clone()),
                            source: crate::engine::sync_plan::DYNAMIC_TOPIC_CONFIG,
                            sensitive: false,
                        })
                        .collect()
                })
                .unwrap_or_default()
        });
        std::future::ready(answer)
    }

    fn list_groups(&self) -> impl Future<Output = Result<Vec<GroupListing>, ClientError>> {
        let answer = self.cluster().map(|cluster| {
            cluster
                .state()
                .groups
                .keys()
                .map(|group_id| GroupListing {
                    group_id: group_id.clone(),
                    state: "Empty".into(),
                    protocol_type: "consumer".into(),
                })
                .collect()
        });
        std::future::ready(answer)
    }

    fn committed_offsets(
        &self,
        group: &str,
    ) -> impl Future<Output = Result<Vec<CommittedOffset>, ClientError>> {
        let answer = self.cluster().map(|cluster| {
            let offsets = cluster.state().groups.get(group).cloned();
            offsets
                .unwrap_or_default()
                .into_iter()
                .map(|((topic, partition), o)| CommittedOffset {
                    topic,
                    partition,
                    offset: o.offset,
                    leader_epoch: o.leader_epoch.unwrap_or(-1),
                    metadata: o.metadata,
                })
                .collect()
        });
        std::future::ready(answer)
    }

    fn describe_acls(&self) -> impl Future<Output = Result<Vec<AclDescription>, ClientError>> {
        std::future::ready(Err(ClientError::Broker {
            api: "DescribeAcls",
            code: ErrorCode::SECURITY_DISABLED,
        }))
    }

    fn reconfigure(&self, _config: ClientConfig) -> Result<(), ClientError> {
        Ok(())
    }
}
