//! The invariants a mirror partition's log keeps while batches are mirrored into it, by name
//! (docs/design.md §12.7). The engine checks them before it hands a fetch answer's batches to
//! the host's log, so a break is refused, named, and counted
//! (`kmirror_mirror_invariant_violations_total{invariant}`) whatever the host's log checks
//! itself; the partition fails with the reason and nothing of that answer is appended.
//!
//! Corrupt input (a batch whose framing or CRC does not check) is the source's fault, not a
//! broken invariant: it fails the partition too, but is not counted here.

/// One invariant of a mirrored log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Invariant {
    /// Offsets only increase: every batch starts at or past the end of what the log holds
    /// (gaps are allowed: a compacted source leaves them).
    OffsetsIncrease,
    /// Leader epochs never go down along the log.
    EpochNeverLowers,
}

impl Invariant {
    /// Every invariant, for tables and metrics.
    pub const ALL: [Invariant; 2] = [Invariant::OffsetsIncrease, Invariant::EpochNeverLowers];

    /// Its name, as the metric label and messages give it.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::OffsetsIncrease => "offsets_increase",
            Invariant::EpochNeverLowers => "epoch_never_lowers",
        }
    }
}

/// One batch as the append checks see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchBounds {
    /// Its first offset.
    pub base_offset: i64,
    /// The offset after its last record.
    pub next_offset: i64,
    /// Its partition leader epoch (negative: none stamped).
    pub leader_epoch: i32,
}

/// Checks that appending `batches`, in order, to a log ending at `log_end` whose newest epoch is
/// `latest_epoch` (-1: none) keeps every invariant; the first broken one, and why.
pub fn check_append(
    log_end: i64,
    latest_epoch: i32,
    batches: impl IntoIterator<Item = BatchBounds>,
) -> Result<(), (Invariant, String)> {
    let (mut end, mut epoch) = (log_end, latest_epoch);
    for batch in batches {
        if batch.base_offset < end || batch.next_offset <= batch.base_offset {
            return Err((
                Invariant::OffsetsIncrease,
                format!(
                    "a mirrored batch at offsets {}..{} does not start past the log end {end}",
                    batch.base_offset, batch.next_offset
                ),
            ));
        }
        if batch.leader_epoch >= 0 && batch.leader_epoch < epoch {
            return Err((
                Invariant::EpochNeverLowers,
                format!(
                    "a mirrored batch at offset {} has leader epoch {}, below the log's {epoch}",
                    batch.base_offset, batch.leader_epoch
                ),
            ));
        }
        end = batch.next_offset;
        epoch = epoch.max(batch.leader_epoch);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base_offset: i64, next_offset: i64, leader_epoch: i32) -> BatchBounds {
        BatchBounds {
            base_offset,
            next_offset,
            leader_epoch,
        }
    }

    #[test]
    fn each_invariant_is_named_when_broken() {
        let table = [
            (vec![batch(10, 15, 3), batch(20, 25, 4)], Ok(())),
            (vec![batch(9, 15, 3)], Err(Invariant::OffsetsIncrease)),
            (
                vec![batch(10, 15, 3), batch(14, 16, 3)],
                Err(Invariant::OffsetsIncrease),
            ),
            (vec![batch(10, 10, 3)], Err(Invariant::OffsetsIncrease)),
            (vec![batch(10, 15, 2)], Err(Invariant::EpochNeverLowers)),
            (
                vec![batch(10, 15, 5), batch(15, 16, 4)],
                Err(Invariant::EpochNeverLowers),
            ),
            (vec![batch(10, 15, -1)], Ok(())),
        ];
        for (batches, expected) in table {
            let checked = check_append(10, 3, batches.clone()).map_err(|(i, _)| i);
            assert_eq!(checked, expected, "{batches:?}");
        }
    }

    #[test]
    fn every_invariant_has_a_distinct_name() {
        let names: std::collections::HashSet<_> = Invariant::ALL.iter().map(|i| i.name()).collect();
        assert_eq!(names.len(), Invariant::ALL.len());
    }
}
