//! A Mirror's reactions: to a metadata change the system passed on (the metadata manager,
//! docs/design.md §6) and to its partition actors' liveness (supervision).
//!
//! On every metadata change: new configs of the mirror are taken (throttle, source clients,
//! FAILED partitions retried); each running topic the change touched gets
//! [`crate::metadata::react`]'s reactions (a new desired state, a higher leader epoch, or
//! release when deleted or moved to another mirror); and the partitions this broker leads of
//! every topic whose `mirror.name` names this mirror, but which do not run yet, are started:
//! another broker's StartMirrorTopics, or this broker's restart.

use super::fetcher_pool::FetchSettingsChanged;
use super::mirror::{Mirror, MirrorMetadata};
use super::partition_commands::log_rejection;
use crate::host::{Host, MetadataDelta, Source, TopicMeta};
use crate::liveness::Observation;
use crate::metadata::{Reaction, TopicView, mirror_of, react};
use actix::{ActorFutureExt, AsyncContext, Context, Handler, WrapFuture};
use std::collections::BTreeMap;

impl<H: Host> Handler<MirrorMetadata> for Mirror<H> {
    type Result = ();

    fn handle(&mut self, msg: MirrorMetadata, _: &mut Context<Self>) {
        if msg.delta.cluster {
            self.take_changed_configs();
        }
        self.react_to_topics(&msg.delta, &msg.touched);
        self.start_missing(&msg.to_start);
    }
}

impl<H: Host> Mirror<H> {
    /// New configs of the mirror (IncrementalAlterConfigs on it): its fetchers take the new
    /// `mirror.replication.throttled.rate` at once, and new fetch settings (`fetch.*`,
    /// `mirror.num.replica.fetchers`) replace them (the pool's "New fetch settings"); its
    /// source clients take the new connection
    /// and security keys; connections open now are dropped, so the next request connects with
    /// them; its FAILED partitions retry (a wrong password fails them for good, the operator's
    /// fix is this change). Filters are read by each sync round anyway.
    fn take_changed_configs(&mut self) {
        let name = self.name.as_str();
        let Some(configs) = self
            .host
            .mirrors()
            .remove(name)
            .filter(|c| *c != self.configs)
        else {
            return;
        };
        let fetchers = self.host.settings().num_replica_fetchers;
        let settings = super::mirror_configs::runnable(&configs, fetchers);
        self.configs = configs;
        let settings = match settings {
            Ok(settings) => settings,
            Err(e) => {
                tracing::error!(mirror = name, error = %e, "the mirror's new configs");
                return;
            }
        };
        let rate = settings.fetch.throttled_rate;
        if self.throttle.rate() != rate {
            tracing::info!(
                mirror = name,
                ?rate,
                "mirror.replication.throttled.rate changed"
            );
            self.throttle.set_rate(rate, tokio::time::Instant::now());
        }
        self.pool.do_send(FetchSettingsChanged(settings.fetch));
        let client = settings.client;
        tracing::info!(mirror = name, "the mirror's configs changed: reconnecting");
        for reconfigured in [
            self.source.reconfigure(client.clone()),
            self.lanes.reconfigure(client),
        ] {
            if let Err(e) = reconfigured {
                tracing::error!(mirror = name, error = %e, "taking the mirror's new configs");
            }
        }
        if self.halted.is_none() {
            for partition in self
                .topics
                .values_mut()
                .flat_map(|t| t.partitions.values_mut())
            {
                partition.retry();
            }
        }
    }

    /// Reacts to the change of each running topic `delta` touched; `topics` holds their
    /// metadata now (a touched topic missing from it was deleted).
    fn react_to_topics(&mut self, delta: &MetadataDelta, topics: &BTreeMap<String, TopicMeta>) {
        let mirror = self.name.as_str();
        let mut released = Vec::new();
        for (name, mirrored) in &mut self.topics {
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
                        if let Some(told) = mirrored.known.leader_epochs.get_mut(partition as usize)
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
            self.topics.remove(&name);
        }
    }

    /// Starts the partitions this broker leads of the topics in `topics` (and of those whose
    /// start failed before) whose `mirror.name` names this mirror but which do not run here.
    fn start_missing(&mut self, topics: &BTreeMap<String, TopicMeta>) {
        for name in std::mem::take(&mut self.start_failed) {
            if !topics.contains_key(&name)
                && let Some(topic) = self.host.topic(&name)
            {
                self.start_if_missing(&name, &topic);
            }
        }
        for (name, topic) in topics {
            self.start_if_missing(name, topic);
        }
    }

    fn start_if_missing(&mut self, name: &str, topic: &TopicMeta) {
        let ours = topic
            .configs
            .get("mirror.name")
            .and_then(|value| mirror_of(value))
            .is_some_and(|(mirror, _)| mirror == self.name);
        if !ours {
            return;
        }
        let running = self.topics.get(name).map_or(0, |t| t.partitions.len());
        let led = topic
            .partitions
            .iter()
            .filter(|p| self.host.leads(p))
            .count();
        if led == running {
            return;
        }
        if let Err(e) = self.start_partitions(name) {
            tracing::error!(mirror = self.name, topic = name, error = %e, "starting mirror partitions");
            // Tried again on the next metadata change.
            self.start_failed.insert(name.to_string());
        }
    }

    /// Observes every partition actor, then acts on what each supervised partition decides.
    pub(super) fn check_liveness(&mut self, ctx: &mut Context<Self>) {
        if self.checking {
            return;
        }
        self.checking = true;
        let timeout = std::time::Duration::from_millis(self.liveness.check_interval_ms());
        let observations: Vec<_> = self
            .topics
            .iter()
            .flat_map(|(topic, mirrored)| {
                mirrored.partitions.iter().map(move |(index, p)| {
                    let key = (topic.clone(), *index);
                    let observe = p.observe(timeout);
                    async move { (key, observe.await) }
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
        ctx.spawn(gathered.into_actor(self).map(|observed, mirror, _| {
            mirror.checking = false;
            let now_ms = mirror.clock.elapsed().as_millis() as i64;
            for ((topic, index), observation) in observed {
                mirror.supervise(&topic, index, now_ms, observation);
            }
        }));
    }

    fn supervise(&mut self, topic: &str, index: i32, now_ms: i64, observation: Observation) {
        let policy = self.liveness;
        if let Some(partition) = self
            .topics
            .get_mut(topic)
            .and_then(|t| t.partitions.get_mut(&index))
        {
            partition.supervise(&policy, now_ms, observation);
        }
    }
}
