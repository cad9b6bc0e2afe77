//! Repeated warnings, rate-limited: a failure that persists (a source topic deleted, a sync step
//! failing every refresh) is logged at WARN when it first appears, when its message changes,
//! and then at most once per [`REPEAT_EVERY_MS`] with how often it recurred meanwhile; the
//! repeats in between go to DEBUG. An operator still sees it, and the log is not one line per
//! refresh forever.
//!
//! Time is an input (`now_ms`).

use std::collections::HashMap;
use std::sync::Mutex;

/// The least time between two WARN lines of the same warning.
pub const REPEAT_EVERY_MS: i64 = 10 * 60 * 1000;

/// The warnings of one subject (a mirror), by what they are about.
#[derive(Debug, Default)]
pub struct RepeatedWarnings {
    seen: Mutex<HashMap<String, Seen>>,
}

#[derive(Debug)]
struct Seen {
    message: String,
    warned_ms: i64,
    /// Repeats since the last WARN line.
    repeats: u64,
}

/// Whether to log a warning at WARN now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Log it at WARN; it recurred this many times since the last WARN line.
    Warn { repeats: u64 },
    /// Log it at DEBUG: it was warned about recently.
    Quiet,
}

impl RepeatedWarnings {
    /// Whether warning `message` about `about` goes to WARN now.
    pub fn check(&self, about: &str, message: &str, now_ms: i64) -> Verdict {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        match seen.get_mut(about) {
            Some(s) if s.message == message && now_ms - s.warned_ms < REPEAT_EVERY_MS => {
                s.repeats += 1;
                Verdict::Quiet
            }
            Some(s) => {
                let repeats = std::mem::take(&mut s.repeats);
                s.message = message.to_string();
                s.warned_ms = now_ms;
                Verdict::Warn { repeats }
            }
            None => {
                seen.insert(
                    about.to_string(),
                    Seen {
                        message: message.to_string(),
                        warned_ms: now_ms,
                        repeats: 0,
                    },
                );
                Verdict::Warn { repeats: 0 }
            }
        }
    }

    /// `about` is fine again: its next failure warns at once.
    pub fn cleared(&self, about: &str) {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(about);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_persisting_warning_is_logged_once_per_interval_and_a_new_one_at_once() {
        let warnings = RepeatedWarnings::default();
        let gone = "the source has no topic orders";
        assert_eq!(
            warnings.check("configs", gone, 0),
            Verdict::Warn { repeats: 0 }
        );
        for refresh in 1..100 {
            assert_eq!(
                warnings.check("configs", gone, refresh * 500),
                Verdict::Quiet
            );
        }
        assert_eq!(
            warnings.check("configs", gone, REPEAT_EVERY_MS),
            Verdict::Warn { repeats: 99 }
        );
        assert_eq!(
            warnings.check("configs", "another failure", REPEAT_EVERY_MS + 1),
            Verdict::Warn { repeats: 0 }
        );
        assert_eq!(
            warnings.check("acls", gone, 1),
            Verdict::Warn { repeats: 0 }
        );
        warnings.cleared("configs");
        assert_eq!(
            warnings.check("configs", "another failure", REPEAT_EVERY_MS + 2),
            Verdict::Warn { repeats: 0 }
        );
    }
}
