//! Polling a fast partition at the source's end, in pure code (docs/design.md §4, "Polling
//! the source's end").
//!
//! A partition that is caught up is fetched from its log end: the source holds that Fetch
//! until records come (Kafka's long poll) and answers with them. Across a distant link the
//! next Fetch reaches the source a round trip later, and what the producer wrote meanwhile
//! waits for it; when that is more than one window of the source's connection, it is read in
//! pieces, whose answers come back together and whose next round goes out together again, so
//! a record waited one to two round trips more (a 1 MB/s topic at 150 ms: lag p50 330-370 ms,
//! each second's worst 400-600 ms).
//!
//! Polls spread those Fetches in time instead: while a partition near the source's end grows
//! by [`MIN_POLL_BATCHES`] batches or more per round trip, a Fetch ahead of it leaves every
//! third of a round trip, or sooner for a partition whose polls would otherwise ask more than
//! [`POLL_MAX_BYTES`] ([`spacing_ms`]), from where the log is expected to end when the poll
//! before it reaches the source, less half a spacing's growth, so the two overlap rather than
//! leave a gap ([`Growth::poll_start`]), and no further than a [`poll_step`] past the poll
//! before it (or the log end), so one held back leaves no gap either. The source answers it at
//! once with what it has from there; a record waits a third of a round trip at most for the
//! next poll to arrive, not a round trip and the pieces' turn.
//!
//! Where the log ends is predicted from [`Growth`]: the high watermarks the answers showed and
//! when the source read them. A poll that overshoots the log end is answered
//! OFFSET_OUT_OF_RANGE (or, past the last stable offset, waits and, unless the transaction ends
//! meanwhile, is answered with nothing) and dropped, and the
//! growth is measured afresh before the next; one that undershoots brings records twice
//! (counted as fetched twice).
//! A gap between two polls is filled by the partition's own Fetch, as any gap before a Fetch
//! ahead is.

/// The fewest batches a partition must grow by per round trip to be polled: a slower one is
/// answered by its own long poll as each batch comes, and a poll would bring little more.
pub const MIN_POLL_BATCHES: f64 = 2.0;

/// Two sightings of a high watermark read less than this far apart at the source (ms) do
/// not measure the growth: a producer writes in batches, and the figure would jump (16 KiB
/// batches at 1 MB/s, one each 16 ms, measure within a tenth over 150 ms). Sightings come once
/// a round trip: at 150 ms, 200 took two round trips each, and a partition started polls
/// 640 ms after its first answer instead of 320, read in rounds meanwhile (lag up to 451 ms in
/// a bench run at 150 ms; in the model of `actor/fetcher/distant_source.rs`, 377 ms before
/// and 343 since, with the polls' jump lowered beside it in `fetch_state.rs`).
pub const GROWTH_SAMPLE_MS: u64 = 150;

/// How fast a source partition's log grows, from the high watermarks its answers showed and
/// when the source read them: half a round trip after each Fetch left (a Fetch answered at
/// once; one that waited for records, a long poll, is the rare case here: such a partition
/// is not fast). The answer's own arrival would not do: one of several windows comes round
/// trips after the source read its high watermark, and polls from that growth overshot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Growth {
    /// The greatest high watermark seen and when it was read (ms): where predictions start.
    latest: (i64, u64),
    /// The sighting the next measurement is taken from.
    base: (i64, u64),
    /// The last measurement (offsets per ms).
    sample: Option<f64>,
    /// Offsets per ms, once measured: the lesser of the last two measurements.
    per_ms: Option<f64>,
}

impl Growth {
    /// The first sighting: `high_watermark`, read at `read_ms`.
    pub fn new(high_watermark: i64, read_ms: u64) -> Growth {
        Growth {
            latest: (high_watermark, read_ms),
            base: (high_watermark, read_ms),
            sample: None,
            per_ms: None,
        }
    }

    /// An answer showed `high_watermark`, read at `read_ms`. One below the greatest seen was
    /// read before it (answers of Fetches in flight together come in any order; a source whose
    /// log was truncated answers polls OFFSET_OUT_OF_RANGE, and the growth is dropped); the
    /// greatest seen, read at least [`GROWTH_SAMPLE_MS`] after the last measurement's base,
    /// measures the growth since. The figure is the lesser of the last two measurements: a
    /// fall shows at once, a rise once two measurements in a row show it, so a burst (half a
    /// megabyte written at once, which one measurement took for a rate half again or twice
    /// the producer's) leaves the polls where they were. From a burst's figure they overshot
    /// the log end, the growth was measured afresh, and for most of a second the partition
    /// was fetched a round trip at a time (lag up to 518 ms at 150 ms). A figure too low
    /// costs less: the polls start below the log end and bring some records twice.
    pub fn saw(&mut self, high_watermark: i64, read_ms: u64) {
        if high_watermark < self.latest.0 {
            return;
        }
        self.latest = (high_watermark, read_ms.max(self.latest.1));
        let elapsed = self.latest.1.saturating_sub(self.base.1);
        if elapsed >= GROWTH_SAMPLE_MS {
            let sample = (self.latest.0 - self.base.0) as f64 / elapsed as f64;
            self.per_ms = self.sample.map(|last| last.min(sample));
            self.sample = Some(sample);
            self.base = self.latest;
        }
    }

    /// A growth of `per_ms` offsets per ms, the greatest high watermark seen `high_watermark`,
    /// read at `read_ms`: as two measurements would leave it.
    #[cfg(test)]
    pub fn measured(high_watermark: i64, read_ms: u64, per_ms: f64) -> Growth {
        Growth {
            latest: (high_watermark, read_ms),
            base: (high_watermark, read_ms),
            sample: Some(per_ms),
            per_ms: Some(per_ms),
        }
    }

    /// Offsets per ms, once measured.
    pub fn per_ms(&self) -> Option<f64> {
        self.per_ms
    }

    /// Where a poll sent at `now_ms` starts, across a link of `round_trip_ms`, polls leaving
    /// `spacing_ms` apart ([`spacing_ms`]): where the log is expected to end when the poll
    /// before it (a spacing earlier) reaches the source, less half a spacing's growth, so the
    /// two overlap; `None` while the growth is unmeasured or nil.
    pub fn poll_start(&self, now_ms: u64, round_trip_ms: u64, spacing_ms: u64) -> Option<i64> {
        let per_ms = self.per_ms.filter(|r| *r > 0.0)?;
        let spacing = spacing_ms as f64;
        let before =
            now_ms.saturating_add(round_trip_ms / 2) as f64 - spacing * 1.5 - self.latest.1 as f64;
        Some(
            self.latest
                .0
                .saturating_add((per_ms * before).max(0.0).floor() as i64),
        )
    }
}

/// When the source read the high watermarks in the answers to a Fetch sent at `sent_ms` and
/// answered at `answered_ms`, across a link of `round_trip_ms`: half a round trip after it
/// left, when it went straight there and was answered at once; `None` when it waited on the
/// way (a new connection's set-up, the mirror's throttle), when its answer took more than a
/// round trip and a half (it may have waited at the source for records, a long poll, or for a
/// transaction to end, and been read later), or when the round trip is not known yet. An
/// answer with no records may have waited too: its caller leaves it out.
pub fn read_at(
    sent_ms: u64,
    answered_ms: u64,
    round_trip_ms: Option<u64>,
    new_lane: bool,
    throttled: bool,
) -> Option<u64> {
    let round_trip_ms = round_trip_ms.filter(|_| !new_lane && !throttled)?;
    let took = answered_ms.saturating_sub(sent_ms);
    (took.saturating_mul(2) <= round_trip_ms.saturating_mul(3))
        .then(|| sent_ms.saturating_add(round_trip_ms / 2))
}

/// The most bytes a poll asks for (its batches and slack): one window of a distant source's
/// connection (Kafka's default `socket.send.buffer.bytes`, 100 KiB) less room for the answer's
/// framing, so its answer crosses in one round trip. Polls of 126 KB, after a producer's
/// start-up burst made its growth look a quarter faster than it was, took two round trips
/// (305 ms at 150 ms), and their records waited that long. Polls grow past it only where the
/// polls allowed in flight could not follow the partition otherwise ([`least_spacing_ms`]),
/// or its batches are larger than a step of this holds.
pub const POLL_MAX_BYTES: usize = 96 * 1024;

/// How long after one poll of a partition the next may leave (ms): a third of a round trip, so
/// a record waits that long at most for a poll to reach the source; sooner when the partition,
/// growing `per_ms` offsets per ms, grows by more than `most_step` offsets in a spacing and a
/// half (a poll's step, [`poll_step`]): a faster partition is polled more often, not in larger
/// polls, so each poll's answer crosses in one round trip. Never sooner than `least_ms`
/// ([`least_spacing_ms`]): past what the polls allowed in flight can carry, the polls grow
/// instead, as a poll's step is what keeps them up with the partition.
pub fn spacing_ms(round_trip_ms: u64, per_ms: f64, most_step: i64, least_ms: u64) -> u64 {
    let third = (round_trip_ms / 3).max(1);
    let fits = if per_ms > 0.0 {
        (most_step.max(1) as f64 / (1.5 * per_ms)).floor() as u64
    } else {
        third
    };
    third.min(fits).max(least_ms).max(1)
}

/// The shortest spacing (ms) of a partition's polls across a link of `round_trip_ms` when
/// `polled` partitions share `most_polls` polls in flight: each partition's polls in a round
/// trip stay within its share. Spaced closer, a partition's polls wait for slots and, each
/// stepping from the one before, fall behind it for good (found by review: a 3 MB/s
/// partition at 150 ms, polled in 96 KiB every 16 ms with six slots, fell further behind
/// every second).
pub fn least_spacing_ms(round_trip_ms: u64, polled: usize, most_polls: usize) -> u64 {
    if most_polls == 0 {
        return round_trip_ms;
    }
    round_trip_ms.saturating_mul(polled.max(1) as u64) / most_polls as u64
}

/// Whether a partition growing `per_ms` offsets per ms, in batches of `batch` offsets, is
/// polled across a link of `round_trip_ms`: [`MIN_POLL_BATCHES`] per round trip, across
/// [`MIN_POLL_ROUND_TRIP_MS`] or more.
pub fn worth_polling(per_ms: f64, batch: i64, round_trip_ms: u64) -> bool {
    round_trip_ms >= MIN_POLL_ROUND_TRIP_MS
        && per_ms * round_trip_ms as f64 >= MIN_POLL_BATCHES * batch.max(1) as f64
}

/// The shortest round trip (ms) across which a partition is polled: a source this near
/// answers a long poll's records within a few ms anyway, and polls every third of it would
/// load the source for next to no lag.
pub const MIN_POLL_ROUND_TRIP_MS: u64 = 20;

/// How far behind a fast partition may be, in round trips of its growth, to be polled: one
/// read in pieces is always a little behind (what a round trip gathers); one further behind,
/// after a burst or a stall, has its backlog read in pieces first.
pub const POLL_BEHIND_ROUND_TRIPS: f64 = 1.5;

/// The polls that may be in flight on a reserve of `reserve` lanes, of all partitions, or of
/// one `behind` (its backlog's pieces below the polls take the other half): all but two
/// lanes, left for the caught-up partitions' own Fetch and a polled partition's own Fetch
/// filling a gap below its polls; none on a reserve under three.
pub fn most_polls(reserve: usize, behind: bool) -> usize {
    if behind {
        (reserve / 2).min(reserve.saturating_sub(RESERVE_BESIDE_POLLS))
    } else {
        reserve.saturating_sub(RESERVE_BESIDE_POLLS)
    }
}

/// The reserve's lanes polls leave to other Fetches ([`most_polls`]).
pub const RESERVE_BESIDE_POLLS: usize = 2;

/// The offsets a poll asks for, in batches of `batch` offsets, polls leaving `spacing_ms`
/// apart: a step ([`poll_step`]), so a poll held back brings as much as the next may skip, and
/// the batch its start falls in (the source answers from that batch's start). Within
/// [`POLL_MAX_BYTES`] by its spacing, so each crosses in one round trip (asking two spacings'
/// growth and more, each took two).
pub fn poll_offsets(per_ms: f64, spacing_ms: u64, batch: i64) -> i64 {
    poll_step(per_ms, spacing_ms).saturating_add(batch.max(1))
}

/// How far past the poll before it a poll starts at most, polls leaving `spacing_ms` apart:
/// what the log grows by in a spacing and a half, where the poll before it ends when sent a
/// spacing earlier (its answer runs from half a spacing's growth before the log end then to
/// the log end at its arrival).
pub fn poll_step(per_ms: f64, spacing_ms: u64) -> i64 {
    (per_ms * 1.5 * spacing_ms as f64).floor() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_measured_over_reads_150_ms_apart() {
        let mut growth = Growth::new(1_000, 0);
        growth.saw(1_149, 149);
        assert_eq!(growth.per_ms(), None, "149 ms measure nothing");
        // Answers arrive out of order: the greatest high watermark and its read count.
        growth.saw(1_200, 200);
        growth.saw(1_150, 150);
        assert_eq!(growth.per_ms(), None, "one measurement is not enough");
        // One round trip later at 150 ms: the second measurement.
        growth.saw(1_355, 355);
        assert_eq!(growth.per_ms(), Some(1.0));
        growth.saw(1_955, 555);
        assert_eq!(growth.per_ms(), Some(1.0), "one burst does not show");
        growth.saw(1_800, 555);
        growth.saw(2_555, 755);
        assert_eq!(growth.per_ms(), Some(3.0), "a rise two measurements show");
        growth.saw(2_555, 955);
        assert_eq!(growth.per_ms(), Some(0.0), "a still log shows at once");
        // Sightings exactly 150 ms apart measure.
        let mut growth = Growth::new(0, 0);
        growth.saw(150, 150);
        growth.saw(300, 300);
        assert_eq!(growth.per_ms(), Some(1.0));
    }

    #[test]
    fn polls_keep_two_lanes_of_the_reserve() {
        assert_eq!(most_polls(8, false), 6);
        assert_eq!(most_polls(8, true), 4, "half while behind");
        assert_eq!(most_polls(3, false), 1);
        assert_eq!(most_polls(3, true), 1);
        assert_eq!(most_polls(2, false), 0, "none on a reserve under three");
        assert_eq!(most_polls(0, true), 0);
    }

    #[test]
    fn a_poll_starts_where_the_one_before_it_is_expected_to_end() {
        let growth = Growth::measured(200, 200, 1.0);
        // One offset per ms, read at 200 ms; sent at 230 ms across 150 ms, the poll before it
        // (at 180 ms) reaches the source at 255 ms: 200 + 55, less 25.
        assert_eq!(growth.poll_start(230, 150, 50), Some(230));
    }

    #[test]
    fn a_still_partition_is_not_polled() {
        let mut growth = Growth::new(100, 0);
        growth.saw(100, 200);
        growth.saw(100, 400);
        assert_eq!(growth.per_ms(), Some(0.0));
        assert_eq!(growth.poll_start(500, 150, 50), None);
        assert!(!worth_polling(0.0, 10, 150));
        // One batch of 63 per 63 ms: about two per round trip of 150 ms.
        assert!(worth_polling(1.0, 63, 150));
        assert!(!worth_polling(1.0, 63, 100));
        assert!(!worth_polling(100.0, 10, 10), "a near source");
    }

    #[test]
    fn polls_leave_every_third_of_a_round_trip() {
        assert_eq!(spacing_ms(150, 1.0, 75, 0), 50);
        assert_eq!(spacing_ms(1, 1.0, 75, 0), 1);
        assert_eq!(spacing_ms(150, 0.0, 75, 0), 50, "not growing");
        assert_eq!(poll_step(1.0, 50), 75);
        assert_eq!(read_at(1_000, 1_180, Some(150), false, false), Some(1_075));
        assert_eq!(
            read_at(1_000, 1_180, Some(150), true, false),
            None,
            "a new connection"
        );
        assert_eq!(
            read_at(1_000, 1_180, Some(150), false, true),
            None,
            "throttled"
        );
        assert_eq!(read_at(1_000, 1_180, None, false, false), None);
        assert_eq!(
            read_at(1_000, 1_226, Some(150), false, false),
            None,
            "it may have waited"
        );
        assert_eq!(poll_offsets(1.0, 50, 10), 85);
    }

    /// A partition whose polls every third of a round trip would ask more than a window is
    /// polled more often: each poll's step stays within what it may hold.
    #[test]
    fn a_faster_partition_is_polled_more_often_not_in_larger_polls() {
        // 1.28 offsets per ms, 40 offsets a step at most: 20 ms apart, not 50.
        assert_eq!(spacing_ms(150, 1.28, 40, 0), 20);
        assert!(poll_step(1.28, 20) <= 40);
        assert_eq!(
            spacing_ms(150, 1.0, 75, 0),
            50,
            "a third of a round trip holds it"
        );
        assert_eq!(spacing_ms(150, 1_000.0, 1, 0), 1, "a millisecond at least");
    }

    /// Past what the polls in flight can carry, polls grow rather than come sooner: a 3 MB/s
    /// partition alone at 150 ms with six slots is polled every 25 ms, each step of 112
    /// offsets, six a round trip: 672 offsets where it grows by 450 (16 ms apart, six steps
    /// of 72 brought 432, and it fell behind for good).
    #[test]
    fn polls_keep_up_within_the_slots_they_have() {
        assert_eq!(least_spacing_ms(150, 1, 6), 25);
        assert_eq!(
            least_spacing_ms(150, 4, 6),
            100,
            "four partitions share six"
        );
        assert_eq!(least_spacing_ms(150, 1, 0), 150);
        let spacing = spacing_ms(150, 3.0, 72, least_spacing_ms(150, 1, 6));
        assert_eq!(spacing, 25);
        assert!(6 * poll_step(3.0, spacing) >= 450);
        assert_eq!(
            spacing_ms(150, 1.28, 72, least_spacing_ms(150, 1, 6)),
            37,
            "a window each while six slots keep up"
        );
    }
}
