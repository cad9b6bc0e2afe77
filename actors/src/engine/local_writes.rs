//! Restarting the mirror of a stopped topic cuts its log back to where it failed over,
//! discarding what this cluster wrote since (docs/failover.md "Restarting a stopped topic").
//! That is never done unasked: every partition's leader counts its partition's records (the
//! topic may be spread over the brokers: this broker's engine counts its own with
//! [`CountLocalWrites`], the others answer DescribeMirrors' `LocalRecords`), and the start is
//! refused, naming the total, unless the operator confirmed exactly that many.
//!
//! A confirmed restart records, per partition, the log end offset its count was taken at
//! ([`crate::metadata::DISCARD_CONFIRMED`], written with `mirror.name`); PREPARING cuts only a
//! log that still ends there, so a write that lands after the count is kept, never cut
//! unconfirmed.

use super::system::MirrorSystem;
use crate::host::Host;
use crate::metadata::{MIRROR_NAME, mirror_of};
use crate::partition::{Cause, Desired};
use crate::policy::MirrorError;
use actix::{Addr, Context, Handler, Message};
use kmirror_protocol::client::ClientConfig;
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{DescribeMirrorsRequest, DescribeMirrorsResponse};
use std::collections::{BTreeMap, BTreeSet};

/// For each partition this broker leads of the named topics that are stopped in `mirror`: the
/// records this cluster's producers wrote since the failover ([`crate::host::local_records`]),
/// which restarting the mirror discards, and the log end offset they were counted at. A
/// restart is confirmed against these counts from every partition's leader.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Result<Vec<LocalWrites>, MirrorError>")]
pub struct CountLocalWrites {
    /// The mirror.
    pub mirror: String,
    /// The topics.
    pub topics: Vec<String>,
}

/// One stopped partition's writes since its failover, as [`CountLocalWrites`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalWrites {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// Records written on this cluster since the failover.
    pub records: u64,
    /// The log end offset when they were counted.
    pub log_end: i64,
}

impl<H: Host> Handler<CountLocalWrites> for MirrorSystem<H> {
    type Result = Result<Vec<LocalWrites>, MirrorError>;

    fn handle(&mut self, msg: CountLocalWrites, _: &mut Context<Self>) -> Self::Result {
        let mut counted = Vec::new();
        for name in &msg.topics {
            let Some(topic) = self.host.topic(name) else {
                continue;
            };
            let stopped = topic.configs.get(MIRROR_NAME).and_then(|v| mirror_of(v))
                == Some((msg.mirror.as_str(), Desired::Stopped));
            if !stopped {
                continue;
            }
            for (index, partition) in (0..).zip(&topic.partitions) {
                if !self.host.leads(partition) {
                    continue;
                }
                let (records, log_end) = self
                    .host
                    .with_log(name, index, |log| {
                        Ok((crate::host::local_records(log)?, log.log_end_offset()))
                    })
                    .map_err(|e: Cause| {
                        MirrorError::new(
                            ErrorCode::KAFKA_STORAGE_ERROR,
                            format!("reading {name}-{index}: {}", e.message),
                        )
                    })?;
                counted.push(LocalWrites {
                    topic: name.clone(),
                    partition: index,
                    records,
                    log_end,
                });
            }
        }
        Ok(counted)
    }
}

/// Per stopped topic among `names`, the log end offset each partition holding records written
/// here since the failover was counted at, once the operator's `confirmed` count equals the
/// total of every partition's leader; else why not (POLICY_VIOLATION naming the total, or
/// LEADER_NOT_AVAILABLE when a leader could not count). Nothing is changed either way.
pub(super) async fn confirm_discarded_writes<H: Host>(
    system: &Addr<MirrorSystem<H>>,
    host: &H,
    mirror: &str,
    names: &[String],
    confirmed: i64,
) -> Result<BTreeMap<String, BTreeMap<i32, i64>>, MirrorError> {
    let stopped: Vec<String> = names
        .iter()
        .filter(|name| {
            host.topic(name)
                .and_then(|t| t.configs.get(MIRROR_NAME).cloned())
                .is_some_and(|v| mirror_of(&v) == Some((mirror, Desired::Stopped)))
        })
        .cloned()
        .collect();
    if stopped.is_empty() {
        return Ok(BTreeMap::new());
    }
    let counted = count_everywhere(system, host, mirror, &stopped)
        .await
        .map_err(|why| {
            MirrorError::new(
                ErrorCode::LEADER_NOT_AVAILABLE,
                format!("{why}; nothing was changed, try again"),
            )
        })?;
    let total = records(counted.iter().map(|w| w.records).sum());
    if total != 0 && confirmed != total {
        let details: Vec<String> = counted
            .iter()
            .filter(|w| w.records > 0)
            .map(|w| format!("{}-{}: {}", w.topic, w.partition, w.records))
            .collect();
        return Err(MirrorError::new(
            ErrorCode::POLICY_VIOLATION,
            format!(
                "restarting the mirror discards {total} records written on this cluster since \
                 the failover ({}); nothing was changed. To discard them, start again with \
                 --discard-local-writes {total}",
                details.join(", ")
            ),
        ));
    }
    let mut log_ends: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
    for w in counted.into_iter().filter(|w| w.records > 0) {
        log_ends
            .entry(w.topic)
            .or_default()
            .insert(w.partition, w.log_end);
    }
    Ok(log_ends)
}

/// Every partition's count, from its leader only (a broker that led it before a move may
/// still answer for it); fails naming a partition whose leader gave none.
async fn count_everywhere<H: Host>(
    system: &Addr<MirrorSystem<H>>,
    host: &H,
    mirror: &str,
    topics: &[String],
) -> Result<Vec<LocalWrites>, String> {
    let mut counted = system
        .send(CountLocalWrites {
            mirror: mirror.to_string(),
            topics: topics.to_vec(),
        })
        .await
        .map_err(|e| format!("the mirroring engine: {e}"))?
        .map_err(|e| e.message)?;
    let mut leaders: BTreeMap<(String, i32), Option<i32>> = BTreeMap::new();
    let mut others = BTreeSet::new();
    for name in topics {
        let Some(topic) = host.topic(name) else {
            continue;
        };
        for (index, partition) in (0..).zip(&topic.partitions) {
            if !partition.has_leader() {
                return Err(format!(
                    "{name}-{index} has no leader (its in-sync replicas are down); try again once one is elected"
                ));
            }
            let local = host.leads(partition);
            leaders.insert((name.clone(), index), (!local).then_some(partition.leader));
            if !local {
                others.insert(partition.leader);
            }
        }
    }
    counted.retain(|w| leaders.get(&(w.topic.clone(), w.partition)) == Some(&None));
    for node in others {
        let answer = describe_on(host, node, mirror)
            .await
            .map_err(|e| format!("broker {node} could not count its partitions' writes: {e}"))?;
        for topic in answer
            .mirrors
            .into_iter()
            .filter(|m| m.mirror_name == mirror)
            .flat_map(|m| m.topics)
        {
            let leads = |p: i32| leaders.get(&(topic.topic_name.clone(), p)) == Some(&Some(node));
            for p in topic
                .partitions
                .into_iter()
                .filter(|p| p.local_records >= 0 && leads(p.partition_index))
            {
                counted.push(LocalWrites {
                    topic: topic.topic_name.clone(),
                    partition: p.partition_index,
                    records: u64::try_from(p.local_records).unwrap_or(0),
                    log_end: p.destination_offset,
                });
            }
        }
    }
    if let Some((name, index)) = leaders.keys().find(|(name, index)| {
        !counted
            .iter()
            .any(|w| &w.topic == name && w.partition == *index)
    }) {
        return Err(format!(
            "the leader of {name}-{index} did not count the records written there since the \
             failover (it is away, or has not seen the stop yet)"
        ));
    }
    Ok(counted)
}

/// DescribeMirrors of `mirror`, asked of broker `node` of this cluster.
async fn describe_on(
    host: &impl Host,
    node: i32,
    mirror: &str,
) -> Result<DescribeMirrorsResponse, String> {
    let address = host
        .node_address(node)
        .ok_or_else(|| format!("broker {node} is not registered"))?;
    let config = ClientConfig::plaintext(&address);
    let request = DescribeMirrorsRequest {
        mirror_names: vec![mirror.to_string()],
        ..Default::default()
    };
    let connection = Connection::connect(&address, &config, None)
        .await
        .map_err(|e| e.to_string())?;
    let (_, answer) = tokio::time::timeout(
        config.request_timeout,
        connection.send("DescribeMirrors", &request, 0),
    )
    .await
    .map_err(|_| format!("broker {node} did not answer DescribeMirrors"))?
    .map_err(|e| e.to_string())?;
    Ok(answer)
}

/// A count of records as an `int64` field.
pub fn records(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
