//! Work on partition logs spread over a few threads: each item is taken from one shared queue
//! by whichever thread is free, every item is worked on even after one failed, and the first
//! failure is returned. Used where the work waits on the file system (closing logs is fsyncs;
//! creating them is inode allocation), which one thread leaves mostly idle.

use crate::storage::StorageError;
use std::sync::Mutex;

/// Runs `work` on every item of `items` on at most `threads` threads (none for one item).
pub(super) fn each_in_parallel<T: Send>(
    items: Vec<T>,
    threads: usize,
    work: impl Fn(T) -> Result<(), StorageError> + Sync,
) -> Result<(), StorageError> {
    let queue = Mutex::new(items);
    let failure: Mutex<Option<StorageError>> = Mutex::new(None);
    let drain = || {
        loop {
            let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let Some(item) = next else { return };
            if let Err(e) = work(item) {
                failure
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(e);
            }
        }
    };
    let threads = threads.min(queue.lock().unwrap_or_else(|e| e.into_inner()).len());
    if threads <= 1 {
        drain();
    } else {
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(drain);
            }
        });
    }
    failure
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_item_is_worked_on_and_the_first_failure_returned() {
        for threads in [1, 4] {
            let done = AtomicUsize::new(0);
            let result = each_in_parallel((0..100).collect(), threads, |i: usize| {
                done.fetch_add(1, Ordering::SeqCst);
                if i % 10 == 3 {
                    Err(StorageError::PartialBatch(i))
                } else {
                    Ok(())
                }
            });
            assert_eq!(done.load(Ordering::SeqCst), 100, "{threads} threads");
            assert!(result.is_err(), "{threads} threads");
        }
        assert!(each_in_parallel(Vec::<usize>::new(), 4, |_| Ok(())).is_ok());
    }
}
