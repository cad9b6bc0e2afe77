//! One `__mirror_state` coordinator shard, pure (docs/design.md §8).
//!
//! Lifecycle: a broker that becomes leader of a `__mirror_state` partition creates a [`Shard`] in
//! the loading state, feeds it every record of that partition through [`Shard::replay`], then
//! calls [`Shard::loaded`]. From then on a write is two steps: [`Shard::write`] validates the
//! writes and returns the records to append together with each write's answer (a broker's own
//! partitions write this way; [`Shard::write_states`] is the same for a WriteMirrorStates
//! request from another broker); the caller appends
//! the records to the partition and replays them, and only then answers. The shard's state
//! therefore changes only by replaying records, so a restarted or new leader rebuilds exactly
//! the same state from the log.
//!
//! Rules: a shard answers only for keys that hash to it (NOT_COORDINATOR otherwise), nothing
//! while loading (COORDINATOR_LOAD_IN_PROGRESS); a write carrying a destination leader epoch
//! below the stored one is fenced (FENCED_LEADER_EPOCH); states must be real states
//! (`INVALID_CLUSTER_MIRROR_STATES`). The LME of a mirror's partitions lives in one
//! `LastMirrorEpochs` record per mirror and shard, rewritten whole when one partition changes.
//! Deleting a mirror writes tombstones for all its records.

use crate::partition::StoredState;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    LastMirrorEpochsKey, LastMirrorEpochsValue, MirrorPartitionStateKey, MirrorPartitionStateValue,
    ReadMirrorStatesRequest, ReadMirrorStatesResponse, WriteMirrorStatesRequest,
    WriteMirrorStatesResponse, last_mirror_epochs_value, read_mirror_states_response,
    write_mirror_states_response,
};
use kmirror_protocol::records::CoordinatorRecord;
use kmirror_protocol::sharding::mirror_partition_shard;
use kmirror_protocol::state::MirrorState;
use std::collections::{BTreeMap, HashMap};
use uuid::Uuid;

/// A mirror partition: (mirror name, topic id, partition).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionKey {
    /// The mirror.
    pub mirror: String,
    /// The topic id (the same on both clusters).
    pub topic_id: Uuid,
    /// The partition index.
    pub partition: i32,
}

/// One partition's state to write (with its topic's name, under which its LME is kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateWrite {
    /// The topic's name.
    pub topic: String,
    /// The topic's id.
    pub topic_id: Uuid,
    /// The partition.
    pub partition: i32,
    /// The state record.
    pub stored: StoredState,
    /// The LME to record with it (`None`: the one recorded stays).
    pub lme: Option<i32>,
}

/// A partition's stored state (`None`: never written) and its LME (`None`: none recorded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRead {
    /// The state record.
    pub stored: Option<StoredState>,
    /// The LME recorded.
    pub lme: Option<i32>,
}

/// A mirror's LMEs in this shard, by (topic name, partition).
pub type LmeMap = BTreeMap<(String, i32), i32>;

/// One shard's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    index: i32,
    num_shards: i32,
    loading: bool,
    states: HashMap<PartitionKey, StoredState>,
    lmes: HashMap<String, LmeMap>,
}

fn stored_from(v: &MirrorPartitionStateValue) -> StoredState {
    StoredState {
        state: MirrorState::from_wire(v.state).unwrap_or(MirrorState::Unknown),
        previous: MirrorState::from_wire(v.previous_state).unwrap_or(MirrorState::Unknown),
        retry_attempt: v.retry_attempt,
        error: v.error_message.clone(),
        leader_epoch: v.leader_epoch,
    }
}

fn lme_record(mirror: &str, lmes: &LmeMap) -> CoordinatorRecord {
    let mut topics: BTreeMap<&str, Vec<last_mirror_epochs_value::Partition>> = BTreeMap::new();
    for ((topic, partition), lme) in lmes {
        topics
            .entry(topic)
            .or_default()
            .push(last_mirror_epochs_value::Partition {
                partition_index: *partition,
                last_mirror_epoch: *lme,
                ..Default::default()
            });
    }
    CoordinatorRecord::LastMirrorEpochs {
        key: LastMirrorEpochsKey {
            mirror_name: mirror.to_string(),
        },
        value: Some(LastMirrorEpochsValue {
            topics: topics
                .into_iter()
                .map(|(name, partitions)| last_mirror_epochs_value::Topic {
                    name: name.to_string(),
                    partitions,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
    }
}

/// The mirrors that exist, each with its topics (by id, with their names): what a shard keeps
/// records of ([`Shard::forget_all_but`]).
pub type LiveTopics = BTreeMap<String, BTreeMap<Uuid, String>>;

impl Shard {
    /// A shard for `__mirror_state` partition `index` of `num_shards`, loading.
    pub fn new(index: i32, num_shards: i32) -> Shard {
        Shard {
            index,
            num_shards,
            loading: true,
            states: HashMap::new(),
            lmes: HashMap::new(),
        }
    }

    /// Applies one record of the shard's partition: the only way its state changes.
    pub fn replay(&mut self, record: &CoordinatorRecord) {
        match record {
            CoordinatorRecord::MirrorPartitionState { key, value } => {
                let key = PartitionKey {
                    mirror: key.mirror_name.clone(),
                    topic_id: key.topic_id,
                    partition: key.partition,
                };
                match value {
                    Some(v) => {
                        self.states.insert(key, stored_from(v));
                    }
                    None => {
                        self.states.remove(&key);
                    }
                }
            }
            CoordinatorRecord::LastMirrorEpochs { key, value } => match value {
                Some(v) => {
                    let map = v
                        .topics
                        .iter()
                        .flat_map(|t| {
                            t.partitions
                                .iter()
                                .map(|p| ((t.name.clone(), p.partition_index), p.last_mirror_epoch))
                        })
                        .collect();
                    self.lmes.insert(key.mirror_name.clone(), map);
                }
                None => {
                    self.lmes.remove(&key.mirror_name);
                }
            },
        }
    }

    /// Every record of the partition has been replayed: start answering.
    pub fn loaded(&mut self) {
        self.loading = false;
    }

    /// Whether the shard is still replaying its partition.
    pub fn is_loading(&self) -> bool {
        self.loading
    }

    /// The stored state of a mirror partition.
    pub fn state_of(&self, key: &PartitionKey) -> Option<&StoredState> {
        self.states.get(key)
    }

    /// How many partition states the shard holds.
    pub fn partition_count(&self) -> usize {
        self.states.len()
    }

    /// The LME recorded for a partition, if any.
    pub fn last_mirrored_epoch(&self, mirror: &str, topic: &str, partition: i32) -> Option<i32> {
        self.lmes
            .get(mirror)
            .and_then(|m| m.get(&(topic.to_string(), partition)))
            .copied()
    }

    fn owns(&self, key: &PartitionKey) -> bool {
        mirror_partition_shard(&key.mirror, &key.topic_id, key.partition, self.num_shards)
            == self.index
    }

    /// Validates writes of `mirror`'s partition states: the records to append (then replay),
    /// and each write's error code (NONE for those written). One `LastMirrorEpochs` record
    /// carries every LME the writes change.
    pub fn write(
        &self,
        mirror: &str,
        writes: &[StateWrite],
    ) -> (Vec<CoordinatorRecord>, Vec<ErrorCode>) {
        let mut records = Vec::new();
        let mut lmes = self.lmes.get(mirror).cloned().unwrap_or_default();
        let mut lme_changed = false;
        let mut codes = Vec::with_capacity(writes.len());
        for write in writes {
            let key = PartitionKey {
                mirror: mirror.to_string(),
                topic_id: write.topic_id,
                partition: write.partition,
            };
            let stored_epoch = self.states.get(&key).map_or(-1, |s| s.leader_epoch);
            let error = if self.loading {
                ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
            } else if !self.owns(&key) {
                ErrorCode::NOT_COORDINATOR
            } else if write.stored.state == MirrorState::Unknown {
                ErrorCode::INVALID_CLUSTER_MIRROR_STATES
            } else if write.stored.leader_epoch < stored_epoch {
                ErrorCode::FENCED_LEADER_EPOCH
            } else {
                ErrorCode::NONE
            };
            if error.is_ok() {
                records.push(CoordinatorRecord::MirrorPartitionState {
                    key: MirrorPartitionStateKey {
                        mirror_name: key.mirror.clone(),
                        topic_id: key.topic_id,
                        partition: key.partition,
                    },
                    value: Some(MirrorPartitionStateValue {
                        state: write.stored.state.wire_value(),
                        previous_state: write.stored.previous.wire_value(),
                        retry_attempt: write.stored.retry_attempt,
                        error_message: write.stored.error.clone(),
                        leader_epoch: write.stored.leader_epoch,
                        ..Default::default()
                    }),
                });
                if let Some(lme) = write.lme {
                    lmes.insert((write.topic.clone(), write.partition), lme);
                    lme_changed = true;
                }
            }
            codes.push(error);
        }
        if lme_changed {
            records.push(lme_record(mirror, &lmes));
        }
        (records, codes)
    }

    /// A partition's stored state and LME, or why this shard cannot answer for it.
    pub fn read(&self, key: &PartitionKey, topic: &str) -> Result<StateRead, ErrorCode> {
        if self.loading {
            return Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
        }
        if !self.owns(key) {
            return Err(ErrorCode::NOT_COORDINATOR);
        }
        Ok(StateRead {
            stored: self.states.get(key).cloned(),
            lme: self.last_mirrored_epoch(&key.mirror, topic, key.partition),
        })
    }

    /// WriteMirrorStates from another broker: [`Shard::write`] over the request's partitions
    /// (a state that is not a real state is INVALID_CLUSTER_MIRROR_STATES), as its response.
    pub fn write_states(
        &self,
        request: &WriteMirrorStatesRequest,
    ) -> (Vec<CoordinatorRecord>, WriteMirrorStatesResponse) {
        let mut writes = Vec::new();
        let mut invalid = Vec::new();
        for topic in &request.topics {
            for p in &topic.partitions {
                let state = MirrorState::from_wire(p.state);
                let previous = MirrorState::from_wire(p.previous_state);
                let (Some(state), Some(previous)) = (state, previous) else {
                    invalid.push((topic.topic_id, p.partition_index));
                    continue;
                };
                writes.push(StateWrite {
                    topic: topic.name.clone(),
                    topic_id: topic.topic_id,
                    partition: p.partition_index,
                    stored: StoredState {
                        state,
                        previous,
                        retry_attempt: p.retry_attempt,
                        error: p.error_message.clone(),
                        leader_epoch: p.leader_epoch,
                    },
                    lme: (p.last_mirror_epoch >= 0).then_some(p.last_mirror_epoch),
                });
            }
        }
        let (records, codes) = self.write(&request.mirror_name, &writes);
        let mut answered = writes.iter().zip(codes);
        let mut response = WriteMirrorStatesResponse::default();
        for topic in &request.topics {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let error = if invalid.contains(&(topic.topic_id, p.partition_index)) {
                        ErrorCode::INVALID_CLUSTER_MIRROR_STATES
                    } else {
                        answered
                            .next()
                            .map_or(ErrorCode::UNKNOWN_SERVER_ERROR, |(_, e)| e)
                    };
                    write_mirror_states_response::Partition {
                        partition_index: p.partition_index,
                        error_code: error.0,
                        error_message: (!error.is_ok()).then(|| error.name().to_string()),
                        ..Default::default()
                    }
                })
                .collect();
            response.topics.push(write_mirror_states_response::Topic {
                topic_id: topic.topic_id,
                name: topic.name.clone(),
                partitions,
                ..Default::default()
            });
        }
        (records, response)
    }

    /// ReadMirrorStates from another broker: [`Shard::read`] for each partition asked.
    pub fn read_states(&self, request: &ReadMirrorStatesRequest) -> ReadMirrorStatesResponse {
        let mut response = ReadMirrorStatesResponse::default();
        for topic in &request.topics {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let key = PartitionKey {
                        mirror: request.mirror_name.clone(),
                        topic_id: topic.topic_id,
                        partition: p.partition_index,
                    };
                    let mut out = read_mirror_states_response::Partition {
                        partition_index: p.partition_index,
                        ..Default::default()
                    };
                    match self.read(&key, &topic.name) {
                        Err(code) => out.error_code = code.0,
                        Ok(read) => {
                            if let Some(s) = read.stored {
                                out.state = s.state.wire_value();
                                out.previous_state = s.previous.wire_value();
                                out.retry_attempt = s.retry_attempt;
                                out.error_message = s.error;
                                out.leader_epoch = s.leader_epoch;
                            }
                            out.last_mirror_epoch = read.lme.unwrap_or(-1);
                        }
                    }
                    out
                })
                .collect();
            response.topics.push(read_mirror_states_response::Topic {
                topic_id: topic.topic_id,
                name: topic.name.clone(),
                partitions,
                ..Default::default()
            });
        }
        response
    }

    /// The records that forget everything not in `live`: the mirrors that exist, each with the
    /// topics (id and name) whose `mirror.name` names it. Every broker sweeps the shards it
    /// leads with this on a metadata change that deleted a topic or a mirror or moved a topic
    /// out of its mirror, so shards led by brokers that ran none of its partitions forget too.
    pub fn forget_all_but(&self, live: &LiveTopics) -> Vec<CoordinatorRecord> {
        let mut records = Vec::new();
        let mut mirrors: Vec<&String> = self
            .states
            .keys()
            .map(|k| &k.mirror)
            .chain(self.lmes.keys())
            .collect();
        mirrors.sort();
        mirrors.dedup();
        for mirror in mirrors {
            // A mirror that is gone has no live topics: every record of it goes.
            let none = BTreeMap::new();
            let topics = live.get(mirror).unwrap_or(&none);
            let mut dead: Vec<&PartitionKey> = self
                .states
                .keys()
                .filter(|k| k.mirror == *mirror && !topics.contains_key(&k.topic_id))
                .collect();
            dead.sort();
            records.extend(
                dead.into_iter()
                    .map(|k| CoordinatorRecord::MirrorPartitionState {
                        key: MirrorPartitionStateKey {
                            mirror_name: k.mirror.clone(),
                            topic_id: k.topic_id,
                            partition: k.partition,
                        },
                        value: None,
                    }),
            );
            if let Some(lmes) = self.lmes.get(mirror) {
                let names: std::collections::BTreeSet<&String> = topics.values().collect();
                let kept: LmeMap = lmes
                    .iter()
                    .filter(|((name, _), _)| names.contains(name))
                    .map(|(k, v)| (k.clone(), *v))
                    .collect();
                if kept.is_empty() {
                    records.push(CoordinatorRecord::LastMirrorEpochs {
                        key: LastMirrorEpochsKey {
                            mirror_name: mirror.clone(),
                        },
                        value: None,
                    });
                } else if kept.len() != lmes.len() {
                    records.push(lme_record(mirror, &kept));
                }
            }
        }
        records
    }
}

#[cfg(test)]
pub(crate) mod tests;
