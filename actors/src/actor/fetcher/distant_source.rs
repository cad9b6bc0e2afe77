//! The fetcher against a simulated distant Kafka, on paused time: one partition written at a
//! steady rate, a round trip of 150 ms, a window per connection smaller than what a round trip
//! gathers. Each record's lag, from its batch's creation to its apply, is what a reader of the
//! mirror sees.

use super::*;
use crate::actor::ports::FetcherProgress;
use crate::host::{FetchProgress, FetchRequest, FetchResponse, TopicPartition};
use crate::partition::Cause;
use actix::{Actor, Context, Handler};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use tokio::time::Instant;

/// Records per batch; the producer writes one batch every [`BATCH_MS`].
const PER_BATCH: i64 = 10;
const BATCH_MS: u64 = 10;
/// Bytes one connection moves per round trip (its window: Kafka's default socket buffer).
const WINDOW: u64 = 100 * 1024;
const ROUND_TRIP: Duration = Duration::from_millis(150);
/// How long the source holds a Fetch with nothing new (`fetch.wait.max.ms`).
const MAX_WAIT: Duration = Duration::from_millis(500);
/// What a new connection costs before its first request: the handshake and a new client's
/// metadata, two round trips (three with TLS or SASL).
const HANDSHAKE: Duration = Duration::from_millis(300);

/// The batches of records of 1 KiB from `first` to `last`.
fn batches(first: i64, last: i64) -> bytes::Bytes {
    let mut out = bytes::BytesMut::new();
    for base_offset in (first..last).step_by(PER_BATCH as usize) {
        out.extend_from_slice(
            &kmirror_protocol::testing::BatchSpec {
                base_offset,
                records: PER_BATCH as usize,
                value_size: 1024,
                ..Default::default()
            }
            .build(),
        );
    }
    out.freeze()
}

/// The source's one partition and the destination's log of it.
struct Distant {
    started: Instant,
    /// Offsets the source held at the start (written then).
    initial: i64,
    /// Offsets written at once at this time after the start (ms), beside the steady rate.
    burst: Option<(u64, i64)>,
    /// The destination's log end.
    log_end: i64,
    /// Each applied batch's lag (ms), for records written after `settled`.
    lags: Vec<u64>,
    settled: Duration,
    /// Fetches answered OFFSET_OUT_OF_RANGE.
    overshot: usize,
    /// When each lane's connection opened or opens (lane 0's at the start: the mirror's first
    /// requests made it); a lane not here is not asked to open yet.
    open_at: std::collections::BTreeMap<usize, Instant>,
}

impl Distant {
    /// When the batch from `base` was written (ms after the start): the initial ones at the
    /// start, the burst's at its time, the others as the steady rate wrote them.
    fn written_ms(&self, base: i64) -> u64 {
        let steady = |offset: i64| ((offset / PER_BATCH + 1).max(0) as u64) * BATCH_MS;
        let offset = base - self.initial;
        match self.burst {
            _ if offset < 0 => 0,
            Some((at, offsets)) if offset >= at as i64 / BATCH_MS as i64 * PER_BATCH => {
                let after = offset - at as i64 / BATCH_MS as i64 * PER_BATCH;
                if after < offsets {
                    at
                } else {
                    steady(offset - offsets)
                }
            }
            _ => steady(offset),
        }
    }
}

#[derive(Clone)]
struct DistantSource(Rc<RefCell<Distant>>);

impl DistantSource {
    /// The source's log end at `at`: whole batches written by then.
    fn source_end(&self, at: Instant) -> i64 {
        let source = self.0.borrow();
        let elapsed = at.duration_since(source.started).as_millis() as u64;
        let burst = source
            .burst
            .filter(|(at, _)| elapsed >= *at)
            .map_or(0, |(_, offsets)| offsets);
        source.initial + (elapsed / BATCH_MS) as i64 * PER_BATCH + burst
    }

    /// When `lane`'s connection is open: a handshake from now if nothing opened it yet.
    fn open_at(&self, lane: usize) -> Instant {
        *self
            .0
            .borrow_mut()
            .open_at
            .entry(lane)
            .or_insert_with(|| Instant::now() + HANDSHAKE)
    }

    fn batch_bytes() -> usize {
        batches(0, PER_BATCH).len()
    }

    /// One partition's answer at the source at `at`, asked from `offset` for `max_bytes`: the
    /// batches from the one holding `offset` to the log end, whole, one at least.
    fn read(&self, offset: i64, max_bytes: usize, at: Instant) -> Option<FetchResponse> {
        let end = self.source_end(at);
        if offset > end {
            return None;
        }
        let first = offset / PER_BATCH * PER_BATCH;
        let most = (max_bytes / Self::batch_bytes()).max(1) as i64 * PER_BATCH;
        let last = end.min(first + most);
        Some(FetchResponse::Records {
            records: batches(first, last),
            high_watermark: end,
            source_leader_epoch: None,
        })
    }
}

/// Whether an answer holds no records (the source has none from the offset asked yet).
fn nothing(answer: &FetchResponse) -> bool {
    matches!(answer, FetchResponse::Records { records, .. } if records.is_empty())
}

impl FetcherPorts for DistantSource {
    fn next_fetch(&self, _: &TopicPartition) -> Result<FetchRequest, Cause> {
        Ok(FetchRequest {
            offset: self.0.borrow().log_end,
            last_fetched_epoch: None,
            max_bytes: 0,
        })
    }

    fn connect(&self, lane: usize) -> PortFuture<Result<Option<Duration>, Cause>> {
        let open_at = self.open_at(lane);
        Box::pin(async move {
            tokio::time::sleep_until(open_at).await;
            Ok(Some(ROUND_TRIP))
        })
    }

    fn fetch(
        &self,
        lane: usize,
        requests: Vec<PartitionFetch>,
        _max_bytes: i32,
    ) -> PortFuture<Result<Fetched, Cause>> {
        let this = self.clone();
        // A lane's first request waits for its connection.
        let open_at = self.open_at(lane);
        Box::pin(async move {
            tokio::time::sleep_until(open_at).await;
            tokio::time::sleep(ROUND_TRIP / 2).await;
            let mut answers = Vec::new();
            let (mut bytes, mut backlog) = (0, false);
            for p in requests {
                let asked = |at| this.read(p.request.offset, p.request.max_bytes, at);
                // Nothing there yet: a long poll until the next batch, or the wait's end.
                let mut answer = asked(Instant::now());
                let waited_until = Instant::now() + MAX_WAIT;
                while answer.as_ref().is_some_and(nothing) && Instant::now() < waited_until {
                    tokio::time::sleep(Duration::from_millis(BATCH_MS)).await;
                    answer = asked(Instant::now());
                }
                let answer = answer.unwrap_or_else(|| {
                    this.0.borrow_mut().overshot += 1;
                    FetchResponse::OffsetOutOfRange {
                        log_start_offset: 0,
                    }
                });
                if let FetchResponse::Records {
                    records,
                    high_watermark,
                    ..
                } = &answer
                {
                    bytes += records.len() as u64;
                    let (_, end) = span_of(records, WINDOW as usize);
                    backlog |= end.is_some_and(|end| end < *high_watermark);
                }
                answers.push((p.key, Ok(answer)));
            }
            // Back across the link: a round trip more per window beyond the first.
            let windows = bytes.div_ceil(WINDOW);
            tokio::time::sleep(ROUND_TRIP / 2 + ROUND_TRIP * windows.saturating_sub(1) as u32)
                .await;
            Ok(Fetched {
                answers,
                bytes,
                backlog,
                throttled: false,
            })
        })
    }

    fn paced(&self, _: &crate::fetch_pacing::PacingReport) {}

    fn applied_ahead(&self, _: u64) {}

    fn apply(
        &self,
        _: &TopicPartition,
        request: FetchRequest,
        response: FetchResponse,
        _: FetchEpochs,
    ) -> PortFuture<Result<FetchProgress, Cause>> {
        let mut log = self.0.borrow_mut();
        assert_eq!(request.offset, log.log_end, "applied at the log end");
        if let FetchResponse::Records { records, .. } = &response {
            let now = Instant::now().duration_since(log.started);
            for batch in kmirror_protocol::batch::RecordBatches::new(records.clone()).flatten() {
                assert_eq!(batch.base_offset(), log.log_end, "no gap, nothing twice");
                let written = Duration::from_millis(log.written_ms(batch.base_offset()));
                if written >= log.settled {
                    log.lags.push((now - written).as_millis() as u64);
                }
                log.log_end = batch.next_offset();
            }
        }
        Box::pin(std::future::ready(Ok(FetchProgress::Appended {
            source_epoch: 0,
        })))
    }
}

struct Ignore;

impl Actor for Ignore {
    type Context = Context<Self>;
}

impl Handler<FetcherProgress> for Ignore {
    type Result = ();

    fn handle(&mut self, _: FetcherProgress, _: &mut Context<Self>) {}
}

/// Mirrors a partition holding `initial` offsets at the start and written at 1,000 records
/// per second (15 batches per round trip, a window moves 8) 150 ms away, with `burst`
/// offsets more written at once at that time, for six seconds:
/// the lags (ms, sorted) of the batches written after `settled`, and how many polls
/// overshot. Nothing is lost or applied twice: the apply checks each batch it is given
/// starts at the log end.
async fn mirror(initial: i64, burst: Option<(u64, i64)>, settled: Duration) -> (Vec<u64>, usize) {
    tokio::time::pause();
    let source = DistantSource(Rc::new(RefCell::new(Distant {
        started: Instant::now(),
        initial,
        burst,
        log_end: 0,
        lags: Vec::new(),
        settled,
        overshot: 0,
        open_at: std::collections::BTreeMap::from([(0, Instant::now())]),
    })));
    let fetcher = Fetcher::new(
        source.clone(),
        FetcherConfig {
            max_partitions_per_fetch: 100,
            partition_max_bytes: 1 << 20,
            response_max_bytes: 10 << 20,
            max_in_flight: 16,
            idle_backoff: Duration::from_millis(100),
            apply_grace: Duration::from_millis(50),
        },
    )
    .start();
    fetcher
        .send(AttachPartition {
            key: TopicPartition::new("steady", 0),
            progress: Ignore.start().recipient(),
            epochs: FetchEpochs {
                topic_id: uuid::Uuid::nil(),
                source: 0,
                destination: 0,
            },
        })
        .await
        .expect("attached");
    tokio::time::sleep(Duration::from_secs(6)).await;
    let log = source.0.borrow();
    let mut lags = log.lags.clone();
    lags.sort_unstable();
    (lags, log.overshot)
}

/// Mirrors as [`mirror`] does and checks that at least `batches` batches written after
/// `settled` were applied, their lag's p99 under two round trips.
async fn lags_under_two_round_trips(
    initial: i64,
    burst: Option<(u64, i64)>,
    settled: Duration,
    batches: usize,
) {
    let (lags, overshot) = mirror(initial, burst, settled).await;
    assert!(lags.len() >= batches, "{} batches applied", lags.len());
    let (p99, p50) = (lags[lags.len() * 99 / 100], lags[lags.len() / 2]);
    assert!(
        p99 < 2 * ROUND_TRIP.as_millis() as u64,
        "lag p99 {p99} ms, p50 {p50} ms; {overshot} polls overshot"
    );
}

/// From its second second on, every record of a steady partition 150 ms away is applied
/// within two round trips (the bench's goal less its 100 ms). Failed before polls at the
/// source's end: pieces sent in rounds as each round's answers came, each record waited for
/// the round after the one in flight when it was written (p99 396 ms, p50 284 ms).
#[actix_rt::test]
async fn a_steady_partition_across_a_distant_link_lags_under_two_round_trips() {
    lags_under_two_round_trips(0, None, Duration::from_secs(2), 350).await;
}

/// A partition half a megabyte behind at its start (a producer's start-up batch, a stall)
/// catches up and lags under two round trips within a second and a half: its backlog is read
/// in pieces below the polls.
#[actix_rt::test]
async fn a_partition_behind_at_its_start_soon_lags_under_two_round_trips() {
    lags_under_two_round_trips(500, None, Duration::from_millis(1_500), 400).await;
}

/// A polled partition whose producer writes half a megabyte at once (a burst, as after its
/// own outage) is read in pieces again and lags under two round trips within a second and a
/// half (p99 129 ms). Failed while a polled partition stayed polled, marked caught up by each
/// poll applied (judged against its first poll, not the polls past its end): fewer than 200
/// of the 250 batches written after 3.5 s were applied by 6 s.
#[actix_rt::test]
async fn a_polled_partition_after_a_burst_soon_lags_under_two_round_trips() {
    lags_under_two_round_trips(0, Some((2_000, 500)), Duration::from_millis(3_500), 200).await;
}

/// Every record of a polled partition whose producer writes 400 KB at once a second in (a
/// producer's start-up batches, or its own outage ending), the fetcher's start included, is
/// applied within two round trips and 100 ms at p99: the bench's goal, over every record.
/// Failed before: the burst's measurement made the growth look half again as fast, polls
/// overshot the log end, and until the growth was measured afresh the partition was fetched a
/// round trip at a time (p99 458 ms, the worst 518). Polls now jump past a burst, and a burst
/// shows in the growth only if the next measurement confirms it (p99 347 ms; 307 since polls
/// start a round trip sooner and jump to the source's end as they start).
#[actix_rt::test]
async fn every_record_of_a_partition_whose_producer_bursts_lags_under_the_goal() {
    let (lags, overshot) = mirror(0, Some((1_000, 400)), Duration::ZERO).await;
    let p99 = lags[lags.len() * 99 / 100];
    assert!(lags.len() >= 600, "{} batches applied", lags.len());
    assert!(
        p99 < 2 * ROUND_TRIP.as_millis() as u64 + 100,
        "lag p99 {p99} ms; {overshot} polls overshot"
    );
}

/// Every record of a steady partition, from its producer's first on, is applied within two
/// round trips and 25 ms at p99: its first rounds are read in pieces until its growth is
/// measured, and then its polls start at the source's end. Failed before (p99 353 ms, the
/// worst 377): each measurement took two round trips, and the first polls stepped up from the
/// log end, a round trip's growth below the source's end, for 600 ms (313 ms and 343 since).
#[actix_rt::test]
async fn a_steady_partitions_start_lags_little_more_than_two_round_trips() {
    let (lags, overshot) = mirror(0, None, Duration::ZERO).await;
    let p99 = lags[lags.len() * 99 / 100];
    assert!(lags.len() >= 550, "{} batches applied", lags.len());
    assert!(
        p99 < 2 * ROUND_TRIP.as_millis() as u64 + 25,
        "lag p99 {p99} ms; {overshot} polls overshot"
    );
}
