//! The mirror partition states of docs/design.md §2 as they appear on the wire: an `int8` in
//! `MirrorPartitionStateValue`, `ReadMirrorStates` and `WriteMirrorStates`, and the name in
//! `DescribeMirrors`. The engine's state machine carries richer per-state data; this is only the
//! persisted and transmitted tag.

use std::fmt;

/// A mirror partition state's wire value (KIP-1279's set, docs/design.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i8)]
pub enum MirrorState {
    /// LME lookup on the source, truncation, waiting for the ISR to finish truncating.
    Preparing = 0,
    /// Fetcher running; the partition is read-only.
    Mirroring = 1,
    /// Removing the fetcher.
    Pausing = 2,
    /// Read-only, no fetch, no metadata sync.
    Paused = 3,
    /// Failover steps: remove fetcher, bump epoch and truncate to LSO, persist LME, PID reset.
    Stopping = 4,
    /// An ordinary writable topic.
    Stopped = 5,
    /// An error was recorded with the previous state and retry count.
    Failed = 6,
    /// No cached state: the absence of state, never persisted as a target.
    Unknown = 16,
}

impl MirrorState {
    /// Every state, in wire-value order.
    pub const ALL: [MirrorState; 8] = [
        MirrorState::Preparing,
        MirrorState::Mirroring,
        MirrorState::Pausing,
        MirrorState::Paused,
        MirrorState::Stopping,
        MirrorState::Stopped,
        MirrorState::Failed,
        MirrorState::Unknown,
    ];

    /// The `int8` stored in records and sent in RPCs.
    pub fn wire_value(self) -> i8 {
        self as i8
    }

    /// The state with this wire value, if any.
    pub fn from_wire(value: i8) -> Option<MirrorState> {
        MirrorState::ALL
            .into_iter()
            .find(|s| s.wire_value() == value)
    }

    /// The name DescribeMirrors reports and operators read.
    pub fn name(self) -> &'static str {
        match self {
            MirrorState::Preparing => "PREPARING",
            MirrorState::Mirroring => "MIRRORING",
            MirrorState::Pausing => "PAUSING",
            MirrorState::Paused => "PAUSED",
            MirrorState::Stopping => "STOPPING",
            MirrorState::Stopped => "STOPPED",
            MirrorState::Failed => "FAILED",
            MirrorState::Unknown => "UNKNOWN",
        }
    }

    /// The state with this name, as [`MirrorState::name`] spells it.
    pub fn from_name(name: &str) -> Option<MirrorState> {
        MirrorState::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for MirrorState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_values_are_the_decisions_table() {
        let values: Vec<i8> = MirrorState::ALL.iter().map(|s| s.wire_value()).collect();
        assert_eq!(values, [0, 1, 2, 3, 4, 5, 6, 16]);
        for s in MirrorState::ALL {
            assert_eq!(MirrorState::from_wire(s.wire_value()), Some(s));
            assert_eq!(MirrorState::from_name(s.name()), Some(s));
        }
        assert_eq!(MirrorState::from_wire(7), None);
        assert_eq!(MirrorState::from_name("mirroring"), None);
    }
}
