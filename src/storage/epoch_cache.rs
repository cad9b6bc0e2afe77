//! The leader-epoch cache: for each leader epoch, the first offset written in it.
//!
//! It answers OffsetForLeaderEpoch ("where does epoch E end in this log?"), which is how a
//! follower, and a mirror after a DivergingEpoch, finds the exact offset where logs diverge. The
//! semantics are Kafka's `LeaderEpochFileCache`:
//! - entries are strictly increasing in both epoch and start offset; assigning an entry removes
//!   every entry that conflicts with it (epoch or start offset not below it);
//! - the end offset of epoch E is the start offset of the first epoch above E, or the log end
//!   offset when E is the latest epoch;
//! - truncating the log's end drops entries starting at or after the new end; advancing the log
//!   start moves the first kept entry's start up to the new log start.
//!
//! Persisted as `leader-epoch-checkpoint` through [`super::checkpoint`] on every change.

/// Epoch of "no epoch", as Kafka's `UNDEFINED_EPOCH`.
pub const UNDEFINED_EPOCH: i32 = -1;
/// Offset of "no offset", as Kafka's `UNDEFINED_EPOCH_OFFSET`.
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

/// One epoch and the first offset written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    /// The leader epoch.
    pub epoch: i32,
    /// The first offset of the epoch.
    pub start_offset: i64,
}

/// The cache. Pure: the log persists it after each change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochCache {
    entries: Vec<EpochEntry>,
}

impl EpochCache {
    /// A cache holding `entries`, which are normalised the way assigning them one by one would.
    pub fn from_entries(entries: impl IntoIterator<Item = EpochEntry>) -> EpochCache {
        let mut cache = EpochCache::default();
        for entry in entries {
            cache.assign(entry.epoch, entry.start_offset);
        }
        cache
    }

    /// Every entry, oldest first.
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The newest entry.
    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// The newest epoch.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.latest().map(|e| e.epoch)
    }

    /// Records that `epoch` starts at `start_offset`. Returns whether the cache changed.
    /// Negative values are ignored (a batch without an epoch says nothing).
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 || start_offset < 0 {
            return false;
        }
        if let Some(latest) = self.latest()
            && latest.epoch == epoch
            && latest.start_offset <= start_offset
        {
            return false;
        }
        self.entries
            .retain(|e| e.epoch < epoch && e.start_offset < start_offset);
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        true
    }

    /// The log's end moved back to `end_offset`: forget epochs that start at or after it.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < end_offset);
        before != self.entries.len()
    }

    /// The log's start moved up to `start_offset`: drop epochs that ended before it and start the
    /// first kept one there.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        // The last entry starting at or before the new start still covers it.
        let Some(keep) = self
            .entries
            .iter()
            .rposition(|e| e.start_offset <= start_offset)
        else {
            return false;
        };
        let changed = keep > 0 || self.entries[keep].start_offset != start_offset;
        self.entries.drain(..keep);
        self.entries[0].start_offset = start_offset;
        changed
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Kafka's `endOffsetFor`: the greatest epoch not above `requested` and the offset where that
    /// epoch ends in a log ending at `log_end_offset`.
    /// - `requested` undefined, or above the latest epoch: `(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`;
    /// - `requested` is the latest epoch: `(requested, log_end_offset)`;
    /// - otherwise the first epoch above `requested` gives the end offset, and the epoch is the
    ///   greatest one at or below `requested` (or `requested` itself when it is older than every
    ///   entry).
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        if requested == UNDEFINED_EPOCH {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        }
        if self.latest_epoch() == Some(requested) {
            return (requested, log_end_offset);
        }
        let Some(higher) = self.entries.iter().find(|e| e.epoch > requested) else {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        };
        match self.entries.iter().rev().find(|e| e.epoch <= requested) {
            Some(floor) => (floor.epoch, higher.start_offset),
            None => (requested, higher.start_offset),
        }
    }

    /// The epoch of the record at `offset`, if the cache covers it.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.start_offset <= offset)
            .map(|e| e.epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, i64)]) -> EpochCache {
        EpochCache::from_entries(entries.iter().map(|&(epoch, start_offset)| EpochEntry {
            epoch,
            start_offset,
        }))
    }

    fn pairs(c: &EpochCache) -> Vec<(i32, i64)> {
        c.entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    #[test]
    fn end_offset_for_follows_kafkas_cases() {
        let c = cache(&[(2, 10), (4, 20), (7, 35)]);
        let leo = 50;
        assert_eq!(c.end_offset_for(UNDEFINED_EPOCH, leo), (-1, -1));
        assert_eq!(c.end_offset_for(7, leo), (7, 50)); // the latest epoch ends at the LEO
        assert_eq!(c.end_offset_for(4, leo), (4, 35));
        assert_eq!(c.end_offset_for(5, leo), (4, 35)); // unknown epoch between known ones
        assert_eq!(c.end_offset_for(1, leo), (1, 10)); // older than every entry
        assert_eq!(c.end_offset_for(8, leo), (-1, -1)); // newer than every entry
        assert_eq!(EpochCache::default().end_offset_for(3, leo), (-1, -1));
    }

    #[test]
    fn assign_keeps_entries_strictly_increasing() {
        let mut c = cache(&[(1, 0), (3, 10)]);
        assert!(!c.assign(3, 15), "same epoch, later offset: no change");
        assert!(c.assign(5, 20));
        assert_eq!(pairs(&c), [(1, 0), (3, 10), (5, 20)]);
        // An older epoch or an earlier offset replaces the entries it conflicts with.
        assert!(c.assign(4, 12));
        assert_eq!(pairs(&c), [(1, 0), (3, 10), (4, 12)]);
        assert!(c.assign(6, 5));
        assert_eq!(pairs(&c), [(1, 0), (6, 5)]);
        assert!(!c.assign(-1, 7));
    }

    #[test]
    fn truncation_from_either_end() {
        let mut c = cache(&[(1, 0), (3, 10), (5, 20)]);
        assert!(c.truncate_from_end(20));
        assert_eq!(pairs(&c), [(1, 0), (3, 10)]);
        assert!(!c.truncate_from_end(25));
        assert!(c.truncate_from_start(12));
        assert_eq!(pairs(&c), [(3, 12)]);
        assert!(
            !c.truncate_from_start(5),
            "before the first entry: nothing to drop"
        );
        assert_eq!(c.epoch_for_offset(15), Some(3));
        assert_eq!(c.epoch_for_offset(11), None);
    }
}
