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
//!   the previous Fetch reached (round robin over the partitions in key order). When one Fetch
//!   reached them all, the next starts one past its first: the order rotates either way, so a
//!   source that answers the partitions in the order asked under a byte limit cannot leave the
//!   later ones without data (Kafka's fetchers rotate the same way).
//! - Epochs: a partition is fetched at the source leader epoch it was attached with and its
//!   batches are applied up to the destination leader epoch its owner told last; a raise never
//!   lowers it.
//! - A source leader epoch is news to the partition once per new value.
//! - Holds: a partition whose answer failed, or whose batches were held back above the
//!   destination epoch, is not fetched until its hold ends (Kafka's follower delays a
//!   partition in error the same way), while the others go on; a raise of its destination
//!   epoch, or an attach, ends a hold at once. Time is an input: milliseconds on the caller's
//!   clock.

use crate::host::TopicPartition;
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

impl PartitionFetchState {
    /// Whether a round at `now_ms` may ask for it: no Fetch of it in flight, no answer being
    /// applied, no hold.
    fn ready(&self, now_ms: u64) -> bool {
        let held = self.held_until_ms.is_some_and(|until| until > now_ms);
        !self.applying && !self.fetching && !held
    }
}

/// A fetcher's partitions and the round-robin cursor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchState {
    partitions: BTreeMap<TopicPartition, PartitionFetchState>,
    /// The key the last Fetch reached: the next one starts after it.
    cursor: Option<TopicPartition>,
}

impl FetchState {
    /// Starts fetching `key` under `epochs`; a partition attached again (its actor restarted,
    /// or moved back) keeps an apply in flight, which still finishes before it is fetched again,
    /// and is told its source epoch afresh.
    pub fn attach(&mut self, key: TopicPartition, epochs: FetchEpochs) {
        let state = self.partitions.entry(key).or_insert(PartitionFetchState {
            epochs,
            applying: false,
            fetching: false,
            held_until_ms: None,
            told_source_epoch: -1,
        });
        state.epochs = epochs;
        state.held_until_ms = None;
        state.told_source_epoch = -1;
    }

    /// Stops fetching `key`.
    pub fn detach(&mut self, key: &TopicPartition) {
        self.partitions.remove(key);
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

    /// `key` is not fetched before `until_ms`.
    pub fn hold(&mut self, key: &TopicPartition, until_ms: u64) {
        if let Some(state) = self.partitions.get_mut(key) {
            state.held_until_ms = Some(until_ms);
        }
    }

    /// When the earliest hold ends, if a partition is held at `now_ms`.
    pub fn next_wake(&self, now_ms: u64) -> Option<u64> {
        self.partitions
            .values()
            .filter_map(|state| state.held_until_ms)
            .filter(|until| *until > now_ms)
            .min()
    }

    /// The partitions the next Fetch asks for at `now_ms` (at most `max_partitions`, none being
    /// applied or held), in turn; the cursor moves past them.
    pub fn next_round(&mut self, max_partitions: usize, now_ms: u64) -> Vec<TopicPartition> {
        let cursor = self.cursor.as_ref();
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
        let (mut first, mut reached, mut full) = (None, None, false);
        for (key, state) in in_turn {
            if round.len() == max_partitions {
                full = true;
                break;
            }
            first = first.or(Some(key));
            reached = Some(key);
            if state.ready(now_ms) {
                round.push(key.clone());
            }
        }
        let next = if full { reached } else { first };
        if let Some(next) = next.cloned() {
            self.cursor = Some(next);
        }
        round
    }

    /// How many partitions a round at `now_ms` could ask for.
    pub fn ready(&self, now_ms: u64) -> usize {
        self.partitions
            .values()
            .filter(|state| state.ready(now_ms))
            .count()
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

    const EPOCHS: FetchEpochs = FetchEpochs {
        topic_id: Uuid::nil(),
        source: 4,
        destination: 7,
    };

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
                let round = state.next_round(*max, 0);
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
        assert!(state.next_round(10, 0).is_empty(), "still applying");
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
            let mut round = names(&state.next_round(10, now))
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>();
            round.sort();
            assert_eq!(round, *expected, "{case}");
            assert_eq!(state.next_wake(now), wake, "{case}");
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
}
