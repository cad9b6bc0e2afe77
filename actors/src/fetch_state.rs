//! One fetcher's partitions, in pure code: what each is fetched under, whether its last answer
//! is still being applied, what it was last told, and whose turn the next Fetch is. The
//! [`crate::actor::Fetcher`] shell asks [`FetchState::next_round`] which partitions go into a
//! Fetch and carries the answers out; everything it decides on is here, so the rules are
//! tested as tables (in the spirit of Kafka's `AbstractFetcherThreadTest`), without a runtime.
//!
//! Rules:
//! - A partition is in at most one Fetch in flight (`fetching`), however many the fetcher
//!   keeps in flight, and is fetched again only after its previous answer is applied
//!   (`applying`), so batches land in order and once.
//! - Fairness: a Fetch takes at most `max_partitions` partitions, starting after the last one
//!   the previous Fetch of the same kind of round ([`Kind`]) reached (round robin over the
//!   partitions in key order, each kind in its own turn). When one Fetch took all of its kind,
//!   the next starts one past the first it took: the order rotates either way, so a source that
//!   answers the partitions in the order asked under a byte limit cannot leave the later ones
//!   without data (Kafka's fetchers rotate the same way).
//! - Epochs: a partition is fetched at the source leader epoch it was attached with and its
//!   batches are applied up to the destination leader epoch its owner told last; a raise never
//!   lowers it.
//! - A source leader epoch is news to the partition once per new value.
//! - Reading ahead (docs/design.md §4, "Fetching across a WAN"): on lanes the fetcher's own
//!   Fetches leave free, a partition with a backlog also gets Fetches from offsets beyond its log
//!   end, at most `max_ahead` of them in flight and half as many again with their answers
//!   waiting (a gap's Fetch aside, below): the first inside the first batch the partition's own
//!   answer (its span's batches and their slack, [`FetchState::own_bytes`]) should not hold
//!   whole, or inside the last one it should hold for a piece, each next one an answer further
//!   (a piece, when the backlog is small:
//!   [`FetchState::pieces`]) or half a batch past where the one before it ended once that one
//!   came, each asking for its batches and a slack ([`slack`]; the source answers a
//!   Fetch from the batch holding its offset), and none from the high watermark the partition's
//!   answers showed or past it (the source has nothing there) but polls at the source's end
//!   ([`FetchState::next_poll`], [`crate::fetch_poll`]) and, for a partition near the end whose
//!   growth is not measured yet, one tail from that high watermark. A gap two answers leave
//!   between them is asked for before anything further ([`FetchState::next_ahead`]). Their
//!   answers wait here until the log end reaches them; then the batches from the log end on are
//!   applied as the answer to a fetch from there would be (the source returns the same batches
//!   from the one holding the offset asked), so the log still grows in order, without holes: an
//!   answer that starts above the log end waits for the gap's Fetch (or the partition's own,
//!   which stops at the first answer ahead) to fill the space, one that would start inside a
//!   batch is dropped. A partition is not fetched from its log end while a Fetch ahead from there
//!   is in flight. Anything but an append (a truncation, a hold, an attach, a detach) drops what
//!   is ahead.
//! - Holds: a partition whose answer failed, or whose batches were held back above the
//!   destination epoch, is not fetched until its hold ends (Kafka's follower delays a
//!   partition in error the same way), while the others go on; a raise of its destination
//!   epoch, or an attach, ends a hold at once. Time is an input: milliseconds on the caller's
//!   clock.

use crate::fetch_poll::{
    Growth, POLL_BEHIND_ROUND_TRIPS, POLL_MAX_BYTES, least_spacing_ms, most_polls, poll_offsets,
    poll_step, spacing_ms, worth_polling,
};
use crate::host::{FetchResponse, TopicPartition};
use bytes::Bytes;
use kmirror_protocol::batch::RecordBatches;
use std::collections::BTreeMap;
use std::ops::Bound;
use uuid::Uuid;

/// The incarnation and leader epochs a partition is fetched under. The partition's actor owns
/// the destination epoch and tells each rise; the pool owns the source epoch its leader lookup
/// found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchEpochs {
    /// The destination topic's id when the partition attached (nil: not known): an answer is
    /// applied only to that topic, not to one deleted and created again under its name.
    pub topic_id: Uuid,
    /// The source leader epoch (-1: unknown), sent as Kafka's `current_leader_epoch`.
    pub source: i32,
    /// The destination leader epoch: batches of a higher epoch are held back (DLE >= SLE).
    pub destination: i32,
}

/// One partition of a fetcher.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartitionFetchState {
    /// The epochs it is fetched under.
    pub epochs: FetchEpochs,
    /// An answer of it is being applied.
    pub applying: bool,
    /// A Fetch asking for it is in flight.
    pub fetching: bool,
    /// Not fetched before this time (ms), when held.
    held_until_ms: Option<u64>,
    /// The greatest source leader epoch told to the partition (-1: none yet).
    told_source_epoch: i32,
    /// Its log end, as last noted.
    log_end: Option<i64>,
    /// How far apart Fetches ahead start and the offsets of a batch, as the last answer
    /// showed, and whether the source had more.
    span: Option<Span>,
    backlog: bool,
    /// The source's high watermark, as its last answer showed (-1: none yet): a Fetch ahead
    /// from there or past it would bring nothing.
    high_watermark: i64,
    /// How fast the source's log grows, once an answer showed its high watermark.
    growth: Option<Growth>,
    /// The latest poll at the source's end: where it started and when it left (ms).
    polled: Option<(i64, u64)>,
    /// Its last own answer brought records ([`FetchState::own_answer`]).
    brought: bool,
}

/// How a partition is read ahead, judged by an answer of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Offsets between the starts of two Fetches ahead.
    pub offsets: i64,
    /// Offsets of one batch: a Fetch ahead from less than this past the log end is answered
    /// from the batch at the log end.
    pub batch: i64,
    /// Bytes of one batch.
    pub batch_bytes: usize,
    /// Bytes a Fetch ahead (or the partition's own) asks for: the batches between two starts
    /// and the slack, so each usually ends where the next begins; a gap left between two
    /// answers is fetched on its own ([`FetchState::next_ahead`]).
    pub bytes: usize,
    /// Bytes asked beyond the batches' own ([`slack`], as the answer that measured the span
    /// showed its batches).
    pub slack: usize,
}

impl Span {
    /// Bytes per offset, as its batches showed.
    fn per_offset(&self) -> f64 {
        self.batch_bytes.max(1) as f64 / self.batch.max(1) as f64
    }

    /// The bytes a Fetch asks for to bring `offsets` offsets from a batch's start: their
    /// batches' bytes and [`slack`], a batch at least.
    fn ask(&self, offsets: i64) -> usize {
        let bytes = (offsets.max(0) as f64 * self.per_offset()).ceil() as usize;
        bytes.saturating_add(self.slack).max(self.batch_bytes)
    }

    /// The most offsets a poll's step may hold ([`crate::fetch_poll::poll_step`]): what a poll
    /// of [`POLL_MAX_BYTES`] brings besides the batch its start falls in ([`Span::ask`] the
    /// other way round), a batch at least (larger batches cross in more round trips whatever
    /// is asked).
    fn most_poll_step(&self) -> i64 {
        let room = POLL_MAX_BYTES.saturating_sub(self.slack) as f64;
        ((room / self.per_offset()).floor() as i64 - self.batch).max(self.batch.max(1))
    }
}

/// The Fetches ahead in flight and answers ahead waiting that `in_flight` Fetches ahead allowed
/// may hold: half as many again. An answer that came before the ones below it waits without
/// holding a connection; counted as one in flight, it kept a connection idle
/// (docs/design.md §4, "Reading ahead").
fn with_waiting(in_flight: usize) -> usize {
    in_flight.saturating_add(in_flight / 2)
}

/// What a Fetch asks beyond the bytes of the batches it should bring, measured on an answer
/// whose largest batch came to `largest` bytes (`batch_bytes` on average): twice what `batches`
/// batches as large as that one would add, and an eighth of a batch at least; half a batch
/// at most, and when the answer held one batch (`largest` unknown). The source sends the bytes
/// asked for, cutting the last batch, so every byte of slack crosses the link for nothing:
/// half a batch on each answer of a catch-up's four even batches of 256 KiB was a ninth of
/// what crossed. Too little leaves a gap, fetched a round trip later, whenever the batches
/// come out larger than measured, as a steady producer's do (its linger closes them at any
/// size): theirs keep half a batch.
pub fn slack(batch_bytes: usize, largest: Option<usize>, batches: i64) -> usize {
    let most = batch_bytes / 2;
    let Some(largest) = largest else {
        return most;
    };
    let batches = usize::try_from(batches.max(1)).unwrap_or(usize::MAX);
    largest
        .saturating_sub(batch_bytes)
        .saturating_mul(2)
        .saturating_mul(batches)
        .max(batch_bytes / 8)
        .min(most)
}

/// Which partitions a Fetch ahead may be for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Any partition behind.
    Any,
    /// Only those near the source's end (on the reserve).
    Near,
    /// Only those not near it (on a lane never used before: its connection takes two or
    /// three round trips more to make, which a catch-up's answer of many round trips hardly
    /// feels, and a near partition's piece of one round trip, which every later piece waits
    /// for, would triple).
    Far,
}

impl Reach {
    fn admits(self, state: &PartitionFetchState) -> bool {
        match self {
            Reach::Any => true,
            Reach::Near => state.near(),
            Reach::Far => !state.near(),
        }
    }
}

/// A Fetch from offsets ahead of a partition's log end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ahead {
    /// In flight.
    InFlight,
    /// Answered: batches from the offset asked (or the batch holding it) on, `first` the
    /// first one's base offset and `end` past the last whole one.
    Arrived {
        /// The answer.
        response: FetchResponse,
        /// Where its first batch starts.
        first: i64,
        /// Where its last whole batch ends.
        end: i64,
    },
}

impl Ahead {
    /// Where the offsets this Fetch ahead, asked from `start`, accounts for begin: its first
    /// batch, or `start` when that batch begins past it (the source has nothing in between:
    /// compacted); `start` while in flight.
    fn covers_from(&self, start: i64) -> i64 {
        match self {
            Ahead::InFlight => start,
            Ahead::Arrived { first, .. } => (*first).min(start),
        }
    }
}

/// What the log end reaching the Fetches ahead gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AheadAtLogEnd {
    /// The batches from the log end on: apply them as the answer to a fetch from there.
    Apply(FetchResponse),
    /// A Fetch ahead from the log end is in flight: its answer will serve.
    Wait,
    /// Nothing ahead reaches the log end: fetch from it.
    Fetch,
}

/// Which partitions a round takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Any.
    All,
    /// Those whose last answer showed no backlog.
    CaughtUp,
    /// Those caught up that have been answered at least once: the reserve's. A partition not
    /// yet answered may be far behind, and its first answer fill `fetch.max.bytes` (at the
    /// start of a catch-up across 150 ms, 64 such partitions held the reserve for two seconds
    /// with answers of ten round trips, while a steady partition beside them waited). Quiet
    /// ones aside.
    Settled,
    /// Those caught up and answered whose source's log does not grow (its growth measured nil,
    /// its last own answer empty): their Fetch waits at the source for `fetch.wait.max.ms`
    /// and brings nothing. On the reserve they go one Fetch at a time: at the end of a
    /// catch-up across 50 ms beside 64 partitions, the finished ones long-polled there one
    /// lane each, five of eight lanes at once for 570 ms, and a steady partition's polls, down
    /// to two lanes, fell behind (lag up to 308 ms).
    Quiet,
    /// Those caught up never answered (they may be far behind).
    Unanswered,
    /// Those whose last answer showed a backlog.
    Behind,
    /// The one behind with the least left at the source, if near its end: a round of one,
    /// outside the turns (the reserve serves the nearest first).
    Nearest,
}

impl Kind {
    fn admits(self, state: &PartitionFetchState) -> bool {
        match self {
            Kind::All => true,
            Kind::CaughtUp => !state.backlog,
            Kind::Settled => !state.backlog && state.log_end.is_some() && !state.quiet(),
            Kind::Quiet => !state.backlog && state.log_end.is_some() && state.quiet(),
            Kind::Unanswered => !state.backlog && state.log_end.is_none(),
            Kind::Behind => state.backlog,
            Kind::Nearest => state.backlog && state.near(),
        }
    }
}

/// The Fetches a fetcher's lanes allow for reading ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AheadLanes {
    /// Fetches ahead of one partition in flight, at most; with its answers waiting, half as
    /// many again ([`with_waiting`]).
    pub per_partition: usize,
    /// Fetches the pacing allows in flight, each partition's own among them.
    pub total: usize,
    /// Fetches beyond `total` kept for partitions near the source's end (0: none kept): their
    /// own Fetches ask for one piece, and the rest of a small backlog is fetched ahead in
    /// pieces, on these lanes first.
    pub reserve: usize,
}

/// The fewest bytes a piece of a small backlog is fetched in (see [`PartitionFetchState`]'s
/// pieces): within one window of a distant source's connection (Kafka's default 100 KiB), so
/// each comes over in about one round trip.
pub const MIN_PIECE_BYTES: usize = 64 * 1024;

/// A piece of a partition near the source's end asks for one part in this many more than its
/// batches' measured bytes ([`PartitionFetchState`]'s pieces): fetched twice where
/// the records are as measured, a gap of a round trip where they are larger.
pub const NEAR_PIECE_MARGIN: f64 = 8.0;

/// The margin ([`NEAR_PIECE_MARGIN`]) a Fetch near the source's end asks beyond `bytes`.
fn near_margin(bytes: f64) -> usize {
    (bytes / NEAR_PIECE_MARGIN).ceil() as usize
}

/// The fewest batches a piece of a partition not near the source's end holds: a Fetch ahead
/// is answered from the batch holding its start and asks up to half a batch more than its piece
/// ([`slack`]), which would otherwise fetch the last of a catch-up of large batches up to
/// twice. A partition near the end takes one batch at least instead: it is small beside the
/// link, and its pieces must each cross a distant link in one round trip (four batches of a
/// steady producer's 64 KiB took three to five).
pub const MIN_PIECE_BATCHES: i64 = 4;

impl PartitionFetchState {
    /// How the partition is fetched now: its span, or, when what remains at the source (its
    /// high watermark past its log end) is less than `fetches` spans (more than one), `fetches`
    /// pieces of at least [`MIN_PIECE_BYTES`] and [`MIN_PIECE_BATCHES`] each (one batch near
    /// the source's end), so a small backlog comes over several connections at once instead
    /// of one window per round trip on one (a steady partition a little behind, or the last of
    /// a catch-up).
    fn piece(&self, fetches: usize) -> Option<Span> {
        let (span, end) = (self.span?, self.log_end?);
        if fetches <= 1 {
            return Some(span);
        }
        let batches = if self.near() { 1 } else { MIN_PIECE_BATCHES };
        let floor = ((MIN_PIECE_BYTES as f64 / span.per_offset()).ceil() as i64)
            .max(span.batch.saturating_mul(batches));
        let remaining = self.high_watermark.saturating_sub(end).max(0);
        let fetches = i64::try_from(fetches).unwrap_or(i64::MAX);
        let offsets = (remaining.saturating_add(fetches - 1) / fetches).max(floor);
        // Whole batches (the nearest count, one at least): the source answers whole batches,
        // so a piece of a batch and a bit ends a bit short, and the next, placed after that bit,
        // starts inside a batch it then fetches from the start, short at its end too; each
        // left a gap of a batch, fetched on its own a round trip later.
        let batch = span.batch.max(1);
        let offsets = ((offsets + batch / 2) / batch).max(1).saturating_mul(batch);
        if offsets >= span.offsets {
            return Some(span);
        }
        // Near the end, an eighth more: records come out larger than measured whenever the
        // producer's batches grow smaller (each carries its own framing), and a piece ending
        // short left a gap whose Fetch, a round trip later, held every answer after it (a
        // steady partition at 150 ms filled six such gaps in its first two seconds).
        let margin = if self.near() {
            near_margin(offsets as f64 * span.per_offset())
        } else {
            0
        };
        Some(Span {
            offsets,
            bytes: span.ask(offsets).saturating_add(margin),
            ..span
        })
    }

    /// Whether it is near the source's end: caught up, or behind by less than one answer of
    /// `fetch.max.bytes` (a steady partition a little behind, or the last of a catch-up). Its
    /// records are the ones whose lag readers watch, and it takes little of the link.
    fn near(&self) -> bool {
        !self.backlog
            || self
                .remaining()
                .is_some_and(|(left, span)| left < span.offsets)
    }

    /// What remains at the source past its log end, and its span, when both are known.
    fn remaining(&self) -> Option<(i64, Span)> {
        let (span, end) = (self.span?, self.log_end?);
        Some((self.high_watermark.saturating_sub(end).max(0), span))
    }

    /// Whether its source's log was measured not to grow (the lesser of the last two
    /// measurements, [`crate::fetch_poll::Growth`], is nil) and its last own answer brought
    /// nothing: written to again, it is settled at once, not after two measurements.
    fn quiet(&self) -> bool {
        !self.brought && self.growth.and_then(|g| g.per_ms()) == Some(0.0)
    }

    /// Whether a round at `now_ms` may ask for it: no Fetch of it in flight, no answer being
    /// applied, no hold.
    fn ready(&self, now_ms: u64) -> bool {
        !self.applying && !self.fetching && !self.held(now_ms)
    }

    fn held(&self, now_ms: u64) -> bool {
        self.held_until_ms.is_some_and(|until| until > now_ms)
    }

    /// How long after one poll the next leaves (ms), across a link of `round_trip_ms`
    /// ([`spacing_ms`]): a third of it, sooner when the partition's growth would make its polls
    /// ask more than [`POLL_MAX_BYTES`], never sooner than `least_ms`
    /// ([`FetchState::least_poll_spacing`]).
    fn poll_spacing(&self, round_trip_ms: u64, least_ms: u64) -> u64 {
        let per_ms = self.growth.and_then(|g| g.per_ms()).unwrap_or(0.0);
        let most_step = self.span.map_or(i64::MAX, |span| span.most_poll_step());
        spacing_ms(round_trip_ms, per_ms, most_step, least_ms)
    }

    /// Whether it is polled at the source's end across a link of `round_trip_ms`
    /// ([`worth_polling`]: fast, across a distant link), caught up, or behind by less than
    /// [`POLL_BEHIND_ROUND_TRIPS`] round trips' growth below the high watermark seen: one
    /// further behind, after a burst or a stall, has its backlog read in pieces first, on every
    /// lane of the reserve. Caught up is what its answers said (judged up to the first poll
    /// past their end, `FetchState::unpolled_to`): polled whenever far below the high
    /// watermark seen, a partition after its producer's start-up batches and the mirror's
    /// first epoch bump was read in pieces of a whole answer for 6-8 s at 150 ms, lagging
    /// 1-2 s, where polls beside the pieces caught it up in 2.
    fn pollable(&self, round_trip_ms: u64) -> bool {
        let (Some(growth), Some(span), Some(end)) = (self.growth, self.span, self.log_end) else {
            return false;
        };
        growth.per_ms().is_some_and(|per_ms| {
            worth_polling(per_ms, span.batch, round_trip_ms)
                && (!self.backlog
                    || self.high_watermark.saturating_sub(end) as f64
                        <= per_ms * round_trip_ms as f64 * POLL_BEHIND_ROUND_TRIPS)
        })
    }
}

/// The batches of `response` from `offset` on, as a fetch from there would be answered; `None`
/// when none lies past it, `offset` falls inside a batch (the answer does not line up with the
/// log), or, unless `gap` allows it (the answer was asked from `offset` or below, so offsets
/// missing before its first batch are the source's: compaction), its first batch starts past
/// `offset`.
fn from_offset(response: &FetchResponse, offset: i64, gap: bool) -> Option<FetchResponse> {
    let FetchResponse::Records {
        records,
        high_watermark,
        source_leader_epoch,
    } = response
    else {
        return None;
    };
    let mut batches = RecordBatches::new(records.clone());
    loop {
        let position = batches.position();
        let batch = batches.next()?.ok()?;
        if batch.next_offset() <= offset {
            continue;
        }
        if batch.base_offset() < offset || (!gap && batch.base_offset() > offset) {
            return None;
        }
        let rest: Bytes = records.slice(position..);
        return Some(FetchResponse::Records {
            records: rest,
            high_watermark: *high_watermark,
            source_leader_epoch: *source_leader_epoch,
        });
    }
}

/// Where the first batch of `response` starts and its last whole one ends; `None` when it
/// holds no whole batch.
fn edges(response: &FetchResponse) -> Option<(i64, i64)> {
    let FetchResponse::Records { records, .. } = response else {
        return None;
    };
    let mut batches = RecordBatches::new(records.clone()).map_while(Result::ok);
    let first = batches.next()?;
    let end = batches
        .last()
        .map_or(first.next_offset(), |b| b.next_offset());
    Some((first.base_offset(), end))
}

/// Whether a poll that would start at `stepped` (a poll's step past the one before it) starts
/// at the source's predicted end instead, the partition growing `per_ms` across a link of
/// `round_trip_ms` and its source's high watermark seen at `high_watermark`: when the source
/// already holds more than [`JUMP_ROUND_TRIPS`] of a round trip's growth past it (a burst, or
/// a partition whose polls start while it is read in pieces). Polls stepping there, each
/// a step and a half's growth past the one before, would gain on the log end by half the
/// growth: after half a megabyte written at once at 1 MB/s, polls stepped through it for 870
/// ms, lag up to 441 ms at 150 ms. Pieces bring the space between in a round trip.
fn jumps(high_watermark: i64, stepped: i64, per_ms: f64, round_trip_ms: u64) -> bool {
    high_watermark.saturating_sub(stepped) as f64 > per_ms * round_trip_ms as f64 * JUMP_ROUND_TRIPS
}

/// How many round trips' growth past a poll's step the source must hold for the poll to jump
/// ([`jumps`]): half. A partition whose polls start while it is read in pieces is a round
/// trip's growth behind or so; at two (or one), once measurements took a round trip, its first
/// polls stepped from its log end and took 600 ms to reach the source's end (lag up to 433 ms
/// at 150 ms in the model of `actor/fetcher/distant_source.rs`, 343 ms jumping), the space
/// below read in pieces meanwhile.
const JUMP_ROUND_TRIPS: f64 = 0.5;

/// A fetcher's partitions and the round-robin cursors.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FetchState {
    partitions: BTreeMap<TopicPartition, PartitionFetchState>,
    /// The key the last Fetch of each kind reached: the next one of that kind starts after
    /// it. One cursor for all kinds was moved by the rounds of the others in between (a round
    /// that fits moves it one key on, so the order rotates), and under a small
    /// `max_partitions` the same quiet partition came first in every round of the quiet ones,
    /// the others never asked.
    cursors: BTreeMap<Kind, TopicPartition>,
    /// Fetches ahead of each partition's log end, by the offset asked from.
    ahead: BTreeMap<TopicPartition, BTreeMap<i64, Ahead>>,
    /// The partitions whose last answer showed a backlog: what reading ahead searches, so a
    /// fetcher of many partitions, few behind, does not walk them all for each Fetch ahead.
    behind: std::collections::BTreeSet<TopicPartition>,
    /// Where the polls at the source's end of each partition started (those whose Fetch ahead
    /// is gone yet are dropped as new ones come: [`Self::polls_of`] reads them through the
    /// Fetches ahead).
    polls: BTreeMap<TopicPartition, std::collections::BTreeSet<i64>>,
    /// The latest poll of each partition that started at the source's predicted end rather
    /// than a step past the poll before it ([`jumps`]): what lies below it, past the polls
    /// before it, is a backlog.
    jumps: BTreeMap<TopicPartition, i64>,
    /// Bytes fetched ahead that the log end had passed when it reached them, so far.
    fetched_twice: u64,
}

impl FetchState {
    /// Starts fetching `key` under `epochs`; a partition attached again (its actor restarted,
    /// or moved back) keeps an apply in flight, which still finishes before it is fetched again,
    /// and is told its source epoch afresh.
    pub fn attach(&mut self, key: TopicPartition, epochs: FetchEpochs) {
        self.ahead.remove(&key);
        self.polls.remove(&key);
        let state = self.partitions.entry(key).or_insert(PartitionFetchState {
            epochs,
            applying: false,
            fetching: false,
            held_until_ms: None,
            told_source_epoch: -1,
            log_end: None,
            span: None,
            backlog: false,
            high_watermark: -1,
            growth: None,
            polled: None,
            brought: false,
        });
        state.epochs = epochs;
        state.held_until_ms = None;
        state.told_source_epoch = -1;
        // A new incarnation (a topic of the same name created again) grows from its own log.
        state.polled = None;
        state.growth = None;
    }

    /// Stops fetching `key`.
    pub fn detach(&mut self, key: &TopicPartition) {
        self.partitions.remove(key);
        self.ahead.remove(key);
        self.polls.remove(key);
        self.jumps.remove(key);
        self.behind.remove(key);
    }

    /// Whether the source had records at `offset` of `key` when its last answer was read (below
    /// the high watermark it showed): a Fetch from there is answered at once, not held as a
    /// long poll.
    pub fn has_records_at(&self, key: &TopicPartition, offset: i64) -> bool {
        self.partitions
            .get(key)
            .is_some_and(|state| offset < state.high_watermark)
    }

    /// The partition, if attached.
    pub fn get(&self, key: &TopicPartition) -> Option<&PartitionFetchState> {
        self.partitions.get(key)
    }

    /// The attached partitions, in key order.
    pub fn keys(&self) -> impl Iterator<Item = &TopicPartition> {
        self.partitions.keys()
    }

    /// The destination leader epoch of `key` rose to `leader_epoch`, ending a hold: batches
    /// held back may now be applied (a lower epoch changes nothing).
    pub fn raise_destination_epoch(&mut self, key: &TopicPartition, leader_epoch: i32) {
        if let Some(state) = self.partitions.get_mut(key)
            && leader_epoch > state.epochs.destination
        {
            state.epochs.destination = leader_epoch;
            state.held_until_ms = None;
        }
    }

    /// `key` is not fetched before `until_ms`; what was fetched ahead of it is dropped.
    pub fn hold(&mut self, key: &TopicPartition, until_ms: u64) {
        if let Some(state) = self.partitions.get_mut(key) {
            state.held_until_ms = Some(until_ms);
        }
        self.drop_ahead(key);
    }

    /// The shortest spacing of any partition's polls across a link of `round_trip_ms` with a
    /// reserve of `reserve` lanes ([`least_spacing_ms`]: the partitions polled together share
    /// the polls the reserve allows in flight). Counted once per decision, not per partition.
    fn least_poll_spacing(&self, round_trip_ms: u64, reserve: usize) -> u64 {
        let polled = self
            .partitions
            .values()
            .filter(|s| s.pollable(round_trip_ms))
            .count();
        least_spacing_ms(round_trip_ms, polled, most_polls(reserve, false))
    }

    /// When the earliest hold ends, or the next poll is due across a link of `round_trip_ms`
    /// (when measured) with a reserve of `reserve` lanes, after `now_ms`.
    pub fn next_wake(
        &self,
        now_ms: u64,
        round_trip_ms: Option<u64>,
        reserve: usize,
    ) -> Option<u64> {
        let least = round_trip_ms.map(|rt| self.least_poll_spacing(rt, reserve));
        let polls = self.partitions.values().filter_map(|state| {
            let ((_, sent_ms), round_trip_ms, least) = (state.polled?, round_trip_ms?, least?);
            state
                .pollable(round_trip_ms)
                .then(|| sent_ms.saturating_add(state.poll_spacing(round_trip_ms, least)))
        });
        self.partitions
            .values()
            .filter_map(|state| state.held_until_ms)
            .chain(polls)
            .filter(|until| *until > now_ms)
            .min()
    }

    /// An answer of `key` (its own or one ahead) showed the source's `high_watermark`, read
    /// at `read_ms`: what its growth is measured from.
    pub fn saw_high_watermark(&mut self, key: &TopicPartition, high_watermark: i64, read_ms: u64) {
        if high_watermark < 0 {
            return;
        }
        if let Some(state) = self.partitions.get_mut(key) {
            match &mut state.growth {
                Some(growth) => growth.saw(high_watermark, read_ms),
                None => state.growth = Some(Growth::new(high_watermark, read_ms)),
            }
        }
    }

    /// The Fetch ahead of `key` from `start` was answered OFFSET_OUT_OF_RANGE, or with nothing
    /// (it waited above the high watermark or the last stable offset): if it is a poll, it
    /// overshot the source's log end, and the growth is measured afresh, from the next
    /// answers, before the next poll.
    pub fn overshot(&mut self, key: &TopicPartition, start: i64) {
        if !self.is_poll(key, start) {
            return;
        }
        if let Some(state) = self.partitions.get_mut(key) {
            state.growth = None;
        }
    }

    /// Where what `key`'s own Fetches and pieces must bring, from `end` on, ends at a source
    /// whose high watermark is `high_watermark`: there, or, if lower, at the poll that jumped
    /// to the source's end past a burst, while it is in flight or waiting past `end`, or else
    /// at the first poll in flight or waiting that starts past `end` (what lies past it is the
    /// polls' to bring, not a backlog).
    pub fn unpolled_to(&self, key: &TopicPartition, end: i64, high_watermark: i64) -> i64 {
        let jump = self
            .jumps
            .get(key)
            .copied()
            .filter(|jump| *jump > end && self.is_poll(key, *jump));
        jump.or_else(|| {
            self.polls_of(key)
                .map(|(start, _)| start)
                .find(|start| *start > end)
        })
        .map_or(high_watermark, |poll| poll.min(high_watermark))
    }

    /// The polls of `key` still in flight or waiting for the log end, in offset order: the
    /// Fetches ahead asked from a start [`Self::next_poll`] noted, unless a piece asked from
    /// there since.
    fn polls_of(&self, key: &TopicPartition) -> impl Iterator<Item = (i64, &Ahead)> {
        let starts = self.polls.get(key);
        self.ahead
            .get(key)
            .into_iter()
            .flatten()
            .filter(move |(start, _)| starts.is_some_and(|s| s.contains(start)))
            .map(|(start, ahead)| (*start, ahead))
    }

    /// Whether the Fetch ahead of `key` from `start` is a poll.
    pub fn is_poll(&self, key: &TopicPartition, start: i64) -> bool {
        self.polls_of(key).any(|(poll, _)| poll == start)
    }

    /// The polls in flight: of `key`, or of every partition.
    pub fn polls_in_flight(&self, key: Option<&TopicPartition>) -> usize {
        let in_flight = |key: &TopicPartition| {
            self.polls_of(key)
                .filter(|(_, ahead)| matches!(ahead, Ahead::InFlight))
                .count()
        };
        match key {
            Some(key) => in_flight(key),
            None => self.polls.keys().map(in_flight).sum(),
        }
    }

    /// The next poll at the source's end at `now_ms`, across a link of `round_trip_ms`
    /// ([`crate::fetch_poll`]), asking `max_bytes` at most: of the partition whose poll is the
    /// longest due among those that may be polled and are not held, within the polls the
    /// reserve allows ([`most_polls`], in all and of the partition; and twice the reserve in
    /// flight or waiting, of the partition: a slow apply does not pile answers up), whose
    /// predicted start lies past everything asked of it; the offset and bytes to ask. It
    /// counts as a Fetch ahead in flight.
    pub fn next_poll(
        &mut self,
        round_trip_ms: u64,
        lanes: AheadLanes,
        max_bytes: usize,
        now_ms: u64,
    ) -> Option<(TopicPartition, i64, usize)> {
        if self.polls_in_flight(None) >= most_polls(lanes.reserve, false) {
            return None;
        }
        let least = self.least_poll_spacing(round_trip_ms, lanes.reserve);
        let (key, start, bytes, jumped) = self
            .partitions
            .iter()
            .filter(|(_, state)| state.pollable(round_trip_ms) && !state.held(now_ms))
            .filter_map(|(key, state)| {
                let spacing = state.poll_spacing(round_trip_ms, least);
                let due = state.polled.map_or(0, |(_, at)| at.saturating_add(spacing));
                let ahead = self.ahead.get(key);
                if due > now_ms
                    || self.polls_in_flight(Some(key)) >= most_polls(lanes.reserve, state.backlog)
                    || self.polls_of(key).count() >= 2 * lanes.reserve
                    || !self.has_room(key, lanes.per_partition)
                {
                    return None;
                }
                let (growth, span, end) = (state.growth?, state.span?, state.log_end?);
                let per_ms = growth.per_ms()?;
                // No further than a poll's step past the poll before it while that one is
                // ahead, or past the log end: a poll held back (by the lanes, or while the
                // partition was behind) would leave a gap from where the one before it ended.
                let anchor = state
                    .polled
                    .map(|(start, _)| start)
                    .filter(|start| ahead.is_some_and(|a| a.contains_key(start)))
                    .unwrap_or(end);
                let stepped = anchor.saturating_add(poll_step(per_ms, spacing));
                let predicted = growth.poll_start(now_ms, round_trip_ms, spacing)?;
                let start = if jumps(state.high_watermark, stepped, per_ms, round_trip_ms) {
                    predicted
                } else {
                    predicted.min(stepped)
                };
                let asked = ahead
                    .and_then(|a| a.keys().next_back().copied())
                    .unwrap_or(end)
                    .max(end);
                let offsets = poll_offsets(per_ms, spacing, span.batch);
                let bytes = span.ask(offsets).min(max_bytes);
                let jumped = start > stepped;
                (start > asked).then_some((due, key, start, bytes, jumped))
            })
            .min_by_key(|(due, _, _, _, _)| *due)
            .map(|(_, key, start, bytes, jumped)| (key.clone(), start, bytes, jumped))?;
        if let Some(state) = self.partitions.get_mut(&key) {
            state.polled = Some((start, now_ms));
            // What lies between the polls before it and this one is a backlog, read in pieces.
            if jumped {
                state.backlog = true;
                self.behind.insert(key.clone());
                self.jumps.insert(key.clone(), start);
            }
        }
        self.ahead
            .entry(key.clone())
            .or_default()
            .insert(start, Ahead::InFlight);
        // What the poll set holds of answers gone since is dropped as it grows.
        let ahead = &self.ahead;
        let polls = self.polls.entry(key.clone()).or_default();
        polls.retain(|start| ahead.get(&key).is_some_and(|a| a.contains_key(start)));
        polls.insert(start);
        Some((key, start, bytes))
    }

    /// The partitions the next Fetch asks for at `now_ms` (at most `max_partitions`, of them at
    /// most `max_backlogged` whose last answer showed a backlog, none being fetched, applied or
    /// held; only those of `kind`), in turn; the cursor of `kind`
    /// moves past them. A Fetch whose bytes cover a few backlogged partitions leaves the others
    /// to Fetches in flight beside it, instead of holding them with nothing to bring; and a
    /// caught-up partition asked apart from backlogged ones gets its new records without
    /// waiting behind a backlog's bytes in the same answer.
    pub fn next_round(
        &mut self,
        max_partitions: usize,
        max_backlogged: usize,
        kind: Kind,
        now_ms: u64,
    ) -> Vec<TopicPartition> {
        if kind == Kind::Nearest {
            return self
                .behind
                .iter()
                .filter_map(|key| self.partitions.get(key).map(|state| (key, state)))
                .filter(|(key, state)| {
                    kind.admits(state) && state.ready(now_ms) && !self.waits_ahead(key, state)
                })
                .min_by_key(|(_, state)| state.remaining().map(|(left, _)| left))
                .map(|(key, _)| vec![key.clone()])
                .unwrap_or_default();
        }
        let cursor = self.cursors.get(&kind);
        let after = cursor.map_or(Bound::Unbounded, Bound::Excluded);
        let before = cursor.map_or(Bound::Unbounded, Bound::Included);
        let wrapped = if cursor.is_some() { usize::MAX } else { 0 };
        let in_turn = self
            .partitions
            .range::<TopicPartition, _>((after, Bound::Unbounded))
            .chain(
                self.partitions
                    .range::<TopicPartition, _>((Bound::Unbounded, before))
                    .take(wrapped),
            );
        let mut round = Vec::new();
        let (mut first, mut reached, mut full, mut backlogged) = (None, None, false, 0);
        for (key, state) in in_turn {
            let ready = state.ready(now_ms) && !self.waits_ahead(key, state) && kind.admits(state);
            if round.len() == max_partitions
                || (ready && state.backlog && backlogged == max_backlogged)
            {
                full = true;
                break;
            }
            reached = Some(key);
            if ready {
                // The first taken, not the first walked: a kind of few partitions among many
                // rotates among its own.
                first = first.or(Some(key));
                round.push(key.clone());
                backlogged += usize::from(state.backlog);
            }
        }
        let next = if full { reached } else { first };
        if let Some(next) = next.cloned() {
            self.cursors.insert(kind, next);
        }
        round
    }

    /// How many partitions a round at `now_ms` could ask for.
    pub fn ready(&self, now_ms: u64) -> usize {
        self.partitions
            .iter()
            .filter(|(key, state)| state.ready(now_ms) && !self.waits_ahead(key, state))
            .count()
    }

    /// Whether a Fetch ahead whose answer will start at `key`'s log end is in flight (from the
    /// log end, or less than a batch past it).
    fn waits_ahead(&self, key: &TopicPartition, state: &PartitionFetchState) -> bool {
        let (Some(end), Some(ahead)) = (state.log_end, self.ahead.get(key)) else {
            return false;
        };
        let reach = state.span.map_or(1, |s| s.batch.max(1));
        ahead
            .range(..end.saturating_add(reach))
            .any(|(_, ahead)| matches!(ahead, Ahead::InFlight))
    }

    /// Whether a partition answered from `from` up to `end` is behind a source at
    /// `high_watermark`: more remains than the answer brought. A watermark a few records past
    /// the answer is what arrived while the source built it (Kafka reads the watermark after
    /// the records): that partition is caught up, and its next Fetch must not wait behind a
    /// backlog's bytes. An empty answer with records waiting (the Fetch's bytes went to the
    /// partitions before it) is behind.
    pub fn behind(from: i64, end: i64, high_watermark: i64) -> bool {
        high_watermark.saturating_sub(end) > end.saturating_sub(from).max(1)
    }

    /// What an answer of `key` showed: its log end after it, how to read it ahead, whether the
    /// source has more, and the source's high watermark.
    pub fn noted(
        &mut self,
        key: &TopicPartition,
        log_end: i64,
        span: Option<Span>,
        backlog: bool,
        high_watermark: i64,
    ) {
        if let Some(state) = self.partitions.get_mut(key) {
            state.log_end = Some(log_end);
            state.span = span.filter(|s| s.offsets > 0 && s.batch > 0).or(state.span);
            state.backlog = backlog;
            state.high_watermark = high_watermark;
            if backlog {
                self.behind.insert(key.clone());
            } else {
                self.behind.remove(key);
            }
        }
    }

    /// An answer ahead of `key` showed its batches as `span`: the pieces follow the batches
    /// the producer writes now (a partition read only ahead has no answer of its own to show
    /// them; one whose first answer held a producer's start-up batch of 140 records was read
    /// in pieces of three windows for good).
    pub fn saw_span(&mut self, key: &TopicPartition, span: Option<Span>) {
        if let (Some(state), Some(span)) = (
            self.partitions.get_mut(key),
            span.filter(|s| s.offsets > 0 && s.batch > 0),
        ) {
            state.span = Some(span);
        }
    }

    /// `key`'s own answer brought records (`brought`) or nothing.
    pub fn own_answer(&mut self, key: &TopicPartition, brought: bool) {
        if let Some(state) = self.partitions.get_mut(key) {
            state.brought = brought;
        }
    }

    /// Whether `key` is caught up and its source's log does not grow ([`Kind::Quiet`]).
    pub fn is_quiet(&self, key: &TopicPartition) -> bool {
        self.partitions
            .get(key)
            .is_some_and(|state| Kind::Quiet.admits(state))
    }

    /// Bytes fetched ahead so far that the log already held when it reached them (what
    /// consecutive answers overlapped by, and answers no longer needed).
    pub fn fetched_twice(&self) -> u64 {
        self.fetched_twice
    }

    /// Whether `key` may have one more Fetch ahead (a piece or a poll) with `per_partition`
    /// allowed: fewer in flight, polls included (each holds a connection), and fewer than half
    /// as many again with its answers waiting (each holds only memory).
    fn has_room(&self, key: &TopicPartition, per_partition: usize) -> bool {
        let ahead = self.ahead.get(key);
        let in_flight = ahead.map_or(0, |ahead| {
            ahead
                .values()
                .filter(|ahead| matches!(ahead, Ahead::InFlight))
                .count()
        });
        in_flight < per_partition && ahead.map_or(0, BTreeMap::len) < with_waiting(per_partition)
    }

    /// Fetches ahead in flight and answers ahead waiting, in all, polls aside.
    pub fn pieces_ahead(&self) -> (usize, usize) {
        let mut counts = (0, 0);
        for (key, ahead) in &self.ahead {
            let polls = self.polls.get(key);
            for (start, ahead) in ahead {
                if polls.is_some_and(|polls| polls.contains(start)) {
                    continue;
                }
                match ahead {
                    Ahead::InFlight => counts.0 += 1,
                    Ahead::Arrived { .. } => counts.1 += 1,
                }
            }
        }
        counts
    }

    /// How many partitions are behind (their last answer showed a backlog).
    pub fn behind_count(&self) -> usize {
        self.behind.len()
    }

    /// Into how many pieces a partition that is behind is cut: its own Fetch, and as many
    /// Fetches ahead as each partition behind can get (at most `max_ahead`) from the lanes to
    /// spare: the `max_total` Fetches allowed beyond one per partition.
    pub fn pieces(&self, max_ahead: usize, max_total: usize) -> usize {
        let spare = max_total.saturating_sub(self.partitions.len());
        let behind = self.behind.len();
        1 + max_ahead.min(spare / behind.max(1))
    }

    /// Into how many pieces `state` is cut when behind: the share of the lanes to spare
    /// ([`Self::pieces`]); near the source's end with a reserve kept, as many as it may have
    /// ahead (pieces of a window, [`MIN_PIECE_BYTES`], each crossing a distant link in one
    /// round trip: the reserve's lanes carry them first, lanes that free up the rest).
    fn pieces_of(&self, state: &PartitionFetchState, lanes: AheadLanes) -> usize {
        if lanes.reserve > 0 && state.near() {
            1 + lanes.per_partition
        } else {
            self.pieces(lanes.per_partition, lanes.total)
        }
    }

    /// The bytes `key`'s own Fetch asks for, `max_bytes` at most (or one batch, if larger, and
    /// a span's [`slack`] beyond that): when it is behind, its span's, or its
    /// first piece ([`Self::pieces_of`]), so the Fetches ahead take the rest at once; when it
    /// is caught up and lanes are kept for it, one piece of [`MIN_PIECE_BYTES`] (a batch at
    /// least), so what a round trip gathers crosses a distant link within one window and the
    /// rest comes in pieces beside it.
    pub fn own_bytes(&self, key: &TopicPartition, max_bytes: usize, lanes: AheadLanes) -> usize {
        let Some(state) = self.partitions.get(key) else {
            return max_bytes;
        };
        if !state.backlog {
            let piece = match (lanes.reserve, state.span) {
                (0, _) => max_bytes,
                (_, Some(span)) => MIN_PIECE_BYTES.max(span.batch_bytes).min(max_bytes),
                // Never answered: one piece finds out whether it is behind in one round trip,
                // instead of holding its lane for an answer of `fetch.max.bytes`.
                (_, None) => MIN_PIECE_BYTES.min(max_bytes),
            };
            // Up to the first Fetch ahead (a poll), however far, and the margin of a piece near
            // the end: a piece ending short of it left a gap of a batch or two, fetched a round
            // trip later while the polls' answers waited on it.
            return self.to_next_ahead(key, state).map_or(piece, |to| {
                to.saturating_add(near_margin(to as f64)).min(max_bytes)
            });
        }
        match (state.piece(self.pieces_of(state, lanes)), state.span) {
            (Some(piece), Some(span)) if piece != span => piece
                .bytes
                .saturating_sub(piece.slack)
                .clamp(piece.batch_bytes, max_bytes),
            // A span's batches and their slack, as a Fetch ahead asks: its first Fetch ahead
            // starts inside the batch after them. Asked for `max_bytes`, it held as many whole
            // batches as the span when they fit, and the first Fetch ahead, which had to start
            // inside the last of them lest a larger batch leave a gap, fetched that batch twice
            // (a batch of 256 KiB per own answer, 7.5% of what crossed at 50 ms beside 64).
            (Some(_), Some(span)) => span
                .bytes
                .min(max_bytes.max(span.batch_bytes).saturating_add(span.slack)),
            _ => max_bytes,
        }
        .min(self.to_next_ahead(key, state).unwrap_or(usize::MAX))
    }

    /// The bytes from `key`'s log end up to its first Fetch ahead, and [`slack`], when one lies
    /// past it: the partition's own Fetch stops there instead of fetching twice what that one
    /// brings (filling a gap an answer ahead left at the log end takes a batch or two).
    fn to_next_ahead(&self, key: &TopicPartition, state: &PartitionFetchState) -> Option<usize> {
        let (end, span) = (state.log_end?, state.span?);
        let next = self
            .ahead
            .get(key)?
            .iter()
            .map(|(start, ahead)| ahead.covers_from(*start))
            .find(|next| *next > end)?;
        Some(span.ask(next - end))
    }

    /// A gap between two answers ahead of `key` that nothing asks for yet: where it starts and
    /// the bytes to ask (up to the next answer's first batch, and [`slack`]; `most` at most).
    /// Filled before anything further ahead, as the log end cannot pass it.
    fn gap(
        &self,
        key: &TopicPartition,
        state: &PartitionFetchState,
        most: usize,
    ) -> Option<(i64, usize)> {
        let span = state.span?;
        let ahead = self.ahead.get(key)?;
        // How far the answers so far reach, while every one before is known (one in flight, a
        // gap's own included, covers what follows it). An answer whose first batch starts past
        // the offset asked covers from there: the source has nothing in between (compacted).
        let mut covered: Option<i64> = None;
        for (start, entry) in ahead {
            covered = match entry {
                Ahead::Arrived { end, .. } => {
                    let from = entry.covers_from(*start);
                    if let Some(to) = covered.filter(|to| *to < from) {
                        // One answer's bytes at most, or one piece's (a longer gap takes
                        // several in turn): the span may have been measured on smaller records
                        // than the gap holds, and near the source's end each Fetch must cross
                        // in a round trip.
                        return Some((to, span.ask(from - to).min(span.bytes).min(most)));
                    }
                    Some(covered.map_or(*end, |to| to.max(*end)))
                }
                Ahead::InFlight => None,
            };
        }
        None
    }

    /// The next Fetch ahead at `now_ms`: the partition with the fewest ahead (at most
    /// `lanes.per_partition` each and `lanes.total` in all in flight, and half as many again
    /// in flight or waiting, [`with_waiting`], but a gap's Fetch within the first limit alone;
    /// with [`Reach::Near`], only partitions near the source's end, within the reserve beyond
    /// that; with [`Reach::Far`], only the others) among those with a backlog, not held, whose log
    /// end and span are known, the offset to ask from (a piece past the last one asked, or
    /// near the log end; below the high watermark its last answer showed, since the source has
    /// nothing from there on) and the bytes to ask. It counts as in flight.
    pub fn next_ahead(
        &mut self,
        lanes: AheadLanes,
        reach: Reach,
        now_ms: u64,
    ) -> Option<(TopicPartition, i64, usize)> {
        let near = reach == Reach::Near;
        let most = lanes.total + if near { lanes.reserve } else { 0 };
        // Polls are bounded apart (`Self::next_poll`).
        let (in_flight, waiting) = self.pieces_ahead();
        if in_flight >= most {
            return None;
        }
        // A gap's Fetch may exceed what answers waiting may hold: those answers wait for it.
        let full = in_flight + waiting >= with_waiting(most);
        let max_ahead = lanes.per_partition;
        let (key, start, bytes) = self
            .behind
            .iter()
            .filter_map(|key| self.partitions.get(key).map(|state| (key, state)))
            .filter(|(_, state)| state.backlog && !state.held(now_ms) && reach.admits(state))
            .filter_map(|(key, state)| {
                let pieces = self.pieces_of(state, lanes);
                let (end, span) = (state.log_end?, state.piece(pieces)?);
                let ahead = self.ahead.get(key);
                let count = ahead.map_or(0, BTreeMap::len);
                // A gap between two answers ahead goes first, whatever the count: the log end
                // cannot pass it.
                if let Some((start, bytes)) = self.gap(key, state, span.bytes) {
                    return Some((i64::MIN, key, start, bytes));
                }
                if full || !self.has_room(key, max_ahead) {
                    return None;
                }
                // Each starts half a batch past where the one before it should end, so it is
                // answered from the batch that follows that one: the first inside the first batch
                // the partition's own answer (a span's batches and their slack, `own_bytes`)
                // should not hold whole, or, for a piece (whose own answer asks no slack), inside
                // the last batch it should hold; the next an answer (or a piece) on, or, after
                // one that came, half a batch past its end.
                // Polls at the source's end are not pieces: the pieces go on below them, up
                // to the high watermark.
                let bound = self.unpolled_to(key, end, state.high_watermark);
                let last = ahead.and_then(|a| a.range(..bound).next_back());
                let start = match last {
                    Some((_, Ahead::Arrived { end: to, .. })) if *to > end => {
                        to.saturating_add(span.batch / 2)
                    }
                    Some((last, _)) if *last > end => last.saturating_add(span.offsets),
                    _ if state.span == Some(span) => {
                        end.saturating_add(span.offsets + span.batch / 2)
                    }
                    _ => end.saturating_add(span.offsets - span.batch / 2),
                };
                // On the reserve the nearest goes first; elsewhere the fewest ahead.
                let order = if near {
                    state.remaining().map_or(i64::MAX, |(left, _)| left)
                } else {
                    i64::try_from(count).unwrap_or(i64::MAX)
                };
                if start >= bound && self.tails(key, state, bound) {
                    let bytes = POLL_MAX_BYTES.max(span.ask(span.batch));
                    return Some((order, key, bound, bytes));
                }
                (start < bound).then_some((order, key, start, span.bytes))
            })
            .min_by_key(|(order, _, _, _)| *order)
            .map(|(_, key, start, bytes)| (key.clone(), start, bytes))?;
        self.ahead
            .entry(key.clone())
            .or_default()
            .insert(start, Ahead::InFlight);
        if let Some(polls) = self.polls.get_mut(&key) {
            polls.remove(&start);
        }
        Some((key, start, bytes))
    }

    /// Whether `key`, its pieces reaching `bound` (the high watermark seen), is also fetched
    /// from there (a tail): near the source's end, its growth not measured yet (so not
    /// polled), read in pieces (a backlog its own Fetch alone brings is no burst), nothing
    /// asked from `bound` on. A producer's first burst is otherwise read in
    /// rounds: each round's pieces end at the high watermark the round before showed, and
    /// what came meanwhile waits for the next (a round trip and a half to two, 300-450 ms at
    /// 150 ms, for the second or so the growth takes to measure). The source answers the tail
    /// with what came since it read that watermark, or holds it until something comes.
    fn tails(&self, key: &TopicPartition, state: &PartitionFetchState, bound: i64) -> bool {
        state.near()
            && state.growth.and_then(|g| g.per_ms()).is_none()
            && self.ahead.get(key).is_some_and(|ahead| {
                ahead.range(..bound).next().is_some() && ahead.range(bound..).next().is_none()
            })
    }

    /// The Fetch ahead of `key` from `start` was answered: with batches to keep, or not
    /// (failed, empty, refused), which drops it.
    pub fn ahead_answered(
        &mut self,
        key: &TopicPartition,
        start: i64,
        answer: Option<FetchResponse>,
    ) {
        // An answer ahead shows the source's high watermark too: the next ones may reach it.
        if let (Some(FetchResponse::Records { high_watermark, .. }), Some(state)) =
            (&answer, self.partitions.get_mut(key))
        {
            state.high_watermark = state.high_watermark.max(*high_watermark);
        }
        let Some(ahead) = self.ahead.get_mut(key) else {
            return;
        };
        match answer {
            Some(response) if ahead.contains_key(&start) => match edges(&response) {
                Some((first, end)) => {
                    ahead.insert(
                        start,
                        Ahead::Arrived {
                            response,
                            first,
                            end,
                        },
                    );
                }
                None => {
                    ahead.remove(&start);
                }
            },
            _ => {
                ahead.remove(&start);
            }
        }
    }

    /// What is ahead of `key` once its log end is `log_end`: the batches from there on (taken
    /// out), a Fetch to wait for, or nothing (fetch from the log end). Fetches ahead from the
    /// log end or less than a batch past it may serve; answers the log end passed, or that
    /// cannot line up with it, are dropped.
    pub fn ahead_at(&mut self, key: &TopicPartition, log_end: i64) -> AheadAtLogEnd {
        let reach = match self.partitions.get_mut(key) {
            Some(state) => {
                state.log_end = Some(log_end);
                state.span.map_or(1, |s| s.batch.max(1))
            }
            None => 1,
        };
        let Some(ahead) = self.ahead.get_mut(key) else {
            return AheadAtLogEnd::Fetch;
        };
        // Those asked from up to a batch past the log end, and any answered whose first batch
        // starts at or below it (one asked from further on whose first batch came out longer
        // than the average).
        let near: Vec<i64> = ahead
            .iter()
            .filter(|(start, entry)| {
                **start < log_end.saturating_add(reach)
                    || matches!(entry, Ahead::Arrived { first, .. } if *first <= log_end)
            })
            .map(|(start, _)| *start)
            .collect();
        for start in near {
            match ahead.get(&start) {
                Some(Ahead::InFlight) => return AheadAtLogEnd::Wait,
                Some(Ahead::Arrived { response, .. }) => {
                    let rest = from_offset(response, log_end, start <= log_end);
                    let size = |r: &FetchResponse| match r {
                        FetchResponse::Records { records, .. } => records.len() as u64,
                        _ => 0,
                    };
                    // One asked from past the log end that does not start there yet may once
                    // the log end reaches it; one asked from below is done with.
                    if rest.is_some() || start <= log_end {
                        let used = rest.as_ref().map_or(0, size);
                        self.fetched_twice += size(response).saturating_sub(used);
                        ahead.remove(&start);
                    }
                    if let Some(rest) = rest {
                        self.caught_up_by(key, log_end, &rest);
                        return AheadAtLogEnd::Apply(rest);
                    }
                }
                None => {}
            }
        }
        AheadAtLogEnd::Fetch
    }

    /// `rest`, applied at `key`'s log end `log_end`, shows whether it is still behind: a
    /// partition read only ahead (its own Fetch waits for them) has no answer of its own to
    /// say it caught up.
    fn caught_up_by(&mut self, key: &TopicPartition, log_end: i64, rest: &FetchResponse) {
        let (Some((_, end)), FetchResponse::Records { high_watermark, .. }) = (edges(rest), rest)
        else {
            return;
        };
        let seen = self
            .partitions
            .get(key)
            .map_or(*high_watermark, |s| s.high_watermark.max(*high_watermark));
        let to = self.unpolled_to(key, end, seen);
        if let Some(state) = self.partitions.get_mut(key)
            && !FetchState::behind(log_end, end, to)
        {
            state.backlog = false;
            self.behind.remove(key);
        }
    }

    /// Drops what was fetched ahead of `key` (its log changed other than by an append).
    pub fn drop_ahead(&mut self, key: &TopicPartition) {
        self.ahead.remove(key);
        self.polls.remove(key);
        self.jumps.remove(key);
    }

    /// Fetches ahead of `key`, in flight or waiting.
    pub fn ahead_of(&self, key: &TopicPartition) -> usize {
        self.ahead.get(key).map_or(0, BTreeMap::len)
    }

    /// A Fetch asking for `key` went out: it is not fetched again until [`Self::answered`].
    pub fn sent(&mut self, key: &TopicPartition) {
        if let Some(state) = self.partitions.get_mut(key) {
            state.fetching = true;
        }
    }

    /// The Fetch asking for `key` was answered (or failed).
    pub fn answered(&mut self, key: &TopicPartition) {
        if let Some(state) = self.partitions.get_mut(key) {
            state.fetching = false;
        }
    }

    /// An answer of `key` is being applied: it is not fetched until [`Self::applied`].
    pub fn applying(&mut self, key: &TopicPartition) {
        if let Some(state) = self.partitions.get_mut(key) {
            state.applying = true;
        }
    }

    /// The answer of `key` was applied.
    pub fn applied(&mut self, key: &TopicPartition) {
        if let Some(state) = self.partitions.get_mut(key) {
            state.applying = false;
        }
    }

    /// Whether source leader epoch `epoch`, seen in an empty answer, is news to `key`'s
    /// partition (greater than any told); it counts as told.
    pub fn source_epoch_news(&mut self, key: &TopicPartition, epoch: i32) -> bool {
        match self.partitions.get_mut(key) {
            Some(state) if epoch > state.told_source_epoch => {
                state.told_source_epoch = epoch;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kmirror_protocol::testing::BatchSpec;

    const EPOCHS: FetchEpochs = FetchEpochs {
        topic_id: Uuid::nil(),
        source: 4,
        destination: 7,
    };

    fn lanes(per_partition: usize, total: usize) -> AheadLanes {
        AheadLanes {
            per_partition,
            total,
            reserve: 0,
        }
    }

    /// `key`'s growth measured at `per_ms`, the latest high watermark seen `high_watermark`,
    /// read at `read_ms`.
    fn measured(
        state: &mut FetchState,
        key: &TopicPartition,
        high_watermark: i64,
        read_ms: u64,
        per_ms: f64,
    ) {
        state.partitions.get_mut(key).expect("attached").growth =
            Some(Growth::measured(high_watermark, read_ms, per_ms));
    }

    fn key(topic: &str) -> TopicPartition {
        TopicPartition::new(topic, 0)
    }

    fn attached(topics: &[&str]) -> FetchState {
        let mut state = FetchState::default();
        for topic in topics {
            state.attach(key(topic), EPOCHS);
        }
        state
    }

    fn names(round: &[TopicPartition]) -> Vec<&str> {
        round.iter().map(|k| k.topic.as_str()).collect()
    }

    /// A span measured on an answer of one batch, whose slack is half a batch.
    fn span(offsets: i64, batch: i64, batch_bytes: usize, bytes: usize) -> Span {
        Span {
            offsets,
            batch,
            batch_bytes,
            bytes,
            slack: slack(batch_bytes, None, 1),
        }
    }

    /// The slack a Fetch asks beyond its batches: what the largest batch measured says, within
    /// an eighth and a half of a batch.
    #[test]
    fn the_slack_follows_how_much_the_batches_vary() {
        let batch = 256 * 1024;
        // (largest measured, batches asked, slack)
        let table = [
            (None, 4, batch / 2),
            (Some(batch), 4, batch / 8),
            (Some(batch + 1024), 4, batch / 8),
            (Some(batch + 6 * 1024), 4, 48 * 1024),
            (Some(batch + 16 * 1024), 4, batch / 2),
            (Some(batch * 2), 1, batch / 2),
        ];
        for (largest, batches, expected) in table {
            assert_eq!(
                slack(batch, largest, batches),
                expected,
                "{largest:?} x {batches}"
            );
        }
    }

    /// Behind or caught up, from what an answer brought and the watermark it showed.
    #[test]
    fn a_partition_is_behind_when_more_remains_than_its_answer_brought() {
        // (from, end, high watermark, behind)
        let table = [
            (100, 100, 100, false), // nothing new
            (100, 100, 101, false), // one record arrived while the source answered
            (100, 100, 102, true),  // an empty answer with records waiting
            (100, 150, 153, false), // a few arrived while it answered 50
            (100, 150, 200, false), // as much remains as it brought: nearly caught up
            (100, 150, 201, true),  // more remains than it brought
            (0, 1_000, 1_000_000, true),
        ];
        for (from, end, high_watermark, behind) in table {
            assert_eq!(
                FetchState::behind(from, end, high_watermark),
                behind,
                "{from}..{end} of {high_watermark}"
            );
        }
    }

    /// Rounds in turn: each row is the partitions being applied when the round is made, and
    /// the partitions it asks for.
    #[test]
    fn rounds_rotate_skip_what_is_applying_and_respect_the_limit() {
        type Row = (&'static [&'static str], usize, &'static [&'static str]);
        let table: [(&str, &[&str], &[Row]); 4] = [
            (
                "everything fits: the order still rotates by one",
                &["a", "b", "c"],
                &[
                    (&[], 10, &["a", "b", "c"]),
                    (&[], 10, &["b", "c", "a"]),
                    (&[], 10, &["c", "a", "b"]),
                ],
            ),
            (
                "a limit: the next round starts after the last one reached",
                &["a", "b", "c", "d", "e"],
                &[
                    (&[], 2, &["a", "b"]),
                    (&[], 2, &["c", "d"]),
                    (&[], 2, &["e", "a"]),
                ],
            ),
            (
                "a partition being applied is reached but not asked for",
                &["a", "b", "c"],
                &[(&["b"], 10, &["a", "c"]), (&["a", "b", "c"], 10, &[])],
            ),
            (
                "one being applied takes no place under the limit",
                &["a", "b", "c", "d"],
                &[(&["a"], 2, &["b", "c"]), (&[], 2, &["d", "a"])],
            ),
        ];
        for (case, topics, rows) in table {
            let mut state = attached(topics);
            for (applying, max, expected) in rows {
                for topic in topics {
                    state.applied(&key(topic));
                }
                for topic in *applying {
                    state.applying(&key(topic));
                }
                let round = state.next_round(*max, usize::MAX, Kind::All, 0);
                assert_eq!(names(&round), *expected, "{case}");
            }
        }
    }

    #[test]
    fn epochs_rise_and_attach_again_keeps_the_apply_in_flight() {
        let mut state = attached(&["a"]);
        state.raise_destination_epoch(&key("a"), 12);
        state.raise_destination_epoch(&key("a"), 9);
        state.raise_destination_epoch(&key("gone"), 30);
        assert_eq!(state.get(&key("a")).map(|s| s.epochs.destination), Some(12));
        assert!(state.get(&key("gone")).is_none());
        state.applying(&key("a"));
        state.attach(
            key("a"),
            FetchEpochs {
                topic_id: Uuid::nil(),
                source: 5,
                destination: 13,
            },
        );
        let a = state.get(&key("a")).copied();
        assert_eq!(a.map(|s| (s.applying, s.epochs.source)), Some((true, 5)));
        assert!(
            state.next_round(10, usize::MAX, Kind::All, 0).is_empty(),
            "still applying"
        );
    }

    /// Holds, in order: each row is an action and the round made after it at that time.
    #[test]
    fn a_held_partition_waits_for_its_hold_or_a_raise_while_the_others_go_on() {
        enum Step {
            Hold(&'static str, u64),
            Raise(&'static str, i32),
            Attach(&'static str),
            Nothing,
        }
        /// A case, the step, the time of the round, the round and the next wake-up.
        type Row = (
            &'static str,
            Step,
            u64,
            &'static [&'static str],
            Option<u64>,
        );
        let table: [Row; 7] = [
            (
                "held: the others go on",
                Step::Hold("a", 100),
                10,
                &["b"],
                Some(100),
            ),
            ("not yet", Step::Nothing, 99, &["b"], Some(100)),
            (
                "the hold ends on time",
                Step::Nothing,
                100,
                &["a", "b"],
                None,
            ),
            ("held again", Step::Hold("b", 300), 150, &["a"], Some(300)),
            (
                "a lower epoch leaves it held",
                Step::Raise("b", 7),
                160,
                &["a"],
                Some(300),
            ),
            (
                "a raise ends it",
                Step::Raise("b", 8),
                170,
                &["a", "b"],
                None,
            ),
            (
                "an attach ends it",
                Step::Attach("a"),
                180,
                &["a", "b"],
                None,
            ),
        ];
        let mut state = attached(&["a", "b"]);
        for (case, step, now, expected, wake) in table {
            match step {
                Step::Hold(topic, until) => state.hold(&key(topic), until),
                Step::Raise(topic, epoch) => state.raise_destination_epoch(&key(topic), epoch),
                Step::Attach(topic) => {
                    state.hold(&key(topic), 1_000);
                    state.attach(key(topic), EPOCHS);
                }
                Step::Nothing => {}
            }
            let mut round = names(&state.next_round(10, usize::MAX, Kind::All, now))
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>();
            round.sort();
            assert_eq!(round, *expected, "{case}");
            assert_eq!(state.next_wake(now, None, 0), wake, "{case}");
        }
    }

    #[test]
    fn a_source_epoch_is_news_once_per_new_value_and_afresh_after_an_attach() {
        let mut state = attached(&["a"]);
        let told: Vec<bool> = [3, 3, 2, 4]
            .iter()
            .map(|e| state.source_epoch_news(&key("a"), *e))
            .collect();
        assert_eq!(told, [true, false, false, true]);
        state.attach(key("a"), EPOCHS);
        assert!(
            state.source_epoch_news(&key("a"), 4),
            "a new actor hears it"
        );
        assert!(!state.source_epoch_news(&key("b"), 1), "not attached");
    }

    /// Batches of 10 records each from `from` to `to` (offsets), as one answer.
    fn batches(from: i64, to: i64) -> FetchResponse {
        FetchResponse::Records {
            records: kmirror_protocol::testing::batch_run(from, to, 10),
            high_watermark: 1_000,
            source_leader_epoch: None,
        }
    }

    fn first_and_end(at: &AheadAtLogEnd) -> Option<(i64, i64)> {
        let AheadAtLogEnd::Apply(FetchResponse::Records { records, .. }) = at else {
            return None;
        };
        let all: Vec<_> = RecordBatches::new(records.clone())
            .map_while(Result::ok)
            .collect();
        Some((all.first()?.base_offset(), all.last()?.next_offset()))
    }

    /// Reading ahead, step by step: where Fetches ahead start, what the log end reaching them
    /// gives, and when the partition's own Fetch waits for one.
    #[test]
    fn fetches_ahead_line_up_with_the_log_end_or_are_dropped() {
        let mut state = attached(&["a", "b"]);
        let a = key("a");
        let span = span(50, 10, 1, 4096);
        assert_eq!(
            state.next_ahead(lanes(4, 100), Reach::Any, 0),
            None,
            "nothing known of a backlog"
        );
        state.noted(&a, 90, Some(span), true, 1_000);
        let first = state.next_ahead(lanes(4, 100), Reach::Any, 0);
        assert_eq!(
            first,
            Some((a.clone(), 145, 4096)),
            "inside the first batch the partition's own answer (90 to 140) does not hold whole"
        );
        let second = state.next_ahead(lanes(4, 100), Reach::Any, 0);
        assert_eq!(second, Some((a.clone(), 195, 4096)), "an answer on");
        assert_eq!(state.ready(0), 2, "nothing ahead starts at the log end yet");
        // The one from 145 is answered from the batch holding it, at 140, two batches long.
        state.ahead_answered(&a, 145, Some(batches(140, 200)));
        // The partition's own answer ended short, at 130: the space is fetched first.
        assert_eq!(state.ahead_at(&a, 130), AheadAtLogEnd::Fetch);
        assert_eq!(
            state.ahead_of(&a),
            2,
            "kept for when the log end reaches it"
        );
        // At 150 it lines up.
        let at = state.ahead_at(&a, 150);
        assert_eq!(first_and_end(&at), Some((150, 200)), "{at:?}");
        // At 200 the one from 195 (in flight) reaches it: the partition waits for it.
        assert_eq!(state.ahead_at(&a, 200), AheadAtLogEnd::Wait);
        assert_eq!(state.ready(0), 1, "a waits for its Fetch ahead; b does not");
        assert_eq!(
            names(&state.next_round(10, usize::MAX, Kind::All, 0)),
            ["b"]
        );
        state.ahead_answered(&a, 195, Some(batches(190, 260)));
        let at = state.ahead_at(&a, 200);
        assert_eq!(first_and_end(&at), Some((200, 260)), "{at:?}");
        // An answer that would start inside a batch at the log end cannot line up: dropped.
        state.noted(&a, 250, Some(span), true, 1_000);
        let (_, start, _) = state
            .next_ahead(lanes(4, 100), Reach::Any, 0)
            .expect("ahead");
        assert_eq!(start, 305);
        state.ahead_answered(&a, start, Some(batches(300, 400)));
        assert_eq!(state.ahead_at(&a, 305), AheadAtLogEnd::Fetch);
        assert_eq!(state.ahead_of(&a), 0);
        // Failed or empty answers ahead are dropped; a hold drops everything ahead.
        let (_, start, _) = state
            .next_ahead(lanes(4, 100), Reach::Any, 0)
            .expect("ahead");
        state.ahead_answered(&a, start, None);
        assert_eq!(state.ahead_of(&a), 0);
        state.next_ahead(lanes(4, 100), Reach::Any, 0);
        state.hold(&a, 50);
        assert_eq!(state.ahead_of(&a), 0);
        assert_eq!(
            state.next_ahead(lanes(4, 100), Reach::Any, 10),
            None,
            "held"
        );
        assert!(
            state.next_ahead(lanes(4, 100), Reach::Any, 50).is_some(),
            "hold over"
        );
    }

    /// A source's log of batches of 10 records each, from offset 0, each record's value of
    /// `value_size` bytes.
    fn source_log(batches: i64, value_size: usize) -> Vec<Bytes> {
        (0..batches)
            .map(|i| {
                BatchSpec {
                    base_offset: i * 10,
                    records: 10,
                    value_size,
                    ..BatchSpec::default()
                }
                .build()
            })
            .collect()
    }

    /// What the source answers a Fetch from `offset` for `max_bytes`, as Kafka does: from the
    /// batch holding `offset`, every byte asked for, the last batch cut where the bytes end
    /// (the first one whole, however large).
    fn source_answer(log: &[Bytes], offset: i64, max_bytes: usize) -> FetchResponse {
        let from = usize::try_from(offset / 10).expect("an offset in the log");
        let mut records = BytesMut::new();
        for batch in &log[from..] {
            records.extend_from_slice(batch);
        }
        let first = log[from].len();
        records.truncate(max_bytes.max(first));
        FetchResponse::Records {
            records: records.freeze(),
            high_watermark: i64::try_from(log.len()).expect("a length") * 10,
            source_leader_epoch: None,
        }
    }

    /// The partition's own answer and its first Fetch ahead share no batch. Before, the own
    /// Fetch asked for `fetch.max.bytes` and the first Fetch ahead started inside the last
    /// batch that answer held, so each own answer's last batch crossed the link twice (a batch
    /// of 256 KiB per own answer, 7.5% of the bytes at 50 ms beside 64 partitions). Batches a
    /// fifth larger than measured leave a gap the own Fetch fills, not a batch fetched twice,
    /// with half a batch of slack (batches measured uneven) as with an eighth (even).
    #[test]
    fn a_partitions_own_answer_and_its_first_fetch_ahead_share_no_batch() {
        let measured = source_log(1, 100)[0].len();
        let (half, eighth) = (slack(measured, None, 1), slack(measured, Some(measured), 4));
        assert_eq!((half, eighth), (measured / 2, measured / 8));
        // Batches 4% larger than measured (105): four fit half a batch of slack, not an
        // eighth, whose answer stops at 30 and leaves a gap. Batches a sixth smaller (80): an
        // eighth's answer stops at 40, where half a batch's would take a fifth batch, inside
        // the first Fetch ahead's.
        for (value_size, slack_bytes, log_end_after_own) in [
            (100, half, 40),
            (125, half, 30),
            (100, eighth, 40),
            (125, eighth, 30),
            (105, half, 40),
            (105, eighth, 30),
            (80, eighth, 40),
        ] {
            let log = source_log(100, value_size);
            let mut state = attached(&["a"]);
            let a = key("a");
            // As `span_of` judges an answer of `fetch.max.bytes` (four batches and a bit).
            let max_bytes = 4 * measured + measured / 3;
            let span = Span {
                slack: slack_bytes,
                ..span(40, 10, measured, 4 * measured + slack_bytes)
            };
            state.noted(&a, 0, Some(span), true, 1_000);
            let own = state.own_bytes(&a, max_bytes, lanes(4, 100));
            assert_eq!(own, span.bytes, "four batches and the slack");
            let (_, start, bytes) = state
                .next_ahead(lanes(4, 100), Reach::Any, 0)
                .expect("a Fetch ahead");
            assert_eq!(
                start, 45,
                "inside the first batch the own answer does not hold"
            );
            let own_answer = source_answer(&log, 0, own);
            let (_, end) = edges(&own_answer).expect("whole batches");
            assert_eq!(
                end, log_end_after_own,
                "value size {value_size}, slack {slack_bytes}"
            );
            state.ahead_answered(&a, start, Some(source_answer(&log, start, bytes)));
            if end < 40 {
                // The own Fetch from the log end stops at the answer ahead, batch and all.
                assert_eq!(state.ahead_at(&a, end), AheadAtLogEnd::Fetch);
                state.noted(&a, end, Some(span), true, 1_000);
                let own = state.own_bytes(&a, max_bytes, lanes(4, 100));
                let (_, to) = edges(&source_answer(&log, end, own)).expect("whole batches");
                assert_eq!(to, 40, "the gap's batch, whole");
            }
            let at = state.ahead_at(&a, 40);
            assert_eq!(
                first_and_end(&at).map(|(first, _)| first),
                Some(40),
                "{at:?}"
            );
            assert_eq!(
                state.fetched_twice(),
                0,
                "value size {value_size}, slack {slack_bytes}"
            );
        }
        // Batches larger than `fetch.max.bytes`: one whole and half a batch, as a Fetch ahead
        // asks (half a batch beyond `fetch.max.bytes` would cut the only batch).
        let mut state = attached(&["a"]);
        let a = key("a");
        let span = span(10, 10, 3_000, 3_000 + slack(3_000, None, 1));
        state.noted(&a, 0, Some(span), true, 1_000);
        assert_eq!(state.own_bytes(&a, 1_000, lanes(4, 100)), 4_500);
        let (_, start, bytes) = state
            .next_ahead(lanes(4, 100), Reach::Any, 0)
            .expect("a Fetch ahead");
        assert_eq!((start, bytes), (15, 4_500), "from the second batch");
    }

    /// Every Fetch ahead the state gives now (16 per partition at most): where each starts and
    /// the bytes it asks for.
    fn aheads(state: &mut FetchState) -> Vec<(i64, usize)> {
        std::iter::from_fn(|| state.next_ahead(lanes(16, 100), Reach::Any, 0))
            .map(|(_, start, bytes)| (start, bytes))
            .collect()
    }

    /// Fetches ahead stop below the high watermark the partition's last answer showed: the
    /// source answers one from past its log end with an error, and one from the high watermark
    /// with nothing. Failed before the fix: a steady partition a little behind had 16 Fetches
    /// ahead in flight, up to 46,000 offsets past a source log end of 7,500, each holding a
    /// connection the catch-up beside it could use.
    #[test]
    fn fetches_ahead_stop_below_the_high_watermark() {
        let mut state = attached(&["a"]);
        let a = key("a");
        let span = span(50, 10, 1, 4096);
        let starts = |state: &mut FetchState| -> Vec<i64> {
            aheads(state).into_iter().map(|(start, _)| start).collect()
        };
        state.noted(&a, 90, Some(span), true, 200);
        assert_eq!(starts(&mut state), [145, 195]);
        state.drop_ahead(&a);
        state.noted(&a, 90, Some(span), true, 140);
        assert!(starts(&mut state).is_empty(), "the own Fetch reaches it");
        state.noted(&a, 90, Some(span), true, 400);
        assert_eq!(starts(&mut state), [145, 195, 245, 295, 345, 395]);
        // An answer ahead showing a higher watermark lets the next ones go further.
        let answer = |from, high_watermark| FetchResponse::Records {
            records: kmirror_protocol::testing::batch_run(from, from + 60, 10),
            high_watermark,
            source_leader_epoch: None,
        };
        state.ahead_answered(&a, 395, Some(answer(390, 400)));
        assert!(starts(&mut state).is_empty());
        state.ahead_answered(&a, 345, Some(answer(340, 500)));
        assert_eq!(
            starts(&mut state),
            [455],
            "half a batch past where the last answer ended"
        );
    }

    /// Answers ahead that leave a gap between them (batches larger than measured) get a Fetch
    /// for the gap before anything further; the next one after an answer starts half a batch
    /// past its end; the partition's own Fetch stops at its first answer ahead. Before: each
    /// Fetch ahead asked two batches more than its span so none left a gap, and with batches of
    /// 256 KiB a third of what crossed the link was fetched twice.
    #[test]
    fn a_gap_between_answers_ahead_is_fetched_before_anything_further() {
        let mut state = attached(&["a"]);
        let a = key("a");
        // Batches of 10 offsets and 1 KiB, answers of five.
        let span = span(50, 10, 1024, 5 * 1024 + 512);
        let lanes = lanes(4, 4);
        state.noted(&a, 90, Some(span), true, 1_000);
        assert_eq!(
            state.next_ahead(lanes, Reach::Any, 0),
            Some((a.clone(), 145, 5_632))
        );
        assert_eq!(
            state.next_ahead(lanes, Reach::Any, 0),
            Some((a.clone(), 195, 5_632))
        );
        // The second answered first; with one in flight before it, no gap can be told yet.
        state.ahead_answered(&a, 195, Some(batches(190, 240)));
        assert_eq!(
            state.next_ahead(lanes, Reach::Any, 0),
            Some((a.clone(), 245, 5_632)),
            "half a batch past the end of the last answer"
        );
        // The first ends short of the second, at 180: the gap, and a batch's half more.
        state.ahead_answered(&a, 145, Some(batches(140, 180)));
        assert_eq!(
            state.next_ahead(lanes, Reach::Any, 0),
            Some((a.clone(), 180, 1_536)),
            "the gap first"
        );
        // Answers waiting hold no connection: two more in flight, then none (four in flight).
        let more: Vec<i64> = std::iter::from_fn(|| state.next_ahead(lanes, Reach::Any, 0))
            .map(|(_, start, _)| start)
            .collect();
        assert_eq!(more, [295, 345], "the gap asked for once");
        // An own Fetch from 100 stops at the first answer ahead (from 140), not a span on.
        state.noted(&a, 100, Some(span), true, 1_000);
        assert_eq!(state.own_bytes(&a, 1 << 20, lanes), 4 * 1024 + 512);
        state.ahead_answered(&a, 180, Some(batches(180, 190)));
        for (log_end, until) in [(140, 180), (180, 190), (190, 240)] {
            let at = state.ahead_at(&a, log_end);
            assert_eq!(first_and_end(&at), Some((log_end, until)), "{at:?}");
        }
        assert_eq!(state.ahead_at(&a, 240), AheadAtLogEnd::Wait);

        // An answer whose first batch starts more than a batch before where it was asked from
        // (a long batch) serves once the log end reaches that batch, found by review: it was
        // skipped, and the own Fetch fetched it again.
        let mut state = attached(&["a"]);
        state.noted(&a, 90, Some(span), true, 1_000);
        let (_, start, _) = state.next_ahead(lanes, Reach::Any, 0).expect("ahead");
        assert_eq!(start, 145);
        state.ahead_answered(
            &a,
            145,
            Some(FetchResponse::Records {
                records: kmirror_protocol::testing::batch_run(125, 175, 25),
                high_watermark: 1_000,
                source_leader_epoch: None,
            }),
        );
        let at = state.ahead_at(&a, 125);
        assert_eq!(first_and_end(&at), Some((125, 175)), "{at:?}");

        // Offsets the source no longer has (compacted away) are no gap: the Fetch for a gap
        // answered from past where it asked covers the space, and is not asked again.
        let mut state = attached(&["a"]);
        state.noted(&a, 90, Some(span), true, 1_000);
        for start in [145, 195] {
            let (_, asked, _) = state.next_ahead(lanes, Reach::Any, 0).expect("ahead");
            assert_eq!(asked, start);
        }
        state.ahead_answered(&a, 145, Some(batches(140, 180)));
        state.ahead_answered(&a, 195, Some(batches(190, 240)));
        assert_eq!(
            state.next_ahead(lanes, Reach::Any, 0),
            Some((a.clone(), 180, 1_536))
        );
        state.ahead_answered(&a, 180, Some(batches(190, 200)));
        assert_eq!(
            state.next_ahead(lanes, Reach::Any, 0),
            Some((a.clone(), 245, 5_632)),
            "the space from 180 to 190 is not asked for again"
        );
        state.ahead_at(&a, 140);
        let at = state.ahead_at(&a, 180);
        assert_eq!(first_and_end(&at), Some((190, 200)), "{at:?}");
    }

    /// An answer ahead that came before the ones below it waits for them holding memory, not a
    /// connection: the Fetches ahead in flight are bounded by the limits, and with the answers
    /// waiting by half as many again, but a gap's Fetch, which the answers wait for, still goes
    /// (within the Fetches allowed in flight).
    /// Before, an answer waiting counted as a Fetch in flight: 40-114 of 248 connections stood
    /// idle at 150 ms beside 8 partitions.
    #[test]
    fn answers_waiting_hold_no_connection_and_half_as_many_again_at_most() {
        let span = span(50, 10, 1024, 5 * 1024 + 512);
        let a = key("a");
        // Two per partition, then two in all.
        for lanes in [lanes(2, 100), lanes(100, 2)] {
            let mut state = attached(&["a"]);
            state.noted(&a, 90, Some(span), true, 100_000);
            let mut next = || {
                state
                    .next_ahead(lanes, Reach::Any, 0)
                    .map(|(_, start, _)| start)
            };
            assert_eq!((next(), next(), next()), (Some(145), Some(195), None));
            state.ahead_answered(&a, 195, Some(batches(190, 240)));
            assert_eq!(
                state.next_ahead(lanes, Reach::Any, 0).map(|(_, s, _)| s),
                Some(245),
                "{lanes:?}: the answer waiting freed its connection"
            );
            state.ahead_answered(&a, 245, Some(batches(240, 290)));
            assert_eq!(
                state.next_ahead(lanes, Reach::Any, 0),
                None,
                "{lanes:?}: one in flight, three in all"
            );
            // The first ends short of the second, at 180: the gap goes, three waiting for it.
            state.ahead_answered(&a, 145, Some(batches(140, 180)));
            assert_eq!(
                state.next_ahead(lanes, Reach::Any, 0).map(|(_, s, _)| s),
                Some(180),
                "{lanes:?}: the gap"
            );
            assert_eq!(state.pieces_ahead(), (1, 3));
            assert_eq!(
                state.next_ahead(lanes, Reach::Any, 0),
                None,
                "{lanes:?}: nothing further"
            );
        }
    }

    /// A backlog of fewer spans than the partition's pieces (here 17: its own Fetch and 16
    /// ahead) is fetched in that many pieces of at least 64 KiB and four batches, so it crosses
    /// a distant link over as many connections at once; a partition caught up, or with no
    /// piece to spare, asks for its whole span.
    #[test]
    fn a_small_backlog_is_fetched_in_pieces_over_several_connections() {
        let mut state = attached(&["a"]);
        let a = key("a");
        // Batches of 10 records of 1 KiB; answers of 1 MiB hold 100 batches.
        let span = span(1_000, 10, 10 * 1024, 100 * 10 * 1024 + 5 * 1024);
        let starts = |state: &mut FetchState| -> Vec<(i64, usize)> {
            aheads(state)
                .into_iter()
                .map(|(start, bytes)| (start, bytes / 1024))
                .collect()
        };
        // 1,700 offsets behind: pieces of 100 offsets (100 KiB), each asking half a batch more.
        state.noted(&a, 0, Some(span), true, 1_700);
        assert_eq!(state.pieces(16, 100), 17);
        assert_eq!(state.own_bytes(&a, 1 << 20, lanes(16, 100)), 100 * 1024);
        assert_eq!(
            state.own_bytes(&a, 1 << 20, lanes(16, 1)),
            span.bytes,
            "no Fetches ahead: its whole span"
        );
        let pieces = starts(&mut state);
        assert_eq!(pieces.len(), 16);
        assert_eq!(pieces[0], (95, 105), "inside the own answer's last batch");
        assert_eq!(pieces[15], (1_595, 105));
        // 200 behind: pieces of about 64 KiB at least, in whole batches (60 offsets), and, its
        // growth not measured yet, a tail from the high watermark, of a poll's bytes at most.
        state.drop_ahead(&a);
        state.noted(&a, 0, Some(span), true, 200);
        // Near the end: an eighth more than its batches.
        assert_eq!(
            state.own_bytes(&a, 1 << 20, lanes(16, 100)),
            60 * 1024 + 60 * 1024 / 8
        );
        assert_eq!(
            starts(&mut state),
            [(55, 72), (115, 72), (175, 72), (200, 96)]
        );
        // Its growth measured: none from the high watermark on (polls go there, if any).
        state.drop_ahead(&a);
        measured(&mut state, &a, 200, 0, 0.1);
        assert_eq!(starts(&mut state), [(55, 72), (115, 72), (175, 72)]);
        // Far behind: whole spans, as before.
        state.drop_ahead(&a);
        state.noted(&a, 0, Some(span), true, 1_000_000);
        assert_eq!(state.own_bytes(&a, 1 << 20, lanes(16, 100)), span.bytes);
        assert_eq!(starts(&mut state)[..2], [(1_005, 1005), (2_005, 1005)]);
        // Caught up: its whole span (up to a Fetch ahead, were one past its log end).
        state.drop_ahead(&a);
        state.noted(&a, 0, Some(span), false, 5);
        assert_eq!(state.own_bytes(&a, 1 << 20, lanes(16, 100)), 1 << 20);
        // Batches of 100 KiB: pieces of four batches at least (the half batch more each Fetch
        // ahead asks for stays under an eighth).
        let large = self::span(1_000, 100, 100 * 1024, 10 * 100 * 1024 + 50 * 1024);
        state.drop_ahead(&a);
        state.noted(&a, 0, Some(large), true, 1_700);
        assert_eq!(state.own_bytes(&a, 1 << 20, lanes(16, 100)), 400 * 1024);
        assert_eq!(
            starts(&mut state),
            [(350, 450), (750, 450), (1_150, 450), (1_550, 450)]
        );
        // Near the source's end (less left than a span): pieces of one batch, each crossing a
        // distant link in about a round trip (before: one of four batches, 450 KiB, five round
        // trips through a 100 KiB window).
        state.drop_ahead(&a);
        state.noted(&a, 0, Some(large), true, 700);
        assert_eq!(
            state.own_bytes(&a, 1 << 20, lanes(16, 100)),
            100 * 1024 + 100 * 1024 / 8
        );
        assert_eq!(
            starts(&mut state),
            [50, 150, 250, 350, 450, 550, 650].map(|start| (start, 162))
        );
    }

    /// A partition behind gets as many pieces as the lanes to spare (beyond one per partition)
    /// give each partition behind, and one (its whole span) when there are none.
    #[test]
    fn pieces_follow_the_lanes_to_spare() {
        let mut state = attached(&["a", "b", "c", "d"]);
        let span = span(1_000, 10, 10 * 1024, 100 * 10 * 1024 + 5 * 1024);
        for topic in ["a", "b"] {
            state.noted(&key(topic), 0, Some(span), true, 1_000);
        }
        assert_eq!(state.pieces(16, 10), 4, "six to spare, for two behind");
        assert_eq!(state.pieces(2, 100), 3, "at most two ahead each");
        assert_eq!(state.pieces(16, 4), 1, "none to spare");
        assert_eq!(
            state.own_bytes(&key("a"), 1 << 20, lanes(16, 10)),
            250 * 1024
        );
        assert_eq!(
            state.own_bytes(&key("a"), 1 << 20, lanes(16, 4)),
            span.bytes,
            "its whole span"
        );
        assert_eq!(
            state.own_bytes(&key("c"), 1 << 20, lanes(16, 10)),
            1 << 20,
            "caught up"
        );
    }

    /// Lanes kept for partitions near the source's end: with none to spare, a steady partition
    /// a little behind is still cut into pieces of a window, and its Fetches ahead may use the
    /// reserve while a catch-up beside it may not; caught up, its own Fetch asks for one piece.
    #[test]
    fn partitions_near_the_end_are_fetched_in_pieces_on_the_lanes_kept_for_them() {
        let mut state = attached(&["catch-up", "steady"]);
        let span = span(1_000, 10, 10 * 1024, 100 * 10 * 1024 + 5 * 1024);
        let (far, near) = (key("catch-up"), key("steady"));
        state.noted(&far, 0, Some(span), true, 1_000_000);
        state.noted(&near, 0, Some(span), true, 500);
        let kept = AheadLanes {
            reserve: 4,
            ..lanes(16, 2)
        };
        assert_eq!(state.pieces(16, 2), 1, "no lane to spare");
        assert_eq!(
            state.own_bytes(&near, 1 << 20, kept),
            60 * 1024 + 60 * 1024 / 8
        );
        assert_eq!(
            state.own_bytes(&far, 1 << 20, kept),
            span.bytes,
            "far behind"
        );
        assert_eq!(
            state.own_bytes(&near, 1 << 20, lanes(16, 2)),
            span.bytes,
            "none kept"
        );
        // On a lane never used before, only the catch-up's: a piece of the steady partition
        // there would wait two or three round trips for the connection.
        let far_only: Vec<String> = std::iter::from_fn(|| state.next_ahead(kept, Reach::Far, 0))
            .map(|(k, _, _)| k.topic)
            .collect();
        assert_eq!(
            far_only,
            ["catch-up", "catch-up"],
            "two lanes, none to spare"
        );
        state.drop_ahead(&far);
        let picked: Vec<(String, i64)> =
            std::iter::from_fn(|| state.next_ahead(kept, Reach::Near, 0))
                .map(|(k, start, _)| (k.topic, start))
                .collect();
        assert_eq!(
            picked,
            [55, 115, 175, 235, 295, 355].map(|start| ("steady".to_string(), start)),
            "the steady partition's pieces of six batches, six: two lanes and the reserve's four"
        );
        assert_eq!(
            names(&state.next_round(10, usize::MAX, Kind::Nearest, 0)),
            ["steady"]
        );
        state.noted(&near, 500, Some(span), false, 505);
        assert_eq!(
            state.own_bytes(&near, 1 << 20, kept),
            64 * 1024,
            "caught up: one piece"
        );
    }

    #[test]
    fn a_fast_partition_at_the_end_is_polled_every_third_of_a_round_trip() {
        let mut state = attached(&["steady", "trickle", "behind"]);
        let span = Some(span(100, 10, 10 * 1024, 100 * 1024 + 5 * 1024));
        let (steady, trickle, behind) = (key("steady"), key("trickle"), key("behind"));
        state.noted(&trickle, 1_000, span, false, 1_000);
        state.noted(&behind, 1_000, span, true, 9_000);
        let lanes = AheadLanes {
            reserve: 5,
            ..lanes(32, 8)
        };
        let growing = [(&steady, 200), (&trickle, 10), (&behind, 200)];
        for (key, _) in growing {
            state.saw_high_watermark(key, 1_000, 0);
        }
        assert_eq!(
            state.next_poll(150, lanes, usize::MAX, 0),
            None,
            "growth not measured yet"
        );
        for (key, grown) in growing {
            measured(&mut state, key, 1_000 + grown, 200, grown as f64 / 200.0);
        }
        state.noted(&steady, 1_150, span, false, 1_200);
        // One offset per ms, read at 200 ms: the poll before (none yet, else at 150 ms)
        // reaches the source at 225 ms, 1,225, less 25; asking for a step (a spacing and a
        // half's growth, 75 offsets) and the batch its start falls in, and half a batch.
        let first = state.next_poll(150, lanes, usize::MAX, 200);
        assert_eq!(first, Some((steady.clone(), 1_200, 85 * 1024 + 5 * 1024)));
        assert_eq!(state.unpolled_to(&steady, 1_150, 1_300), 1_200);
        assert_eq!(
            state.next_poll(150, lanes, usize::MAX, 220),
            None,
            "the next is due at 250 ms"
        );
        assert_eq!(state.next_wake(220, Some(150), lanes.reserve), Some(250));
        let start =
            |state: &mut FetchState, now| state.next_poll(150, lanes, usize::MAX, now).map(|p| p.1);
        assert_eq!(start(&mut state, 250), Some(1_250));
        state.saw_high_watermark(&steady, 1_400, 400);
        assert_eq!(
            start(&mut state, 400),
            Some(1_325),
            "held back: a step past the poll before it, not 1,400"
        );
        // A poll past the log end: measured afresh before the next.
        state.overshot(&steady, 1_325);
        assert_eq!(start(&mut state, 450), None);
        state.saw_high_watermark(&steady, 1_600, 600);
        assert_eq!(
            start(&mut state, 600),
            None,
            "one sighting measures nothing"
        );
        state.saw_high_watermark(&steady, 1_800, 800);
        assert_eq!(
            start(&mut state, 800),
            None,
            "one measurement is not enough"
        );
        state.saw_high_watermark(&steady, 2_000, 1_000);
        assert_eq!(
            start(&mut state, 1_000),
            None,
            "three in flight: the reserve's lanes but two"
        );
        state.ahead_answered(&steady, 1_200, None);
        assert_eq!(start(&mut state, 1_000), Some(1_400));
        state.drop_ahead(&steady);
        assert_eq!(state.unpolled_to(&steady, 1_150, 1_300), 1_300);
        // Across 15 ms a round trip gathers under two batches: its own long poll serves.
        assert_eq!(state.next_poll(15, lanes, usize::MAX, 700), None);
    }

    /// A partition polled at the source's end whose log end falls behind (a poll overshot, a
    /// stall): its backlog is read in pieces below the polls, and it is not polled meanwhile.
    /// Failed with the pieces going on past the last poll below the high watermark: none went
    /// into the hole, and its own Fetch filled it one piece per round trip for seconds.
    #[test]
    fn the_pieces_of_a_backlog_go_below_the_polls() {
        let mut state = attached(&["steady"]);
        let steady = key("steady");
        let span = span(1_000, 10, 10 * 1024, 1_000 * 1024 + 5 * 1024);
        state.noted(&steady, 1_000, Some(span), false, 1_000);
        measured(&mut state, &steady, 1_700, 200, 1.0);
        let lanes = AheadLanes {
            reserve: 5,
            ..lanes(32, 8)
        };
        let polls: Vec<i64> = [200, 250, 300]
            .into_iter()
            .filter_map(|now| state.next_poll(150, lanes, usize::MAX, now).map(|p| p.1))
            .collect();
        assert_eq!(
            polls,
            [1_075, 1_150, 1_225],
            "a step apart from the log end on"
        );
        // Its own answer shows a backlog below the first poll, and the source's end past it.
        state.noted(&steady, 1_000, Some(span), true, 1_900);
        assert_eq!(
            state.next_poll(150, lanes, usize::MAX, 350),
            None,
            "no poll while behind"
        );
        let pieces: Vec<i64> = std::iter::from_fn(|| state.next_ahead(lanes, Reach::Near, 350))
            .map(|(_, start, _)| start)
            .collect();
        assert_eq!(pieces, [1_055], "below the first poll");
        assert_eq!(state.unpolled_to(&steady, 1_000, 1_900), 1_075);
    }

    /// One partition in batches of 16 KiB (16 offsets), grown by `grown` offsets in its first
    /// 200 ms and caught up at 200 ms, 10 below its high watermark, on a reserve of 8.
    fn polled_at(grown: i64) -> (FetchState, AheadLanes) {
        let mut state = attached(&["fast"]);
        let fast = key("fast");
        let span = Some(span(100, 16, 16 * 1024, 100 * 1024 + 8 * 1024));
        measured(&mut state, &fast, 1_000 + grown, 200, grown as f64 / 200.0);
        state.noted(&fast, 990 + grown, span, false, 1_000 + grown);
        let lanes = AheadLanes {
            reserve: 8,
            ..lanes(32, 8)
        };
        (state, lanes)
    }

    /// A polled partition whose source shows a burst (more than [`JUMP_ROUND_TRIPS`] of a round
    /// trip's growth past the next poll's step) is polled at the source's predicted end: what
    /// lies between is a backlog, fetched in pieces below that poll at once. Stepping there, a
    /// step and a half's growth at a time, polls gained on the log end half its growth per
    /// poll: half a megabyte at 1 MB/s took 870 ms across 150 ms.
    #[test]
    fn a_poll_jumps_past_a_burst_and_pieces_fill_below_it() {
        // One offset per ms, high watermark 1,200 read at 200 ms, log end 1,190.
        let (mut state, lanes) = polled_at(200);
        let fast = key("fast");
        let poll = |state: &mut FetchState, now| {
            state
                .next_poll(150, lanes, usize::MAX, now)
                .map(|(_, start, _)| start)
        };
        let first = poll(&mut state, 200).expect("polled");
        // Its answer: 96 offsets, and 700 written at once behind them.
        let answer = |high_watermark| FetchResponse::Records {
            records: kmirror_protocol::testing::batch_run(first, first + 96, 16),
            high_watermark,
            source_leader_epoch: None,
        };
        state.ahead_answered(&fast, first, Some(answer(1_900)));
        state.saw_high_watermark(&fast, 1_900, 275);
        assert_eq!(
            poll(&mut state, 250),
            Some(1_900),
            "not a step past {first}"
        );
        assert!(state.get(&fast).is_some_and(|s| s.backlog), "behind");
        assert_eq!(state.unpolled_to(&fast, first + 96, 1_950), 1_900);
        let pieces: Vec<i64> =
            std::iter::from_fn(|| state.next_ahead(lanes, Reach::Any, 250).map(|p| p.1)).collect();
        assert!(
            !pieces.is_empty()
                && pieces
                    .iter()
                    .all(|start| (first + 96..1_900).contains(start)),
            "pieces between the polls: {pieces:?}"
        );
        // A burst smaller than that (less than half a round trip's growth past the next
        // step: 48 ms apart, a step of 72 from 1,203) is stepped through, no gap left.
        let (mut state, _) = polled_at(200);
        assert_eq!(poll(&mut state, 200), Some(first));
        state.ahead_answered(&fast, first, Some(answer(1_340)));
        state.saw_high_watermark(&fast, 1_340, 275);
        let next = poll(&mut state, 250).expect("polled");
        assert!(next - first <= 75, "a step past {first}: {next}");
        assert!(!state.get(&fast).is_some_and(|s| s.backlog), "not behind");
    }

    /// A partition that grows faster than polls a third of a round trip apart can bring within
    /// a window is polled more often, each poll asking [`POLL_MAX_BYTES`] at most, and each
    /// starting no further than its step past the one before (no gap): polls of 126 KB took
    /// two round trips across 150 ms.
    #[test]
    fn a_faster_partition_is_polled_more_often_within_a_window() {
        // 1.28 offsets (1.3 KB) per ms: a step of 72 offsets at most, polls 37 ms apart.
        let (mut state, lanes) = polled_at(256);
        let mut sent: Vec<(u64, i64)> = Vec::new();
        for now in 200..=400 {
            if let Some((_, start, bytes)) = state.next_poll(150, lanes, usize::MAX, now) {
                assert!(bytes <= POLL_MAX_BYTES, "{bytes} bytes at {now} ms");
                sent.push((now, start));
            }
        }
        let times: Vec<u64> = sent.iter().map(|(at, _)| *at).collect();
        assert_eq!(times, [200, 237, 274, 311, 348, 385], "{sent:?}");
        assert!(
            sent.windows(2).all(|w| w[1].1 - w[0].1 <= 72),
            "each within its step of the one before: {sent:?}"
        );
    }

    /// A partition growing faster than polls of a window can follow within the six slots the
    /// reserve gives them is polled no closer than a sixth of a round trip, in larger polls
    /// (found by review: polled every 16 ms in 96 KiB, a 3 MB/s partition at 150 ms fell
    /// further behind every second, and was never judged behind).
    #[test]
    fn a_partition_too_fast_for_polls_of_a_window_gets_larger_ones() {
        // 3 offsets (3 KB) per ms: 72 offsets a window, 16 ms apart; six slots keep up at 25.
        let (mut state, lanes) = polled_at(600);
        let times: Vec<u64> = (200..=400)
            .filter(|now| state.next_poll(150, lanes, usize::MAX, *now).is_some())
            .collect();
        assert_eq!(times, [200, 225, 250, 275, 300, 325]);
        assert_eq!(state.next_wake(325, Some(150), lanes.reserve), Some(350));
    }

    /// Polls share the reserve's lanes but two across partitions; a partition whose polls are
    /// gone has its Fetches ahead counted as pieces again (failed with the polls inferred from
    /// where the first one started: every later piece counted as a poll, one went out at a
    /// time); one far behind is not polled.
    #[test]
    fn polls_share_the_reserve_and_end_with_their_answers() {
        let mut state = attached(&["a", "b"]);
        let span = Some(span(1_000, 10, 10 * 1024, 1_000 * 1024 + 5 * 1024));
        let (a, b) = (key("a"), key("b"));
        for key in [&a, &b] {
            state.noted(key, 1_150, span, false, 1_200);
            measured(&mut state, key, 1_200, 200, 1.0);
        }
        let lanes = AheadLanes {
            reserve: 8,
            ..lanes(32, 8)
        };
        let mut sent = Vec::new();
        for now in (200..=600).step_by(50) {
            while let Some((key, start, _)) = state.next_poll(150, lanes, usize::MAX, now) {
                sent.push((key.topic, start));
            }
        }
        assert_eq!(sent.len(), 6, "all the reserve's lanes but two: {sent:?}");
        assert!(sent.iter().any(|(t, _)| t == "a") && sent.iter().any(|(t, _)| t == "b"));
        // The polls of a are answered with nothing new to keep and dropped; its own answer then
        // shows a backlog: its pieces go out, many, none counted as a poll.
        for (_, start) in sent.iter().filter(|(t, _)| t == "a") {
            state.ahead_answered(&a, *start, None);
        }
        state.noted(&a, 1_150, span, true, 1_900);
        assert_eq!(state.unpolled_to(&a, 1_150, 1_900), 1_900);
        let pieces: Vec<i64> = std::iter::from_fn(|| state.next_ahead(lanes, Reach::Near, 700))
            .filter(|(key, _, _)| *key == a)
            .map(|(_, start, _)| start)
            .collect();
        assert!(pieces.len() > 4, "{pieces:?}");
        assert!(pieces.iter().all(|start| !state.is_poll(&a, *start)));
        // Far below the high watermark its answer showed.
        state.drop_ahead(&b);
        state.noted(&b, 1_150, span, true, 2_000);
        assert_eq!(state.next_poll(150, lanes, usize::MAX, 2_000), None);
    }

    #[test]
    fn fetches_ahead_go_to_the_partitions_with_the_fewest_and_stop_at_the_limit() {
        let mut state = attached(&["a", "b", "c"]);
        let span = Some(span(10, 10, 1, 4096));
        state.noted(&key("a"), 0, span, true, 1_000);
        state.noted(&key("b"), 0, span, true, 1_000);
        state.noted(&key("c"), 0, span, false, 1_000);
        let picked: Vec<String> =
            std::iter::from_fn(|| state.next_ahead(lanes(2, 100), Reach::Any, 0))
                .map(|(k, start, _)| format!("{}@{start}", k.topic))
                .collect();
        assert_eq!(picked, ["a@15", "b@15", "a@25", "b@25"], "c has no backlog");
        state.drop_ahead(&key("a"));
        assert_eq!(
            state.next_ahead(lanes(2, 3), Reach::Any, 0),
            Some((key("a"), 15, 4096))
        );
        assert_eq!(
            state.next_ahead(lanes(2, 3), Reach::Any, 0),
            None,
            "three ahead in all"
        );
        state.attach(key("a"), EPOCHS);
        assert_eq!(state.ahead_of(&key("a")), 0, "an attach starts afresh");
        state.detach(&key("b"));
        assert_eq!(state.ahead_of(&key("b")), 0);
    }

    #[test]
    fn a_round_takes_as_many_partitions_with_a_backlog_as_its_bytes_cover() {
        let mut state = attached(&["a", "b", "c", "d"]);
        for topic in ["a", "c"] {
            let span = span(10, 10, 1, 4096);
            state.noted(&key(topic), 0, Some(span), true, 1_000);
        }
        let mut round = |max_backlogged, kind| -> Vec<String> {
            names(&state.next_round(10, max_backlogged, kind, 0))
                .into_iter()
                .map(str::to_owned)
                .collect()
        };
        assert_eq!(round(1, Kind::All), ["a", "b"], "stops before c");
        assert_eq!(round(1, Kind::All), ["c", "d"]);
        assert_eq!(round(2, Kind::All), ["a", "b", "c", "d"]);
        assert_eq!(round(2, Kind::CaughtUp), ["b", "d"], "caught up apart");
        assert_eq!(round(2, Kind::Behind), ["a", "c"], "a cursor of its own");
        assert_eq!(round(2, Kind::Behind), ["c", "a"], "in turn");
        assert!(
            round(2, Kind::Settled).is_empty(),
            "b and d were never answered: they may be far behind"
        );
        state.noted(&key("d"), 0, None, false, 0);
        assert_eq!(
            names(&state.next_round(10, 2, Kind::Settled, 0)),
            ["d"],
            "answered, caught up"
        );
    }

    /// Caught-up partitions whose source's log stopped growing (a catch-up's finished ones) are
    /// quiet: the reserve's rounds of settled partitions leave them to a round of their own,
    /// which the fetcher sends one at a time; one growing again is settled again.
    #[test]
    fn partitions_whose_log_stopped_growing_are_quiet_apart_from_the_settled() {
        let mut state = attached(&["done", "steady", "new"]);
        for topic in ["done", "steady"] {
            state.noted(&key(topic), 100, None, false, 100);
        }
        measured(&mut state, &key("done"), 100, 0, 0.0);
        measured(&mut state, &key("steady"), 100, 0, 1.0);
        let mut round = |kind| names(&state.next_round(10, 10, kind, 0)).join(",");
        assert_eq!(round(Kind::Settled), "steady");
        assert_eq!(round(Kind::Quiet), "done");
        assert_eq!(round(Kind::Unanswered), "new", "never answered");
        assert!(state.is_quiet(&key("done")) && !state.is_quiet(&key("steady")));
        // Written to again: its own answer brings records, and it is settled at once (its
        // growth reads nil until two measurements show the rise: a Fetch of the quiet ones
        // waiting at the source would hold it back that long).
        state.own_answer(&key("done"), true);
        assert!(!state.is_quiet(&key("done")));
        assert_eq!(
            names(&state.next_round(10, 10, Kind::Settled, 0)),
            ["done", "steady"]
        );
        state.own_answer(&key("done"), false);
        assert!(state.is_quiet(&key("done")), "an empty answer, growth nil");
        let growth = state.partitions.get_mut(&key("done")).expect("attached");
        growth.growth = Some(Growth::measured(100, 0, 0.5));
        assert!(!state.is_quiet(&key("done")), "growing");
    }
}
