//! The back-off of an accept loop after its errors, shared by the Kafka listener
//! ([`crate::broker::server`]) and the metrics listener ([`crate::metrics`]): a pause doubling
//! from 5 ms to 1 s until an accept succeeds, and a log line at most once per 10 s with how many
//! errors occurred. Pure code, and a leaf, so the metrics need not import the broker.

use std::time::{Duration, Instant};

/// The first pause after an accept error.
const FIRST_PAUSE: Duration = Duration::from_millis(5);
/// The longest pause between accept attempts.
const MAX_PAUSE: Duration = Duration::from_secs(1);
/// At most one accept-error log line per this interval.
const REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// The accept loop's answer to its errors. An error that does not consume the pending
/// connection (EMFILE: no descriptor to give it) returns at once on the next attempt, so
/// retrying without a pause spins a core and floods the log.
#[derive(Debug, Default)]
pub struct AcceptErrors {
    pause: Option<Duration>,
    last_report: Option<Instant>,
    unreported: u64,
}

/// What to do after an accept error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptPause {
    /// How long to wait before accepting again.
    pub pause: Duration,
    /// Log now, with this many errors (this one included) since the last line.
    pub report: Option<u64>,
}

impl AcceptErrors {
    /// An accept failed at `now`.
    pub fn failed(&mut self, now: Instant) -> AcceptPause {
        let pause = self.pause.map_or(FIRST_PAUSE, |p| (p * 2).min(MAX_PAUSE));
        self.pause = Some(pause);
        self.unreported += 1;
        let due = self
            .last_report
            .is_none_or(|at| now.duration_since(at) >= REPORT_INTERVAL);
        let report = due.then(|| {
            self.last_report = Some(now);
            std::mem::take(&mut self.unreported)
        });
        AcceptPause { pause, report }
    }

    /// An accept succeeded: the next error pauses briefly again (its count is still reported
    /// with the next line).
    pub fn accepted(&mut self) {
        self.pause = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_errors_back_off_and_are_reported_at_a_bounded_rate() {
        let mut errors = AcceptErrors::default();
        let start = Instant::now();
        let first = errors.failed(start);
        assert_eq!(first.pause, FIRST_PAUSE);
        assert_eq!(first.report, Some(1), "the first error is logged at once");
        let mut now = start;
        let mut lines = 1;
        let mut errors_seen = 1;
        let mut last = first;
        // A minute of errors, each retried after its pause.
        while now < start + Duration::from_secs(60) {
            now += last.pause;
            last = errors.failed(now);
            errors_seen += 1;
            lines += u64::from(last.report.is_some());
        }
        assert_eq!(last.pause, MAX_PAUSE);
        assert!(errors_seen < 80, "{errors_seen} attempts in a minute");
        assert!(lines <= 7, "{lines} lines in a minute");
        errors.accepted();
        let again = errors.failed(now + Duration::from_millis(1));
        assert_eq!(again.pause, FIRST_PAUSE, "a success resets the pause");
        assert_eq!(again.report, None, "but not the rate of lines");
    }
}
