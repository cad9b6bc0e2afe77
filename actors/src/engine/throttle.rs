//! `mirror.replication.throttled.rate` (docs/mirror-configs.md): the bytes per second a mirror's
//! fetchers on one broker may fetch together, so that catching up a large backlog does not fill
//! the link. Unset, fetching is unlimited.
//!
//! A token bucket shared by the mirror's fetchers, paid after the fact: a fetcher asks how long
//! to wait before its next Fetch ([`Throttle::delay`]: until the bucket is out of debt; it
//! waits in slices of at most [`MAX_WAIT_SLICE`] and asks again, so a rate changed meanwhile
//! counts at once), sends it, and pays for the bytes the answer brought ([`Throttle::paid`]). The bucket refills at the
//! rate and holds at most a quarter of a second of it, so an idle mirror does not save up a
//! burst. While throttled a Fetch asks for at most that quarter second
//! ([`Throttle::fetch_bytes`]), which keeps the pace even rather than a large answer followed
//! by a long wait. The rate changes at runtime ([`Throttle::set_rate`], from an AlterConfigs of
//! the mirror); the debt already owed is kept.
//!
//! Time is an input (`now`), so the pacing is tested without sleeping.

use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// The smallest Fetch a throttled fetcher asks for (a tiny rate would otherwise ask for bytes
/// no batch fits in; the source still answers with the first batch whole).
const MIN_FETCH_BYTES: u64 = 16 * 1024;

/// The longest a fetcher sleeps before it asks the bucket again.
pub const MAX_WAIT_SLICE: Duration = Duration::from_millis(250);

/// One mirror's bucket on this broker.
#[derive(Debug, Default)]
pub struct Throttle {
    bucket: Mutex<Bucket>,
}

#[derive(Debug, Default)]
struct Bucket {
    /// Bytes per second; `None`: unlimited.
    rate: Option<u64>,
    /// Bytes that may be fetched now; negative: owed.
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: Option<Instant>,
}

impl Bucket {
    fn refill(&mut self, now: Instant) {
        if let (Some(rate), Some(at)) = (self.rate, self.at) {
            let earned = now.saturating_duration_since(at).as_secs_f64() * rate as f64;
            self.tokens = (self.tokens + earned).min(rate as f64 / 4.0);
        }
        self.at = Some(now);
    }
}

impl Throttle {
    /// A bucket at `rate` bytes per second (`None`: unlimited).
    pub fn new(rate: Option<u64>) -> Throttle {
        Throttle {
            bucket: Mutex::new(Bucket {
                rate,
                ..Bucket::default()
            }),
        }
    }

    fn bucket(&self) -> std::sync::MutexGuard<'_, Bucket> {
        self.bucket.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the rate; `None` lifts the throttle (and forgives the debt). A lower rate keeps
    /// at most a quarter second of debt at that rate: what was fetched at the old rate is not
    /// paid again at the new one (an hour's sleep at 1 KiB/s after megabytes at 20 MB/s).
    pub fn set_rate(&self, rate: Option<u64>, now: Instant) {
        let mut bucket = self.bucket();
        bucket.refill(now);
        bucket.rate = rate;
        bucket.tokens = match rate {
            Some(rate) => bucket.tokens.max(-(rate as f64) / 4.0),
            None => 0.0,
        };
    }

    /// The rate now.
    pub fn rate(&self) -> Option<u64> {
        self.bucket().rate
    }

    /// How long to wait before the next Fetch: until the debt is paid off.
    pub fn delay(&self, now: Instant) -> Duration {
        let mut bucket = self.bucket();
        bucket.refill(now);
        match bucket.rate {
            Some(rate) if bucket.tokens < 0.0 => {
                Duration::from_secs_f64(-bucket.tokens / rate as f64)
            }
            _ => Duration::ZERO,
        }
    }

    /// A Fetch's answer brought `bytes`.
    pub fn paid(&self, bytes: u64, now: Instant) {
        let mut bucket = self.bucket();
        bucket.refill(now);
        if bucket.rate.is_some() {
            bucket.tokens -= bytes as f64;
        }
    }

    /// Waits until the bucket is out of debt, in slices (a rate lifted or raised meanwhile
    /// ends the wait at once); how long it waited.
    pub async fn wait(&self) -> Duration {
        let started = Instant::now();
        let mut waited = false;
        loop {
            let delay = self.delay(Instant::now());
            if delay.is_zero() {
                // Zero when the bucket let the Fetch go at once: the pacing reads any other
                // figure as the throttle being what limits the mirror.
                return if waited {
                    started.elapsed()
                } else {
                    Duration::ZERO
                };
            }
            waited = true;
            tokio::time::sleep(delay.min(MAX_WAIT_SLICE)).await;
        }
    }

    /// The most bytes a partition of a Fetch of `partitions` asks for, given the mirror's own
    /// limit `configured`: the Fetch's share split between them, so that a throttled Fetch
    /// serves all its partitions rather than the first one.
    pub fn partition_bytes(&self, configured: i32, partitions: usize) -> i32 {
        match self.bucket().rate {
            Some(rate) => {
                let share = (rate / 4 / partitions.max(1) as u64).max(MIN_FETCH_BYTES);
                i32::try_from(share).map_or(configured, |s| s.min(configured))
            }
            None => configured,
        }
    }

    /// The most bytes a Fetch asks for, given the mirror's own limit `configured`.
    pub fn fetch_bytes(&self, configured: i32) -> i32 {
        match self.bucket().rate {
            Some(rate) => {
                let quarter = (rate / 4).max(MIN_FETCH_BYTES);
                i32::try_from(quarter).map_or(configured, |q| q.min(configured))
            }
            None => configured,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Fetch the bucket lets go at once waited nothing: the fetcher's pacing reads any wait as
    /// the throttle being the limit (it once read the nanoseconds of asking as one, and shrank a
    /// distant mirror to one Fetch in flight).
    #[actix_rt::test]
    async fn a_fetch_let_go_at_once_waited_nothing() {
        tokio::time::pause();
        let unlimited = Throttle::new(None);
        unlimited.paid(1 << 30, Instant::now());
        assert_eq!(unlimited.wait().await, Duration::ZERO);
        let limited = Throttle::new(Some(1 << 20));
        assert_eq!(limited.wait().await, Duration::ZERO, "not in debt");
        limited.paid(2 << 20, Instant::now());
        assert!(
            limited.wait().await >= Duration::from_secs(1),
            "in debt: it waits"
        );
    }

    /// Fetching as fast as the throttle lets, the bytes over a span are the rate times the span.
    fn paced(throttle: &Throttle, start: Instant, seconds: u64, answer: u64) -> u64 {
        let (mut now, mut bytes) = (start, 0);
        let end = start + Duration::from_secs(seconds);
        loop {
            now += throttle.delay(now);
            if now >= end {
                return bytes;
            }
            throttle.paid(answer, now);
            bytes += answer;
            // A round trip.
            now += Duration::from_millis(2);
        }
    }

    #[test]
    fn fetchers_move_the_rate_and_an_unset_rate_is_unlimited() {
        let start = Instant::now();
        let throttle = Throttle::new(Some(5_000_000));
        let answer = throttle.fetch_bytes(10 << 20) as u64;
        assert_eq!(answer, 1_250_000, "a quarter second at the rate");
        let moved = paced(&throttle, start, 20, answer);
        let rate = moved as f64 / 20.0;
        assert!((rate - 5e6).abs() / 5e6 < 0.07, "{rate} bytes/s");

        // Lifted at runtime: the next Fetch goes at once, at the mirror's own size.
        let later = start + Duration::from_secs(20);
        throttle.set_rate(None, later);
        assert_eq!(throttle.delay(later), Duration::ZERO);
        assert_eq!(throttle.fetch_bytes(10 << 20), 10 << 20);
        throttle.paid(1 << 30, later);
        assert_eq!(throttle.delay(later), Duration::ZERO);
    }

    #[test]
    fn an_idle_mirror_saves_up_no_burst_and_a_tiny_rate_still_fetches_a_batch() {
        let start = Instant::now();
        let throttle = Throttle::new(Some(1_000_000));
        throttle.paid(0, start);
        let idle = start + Duration::from_secs(60);
        assert_eq!(throttle.delay(idle), Duration::ZERO);
        throttle.paid(1_000_000, idle);
        // A quarter second saved at most: three quarters still owed.
        let owed = throttle.delay(idle);
        assert!(
            (owed.as_secs_f64() - 0.75).abs() < 0.01,
            "{owed:?} until the next Fetch"
        );
        assert_eq!(Throttle::new(Some(1024)).fetch_bytes(1 << 20), 16 * 1024);
        assert_eq!(
            Throttle::new(Some(4_000_000)).partition_bytes(1 << 20, 4),
            250_000
        );
    }

    #[test]
    fn a_lower_rate_does_not_make_the_old_debt_an_hour_long() {
        let start = Instant::now();
        let throttle = Throttle::new(Some(20_000_000));
        throttle.paid(0, start);
        throttle.paid(8_000_000, start);
        throttle.set_rate(Some(1024), start);
        assert!(
            throttle.delay(start) <= Duration::from_millis(250),
            "{:?}",
            throttle.delay(start)
        );
        throttle.set_rate(None, start);
        assert_eq!(throttle.delay(start), Duration::ZERO);
    }
}
