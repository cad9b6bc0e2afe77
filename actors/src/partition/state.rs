//! The data of a mirror partition's state machine: its phases, inputs and effects.
//!
//! A phase carries only what is valid in it: PREPARING knows which step it is on, STOPPING which
//! of its two parallel branches are done, FAILED the state it failed from and its retry count.
//! Every asynchronous effect carries an [`OpId`]; its completion comes back as an input with the
//! same id, and a completion whose id the current phase is not waiting for is stale and dropped.

use kmirror_protocol::state::MirrorState;

/// Identifies one asynchronous effect and its completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

/// What the topic config `mirror.name` asks of the partition (docs/design.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Desired {
    /// `<mirror>`: mirror it.
    Mirroring,
    /// `<mirror>.paused`.
    Paused,
    /// `<mirror>.removed`: fail over; the topic becomes writable.
    Stopped,
}

/// Why an effect failed, as the shell classified it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// Whether retrying can help (source unreachable: yes; source topic deleted: no).
    pub retryable: bool,
    /// For operators: DescribeMirrors shows it.
    pub message: String,
    /// The invariant of the log this failure refused to break, if that is what it is.
    pub broken: Option<crate::invariant::Invariant>,
}

impl Cause {
    /// A transient failure.
    pub fn retryable(message: impl Into<String>) -> Cause {
        Cause {
            retryable: true,
            message: message.into(),
            broken: None,
        }
    }

    /// A failure only an operator can clear (StopMirrorTopics, then StartMirrorTopics).
    pub fn fatal(message: impl Into<String>) -> Cause {
        Cause {
            retryable: false,
            message: message.into(),
            broken: None,
        }
    }

    /// A fatal failure that refused to break `invariant` of the log.
    pub fn broken(invariant: crate::invariant::Invariant, message: impl Into<String>) -> Cause {
        Cause {
            broken: Some(invariant),
            ..Cause::fatal(message)
        }
    }
}

/// The coordinator's record of a partition (`MirrorPartitionStateValue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredState {
    /// The state.
    pub state: MirrorState,
    /// The state before FAILED, or UNKNOWN.
    pub previous: MirrorState,
    /// Consecutive failures; -1 when not retryable.
    pub retry_attempt: i16,
    /// Why it failed.
    pub error: Option<String>,
    /// The destination leader epoch of the writer.
    pub leader_epoch: i32,
}

/// A failure being recorded or waited out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The state the partition failed in; a retry resumes from it.
    pub previous: MirrorState,
    /// Consecutive failures; -1 when not retryable.
    pub retry_attempt: i16,
    /// Why.
    pub error: String,
}

/// A state the partition is entering, written to the coordinator before anything else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Align the log with the source.
    Preparing,
    /// Run the fetcher.
    Mirroring,
    /// Remove the fetcher.
    Pausing,
    /// Idle and read-only.
    Paused,
    /// Fail over.
    Stopping,
    /// Writable.
    Stopped,
    /// Record a failure.
    Failed(Failure),
}

impl Target {
    /// The state written to the coordinator.
    pub fn state(&self) -> MirrorState {
        match self {
            Target::Preparing => MirrorState::Preparing,
            Target::Mirroring => MirrorState::Mirroring,
            Target::Pausing => MirrorState::Pausing,
            Target::Paused => MirrorState::Paused,
            Target::Stopping => MirrorState::Stopping,
            Target::Stopped => MirrorState::Stopped,
            Target::Failed(_) => MirrorState::Failed,
        }
    }
}

/// The steps of PREPARING.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreparePhase {
    /// Asking the source for the last mirrored epoch.
    LookingUpLme,
    /// Cutting the local log for that LME.
    Truncating,
    /// Waiting until every ISR member has truncated too.
    WaitingForIsr,
}

/// One of STOPPING's parallel branches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BumpBranch {
    /// BumpLeaderEpochs sent.
    InFlight(OpId),
    /// The controller answered.
    Done,
}

/// STOPPING's other branch: truncate to the LSO, then persist the LME.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LsoBranch {
    /// Truncating to the LSO.
    Truncating(OpId),
    /// Writing the LME to `__mirror_state`.
    PersistingLme(OpId),
    /// Both done.
    Done,
}

/// The steps of STOPPING (docs/design.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopping {
    /// 1. Removing the fetcher.
    DetachingFetcher(OpId),
    /// 2. The two parallel branches.
    Converging { bump: BumpBranch, lso: LsoBranch },
    /// 3. Appending the MIRROR_PID_RESET barrier.
    ResettingPids(OpId),
}

/// Where the partition is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Not the leader, or a leader with no mirror state to act on.
    Unknown,
    /// Leader, reading the coordinator's record.
    Loading(OpId),
    /// Writing `target` to the coordinator; nothing else runs until it is durable.
    Persisting { op: OpId, target: Target },
    /// Aligning the log with the source.
    Preparing { op: OpId, step: PreparePhase },
    /// The fetcher runs; `bump` is a BumpLeaderEpochs in flight for DLE >= SLE.
    Mirroring { bump: Option<OpId> },
    /// Removing the fetcher.
    Pausing(OpId),
    /// Idle and read-only.
    Paused,
    /// Failing over.
    Stopping(Stopping),
    /// Writable.
    Stopped,
    /// Failed; `retry` is the timer that will resume it, if any.
    Failed {
        failure: Failure,
        retry: Option<OpId>,
    },
}

impl Phase {
    /// Whether the partition waits for an effect to complete (a supervisor expects inputs
    /// then); settled phases may see none for as long as nothing changes, and neither may a
    /// partition waiting for its followers, which takes as long as a follower is away, nor one
    /// reading its record, which its shell reads again every second for as long as the shard
    /// is away (a coordinator that does not answer is retried, never a failure).
    pub fn is_busy(&self) -> bool {
        match self {
            Phase::Preparing {
                step: PreparePhase::WaitingForIsr,
                ..
            }
            | Phase::Loading(_) => false,
            Phase::Persisting { .. }
            | Phase::Preparing { .. }
            | Phase::Pausing(_)
            | Phase::Stopping(_) => true,
            Phase::Mirroring { bump } => bump.is_some(),
            Phase::Unknown | Phase::Paused | Phase::Stopped | Phase::Failed { .. } => false,
        }
    }

    /// The change to the log this phase waits for, if any. A log change issued earlier that the
    /// phase no longer waits for must not land (a stop during PREPARING's truncation: the
    /// truncation would cut writes made after STOPPED), so the shell cancels it.
    pub fn awaited_log_change(&self) -> Option<OpId> {
        match self {
            Phase::Preparing {
                op,
                step: PreparePhase::Truncating,
            }
            | Phase::Stopping(
                Stopping::Converging {
                    lso: LsoBranch::Truncating(op),
                    ..
                }
                | Stopping::ResettingPids(op),
            ) => Some(*op),
            Phase::Preparing { .. }
            | Phase::Stopping(_)
            | Phase::Unknown
            | Phase::Loading(_)
            | Phase::Persisting { .. }
            | Phase::Mirroring { .. }
            | Phase::Pausing(_)
            | Phase::Paused
            | Phase::Stopped
            | Phase::Failed { .. } => None,
        }
    }

    /// The state as DescribeMirrors names it (a write in flight shows the state being left).
    pub fn state(&self) -> MirrorState {
        match self {
            Phase::Unknown | Phase::Loading(_) | Phase::Persisting { .. } => MirrorState::Unknown,
            Phase::Preparing { .. } => MirrorState::Preparing,
            Phase::Mirroring { .. } => MirrorState::Mirroring,
            Phase::Pausing(_) => MirrorState::Pausing,
            Phase::Paused => MirrorState::Paused,
            Phase::Stopping(_) => MirrorState::Stopping,
            Phase::Stopped => MirrorState::Stopped,
            Phase::Failed { .. } => MirrorState::Failed,
        }
    }
}

impl Input {
    /// The input's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Input::BecameLeader { .. } => "BecameLeader",
            Input::LeaderEpochChanged { .. } => "LeaderEpochChanged",
            Input::LostLeadership => "LostLeadership",
            Input::DesiredChanged(_) => "DesiredChanged",
            Input::StateLoaded { .. } => "StateLoaded",
            Input::StatePersisted { .. } => "StatePersisted",
            Input::LmeLookedUp { .. } => "LmeLookedUp",
            Input::Truncated { .. } => "Truncated",
            Input::IsrCaughtUp { .. } => "IsrCaughtUp",
            Input::FetcherDetached { .. } => "FetcherDetached",
            Input::BatchesAppended { .. } => "BatchesAppended",
            Input::SourceEpochSeen { .. } => "SourceEpochSeen",
            Input::FetchFailed(_) => "FetchFailed",
            Input::EpochBumped { .. } => "EpochBumped",
            Input::TruncatedToLso { .. } => "TruncatedToLso",
            Input::LmePersisted { .. } => "LmePersisted",
            Input::PidResetAppended { .. } => "PidResetAppended",
            Input::TimerFired { .. } => "TimerFired",
            Input::GaveUp(_) => "GaveUp",
            Input::Retry => "Retry",
        }
    }
}

/// Everything that can happen to a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Command: this broker now leads the partition, at `leader_epoch`.
    BecameLeader { leader_epoch: i32, desired: Desired },
    /// Command: the partition's leader epoch changed while this broker stays leader.
    LeaderEpochChanged { leader_epoch: i32 },
    /// Command: another broker leads the partition now.
    LostLeadership,
    /// Command: `mirror.name` changed.
    DesiredChanged(Desired),
    /// The coordinator's record (none for a new partition).
    StateLoaded {
        op: OpId,
        stored: Option<StoredState>,
    },
    /// A state write finished.
    StatePersisted { op: OpId, result: Result<(), Cause> },
    /// The source answered LastMirroredEpochs (-1: none).
    LmeLookedUp {
        op: OpId,
        result: Result<i32, Cause>,
    },
    /// The log was aligned for the LME.
    Truncated { op: OpId, result: Result<(), Cause> },
    /// Every ISR member reached the truncation.
    IsrCaughtUp { op: OpId },
    /// The fetcher is gone: no more appends will arrive.
    FetcherDetached { op: OpId },
    /// The fetcher appended batches; `source_epoch` is the greatest epoch among them.
    BatchesAppended { source_epoch: i32 },
    /// The fetcher saw a source epoch it holds back until the destination epoch is bumped.
    SourceEpochSeen { source_epoch: i32 },
    /// The fetcher failed, classified.
    FetchFailed(Cause),
    /// BumpLeaderEpochs answered with the partition's new leader epoch.
    EpochBumped {
        op: OpId,
        result: Result<i32, Cause>,
    },
    /// The log was truncated to its LSO; `latest_epoch` is the newest mirrored epoch left in
    /// it (`None`: nothing mirrored is left).
    TruncatedToLso {
        op: OpId,
        result: Result<Option<i32>, Cause>,
    },
    /// The LME was written to `__mirror_state`.
    LmePersisted { op: OpId, result: Result<(), Cause> },
    /// The MIRROR_PID_RESET barrier was appended.
    PidResetAppended { op: OpId, result: Result<(), Cause> },
    /// A scheduled retry is due.
    TimerFired { op: OpId },
    /// Command: the supervisor restarted the partition as often as its budget allows and it
    /// still makes no progress; the reason becomes the FAILED partition's error.
    GaveUp(String),
    /// Command: the operator changed what a failure may have come from (the mirror's configs:
    /// credentials, certificates, bootstrap servers): a FAILED partition retries at once, into
    /// the state it failed in, whether or not its failure was retryable.
    Retry,
}

/// What the shell must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Read the coordinator's record (locally or with ReadMirrorStates).
    LoadState { op: OpId },
    /// Write this record (locally or with WriteMirrorStates).
    PersistState { op: OpId, stored: StoredState },
    /// Ask the source for the LME (LastMirroredEpochs; UNSUPPORTED_VERSION means -1).
    LookUpLme { op: OpId },
    /// Align the log for `lme` ([`crate::epoch::alignment_for_lme`]).
    TruncateForLme { op: OpId, lme: i32 },
    /// Wait until every ISR member (or replica) has truncated.
    AwaitIsr { op: OpId },
    /// Start fetching from the log end offset, holding back batches of a leader epoch above
    /// `leader_epoch` (the destination's, DLE >= SLE).
    AttachFetcher { leader_epoch: i32 },
    /// The destination leader epoch rose while the fetcher runs: it holds back batches only
    /// above `leader_epoch` from now on.
    RaiseFetcherEpoch { leader_epoch: i32 },
    /// Stop fetching; complete when no append can follow.
    DetachFetcher { op: OpId },
    /// Ask the controller to raise the leader epoch above `min_leader_epoch` (None: the newest
    /// epoch in the local log).
    BumpLeaderEpoch {
        op: OpId,
        min_leader_epoch: Option<i32>,
    },
    /// Truncate the log to its LSO, dropping the undecided transactional tail.
    TruncateToLso { op: OpId },
    /// Record the LME in `__mirror_state` (`None`: no LME; the one recorded stays).
    PersistLme { op: OpId, lme: Option<i32> },
    /// Append the MIRROR_PID_RESET control batch at the destination's `leader_epoch`.
    AppendPidReset { op: OpId, leader_epoch: i32 },
    /// Refuse (true) or accept (false) produce requests.
    SetReadOnly(bool),
    /// Deliver [`Input::TimerFired`] after this delay.
    ScheduleRetry { op: OpId, after_ms: u64 },
}

/// Why a command cannot be honoured in the current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// Only a MIRRORING partition can be paused.
    #[error("a {0} partition cannot be paused")]
    CannotPause(MirrorState),
    /// Leadership commands need leadership.
    #[error("this broker does not lead the partition")]
    NotLeader,
    /// STOPPED and PAUSED partitions are not failed by a supervisor or the metadata sync.
    #[error("a {0} partition is left alone")]
    LeftAlone(MirrorState),
}
