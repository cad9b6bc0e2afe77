//! Which brokers are alive, as the active controller sees them: each broker heartbeats to it,
//! and one that stays silent for the session timeout is fenced (docs/cluster.md). A fenced
//! broker's partitions have no leader for clients, and new partitions are not placed on it,
//! until it heartbeats again.
//!
//! The sessions are soft state of the active controller only, as in KRaft: a new active
//! controller knows nobody's last heartbeat, so it gives every broker a full session timeout
//! from the moment it became active before fencing any. [`decide`] is pure: the controller's
//! shell passes the time, the sessions and the image, and writes what it returns.

use crate::controller::MetadataCommand;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The sessions while this node is the active controller, `None` otherwise; shared by the
/// controller listener (which counts heartbeats) and the liveness loop (which acts on them).
pub(super) type Live = Arc<Mutex<Option<Sessions>>>;

/// Counts a heartbeat of broker `node_id`; false when this node is not the active controller.
pub(super) fn heard(live: &Live, node_id: i32, now: Instant) -> bool {
    match live.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        Some(sessions) => {
            sessions.heard(node_id, now);
            true
        }
        None => false,
    }
}

/// Whether broker `node_id` heartbeated within `timeout` before `now` (false when this node is
/// not the active controller).
pub(super) fn alive(live: &Live, node_id: i32, now: Instant, timeout: Duration) -> bool {
    live.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|sessions| sessions.last.get(&node_id))
        .is_some_and(|heard| now.saturating_duration_since(*heard) < timeout)
}

/// The active controller's record of heartbeats.
#[derive(Debug)]
pub(super) struct Sessions {
    /// When this node became the active controller (a broker unheard since counts from here).
    since: Instant,
    /// The last heartbeat of each broker heard since then.
    last: BTreeMap<i32, Instant>,
    /// Where each broker's silence is counted from: its last heartbeat (else `since`) moved
    /// on by the pauses of this node since ([`Sessions::credit`]). Only fencing counts from
    /// here; unfencing needs a heartbeat.
    counted_from: BTreeMap<i32, Instant>,
    /// Each broker's epoch as last seen: a new one is a registration (a start).
    epochs: BTreeMap<i32, i64>,
}

impl Sessions {
    /// Sessions of a controller that became active at `now`.
    pub(super) fn new(now: Instant) -> Sessions {
        Sessions {
            since: now,
            last: BTreeMap::new(),
            counted_from: BTreeMap::new(),
            epochs: BTreeMap::new(),
        }
    }

    /// Broker `node_id` is registered at `epoch`: an epoch other than the one seen before is a
    /// registration since, which counts as hearing it (it starts heartbeating only once
    /// admitted, so its last heartbeat is from before its restart and would fence it again at
    /// once). The first epoch seen is not: a new active controller has heard nobody yet.
    pub(super) fn registered(&mut self, node_id: i32, epoch: i64, now: Instant) {
        if self
            .epochs
            .insert(node_id, epoch)
            .is_some_and(|seen| seen != epoch)
        {
            self.heard(node_id, now);
        }
    }

    /// Broker `node_id` heartbeated at `now`.
    pub(super) fn heard(&mut self, node_id: i32, now: Instant) {
        self.last.insert(node_id, now);
        self.counted_from.insert(node_id, now);
    }

    /// This node did not run for `pause` before `now` (frozen, starved): the brokers' silence
    /// meanwhile was its own, so it is not counted towards fencing them (a fenced broker is
    /// not unfenced by it: that takes a heartbeat).
    pub(super) fn credit(&mut self, pause: Duration, now: Instant) {
        self.since = (self.since + pause).min(now);
        for from in self.counted_from.values_mut() {
            *from = (*from + pause).min(now);
        }
    }
}

/// How long the liveness loop, meant to run every `tick`, did not run between `last_tick` and
/// `now` beyond its tick, when that is more than half the session `timeout`: long enough for
/// the node's own pause to pass for the brokers' silence. Shorter delays (a busy machine) are
/// not counted.
pub(super) fn paused(
    last_tick: Instant,
    now: Instant,
    tick: Duration,
    timeout: Duration,
) -> Option<Duration> {
    let gap = now.saturating_duration_since(last_tick);
    (gap > timeout / 2).then(|| gap.saturating_sub(tick))
}

/// The fence and unfence commands the sessions call for at `now`: a registered broker not
/// fenced and silent for `timeout` is fenced; a fenced broker heard within `timeout` is
/// unfenced.
pub(super) fn decide(
    now: Instant,
    sessions: &Sessions,
    registered: impl IntoIterator<Item = i32>,
    fenced: &BTreeSet<i32>,
    timeout: Duration,
) -> Vec<MetadataCommand> {
    registered
        .into_iter()
        .filter_map(|node_id| {
            let within = |at: Instant| now.saturating_duration_since(at) < timeout;
            let counted = sessions.counted_from.get(&node_id).copied();
            let heard_lately = sessions.last.get(&node_id).is_some_and(|at| within(*at));
            match (
                within(counted.unwrap_or(sessions.since)),
                fenced.contains(&node_id),
            ) {
                (false, false) => Some(MetadataCommand::FenceBroker { node_id }),
                (_, true) if heard_lately => Some(MetadataCommand::UnfenceBroker { node_id }),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(9);

    /// The replication nemesis found an active controller frozen past the session timeout
    /// fence every other broker as it resumed (their last heartbeats were from before its
    /// freeze) and elect itself: its pause is credited to the sessions.
    #[test]
    fn a_pause_of_the_controller_is_not_the_brokers_silence() {
        let tick = Duration::from_millis(250);
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert_eq!(paused(start, at(250), tick, TIMEOUT), None);
        assert_eq!(
            paused(start, at(4_000), tick, TIMEOUT),
            None,
            "a busy machine"
        );
        let mut sessions = Sessions::new(start);
        sessions.heard(1, at(1_000));
        sessions.heard(2, at(1_000));
        // Frozen from 1.1 s to 21.1 s: both brokers look silent for 20 s.
        let resumed = at(21_100);
        let pause = paused(at(1_100), resumed, tick, TIMEOUT).expect("a pause");
        assert_eq!(pause, Duration::from_millis(19_750));
        let before = decide(resumed, &sessions, [1, 2], &BTreeSet::new(), TIMEOUT);
        assert_eq!(before.len(), 2, "without the credit both would be fenced");
        sessions.credit(pause, resumed);
        assert!(decide(resumed, &sessions, [1, 2], &BTreeSet::new(), TIMEOUT).is_empty());
        // A broker that stays silent is still fenced a session after its last heartbeat, as
        // the controller counted the time it ran.
        sessions.heard(1, at(22_000));
        let fenced = decide(at(30_500), &sessions, [1, 2], &BTreeSet::new(), TIMEOUT);
        assert_eq!(fenced, vec![MetadataCommand::FenceBroker { node_id: 2 }]);
        // Fenced, it is not unfenced by a later pause's credit: only by a heartbeat.
        let later = at(40_000);
        sessions.credit(
            paused(at(34_000), later, tick, TIMEOUT).expect("a pause"),
            later,
        );
        assert!(decide(later, &sessions, [2], &BTreeSet::from([2]), TIMEOUT).is_empty());
        sessions.heard(2, later);
        assert_eq!(
            decide(later, &sessions, [2], &BTreeSet::from([2]), TIMEOUT),
            vec![MetadataCommand::UnfenceBroker { node_id: 2 }]
        );
    }

    /// kafka-leader-election's test found a broker restarted after its fencing fenced again
    /// at once: registered (which unfences it) before its first heartbeat, its last one was
    /// from before the restart.
    #[test]
    fn a_registration_counts_as_hearing_the_broker() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut sessions = Sessions::new(start);
        sessions.registered(1, 5, at(0));
        sessions.heard(1, at(1));
        // Killed after 1 s, fenced at 10 s, restarted at 12 s: a new broker epoch.
        let fenced = decide(at(10), &sessions, [1], &BTreeSet::new(), TIMEOUT);
        assert_eq!(fenced, vec![MetadataCommand::FenceBroker { node_id: 1 }]);
        sessions.registered(1, 6, at(12));
        assert!(
            decide(at(12), &sessions, [1], &BTreeSet::new(), TIMEOUT).is_empty(),
            "its registration unfenced it: not fenced again before a session passes"
        );
        // The first epoch a controller sees is no sign of life.
        let mut fresh = Sessions::new(at(20));
        fresh.registered(2, 3, at(20));
        assert!(decide(at(20), &fresh, [2], &BTreeSet::from([2]), TIMEOUT).is_empty());
    }

    #[test]
    fn a_silent_broker_is_fenced_after_the_timeout_and_unfenced_when_heard_again() {
        let start = Instant::now();
        let mut sessions = Sessions::new(start);
        let at = |s: u64| start + Duration::from_secs(s);
        let none = BTreeSet::new();
        // Nobody is fenced before a full timeout since the controller became active.
        assert!(decide(at(8), &sessions, [1, 2], &none, TIMEOUT).is_empty());
        sessions.heard(1, at(8));
        assert_eq!(
            decide(at(9), &sessions, [1, 2], &none, TIMEOUT),
            vec![MetadataCommand::FenceBroker { node_id: 2 }]
        );
        let fenced = BTreeSet::from([2]);
        assert!(
            decide(at(10), &sessions, [1, 2], &fenced, TIMEOUT).is_empty(),
            "a fenced broker stays fenced while silent; 1 is alive"
        );
        sessions.heard(2, at(11));
        assert_eq!(
            decide(at(12), &sessions, [1, 2], &fenced, TIMEOUT),
            vec![MetadataCommand::UnfenceBroker { node_id: 2 }]
        );
        assert_eq!(
            decide(at(17), &sessions, [1, 2], &none, TIMEOUT),
            vec![MetadataCommand::FenceBroker { node_id: 1 }],
            "1 fell silent after 8 s"
        );
    }

    #[test]
    fn a_fenced_broker_is_not_unfenced_by_the_grace_of_a_new_controller() {
        let start = Instant::now();
        let sessions = Sessions::new(start);
        let fenced = BTreeSet::from([3]);
        assert!(decide(start, &sessions, [3], &fenced, TIMEOUT).is_empty());
    }
}
