//! The `.lock` file of a log directory, as Kafka takes one: a broker holds an exclusive,
//! non-blocking `flock` on it for as long as it uses the directory, so a second broker on the
//! same directory (another process, or another broker in this one) refuses to start instead of
//! overwriting the first one's logs.
//!
//! Contract: [`LogDirLock::acquire`] succeeds for one holder at a time; the lock goes with the
//! [`LogDirLock`] (dropped, or the process gone, even by SIGKILL: the kernel releases it with
//! the descriptor). The file itself stays; its presence means nothing, only the lock does.

use super::StorageError;
use super::error::io;
use rustix::fs::FlockOperation;
use std::fs::{File, OpenOptions};
use std::path::Path;

/// The name of the lock file in a log directory (Kafka's).
pub const LOCK_FILE: &str = ".lock";

/// An exclusive hold on a log directory.
#[derive(Debug)]
pub struct LogDirLock {
    /// Holds the lock: it lasts as long as this descriptor.
    _file: File,
}

impl LogDirLock {
    /// Creates `dir` if needed and locks it; [`StorageError::LogDirLocked`] when another
    /// holder has it.
    pub fn acquire(dir: &Path) -> Result<LogDirLock, StorageError> {
        std::fs::create_dir_all(dir).map_err(io("create directory", dir))?;
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("open", &path))?;
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(LogDirLock { _file: file }),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => Err(StorageError::LogDirLocked {
                dir: dir.to_path_buf(),
                lock: path,
            }),
            Err(e) => Err(io("lock", &path)(e.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_the_lock_goes_with_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        let held = LogDirLock::acquire(&data).expect("the first holder locks");
        match LogDirLock::acquire(&data) {
            Err(StorageError::LogDirLocked { dir, lock }) => {
                assert_eq!(dir, data);
                assert_eq!(lock, data.join(LOCK_FILE));
            }
            other => panic!("a second holder is refused, got {other:?}"),
        }
        drop(held);
        LogDirLock::acquire(&data).expect("free again once dropped");
    }
}
