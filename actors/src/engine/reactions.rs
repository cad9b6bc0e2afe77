//! The MirrorSystem's reactions: to metadata changes (the metadata manager, docs/design.md §6) and
//! to its partition actors' liveness (supervision).
//!
//! On every metadata change: a deleted mirror's runtime goes; when a mirror or a topic was
//! deleted, the `__mirror_state` shards this broker leads forget the records of what is gone
//! (every broker sweeps its own shards, so no shard keeps records that would resurface for a
//! topic or mirror created again); each running topic the change touched gets
//! [`crate::metadata::react`]'s reactions (a new desired state, a higher leader epoch,
//! or release when deleted or moved to another mirror); and the partitions this broker leads
//! of every touched topic whose `mirror.name` names a mirror, but which do not run yet, are
//! started (loading the mirror first when needed): another broker's StartMirrorTopics, or this
//! broker's restart. The controller's journal says which topics a change touched (everything
//! at start-up, and every topic when a mirror was created), so a change costs what it touched,
//! not what the broker holds.

use super::partition_commands::log_rejection;
use super::system::MirrorSystem;
use super::system_events::MetadataChanged;
use crate::actor::ForgetAllBut;
use crate::coordinator::LiveTopics;
use crate::host::{Host, MetadataDelta, Source, TopicMeta};
use crate::liveness::Observation;
use crate::metadata::{Reaction, TopicView, mirror_of, react};
use actix::{ActorFutureExt, AsyncContext, Context, Handler, WrapFuture};
use std::collections::BTreeMap;

/// How often a sweep asks a shard that is still loading.
const FORGET_ATTEMPTS: u32 = 30;

impl<H: Host> Handler<MetadataChanged> for MirrorSystem<H> {
    type Result = ();

    fn handle(&mut self, _: MetadataChanged, ctx: &mut Context<Self>) {
        // The host opens the logs of the same change before it answers: they must be open
        // before partitions start.
        let (version, delta, topics) = self.host.metadata_since(self.followed);
        self.followed = Some(version);
        if delta.cluster {
            self.drop_deleted_mirrors();
            self.take_changed_configs();
            self.readdress_remote_shards();
        }
        if delta.cluster || delta.topics.iter().any(|t| !topics.contains_key(t)) {
            self.forget_the_dead();
        }
        self.react_to_topics(&delta, &topics);
        self.start_missing(&delta, topics, ctx);
    }
}

impl<H: Host> MirrorSystem<H> {
    /// A deleted mirror, topic, or a topic out of its mirror: the shards this broker leads
    /// forget their records (every broker does this for its own shards, so the shards of
    /// partitions led elsewhere forget too; a topic created again under the same id, or a
    /// mirror under the same name, starts from nothing).
    fn forget_the_dead(&self) {
        let shards = self.local_shards();
        if shards.is_empty() {
            return;
        }
        for shard in shards {
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

    /// A deleted mirror: its fetchers go with its runtime.
    fn drop_deleted_mirrors(&mut self) {
        let mirrors = self.host.mirrors();
        let deleted: Vec<String> = self
            .mirrors
            .keys()
            .filter(|name| !mirrors.contains_key(*name))
            .cloned()
            .collect();
        for mirror in deleted {
            tracing::info!(mirror, "mirror deleted");
            self.mirrors.remove(&mirror);
        }
    }

    /// A mirror whose configs changed (IncrementalAlterConfigs on the mirror): its fetchers take
    /// the new `mirror.replication.throttled.rate` at once; its source clients take the new
    /// connection and security keys; connections open now are dropped, so the next request
    /// connects with them; its FAILED partitions retry (a wrong password fails them for good,
    /// the operator's fix is this change). Filters are read by each sync round anyway.
    fn take_changed_configs(&mut self) {
        let mirrors = self.host.mirrors();
        let fetchers = self.host.settings().num_replica_fetchers;
        for (name, runtime) in &mut self.mirrors {
            let Some(configs) = mirrors.get(name).filter(|c| **c != runtime.configs) else {
                continue;
            };
            runtime.configs = configs.clone();
            let settings = match super::mirror_configs::validate(configs, fetchers) {
                Ok(settings) => settings,
                Err(e) => {
                    tracing::error!(mirror = name, error = %e, "the mirror's new configs");
                    continue;
                }
            };
            let rate = settings.fetch.throttled_rate;
            if runtime.throttle.rate() != rate {
                tracing::info!(
                    mirror = name,
                    ?rate,
                    "mirror.replication.throttled.rate changed"
                );
                runtime.throttle.set_rate(rate, tokio::time::Instant::now());
            }
            let client = settings.client;
            tracing::info!(mirror = name, "the mirror's configs changed: reconnecting");
            for source in [&*runtime.source, &*runtime.fetch_source] {
                if let Err(e) = source.reconfigure(client.clone()) {
                    tracing::error!(mirror = name, error = %e, "taking the mirror's new configs");
                }
            }
            if runtime.halted.is_none() {
                for partition in runtime
                    .topics
                    .values_mut()
                    .flat_map(|t| t.partitions.values_mut())
                {
                    partition.retry();
                }
            }
        }
    }

    /// Reacts to the change of each running topic `delta` touched; `topics` holds their
    /// metadata now (a touched topic missing from it was deleted).
    fn react_to_topics(&mut self, delta: &MetadataDelta, topics: &BTreeMap<String, TopicMeta>) {
        for (mirror, runtime) in &mut self.mirrors {
            let mut released = Vec::new();
            for (name, mirrored) in &mut runtime.topics {
                if !delta.touches(name) {
                    continue;
                }
                // A topic created again under the name is another topic: this one is gone.
                let topic = topics.get(name).filter(|t| t.topic_id == mirrored.topic_id);
                let epochs: Vec<i32> = topic
                    .map(|t| t.partitions.iter().map(|p| p.leader_epoch).collect())
                    .unwrap_or_default();
                let view = topic.map(|t| TopicView {
                    mirror_name: t.configs.get("mirror.name").map(String::as_str),
                    leader_epochs: &epochs,
                });
                for reaction in react(mirror, &mirrored.known, view.as_ref()) {
                    tracing::info!(mirror, topic = name, ?reaction, "metadata changed");
                    match reaction {
                        Reaction::Desired(desired) => {
                            mirrored.known.desired = desired;
                            for p in mirrored.partitions.values_mut() {
                                log_rejection(p.change_desired(desired));
                            }
                        }
                        Reaction::LeaderEpoch {
                            partition,
                            leader_epoch,
                        } => {
                            if let Some(told) =
                                mirrored.known.leader_epochs.get_mut(partition as usize)
                            {
                                *told = leader_epoch;
                            }
                            if let Some(p) = mirrored.partitions.get_mut(&partition) {
                                log_rejection(p.change_leader_epoch(leader_epoch));
                            }
                        }
                        Reaction::Release => {
                            for p in mirrored.partitions.values_mut() {
                                log_rejection(p.lose_leadership());
                            }
                            released.push(name.clone());
                        }
                    }
                }
            }
            for name in released {
                runtime.topics.remove(&name);
            }
        }
    }

    /// Starts the partitions this broker leads of topics whose `mirror.name` names a mirror
    /// of the controller but which do not run here yet: of the topics `delta` touched (all of
    /// them when a mirror was created) and of those whose start failed before.
    fn start_missing(
        &mut self,
        delta: &MetadataDelta,
        mut topics: BTreeMap<String, TopicMeta>,
        ctx: &mut Context<Self>,
    ) {
        if delta.cluster && !delta.everything {
            topics = self.host.topics();
        }
        for name in std::mem::take(&mut self.start_failed) {
            if let Some(topic) = self.host.topic(&name) {
                topics.insert(name, topic);
            }
        }
        let mirrors = self.host.mirrors();
        for (name, topic) in topics {
            let Some((mirror, _)) = topic
                .configs
                .get("mirror.name")
                .and_then(|value| mirror_of(value))
            else {
                continue;
            };
            if !mirrors.contains_key(mirror) {
                continue;
            }
            let running = self
                .mirrors
                .get(mirror)
                .and_then(|r| r.topics.get(&name))
                .map(|t| t.partitions.len())
                .unwrap_or(0);
            let led = topic
                .partitions
                .iter()
                .filter(|p| self.host.leads(p))
                .count();
            if led == running {
                continue;
            }
            let started = self
                .load_mirror(mirror, ctx)
                .and_then(|()| self.start_partitions(mirror, &name, ctx));
            if let Err(e) = started {
                tracing::error!(mirror, topic = name, error = %e, "starting mirror partitions");
                // Tried again on the next metadata change.
                self.start_failed.insert(name);
            }
        }
    }

    /// The shards this broker leads.
    fn local_shards(
        &self,
    ) -> Vec<actix::Addr<crate::actor::CoordinatorShard<super::state_log::StateLogPorts<H>>>> {
        self.shards
            .iter()
            .filter_map(|s| match s {
                super::shard_route::ShardRoute::Local(addr) => Some(addr.clone()),
                super::shard_route::ShardRoute::Remote(_) => None,
            })
            .collect()
    }

    /// Observes every partition actor, then acts on what each supervised partition decides.
    pub(super) fn check_liveness(&mut self, ctx: &mut Context<Self>) {
        if self.checking {
            return;
        }
        self.checking = true;
        let timeout = std::time::Duration::from_millis(self.liveness.check_interval_ms());
        let observations: Vec<_> = self
            .mirrors
            .iter()
            .flat_map(|(mirror, runtime)| {
                runtime.topics.iter().flat_map(move |(topic, mirrored)| {
                    mirrored.partitions.iter().map(move |(index, p)| {
                        let key = (mirror.clone(), topic.clone(), *index);
                        let observe = p.observe(timeout);
                        async move { (key, observe.await) }
                    })
                })
            })
            .collect();
        // Each question is asked (and its timeout started) when `observe` is called, so
        // awaiting the answers one after the other takes one timeout at most.
        let gathered = async move {
            let mut observed = Vec::with_capacity(observations.len());
            for observation in observations {
                observed.push(observation.await);
            }
            observed
        };
        ctx.spawn(gathered.into_actor(self).map(|observed, system, _| {
            system.checking = false;
            let now_ms = system.clock.elapsed().as_millis() as i64;
            for ((mirror, topic, index), observation) in observed {
                system.supervise(&mirror, &topic, index, now_ms, observation);
            }
        }));
    }

    fn supervise(
        &mut self,
        mirror: &str,
        topic: &str,
        index: i32,
        now_ms: i64,
        observation: Observation,
    ) {
        let policy = self.liveness;
        if let Some(partition) = self
            .mirrors
            .get_mut(mirror)
            .and_then(|r| r.topics.get_mut(topic))
            .and_then(|t| t.partitions.get_mut(&index))
        {
            partition.supervise(&policy, now_ms, observation);
        }
    }
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
