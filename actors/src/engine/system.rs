//! The MirrorSystem actor: the engine assembled on this broker. It owns the `__mirror_state`
//! shards this broker leads (and routes to the other brokers' shards) and one [`Mirror`] actor
//! per mirror loaded here, which owns that mirror's fetchers, topics, partition actors, sync
//! and figures. The system itself decides nothing about a mirror: it routes.
//!
//! Driven by metadata (docs/design.md §2): `mirror.name` on a topic says which mirror it belongs
//! to and what it should do. StartMirrorTopics ([`super::topics`]) validates and sets it (and
//! creates the destination topic with the source topic's id and partition count); every broker
//! of the cluster then starts the partitions it leads ([`super::reactions`] hands each change
//! to every loaded mirror, loading the mirrors the change names), and later changes (pause,
//! resume, stop, a deleted topic, a leader epoch bump) reach the partitions the same way,
//! whoever made them.
//!
//! Restart: when the system starts it reacts to the metadata as it is: it loads every mirror
//! that has topics here (connecting to its source with the mirror's configs), whose partitions
//! start with the desired state the suffix says; each actor reloads its state from
//! `__mirror_state` and resumes (a MIRRORING partition fetches from its log end).
//!
//! Every `mirror.metadata.refresh.interval.ms` the system loads the mirrors this broker
//! coordinates that are not loaded yet (their sync runs here even without a partition here).

use super::lme_lookup::SOURCE_CLUSTER_ID;
use super::mirror::{Mirror, MirrorMetadata, MirrorShared, PartitionActors};
use super::shard_route::{RemoteShard, Route, ShardRoute};
use super::state_log::{MIRROR_STATE_TOPIC, StateLogPorts};
use super::system_events::{MetadataChanged, SyncMetadata};
use crate::actor::CoordinatorShard;
use crate::host::{Host, MetadataDelta, TopicMeta};
use crate::liveness::LivenessPolicy;
use crate::metadata::mirror_topics;
use crate::partition::RetryPolicy;
use crate::policy::MirrorError;
use actix::{
    Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, ResponseActFuture,
    WrapFuture,
};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::state::MirrorState;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// The engine on one broker.
pub struct MirrorSystem<H: Host> {
    pub(super) host: H,
    /// Every shard of `__mirror_state`, by partition: an actor here or a route to its broker.
    pub(super) shards: Vec<ShardRoute<H>>,
    /// The mirrors loaded here, by name.
    pub(super) mirrors: HashMap<String, LoadedMirror<H>>,
    pub(super) retry: RetryPolicy,
    pub(super) liveness: LivenessPolicy,
    /// Topics whose mirror could not be loaded: looked at again on the next metadata change.
    pub(super) start_failed: BTreeSet<String>,
    /// The metadata version the reactions followed last (`None` before the first).
    pub(super) followed: Option<u64>,
    /// One arbiter (thread) per core for the partition actors, each partition on the one its
    /// key hashes to; fetchers and shards stay on the system's own arbiter.
    pub(super) arbiters: Vec<actix::Arbiter>,
}

/// A mirror loaded here.
pub(super) struct LoadedMirror<H: Host> {
    pub(super) addr: Addr<Mirror<H>>,
    /// Its `mirror.source.cluster.id` when it loaded. The id cannot be altered, so another one
    /// in the controller is another mirror created under the name (see
    /// [`super::reactions`]).
    pub(super) source_cluster_id: Option<String>,
}

impl<H: Host> std::fmt::Debug for MirrorSystem<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorSystem")
            .field("mirrors", &self.mirrors.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<H: Host> MirrorSystem<H> {
    /// The engine of `host` (its actors start with the system); partitions are supervised
    /// as the host's [`crate::host::EngineSettings::liveness`] says.
    pub fn new(host: H, retry: RetryPolicy) -> Self {
        let liveness = host.settings().liveness;
        MirrorSystem {
            host,
            shards: Vec::new(),
            mirrors: HashMap::new(),
            retry,
            liveness,
            start_failed: BTreeSet::new(),
            followed: None,
            arbiters: Vec::new(),
        }
    }

    /// Starts the shards of `__mirror_state` this broker leads and routes to the others, once
    /// the topic exists. Until then it answers COORDINATOR_NOT_AVAILABLE and creates the topic
    /// (the first time a mirror is used; [`Self::state_topic_created`] says when it is there),
    /// and the metadata change that brings it runs the reactions again.
    pub(super) fn ensure_shards(&mut self, ctx: &mut Context<Self>) -> Result<(), MirrorError> {
        if !self.shards.is_empty() {
            self.follow_shard_leaders();
            return Ok(());
        }
        let Some(topic) = self.host.topic(MIRROR_STATE_TOPIC) else {
            let created = self.state_topic_created();
            ctx.spawn(created.into_actor(self).map(|created, _, ctx| {
                if let Err(e) = created {
                    tracing::error!(error = %e, "creating __mirror_state");
                }
                ctx.notify(MetadataChanged);
            }));
            return Err(MirrorError::new(
                ErrorCode::COORDINATOR_NOT_AVAILABLE,
                "__mirror_state is being created",
            ));
        };
        let count = topic.partitions.len() as i32;
        self.shards = topic
            .partitions
            .iter()
            .enumerate()
            .map(|(index, p)| {
                let index = index as i32;
                if self.host.leads(p) {
                    return ShardRoute::new(self.local_shard(index, count));
                }
                let address = self.host.node_address(p.leader).unwrap_or_default();
                ShardRoute::new(Route::Remote(Arc::new(RemoteShard::new(address))))
            })
            .collect();
        Ok(())
    }

    /// Routes each shard to its partition's leader as the metadata now shows it: a shard this
    /// broker came to lead starts here (loading by replaying its replicated partition), one it
    /// no longer leads is dropped (its actor stops; a write it would still try is refused by
    /// the log, which no longer leads) and reached at its new leader, and a remote shard follows
    /// its leader's address (a broker that joined again at another one).
    pub(super) fn follow_shard_leaders(&mut self) {
        let Some(topic) = self.host.topic(MIRROR_STATE_TOPIC) else {
            return;
        };
        let count = self.shards.len() as i32;
        for (index, (route, p)) in self.shards.iter().zip(&topic.partitions).enumerate() {
            let leads = self.host.leads(p);
            match route.current() {
                Route::Local(_, epoch) if leads && epoch == p.leader_epoch => {}
                // Led here at another epoch (it may have moved away and back meanwhile): the
                // shard loads again, with what the others wrote.
                Route::Local(..) | Route::Remote(_) if leads => {
                    tracing::info!(
                        shard = index,
                        leader_epoch = p.leader_epoch,
                        "this broker now leads a __mirror_state shard; loading it"
                    );
                    route.set(self.local_shard(index as i32, count));
                }
                Route::Local(..) => {
                    let address = self.host.node_address(p.leader).unwrap_or_default();
                    tracing::info!(shard = index, to = %address, "a __mirror_state shard moved away");
                    route.set(Route::Remote(Arc::new(RemoteShard::new(address))));
                }
                Route::Remote(remote) => {
                    if let Some(address) = self.host.node_address(p.leader)
                        && address != remote.address()
                    {
                        tracing::info!(from = %remote.address(), to = %address, "a __mirror_state shard's broker moved");
                        remote.readdress(address);
                    }
                }
            }
        }
    }

    /// The actor of shard `index` of `count`, started here: it loads by replaying its partition.
    fn local_shard(&self, index: i32, count: i32) -> Route<H> {
        let ports = StateLogPorts::new(self.host.clone(), index);
        let epoch = ports.leader_epoch().unwrap_or(-1);
        Route::Local(CoordinatorShard::new(index, count, ports).start(), epoch)
    }

    /// Runs `then` once `__mirror_state` exists (creating it first when needed), so a request
    /// that needs the shards is not refused while the first mirror creates it.
    pub(super) fn after_state_topic<T: 'static>(
        &mut self,
        then: impl FnOnce(
            &mut Self,
            &mut Context<Self>,
        ) -> ResponseActFuture<Self, Result<T, MirrorError>>
        + 'static,
    ) -> ResponseActFuture<Self, Result<T, MirrorError>> {
        Box::pin(
            self.state_topic_created()
                .into_actor(self)
                .then(move |created, system, ctx| match created {
                    Ok(()) => then(system, ctx),
                    Err(e) => Box::pin(async move { Err(e) }.into_actor(system)),
                }),
        )
    }

    /// Creates `__mirror_state` unless it exists; resolves once it does.
    pub(super) fn state_topic_created(
        &self,
    ) -> impl std::future::Future<Output = Result<(), MirrorError>> + 'static {
        let host = self.host.clone();
        async move {
            if host.topic(MIRROR_STATE_TOPIC).is_some() {
                return Ok(());
            }
            let partitions = host.settings().state_partitions;
            match host
                .create_topic(MIRROR_STATE_TOPIC, partitions, BTreeMap::new(), None)
                .await
            {
                Ok(()) => Ok(()),
                Err(e) if e.code == ErrorCode::TOPIC_ALREADY_EXISTS => Ok(()),
                Err(e) => Err(MirrorError::new(e.code, e.message)),
            }
        }
    }
}

impl<H: Host> Actor for MirrorSystem<H> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        self.arbiters = (0..cores).map(|_| actix::Arbiter::new()).collect();
        let refresh = self.host.settings().metadata_refresh_interval_ms;
        ctx.run_interval(std::time::Duration::from_millis(refresh), |_, ctx| {
            ctx.notify(SyncMetadata)
        });
        // React to metadata changes, whoever made them (coalesced: one reaction per wake-up),
        // and to the metadata as it is now (what a restart resumes).
        let mut changes = self.host.metadata_changes();
        let me = ctx.address();
        actix::spawn(async move {
            while changes.changed().await.is_ok() {
                changes.mark_unchanged();
                if me.send(MetadataChanged).await.is_err() {
                    return;
                }
            }
        });
        ctx.notify(MetadataChanged);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        for arbiter in &self.arbiters {
            arbiter.stop();
        }
    }
}

/// Loads a mirror of the controller: its runtime (fetchers, stats) from its configs alone, so a
/// mirror whose source is down loads, and its partitions start from `__mirror_state` (a STOPPED
/// topic becomes writable, a stop proceeds). The source is probed in the background
/// (`probe_source`), with backoff until it answers. Loading a loaded mirror changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Result<(), MirrorError>")]
pub struct LoadMirror(pub String);

impl<H: Host> Handler<LoadMirror> for MirrorSystem<H> {
    type Result = ResponseActFuture<Self, Result<(), MirrorError>>;

    fn handle(&mut self, msg: LoadMirror, _: &mut Context<Self>) -> Self::Result {
        Box::pin(
            self.state_topic_created()
                .into_actor(self)
                .map(move |created, system, ctx| {
                    created?;
                    system.load_mirror(&msg.0, ctx).map(|_| ())
                }),
        )
    }
}

impl<H: Host> MirrorSystem<H> {
    /// [`LoadMirror`]'s work: the mirror's actor, started unless it runs.
    pub(super) fn load_mirror(
        &mut self,
        name: &str,
        ctx: &mut Context<Self>,
    ) -> Result<Addr<Mirror<H>>, MirrorError> {
        self.ensure_shards(ctx)?;
        if let Some(loaded) = self.mirrors.get(name).filter(|m| m.addr.connected()) {
            return Ok(loaded.addr.clone());
        }
        let shared = MirrorShared {
            host: self.host.clone(),
            shards: self.shards.clone(),
            retry: self.retry,
            liveness: self.liveness,
            arbiters: self.arbiters.iter().map(actix::Arbiter::handle).collect(),
        };
        let mirror = Mirror::load(name, shared)?;
        let source_cluster_id = mirror
            .configs
            .get(SOURCE_CLUSTER_ID)
            .filter(|id| !id.is_empty())
            .cloned();
        let mirror = mirror.start();
        self.mirrors.insert(
            name.to_string(),
            LoadedMirror {
                addr: mirror.clone(),
                source_cluster_id,
            },
        );
        // Its topics start now, whatever loaded it (a request, the sync, a metadata change):
        // a mirror that could not load before has topics waiting for it.
        let mut topics = self.host.topics();
        let named: BTreeMap<String, TopicMeta> = mirror_topics(&topics, name)
            .into_iter()
            .filter_map(|topic| topics.remove_entry(&topic))
            .collect();
        mirror.do_send(MirrorMetadata {
            delta: Arc::new(MetadataDelta::default()),
            touched: Arc::new(BTreeMap::new()),
            to_start: Arc::new(named),
        });
        Ok(mirror)
    }
}

/// Resolves once every mirror partition this broker leads has read its state from
/// `__mirror_state` and entered it (so a STOPPED partition is writable again), or after
/// `timeout`. A broker asks before it listens: produce to a topic stopped before a restart is
/// then accepted from the first request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct Settle {
    /// The longest wait (a shard led by a broker that is down would hold it forever).
    pub timeout: std::time::Duration,
}

impl<H: Host> Handler<Settle> for MirrorSystem<H> {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, msg: Settle, ctx: &mut Context<Self>) -> Self::Result {
        if self.followed.is_none() {
            <Self as Handler<MetadataChanged>>::handle(self, MetadataChanged, ctx);
        }
        let mirrors: Vec<_> = self.mirrors.values().map(|m| m.addr.clone()).collect();
        let deadline = tokio::time::Instant::now() + msg.timeout;
        Box::pin(
            async move {
                let mut actors = Vec::new();
                for mirror in mirrors {
                    actors.extend(mirror.send(PartitionActors).await.unwrap_or_default());
                }
                for actor in actors {
                    while tokio::time::Instant::now() < deadline {
                        match actor.send(crate::actor::DescribePartition).await {
                            Ok(s) if (s.busy || s.loading) && s.state == MirrorState::Unknown => {
                                tokio::time::sleep(std::time::Duration::from_millis(5)).await
                            }
                            Ok(_) | Err(_) => break,
                        }
                    }
                }
            }
            .into_actor(self),
        )
    }
}
