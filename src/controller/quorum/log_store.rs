//! The quorum's raft log, vote and committed log id, durable in one directory: openraft's
//! [`RaftLogStorage`] for any type config whose entries serde can write.
//!
//! Files under the directory:
//! - `log`: a [`RecordLog`] of [`LogOp`]s (append an entry, truncate from an index, purge up to a
//!   log id). Opening replays them into the entries kept in memory (metadata logs are small);
//!   a torn last record is cut, damage before intact records is refused (see
//!   [`crate::record_log`]). When the file holds more than twice the records the live log needs
//!   (and at least [`COMPACT_AFTER_OPS`]), it is rewritten to exactly the last purged log id and
//!   the live entries ([`RecordLog::rewrite`]: written beside, fsynced, renamed).
//! - `vote`, `committed`: JSON, each replaced whole durably (see [`super::atomic_file`]).
//!
//! Durability contract (openraft's): `save_vote`, `save_committed`, `truncate` and `purge`
//! return once their change is on disk; `append` makes the entries readable and fsyncs them
//! before it reports them flushed through the callback, and reports a failure through both the
//! callback and its result. Writes are serialised by `&mut self`. The I/O is synchronous inside
//! the async methods: openraft 0.9 waits for each append's flush on its core task anyway, and
//! the log is written at metadata rates.
//!
//! Every failure becomes an openraft [`StorageError`] naming what was read or written; openraft
//! stops the node on it rather than run on a log it cannot trust.

use super::atomic_file;
use crate::record_log::RecordLog;
use crate::storage::StorageError as KmirrorStorageError;
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    AnyError, ErrorSubject, ErrorVerb, LogId, LogState, OptionalSend, RaftLogId, RaftLogReader,
    RaftTypeConfig, StorageError, StorageIOError, Vote,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Records the log file may hold before a rewrite is considered: below this, compaction would
/// cost more than the bytes it saves.
const COMPACT_AFTER_OPS: usize = 64;

/// One change to the log, as recorded in the `log` file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound = "")]
pub(crate) enum LogOp<C: RaftTypeConfig> {
    /// An entry at its log id's index; any entry at or after that index is replaced.
    Append(C::Entry),
    /// Every entry from this index on is removed.
    Truncate(u64),
    /// Every entry up to this log id's index is removed, and it is the last purged log id.
    Purge(LogId<C::NodeId>),
}

/// The log as the `log` file's records build it.
struct Log<C: RaftTypeConfig> {
    entries: BTreeMap<u64, C::Entry>,
    last_purged: Option<LogId<C::NodeId>>,
}

impl<C: RaftTypeConfig> Log<C> {
    fn apply(&mut self, op: LogOp<C>) {
        match op {
            LogOp::Append(entry) => {
                let index = entry.get_log_id().index;
                // An append at an index makes it the last one: nothing stale stays after it.
                self.entries.split_off(&index);
                self.entries.insert(index, entry);
            }
            LogOp::Truncate(index) => {
                self.entries.split_off(&index);
            }
            LogOp::Purge(log_id) => {
                self.entries = self.entries.split_off(&(log_id.index + 1));
                if self.last_purged.as_ref().is_none_or(|last| *last < log_id) {
                    self.last_purged = Some(log_id);
                }
            }
        }
    }

    /// The records that rebuild exactly this log.
    fn ops(&self) -> Vec<LogOp<C>>
    where
        C::Entry: Clone,
    {
        self.last_purged
            .clone()
            .map(LogOp::Purge)
            .into_iter()
            .chain(self.entries.values().cloned().map(LogOp::Append))
            .collect()
    }
}

/// The log shared by the store and its readers (openraft's replication tasks).
struct SharedLog<C: RaftTypeConfig>(Arc<Mutex<Log<C>>>);

impl<C: RaftTypeConfig> SharedLog<C> {
    /// The log, or `None` when a panic left it possibly half-changed: the node stops rather
    /// than replicate from it.
    fn lock(&self) -> Option<MutexGuard<'_, Log<C>>> {
        self.0.lock().ok()
    }

    fn entries<RB: RangeBounds<u64>>(&self, range: RB) -> Option<Vec<C::Entry>>
    where
        C::Entry: Clone,
    {
        use std::ops::Bound;
        // An empty or inverted range holds nothing (BTreeMap::range would panic on it).
        let start = match range.start_bound() {
            Bound::Included(s) => *s,
            Bound::Excluded(s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(e) => e.saturating_add(1),
            Bound::Excluded(e) => *e,
            Bound::Unbounded => u64::MAX,
        };
        if start >= end {
            return Some(Vec::new());
        }
        Some(
            self.lock()?
                .entries
                .range(start..end)
                .map(|(_, e)| e.clone())
                .collect(),
        )
    }
}

/// The openraft error for a log a panic poisoned.
fn log_poisoned<NID: openraft::NodeId>() -> StorageError<NID> {
    StorageIOError::read_logs(AnyError::error(
        "the in-memory raft log was poisoned by a panic while it was changed",
    ))
    .into()
}

impl<C: RaftTypeConfig> Clone for SharedLog<C> {
    fn clone(&self) -> Self {
        SharedLog(Arc::clone(&self.0))
    }
}

/// The durable raft log of one node (see the module docs).
pub(crate) struct LogStore<C: RaftTypeConfig> {
    dir: PathBuf,
    file: RecordLog<LogOp<C>>,
    /// Records in the `log` file, against which the live log's size decides a rewrite.
    ops_in_file: usize,
    log: SharedLog<C>,
    vote: Option<Vote<C::NodeId>>,
    committed: Option<LogId<C::NodeId>>,
}

/// A reader of the log for openraft's replication tasks; it sees every append once `append`
/// returned.
pub(crate) struct LogReader<C: RaftTypeConfig> {
    log: SharedLog<C>,
}

/// Whether `dir` holds a Raft log (a node that never started, or whose log was lost, has none).
pub(crate) fn log_exists(dir: &Path) -> bool {
    dir.join("log").exists()
}

impl<C: RaftTypeConfig> LogStore<C>
where
    C::Entry: Clone,
{
    /// Opens (or creates) the log in `dir`: replays `log`, reads `vote` and `committed`.
    pub(crate) fn open(dir: &Path) -> Result<LogStore<C>, KmirrorStorageError> {
        std::fs::create_dir_all(dir).map_err(crate::storage::error::io("create directory", dir))?;
        atomic_file::sync_parent(dir)?;
        let path = dir.join("log");
        let (file, ops) = RecordLog::<LogOp<C>>::open(&path)?;
        // The record log fsyncs what it appends, not the directory entry of a file it created.
        atomic_file::sync_parent(&path)?;
        let ops_in_file = ops.len();
        let mut log = Log {
            entries: BTreeMap::new(),
            last_purged: None,
        };
        for op in ops {
            log.apply(op);
        }
        let vote = read_json(&dir.join("vote"))?;
        let committed = read_json::<Option<LogId<C::NodeId>>>(&dir.join("committed"))?.flatten();
        Ok(LogStore {
            dir: dir.to_path_buf(),
            file,
            ops_in_file,
            log: SharedLog(Arc::new(Mutex::new(log))),
            vote,
            committed,
        })
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// Records `ops` durably and applies them to the log readers see.
    fn record(&mut self, ops: Vec<LogOp<C>>) -> Result<(), KmirrorStorageError> {
        self.file.append_all(&ops)?;
        self.ops_in_file += ops.len();
        let Some(mut log) = self.log.lock() else {
            return Err(poisoned(&self.log_path()));
        };
        for op in ops {
            log.apply(op);
        }
        Ok(())
    }

    /// Rewrites the log file to the live log when it holds more than twice the records that
    /// needs. A failed rewrite leaves the old file or the new one, both holding the log: the
    /// file is reopened and the failure only logged, since the change that prompted it is on
    /// disk already.
    fn compact_if_worth_it(&mut self) -> Result<(), KmirrorStorageError> {
        let ops = {
            let Some(log) = self.log.lock() else {
                return Err(poisoned(&self.log_path()));
            };
            let live = log.entries.len() + usize::from(log.last_purged.is_some());
            if self.ops_in_file < COMPACT_AFTER_OPS || self.ops_in_file <= 2 * live {
                return Ok(());
            }
            log.ops()
        };
        let path = self.log_path();
        match RecordLog::rewrite(&path, &ops) {
            Ok(file) => {
                tracing::debug!(log = %path.display(), before = self.ops_in_file, after = ops.len(), "rewrote the raft log to its live entries");
                self.file = file;
                self.ops_in_file = ops.len();
            }
            Err(e) => {
                tracing::warn!(log = %path.display(), error = %e, "could not rewrite the raft log to its live entries; it keeps its records");
                let (file, replayed) = RecordLog::<LogOp<C>>::open(&path)?;
                self.file = file;
                self.ops_in_file = replayed.len();
            }
        }
        Ok(())
    }
}

/// The error for a log a panic left possibly half-changed.
fn poisoned(path: &Path) -> KmirrorStorageError {
    KmirrorStorageError::Io {
        op: "change the in-memory log of",
        path: path.to_path_buf(),
        source: std::io::Error::other("poisoned by a panic while it was changed"),
    }
}

/// The JSON value last written to `path` by [`write_json`], if any.
fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
) -> Result<Option<T>, KmirrorStorageError> {
    atomic_file::read(path)?
        .map(|body| {
            serde_json::from_slice(&body).map_err(|e| KmirrorStorageError::Io {
                op: "decode",
                path: path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            })
        })
        .transpose()
}

/// Replaces the file at `path` with `value` as JSON, durably.
fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), KmirrorStorageError> {
    let body = serde_json::to_vec(value).map_err(|e| KmirrorStorageError::Io {
        op: "encode",
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    atomic_file::write(path, &body)
}

impl<C: RaftTypeConfig> RaftLogReader<C> for LogStore<C>
where
    C::Entry: Clone,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        self.log.entries(range).ok_or_else(log_poisoned)
    }
}

impl<C: RaftTypeConfig> RaftLogReader<C> for LogReader<C>
where
    C::Entry: Clone,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        self.log.entries(range).ok_or_else(log_poisoned)
    }
}

impl<C: RaftTypeConfig> RaftLogStorage<C> for LogStore<C>
where
    C::Entry: Clone,
{
    type LogReader = LogReader<C>;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<C::NodeId>> {
        let log = self.log.lock().ok_or_else(log_poisoned)?;
        let last_log_id = log
            .entries
            .values()
            .next_back()
            .map(|e| e.get_log_id().clone())
            .or_else(|| log.last_purged.clone());
        Ok(LogState {
            last_purged_log_id: log.last_purged.clone(),
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> LogReader<C> {
        LogReader {
            log: self.log.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        write_json(&self.dir.join("vote"), vote)
            .map_err(|e| StorageIOError::write_vote(AnyError::new(&e)))?;
        self.vote = Some(vote.clone());
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, StorageError<C::NodeId>> {
        Ok(self.vote.clone())
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<C::NodeId>>,
    ) -> Result<(), StorageError<C::NodeId>> {
        write_json(&self.dir.join("committed"), &committed)
            .map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        self.committed = committed;
        Ok(())
    }

    async fn read_committed(
        &mut self,
    ) -> Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>> {
        Ok(self.committed.clone())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<C>,
    ) -> Result<(), StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let ops: Vec<LogOp<C>> = entries.into_iter().map(LogOp::Append).collect();
        match self.record(ops) {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(StorageIOError::write_logs(AnyError::new(&e)).into())
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        self.record(vec![LogOp::Truncate(log_id.index)])
            .and_then(|()| self.compact_if_worth_it())
            .map_err(|e| deleting(&e))
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        self.record(vec![LogOp::Purge(log_id)])
            .and_then(|()| self.compact_if_worth_it())
            .map_err(|e| deleting(&e))
    }
}

/// The openraft error for a truncate or purge that did not reach the disk.
fn deleting<NID: openraft::NodeId>(e: &KmirrorStorageError) -> StorageError<NID> {
    StorageIOError::new(ErrorSubject::Logs, ErrorVerb::Delete, AnyError::new(e)).into()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{TestConfig, TestLogStore, log_id, seen, set};
    use super::*;
    use openraft::storage::RaftLogStorageExt;

    /// `count` entries of term 1 from `first`, setting `k<index>` to `v<index>`.
    fn sets(first: u64, count: u64) -> Vec<openraft::Entry<TestConfig>> {
        (first..first + count)
            .map(|i| set(1, i, &format!("k{i}"), &format!("v{i}")))
            .collect()
    }

    fn expected(indexes: std::ops::RangeInclusive<u64>) -> Vec<(u64, String)> {
        indexes.map(|i| (i, format!("k{i}=v{i}"))).collect()
    }

    async fn state(log: &mut TestLogStore) -> (Option<u64>, Option<u64>, Vec<(u64, String)>) {
        let state = log.get_log_state().await.expect("log state");
        let entries = log.try_get_log_entries(..).await.expect("entries");
        (
            state.last_purged_log_id.map(|id| id.index),
            state.last_log_id.map(|id| id.index),
            seen(&entries),
        )
    }

    #[tokio::test]
    async fn entries_vote_and_committed_survive_reopening() {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let mut log = TestLogStore::open(dir.path()).expect("opens");
            log.blocking_append(sets(1, 3)).await.expect("appended");
            log.save_vote(&Vote::new(2, 7)).await.expect("vote saved");
            log.save_committed(Some(log_id(1, 2)))
                .await
                .expect("committed saved");
        }
        let mut log = TestLogStore::open(dir.path()).expect("reopens");
        assert_eq!(log.read_vote().await.expect("vote"), Some(Vote::new(2, 7)));
        assert_eq!(
            log.read_committed().await.expect("committed"),
            Some(log_id(1, 2))
        );
        assert_eq!(state(&mut log).await, (None, Some(3), expected(1..=3)));
        let mut reader = log.get_log_reader().await;
        let read = reader.try_get_log_entries(2..3).await.expect("read");
        assert_eq!(seen(&read), expected(2..=2));
    }

    #[tokio::test]
    async fn a_torn_last_record_is_cut_and_everything_acknowledged_before_it_survives() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("log");
        let acknowledged = {
            let mut log = TestLogStore::open(dir.path()).expect("opens");
            log.blocking_append(sets(1, 3)).await.expect("appended");
            let acknowledged = std::fs::metadata(&path).expect("log").len();
            log.blocking_append(sets(4, 1)).await.expect("appended");
            acknowledged
        };
        // A crash in the middle of writing entry 4: only part of its frame reached the disk.
        let raw = std::fs::read(&path).expect("log");
        std::fs::write(&path, &raw[..raw.len() - 5]).expect("torn");

        let mut log = TestLogStore::open(dir.path()).expect("reopens");
        assert_eq!(state(&mut log).await, (None, Some(3), expected(1..=3)));
        assert!(
            dir.path()
                .join(format!("log.damaged-at-{acknowledged}"))
                .exists(),
            "the cut tail is kept beside the log"
        );
        log.blocking_append(vec![set(2, 4, "k4", "again")])
            .await
            .expect("appended after the cut");
        drop(log);
        let mut log = TestLogStore::open(dir.path()).expect("reopens");
        let (_, last, entries) = state(&mut log).await;
        assert_eq!(last, Some(4));
        assert_eq!(entries.last(), Some(&(4, "k4=again".to_string())));
    }

    #[tokio::test]
    async fn truncate_and_purge_survive_reopening() {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let mut log = TestLogStore::open(dir.path()).expect("opens");
            log.blocking_append(sets(1, 10)).await.expect("appended");
            log.purge(log_id(1, 3)).await.expect("purged");
            log.truncate(log_id(1, 8)).await.expect("truncated");
            assert_eq!(state(&mut log).await, (Some(3), Some(7), expected(4..=7)));
        }
        let mut log = TestLogStore::open(dir.path()).expect("reopens");
        assert_eq!(state(&mut log).await, (Some(3), Some(7), expected(4..=7)));

        // Everything purged: the last purged log id is the last log id.
        log.purge(log_id(1, 7)).await.expect("purged");
        drop(log);
        let mut log = TestLogStore::open(dir.path()).expect("reopens");
        assert_eq!(state(&mut log).await, (Some(7), Some(7), vec![]));
        let log_state = log.get_log_state().await.expect("log state");
        assert_eq!(log_state.last_purged_log_id, Some(log_id(1, 7)));
    }

    #[tokio::test]
    async fn a_log_rewrite_keeps_exactly_the_live_entries() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("log");
        let records = || {
            RecordLog::<LogOp<TestConfig>>::open(&path)
                .expect("record log")
                .1
                .len()
        };
        let mut log = TestLogStore::open(dir.path()).expect("opens");
        log.blocking_append(sets(1, 100)).await.expect("appended");
        // Ten of a hundred records purged: not worth a rewrite.
        log.purge(log_id(1, 10)).await.expect("purged");
        assert_eq!(records(), 101);
        let before = std::fs::metadata(&path).expect("log").len();

        log.purge(log_id(1, 90)).await.expect("purged");
        let after = std::fs::metadata(&path).expect("log").len();
        assert_eq!(records(), 11, "the last purged log id and 10 entries");
        assert!(after * 5 < before, "{before} bytes before, {after} after");
        assert!(!path.with_extension("rewrite").exists());
        assert_eq!(
            state(&mut log).await,
            (Some(90), Some(100), expected(91..=100))
        );

        // The store appends to the rewritten file.
        log.blocking_append(sets(101, 1)).await.expect("appended");
        drop(log);
        let mut log = TestLogStore::open(dir.path()).expect("reopens");
        assert_eq!(
            state(&mut log).await,
            (Some(90), Some(101), expected(91..=101))
        );
    }
}
