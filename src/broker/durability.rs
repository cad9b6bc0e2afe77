//! Group commit for what must be on disk before a mirror partition takes writes: the
//! MIRROR_PID_RESET barrier in its log and the STOPPED record in `__mirror_state` (each then
//! also waits for the partition's in-sync replicas: docs/replication.md §6).
//!
//! One fsync per file put a Stop of 10,000 partitions at 10 s: every fsync of another file is a
//! journal commit of its own, and the filesystem runs them one after the other. Here a request
//! joins a queue; the first into an idle queue starts a flusher task, which takes everything
//! queued, notes each log's end, syncs the log directory's whole filesystem once (`syncfs`: one
//! journal commit for all of them) on a blocking thread, moves each log's recovery point to the
//! end it noted, answers each, and goes on while more arrived meanwhile
//! ([`super::group_commit`]). A request is answered only once its data is durable; it waits at
//! most for the sync in progress plus its own.

use super::group_commit::GroupCommit;
use super::{Broker, Partition};
use std::sync::Arc;

/// Logs waiting for the next sync.
pub(crate) type Durability = Arc<GroupCommit<Arc<Partition>, Result<(), String>>>;

impl Broker {
    /// Makes everything appended to `partition`'s log so far durable, together with whatever
    /// else is waiting: on this broker's disk, and below the high watermark, so on every
    /// in-sync replica (a leader elected after a crash has it). Must run inside a Tokio
    /// runtime.
    pub async fn make_durable(self: &Arc<Self>, partition: Arc<Partition>) -> Result<(), String> {
        let dir = self.config.log_dir.clone();
        let flush = move |partitions: &[Arc<Partition>]| -> Vec<Result<(), String>> {
            let synced = sync_logs(&dir, partitions);
            vec![synced; partitions.len()]
        };
        self.durability
            .submit(partition.clone(), flush, Err)
            .await?;
        self.replicated_to_isr(&partition).await
    }
}

/// One `syncfs` of `dir`'s filesystem for all of `partitions`; each log's recovery point moves
/// to the end it had before the sync (what the sync made durable).
fn sync_logs(dir: &std::path::Path, partitions: &[Arc<Partition>]) -> Result<(), String> {
    let ends: Vec<i64> = partitions
        .iter()
        .map(|p| {
            p.log
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .log_end_offset()
        })
        .collect();
    let file = std::fs::File::open(dir).map_err(|e| format!("opening {}: {e}", dir.display()))?;
    rustix::fs::syncfs(&file).map_err(|e| format!("syncing the log directory: {e}"))?;
    for (partition, end) in partitions.iter().zip(ends) {
        partition
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .mark_synced(end);
    }
    Ok(())
}
