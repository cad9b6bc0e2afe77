//! The FetcherPool actor of one mirror: a Fetcher per source broker, each attached partition on
//! the fetcher of its current source leader. A fetcher keeps up to `mirror.num.replica.fetchers`
//! Fetches in flight on the mirror's [`FetchLanes`], as many as its pacing finds the link wants.
//!
//! Lifecycle: a partition attaches through the pool when it enters MIRRORING; the pool asks the
//! source who leads the partition (so a partition that failed over a leader change and retries
//! lands on the new leader's fetcher), starts that broker's fetcher if needed and attaches the
//! partition there. Detach goes to the fetcher that has the partition and completes when its
//! apply in flight is done. Supervision: every `check_interval` the pool checks that its
//! fetchers are alive; a dead one (a panicking handler closes its mailbox) is started again and
//! its partitions attached again, so they fetch from their log ends.
//!
//! New fetch settings (the mirror's `fetch.*` keys or `mirror.num.replica.fetchers` altered,
//! [`FetchSettingsChanged`]) replace every fetcher: a new one per source broker takes the
//! partitions at once, as a leader move does, and the old one is told to detach them. An
//! answer the old one still applies lands only at the log end it was asked from (a stale one
//! changes nothing), and until its applies are done a [`Detach`] waits for it too, as for any
//! fetcher of the pool.
//!
//! Epochs: a partition's fetcher holds the two leader epochs it is fetched under, each told by
//! its one owner: the source's by this pool's leader lookup, the destination's by the
//! partition's actor (with [`Attach`], then each rise with [`RaiseDestinationEpoch`], which the
//! pool keeps and forwards, so a partition moved to another fetcher takes both along). A
//! partition's actor sends its messages in order and raises only while MIRRORING, before it
//! detaches: a released or re-created partition cannot be raised by its former incarnation.

#[cfg(test)]
mod tests;

use super::fetch::{EngineFetcherPorts, LeaderMoved, SourceClusterId};
use super::fetch_lanes::FetchLanes;
use super::fetch_settings::FetchSettings;
use super::stats::MirrorStats;
use super::throttle::Throttle;
use crate::actor::{
    AttachPartition, FetchEpochs, Fetcher, FetcherConfig, FetcherProgress, RaiseDestinationEpoch,
    detach_partition,
};
use crate::host::{Host, Source, TopicPartition};
use crate::partition::Cause;
use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, Recipient,
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
const NO_FETCHER: i32 = -1;
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
    /// Its destination topic id and leader epoch, as its actor knows them (the source epoch
    /// is the pool's to find: -1 here).
    pub epochs: FetchEpochs,
}

/// Detach a partition from its fetcher; `done` is told when no apply of it is in flight.
/// Sent with `do_send`, so it keeps its place behind its partition's Attach and raises. A
/// detach of another incarnation of the topic than the one attached (a released actor's, late)
/// changes nothing.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Detach {
    /// The partition.
    pub key: TopicPartition,
    /// The destination topic's id its actor attached with (nil: any).
    pub topic_id: uuid::Uuid,
    /// Told when no append for it can follow.
    pub done: tokio::sync::oneshot::Sender<()>,
}

/// The fetchers of one mirror.
pub struct FetcherPool<H: Host> {
    host: H,
    /// The source, for leader lookups.
    source: Arc<H::Source>,
    /// The connections Fetch requests go on (their own, apart from `source`).
    lanes: Arc<FetchLanes<H>>,
    stats: Arc<MirrorStats>,
    settings: FetchSettings,
    /// The mirror's pace on this broker (its fetchers share it).
    throttle: Arc<Throttle>,
    /// The source cluster id the mirror expects (checked with each topic lookup).
    source_cluster_id: SourceClusterId,
    /// By source broker.
    fetchers: HashMap<i32, Addr<Fetcher<EngineFetcherPorts<H>>>>,
    /// Fetchers replaced by new settings whose partitions' detaches are not all done: a
    /// [`Detach`] waits for them too.
    retired: Vec<Addr<Fetcher<EngineFetcherPorts<H>>>>,
    /// Every attached partition.
    members: HashMap<TopicPartition, Member>,
    /// Attaches waiting for the source's leaders: their generation (a detach cancels them) and
    /// destination epoch (raised meanwhile).
    attaching: HashMap<TopicPartition, (u64, FetchEpochs)>,
    next_attach: u64,
    /// Source leaders (and their leader epochs) by topic, and when they were asked.
    leaders: HashMap<String, (tokio::time::Instant, Vec<(i32, i32)>)>,
    /// Partitions whose leader moved, waiting out the backoff before their next lookup.
    moving: HashSet<TopicPartition>,
    /// This pool, for its fetchers to report moved leaders to.
    me: Option<Addr<FetcherPool<H>>>,
}

/// An attached partition: its fetcher, where its progress goes, and the epochs it is fetched
/// under.
struct Member {
    fetcher: i32,
    progress: Recipient<FetcherProgress>,
    epochs: FetchEpochs,
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
    /// The pool of a mirror whose source is `source` (control) and `lanes` (fetches); its
    /// fetchers keep `stats` and fetch as `settings` say, paced by `throttle`.
    pub fn new(
        host: H,
        source: Arc<H::Source>,
        lanes: Arc<FetchLanes<H>>,
        stats: Arc<MirrorStats>,
        settings: FetchSettings,
        throttle: Arc<Throttle>,
        source_cluster_id: SourceClusterId,
    ) -> Self {
        FetcherPool {
            host,
            source,
            lanes,
            stats,
            settings,
            throttle,
            source_cluster_id,
            fetchers: HashMap::new(),
            retired: Vec::new(),
            members: HashMap::new(),
            attaching: HashMap::new(),
            next_attach: 0,
            leaders: HashMap::new(),
            moving: HashSet::new(),
            me: None,
        }
    }

    /// Attaches `key` to the fetcher of `leader` at its leader epoch (moving it off another
    /// broker's fetcher), under `epochs` with the leader's source epoch.
    fn attach(
        &mut self,
        key: TopicPartition,
        progress: Recipient<FetcherProgress>,
        leader: Option<(i32, i32)>,
        epochs: FetchEpochs,
    ) {
        let Some((leader, source_epoch)) = leader.filter(|(l, _)| *l >= 0) else {
            // No leader known (the source does not answer, or elects one): the partition
            // waits here, MIRRORING, and the lookup is tried again after a backoff, as a
            // moved leader's is.
            if let Some(previous) = self.members.get(&key)
                && let Some(old) = self.fetchers.get(&previous.fetcher)
            {
                drop(detach_partition(old, key.clone()));
            }
            let member = Member {
                fetcher: NO_FETCHER,
                progress,
                epochs: FetchEpochs {
                    source: -1,
                    ..epochs
                },
            };
            self.members.insert(key.clone(), member);
            if let Some(me) = &self.me {
                me.do_send(LeaderMoved(key));
            }
            return;
        };
        let fetcher = leader;
        if let Some(previous) = self.members.get(&key)
            && previous.fetcher != fetcher
            && let Some(old) = self.fetchers.get(&previous.fetcher)
        {
            drop(detach_partition(old, key.clone()));
        }
        let epochs = FetchEpochs {
            source: source_epoch,
            ..epochs
        };
        let member = Member {
            fetcher,
            progress: progress.clone(),
            epochs,
        };
        self.members.insert(key.clone(), member);
        self.fetcher(fetcher).do_send(AttachPartition {
            key,
            progress,
            epochs,
        });
    }

    fn fetcher(&mut self, leader: i32) -> Addr<Fetcher<EngineFetcherPorts<H>>> {
        let (host, lanes, stats, settings) = (
            self.host.clone(),
            self.lanes.clone(),
            self.stats.clone(),
            self.settings,
        );
        let (me, cluster, throttle) = (
            self.me.clone(),
            self.source_cluster_id.clone(),
            self.throttle.clone(),
        );
        self.fetchers
            .entry(leader)
            .or_insert_with(|| {
                let ports = EngineFetcherPorts::new(host, lanes, leader, stats, settings)
                    .throttled(throttle);
                let ports = match me {
                    Some(me) => ports.in_pool(me.recipient(), cluster),
                    None => ports,
                };
                Fetcher::new(
                    ports,
                    FetcherConfig {
                        partition_max_bytes: settings.partition_max_bytes as usize,
                        response_max_bytes: settings.response_max_bytes as usize,
                        max_in_flight: settings.max_in_flight,
                        ..FetcherConfig::default()
                    },
                )
                .start()
            })
            .clone()
    }

    /// Starts dead fetchers again and attaches their partitions to them.
    fn revive(&mut self) {
        let dead: Vec<i32> = self
            .fetchers
            .iter()
            .filter(|(_, f)| !f.connected())
            .map(|(fetcher, _)| *fetcher)
            .collect();
        for id in dead {
            tracing::warn!(source_broker = id, "starting a dead mirror fetcher again");
            self.restart_fetcher(id);
        }
    }

    /// Replaces the fetcher of source broker `leader` with a new one (made with the pool's
    /// settings now) and attaches that broker's partitions to it; returns them.
    fn restart_fetcher(&mut self, leader: i32) -> Vec<TopicPartition> {
        self.fetchers.remove(&leader);
        let fetcher = self.fetcher(leader);
        self.members
            .iter()
            .filter(|(_, m)| m.fetcher == leader)
            .map(|(key, member)| {
                fetcher.do_send(AttachPartition {
                    key: key.clone(),
                    progress: member.progress.clone(),
                    epochs: member.epochs,
                });
                key.clone()
            })
            .collect()
    }
}

impl<H: Host> Actor for FetcherPool<H> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.me = Some(ctx.address());
        ctx.run_interval(CHECK_INTERVAL, |pool, _| pool.revive());
    }
}

/// The mirror's fetch settings, as its configs say now ([`FetcherPool`], "New fetch
/// settings"). Its throttle is shared apart and changes in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct FetchSettingsChanged(pub FetchSettings);

impl<H: Host> Handler<FetchSettingsChanged> for FetcherPool<H> {
    type Result = ();

    fn handle(&mut self, msg: FetchSettingsChanged, ctx: &mut Context<Self>) {
        // The throttle is shared apart, and `fetch.backoff.ms` is not the fetchers' to use
        // (docs/mirror-configs.md): neither is worth new fetchers.
        let used = |s: FetchSettings| FetchSettings {
            throttled_rate: None,
            backoff_ms: 0,
            ..s
        };
        let changed = used(msg.0) != used(self.settings);
        self.settings = msg.0;
        if !changed {
            return;
        }
        let replaced: Vec<_> = self.fetchers.drain().collect();
        for (leader, old) in replaced {
            tracing::info!(
                source_broker = leader,
                "new fetch settings: a new fetcher takes the partitions"
            );
            let detaching: Vec<_> = self
                .restart_fetcher(leader)
                .into_iter()
                .map(|key| detach_partition(&old, key))
                .collect();
            self.retired.push(old.clone());
            ctx.spawn(
                async move {
                    for detached in detaching {
                        let _ = detached.await;
                    }
                }
                .into_actor(self)
                .map(move |(), pool, _| pool.retired.retain(|f| *f != old)),
            );
        }
    }
}

/// The pool's mirror stopped (deleted, or the engine shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct MirrorStopped;

impl<H: Host> Handler<MirrorStopped> for FetcherPool<H> {
    type Result = ();

    /// The pool stops, dropping its fetchers' addresses (with no partition attached, a
    /// fetcher has nothing left to do and stops as its mailbox closes).
    fn handle(&mut self, _: MirrorStopped, ctx: &mut Context<Self>) {
        ctx.stop();
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
        let reported = tokio::time::Instant::now();
        ctx.run_later(MOVED_BACKOFF, move |pool, ctx| {
            pool.moving.remove(&key);
            // Leaders looked up after the move was reported are fresh: the topic's other
            // partitions that moved with it use them instead of asking again each.
            if pool
                .leaders
                .get(&key.topic)
                .is_some_and(|(asked, _)| *asked < reported)
            {
                pool.leaders.remove(&key.topic);
            }
            let Some(member) = pool.members.get(&key) else {
                return;
            };
            let attach = Attach {
                key,
                progress: member.progress.clone(),
                epochs: member.epochs,
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
            self.attach(msg.key, msg.progress, leader, msg.epochs);
            return Box::pin(async {}.into_actor(self));
        }
        let generation = self.next_attach;
        self.next_attach += 1;
        self.attaching
            .insert(msg.key.clone(), (generation, msg.epochs));
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
                let epochs = match pool.attaching.get(&msg.key) {
                    Some((current, epochs)) if *current == generation => *epochs,
                    // Detached (or attached again) meanwhile.
                    _ => return,
                };
                pool.attaching.remove(&msg.key);
                let leader = match leaders {
                    Ok(Err(cause)) => {
                        msg.progress.do_send(FetcherProgress(Err(cause)));
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
                pool.attach(msg.key, msg.progress, leader, epochs);
            }),
        )
    }
}

impl<H: Host> Handler<RaiseDestinationEpoch> for FetcherPool<H> {
    type Result = ();

    /// Keeps the partition's raised epoch (for a move to another fetcher) and tells its
    /// fetcher.
    fn handle(&mut self, msg: RaiseDestinationEpoch, _: &mut Context<Self>) {
        if let Some((_, epochs)) = self.attaching.get_mut(&msg.key) {
            epochs.destination = epochs.destination.max(msg.leader_epoch);
        }
        let Some(member) = self.members.get_mut(&msg.key) else {
            return;
        };
        member.epochs.destination = member.epochs.destination.max(msg.leader_epoch);
        if let Some(fetcher) = self.fetchers.get(&member.fetcher) {
            fetcher.do_send(msg);
        }
    }
}

impl<H: Host> Handler<Detach> for FetcherPool<H> {
    type Result = ();

    fn handle(&mut self, msg: Detach, ctx: &mut Context<Self>) {
        let Detach {
            key,
            topic_id,
            done,
        } = msg;
        let attached_id = self
            .members
            .get(&key)
            .map(|m| m.epochs.topic_id)
            .or_else(|| self.attaching.get(&key).map(|(_, e)| e.topic_id));
        if let Some(attached_id) = attached_id
            && !attached_id.is_nil()
            && !topic_id.is_nil()
            && attached_id != topic_id
        {
            let _ = done.send(());
            return;
        }
        self.attaching.remove(&key);
        self.stats.forget(&key);
        self.members.remove(&key);
        // Every fetcher of the pool, not only the one the partition is attached to: a leader
        // move detached it from its previous fetcher without waiting, and an apply still in
        // flight there must not land after this (STOPPING's cut to the LSO). A fetcher that
        // never had the partition answers at once; one that is gone appends nothing more.
        // The requests are queued here (`do_send`, whatever the mailbox holds), so they reach
        // each fetcher before an Attach this pool handles next.
        let detaching: Vec<_> = self
            .fetchers
            .values()
            .chain(&self.retired)
            .map(|fetcher| detach_partition(fetcher, key.clone()))
            .collect();
        ctx.spawn(
            async move {
                for detached in detaching {
                    let _ = detached.await;
                }
                let _ = done.send(());
            }
            .into_actor(self),
        );
    }
}
