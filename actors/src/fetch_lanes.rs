//! When a fetcher opens its lanes ahead, in pure code (docs/design.md §4, "Lanes opened
//! ahead").
//!
//! A lane is a connection of its own to the source broker. Made when a Fetch first needs it,
//! its handshake (and a new client's metadata) delays that Fetch by two or three round trips:
//! across 150 ms, a steady partition's first pieces on the reserve took 475 ms for 68 KB where
//! one round trip was enough. Across a distant link the reserve's lanes are therefore opened
//! as soon as the distance is known ([`lanes_to_open`]).
//!
//! The distance is the quicker of two measures, whichever comes first:
//! - the quickest round trip lane 0's connection measured: of its handshake's ApiVersions,
//!   which a source answers at once, and of every request since (none is answered quicker
//!   than the distance). A fetcher asks for it as it starts (lane 0 carries its first Fetch
//!   anyway), so its reserve opens about two round trips after the start; judged on answers
//!   alone, it opened two seconds after a catch-up's start across 150 ms, after a steady
//!   producer's first records, whose pieces then waited for their connections (70 KB in
//!   465 ms, not 155). One sample can be late (a source busy as it answered): a near source
//!   whose only ApiVersions came 30 ms late opened 8 idle connections; the quickest of two
//!   (with the lane client's Metadata) is less often wrong;
//! - the quickest answer, with a backlog, to a Fetch that asked every partition from below
//!   the high watermark its last answer showed: the source had records there and answered at
//!   once (for a fetcher whose lane 0 did not open). Any other Fetch may have been held by
//!   the source for up to `fetch.wait.max.ms` (a long poll): an idle mirror on a near source
//!   looked 500 ms away, and one whose long poll ended with a producer's burst 68 ms.

use crate::fetch_poll::RESERVE_BESIDE_POLLS;
use std::ops::Range;

/// The distance (ms, the module's doc) from which a link counts as distant and the reserve's
/// lanes are opened ahead: below it a handshake of two or three round trips costs
/// a Fetch under 60 ms, and the source keeps no connection that nothing uses.
pub const OPEN_AHEAD_MS: u64 = 20;

/// The lanes a fetcher opens before a Fetch needs them: the reserve's (lanes 1 to
/// `reserve`) once `quickest_ms`, the distance (the module's doc), is [`OPEN_AHEAD_MS`] or
/// more; none before (nothing measured, or a near source).
pub fn lanes_to_open(quickest_ms: Option<u64>, reserve: usize) -> Range<usize> {
    match quickest_ms {
        Some(ms) if ms >= OPEN_AHEAD_MS => 1..reserve.saturating_add(1),
        _ => 1..1,
    }
}

/// Whether caught-up partitions' own Fetch goes on the reserve instead of the pacing's free
/// lane (docs/design.md §4, "Near the source's end: the reserve"): that lane's connection is
/// not open (`pacing_lane_open` false: a handshake of two or three round trips first) while a
/// free lane of the reserve's is (`reserve_lane_open`), and of the reserve's `reserve_busy`
/// lanes, those not carrying one of its `polls` stay under the two the polls leave
/// (`crate::fetch_poll::most_polls`): found by review, caught-up partitions' Fetches, each
/// possibly held at the source for `fetch.wait.max.ms`, took four lanes of the reserve, and
/// polls that were due waited.
pub fn warm_reserve(
    pacing_lane_open: bool,
    reserve_lane_open: bool,
    reserve_busy: usize,
    polls: usize,
) -> bool {
    !pacing_lane_open
        && reserve_lane_open
        && reserve_busy.saturating_sub(polls) < RESERVE_BESIDE_POLLS
}

/// The link's distance (ms) from lane 0's connection's quickest round trip and the quickest
/// answer with a backlog to a Fetch answered at once: the quicker of those measured.
pub fn distance_ms(connection_ms: Option<u64>, quickest_ms: Option<u64>) -> Option<u64> {
    connection_ms.into_iter().chain(quickest_ms).min()
}

/// The round trip polls are timed by (ms): the quicker of the pacing's (its quickest small
/// answer on an open lane) and the link's distance ([`distance_ms`]), whichever are measured.
/// The pacing's alone was wrong for a distant mirror's first second and a half: its first
/// small answer had waited on a new lane's handshake and a long poll (458 ms across 150), so a
/// steady partition's polls left one per round trip and its growth was read 150 ms late (half
/// again too fast: its polls overshot). Every measure here is a quickest, so none is shorter
/// than the link.
pub fn link_round_trip_ms(pacing_ms: Option<u64>, distance_ms: Option<u64>) -> Option<u64> {
    pacing_ms.into_iter().chain(distance_ms).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reserve's lanes, once an answer with a backlog took 20 ms or more.
    #[test]
    fn the_reserve_opens_ahead_across_a_distant_link() {
        assert_eq!(lanes_to_open(None, 8), 1..1, "not measured yet");
        assert_eq!(lanes_to_open(Some(5), 8), 1..1, "a near source");
        assert_eq!(lanes_to_open(Some(19), 8), 1..1);
        assert_eq!(lanes_to_open(Some(20), 8), 1..9);
        assert_eq!(lanes_to_open(Some(150), 4), 1..5);
        assert_eq!(lanes_to_open(Some(150), 0), 1..1, "no reserve");
    }

    /// A new lane's handshake is spared only on an open lane of the reserve, and only while
    /// the reserve keeps its polls' lanes.
    #[test]
    fn caught_up_fetches_take_the_reserve_over_a_new_lane_within_two() {
        assert!(warm_reserve(false, true, 0, 0));
        assert!(warm_reserve(false, true, 5, 4), "one besides the polls");
        assert!(
            !warm_reserve(false, true, 2, 0),
            "two besides the polls already"
        );
        assert!(!warm_reserve(true, true, 0, 0), "the pacing's lane is open");
        assert!(
            !warm_reserve(false, false, 0, 0),
            "no open lane of the reserve free"
        );
    }

    /// Whichever measure came, the quicker of both once both did.
    #[test]
    fn the_distance_is_the_quicker_measure() {
        assert_eq!(distance_ms(None, None), None);
        assert_eq!(distance_ms(Some(151), None), Some(151));
        assert_eq!(distance_ms(None, Some(300)), Some(300));
        assert_eq!(
            distance_ms(Some(2), Some(500)),
            Some(2),
            "a near source's long poll"
        );
    }

    /// A late first answer does not time the polls once the link's distance is known.
    #[test]
    fn polls_are_timed_by_the_quicker_round_trip() {
        assert_eq!(link_round_trip_ms(None, None), None);
        assert_eq!(link_round_trip_ms(Some(458), None), Some(458));
        assert_eq!(link_round_trip_ms(Some(458), Some(151)), Some(151));
        assert_eq!(link_round_trip_ms(None, Some(151)), Some(151));
        assert_eq!(link_round_trip_ms(Some(150), Some(151)), Some(150));
    }
}
