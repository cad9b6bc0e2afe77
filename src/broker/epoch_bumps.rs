//! Group commit for leader-epoch bumps: the BumpLeaderEpochs each mirror partition sends on its
//! way to STOPPED (and for DLE >= SLE) are made durable together.
//!
//! Every bump is a metadata record the controller fsyncs before answering; one fsync per
//! partition made a Stop of 10,000 partitions take 23 s, the fsyncs in a row. Here a bump joins
//! a queue; the first bump into an idle queue starts a flusher task, which takes everything
//! queued, applies it with one write and one fsync on a blocking thread
//! ([`super::Broker::bump_leader_epochs`]), answers each, and goes on while more arrived
//! meanwhile. A bump is answered only once it is durable, as before; it waits at most for the
//! flush in progress plus its own.

use super::Broker;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

/// The epoch after a bump (`None`: no such partition), or why it failed.
pub(crate) type BumpOutcome = Result<Option<i32>, String>;

struct Pending {
    topic: String,
    partition: i32,
    min_leader_epoch: i32,
    answer: oneshot::Sender<BumpOutcome>,
}

/// The queue of bumps waiting for the next flush.
#[derive(Default)]
pub(crate) struct EpochBumps {
    pending: Mutex<Vec<Pending>>,
    /// Whether a flusher task owns the queue.
    flushing: AtomicBool,
}

impl std::fmt::Debug for EpochBumps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpochBumps")
            .field("pending", &self.lock().len())
            .finish()
    }
}

impl EpochBumps {
    fn lock(&self) -> MutexGuard<'_, Vec<Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Broker {
    /// BumpLeaderEpochs for one partition through the group commit: the leader epoch becomes
    /// at least `min_leader_epoch + 1`, durably, and the epoch afterwards is returned. Must run
    /// inside a Tokio runtime.
    pub async fn bump_leader_epoch_grouped(
        self: &Arc<Self>,
        topic: &str,
        partition: i32,
        min_leader_epoch: i32,
    ) -> BumpOutcome {
        let (answer, outcome) = oneshot::channel();
        self.epoch_bumps.lock().push(Pending {
            topic: topic.to_string(),
            partition,
            min_leader_epoch,
            answer,
        });
        if !self.epoch_bumps.flushing.swap(true, Ordering::AcqRel) {
            tokio::spawn(Arc::clone(self).flush_epoch_bumps());
        }
        outcome
            .await
            .unwrap_or_else(|_| Err("the epoch bump was dropped unanswered".into()))
    }

    /// Flushes the queue until it stays empty.
    async fn flush_epoch_bumps(self: Arc<Self>) {
        loop {
            let batch = std::mem::take(&mut *self.epoch_bumps.lock());
            if batch.is_empty() {
                self.epoch_bumps.flushing.store(false, Ordering::Release);
                // A bump queued between the take and the store saw the flag still set and
                // left its flush to this task: take the flag back, unless another task did.
                if self.epoch_bumps.lock().is_empty()
                    || self.epoch_bumps.flushing.swap(true, Ordering::AcqRel)
                {
                    return;
                }
                continue;
            }
            let requests: Vec<(String, i32, i32)> = batch
                .iter()
                .map(|p| (p.topic.clone(), p.partition, p.min_leader_epoch))
                .collect();
            let broker = Arc::clone(&self);
            let outcomes =
                tokio::task::spawn_blocking(move || broker.bump_leader_epochs(&requests)).await;
            let outcomes: Vec<BumpOutcome> = match outcomes {
                Ok(Ok(epochs)) => epochs.into_iter().map(Ok).collect(),
                Ok(Err(e)) => vec![Err(e.to_string()); batch.len()],
                Err(e) => vec![Err(e.to_string()); batch.len()],
            };
            for (pending, outcome) in batch.into_iter().zip(outcomes) {
                let _ = pending.answer.send(outcome);
            }
        }
    }
}
