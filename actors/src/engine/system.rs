//! The MirrorSystem actor: the engine assembled on this broker. It owns the `__mirror_state`
//! shards this broker leads (and routes to the other brokers' shards), one fetcher per
//! (mirror, source broker), and one supervised partition actor per mirrored partition this
//! broker leads.
//!
//! Driven by metadata (docs/design.md §2): `mirror.name` on a topic says which mirror it belongs
//! to and what it should do. StartMirrorTopics ([`super::topics`]) validates and sets it (and
//! creates the destination topic with the source topic's id and partition count); every broker
//! of the cluster then starts the partitions it leads ([`super::reactions`]), and later changes
//! (pause, resume, stop, a deleted topic, a leader epoch bump) reach the partitions the same
//! way, whoever made them.
//!
//! Restart: when the system starts it reacts to the metadata as it is: it loads every mirror
//! that has topics here (connecting to its source with the mirror's configs) and starts their
//! partitions with the desired state the suffix says; each actor reloads its state from
//! `__mirror_state` and resumes (a MIRRORING partition fetches from its log end).
//!
//! Metadata sync: every `mirror.metadata.refresh.interval.ms` each mirror's sync runs
//! ([`super::sync`]); a mirror whose source turned out to be another cluster is halted and its
//! partitions here fail. Each second every mirror's fetch figures are published as metrics.
//!
//! Supervision: every [`LivenessPolicy::check_interval_ms`] the system observes each partition
//! actor and lets its [`SupervisedPartition`] restart it (stalled), create it again (dead) or
//! give up on it (FAILED) once its restart budget is spent.

use super::fetcher_pool::FetcherPool;
use super::mirror_configs::{self, MirrorConfigError, MirrorSettings};
use super::partition_ports::EnginePartitionPorts;
use super::repeated::RepeatedWarnings;
use super::shard_route::{RemoteShard, ShardRoute};
use super::state_log::{MIRROR_STATE_TOPIC, StateLogPorts};
use super::stats::MirrorStats;
use super::system_events::{MetadataChanged, SyncMetadata};
use super::throttle::Throttle;
use crate::actor::{CoordinatorShard, SupervisedPartition};
use crate::host::{Host, Source};
use crate::liveness::LivenessPolicy;
use crate::metadata::KnownTopic;
use crate::partition::RetryPolicy;
use crate::policy::MirrorError;
use actix::{
    Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, ResponseActFuture,
    WrapFuture,
};
use kmirror_protocol::client::ClientConfig;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::state::MirrorState;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// A loaded mirror: its source and what runs for it here.
pub(super) struct MirrorRuntime<H: Host> {
    /// The configs it runs with (a change is taken by [`MirrorSystem::take_changed_configs`]).
    pub(super) configs: BTreeMap<String, String>,
    /// The source for control requests: metadata, offsets, LastMirroredEpochs.
    pub(super) source: Arc<H::Source>,
    /// The fetchers' source client (its own connections).
    pub(super) fetch_source: Arc<H::Source>,
    /// The source cluster's id: `mirror.source.cluster.id`, or what the source first answered.
    pub(super) source_cluster_id: Arc<std::sync::OnceLock<String>>,
    /// The mirror's fetchers (their Fetch requests on their own connections: a broker serves
    /// one request of a connection at a time, so a long-polling fetch would hold up control
    /// requests queued behind it).
    pub(super) pool: Addr<FetcherPool<H>>,
    pub(super) topics: BTreeMap<String, MirroredTopic<H>>,
    /// Its fetch figures and lags.
    pub(super) stats: Arc<MirrorStats>,
    /// Its fetchers' pace here (`mirror.replication.throttled.rate`, changed at runtime).
    pub(super) throttle: Arc<Throttle>,
    /// Its warnings of failures that persist (sync steps, the source not answering).
    pub(super) warnings: Arc<RepeatedWarnings>,
    /// Why its metadata sync halted (the source is another cluster); its partitions then fail.
    pub(super) halted: Option<String>,
    /// Since when (ms since the epoch) the source has not answered, and its last error.
    pub(super) unreachable: Option<(i64, String)>,
}

/// A topic's partition actors on this broker (by partition) and what they were last told.
pub(super) struct MirroredTopic<H: Host> {
    pub(super) topic_id: uuid::Uuid,
    pub(super) partitions: BTreeMap<i32, SupervisedPartition<EnginePartitionPorts<H>>>,
    pub(super) known: KnownTopic,
}

/// The engine on one broker.
pub struct MirrorSystem<H: Host> {
    pub(super) host: H,
    /// Every shard of `__mirror_state`, by partition: an actor here or a route to its broker.
    pub(super) shards: Vec<ShardRoute<H>>,
    pub(super) mirrors: HashMap<String, MirrorRuntime<H>>,
    pub(super) retry: RetryPolicy,
    pub(super) liveness: LivenessPolicy,
    /// The supervisor's clock: milliseconds since this instant (actix time, so tests pause it).
    pub(super) clock: tokio::time::Instant,
    /// A liveness check is under way (they never overlap).
    pub(super) checking: bool,
    /// A metadata sync is under way (they never overlap).
    pub(super) syncing: bool,
    /// Topics whose partitions failed to start (their mirror could not be loaded, say): looked
    /// at again on the next metadata change.
    pub(super) start_failed: BTreeSet<String>,
    /// The metadata version the reactions followed last (`None` before the first).
    pub(super) followed: Option<u64>,
    /// One arbiter (thread) per core for the partition actors, each partition on the one its
    /// key hashes to; fetchers and shards stay on the system's own arbiter.
    pub(super) arbiters: Vec<actix::Arbiter>,
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
            clock: tokio::time::Instant::now(),
            checking: false,
            syncing: false,
            start_failed: BTreeSet::new(),
            followed: None,
            arbiters: Vec::new(),
        }
    }

    /// The arbiter of a mirror partition (a stable hash of its key over the arbiters).
    pub(super) fn arbiter_of(
        &self,
        mirror: &str,
        topic_id: &uuid::Uuid,
        partition: i32,
    ) -> Option<actix::ArbiterHandle> {
        if self.arbiters.is_empty() {
            return None;
        }
        let index = kmirror_protocol::sharding::mirror_partition_shard(
            mirror,
            topic_id,
            partition,
            self.arbiters.len() as i32,
        );
        self.arbiters
            .get(index as usize)
            .map(actix::Arbiter::handle)
    }

    /// Starts the shards of `__mirror_state` this broker leads and routes to the others, once
    /// the topic exists. Until then it answers COORDINATOR_NOT_AVAILABLE and creates the topic
    /// (the first time a mirror is used; [`Self::state_topic_created`] says when it is there),
    /// and the metadata change that brings it runs the reactions again.
    pub(super) fn ensure_shards(&mut self, ctx: &mut Context<Self>) -> Result<(), MirrorError> {
        if !self.shards.is_empty() {
            self.readdress_remote_shards();
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
                    return ShardRoute::Local(
                        CoordinatorShard::new(
                            index,
                            count,
                            StateLogPorts::new(self.host.clone(), index),
                        )
                        .start(),
                    );
                }
                let address = self.host.node_address(p.leader).unwrap_or_default();
                ShardRoute::Remote(Arc::new(RemoteShard::new(address)))
            })
            .collect();
        Ok(())
    }

    /// Points each remote shard at its leader's current address (a broker that joined again at
    /// another one), so partitions reading or writing their state follow it.
    pub(super) fn readdress_remote_shards(&self) {
        let Some(topic) = self.host.topic(MIRROR_STATE_TOPIC) else {
            return;
        };
        for (route, p) in self.shards.iter().zip(&topic.partitions) {
            if let ShardRoute::Remote(remote) = route
                && let Some(address) = self.host.node_address(p.leader)
                && address != remote.address()
            {
                tracing::info!(from = %remote.address(), to = %address, "a __mirror_state shard's broker moved");
                remote.readdress(address);
            }
        }
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
        let interval = std::time::Duration::from_millis(self.liveness.check_interval_ms());
        ctx.run_interval(interval, |system, ctx| system.check_liveness(ctx));
        let refresh = self.host.settings().metadata_refresh_interval_ms;
        ctx.run_interval(std::time::Duration::from_millis(refresh), |_, ctx| {
            ctx.notify(SyncMetadata)
        });
        ctx.run_interval(std::time::Duration::from_secs(1), |system, _| {
            let now = system.host.now_ms();
            for runtime in system.mirrors.values() {
                runtime.stats.publish(now);
            }
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
                    system.load_mirror(&msg.0, ctx)
                }),
        )
    }
}

impl<H: Host> MirrorSystem<H> {
    /// [`LoadMirror`]'s work.
    pub(super) fn load_mirror(
        &mut self,
        name: &str,
        ctx: &mut Context<Self>,
    ) -> Result<(), MirrorError> {
        self.ensure_shards(ctx)?;
        if self.mirrors.contains_key(name) {
            return Ok(());
        }
        let name = name.to_string();
        let configs = self.host.mirrors().get(&name).cloned().ok_or_else(|| {
            MirrorError::new(
                ErrorCode::UNKNOWN_CLUSTER_MIRROR,
                format!("no mirror {name}"),
            )
        })?;
        let invalid =
            |e: MirrorConfigError| MirrorError::new(ErrorCode::INVALID_CONFIG, e.to_string());
        let MirrorSettings {
            fetch: settings,
            client: config,
            renamed,
            ..
        } = mirror_configs::validate(&configs, self.host.settings().num_replica_fetchers)
            .map_err(invalid)?;
        for (old, new) in renamed {
            tracing::warn!(mirror = name, "{}", mirror_configs::alias_warning(old, new));
        }
        let source_cluster_id = Arc::new(std::sync::OnceLock::new());
        if let Some(id) = configs
            .get("mirror.source.cluster.id")
            .filter(|id| !id.is_empty())
        {
            let _ = source_cluster_id.set(id.clone());
        }
        let client = |config: ClientConfig| {
            self.host
                .connect_source(config)
                .map(Arc::new)
                .map_err(|e| MirrorError::new(ErrorCode::INVALID_CONFIG, e.to_string()))
        };
        let source = client(config.clone())?;
        let fetch_source = client(config)?;
        let stats = Arc::new(MirrorStats::new(&name));
        let throttle = Arc::new(Throttle::new(settings.throttled_rate));
        self.mirrors.insert(
            name.clone(),
            MirrorRuntime {
                configs,
                fetch_source: fetch_source.clone(),
                pool: FetcherPool::new(
                    self.host.clone(),
                    source.clone(),
                    fetch_source,
                    stats.clone(),
                    settings,
                    throttle.clone(),
                    source_cluster_id.clone(),
                )
                .start(),
                throttle,
                warnings: Arc::default(),
                source,
                source_cluster_id,
                topics: BTreeMap::new(),
                stats,
                halted: None,
                unreachable: None,
            },
        );
        self.probe_source(name, PROBE_INITIAL_BACKOFF, ctx);
        Ok(())
    }
}

/// The first wait between probes of a source that does not answer; it doubles up to
/// [`PROBE_MAX_BACKOFF`].
const PROBE_INITIAL_BACKOFF: std::time::Duration = std::time::Duration::from_secs(1);
const PROBE_MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(30);
/// How long one probe of the source waits for its cluster id (a frozen source must not hold
/// the probe for the client's whole request timeout).
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl<H: Host> MirrorSystem<H> {
    /// Asks the mirror's source for its cluster id in the background; while it does not answer,
    /// asks again after `backoff` (doubling). Stops once it answered or the mirror is gone.
    fn probe_source(
        &mut self,
        mirror: String,
        backoff: std::time::Duration,
        ctx: &mut Context<Self>,
    ) {
        let Some(source) = self.mirrors.get(&mirror).map(|r| r.source.clone()) else {
            return;
        };
        let probe = async move {
            match tokio::time::timeout(PROBE_TIMEOUT, source.cluster_id()).await {
                Ok(Ok(id)) => Ok(id),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {} ms", PROBE_TIMEOUT.as_millis())),
            }
        };
        ctx.spawn(probe.into_actor(self).map(move |answer, system, ctx| {
            let failed = answer.is_err();
            system.source_answered(&mirror, answer);
            let loaded = system
                .mirrors
                .get(&mirror)
                .is_some_and(|r| r.halted.is_none());
            if failed && loaded {
                ctx.run_later(backoff, move |system, ctx| {
                    system.probe_source(mirror, (backoff * 2).min(PROBE_MAX_BACKOFF), ctx)
                });
            }
        }));
    }

    /// Records what the source answered: since when it is unreachable and why, or its cluster
    /// id (learned here when the mirror's configs do not name it; another cluster than the
    /// one named halts the mirror).
    pub(super) fn source_answered(&mut self, mirror: &str, answer: Result<String, String>) {
        let own_cluster_id = self.host.cluster_id();
        let Some(runtime) = self.mirrors.get_mut(mirror) else {
            return;
        };
        match answer {
            Ok(found) => {
                if runtime.unreachable.take().is_some() {
                    tracing::info!(mirror, "the source cluster answers again");
                }
                let expected = runtime.source_cluster_id.get_or_init(|| found.clone());
                let wrong = mirror_configs::check_not_this_cluster(&found, &own_cluster_id)
                    .map_err(|e| e.to_string())
                    .and_then(|()| super::sync_plan::check_source_cluster(expected, &found));
                if let Err(reason) = wrong
                    && runtime.halted.is_none()
                {
                    self.halt(mirror, reason);
                }
            }
            Err(error) => {
                let since = runtime
                    .unreachable
                    .as_ref()
                    .map_or_else(|| self.host.now_ms(), |(since, _)| *since);
                if runtime.unreachable.is_none() {
                    tracing::warn!(mirror, %error, "the source cluster does not answer");
                }
                runtime.unreachable = Some((since, error));
            }
        }
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
        let actors: Vec<_> = self
            .mirrors
            .values()
            .flat_map(|r| r.topics.values())
            .flat_map(|t| t.partitions.values().map(|p| p.addr().clone()))
            .collect();
        let deadline = tokio::time::Instant::now() + msg.timeout;
        Box::pin(
            async move {
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

/// A uniform draw in `[0, 1)` for retry jitter.
pub(super) fn rand_unit() -> f64 {
    rand::random::<f64>()
}
