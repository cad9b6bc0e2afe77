//! The MirrorSystem's reactions to metadata changes (the metadata manager, docs/design.md §6),
//! as routing: each change goes to every loaded [`Mirror`], which reacts for its own topics.
//!
//! On every metadata change: the actor of a deleted mirror retires, and so does that of a mirror
//! deleted and created again under its name for another source cluster (the two changes read
//! as one: its clients and source checks are the old mirror's); when a mirror or a topic was
//! deleted, the `__mirror_state` shards this broker leads forget the records of what is gone
//! (every broker sweeps its own shards, so no shard keeps records that would resurface for a
//! topic or mirror created again); the mirrors named by a topic this broker leads a partition
//! of are loaded (another broker's StartMirrorTopics, or this broker's restart); and every
//! loaded mirror gets the change ([`MirrorMetadata`]). The controller's journal says which
//! topics a change touched (everything at start-up, and every topic when a mirror was
//! created), so a change costs what it touched, not what the broker holds.
//!
//! Every `mirror.metadata.refresh.interval.ms` ([`SyncMetadata`]) the mirrors this broker
//! coordinates are loaded, so their sync runs even where none of their partitions is led.

use super::lme_lookup::SOURCE_CLUSTER_ID;
use super::mirror::{MirrorMetadata, Retire};
use super::shard_route::{ShardRoute, coordinates};
use super::state_log::MIRROR_STATE_TOPIC;
use super::system::MirrorSystem;
use super::system_events::{MetadataChanged, SyncMetadata};
use crate::actor::ForgetAllBut;
use crate::coordinator::LiveTopics;
use crate::host::{Host, TopicMeta};
use crate::metadata::{mirror_of, mirror_topics};
use actix::{Context, Handler};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How often a sweep asks a shard that is still loading.
const FORGET_ATTEMPTS: u32 = 30;

impl<H: Host> Handler<MetadataChanged> for MirrorSystem<H> {
    type Result = ();

    fn handle(&mut self, _: MetadataChanged, ctx: &mut Context<Self>) {
        // The host opens the logs of the same change before it answers: they must be open
        // before partitions start.
        let (version, delta, touched) = self.host.metadata_since(self.followed);
        self.followed = Some(version);
        if delta.cluster {
            self.retire_gone_mirrors();
        }
        // A shard's leader moved (or its broker's address): route it again.
        if delta.cluster || delta.everything || delta.topics.contains(MIRROR_STATE_TOPIC) {
            self.follow_shard_leaders();
        }
        if delta.cluster || delta.topics.iter().any(|t| !touched.contains_key(t)) {
            self.forget_the_dead();
        }
        // A new mirror may name topics the change did not touch; a topic whose mirror could
        // not be loaded is looked at again.
        let mut to_start = if delta.cluster && !delta.everything {
            self.host.topics()
        } else {
            touched.clone()
        };
        for name in std::mem::take(&mut self.start_failed) {
            if let Some(topic) = self.host.topic(&name) {
                to_start.insert(name, topic);
            }
        }
        self.load_named_mirrors(&to_start, ctx);
        let change = MirrorMetadata {
            delta: Arc::new(delta),
            touched: Arc::new(touched),
            to_start: Arc::new(to_start),
        };
        for mirror in self.mirrors.values() {
            mirror.addr.do_send(change.clone());
        }
    }
}

impl<H: Host> MirrorSystem<H> {
    /// Loads each mirror of the controller that a topic of `topics` names and whose partitions
    /// this broker leads some of.
    fn load_named_mirrors(
        &mut self,
        topics: &BTreeMap<String, TopicMeta>,
        ctx: &mut Context<Self>,
    ) {
        let mirrors = self.host.mirrors();
        for (name, topic) in topics {
            let Some((mirror, _)) = topic
                .configs
                .get("mirror.name")
                .and_then(|value| mirror_of(value))
            else {
                continue;
            };
            let loaded = self.mirrors.contains_key(mirror);
            if loaded || !mirrors.contains_key(mirror) {
                continue;
            }
            if !topic.partitions.iter().any(|p| self.host.leads(p)) {
                continue;
            }
            if let Err(e) = self.load_mirror(mirror, ctx) {
                tracing::error!(mirror, topic = name, error = %e, "loading the mirror of a topic");
                // Tried again on the next metadata change.
                self.start_failed.insert(name.clone());
            }
        }
    }

    /// A deleted mirror, or one created again for another source cluster: its actor retires,
    /// and its fetchers and partitions go with it ([`gone_mirrors`]).
    fn retire_gone_mirrors(&mut self) {
        let loaded: BTreeMap<&str, Option<&str>> = self
            .mirrors
            .iter()
            .map(|(name, m)| (name.as_str(), m.source_cluster_id.as_deref()))
            .collect();
        for name in gone_mirrors(&loaded, &self.host.mirrors()) {
            if let Some(mirror) = self.mirrors.remove(&name) {
                mirror.addr.do_send(Retire);
            }
        }
    }

    /// A deleted mirror, topic, or a topic out of its mirror: the shards this broker leads
    /// forget their records (every broker does this for its own shards, so the shards of
    /// partitions led elsewhere forget too; a topic created again under the same id, or a
    /// mirror under the same name, starts from nothing).
    fn forget_the_dead(&self) {
        for shard in self.local_shards() {
            let host = self.host.clone();
            actix::spawn(async move {
                // A shard still loading refuses writes: asked again a little later, with the
                // topics live then (a topic started meanwhile must not lose its record).
                for _ in 0..FORGET_ATTEMPTS {
                    match shard.send(ForgetAllBut(live_topics(&host))).await {
                        Ok(Ok(())) | Err(_) => return,
                        Ok(Err(cause)) => {
                            tracing::warn!(error = %cause.message, "forgetting mirror states");
                            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        }
                    }
                }
            });
        }
    }

    /// The shards this broker leads.
    fn local_shards(
        &self,
    ) -> Vec<actix::Addr<crate::actor::CoordinatorShard<super::state_log::StateLogPorts<H>>>> {
        self.shards.iter().filter_map(ShardRoute::local).collect()
    }
}

impl<H: Host> Handler<SyncMetadata> for MirrorSystem<H> {
    type Result = ();

    /// The coordinator syncs a mirror with topics even where none of them is led, and one
    /// that starts topics by itself before it has any: such a mirror is loaded here (which
    /// needs nothing of the source), and syncs on its own clock.
    fn handle(&mut self, _: SyncMetadata, ctx: &mut Context<Self>) {
        let unloaded: Vec<_> = self
            .host
            .mirrors()
            .into_iter()
            .filter(|(name, _)| !self.mirrors.contains_key(name))
            .collect();
        if unloaded.is_empty() {
            return;
        }
        // The shards are loaded with the first mirror loaded here; a coordinator that runs
        // none of the mirror's partitions loads them now.
        if let Err(e) = self.ensure_shards(ctx) {
            tracing::warn!(error = %e, "loading __mirror_state to sync the mirrors");
            return;
        }
        let topics = self.host.topics();
        for (mirror, configs) in unloaded {
            let coordinator = coordinates(&self.shards, &mirror);
            let wanted = super::mirror_configs::auto_mirrors(&configs)
                || !mirror_topics(&topics, &mirror).is_empty();
            if coordinator
                && wanted
                && let Err(e) = self.load_mirror(&mirror, ctx)
            {
                tracing::warn!(mirror, error = %e, "loading a mirror to sync it");
            }
        }
    }
}

/// The loaded mirrors (name, `mirror.source.cluster.id` when loaded) that must retire, given
/// the controller's mirrors and their configs: those it no longer has, and those it has with
/// another source cluster id (deleted and created again for another cluster; the id cannot be
/// altered). An id unknown on either side (a mirror created before ids were stored) tells
/// nothing.
fn gone_mirrors(
    loaded: &BTreeMap<&str, Option<&str>>,
    controller: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<String> {
    loaded
        .iter()
        .filter(|(name, loaded_id)| match controller.get(**name) {
            None => true,
            Some(configs) => {
                let id = configs
                    .get(SOURCE_CLUSTER_ID)
                    .map(String::as_str)
                    .filter(|id| !id.is_empty());
                matches!((loaded_id, id), (Some(was), Some(is)) if was != &is)
            }
        })
        .map(|(name, _)| name.to_string())
        .collect()
}

/// Every mirror of `host` with the topics in it now (by topic id), as the shards keep them.
fn live_topics<H: Host>(host: &H) -> LiveTopics {
    let mut live: LiveTopics = host
        .mirrors()
        .into_keys()
        .map(|m| (m, BTreeMap::new()))
        .collect();
    for (name, topic) in host.topics() {
        let Some((mirror, _)) = topic.configs.get("mirror.name").and_then(|v| mirror_of(v)) else {
            continue;
        };
        if let Some(topics) = live.get_mut(mirror) {
            topics.insert(topic.topic_id, name);
        }
    }
    live
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mirror_retires_when_deleted_or_created_again_for_another_cluster() {
        let with_id = |id: &str| BTreeMap::from([(SOURCE_CLUSTER_ID.to_string(), id.to_string())]);
        let controller = BTreeMap::from([
            ("same".to_string(), with_id("east")),
            ("recreated".to_string(), with_id("west")),
            ("unknown-then".to_string(), with_id("east")),
            ("unknown-now".to_string(), with_id("")),
        ]);
        let loaded = BTreeMap::from([
            ("same", Some("east")),
            ("recreated", Some("east")),
            ("unknown-then", None),
            ("unknown-now", Some("east")),
            ("deleted", Some("east")),
        ]);
        assert_eq!(
            gone_mirrors(&loaded, &controller),
            vec!["deleted".to_string(), "recreated".to_string()]
        );
    }
}
