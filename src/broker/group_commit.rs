//! Group commit: requests that each need a slow durable step (an fsync) share it.
//!
//! A request joins a queue; the first into an idle queue starts a flusher task, which takes
//! everything queued, runs the flush for all of it at once on a blocking thread, answers each
//! request with its own outcome, and goes on while more arrived meanwhile. A request is
//! answered only after the flush that carried it; it waits at most for the flush in progress
//! plus its own. Used for leader-epoch bumps (`epoch_bumps.rs`) and for making logs durable
//! before a mirror partition takes writes (`durability.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

/// The queue of requests `R` waiting for the next flush, each answered with an `O`.
pub(crate) struct GroupCommit<R, O> {
    pending: Mutex<Vec<(R, oneshot::Sender<O>)>>,
    /// Whether a flusher task owns the queue.
    flushing: AtomicBool,
}

impl<R, O> Default for GroupCommit<R, O> {
    fn default() -> Self {
        GroupCommit {
            pending: Mutex::new(Vec::new()),
            flushing: AtomicBool::new(false),
        }
    }
}

impl<R, O> std::fmt::Debug for GroupCommit<R, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("pending", &self.lock().len())
            .finish()
    }
}

impl<R, O> GroupCommit<R, O> {
    fn lock(&self) -> MutexGuard<'_, Vec<(R, oneshot::Sender<O>)>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<R: Send + 'static, O: Send + 'static> GroupCommit<R, O> {
    /// Queues `request` and waits for the flush that carries it. `flush` runs on a blocking
    /// thread with every request queued and returns one outcome per request, in order;
    /// `failed` makes the outcome of requests whose flush did not run to the end. Must run
    /// inside a Tokio runtime.
    pub(crate) async fn submit<F>(
        self: &Arc<Self>,
        request: R,
        flush: F,
        failed: fn(String) -> O,
    ) -> O
    where
        F: Fn(&[R]) -> Vec<O> + Clone + Send + 'static,
    {
        let (answer, outcome) = oneshot::channel();
        self.lock().push((request, answer));
        if !self.flushing.swap(true, Ordering::AcqRel) {
            tokio::spawn(Arc::clone(self).flush_all(flush, failed));
        }
        outcome
            .await
            .unwrap_or_else(|_| failed("the request was dropped unanswered".into()))
    }

    /// Flushes the queue until it stays empty.
    async fn flush_all<F>(self: Arc<Self>, flush: F, failed: fn(String) -> O)
    where
        F: Fn(&[R]) -> Vec<O> + Clone + Send + 'static,
    {
        loop {
            let batch = std::mem::take(&mut *self.lock());
            if batch.is_empty() {
                self.flushing.store(false, Ordering::Release);
                // A request queued between the take and the store saw the flag still set and
                // left its flush to this task: take the flag back, unless another task did.
                if self.lock().is_empty() || self.flushing.swap(true, Ordering::AcqRel) {
                    return;
                }
                continue;
            }
            let (requests, answers): (Vec<R>, Vec<oneshot::Sender<O>>) = batch.into_iter().unzip();
            let count = answers.len();
            let run = flush.clone();
            let outcomes = tokio::task::spawn_blocking(move || run(&requests))
                .await
                .map_err(|e| e.to_string())
                .and_then(|outcomes| {
                    if outcomes.len() == count {
                        Ok(outcomes)
                    } else {
                        Err(format!(
                            "the flush answered {} of {count} requests",
                            outcomes.len()
                        ))
                    }
                });
            match outcomes {
                Ok(outcomes) => {
                    for (answer, outcome) in answers.into_iter().zip(outcomes) {
                        let _ = answer.send(outcome);
                    }
                }
                Err(e) => {
                    for answer in answers {
                        let _ = answer.send(failed(e.clone()));
                    }
                }
            }
        }
    }
}
