//! Liveness of a supervised mirror partition, decided in pure code (time is an input).
//!
//! A supervisor observes each partition actor periodically: alive with its progress counter
//! (inputs applied) and whether it waits for an effect, unresponsive (no answer in time), or
//! dead (its mailbox is closed: a handler panicked). A busy partition whose counter stands
//! still for `stall_timeout_ms` is restarted from its persisted state; a dead one is created
//! again. At most `max_restarts` restarts fit in any `restart_window_ms`; when the budget is
//! spent the supervisor gives up and the partition goes FAILED through its state machine, after
//! which it is left alone until it makes progress again (an operator's stop, a new leader).

use std::collections::VecDeque;

/// The supervision settings (`mirror.supervision.*` broker configs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LivenessPolicy {
    /// How long a busy partition may go without applying an input.
    pub stall_timeout_ms: u64,
    /// Restarts allowed within `restart_window_ms` before giving up.
    pub max_restarts: u32,
    /// The window the restart budget counts in.
    pub restart_window_ms: u64,
}

impl Default for LivenessPolicy {
    fn default() -> Self {
        LivenessPolicy {
            stall_timeout_ms: 120_000,
            max_restarts: 3,
            restart_window_ms: 600_000,
        }
    }
}

impl LivenessPolicy {
    /// How often to observe: often enough to notice a stall within a quarter of its timeout.
    pub fn check_interval_ms(&self) -> u64 {
        (self.stall_timeout_ms / 4).max(1)
    }
}

/// What an observation of the actor found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observation {
    /// It answered.
    Alive { progress: u64, busy: bool },
    /// It did not answer within the check interval.
    Unresponsive,
    /// Its mailbox is closed.
    Dead,
}

/// What the supervisor does about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing.
    Healthy,
    /// Restart the actor from the persisted state.
    Restart,
    /// Create the actor again (it died) and replay its leadership.
    Recreate,
    /// Fail the partition with `reason`, creating it again first when it died.
    GiveUp { recreate: bool, reason: String },
}

/// The supervisor's memory of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Liveness {
    progress: Option<u64>,
    stalled_since_ms: Option<i64>,
    restarts_at_ms: VecDeque<i64>,
    given_up: bool,
}

impl Liveness {
    /// Takes one observation made at `now_ms`.
    pub fn observe(
        &mut self,
        policy: &LivenessPolicy,
        now_ms: i64,
        observation: Observation,
    ) -> Verdict {
        match observation {
            Observation::Alive { progress, busy } => {
                if self.progress != Some(progress) {
                    if self.progress.is_some() {
                        self.given_up = false;
                    }
                    self.progress = Some(progress);
                    self.stalled_since_ms = busy.then_some(now_ms);
                    return Verdict::Healthy;
                }
                if !busy {
                    self.stalled_since_ms = None;
                    return Verdict::Healthy;
                }
                self.stalled(policy, now_ms)
            }
            Observation::Unresponsive => self.stalled(policy, now_ms),
            Observation::Dead => self.escalate(policy, now_ms, true, "the actor died".into()),
        }
    }

    /// Restarts within the current window.
    pub fn restarts(&self) -> usize {
        self.restarts_at_ms.len()
    }

    fn stalled(&mut self, policy: &LivenessPolicy, now_ms: i64) -> Verdict {
        let since = *self.stalled_since_ms.get_or_insert(now_ms);
        let stalled_ms = now_ms.saturating_sub(since);
        if self.given_up || stalled_ms < policy.stall_timeout_ms as i64 {
            return Verdict::Healthy;
        }
        self.escalate(
            policy,
            now_ms,
            false,
            format!("no progress for {stalled_ms} ms"),
        )
    }

    fn escalate(
        &mut self,
        policy: &LivenessPolicy,
        now_ms: i64,
        dead: bool,
        why: String,
    ) -> Verdict {
        let window = policy.restart_window_ms as i64;
        self.restarts_at_ms
            .retain(|at| now_ms.saturating_sub(*at) < window);
        // The restarted actor is judged afresh.
        self.progress = None;
        self.stalled_since_ms = None;
        if self.restarts_at_ms.len() < policy.max_restarts as usize {
            self.restarts_at_ms.push_back(now_ms);
            return if dead {
                Verdict::Recreate
            } else {
                Verdict::Restart
            };
        }
        self.given_up = true;
        Verdict::GiveUp {
            recreate: dead,
            reason: format!(
                "{why} after {} restarts within {} s; stop and start the topic to try again",
                self.restarts_at_ms.len(),
                policy.restart_window_ms / 1000
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: LivenessPolicy = LivenessPolicy {
        stall_timeout_ms: 1_000,
        max_restarts: 2,
        restart_window_ms: 10_000,
    };

    fn alive(progress: u64, busy: bool) -> Observation {
        Observation::Alive { progress, busy }
    }

    #[test]
    fn a_settled_partition_is_left_alone_however_long_it_is_quiet() {
        let mut l = Liveness::default();
        for t in 0..100 {
            assert_eq!(
                l.observe(&POLICY, t * 1_000, alive(7, false)),
                Verdict::Healthy
            );
        }
    }

    #[test]
    fn a_busy_partition_that_stands_still_is_restarted_then_given_up_on() {
        let mut l = Liveness::default();
        assert_eq!(l.observe(&POLICY, 0, alive(5, true)), Verdict::Healthy);
        assert_eq!(l.observe(&POLICY, 999, alive(5, true)), Verdict::Healthy);
        assert_eq!(l.observe(&POLICY, 1_000, alive(5, true)), Verdict::Restart);
        // The restarted actor replays its leadership: progress moves, then stalls again.
        assert_eq!(l.observe(&POLICY, 1_250, alive(6, true)), Verdict::Healthy);
        assert_eq!(l.observe(&POLICY, 2_250, alive(6, true)), Verdict::Restart);
        assert_eq!(l.observe(&POLICY, 2_500, alive(7, true)), Verdict::Healthy);
        let Verdict::GiveUp { recreate, reason } = l.observe(&POLICY, 3_500, alive(7, true)) else {
            panic!("the budget of 2 restarts is spent");
        };
        assert!(!recreate);
        assert!(
            reason.contains("no progress for 1000 ms after 2 restarts"),
            "{reason}"
        );
        // Given up: left alone while it stays as it is...
        assert_eq!(l.observe(&POLICY, 9_000, alive(8, true)), Verdict::Healthy);
        assert_eq!(l.observe(&POLICY, 9_999, alive(8, true)), Verdict::Healthy);
        assert_eq!(l.observe(&POLICY, 30_000, alive(8, true)), Verdict::Healthy);
        // ...and judged again once it moves; the old restarts have left the window.
        assert_eq!(l.observe(&POLICY, 31_000, alive(9, true)), Verdict::Healthy);
        assert_eq!(l.observe(&POLICY, 32_000, alive(9, true)), Verdict::Restart);
        assert_eq!(l.restarts(), 1);
    }

    #[test]
    fn progress_resets_the_stall_clock() {
        let mut l = Liveness::default();
        for t in 0..50 {
            assert_eq!(
                l.observe(&POLICY, t * 600, alive(t as u64, true)),
                Verdict::Healthy
            );
        }
    }

    #[test]
    fn an_unresponsive_actor_counts_as_stalled() {
        let mut l = Liveness::default();
        assert_eq!(
            l.observe(&POLICY, 0, Observation::Unresponsive),
            Verdict::Healthy
        );
        assert_eq!(
            l.observe(&POLICY, 1_000, Observation::Unresponsive),
            Verdict::Restart
        );
    }

    #[test]
    fn a_dead_actor_is_created_again_within_the_budget() {
        let mut l = Liveness::default();
        assert_eq!(l.observe(&POLICY, 0, Observation::Dead), Verdict::Recreate);
        assert_eq!(l.observe(&POLICY, 1, Observation::Dead), Verdict::Recreate);
        assert!(matches!(
            l.observe(&POLICY, 2, Observation::Dead),
            Verdict::GiveUp { recreate: true, .. }
        ));
        // Restarts older than the window no longer count.
        assert_eq!(
            l.observe(&POLICY, 10_001, Observation::Dead),
            Verdict::Recreate
        );
    }
}
