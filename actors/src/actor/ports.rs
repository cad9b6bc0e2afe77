//! What a partition actor needs from its broker, as asynchronous ports: each effect of the state
//! machine is one call, and its result comes back to the actor as the matching input.
//!
//! The broker implements them over its partition log, controller, `__mirror_state` coordinator
//! and source client; actor tests implement them with scripted answers. The futures run on the
//! actor's arbiter (they need not be `Send`); long I/O belongs on the broker's tokio workers,
//! behind the future.
//!
//! A port that changes the log (`truncate_for_lme`, `truncate_to_lso`, `append_pid_reset`)
//! makes its change within one poll of its future, never behind another task: the actor drops
//! such a future once its state machine stops waiting for it (a stop while PREPARING truncates),
//! and a dropped future must leave the log as it was.

use crate::host::FetchProgress;
use crate::partition::{Cause, StoredState};
use actix::{Message, Recipient};
use std::future::Future;
use std::pin::Pin;

/// What a fetcher round did for this partition: the progress of its answer's apply (the same
/// [`FetchProgress`] the log procedures return; only `Appended` and `HeldBack` are news to the
/// partition, so a fetcher reports only those), or why its fetch failed, classified.
///
/// `Appended` carries the greatest of the batches' epochs and the SLE; `HeldBack` the SLE (told
/// once per new value) or a batch's epoch that waits for the destination epoch to reach it. The
/// partition bumps its epoch when that source epoch comes close (DLE >= SLE).
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct FetcherProgress(pub Result<FetchProgress, Cause>);

/// A port call in flight.
pub type PortFuture<T> = Pin<Box<dyn Future<Output = T>>>;

/// The effects of one mirror partition, as its broker carries them out.
pub trait PartitionPorts: 'static {
    /// The coordinator's record of the partition (`None`: never written).
    fn load_state(&self) -> PortFuture<Result<Option<StoredState>, Cause>>;
    /// Writes the coordinator's record durably.
    fn persist_state(&self, stored: StoredState) -> PortFuture<Result<(), Cause>>;
    /// LastMirroredEpochs against the source (-1: none).
    fn look_up_lme(&self) -> PortFuture<Result<i32, Cause>>;
    /// Aligns the local log for `lme`.
    fn truncate_for_lme(&self, lme: i32) -> PortFuture<Result<(), Cause>>;
    /// Completes once every ISR member has truncated too.
    fn await_isr(&self) -> PortFuture<()>;
    /// Starts fetching from the log end, holding back batches of a leader epoch above
    /// `leader_epoch`; the fetcher reports each round to `progress`.
    fn attach_fetcher(&self, progress: Recipient<FetcherProgress>, leader_epoch: i32);
    /// Tells the running fetcher the destination leader epoch rose to `leader_epoch`.
    fn raise_fetcher_epoch(&self, leader_epoch: i32);
    /// Stops fetching; completes once no append can follow.
    fn detach_fetcher(&self) -> PortFuture<()>;
    /// BumpLeaderEpochs: the leader epoch afterwards.
    fn bump_leader_epoch(&self, min_leader_epoch: Option<i32>) -> PortFuture<Result<i32, Cause>>;
    /// Truncates the log to its LSO: the newest mirrored epoch left (`None`: none).
    fn truncate_to_lso(&self) -> PortFuture<Result<Option<i32>, Cause>>;
    /// Records the LME in `__mirror_state` (`None`: records none; the one recorded stays).
    fn persist_lme(&self, lme: Option<i32>) -> PortFuture<Result<(), Cause>>;
    /// Appends the MIRROR_PID_RESET barrier at the destination's `leader_epoch`.
    fn append_pid_reset(&self, leader_epoch: i32) -> PortFuture<Result<(), Cause>>;
    /// Refuses (true) or accepts (false) produce requests.
    fn set_read_only(&self, read_only: bool);
}
