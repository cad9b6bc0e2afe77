//! When a fetcher's lanes open and rest, in pure code (docs/design.md §4, "Lanes opened
//! ahead").
//!
//! A lane is a connection of its own to the source broker. Made when a Fetch first needs it,
//! its handshake (and a new client's metadata) delays that Fetch by two or three round trips:
//! across 150 ms, a steady partition's first pieces on the reserve took 475 ms for 68 KB where
//! one round trip was enough. Across a distant link the reserve's lanes are therefore opened
//! as soon as the distance is known ([`lanes_to_open`]).
//!
//! The distance is the quickest answer that showed a backlog: the source answers such a Fetch
//! at once, so it took the round trip and the transfer of what it brought (and, on a new
//! lane, the handshake that opening ahead saves: the first answers decide, before a lane is
//! used twice). Any other answer may have been held by the source for up to
//! `fetch.wait.max.ms` (a long poll), and an idle mirror on a near source would look 500 ms
//! away.
//!
//! A Fetch that brought nothing rests its lane for the idle backoff, so a source that answers
//! at once is not asked in a loop; one the source held for the backoff beyond the round trip
//! waited already, and its partitions may go on another free lane at once
//! ([`held_past_backoff`]).

use std::ops::Range;

/// The quickest answer with a backlog (ms) from which a link counts as distant and the
/// reserve's lanes are opened ahead: below it a handshake of two or three round trips costs
/// a Fetch under 60 ms, and the source keeps no connection that nothing uses.
pub const OPEN_AHEAD_MS: u64 = 20;

/// The lanes a fetcher opens before a Fetch needs them: the reserve's (lanes 1 to
/// `reserve`) once `quickest_ms`, the quickest answer that showed a backlog, is
/// [`OPEN_AHEAD_MS`] or more; none before (nothing measured, or a near source).
pub fn lanes_to_open(quickest_ms: Option<u64>, reserve: usize) -> Range<usize> {
    match quickest_ms {
        Some(ms) if ms >= OPEN_AHEAD_MS => 1..reserve.saturating_add(1),
        _ => 1..1,
    }
}

/// Whether a Fetch that brought nothing and took `took_ms` was held by the source for the
/// idle backoff (`idle_backoff_ms`) beyond the link's round trip (`quickest_ms`, as in
/// [`lanes_to_open`]; 0 before it is known): a long poll, which waited already.
pub fn held_past_backoff(took_ms: u64, quickest_ms: Option<u64>, idle_backoff_ms: u64) -> bool {
    took_ms >= quickest_ms.unwrap_or(0).saturating_add(idle_backoff_ms)
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

    /// A long poll held past the backoff beyond the round trip; not an answer that took only
    /// the round trip, nor one that came at once.
    #[test]
    fn only_a_fetch_held_past_the_backoff_goes_on_at_once() {
        assert!(held_past_backoff(500, None, 100), "a near long poll");
        assert!(
            !held_past_backoff(50, None, 100),
            "a quick empty answer rests"
        );
        assert!(
            held_past_backoff(650, Some(150), 100),
            "a distant long poll"
        );
        assert!(
            !held_past_backoff(160, Some(150), 100),
            "a distant empty answer rests"
        );
        assert!(held_past_backoff(250, Some(150), 100));
    }
}
