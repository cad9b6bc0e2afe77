//! The Mirror actor: one per mirror loaded on this broker (docs/design.md §2). It owns
//! everything of that mirror here: its source clients, its fetcher pool, its topics and their
//! supervised partition actors, its fetch figures, its throttle, its metadata sync and what
//! the source last answered. The [`super::system::MirrorSystem`] only routes to it.
//!
//! Lifecycle: the system loads a mirror ([`Mirror::load`], from its configs alone, so a mirror
//! whose source is down loads) the first time a request, a topic or the sync needs it, and
//! retires it ([`Retire`]) when the mirror is deleted; its fetchers and partition actors go
//! with it. While it runs, on its own clock: every second it publishes its fetch figures;
//! every [`LivenessPolicy::check_interval_ms`] it observes its partition actors and lets each
//! [`crate::actor::SupervisedPartition`] restart, create again or give up on its actor; every
//! `mirror.metadata.refresh.interval.ms` it syncs ([`super::sync`]); and until the source
//! answers it probes the source with backoff.
//!
//! Contracts: the system sends it every metadata change ([`MirrorMetadata`], in order), and
//! the requests about its topics; it never writes another mirror's state. A mirror whose source
//! turned out to be another cluster is halted: no more sync, and its MIRRORING partitions fail.

use super::coalescing_source::CoalescingSource;
use super::fetch_lanes::FetchLanes;
use super::fetcher_pool::{FetcherPool, MirrorStopped};
use super::mirror_configs::{self, MirrorConfigError, MirrorSettings};
use super::partition_ports::EnginePartitionPorts;
use super::repeated::RepeatedWarnings;
use super::shard_route::ShardRoute;
use super::stats::MirrorStats;
use super::throttle::Throttle;
use crate::actor::{DescribePartition, SupervisedPartition};
use crate::host::{Host, MetadataDelta, Source, TopicMeta};
use crate::liveness::LivenessPolicy;
use crate::metadata::KnownTopic;
use crate::partition::RetryPolicy;
use crate::policy::MirrorError;
use actix::{Actor, ActorContext, ActorFutureExt, AsyncContext, Context, Handler, Message};
use actix::{Addr, Recipient, WrapFuture};
use kmirror_protocol::client::ClientConfig;
use kmirror_protocol::errors::ErrorCode;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What every mirror of this broker shares, handed over by the system when it loads one.
pub struct MirrorShared<H: Host> {
    /// The broker.
    pub host: H,
    /// Every shard of `__mirror_state`, by partition: an actor here or a route to its broker.
    pub shards: Vec<ShardRoute<H>>,
    /// How partitions retry.
    pub retry: RetryPolicy,
    /// How partition actors are supervised.
    pub liveness: LivenessPolicy,
    /// The arbiters partition actors run on (empty: the mirror's own).
    pub arbiters: Vec<actix::ArbiterHandle>,
}

impl<H: Host> std::fmt::Debug for MirrorShared<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorShared")
            .field("shards", &self.shards.len())
            .field("arbiters", &self.arbiters.len())
            .finish_non_exhaustive()
    }
}

/// A topic's partition actors on this broker (by partition) and what they were last told.
pub(super) struct MirroredTopic<H: Host> {
    pub(super) topic_id: uuid::Uuid,
    pub(super) partitions: BTreeMap<i32, SupervisedPartition<EnginePartitionPorts<H>>>,
    pub(super) known: KnownTopic,
}

/// One mirror on this broker.
pub struct Mirror<H: Host> {
    pub(super) name: String,
    pub(super) host: H,
    pub(super) shards: Vec<ShardRoute<H>>,
    pub(super) retry: RetryPolicy,
    pub(super) liveness: LivenessPolicy,
    pub(super) arbiters: Vec<actix::ArbiterHandle>,
    /// The configs it runs with (a change is taken on the next metadata change).
    pub(super) configs: BTreeMap<String, String>,
    /// The source for control requests: metadata, offsets, LastMirroredEpochs.
    pub(super) source: Arc<H::Source>,
    /// `source` for its partitions' lookups, merged across partitions asking at once.
    pub(super) lookups: Arc<CoalescingSource<H::Source>>,
    /// The fetchers' source client (its own connections: a broker serves one request of a
    /// connection at a time, so a long-polling fetch would hold up control requests).
    pub(super) lanes: Arc<FetchLanes<H>>,
    /// The source cluster's id: `mirror.source.cluster.id`, or what the source first answered.
    pub(super) source_cluster_id: Arc<std::sync::OnceLock<String>>,
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
    /// Topics whose partitions failed to start: tried again on the next metadata change.
    pub(super) start_failed: BTreeSet<String>,
    /// The supervisor's clock: milliseconds since this instant (actix time, so tests pause it).
    pub(super) clock: tokio::time::Instant,
    /// A liveness check is under way (they never overlap).
    pub(super) checking: bool,
    /// A metadata sync is under way (they never overlap).
    pub(super) syncing: bool,
}

impl<H: Host> std::fmt::Debug for Mirror<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror")
            .field("name", &self.name)
            .field("topics", &self.topics.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<H: Host> Mirror<H> {
    /// The mirror `name` of the controller, from its configs alone (the source is not asked).
    pub fn load(name: &str, shared: MirrorShared<H>) -> Result<Self, MirrorError> {
        let MirrorShared {
            host,
            shards,
            retry,
            liveness,
            arbiters,
        } = shared;
        let configs = host.mirrors().get(name).cloned().ok_or_else(|| {
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
        } = mirror_configs::runnable(&configs, host.settings().num_replica_fetchers)
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
            host.connect_source(config)
                .map(Arc::new)
                .map_err(|e| MirrorError::new(ErrorCode::INVALID_CONFIG, e.to_string()))
        };
        let source = client(config.clone())?;
        let lanes = Arc::new(
            FetchLanes::new(host.clone(), config)
                .map_err(|e| MirrorError::new(ErrorCode::INVALID_CONFIG, e.to_string()))?,
        );
        let stats = Arc::new(MirrorStats::new(name));
        let throttle = Arc::new(Throttle::new(settings.throttled_rate));
        let pool = FetcherPool::new(
            host.clone(),
            source.clone(),
            lanes.clone(),
            stats.clone(),
            settings,
            throttle.clone(),
            source_cluster_id.clone(),
        )
        .start();
        Ok(Mirror {
            name: name.to_string(),
            host,
            shards,
            retry,
            liveness,
            arbiters,
            configs,
            lookups: Arc::new(CoalescingSource::new(source.clone())),
            source,
            lanes,
            source_cluster_id,
            pool,
            topics: BTreeMap::new(),
            stats,
            throttle,
            warnings: Arc::default(),
            halted: None,
            unreachable: None,
            start_failed: BTreeSet::new(),
            clock: tokio::time::Instant::now(),
            checking: false,
            syncing: false,
        })
    }

    /// The arbiter of one of its partitions (a stable hash of its key over the arbiters).
    pub(super) fn arbiter_of(
        &self,
        topic_id: &uuid::Uuid,
        partition: i32,
    ) -> Option<actix::ArbiterHandle> {
        if self.arbiters.is_empty() {
            return None;
        }
        let index = kmirror_protocol::sharding::mirror_partition_shard(
            &self.name,
            topic_id,
            partition,
            self.arbiters.len() as i32,
        );
        self.arbiters.get(index as usize).cloned()
    }
}

impl<H: Host> Actor for Mirror<H> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let interval = std::time::Duration::from_millis(self.liveness.check_interval_ms());
        ctx.run_interval(interval, |mirror, ctx| mirror.check_liveness(ctx));
        let refresh = self.host.settings().metadata_refresh_interval_ms;
        ctx.run_interval(std::time::Duration::from_millis(refresh), |mirror, ctx| {
            mirror.sync(ctx)
        });
        ctx.run_interval(std::time::Duration::from_secs(1), |mirror, _| {
            mirror.stats.publish(mirror.host.now_ms());
        });
        self.probe_source(PROBE_INITIAL_BACKOFF, ctx);
    }

    /// The pool keeps its own clock and its fetchers address it, so it would outlive the
    /// mirror (and keep its source connections open) unless told to stop too.
    fn stopped(&mut self, _: &mut Context<Self>) {
        self.pool.do_send(MirrorStopped);
    }
}

/// The mirror was deleted: its actor stops, and with it its pool, whose fetchers and partition
/// actors go as their last address drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct Retire;

impl<H: Host> Handler<Retire> for Mirror<H> {
    type Result = ();

    fn handle(&mut self, _: Retire, ctx: &mut Context<Self>) {
        tracing::info!(mirror = self.name, "mirror deleted");
        ctx.stop();
    }
}

/// A metadata change, as the system read it: the mirror reacts to what it touched of its
/// topics and starts its partitions of `to_start` that do not run yet.
#[derive(Clone, Message)]
#[rtype(result = "()")]
pub struct MirrorMetadata {
    /// What changed.
    pub delta: Arc<MetadataDelta>,
    /// The topics it touched, as they are now (a touched topic missing was deleted).
    pub touched: Arc<BTreeMap<String, TopicMeta>>,
    /// The topics whose partitions here should run, if they name this mirror.
    pub to_start: Arc<BTreeMap<String, TopicMeta>>,
}

impl std::fmt::Debug for MirrorMetadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorMetadata")
            .field("touched", &self.touched.len())
            .field("to_start", &self.to_start.len())
            .finish_non_exhaustive()
    }
}

/// Every partition actor of the mirror here (the system's Settle waits for them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "Vec<Recipient<DescribePartition>>")]
pub struct PartitionActors;

impl<H: Host> Handler<PartitionActors> for Mirror<H> {
    type Result = actix::MessageResult<PartitionActors>;

    fn handle(&mut self, _: PartitionActors, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(
            self.topics
                .values()
                .flat_map(|t| t.partitions.values().map(|p| p.addr().clone().recipient()))
                .collect(),
        )
    }
}

/// The first wait between probes of a source that does not answer; it doubles up to
/// [`PROBE_MAX_BACKOFF`].
const PROBE_INITIAL_BACKOFF: std::time::Duration = std::time::Duration::from_secs(1);
const PROBE_MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(30);
/// How long one probe of the source waits for its cluster id (a frozen source must not hold
/// the probe for the client's whole request timeout).
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl<H: Host> Mirror<H> {
    /// Asks the source for its cluster id in the background; while it does not answer, asks
    /// again after `backoff` (doubling). Stops once it answered or the mirror halted.
    fn probe_source(&mut self, backoff: std::time::Duration, ctx: &mut Context<Self>) {
        let source = self.source.clone();
        let probe = async move {
            match tokio::time::timeout(PROBE_TIMEOUT, source.cluster_id()).await {
                Ok(Ok(id)) => Ok(id),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {} ms", PROBE_TIMEOUT.as_millis())),
            }
        };
        ctx.spawn(probe.into_actor(self).map(move |answer, mirror, ctx| {
            let failed = answer.is_err();
            mirror.source_answered(answer);
            if failed && mirror.halted.is_none() {
                ctx.run_later(backoff, move |mirror, ctx| {
                    mirror.probe_source((backoff * 2).min(PROBE_MAX_BACKOFF), ctx)
                });
            }
        }));
    }

    /// Records what the source answered: since when it is unreachable and why, or its cluster
    /// id (learned here when the mirror's configs do not name it; another cluster than the
    /// one named halts the mirror).
    pub(super) fn source_answered(&mut self, answer: Result<String, String>) {
        let mirror = self.name.clone();
        match answer {
            Ok(found) => {
                if self.unreachable.take().is_some() {
                    tracing::info!(mirror, "the source cluster answers again");
                }
                let own_cluster_id = self.host.cluster_id();
                let expected = self.source_cluster_id.get_or_init(|| found.clone());
                let wrong = mirror_configs::check_not_this_cluster(&found, &own_cluster_id)
                    .map_err(|e| e.to_string())
                    .and_then(|()| super::sync_plan::check_source_cluster(expected, &found));
                if let Err(reason) = wrong
                    && self.halted.is_none()
                {
                    self.halt(reason);
                }
            }
            Err(error) => {
                let since = self
                    .unreachable
                    .as_ref()
                    .map_or_else(|| self.host.now_ms(), |(since, _)| *since);
                if self.unreachable.is_none() {
                    tracing::warn!(mirror, %error, "the source cluster does not answer");
                }
                self.unreachable = Some((since, error));
            }
        }
    }
}
