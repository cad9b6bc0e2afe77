//! A bound on the segment log files a broker keeps open.
//!
//! A partition log needs its active segment's file for every append and fetch, but a broker
//! holding 100,000 partitions cannot keep 100,000 descriptors open (the process limit is often
//! 1,024 to 65,536). Each segment's log file is therefore a [`SegmentFile`]: opened on first use,
//! kept open while in use, and closed by [`OpenFiles`] when more than `max` are open.
//!
//! Eviction is the second-chance clock: open files wait in a queue in the order they were
//! opened; every use marks its file referenced; to make room the oldest unreferenced file is
//! closed, and a referenced one loses its mark and goes to the back. A use costs one uncontended
//! mutex and an atomic store, never the shared queue.
//!
//! Invariants: a closed file is reopened by its path on next use, so callers never see the
//! difference; an operation in progress holds its own `Arc<File>`, so closing a file under it
//! only takes effect when it ends (the bound can be exceeded by the operations in flight);
//! data written through a descriptor that was closed before an fsync is still made durable by a
//! later fsync of a new descriptor (Linux syncs the file, not the descriptor).

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// At least this many files stay open whatever the configured bound.
const MIN_OPEN: usize = 16;

/// The shared bound on open segment files (cheap to clone: one `Arc`).
#[derive(Debug, Clone)]
pub struct OpenFiles {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    max: usize,
    /// Open files, oldest first; entries of dropped segments die and are skipped.
    queue: Mutex<VecDeque<Weak<Slot>>>,
    /// Files opened again after being closed to stay within the bound.
    reopened: AtomicU64,
}

#[derive(Debug)]
struct Slot {
    path: PathBuf,
    file: Mutex<Option<Arc<File>>>,
    referenced: AtomicBool,
    /// Whether it was ever closed by eviction (its next open counts as a reopen).
    evicted: AtomicBool,
}

/// One segment's log file, opened on demand within an [`OpenFiles`] bound.
#[derive(Debug)]
pub struct SegmentFile {
    slot: Arc<Slot>,
    files: OpenFiles,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Opens `path` for reading and writing, creating it when `create` is set.
pub fn open_rw(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
}

impl OpenFiles {
    /// A bound of `max` open files (at least 16). Registers its reopen counter at 0, so a
    /// scrape shows it before the first reopen.
    pub fn new(max: usize) -> OpenFiles {
        metrics::counter!(crate::metrics::LOG_FILE_REOPENS).increment(0);
        OpenFiles {
            inner: Arc::new(Shared {
                max: max.max(MIN_OPEN),
                queue: Mutex::new(VecDeque::new()),
                reopened: AtomicU64::new(0),
            }),
        }
    }

    /// Half of this process's open-file limit (the other half is left to sockets and other
    /// files), or 512 where the limit cannot be read.
    pub fn default_max() -> usize {
        std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|text| {
                let line = text.lines().find(|l| l.starts_with("Max open files"))?;
                let soft = line.split_whitespace().nth(3)?;
                soft.parse::<usize>().ok()
            })
            .map_or(512, |soft| soft / 2)
    }

    /// The bound.
    pub fn max(&self) -> usize {
        self.inner.max
    }

    /// How many files are open now (entries of dropped segments included until skipped).
    pub fn open_count(&self) -> usize {
        lock(&self.inner.queue).len()
    }

    /// How many times a file closed to stay within the bound was opened again.
    pub fn reopened(&self) -> u64 {
        self.inner.reopened.load(Ordering::Relaxed)
    }

    /// Wraps `file`, just opened at `path`, counting it against the bound.
    pub fn adopt(&self, path: PathBuf, file: File) -> SegmentFile {
        let slot = Arc::new(Slot {
            path,
            file: Mutex::new(Some(Arc::new(file))),
            referenced: AtomicBool::new(true),
            evicted: AtomicBool::new(false),
        });
        self.admit(&slot);
        SegmentFile {
            slot,
            files: self.clone(),
        }
    }

    /// Queues a newly opened slot and closes the oldest unreferenced files beyond the bound.
    fn admit(&self, slot: &Arc<Slot>) {
        let mut queue = lock(&self.inner.queue);
        queue.push_back(Arc::downgrade(slot));
        // Two passes at most: the first clears marks, the second finds a victim unless every
        // file is in use right now (then the bound is exceeded until the next admission).
        let mut budget = 2 * queue.len();
        while queue.len() > self.inner.max && budget > 0 {
            budget -= 1;
            let Some(candidate) = queue.pop_front() else {
                break;
            };
            let Some(candidate) = candidate.upgrade() else {
                continue;
            };
            if Arc::ptr_eq(&candidate, slot) || candidate.referenced.swap(false, Ordering::Relaxed)
            {
                queue.push_back(Arc::downgrade(&candidate));
                continue;
            }
            // A slot being opened or used right now holds its lock: skip it rather than wait.
            match candidate.file.try_lock() {
                Ok(mut file) => {
                    *file = None;
                    candidate.evicted.store(true, Ordering::Relaxed);
                }
                Err(_) => queue.push_back(Arc::downgrade(&candidate)),
            }
        }
        metrics::gauge!(crate::metrics::LOG_OPEN_FILES).set(queue.len() as f64);
    }
}

impl SegmentFile {
    /// The open file, reopened if it was closed.
    pub fn get(&self) -> io::Result<Arc<File>> {
        let mut file = lock(&self.slot.file);
        if let Some(open) = file.as_ref() {
            self.slot.referenced.store(true, Ordering::Relaxed);
            return Ok(Arc::clone(open));
        }
        let open = Arc::new(open_rw(&self.slot.path, false)?);
        *file = Some(Arc::clone(&open));
        drop(file);
        if self.slot.evicted.load(Ordering::Relaxed) {
            self.files.inner.reopened.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(crate::metrics::LOG_FILE_REOPENS).increment(1);
        }
        self.slot.referenced.store(true, Ordering::Relaxed);
        self.files.admit(&self.slot);
        Ok(open)
    }

    /// From now on the file is `file` (just put at its path in place of the old one); answers
    /// still holding the old one keep reading it.
    pub fn replace(&self, file: File) {
        let mut open = lock(&self.slot.file);
        let was_open = open.is_some();
        *open = Some(Arc::new(file));
        drop(open);
        self.slot.referenced.store(true, Ordering::Relaxed);
        if !was_open {
            self.files.admit(&self.slot);
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.slot.path
    }

    /// Whether its descriptor is open now.
    pub fn is_open(&self) -> bool {
        lock(&self.slot.file).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn files(dir: &Path, bound: &OpenFiles, n: usize) -> Vec<SegmentFile> {
        (0..n)
            .map(|i| {
                let path = dir.join(format!("{i}.log"));
                let file = open_rw(&path, true).expect("creates");
                file.write_all_at(format!("file {i}").as_bytes(), 0)
                    .expect("writes");
                bound.adopt(path, file)
            })
            .collect()
    }

    #[test]
    fn never_holds_more_than_the_bound_and_reopens_what_it_closed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bound = OpenFiles::new(16);
        let all = files(dir.path(), &bound, 100);
        assert_eq!(bound.open_count(), 16);
        assert_eq!(all.iter().filter(|f| f.is_open()).count(), 16);
        for (i, f) in all.iter().enumerate() {
            let mut buf = vec![0u8; format!("file {i}").len()];
            f.get()
                .expect("reopens")
                .read_exact_at(&mut buf, 0)
                .expect("reads");
            assert_eq!(buf, format!("file {i}").as_bytes());
            assert!(bound.open_count() <= 16);
        }
        assert!(bound.reopened() >= 84, "reopened {}", bound.reopened());
    }

    #[test]
    fn a_used_file_gets_a_second_chance_and_a_closed_one_serves_what_holds_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bound = OpenFiles::new(16);
        let all = files(dir.path(), &bound, 16);
        let held = all[0].get().expect("open");
        // The sweep clears every mark, then closes the oldest.
        let _x = files(dir.path(), &bound, 1);
        assert!(!all[0].is_open());
        let mut buf = [0u8; 6];
        held.read_exact_at(&mut buf, 0).expect("still reads");
        assert_eq!(&buf, b"file 0");
        all[1].get().expect("open");
        let _y = files(dir.path(), &bound, 1);
        assert!(
            all[1].is_open(),
            "a file used since the last sweep was closed"
        );
        assert!(!all[2].is_open(), "the oldest unused file stayed open");
    }

    #[test]
    fn dropped_files_free_their_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bound = OpenFiles::new(16);
        let first = files(dir.path(), &bound, 16);
        drop(first);
        let second = files(dir.path(), &bound, 16);
        assert!(second.iter().all(SegmentFile::is_open));
    }
}
