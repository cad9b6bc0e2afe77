//! The Fetcher actor: one per (mirror, source broker). It keeps Fetches in flight covering the
//! partitions attached to it, hands each partition's answer to the host to apply (truncate or
//! append, [`crate::host::apply_fetch`]) and reports the outcome to the partition's actor; a
//! partition is in one Fetch at a time and fetched again only after its previous answer is
//! applied, so batches land in order and exactly once.
//!
//! How many Fetches are in flight, and how large each is, is decided by the pure
//! [`FetchPacing`] from what the answers deliver (docs/design.md §4, "Fetching across a WAN"):
//! one on a near source, up to `mirror.num.replica.fetchers` on a distant one, each on a
//! connection of its own (its lane: the lowest free one of its kind, lane 0 and those above
//! the reserve's or the reserve's own, so a single Fetch always uses lane 0 and its fetch
//! session) and for its share of the partitions ready to fetch; on a lane left
//! free when none is ready, a partition with a backlog is also fetched ahead of its log end
//! ([`FetchState`], "Reading ahead"), [`MAX_AHEAD`] Fetches ahead each in flight at most, or
//! the Fetches allowed shared among the partitions behind if more, and half as many again with
//! their answers waiting. Which partitions go into a Fetch, in
//! turn, and what each is fetched under is decided by the pure [`FetchState`] (round robin, at
//! most `max_partitions_per_fetch`, none in flight or whose answer is still being applied). A
//! Fetch that brought nothing new keeps its lane busy for `idle_backoff` (the source's own long
//! polling usually makes that rare); a partition whose answer failed, or whose batches were
//! held back above its destination epoch, waits the same backoff alone ([`FetchState::hold`]),
//! or until its epoch is raised.
//!
//! Batching: with one Fetch in flight, while the answers of the last Fetch are being applied,
//! the next Fetch waits for them (at most `apply_grace`), so it asks again for every partition
//! at once; otherwise the first partition applied would go out alone and split the partitions
//! over ever smaller Fetches. A partition whose apply takes longer than the grace does not hold
//! the others up.
//!
//! Detaching: [`DetachPartition`] completes once no append for the partition can follow, that
//! is at once, or when its answer in flight has been applied; answers for a partition that was
//! detached meanwhile are dropped unapplied.

use super::ports::FetcherProgress;
use super::ports::PortFuture;
use crate::fetch_lanes::{distance_ms, lanes_to_open, link_round_trip_ms, warm_reserve};
use crate::fetch_pacing::{
    AnswerSample, FetchPacing, INITIAL_IN_FLIGHT, PacingLimits, PacingReport,
};
use crate::fetch_poll::read_at;
pub use crate::fetch_state::FetchEpochs;
use crate::fetch_state::{AheadAtLogEnd, AheadLanes, FetchState, Kind, Reach, Span, slack};
use crate::host::{FetchProgress, FetchRequest, FetchResponse, TopicPartition};
use crate::partition::Cause;
use actix::{
    Actor, ActorFutureExt, AsyncContext, Context, Handler, Message, Recipient, WrapFuture,
};
use kmirror_protocol::batch::RecordBatches;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Fetches ahead of one partition's log end in flight that it may have at least (more when few
/// partitions are behind: the Fetches allowed shared among them, see `Fetcher::lanes`), and
/// half as many again of answers waiting; what they hold in memory is bounded by the Fetches
/// allowed in all, and half as many again.
pub const MAX_AHEAD: usize = 32;

/// Fetches kept beyond the pacing's count for partitions near the source's end (caught up, or
/// less than one answer behind), out of `mirror.num.replica.fetchers` beyond the 8 the pacing
/// keeps at least (a ceiling of 9 keeps one, of 16 or more all eight): however many lanes a
/// catch-up beside them holds, each waiting out answers of `fetch.max.bytes` many round trips
/// long, a steady partition's records go out at once, in pieces of a window each when a round
/// trip gathers more, or polled at the source's end (docs/design.md §4). Each lane moves a
/// window per round trip: with four, a 1 MB/s partition half a megabyte behind across 150 ms
/// (a producer's start) gained 0.6 MB/s on its source, and lagged 330-490 ms for seconds.
pub const NEAR_RESERVE: usize = 8;

/// The source answers of one Fetch, per partition (a partition the source refused has its
/// cause).
pub type FetchAnswers = Vec<(TopicPartition, Result<FetchResponse, Cause>)>;

/// One Fetch's answers and what its pacing learns from them.
#[derive(Debug, Clone, Default)]
pub struct Fetched {
    /// Per partition.
    pub answers: FetchAnswers,
    /// Record bytes the answer brought.
    pub bytes: u64,
    /// Some partition has more to fetch than the answer brought (its high watermark lies
    /// beyond the records).
    pub backlog: bool,
    /// The mirror's throttle delayed the Fetch.
    pub throttled: bool,
}

/// What a fetcher needs from its broker.
pub trait FetcherPorts: 'static {
    /// Where to fetch the partition from next ([`crate::host::next_fetch`] on its log).
    fn next_fetch(&self, key: &TopicPartition) -> Result<FetchRequest, Cause>;
    /// Opens connection `lane` to the source broker (made if it is not yet) without a Fetch, so
    /// the first Fetch on it does not wait for the handshake; the quickest round trip of the
    /// requests answered on it ([`crate::host::Source::connect`]), `None` when the host cannot
    /// tell.
    fn connect(&self, lane: usize) -> PortFuture<Result<Option<Duration>, Cause>>;
    /// One Fetch to the source broker covering every partition asked, on connection `lane`
    /// (Fetches in flight together use different lanes), asking for at most `max_bytes`.
    fn fetch(
        &self,
        lane: usize,
        requests: Vec<PartitionFetch>,
        max_bytes: i32,
    ) -> PortFuture<Result<Fetched, Cause>>;
    /// Applies one partition's answer to its log ([`crate::host::apply_fetch`]), holding back
    /// batches of a leader epoch above `epochs.destination`, and only while the topic is the
    /// one of `epochs.topic_id`.
    fn apply(
        &self,
        key: &TopicPartition,
        request: FetchRequest,
        response: FetchResponse,
        epochs: FetchEpochs,
    ) -> PortFuture<Result<FetchProgress, Cause>>;
    /// What the pacing measured and decided over an interval (for the metrics).
    fn paced(&self, report: &PacingReport);
    /// `bytes` fetched ahead of a partition's log end are being applied (for the metrics).
    fn applied_ahead(&self, bytes: u64);
}

/// One partition of a Fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionFetch {
    /// The partition.
    pub key: TopicPartition,
    /// Where to read from.
    pub request: FetchRequest,
    /// The source leader epoch it is fetched at (-1: unknown), sent as Kafka's
    /// `current_leader_epoch` so a source whose leadership moved says so.
    pub current_leader_epoch: i32,
    /// A Fetch ahead of the log end (from `request.offset`, with no last fetched epoch): its
    /// answer waits for the log end to reach it and says nothing about the partition's lag.
    pub ahead: bool,
}

/// Start fetching a partition; outcomes go to `progress`.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct AttachPartition {
    /// The partition.
    pub key: TopicPartition,
    /// Its actor.
    pub progress: Recipient<FetcherProgress>,
    /// The epochs it is fetched under.
    pub epochs: FetchEpochs,
}

/// The destination leader epoch of a partition rose (a leader epoch change in the metadata, a
/// bump answered): its batches up to `leader_epoch` are applied from now on. A lower epoch, or
/// a partition not attached, changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct RaiseDestinationEpoch {
    /// The partition.
    pub key: TopicPartition,
    /// Its destination leader epoch now.
    pub leader_epoch: i32,
}

/// Stop fetching a partition; `done` is told once no append for it can follow. Sent with
/// `do_send` ([`detach_partition`]), so it takes its place in the mailbox even when the
/// mailbox is full: an Attach sent after it always comes after it.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct DetachPartition {
    /// The partition.
    pub key: TopicPartition,
    /// Told when no append for it can follow.
    pub done: oneshot::Sender<()>,
}

/// Detaches `key` from `fetcher`: the answer resolves once no append for it can follow (or
/// the fetcher is gone, which appends nothing more).
pub fn detach_partition<P: FetcherPorts>(
    fetcher: &actix::Addr<Fetcher<P>>,
    key: TopicPartition,
) -> oneshot::Receiver<()> {
    let (done, detached) = oneshot::channel();
    fetcher.do_send(DetachPartition { key, done });
    detached
}

/// The partitions a fetcher serves and the one Fetch it has in flight.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "FetcherSnapshot")]
pub struct DescribeFetcher;

/// What [`DescribeFetcher`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetcherSnapshot {
    /// Attached partitions.
    pub partitions: Vec<TopicPartition>,
    /// Fetches sent so far.
    pub fetches: u64,
    /// Fetches in flight.
    pub in_flight: usize,
    /// Fetches the pacing allows in flight now.
    pub allowed: usize,
}

/// Where an attached partition's news goes, and who waits for its detach.
#[derive(Debug)]
struct Member {
    progress: Recipient<FetcherProgress>,
    /// Detach requests waiting for the apply in flight.
    detaching: Vec<oneshot::Sender<()>>,
    /// Attached again after those requests: the detach completes, the partition stays.
    attached_again: bool,
}

/// Fetcher settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetcherConfig {
    /// Most partitions in one Fetch.
    pub max_partitions_per_fetch: usize,
    /// Bytes asked per partition.
    pub partition_max_bytes: usize,
    /// Bytes asked per Fetch at most.
    pub response_max_bytes: usize,
    /// Most Fetches in flight.
    pub max_in_flight: usize,
    /// Pause after a Fetch that brought nothing.
    pub idle_backoff: Duration,
    /// Longest wait for the last Fetch's answers to be applied before the next Fetch goes out
    /// without the partitions still applying.
    pub apply_grace: Duration,
}

impl Default for FetcherConfig {
    fn default() -> Self {
        FetcherConfig {
            max_partitions_per_fetch: 500,
            partition_max_bytes: 1 << 20,
            response_max_bytes: 10 << 20,
            max_in_flight: 1,
            idle_backoff: Duration::from_millis(100),
            apply_grace: Duration::from_millis(50),
        }
    }
}

/// One fetcher.
pub struct Fetcher<P: FetcherPorts> {
    ports: Rc<P>,
    config: FetcherConfig,
    /// The partitions, their epochs and turns: every decision of the fetcher.
    state: FetchState,
    members: HashMap<TopicPartition, Member>,
    /// How many Fetches may be in flight and how large each is.
    pacing: FetchPacing,
    /// Lanes with a Fetch in flight, or resting after one that brought nothing.
    busy: BTreeSet<usize>,
    /// The busy lanes that carry a Fetch on the reserve ([`NEAR_RESERVE`]).
    reserved: BTreeSet<usize>,
    /// The reserved lanes whose Fetch asks only for quiet partitions ([`Kind::Quiet`]): one at
    /// a time.
    quiet: BTreeSet<usize>,
    /// Lanes that carried a Fetch before, or whose connection was opened ahead: the first on
    /// any other waits for its connection.
    used: BTreeSet<usize>,
    /// The reserve's lanes were asked to open ahead ([`lanes_to_open`]): it happens once.
    reserve_opened: bool,
    /// Lane 0's connection was asked for its quickest round trip: it happens once.
    connection_asked: bool,
    /// The quickest round trip lane 0's connection measured (ms; crate::fetch_lanes).
    connection_ms: Option<u64>,
    /// The quickest answer that showed a backlog (ms), not throttled, to a Fetch the source
    /// answered at once: the link's round trip with no wait at the source (crate::fetch_lanes).
    quickest_backlog_ms: Option<u64>,
    /// The reserve's size: [`NEAR_RESERVE`], less when the ceiling is under 16, none at 8 or
    /// less.
    reserve: usize,
    fetches: u64,
    /// Applies of the last answers still running, and since when.
    applying: usize,
    applying_since: Option<tokio::time::Instant>,
    /// A wake-up at the end of the apply grace is scheduled.
    grace_scheduled: bool,
    /// The fetcher's clock: holds are kept in milliseconds since this.
    started: tokio::time::Instant,
    /// A wake-up at the end of a partition's hold is scheduled for this time (ms).
    wake_at: Option<u64>,
    /// The last Fetch of partitions sorted by kind took the caught-up ones.
    caught_up_went_last: bool,
}

impl<P: FetcherPorts> std::fmt::Debug for Fetcher<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("members", &self.state.keys().collect::<Vec<_>>())
            .field("busy", &self.busy)
            .finish_non_exhaustive()
    }
}

impl<P: FetcherPorts> Fetcher<P> {
    /// A fetcher with no partitions.
    pub fn new(ports: P, config: FetcherConfig) -> Self {
        // The pacing keeps at least its initial 8 (or the ceiling, if lower); the reserve what
        // is left, up to its 8: a ceiling of 9 is 8 and 1, one of 16 or more gives the reserve
        // its 8.
        let paced = config
            .max_in_flight
            .saturating_sub(NEAR_RESERVE)
            .max(INITIAL_IN_FLIGHT)
            .min(config.max_in_flight);
        let reserve = config.max_in_flight - paced;
        Fetcher {
            ports: Rc::new(ports),
            config,
            state: FetchState::default(),
            members: HashMap::new(),
            pacing: FetchPacing::new(PacingLimits {
                max_in_flight: paced,
                response_max_bytes: i32::try_from(config.response_max_bytes).unwrap_or(i32::MAX),
                partition_max_bytes: i32::try_from(config.partition_max_bytes).unwrap_or(i32::MAX),
            }),
            busy: BTreeSet::new(),
            reserved: BTreeSet::new(),
            quiet: BTreeSet::new(),
            used: BTreeSet::new(),
            reserve_opened: false,
            connection_asked: false,
            connection_ms: None,
            quickest_backlog_ms: None,
            reserve,
            fetches: 0,
            applying: 0,
            applying_since: None,
            grace_scheduled: false,
            started: tokio::time::Instant::now(),
            wake_at: None,
            caught_up_went_last: false,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The round trip to the source that polls are timed by ([`link_round_trip_ms`]).
    fn round_trip_ms(&self) -> Option<u64> {
        link_round_trip_ms(
            self.pacing.round_trip_ms(),
            distance_ms(self.connection_ms, self.quickest_backlog_ms),
        )
    }

    /// Holds `key` for the idle backoff: its answer failed or was held back.
    fn hold(&mut self, key: &TopicPartition) {
        let backoff = u64::try_from(self.config.idle_backoff.as_millis()).unwrap_or(u64::MAX);
        self.state.hold(key, self.now_ms().saturating_add(backoff));
    }

    /// Schedules a wake-up at the end of the earliest hold, or when the next poll is due,
    /// unless one comes sooner.
    fn wake_for_holds(&mut self, ctx: &mut Context<Self>) {
        let now = self.now_ms();
        let Some(until) = self
            .state
            .next_wake(now, self.round_trip_ms(), self.lanes().reserve)
        else {
            return;
        };
        if self.wake_at.is_some_and(|at| at <= until && at > now) {
            return;
        }
        self.wake_at = Some(until);
        ctx.run_later(Duration::from_millis(until - now), move |fetcher, ctx| {
            if fetcher.wake_at == Some(until) {
                fetcher.wake_at = None;
            }
            fetcher.pump(ctx);
        });
    }

    /// Whether the next Fetch should wait for the applies still running (scheduling a wake-up
    /// at the end of the grace).
    fn hold_for_applies(&mut self, ctx: &mut Context<Self>) -> bool {
        if self.allowed() > 1 {
            return false;
        }
        let Some(since) = self.applying_since.filter(|_| self.applying > 0) else {
            return false;
        };
        let waited = since.elapsed();
        if waited >= self.config.apply_grace {
            return false;
        }
        if !self.grace_scheduled {
            self.grace_scheduled = true;
            ctx.run_later(self.config.apply_grace - waited, |fetcher, ctx| {
                fetcher.grace_scheduled = false;
                fetcher.pump(ctx);
            });
        }
        true
    }

    /// Reports to a partition's actor through its bounded mailbox.
    fn report(&self, ctx: &mut Context<Self>, key: &TopicPartition, progress: FetcherProgress) {
        if let Some(member) = self.members.get(key) {
            let sent = member.progress.send(progress);
            ctx.spawn(sent.into_actor(self).map(|_, _, _| ()));
        }
    }

    /// Fetches the pacing allows in flight now (no more than every partition's own and
    /// [`MAX_AHEAD`] ahead of each would take).
    fn allowed(&self) -> usize {
        self.pacing
            .in_flight(self.members.len().saturating_mul(1 + MAX_AHEAD))
    }

    /// What reading ahead may use now: the Fetches allowed, [`MAX_AHEAD`] per partition or
    /// their share among the partitions behind if larger (the last of a catch-up is not held to
    /// a few connections while the others stand idle), and the reserve while more than one is
    /// allowed (a fetcher down to one after a failure keeps none).
    fn lanes(&self) -> AheadLanes {
        let total = self.allowed();
        AheadLanes {
            per_partition: MAX_AHEAD.max(total / self.state.behind_count().max(1)),
            total,
            reserve: if total > 1 { self.reserve } else { 0 },
        }
    }

    /// Sends the polls that are due on the reserve's free lanes, then Fetches on free lanes
    /// while the pacing allows more in flight and some partition is ready, each for its share
    /// of the ready partitions; lanes to spare read ahead. With every lane the pacing allows
    /// busy, partitions near the source's end go on the reserve. Then sets the wake-up for the
    /// next hold's end or poll.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        self.open_lanes(ctx);
        while self.reserve_free() && self.send_poll(ctx) {}
        self.fill(ctx);
        self.wake_for_holds(ctx);
    }

    /// [`Self::pump`]'s Fetches but the polls.
    fn fill(&mut self, ctx: &mut Context<Self>) {
        loop {
            let allowed = self.allowed();
            let in_use = self.busy.len() - self.reserved.len();
            if in_use >= allowed {
                if self.reserve_free() && self.send_near(ctx) {
                    continue;
                }
                return;
            }
            if self.hold_for_applies(ctx) {
                return;
            }
            let free = allowed - in_use;
            let now = self.now_ms();
            let ready = self.state.ready(now);
            if ready > 0 {
                let share = ready
                    .div_ceil(free)
                    .min(self.config.max_partitions_per_fetch);
                // With several in flight, caught-up partitions go in a Fetch of their own first:
                // their new records never wait behind a backlog's bytes in the same answer. For
                // the last free lane the two kinds take turns: caught-up partitions long-polling
                // on every lane would otherwise keep a partition that is behind from being
                // fetched at all.
                let sent = if allowed > 1 {
                    let caught_up = (Kind::CaughtUp, self.config.max_partitions_per_fetch);
                    let behind = (Kind::Behind, share);
                    let order = if free > 1 || !self.caught_up_went_last {
                        [caught_up, behind]
                    } else {
                        [behind, caught_up]
                    };
                    order
                        .into_iter()
                        .any(|(kind, max_partitions)| self.send(max_partitions, kind, false, ctx))
                } else {
                    self.send(share, Kind::All, false, ctx)
                };
                if !sent {
                    return;
                }
                continue;
            }
            // A lane free and no partition ready: read ahead of partitions with a backlog
            // (however many partitions there are: one far behind beside many idle ones must not
            // be held to one window per round trip); else the reserve's pieces of a partition
            // near the source's end.
            let sent =
                self.send_ahead(false, ctx) || (self.reserve_free() && self.send_ahead(true, ctx));
            if !sent {
                self.wake_for_holds(ctx);
                return;
            }
        }
    }

    /// Across a distant link, opens the connections of the reserve's lanes
    /// ([`lanes_to_open`]) that no Fetch used yet, each once: a lane whose connection opened
    /// counts as used. One that failed to open is left to its first Fetch, which reports why.
    fn open_lanes(&mut self, ctx: &mut Context<Self>) {
        if self.reserve_opened || self.reserve == 0 {
            return;
        }
        if !self.connection_asked {
            // Lane 0 carries the first Fetch anyway: asking it opens no connection of its own.
            self.connection_asked = true;
            let connect = self.ports.connect(0);
            ctx.spawn(connect.into_actor(self).map(|opened, fetcher, ctx| match opened {
                Ok(took) => {
                    fetcher.used.insert(0);
                    fetcher.connection_ms =
                        took.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
                    fetcher.open_lanes(ctx);
                }
                Err(cause) => {
                    tracing::debug!(reason = %cause.message, "lane 0's connection did not open");
                }
            }));
        }
        let lanes = lanes_to_open(
            distance_ms(self.connection_ms, self.quickest_backlog_ms),
            self.reserve,
        );
        self.reserve_opened = !lanes.is_empty();
        for lane in lanes {
            if self.used.contains(&lane) {
                continue;
            }
            let connect = self.ports.connect(lane);
            ctx.spawn(connect.into_actor(self).map(move |opened, fetcher, _| {
                match opened {
                    Ok(_) => {
                        fetcher.used.insert(lane);
                    }
                    Err(cause) => {
                        tracing::debug!(lane, reason = %cause.message, "a lane's connection did not open ahead");
                    }
                }
            }));
        }
    }

    /// Whether caught-up partitions, whose records a producer waits on, go on the reserve
    /// rather than the pacing's free lane ([`warm_reserve`]). Right after the pacing grew to
    /// 248 across 150 ms, a steady partition's Fetch went on a new lane and took 623 ms, where
    /// its others took 155. A new lane is the catch-up's to open, whose answers of many round
    /// trips hardly feel it.
    fn warm_reserve_instead(&self) -> bool {
        warm_reserve(
            self.used.contains(&self.free_lane(false)),
            self.reserve_free() && self.used.contains(&self.free_lane(true)),
            self.reserved.len(),
            self.state.polls_in_flight(None),
        )
    }

    /// Whether the reserve has a lane free.
    fn reserve_free(&self) -> bool {
        self.reserved.len() < self.lanes().reserve
    }

    /// On the reserve: one Fetch for the caught-up partitions that are ready (answered before)
    /// and not quiet, or else for the quiet ones while no Fetch of theirs holds a reserve lane
    /// (each would hold one for `fetch.wait.max.ms`; a lane resting after one counts), or else
    /// for one never answered (asking one piece: it may be far behind), or else for the
    /// nearest behind (the least left at the source), or else one ahead of the nearest that
    /// may have one; whether one went out.
    fn send_near(&mut self, ctx: &mut Context<Self>) -> bool {
        let max_partitions = self.config.max_partitions_per_fetch;
        self.send(max_partitions, Kind::Settled, true, ctx)
            || (self.quiet.is_empty() && self.send(max_partitions, Kind::Quiet, true, ctx))
            || self.send(1, Kind::Unanswered, true, ctx)
            || self.send(1, Kind::Nearest, true, ctx)
            || self.send_ahead(true, ctx)
    }

    /// On the reserve, the next poll at the source's end that is due ([`FetchState::next_poll`],
    /// once the round trip is measured); whether one went out.
    fn send_poll(&mut self, ctx: &mut Context<Self>) -> bool {
        let Some(round_trip_ms) = self.round_trip_ms() else {
            return false;
        };
        let now = self.now_ms();
        let (lanes, max_bytes) = (self.lanes(), self.config.partition_max_bytes);
        let Some((key, start, bytes)) = self.state.next_poll(round_trip_ms, lanes, max_bytes, now)
        else {
            return false;
        };
        self.dispatch_ahead(key, start, bytes, now, true, ctx)
    }

    /// Sends the next Fetch ahead ([`FetchState::next_ahead`]; with `near`, of a partition
    /// near the source's end, on the reserve; on a lane never used before, of a partition far
    /// from it, [`Reach::Far`]); whether one went out.
    fn send_ahead(&mut self, near: bool, ctx: &mut Context<Self>) -> bool {
        let now = self.now_ms();
        // Without a reserve every lane is the pacing's: near partitions' pieces open new ones
        // too, else they would never come but one per round trip.
        let reach = if near {
            Reach::Near
        } else if self.reserve == 0 || self.used.contains(&self.free_lane(false)) {
            Reach::Any
        } else {
            Reach::Far
        };
        let Some((key, start, bytes)) = self.state.next_ahead(self.lanes(), reach, now) else {
            return false;
        };
        self.dispatch_ahead(key, start, bytes, now, near, ctx)
    }

    /// Sends one Fetch ahead of `key` from `start` for `bytes` (on the reserve when
    /// `reserved`); whether it went out.
    fn dispatch_ahead(
        &mut self,
        key: TopicPartition,
        start: i64,
        bytes: usize,
        now: u64,
        reserved: bool,
        ctx: &mut Context<Self>,
    ) -> bool {
        let Some(epochs) = self.state.get(&key).map(|p| p.epochs) else {
            return false;
        };
        let request = FetchRequest {
            offset: start,
            last_fetched_epoch: None,
            max_bytes: bytes,
        };
        let fetch = PartitionFetch {
            key,
            request,
            current_leader_epoch: epochs.source,
            ahead: true,
        };
        self.dispatch(vec![(fetch, epochs.topic_id)], now, reserved, ctx);
        true
    }

    /// Sends one Fetch for at most `max_partitions` ready partitions of `kind` on the lowest
    /// free lane (on the reserve when `reserved`); whether one went out.
    fn send(
        &mut self,
        max_partitions: usize,
        kind: Kind,
        reserved: bool,
        ctx: &mut Context<Self>,
    ) -> bool {
        let reserved = reserved || (kind == Kind::CaughtUp && self.warm_reserve_instead());
        // Quiet partitions go on the reserve one Fetch at a time (`Self::send_near`).
        let kind = if reserved && kind == Kind::CaughtUp && !self.quiet.is_empty() {
            Kind::Settled
        } else {
            kind
        };
        let mut requests = Vec::new();
        let mut failed = Vec::new();
        let now = self.now_ms();
        // The partitions with a backlog one Fetch's bytes cover.
        let fetch_bytes = self.pacing.fetch_bytes(self.pacing.target());
        let per_fetch = (fetch_bytes as usize / self.config.partition_max_bytes.max(1)).max(1);
        let lanes = self.lanes();
        for key in self.state.next_round(max_partitions, per_fetch, kind, now) {
            let Some(partition) = self.state.get(&key) else {
                continue;
            };
            let current_leader_epoch = partition.epochs.source;
            match self.ports.next_fetch(&key) {
                Ok(mut request) => {
                    request.max_bytes =
                        self.state
                            .own_bytes(&key, self.config.partition_max_bytes, lanes);
                    requests.push(PartitionFetch {
                        key,
                        request,
                        current_leader_epoch,
                        ahead: false,
                    });
                }
                Err(cause) => failed.push((key, cause)),
            }
        }
        for (key, cause) in failed {
            self.hold(&key);
            self.report(ctx, &key, FetcherProgress(Err(cause)));
        }
        if requests.is_empty() {
            self.wake_for_holds(ctx);
            return false;
        }
        // The turns of the lanes the pacing allows; the reserve keeps none.
        match kind {
            Kind::CaughtUp if !reserved => self.caught_up_went_last = true,
            Kind::Behind => self.caught_up_went_last = false,
            _ => {}
        }
        // The incarnation each partition was asked under goes with its answer: a partition
        // detached and attached again for a new topic of its name meanwhile is not it.
        let sent: Vec<(PartitionFetch, uuid::Uuid)> = requests
            .into_iter()
            .map(|p| {
                self.state.sent(&p.key);
                let topic_id = self.state.get(&p.key).map(|s| s.epochs.topic_id);
                (p, topic_id.unwrap_or_default())
            })
            .collect();
        self.dispatch(sent, now, reserved, ctx);
        true
    }

    /// Sends `sent` as one Fetch on a free lane ([`Self::free_lane`]; counted on the reserve when
    /// `reserved`).
    fn dispatch(
        &mut self,
        sent: Vec<(PartitionFetch, uuid::Uuid)>,
        now: u64,
        reserved: bool,
        ctx: &mut Context<Self>,
    ) {
        let lane = self.free_lane(reserved);
        self.busy.insert(lane);
        let new_lane = self.used.insert(lane);
        if reserved {
            self.reserved.insert(lane);
            if sent
                .iter()
                .all(|(p, _)| !p.ahead && self.state.is_quiet(&p.key))
            {
                self.quiet.insert(lane);
            }
        }
        self.fetches += 1;
        let requests: Vec<PartitionFetch> = sent.iter().map(|(p, _)| p.clone()).collect();
        let at_once = requests
            .iter()
            .all(|p| self.state.has_records_at(&p.key, p.request.offset));
        // A Fetch ahead (one partition) may ask for a little more than the pacing's share, and
        // a partition behind for its span's slack beyond `fetch.max.bytes`
        // (`FetchState::own_bytes`): the Fetch's bytes hold all of it, else the source cuts the
        // last partition short of where its first Fetch ahead starts, leaving a gap.
        let asked = requests
            .iter()
            .map(|p| p.request.max_bytes)
            .max()
            .unwrap_or(0);
        let beyond: usize = requests
            .iter()
            .map(|p| {
                p.request
                    .max_bytes
                    .saturating_sub(self.config.partition_max_bytes)
            })
            .sum();
        let max_bytes = self
            .pacing
            .fetch_bytes(self.pacing.target())
            .saturating_add(i32::try_from(beyond).unwrap_or(i32::MAX))
            .max(i32::try_from(asked).unwrap_or(i32::MAX));
        tracing::trace!(
            lane,
            reserved,
            quiet = self.quiet.contains(&lane),
            partitions = ?requests
                .iter()
                .map(|p| (p.key.to_string(), p.request.offset, p.request.max_bytes, p.ahead))
                .collect::<Vec<_>>(),
            "a Fetch went out"
        );
        let fetch = self.ports.fetch(lane, requests, max_bytes);
        ctx.spawn(fetch.into_actor(self).map(move |answers, fetcher, ctx| {
            let answered_ms = fetcher.now_ms();
            let times = AnswerTimes {
                sent_ms: now,
                answered_ms,
                new_lane,
                at_once,
            };
            fetcher.answered(lane, times, sent, answers, ctx);
        }));
    }

    fn answered(
        &mut self,
        lane: usize,
        times: AnswerTimes,
        sent: Vec<(PartitionFetch, uuid::Uuid)>,
        answers: Result<Fetched, Cause>,
        ctx: &mut Context<Self>,
    ) {
        for (asked, _) in sent.iter().filter(|(p, _)| !p.ahead) {
            self.state.answered(&asked.key);
        }
        let fetched = match answers {
            Ok(fetched) => fetched,
            Err(cause) => {
                for (asked, _) in sent.iter().filter(|(p, _)| p.ahead) {
                    self.state
                        .ahead_answered(&asked.key, asked.request.offset, None);
                }
                // The whole Fetch failed. A source that is down or unreachable heals: as
                // Kafka's replica fetcher, the fetcher tries again after its backoff and its
                // partitions stay where they are (the host shows why they make no progress).
                // What cannot heal (credentials, configuration) fails every partition in it.
                if !cause.retryable {
                    for (asked, _) in sent.iter().filter(|(p, _)| !p.ahead) {
                        self.report(ctx, &asked.key, FetcherProgress(Err(cause.clone())));
                    }
                }
                self.pacing.failed();
                tracing::debug!(reason = %cause.message, "a Fetch failed: one in flight");
                self.rest(lane, ctx);
                return;
            }
        };
        let AnswerTimes {
            sent_ms,
            answered_ms,
            new_lane,
            at_once,
        } = times;
        if at_once && fetched.backlog && !fetched.throttled {
            let took_ms = answered_ms.saturating_sub(sent_ms);
            self.quickest_backlog_ms =
                Some(self.quickest_backlog_ms.map_or(took_ms, |q| q.min(took_ms)));
        }
        let read_ms = read_at(
            sent_ms,
            answered_ms,
            self.round_trip_ms(),
            new_lane,
            fetched.throttled,
        );
        if let Some(report) = self.pacing.answered(AnswerSample {
            sent_ms,
            answered_ms,
            size: fetched.bytes,
            backlog: fetched.backlog,
            throttled: fetched.throttled,
            new_lane,
        }) {
            tracing::debug!(
                in_flight = report.in_flight,
                rate = report.rate as u64,
                round_trip_ms = ?report.round_trip_ms,
                bytes_per_answer = report.bytes_per_answer,
                fetched_twice = self.state.fetched_twice(),
                pieces_ahead = ?self.state.pieces_ahead(),
                "the pacing's interval"
            );
            // A fetcher with no partition left (retired for new fetch settings, its source
            // broker no one's leader) hears its last answers late: the gauges of this mirror
            // and source broker are its successor's.
            if self.state.keys().next().is_some() {
                self.ports.paced(&report);
            }
        }
        tracing::trace!(
            lane,
            took_ms = answered_ms.saturating_sub(sent_ms),
            answers = ?fetched
                .answers
                .iter()
                .map(|(key, answer)| match answer {
                    Ok(FetchResponse::Records {
                        records,
                        high_watermark,
                        ..
                    }) => format!("{key} {} bytes, high watermark {high_watermark}", records.len()),
                    Ok(other) => format!("{key} {other:?}"),
                    Err(cause) => format!("{key} failed: {}", cause.message),
                })
                .collect::<Vec<_>>(),
            "a Fetch was answered"
        );
        // An incremental fetch session leaves out partitions with nothing new: a Fetch ahead
        // left out brought nothing, and must not be waited for.
        for (asked, _) in sent.iter().filter(|(p, _)| p.ahead) {
            if !fetched.answers.iter().any(|(key, _)| *key == asked.key) {
                // A poll with nothing new waited above the source's end: it overshot.
                self.state.overshot(&asked.key, asked.request.offset);
                self.state
                    .ahead_answered(&asked.key, asked.request.offset, None);
            }
        }
        // Whether an apply started, and whether the Fetch brought batches at all (one ahead
        // waiting for the log end did: its lane carries the next Fetch at once, it does not
        // rest as after an empty answer).
        let (mut applying, mut brought) = (false, false);
        for (key, answer) in fetched.answers {
            let Some((request, topic_id, ahead)) = sent
                .iter()
                .find(|(p, _)| p.key == key)
                .map(|(p, id)| (p.request, *id, p.ahead))
            else {
                continue;
            };
            let Some(epochs) = self.state.get(&key).map(|p| p.epochs) else {
                continue;
            };
            if ahead {
                brought |= matches!(&answer, Ok(r) if !response_is_empty(r));
                applying |= self.arrived_ahead(&key, request.offset, answer, read_ms, ctx);
                continue;
            }
            if let Ok(FetchResponse::Records {
                records,
                high_watermark,
                ..
            }) = &answer
            {
                self.state.own_answer(&key, !records.is_empty());
                let (span, end) = span_of(records, self.config.partition_max_bytes);
                let end = end.unwrap_or(request.offset);
                // What lies past a poll in flight is the poll's to bring.
                let to = self.state.unpolled_to(&key, end, *high_watermark);
                let backlog = FetchState::behind(request.offset, end, to);
                self.state
                    .noted(&key, request.offset, span, backlog, *high_watermark);
                if let Some(read_ms) = read_ms.filter(|_| !records.is_empty()) {
                    self.state
                        .saw_high_watermark(&key, *high_watermark, read_ms);
                }
            }
            let epochs = FetchEpochs { topic_id, ..epochs };
            match answer {
                Err(cause) => {
                    self.hold(&key);
                    self.report(ctx, &key, FetcherProgress(Err(cause)));
                }
                // Nothing to apply; a new source leader epoch is still news to the partition,
                // which keeps its own epoch ahead of it (DLE >= SLE) while the source is idle.
                Ok(FetchResponse::Records {
                    records,
                    source_leader_epoch,
                    ..
                }) if records.is_empty() => {
                    if let Some(source_leader_epoch) = source_leader_epoch
                        && self.state.source_epoch_news(&key, source_leader_epoch)
                    {
                        self.report(
                            ctx,
                            &key,
                            FetcherProgress(Ok(FetchProgress::HeldBack {
                                source_epoch: source_leader_epoch,
                            })),
                        );
                    }
                }
                Ok(response) => {
                    self.state.applying(&key);
                    applying = true;
                    self.applying += 1;
                    let apply = self.ports.apply(&key, request, response, epochs);
                    ctx.spawn(apply.into_actor(self).map(move |result, fetcher, ctx| {
                        fetcher.applied(&key, result, ctx);
                    }));
                }
            }
        }
        if applying {
            self.applying_since = Some(tokio::time::Instant::now());
        }
        if applying || brought {
            self.free(lane);
            self.pump(ctx);
        } else {
            self.rest(lane, ctx);
        }
    }

    fn applied(
        &mut self,
        key: &TopicPartition,
        result: Result<FetchProgress, Cause>,
        ctx: &mut Context<Self>,
    ) {
        self.applying = self.applying.saturating_sub(1);
        if self.applying == 0 {
            self.applying_since = None;
        }
        let Some(member) = self.members.get_mut(key) else {
            self.pump(ctx);
            return;
        };
        self.state.applied(key);
        let waiters = std::mem::take(&mut member.detaching);
        let progress = match result {
            Ok(FetchProgress::Idle | FetchProgress::Truncated { .. }) => None,
            news => Some(FetcherProgress(news)),
        };
        if !waiters.is_empty() {
            // Detached while applying: the apply is done, nothing of that attachment follows.
            // Its outcome is not reported: a partition attached again since starts afresh.
            if !std::mem::take(&mut member.attached_again) {
                self.remove(key);
            }
            for waiter in waiters {
                let _ = waiter.send(());
            }
            self.pump(ctx);
            return;
        }
        // Batches held back above the destination epoch come back unchanged until the
        // partition's bump raises it, and a failed apply fails again at once: the partition
        // waits out its hold (or the raise), rather than spin while the others go on.
        let appended = matches!(
            progress,
            Some(FetcherProgress(Ok(FetchProgress::Appended { .. })))
        );
        if matches!(
            progress,
            Some(FetcherProgress(Ok(FetchProgress::HeldBack { .. }) | Err(_)))
        ) {
            self.hold(key);
        } else if !appended {
            self.state.drop_ahead(key);
        }
        if let Some(progress) = progress {
            self.report(ctx, key, progress);
        }
        if appended {
            self.apply_ahead(key, ctx);
        }
        self.pump(ctx);
    }

    /// A Fetch ahead of `key` from `start` was answered (the source read its high watermark at
    /// `read_ms`, when known): its batches wait for the log end, or are applied at once if it
    /// is there already. Whether an apply started.
    fn arrived_ahead(
        &mut self,
        key: &TopicPartition,
        start: i64,
        answer: Result<FetchResponse, Cause>,
        read_ms: Option<u64>,
        ctx: &mut Context<Self>,
    ) -> bool {
        // A poll answered with nothing waited above the source's end (its high watermark, or
        // its last stable offset): it overshot as one answered OFFSET_OUT_OF_RANGE did.
        let overshot = match &answer {
            Ok(FetchResponse::OffsetOutOfRange { .. }) => true,
            Ok(response) => response_is_empty(response),
            Err(_) => false,
        };
        if overshot {
            self.state.overshot(key, start);
        }
        let keep = match answer {
            Ok(FetchResponse::Records {
                ref records,
                high_watermark,
                ..
            }) if high_watermark >= 0 && !records.is_empty() => {
                if let Some(read_ms) = read_ms {
                    self.state.saw_high_watermark(key, high_watermark, read_ms);
                }
                let (span, _) = span_of(records, self.config.partition_max_bytes);
                self.state.saw_span(key, span);
                answer.ok()
            }
            _ => None,
        };
        self.state.ahead_answered(key, start, keep);
        let idle = self
            .state
            .get(key)
            .is_some_and(|p| !p.applying && !p.fetching);
        idle && self.apply_ahead(key, ctx)
    }

    /// Applies what was fetched ahead of `key` from its log end on, if anything reaches it;
    /// whether an apply started.
    fn apply_ahead(&mut self, key: &TopicPartition, ctx: &mut Context<Self>) -> bool {
        let Some(epochs) = self.state.get(key).map(|p| p.epochs) else {
            return false;
        };
        let request = match self.ports.next_fetch(key) {
            Ok(request) => request,
            Err(_) => {
                self.state.drop_ahead(key);
                return false;
            }
        };
        let AheadAtLogEnd::Apply(response) = self.state.ahead_at(key, request.offset) else {
            return false;
        };
        if let FetchResponse::Records { records, .. } = &response {
            self.ports.applied_ahead(records.len() as u64);
        }
        self.state.applying(key);
        self.applying += 1;
        self.applying_since = Some(tokio::time::Instant::now());
        let key = key.clone();
        let apply = self.ports.apply(&key, request, response, epochs);
        ctx.spawn(apply.into_actor(self).map(move |result, fetcher, ctx| {
            fetcher.applied(&key, result, ctx);
        }));
        true
    }

    /// The lane the next Fetch goes on (on the reserve when `reserved`): the reserve's are
    /// lanes 1 to its size, the others lane 0 (which also carries the source's other requests)
    /// and those above the reserve's, the lowest free first. A partition near the source's end
    /// then finds its connection made (unless the source closed it when idle): the catch-up
    /// beside it takes the lanes the pacing adds, and a Fetch on a lane never used before
    /// waits two or three round trips more for its connection (lag spikes of 500-650 ms at
    /// 150 ms, every time the pacing grew).
    fn free_lane(&self, reserved: bool) -> usize {
        let free = |lane: &usize| !self.busy.contains(lane);
        let mut own = if reserved { 1..self.reserve + 1 } else { 0..1 };
        own.find(free)
            .or_else(|| (self.reserve + 1..).find(free))
            .unwrap_or_default()
    }

    /// After a Fetch with nothing to apply, or one that failed: its lane rests a little
    /// before it carries the next one (the other lanes go on).
    fn rest(&mut self, lane: usize, ctx: &mut Context<Self>) {
        ctx.run_later(self.config.idle_backoff, move |fetcher, ctx| {
            fetcher.free(lane);
            fetcher.pump(ctx);
        });
    }

    /// `lane` carries no Fetch any more.
    fn free(&mut self, lane: usize) {
        self.busy.remove(&lane);
        self.reserved.remove(&lane);
        self.quiet.remove(&lane);
    }

    fn remove(&mut self, key: &TopicPartition) {
        self.state.detach(key);
        self.members.remove(key);
    }
}

/// When a Fetch went out and came back (ms on the fetcher's clock), and whether its lane was
/// new (the answer waited for the connection too).
#[derive(Debug, Clone, Copy)]
struct AnswerTimes {
    sent_ms: u64,
    answered_ms: u64,
    new_lane: bool,
    /// Every partition was asked from below the high watermark its last answer showed: the
    /// source answered at once, it did not hold the Fetch (crate::fetch_lanes).
    at_once: bool,
}

/// Whether an answer carries no batches.
fn response_is_empty(response: &FetchResponse) -> bool {
    matches!(response, FetchResponse::Records { records, .. } if records.is_empty())
}

/// How a partition is read ahead, judged by an answer of it (batch headers only), and where
/// its whole batches end. An answer of `max_bytes` holds as many whole batches as fit (at least
/// one; the source cuts the rest inside a batch), so Fetches ahead start that many batches
/// apart.
fn span_of(records: &bytes::Bytes, max_bytes: usize) -> (Option<Span>, Option<i64>) {
    let mut batches = RecordBatches::new(records.clone());
    let mut first = None;
    let (mut end, mut count, mut whole_bytes, mut largest) = (0, 0, 0, 0);
    while let Some(Ok(batch)) = batches.next() {
        first = first.or(Some(batch.base_offset()));
        end = batch.next_offset();
        count += 1;
        largest = largest.max(batches.position() - whole_bytes);
        whole_bytes = batches.position();
    }
    let Some(first) = first else {
        return (None, None);
    };
    let batch = ((end - first) as f64 / f64::from(count)).round().max(1.0) as i64;
    let batch_bytes = (whole_bytes / count as usize).max(1);
    let per_answer = (max_bytes / batch_bytes).max(1) as i64;
    let slack = slack(batch_bytes, (count > 1).then_some(largest), per_answer);
    let span = Span {
        offsets: per_answer * batch,
        batch,
        batch_bytes,
        bytes: per_answer as usize * batch_bytes + slack,
        slack,
    };
    (Some(span), Some(end))
}

impl<P: FetcherPorts> Actor for Fetcher<P> {
    type Context = Context<Self>;
}

impl<P: FetcherPorts> Handler<AttachPartition> for Fetcher<P> {
    type Result = ();

    fn handle(&mut self, msg: AttachPartition, ctx: &mut Context<Self>) {
        self.state.attach(msg.key.clone(), msg.epochs);
        self.members
            .entry(msg.key)
            .and_modify(|member| {
                member.progress = msg.progress.clone();
                member.attached_again = !member.detaching.is_empty();
            })
            .or_insert(Member {
                progress: msg.progress,
                detaching: Vec::new(),
                attached_again: false,
            });
        self.pump(ctx);
    }
}

impl<P: FetcherPorts> Handler<RaiseDestinationEpoch> for Fetcher<P> {
    type Result = ();

    fn handle(&mut self, msg: RaiseDestinationEpoch, ctx: &mut Context<Self>) {
        self.state
            .raise_destination_epoch(&msg.key, msg.leader_epoch);
        self.pump(ctx);
    }
}

impl<P: FetcherPorts> Handler<DetachPartition> for Fetcher<P> {
    type Result = ();

    fn handle(&mut self, msg: DetachPartition, _: &mut Context<Self>) {
        let DetachPartition { key, done } = msg;
        let applying = self.state.get(&key).is_some_and(|p| p.applying);
        match self.members.get_mut(&key) {
            Some(member) if applying => {
                member.detaching.push(done);
                member.attached_again = false;
            }
            _ => {
                self.remove(&key);
                let _ = done.send(());
            }
        }
    }
}

impl<P: FetcherPorts> Handler<DescribeFetcher> for Fetcher<P> {
    type Result = actix::MessageResult<DescribeFetcher>;

    fn handle(&mut self, _: DescribeFetcher, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(FetcherSnapshot {
            partitions: self.state.keys().cloned().collect(),
            fetches: self.fetches,
            in_flight: self.busy.len(),
            allowed: self.allowed(),
        })
    }
}

#[cfg(test)]
mod distant_source;
#[cfg(test)]
mod tests;
