//! One segment of a partition log: `<base offset, 20 digits>.log` holding raw v2 batches back to
//! back, exactly as appended, and `<base offset>.index`, a sparse index.
//!
//! Index entries are 16 bytes: offset relative to the segment base (u32), byte position of that
//! batch (u32), and the greatest timestamp of the batches before it (i64). One entry is written
//! every `index.interval.bytes` of log, for the batch that crosses the interval, so one index
//! answers both "where is offset O" and "where do timestamps reach T" (the time index, for free).
//!
//! Invariants: the log file holds whole batches whose offsets increase (gaps allowed: compacted
//! sources); index entries increase in offset and position and point at batch starts inside the
//! file. Recovery restores them: a segment written since the last flush is scanned batch by
//! batch with CRC checks and cut at the first bad or torn batch; a flushed segment's index is
//! checked and rebuilt from batch headers when it is missing or inconsistent.

use super::error::{StorageError, io};
use super::open_files::{OpenFiles, SegmentFile, open_rw};
use super::records::FileRange;
use bytes::Bytes;
use kmirror_protocol::batch::{BatchHeader, HEADER_SIZE, RecordBatch, RecordBatches};
use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const ENTRY_SIZE: usize = 16;
/// Bytes read per step when scanning a segment.
const SCAN_CHUNK: usize = 8 << 20;

/// Why recovery stopped at a batch.
enum Problem {
    /// The batch itself is torn or corrupt.
    Damaged(String),
    /// The batch starts below the previous batch's end.
    NotFollowing(String),
}

/// A sparse index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IndexEntry {
    relative_offset: u32,
    position: u32,
    max_timestamp_before: i64,
}

impl IndexEntry {
    fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut out = [0u8; ENTRY_SIZE];
        out[..4].copy_from_slice(&self.relative_offset.to_be_bytes());
        out[4..8].copy_from_slice(&self.position.to_be_bytes());
        out[8..].copy_from_slice(&self.max_timestamp_before.to_be_bytes());
        out
    }

    fn decode(b: &[u8]) -> IndexEntry {
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&b[8..16]);
        IndexEntry {
            relative_offset: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            position: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            max_timestamp_before: i64::from_be_bytes(ts),
        }
    }
}

/// What opening a segment found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentRecovery {
    /// Bytes cut from the end of the log file (torn or corrupt tail).
    pub truncated_bytes: u64,
    /// Why the tail was cut, when it was.
    pub reason: Option<String>,
    /// Whether the index was rebuilt from the log.
    pub index_rebuilt: bool,
}

/// How much to trust a segment when opening it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Flushed before the last shutdown: check the index, rebuild it if needed.
    Flushed,
    /// Possibly written after the last flush: verify every batch's CRC and cut a bad tail.
    Recover,
}

/// A batch about to be appended: where it starts in the appended buffer and its header.
#[derive(Debug, Clone, Copy)]
pub struct AppendedBatch {
    /// Its header.
    pub header: BatchHeader,
    /// Its byte position inside the appended buffer.
    pub position: usize,
}

/// One segment, open for reads and (if active) appends.
///
/// The log file is opened on demand within the broker's [`OpenFiles`] bound; the index lives in
/// `entries` and its file is only opened to load, rewrite or flush it.
#[derive(Debug)]
pub struct Segment {
    base_offset: i64,
    index_path: PathBuf,
    log: SegmentFile,
    entries: Vec<IndexEntry>,
    /// How many of `entries` the index file holds.
    persisted_entries: usize,
    /// Whether the index file was rewritten since the last flush.
    index_unsynced: bool,
    size: u64,
    next_offset: i64,
    max_timestamp: i64,
    bytes_since_index: u64,
    created_ms: i64,
}

/// How a segment's log file is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// Shortened where it is (recovery, before anything reads it).
    InPlace,
    /// Replaced by a copy of the kept bytes (while the broker serves).
    Replace,
}

/// `<dir>/<base offset, 20 digits>.<ext>`.
pub fn file_path(dir: &Path, base_offset: i64, ext: &str) -> PathBuf {
    dir.join(format!("{base_offset:020}.{ext}"))
}

fn open_file(path: &Path, create: bool) -> Result<File, StorageError> {
    open_rw(path, create).map_err(io("open", path))
}

impl Segment {
    fn with_file(
        base_offset: i64,
        dir: &Path,
        log: SegmentFile,
        size: u64,
        now_ms: i64,
    ) -> Segment {
        Segment {
            base_offset,
            index_path: file_path(dir, base_offset, "index"),
            log,
            entries: Vec::new(),
            persisted_entries: 0,
            index_unsynced: false,
            size,
            next_offset: base_offset,
            max_timestamp: -1,
            bytes_since_index: 0,
            created_ms: now_ms,
        }
    }

    /// The log file, opened again if the bound closed it.
    fn log_file(&self) -> Result<std::sync::Arc<File>, StorageError> {
        self.log.get().map_err(io("open", self.log.path()))
    }

    /// Creates an empty segment (replacing any files of that name).
    pub fn create(
        dir: &Path,
        base_offset: i64,
        files: &OpenFiles,
        now_ms: i64,
    ) -> Result<Segment, StorageError> {
        let log_path = file_path(dir, base_offset, "log");
        let index_path = file_path(dir, base_offset, "index");
        // A file of that name left over is unlinked, not emptied: an answer still being sent
        // from it keeps its bytes (see `cut_at`).
        remove_if_present(&log_path)?;
        let log = open_file(&log_path, true)?;
        // The index file is made when it first has entries to hold: a partition that never
        // gets data costs its directory and one file (at scale, starting 100,000 mirror
        // partitions is mostly the file system allocating inodes). One of that name left over
        // from a former segment must not be read as this one's.
        remove_if_present(&index_path)?;
        let log = files.adopt(log_path, log);
        Ok(Segment::with_file(base_offset, dir, log, 0, now_ms))
    }

    /// Opens an existing segment, repairing what `mode` allows.
    pub fn open(
        dir: &Path,
        base_offset: i64,
        mode: OpenMode,
        index_interval_bytes: u64,
        files: &OpenFiles,
        now_ms: i64,
    ) -> Result<(Segment, SegmentRecovery), StorageError> {
        let log_path = file_path(dir, base_offset, "log");
        let log = open_file(&log_path, false)?;
        let size = log.metadata().map_err(io("stat", &log_path))?.len();
        let log = files.adopt(log_path, log);
        let mut segment = Segment::with_file(base_offset, dir, log, size, now_ms);
        let mut report = SegmentRecovery::default();
        let loaded = mode == OpenMode::Flushed && segment.load_index()?;
        if loaded {
            // Walk headers from the last indexed batch to find the end; a bad header even here
            // means the file changed under us, so recover the whole segment instead.
            let from = segment.entries.last().map_or(0, |e| e.position as u64);
            if segment
                .walk_headers(from, index_interval_bytes, false)?
                .is_err()
            {
                report = segment.recover(index_interval_bytes)?;
            }
        } else {
            report = segment.recover(index_interval_bytes)?;
        }
        segment.bytes_since_index = segment.bytes_after_last_entry();
        Ok((segment, report))
    }

    /// Loads and checks the index file; false when it must be rebuilt.
    fn load_index(&mut self) -> Result<bool, StorageError> {
        let mut raw = Vec::new();
        // No index file reads as an empty one: a segment with no entries yet.
        let index = match open_rw(&self.index_path, false) {
            Ok(index) => index,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(self.size == 0),
            Err(e) => return Err(io("open", &self.index_path)(e)),
        };
        let len = index
            .metadata()
            .map_err(io("stat", &self.index_path))?
            .len();
        if len % ENTRY_SIZE as u64 != 0 || (len == 0 && self.size > 0) {
            return Ok(false);
        }
        raw.resize(len as usize, 0);
        index
            .read_exact_at(&mut raw, 0)
            .map_err(io("read", &self.index_path))?;
        let entries: Vec<IndexEntry> = raw
            .chunks_exact(ENTRY_SIZE)
            .map(IndexEntry::decode)
            .collect();
        let consistent = entries.windows(2).all(|w| {
            w[0].relative_offset < w[1].relative_offset
                && w[0].position < w[1].position
                && w[0].max_timestamp_before <= w[1].max_timestamp_before
        }) && entries.first().is_none_or(|e| e.position == 0)
            && entries
                .last()
                .is_none_or(|e| u64::from(e.position) < self.size);
        if consistent {
            self.persisted_entries = entries.len();
            self.entries = entries;
        }
        Ok(consistent)
    }

    /// Scans from `from` to the end reading headers only, updating the end offset, the max
    /// timestamp and (when `index` is set) the index. Returns `Err(reason)` inside `Ok` when the
    /// walk met a bad or torn header.
    fn walk_headers(
        &mut self,
        from: u64,
        index_interval_bytes: u64,
        index: bool,
    ) -> Result<Result<(), String>, StorageError> {
        let mut position = from;
        if let Some(entry) = self
            .entries
            .iter()
            .rev()
            .find(|e| u64::from(e.position) <= from)
        {
            self.max_timestamp = self.max_timestamp.max(entry.max_timestamp_before);
        }
        while position < self.size {
            let header = match self.header_at(position)? {
                Ok(Some(h)) if position + h.size as u64 <= self.size => h,
                Ok(_) => return Ok(Err(format!("torn batch at byte {position}"))),
                Err(e) => return Ok(Err(e)),
            };
            if index {
                self.maybe_index(&header, position, index_interval_bytes);
            }
            self.next_offset = header.next_offset();
            self.max_timestamp = self.max_timestamp.max(header.max_timestamp);
            position += header.size as u64;
        }
        Ok(Ok(()))
    }

    /// Full recovery: verify every batch, cut the file at the first bad or torn one, rebuild the
    /// index.
    fn recover(&mut self, index_interval_bytes: u64) -> Result<SegmentRecovery, StorageError> {
        self.entries.clear();
        self.bytes_since_index = 0;
        self.next_offset = self.base_offset;
        self.max_timestamp = -1;
        let mut position = 0u64;
        let mut previous = None;
        let mut problem = None;
        while position < self.size && problem.is_none() {
            let len = (self.size - position).min(SCAN_CHUNK as u64) as usize;
            let mut batches = RecordBatches::new(self.read(position, len)?);
            let mut advanced = false;
            for batch in batches.by_ref() {
                let checked = batch
                    .map_err(|e| Problem::Damaged(e.to_string()))
                    .and_then(|b| self.check_recovered(&b).map(|()| b));
                match checked {
                    Ok(b) => {
                        self.accept(&b, position, index_interval_bytes);
                        previous = Some(position);
                        position += b.size() as u64;
                        advanced = true;
                    }
                    Err(p) => {
                        problem = Some(p);
                        break;
                    }
                }
            }
            if problem.is_none() && !advanced {
                // No whole batch in a chunk: a batch larger than the chunk, or a torn tail.
                let head = self.read(position, HEADER_SIZE.min((self.size - position) as usize))?;
                let whole = match BatchHeader::parse(&head, position as usize) {
                    Ok(Some(h)) if position + h.size as u64 <= self.size => {
                        RecordBatches::new(self.read(position, h.size)?).next()
                    }
                    Ok(_) => None,
                    Err(e) => Some(Err(e)),
                };
                match whole {
                    Some(Ok(b)) => match self.check_recovered(&b) {
                        Ok(()) => {
                            self.accept(&b, position, index_interval_bytes);
                            previous = Some(position);
                            position += b.size() as u64;
                        }
                        Err(p) => problem = Some(p),
                    },
                    Some(Err(e)) => problem = Some(Problem::Damaged(e.to_string())),
                    None => {
                        problem = Some(Problem::Damaged(format!("torn batch at byte {position}")))
                    }
                }
            }
        }
        let reason = match problem {
            None => None,
            Some(Problem::Damaged(why)) => Some(why),
            Some(Problem::NotFollowing(why)) => {
                // The base offset lies outside the CRC: a batch that starts below its
                // predecessor's end more likely follows a predecessor whose base offset is
                // damaged, so neither is kept.
                if let Some(p) = previous {
                    position = p;
                }
                Some(why)
            }
        };
        let truncated_bytes = self.size - position;
        if truncated_bytes > 0 {
            self.cut_at(position, Cut::InPlace)?;
        }
        self.rewrite_index()?;
        Ok(SegmentRecovery {
            truncated_bytes,
            reason: reason.filter(|_| truncated_bytes > 0),
            index_rebuilt: true,
        })
    }

    /// What recovery checks of each batch beyond its framing.
    fn check_recovered(&self, b: &RecordBatch) -> Result<(), Problem> {
        b.verify_crc()
            .map_err(|e| Problem::Damaged(e.to_string()))?;
        let relative_last = b.last_offset() - self.base_offset;
        if b.base_offset() < self.base_offset || relative_last > i64::from(i32::MAX) {
            return Err(Problem::Damaged(format!(
                "batch offset {} lies outside segment {}",
                b.base_offset(),
                self.base_offset
            )));
        }
        if b.base_offset() < self.next_offset {
            return Err(Problem::NotFollowing(format!(
                "batch at offset {} does not follow offset {}",
                b.base_offset(),
                self.next_offset - 1
            )));
        }
        Ok(())
    }

    fn accept(&mut self, b: &RecordBatch, position: u64, index_interval_bytes: u64) {
        let header = BatchHeader {
            base_offset: b.base_offset(),
            size: b.size(),
            partition_leader_epoch: b.partition_leader_epoch(),
            last_offset_delta: b.last_offset_delta(),
            max_timestamp: b.max_timestamp(),
        };
        self.maybe_index(&header, position, index_interval_bytes);
        self.next_offset = header.next_offset();
        self.max_timestamp = self.max_timestamp.max(header.max_timestamp);
    }

    /// Cuts the log file at `position` (a batch start), durably, and recomputes what depends on
    /// its end. `Cut::InPlace` shortens the file (recovery: nobody reads it yet);
    /// `Cut::Replace` copies the kept bytes to a new file renamed over the old one, whose bytes
    /// then never change: an answer taken from it before the cut (a range being sent, or pages
    /// `sendfile` already handed to a socket) still carries what its length announced
    /// (docs/wire.md, "Records").
    fn cut_at(&mut self, position: u64, cut: Cut) -> Result<(), StorageError> {
        match cut {
            Cut::InPlace => {
                let log = self.log_file()?;
                log.set_len(position)
                    .map_err(io("truncate", self.log.path()))?;
                log.sync_all().map_err(io("fsync", self.log.path()))?;
            }
            Cut::Replace => self.replace_file(position)?,
        }
        self.size = position;
        self.entries.retain(|e| u64::from(e.position) < position);
        self.next_offset = self.base_offset;
        self.max_timestamp = -1;
        let from = self.entries.last().map_or(0, |e| u64::from(e.position));
        self.bytes_since_index = self.bytes_after_last_entry();
        // The walk covers batches that were read before, so it cannot meet a bad header.
        if let Err(reason) = self.walk_headers(from, u64::MAX, false)? {
            return Err(StorageError::Io {
                op: "re-read after truncation",
                path: self.log.path().to_path_buf(),
                source: std::io::Error::other(reason),
            });
        }
        Ok(())
    }

    /// The first `len` bytes copied (in the kernel) to `<log>.cut.tmp`, made durable and
    /// renamed over the log file; the segment then uses the new file. A crash before the rename
    /// leaves the `.tmp` file, which opening the log deletes.
    fn replace_file(&mut self, len: u64) -> Result<(), StorageError> {
        let path = self.log.path().to_path_buf();
        let kept = PathBuf::from(format!("{}.cut.tmp", path.display()));
        let old = self.log_file()?;
        let new = open_file(&kept, true)?;
        new.set_len(0).map_err(io("truncate", &kept))?;
        let (mut from, mut to) = (0u64, 0u64);
        while from < len {
            let count = usize::try_from(len - from).unwrap_or(usize::MAX);
            let copied =
                rustix::fs::copy_file_range(&*old, Some(&mut from), &new, Some(&mut to), count)
                    .map_err(std::io::Error::from)
                    .map_err(io("copy", &kept))?;
            if copied == 0 {
                return Err(io("copy", &path)(super::records::cut_short(
                    from,
                    (len - from) as usize,
                )));
            }
        }
        new.sync_all().map_err(io("fsync", &kept))?;
        fs::rename(&kept, &path).map_err(io("rename", &kept))?;
        if let Some(dir) = path.parent() {
            super::checkpoint::sync_dir(dir)?;
        }
        self.log.replace(new);
        Ok(())
    }

    fn damaged(&self, position: u64, reason: String) -> StorageError {
        StorageError::DamagedBatch {
            path: self.log.path().to_path_buf(),
            position,
            reason,
        }
    }

    fn header_at(
        &self,
        position: u64,
    ) -> Result<Result<Option<BatchHeader>, String>, StorageError> {
        let len = (self.size - position).min(HEADER_SIZE as u64) as usize;
        let mut buf = [0u8; HEADER_SIZE];
        self.log_file()?
            .read_exact_at(&mut buf[..len], position)
            .map_err(io("read", self.log.path()))?;
        Ok(BatchHeader::parse(&buf[..len], position as usize).map_err(|e| e.to_string()))
    }

    fn bytes_after_last_entry(&self) -> u64 {
        self.size - self.entries.last().map_or(0, |e| u64::from(e.position))
    }

    fn maybe_index(&mut self, header: &BatchHeader, position: u64, interval: u64) {
        if self.entries.is_empty() || self.bytes_since_index >= interval {
            self.entries.push(IndexEntry {
                relative_offset: (header.base_offset - self.base_offset) as u32,
                position: position as u32,
                max_timestamp_before: self.max_timestamp,
            });
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += header.size as u64;
    }

    fn rewrite_index(&mut self) -> Result<(), StorageError> {
        self.persisted_entries = 0;
        if self.entries.is_empty() {
            // No file reads as an empty index: a recovered empty log makes no inode.
            self.index_unsynced = false;
            return remove_if_present(&self.index_path);
        }
        let raw: Vec<u8> = self.entries.iter().flat_map(|e| e.encode()).collect();
        let index = open_file(&self.index_path, true)?;
        index.set_len(0).map_err(io("truncate", &self.index_path))?;
        index
            .write_all_at(&raw, 0)
            .map_err(io("write", &self.index_path))?;
        self.persisted_entries = self.entries.len();
        self.index_unsynced = true;
        Ok(())
    }

    /// The first offset this segment may hold.
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// The offset after its last batch (its base offset when empty).
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The greatest record timestamp in it, or -1.
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }

    /// When it was created or opened, in ms.
    pub fn created_ms(&self) -> i64 {
        self.created_ms
    }

    /// Appends `bytes`, which hold whole batches described by `batches`.
    pub fn append(
        &mut self,
        bytes: &[u8],
        batches: &[AppendedBatch],
        index_interval_bytes: u64,
    ) -> Result<(), StorageError> {
        self.log_file()?
            .write_all_at(bytes, self.size)
            .map_err(io("write", self.log.path()))?;
        for b in batches {
            self.maybe_index(
                &b.header,
                self.size + b.position as u64,
                index_interval_bytes,
            );
            self.next_offset = b.header.next_offset();
            self.max_timestamp = self.max_timestamp.max(b.header.max_timestamp);
        }
        self.size += bytes.len() as u64;
        Ok(())
    }

    /// Reads `len` bytes at `position` into a fresh buffer.
    pub fn read(&self, position: u64, len: usize) -> Result<Bytes, StorageError> {
        self.range(position, len)?
            .read()
            .map_err(io("read", self.log.path()))
    }

    /// `len` bytes at `position`, to read or send later (see [`FileRange`]).
    pub fn range(&self, position: u64, len: usize) -> Result<FileRange, StorageError> {
        Ok(FileRange::new(self.log_file()?, position, len))
    }

    /// Where the whole batches from `position` (a batch start) end: at most `max_bytes` of
    /// them, only those starting below `upper_bound`, and the first one whatever its size when
    /// `min_one_batch`. Returns the end position and the offset after the last batch taken
    /// (`None` when none is). Only batch headers are read, from the last index entry inside
    /// the bound on: at most an index interval of them.
    pub fn extent(
        &self,
        position: u64,
        max_bytes: usize,
        upper_bound: i64,
        min_one_batch: bool,
    ) -> Result<(u64, Option<i64>), StorageError> {
        let limit = self.size.min(position.saturating_add(max_bytes as u64));
        // The batches before an index entry inside the bound are all taken: they end at the
        // entry, below the bound, and start below its offset. The next offset to read after
        // them is the entry's (its batch's base offset).
        let jump = self
            .entries
            .iter()
            .rev()
            .map(|e| {
                (
                    u64::from(e.position),
                    self.base_offset + i64::from(e.relative_offset),
                )
            })
            .find(|&(p, base)| p > position && p < limit && base < upper_bound);
        let (mut at, mut next) = jump.map_or((position, None), |(p, base)| (p, Some(base)));
        while at < self.size {
            let header = match self.header_at(at)? {
                Ok(Some(header)) => header,
                Ok(None) => break,
                // The batches before it are answered; a read from it is refused.
                Err(reason) if at == position => return Err(self.damaged(at, reason)),
                Err(_) => break,
            };
            let end = at + header.size as u64;
            let first = at == position;
            let fits = end <= limit || (first && min_one_batch && end <= self.size);
            if header.base_offset >= upper_bound || !fits {
                break;
            }
            next = Some(header.next_offset());
            at = end;
        }
        Ok((at, next))
    }

    /// The byte position of the first batch whose last offset is at least `offset`, or `None`
    /// when every batch ends before it.
    pub fn position_of(&self, offset: i64) -> Result<Option<u64>, StorageError> {
        let relative = (offset - self.base_offset).max(0);
        let from = self
            .entries
            .iter()
            .rev()
            .find(|e| i64::from(e.relative_offset) <= relative)
            .map_or(0, |e| u64::from(e.position));
        let mut position = from;
        while position < self.size {
            // A damaged header is an error, not the end: else a read would go on in the next
            // segment and skip the offsets from here silently.
            let header = match self.header_at(position)? {
                Ok(Some(h)) => h,
                Ok(None) => return Ok(None),
                Err(reason) => return Err(self.damaged(position, reason)),
            };
            if header.next_offset() > offset {
                return Ok(Some(position));
            }
            position += header.size as u64;
        }
        Ok(None)
    }

    /// The first batch whose greatest timestamp reaches `timestamp`: its base offset.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<i64>, StorageError> {
        if self.max_timestamp < timestamp {
            return Ok(None);
        }
        let from = self
            .entries
            .iter()
            .rev()
            .find(|e| e.max_timestamp_before < timestamp)
            .map_or(0, |e| u64::from(e.position));
        let mut position = from;
        while position < self.size {
            let header = match self.header_at(position)? {
                Ok(Some(h)) => h,
                _ => return Ok(None),
            };
            if header.max_timestamp >= timestamp {
                return Ok(Some(header.base_offset));
            }
            position += header.size as u64;
        }
        Ok(None)
    }

    /// Drops every batch holding an offset at or after `offset`; returns the bytes removed.
    pub fn truncate_to(&mut self, offset: i64) -> Result<u64, StorageError> {
        let Some(position) = self.position_of(offset)? else {
            return Ok(0);
        };
        let removed = self.size - position;
        self.cut_at(position, Cut::Replace)?;
        self.rewrite_index()?;
        Ok(removed)
    }

    /// Makes the log and index files durable.
    /// Index entries reach the file here, not on append: a segment with data after the last
    /// flush is recovered (and its index rebuilt) on open anyway, so writing them earlier would
    /// only add a syscall per append.
    pub fn flush(&mut self) -> Result<(), StorageError> {
        self.log_file()?
            .sync_data()
            .map_err(io("fsync", self.log.path()))?;
        let pending: Vec<u8> = self.entries[self.persisted_entries..]
            .iter()
            .flat_map(|e| e.encode())
            .collect();
        if pending.is_empty() && !self.index_unsynced {
            return Ok(());
        }
        let index = open_file(&self.index_path, true)?;
        if !pending.is_empty() {
            let at = (self.persisted_entries * ENTRY_SIZE) as u64;
            index
                .write_all_at(&pending, at)
                .map_err(io("write", &self.index_path))?;
            self.persisted_entries = self.entries.len();
        }
        index.sync_data().map_err(io("fsync", &self.index_path))?;
        self.index_unsynced = false;
        Ok(())
    }

    /// Deletes the segment's files.
    pub fn delete(self) -> Result<(), StorageError> {
        fs::remove_file(self.log.path()).map_err(io("delete", self.log.path()))?;
        remove_if_present(&self.index_path)
    }
}

/// Deletes `path`; one already gone is fine.
pub(super) fn remove_if_present(path: &Path) -> Result<(), StorageError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("delete", path)(e)),
        _ => Ok(()),
    }
}
