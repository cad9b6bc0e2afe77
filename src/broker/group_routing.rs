//! A group's offsets read and written wherever its coordinator is (docs/cluster.md), for the
//! mirror's group offset sync: on this broker directly, on another through ListGroups,
//! OffsetFetch and OffsetCommit (as an admin: no member, no generation), as Kafka's admin
//! clients do.
//!
//! Contract: a group with members is never written (its consumers' commits are its own: the
//! listing says so, and a group that gained members since is refused the admin commit by its
//! coordinator); a coordinator that cannot be reached is an error the sync reports and retries
//! next round.

use super::Broker;
use super::coordinators::CoordinatorKind;
use crate::groups::Committed;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    GroupId, ListGroupsRequest, OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::errors::ErrorCode;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long another broker's group listing is used. A group that gains members meanwhile is
/// still safe: the admin commit is refused by its coordinator while it has members.
const LISTING_KEPT: Duration = Duration::from_secs(1);

/// Other brokers' group listings (group id to state), by node, with when they were asked.
pub(super) type Listings = Mutex<HashMap<i32, (Instant, Arc<BTreeMap<String, String>>)>>;

impl Broker {
    /// The committed offsets of `group` if it has no members (`None` if it has).
    pub async fn idle_group_offsets(
        &self,
        group: &str,
    ) -> Result<Option<BTreeMap<(String, i32), Committed>>, String> {
        let node = self.group_coordinator(group).await?;
        if node == self.config.node_id {
            let active = self.groups.state_of(group).is_some_and(|s| s != "Empty");
            return Ok((!active).then(|| self.groups.committed(group)));
        }
        let active = self
            .listing_of(node)
            .await?
            .get(group)
            .is_some_and(|state| state != "Empty");
        if active {
            return Ok(None);
        }
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_topics(None);
        let fetched = self.call_broker(node, "OffsetFetch", &request, 7).await?;
        if fetched.error_code != 0 {
            return Err(format!(
                "OffsetFetch answered {}",
                ErrorCode(fetched.error_code)
            ));
        }
        let offsets = fetched
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.error_code == 0 && p.committed_offset >= 0)
                    .map(move |p| {
                        let committed = Committed {
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            metadata: p.metadata.as_ref().map(|m| m.to_string()),
                        };
                        ((t.name.0.to_string(), p.partition_index), committed)
                    })
            })
            .collect();
        Ok(Some(offsets))
    }

    /// Each group's state on broker `node` (ListGroups), asked at most once per
    /// [`LISTING_KEPT`]: one round of the sync asks one listing per broker, not one per group.
    async fn listing_of(&self, node: i32) -> Result<Arc<BTreeMap<String, String>>, String> {
        let kept = self
            .group_listings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&node)
            .cloned();
        if let Some((at, listing)) = kept
            && at.elapsed() < LISTING_KEPT
        {
            return Ok(listing);
        }
        let listed = self
            .call_broker(node, "ListGroups", &ListGroupsRequest::default(), 4)
            .await?;
        if listed.error_code != 0 {
            return Err(format!(
                "ListGroups answered {}",
                ErrorCode(listed.error_code)
            ));
        }
        let listing: Arc<BTreeMap<String, String>> = Arc::new(
            listed
                .groups
                .iter()
                .map(|g| (g.group_id.0.to_string(), g.group_state.to_string()))
                .collect(),
        );
        self.group_listings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node, (Instant::now(), listing.clone()));
        Ok(listing)
    }

    /// Commits offsets of `group` as an admin (refused while the group has members).
    pub async fn commit_group_offsets(
        &self,
        group: &str,
        offsets: Vec<(String, i32, Committed)>,
    ) -> Result<(), String> {
        let node = self.group_coordinator(group).await?;
        let codes = if node == self.config.node_id {
            let (mut codes, staged) = self.groups.commit_staged(group, -1, "", offsets);
            if codes.contains(&0) {
                match self.group_writes_replicated(group).await {
                    Ok(()) => staged.into_iter().for_each(|s| self.groups.apply_staged(s)),
                    Err(code) => codes
                        .iter_mut()
                        .filter(|c| **c == 0)
                        .for_each(|c| *c = code),
                }
            }
            codes
        } else {
            let mut topics: BTreeMap<String, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
            for (topic, partition, c) in offsets {
                topics.entry(topic).or_default().push(
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(partition)
                        .with_committed_offset(c.offset)
                        .with_committed_leader_epoch(c.leader_epoch)
                        .with_committed_metadata(c.metadata.map(StrBytes::from_string)),
                );
            }
            let request = OffsetCommitRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
                .with_generation_id_or_member_epoch(-1)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(name, partitions)| {
                            OffsetCommitRequestTopic::default()
                                .with_name(TopicName(StrBytes::from_string(name)))
                                .with_partitions(partitions)
                        })
                        .collect(),
                );
            let answer = self.call_broker(node, "OffsetCommit", &request, 8).await?;
            answer
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                .collect()
        };
        match codes.into_iter().find(|c| *c != 0) {
            None => Ok(()),
            Some(code) => Err(format!("answered {}", ErrorCode(code))),
        }
    }

    /// The broker coordinating `group`, or why none is known.
    async fn group_coordinator(&self, group: &str) -> Result<i32, String> {
        self.find_coordinator(CoordinatorKind::Group, group)
            .await
            .map_err(|code| format!("group {group} has no coordinator: {}", ErrorCode(code)))
    }
}
