//! The leader-epoch arithmetic of mirroring (docs/design.md §3 and §4), pure.
//!
//! A destination log holds the source's batches with the source's leader epochs, so its epoch
//! history (a list of `(epoch, start offset)`, oldest first, strictly increasing) is a prefix of
//! the source's, up to the point where the two diverged. Three questions follow:
//! - after failback, where to cut the local log so no batch has an epoch above the LME;
//! - after a DivergingEpoch answer, where the local log stops agreeing with the source;
//! - while mirroring, when to raise the destination leader epoch so it stays at or above the
//!   source's (the DLE >= SLE invariant).

/// An epoch and the first offset written in it.
pub type EpochStart = (i32, i64);

/// How PREPARING aligns the local log with the source for a given LME.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alignment {
    /// No LME (first mirroring, or a source without failback knowledge): empty the log and
    /// start at the source's log start.
    TruncateFully,
    /// Cut the log at this offset: the start of the first local epoch above the LME.
    TruncateTo(i64),
    /// Nothing local lies beyond the LME.
    KeepAll,
}

/// The alignment for `lme` given the local epoch history and log end offset.
pub fn alignment_for_lme(lme: i32, local: &[EpochStart], log_end_offset: i64) -> Alignment {
    if lme < 0 {
        return Alignment::TruncateFully;
    }
    match local.iter().find(|(epoch, _)| *epoch > lme) {
        Some((_, start)) if *start < log_end_offset => Alignment::TruncateTo(*start),
        _ => Alignment::KeepAll,
    }
}

/// Where the local log must be cut after the source said, for our last fetched epoch, that its
/// history has epoch `diverging_epoch` ending at `diverging_end_offset` (Fetch's DivergingEpoch,
/// or an OffsetForLeaderEpoch answer): Kafka's follower rule. The local log agrees with the
/// source up to the smaller of the source's end offset for that epoch and the local end of the
/// same epoch; when the source's epoch is not in the local history at all, the local end of the
/// greatest local epoch below it.
pub fn divergence_offset(
    diverging_epoch: i32,
    diverging_end_offset: i64,
    local: &[EpochStart],
    log_end_offset: i64,
) -> i64 {
    let local_end = |epoch: i32| -> Option<(i32, i64)> {
        // Kafka's end_offset_for over the local history.
        let higher = local.iter().find(|(e, _)| *e > epoch);
        let floor = local.iter().rev().find(|(e, _)| *e <= epoch);
        match (floor, higher) {
            (Some((e, _)), None) => Some((*e, log_end_offset)),
            (Some((e, _)), Some((_, start))) => Some((*e, *start)),
            (None, Some((_, start))) => Some((epoch, *start)),
            (None, None) => None,
        }
    };
    match local_end(diverging_epoch) {
        Some((_, end)) => end.min(diverging_end_offset).min(log_end_offset),
        None => diverging_end_offset.min(log_end_offset),
    }
}

/// How close (in epochs) the source may come to the destination epoch before a bump.
pub const LEADER_EPOCH_BUMP_THRESHOLD: i32 = 3;
/// How far above the source epoch a bump lifts the destination epoch.
pub const LEADER_EPOCH_BUMP_INCREMENT: i32 = 10;

/// The DLE >= SLE rule: when the source epoch comes within the threshold of the destination
/// leader epoch, the `MinLeaderEpoch` to request (the source epoch plus the increment).
pub fn bump_for(source_epoch: i32, destination_epoch: i32) -> Option<i32> {
    (source_epoch + LEADER_EPOCH_BUMP_THRESHOLD >= destination_epoch)
        .then_some(source_epoch + LEADER_EPOCH_BUMP_INCREMENT)
}

/// The controller's answer to BumpLeaderEpochs: the epoch becomes `max(min + 1, current)` when
/// the current epoch is not above `min`.
pub fn bumped_epoch(current: i32, min_leader_epoch: i32) -> i32 {
    if current <= min_leader_epoch {
        min_leader_epoch + 1
    } else {
        current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HISTORY: &[EpochStart] = &[(1, 0), (3, 100), (5, 250), (8, 400)];

    #[test]
    fn lme_alignment() {
        assert_eq!(
            alignment_for_lme(-1, HISTORY, 500),
            Alignment::TruncateFully
        );
        assert_eq!(
            alignment_for_lme(3, HISTORY, 500),
            Alignment::TruncateTo(250)
        );
        assert_eq!(
            alignment_for_lme(4, HISTORY, 500),
            Alignment::TruncateTo(250)
        );
        assert_eq!(alignment_for_lme(0, HISTORY, 500), Alignment::TruncateTo(0));
        assert_eq!(alignment_for_lme(8, HISTORY, 500), Alignment::KeepAll);
        assert_eq!(alignment_for_lme(20, HISTORY, 500), Alignment::KeepAll);
        // An epoch entry at the very end holds no batch: nothing to cut.
        assert_eq!(
            alignment_for_lme(5, &[(5, 10), (6, 30)], 30),
            Alignment::KeepAll
        );
        assert_eq!(alignment_for_lme(2, &[], 0), Alignment::KeepAll);
    }

    #[test]
    fn divergence_follows_kafkas_follower_rule() {
        // The source says epoch 5 ended at 300; locally epoch 5 ends at 400: cut at 300.
        assert_eq!(divergence_offset(5, 300, HISTORY, 500), 300);
        // The source's epoch 5 runs longer than ours: we agree up to our own end of epoch 5.
        assert_eq!(divergence_offset(5, 450, HISTORY, 500), 400);
        // The source never had epoch 4; its history says epoch 3 ends at 200 (unclean
        // election): the floor of 4 locally is 3, ending at 250, so cut at 200.
        assert_eq!(divergence_offset(3, 200, HISTORY, 500), 200);
        // The latest local epoch ends at the log end.
        assert_eq!(divergence_offset(8, 10_000, HISTORY, 500), 500);
        assert_eq!(divergence_offset(4, 10, &[], 0), 0);
    }

    #[test]
    fn bump_rule_keeps_destination_above_source() {
        assert_eq!(bump_for(5, 20), None);
        assert_eq!(bump_for(17, 20), Some(27));
        assert_eq!(bump_for(20, 20), Some(30));
        assert_eq!(bump_for(25, 20), Some(35));
        assert_eq!(bumped_epoch(20, 27), 28);
        assert_eq!(bumped_epoch(30, 27), 30);
        assert_eq!(bumped_epoch(27, 27), 28);
    }
}
