//! The FetcherPool actor of one mirror: `mirror.num.replica.fetchers` Fetchers per source broker
//! (one by default), and each attached partition on a fetcher of its current source leader
//! (which one by a hash of its name, [`FetchSettings::fetcher_slot`]).
//!
//! Lifecycle: a partition attaches through the pool when it enters MIRRORING; the pool asks the
//! source who leads the partition (so a partition that failed over a leader change and retries
//! lands on the new leader's fetcher), starts that broker's fetcher if needed and attaches the
//! partition there. Detach goes to the fetcher that has the partition and completes when its
//! apply in flight is done. Supervision: every `check_interval` the pool checks that its
//! fetchers are alive; a dead one (a panicking handler closes its mailbox) is started again and
//! its partitions attached again, so they fetch from their log ends.

#[cfg(test)]
mod tests;

use super::fetch::{
    DestinationEpochs, EngineFetcherPorts, LeaderMoved, SourceClusterId, SourceEpochs,
};
use super::fetch_settings::FetchSettings;
use super::stats::MirrorStats;
use super::throttle::Throttle;
use crate::actor::{AttachPartition, DetachPartition, Fetcher, FetcherConfig, FetcherProgress};
use crate::host::{Host, Source, TopicPartition};
use crate::partition::Cause;
use actix::{
    Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, Recipient,
    ResponseActFuture, WrapFuture,
};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// How often the pool looks for dead fetchers.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How long a topic's source leaders are trusted: partitions attaching together share one
/// metadata request; one attaching again after a failure (its backoff is at least this long)
/// gets fresh leaders.
const LEADERS_FRESH_FOR: Duration = Duration::from_millis(500);
/// Where a partition waiting for its source leader to be known is kept (no fetcher has it).
const NO_FETCHER: (i32, usize) = (-1, 0);
/// How long a partition whose source leader moved waits before looking it up again (a leader
/// election takes a moment to reach the source's metadata).
const MOVED_BACKOFF: Duration = Duration::from_millis(500);

/// Attach a partition to the fetcher of its source leader.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct Attach {
    /// The partition.
    pub key: TopicPartition,
    /// Where its fetch progress goes (its partition actor).
    pub progress: Recipient<FetcherProgress>,
}

/// Detach a partition from its fetcher; done when no apply of it is in flight.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct Detach(pub TopicPartition);

/// The fetchers of one mirror.
pub struct FetcherPool<H: Host> {
    host: H,
    /// The source, for leader lookups.
    source: Arc<H::Source>,
    /// The source for Fetch requests (their own connections).
    fetch_source: Arc<H::Source>,
    stats: Arc<MirrorStats>,
    settings: FetchSettings,
    /// The mirror's pace on this broker (its fetchers share it).
    throttle: Arc<Throttle>,
    /// The source cluster id the mirror expects (checked with each topic lookup).
    source_cluster_id: SourceClusterId,
    /// By (source broker, slot).
    fetchers: HashMap<(i32, usize), Addr<Fetcher<EngineFetcherPorts<H>>>>,
    /// Every attached partition: its fetcher and its progress recipient.
    members: HashMap<TopicPartition, ((i32, usize), Recipient<FetcherProgress>)>,
    /// Attaches waiting for the source's leaders, by generation (a detach cancels them).
    attaching: HashMap<TopicPartition, u64>,
    next_attach: u64,
    /// Source leaders (and their leader epochs) by topic, and when they were asked.
    leaders: HashMap<String, (tokio::time::Instant, Vec<(i32, i32)>)>,
    /// The source leader epoch each partition is fetched at (shared with the fetchers).
    epochs: SourceEpochs,
    /// The destination leader epoch of each partition (shared with its partition ports).
    destination_epochs: DestinationEpochs,
    /// Partitions whose leader moved, waiting out the backoff before their next lookup.
    moving: HashSet<TopicPartition>,
    /// This pool, for its fetchers to report moved leaders to.
    me: Option<Addr<FetcherPool<H>>>,
}

impl<H: Host> std::fmt::Debug for FetcherPool<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetcherPool")
            .field("fetchers", &self.fetchers.keys().collect::<Vec<_>>())
            .field("members", &self.members.len())
            .finish_non_exhaustive()
    }
}

impl<H: Host> FetcherPool<H> {
    /// The pool of a mirror whose source is `source` (control) and `fetch_source` (fetches); its
    /// fetchers keep `stats` and fetch as `settings` say, paced by `throttle`, up to
    /// `destination_epochs`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        host: H,
        source: Arc<H::Source>,
        fetch_source: Arc<H::Source>,
        stats: Arc<MirrorStats>,
        settings: FetchSettings,
        throttle: Arc<Throttle>,
        source_cluster_id: SourceClusterId,
        destination_epochs: DestinationEpochs,
    ) -> Self {
        FetcherPool {
            host,
            source,
            fetch_source,
            stats,
            settings,
            throttle,
            source_cluster_id,
            fetchers: HashMap::new(),
            members: HashMap::new(),
            attaching: HashMap::new(),
            next_attach: 0,
            leaders: HashMap::new(),
            epochs: SourceEpochs::default(),
            destination_epochs,
            moving: HashSet::new(),
            me: None,
        }
    }

    /// Attaches `key` to the fetcher of `leader` at its leader epoch (moving it off another
    /// broker's fetcher).
    fn attach(
        &mut self,
        key: TopicPartition,
        progress: Recipient<FetcherProgress>,
        leader: Option<(i32, i32)>,
    ) {
        let Some((leader, epoch)) = leader.filter(|(l, _)| *l >= 0) else {
            // No leader known (the source does not answer, or elects one): the partition
            // waits here, MIRRORING, and the lookup is tried again after a backoff, as a
            // moved leader's is.
            if let Some((previous, _)) = self.members.get(&key)
                && let Some(old) = self.fetchers.get(previous)
            {
                old.do_send(DetachPartition(key.clone()));
            }
            self.members.insert(key.clone(), (NO_FETCHER, progress));
            if let Some(me) = &self.me {
                me.do_send(LeaderMoved(key));
            }
            return;
        };
        self.epochs.insert(key.clone(), epoch);
        let fetcher = (
            leader,
            self.settings.fetcher_slot(&key.topic, key.partition),
        );
        if let Some((previous, _)) = self.members.get(&key)
            && *previous != fetcher
            && let Some(old) = self.fetchers.get(previous)
        {
            old.do_send(DetachPartition(key.clone()));
        }
        self.members
            .insert(key.clone(), (fetcher, progress.clone()));
        self.fetcher(fetcher)
            .do_send(AttachPartition { key, progress });
    }

    fn fetcher(&mut self, (leader, slot): (i32, usize)) -> Addr<Fetcher<EngineFetcherPorts<H>>> {
        let (host, source, stats, settings, destination_epochs) = (
            self.host.clone(),
            self.fetch_source.clone(),
            self.stats.clone(),
            self.settings,
            self.destination_epochs.clone(),
        );
        let (epochs, me, cluster, throttle) = (
            self.epochs.clone(),
            self.me.clone(),
            self.source_cluster_id.clone(),
            self.throttle.clone(),
        );
        self.fetchers
            .entry((leader, slot))
            .or_insert_with(|| {
                let ports = EngineFetcherPorts::new(
                    host,
                    source,
                    leader,
                    stats,
                    settings,
                    destination_epochs,
                )
                .throttled(throttle);
                let ports = match me {
                    Some(me) => ports.in_pool(epochs, me.recipient(), cluster),
                    None => ports,
                };
                Fetcher::new(
                    ports,
                    FetcherConfig {
                        partition_max_bytes: settings.partition_max_bytes as usize,
                        ..FetcherConfig::default()
                    },
                )
                .start()
            })
            .clone()
    }

    /// Starts dead fetchers again and attaches their partitions to them.
    fn revive(&mut self) {
        let dead: Vec<(i32, usize)> = self
            .fetchers
            .iter()
            .filter(|(_, f)| !f.connected())
            .map(|(fetcher, _)| *fetcher)
            .collect();
        for id in dead {
            tracing::warn!(
                source_broker = id.0,
                slot = id.1,
                "starting a dead mirror fetcher again"
            );
            self.fetchers.remove(&id);
            let fetcher = self.fetcher(id);
            for (key, (_, progress)) in self.members.iter().filter(|(_, (f, _))| *f == id) {
                fetcher.do_send(AttachPartition {
                    key: key.clone(),
                    progress: progress.clone(),
                });
            }
        }
    }
}

impl<H: Host> Actor for FetcherPool<H> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.me = Some(ctx.address());
        ctx.run_interval(CHECK_INTERVAL, |pool, _| pool.revive());
    }
}

impl<H: Host> Handler<LeaderMoved> for FetcherPool<H> {
    type Result = ();

    /// Looks the partition's leader up again after a backoff (its old answer is stale) and
    /// attaches it where that says; the partition keeps MIRRORING meanwhile.
    fn handle(&mut self, msg: LeaderMoved, ctx: &mut Context<Self>) {
        let key = msg.0;
        if !self.members.contains_key(&key) || !self.moving.insert(key.clone()) {
            return;
        }
        tracing::info!(topic = %key.topic, partition = key.partition, "the source leader moved: looking it up again");
        ctx.run_later(MOVED_BACKOFF, move |pool, ctx| {
            pool.moving.remove(&key);
            pool.leaders.remove(&key.topic);
            let Some((_, progress)) = pool.members.get(&key) else {
                return;
            };
            let attach = Attach {
                key,
                progress: progress.clone(),
            };
            let attached = <FetcherPool<H> as Handler<Attach>>::handle(pool, attach, ctx);
            ctx.spawn(attached);
        });
    }
}

/// A source topic's partition leaders and their epochs, or why the topic under that name is
/// not the one mirrored.
type SourceLeaders = Result<Vec<(i32, i32)>, Cause>;

impl<H: Host> Handler<Attach> for FetcherPool<H> {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, msg: Attach, _: &mut Context<Self>) -> Self::Result {
        let TopicPartition { topic, partition } = msg.key.clone();
        if let Some((asked, leaders)) = self.leaders.get(&topic)
            && asked.elapsed() < LEADERS_FRESH_FOR
        {
            let leader = leaders.get(partition as usize).copied();
            self.attach(msg.key, msg.progress, leader);
            return Box::pin(async {}.into_actor(self));
        }
        let generation = self.next_attach;
        self.next_attach += 1;
        self.attaching.insert(msg.key.clone(), generation);
        let source = self.source.clone();
        let cluster = self.source_cluster_id.clone();
        let local_id = self
            .host
            .topic(&topic)
            .map(|t| t.topic_id)
            .unwrap_or_default();
        Box::pin(
            async move {
                let metadata = source.metadata(Some(&[topic.as_str()])).await;
                // Err: the source did not answer; Ok(Err): the topic under that name is gone or
                // is another one (checked before a fetch by name, below Fetch v13, could read
                // another topic's log as this one's), confirmed by a second lookup.
                let verdict = match &metadata {
                    Ok(m) => {
                        let first =
                            super::source_topic::check(m, &cluster, &topic, local_id, partition);
                        super::source_topic::confirm(
                            first, &*source, &cluster, &topic, local_id, partition,
                        )
                        .await
                    }
                    Err(_) => Ok(()),
                };
                let leaders: Result<SourceLeaders, _> = metadata.map(|m| {
                    verdict?;
                    Ok(m.topics
                        .get(&topic)
                        .map(|t| {
                            t.partitions
                                .iter()
                                .map(|p| (p.leader, p.leader_epoch))
                                .collect()
                        })
                        .unwrap_or_default())
                });
                (topic, leaders)
            }
            .into_actor(self)
            .map(move |(topic, leaders), pool, _| {
                if pool.attaching.get(&msg.key) != Some(&generation) {
                    // Detached (or attached again) meanwhile.
                    return;
                }
                pool.attaching.remove(&msg.key);
                let leader = match leaders {
                    Ok(Err(cause)) => {
                        msg.progress.do_send(FetcherProgress::Failed(cause));
                        return;
                    }
                    Ok(Ok(leaders)) => {
                        let leader = leaders.get(msg.key.partition as usize).copied();
                        pool.leaders
                            .insert(topic, (tokio::time::Instant::now(), leaders));
                        leader
                    }
                    Err(_) => None,
                };
                pool.attach(msg.key, msg.progress, leader);
            }),
        )
    }
}

impl<H: Host> Handler<Detach> for FetcherPool<H> {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, msg: Detach, _: &mut Context<Self>) -> Self::Result {
        self.attaching.remove(&msg.0);
        self.stats.forget(&msg.0);
        self.epochs.remove(&msg.0);
        self.members.remove(&msg.0);
        // Every fetcher of the pool, not only the one the partition is attached to: a leader
        // move detached it from its previous fetcher without waiting, and an apply still in
        // flight there must not land after this (STOPPING's cut to the LSO). A fetcher that
        // never had the partition answers at once; one that is gone appends nothing more.
        let fetchers: Vec<_> = self.fetchers.values().cloned().collect();
        Box::pin(
            async move {
                for fetcher in fetchers {
                    let _ = fetcher.send(DetachPartition(msg.0.clone())).await;
                }
            }
            .into_actor(self),
        )
    }
}
