//! Group commit for what must be on disk before a mirror partition takes writes: the
//! MIRROR_PID_RESET barrier in its log and the STOPPED record in `__mirror_state`.
//!
//! One fsync per file put a Stop of 10,000 partitions at 10 s: every fsync of another file is a
//! journal commit of its own, and the filesystem runs them one after the other. Here a request
//! joins a queue; the first into an idle queue starts a flusher task, which takes everything
//! queued, notes each log's end, syncs the log directory's whole filesystem once (`syncfs`: one
//! journal commit for all of them) on a blocking thread, moves each log's recovery point to the
//! end it noted, answers each, and goes on while more arrived meanwhile. A request is answered
//! only once its data is durable; it waits at most for the sync in progress plus its own.

use super::{Broker, Partition};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

struct Pending {
    partition: Arc<Partition>,
    answer: oneshot::Sender<Result<(), String>>,
}

/// The logs waiting for the next sync.
#[derive(Default)]
pub(crate) struct Durability {
    pending: Mutex<Vec<Pending>>,
    /// Whether a flusher task owns the queue.
    syncing: AtomicBool,
}

impl std::fmt::Debug for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durability")
            .field("pending", &self.lock().len())
            .finish()
    }
}

impl Durability {
    fn lock(&self) -> MutexGuard<'_, Vec<Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Broker {
    /// Makes everything appended to `partition`'s log so far durable, together with whatever
    /// else is waiting. Must run inside a Tokio runtime.
    pub async fn make_durable(self: &Arc<Self>, partition: Arc<Partition>) -> Result<(), String> {
        let (answer, outcome) = oneshot::channel();
        self.durability.lock().push(Pending { partition, answer });
        if !self.durability.syncing.swap(true, Ordering::AcqRel) {
            tokio::spawn(Arc::clone(self).sync_pending());
        }
        outcome
            .await
            .unwrap_or_else(|_| Err("the sync was dropped unanswered".into()))
    }

    /// Syncs the queue until it stays empty.
    async fn sync_pending(self: Arc<Self>) {
        loop {
            let batch = std::mem::take(&mut *self.durability.lock());
            if batch.is_empty() {
                self.durability.syncing.store(false, Ordering::Release);
                // A request queued between the take and the store saw the flag still set and
                // left its sync to this task: take the flag back, unless another task did.
                if self.durability.lock().is_empty()
                    || self.durability.syncing.swap(true, Ordering::AcqRel)
                {
                    return;
                }
                continue;
            }
            let dir = self.config.log_dir.clone();
            let partitions: Vec<Arc<Partition>> =
                batch.iter().map(|p| p.partition.clone()).collect();
            let synced = tokio::task::spawn_blocking(move || {
                // Each log's end before the sync: what the sync makes durable.
                let ends: Vec<i64> = partitions
                    .iter()
                    .map(|p| {
                        p.log
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .log_end_offset()
                    })
                    .collect();
                let dir = std::fs::File::open(&dir)
                    .map_err(|e| format!("opening {}: {e}", dir.display()))?;
                rustix::fs::syncfs(&dir).map_err(|e| format!("syncing the log directory: {e}"))?;
                for (partition, end) in partitions.iter().zip(ends) {
                    partition
                        .log
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .mark_synced(end);
                }
                Ok(())
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
            for pending in batch {
                let _ = pending.answer.send(synced.clone());
            }
        }
    }
}
