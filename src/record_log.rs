//! A small durable log of serde records, for state that changes only by appending records and
//! is rebuilt by replaying them (controller metadata, committed offsets, transactions).
//!
//! Framing: `u32 length | u32 CRC32C of the body | body`, the body one JSON value (never empty).
//! Every append is fsynced before it returns, so an acknowledged record is a complete frame; an
//! append that fails is cut back off the file, so no partial frame sits before later records.
//!
//! Opening replays the frames in order and decides what their framing proves ([`replay`], pure):
//! - every byte is intact records: all of them;
//! - damage after the last intact record with nothing intact after it (an append that crashed
//!   mid-write, or a damaged last record): the tail is cut, its bytes are kept beside the log
//!   (`<log>.damaged-at-<offset>`) and a warning names the offset and the reason;
//! - damage followed by an intact frame, or an intact frame that does not decode (written by
//!   another version): the open fails with [`StorageError::CorruptRecordLog`], naming the file,
//!   the offset and the reason, and nothing is changed, because cutting there would drop
//!   records that were acknowledged. An append torn so that a later frame of it survived an
//!   earlier one cannot be told apart from such damage and is refused the same way.

use crate::storage::StorageError;
use crate::storage::error::{Damage, io};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// Bytes of a frame before its body: length and CRC32C.
const HEADER: usize = 8;

/// Damage the framing cannot prove to be a tail: opening refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// Byte offset of the damaged frame.
    pub offset: usize,
    /// Why it is not a record.
    pub damage: Damage,
    /// Where an intact frame starts after it (`None` when the damaged frame is itself intact
    /// but undecodable).
    pub intact_after: Option<usize>,
}

/// A damaged tail: nothing intact follows `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedTail {
    /// Byte offset where the intact records end.
    pub offset: usize,
    /// Why the frame there is not a record.
    pub damage: Damage,
}

/// The records a log's bytes hold and, if they end in a damaged tail, where it starts; or the
/// corruption that makes the log unusable as it is.
pub fn replay<T: DeserializeOwned>(
    raw: &[u8],
) -> Result<(Vec<T>, Option<DamagedTail>), Corruption> {
    let mut records = Vec::new();
    let mut position = 0;
    while position < raw.len() {
        let damage = match frame_at(raw, position) {
            Ok(body) => match serde_json::from_slice::<T>(body) {
                Ok(record) => {
                    records.push(record);
                    position += HEADER + body.len();
                    continue;
                }
                Err(e) => {
                    return Err(Corruption {
                        offset: position,
                        damage: Damage::Undecodable(e.to_string()),
                        intact_after: None,
                    });
                }
            },
            Err(damage) => damage,
        };
        return match (position + 1..raw.len()).find(|at| is_intact_frame(raw, *at)) {
            Some(intact) => Err(Corruption {
                offset: position,
                damage,
                intact_after: Some(intact),
            }),
            None => Ok((
                records,
                Some(DamagedTail {
                    offset: position,
                    damage,
                }),
            )),
        };
    }
    Ok((records, None))
}

/// The body of the frame at `at`, if its framing holds.
fn frame_at(raw: &[u8], at: usize) -> Result<&[u8], Damage> {
    let available = raw.len() - at;
    let word = |i: usize| raw.get(i..i + 4).map(|w| [w[0], w[1], w[2], w[3]]);
    let (Some(length), Some(stored)) = (word(at), word(at + 4)) else {
        return Err(Damage::ShortHeader(available));
    };
    let (length, stored) = (
        u32::from_be_bytes(length) as usize,
        u32::from_be_bytes(stored),
    );
    if length == 0 {
        return Err(Damage::Empty);
    }
    let Some(body) = raw.get(at + HEADER..at + HEADER + length) else {
        return Err(Damage::PastEnd {
            length,
            available: available - HEADER,
        });
    };
    let computed = crc32c::crc32c(body);
    if computed != stored {
        return Err(Damage::Checksum { stored, computed });
    }
    Ok(body)
}

/// Whether an intact frame starts at `at`. The body must also open like a JSON object, array or
/// string (what serde writes for the record types): inside JSON text a length word is ASCII and
/// far too long, so only real frame boundaries reach the CRC and the search stays linear.
fn is_intact_frame(raw: &[u8], at: usize) -> bool {
    let opens_json = raw
        .get(at + HEADER)
        .is_some_and(|b| matches!(b, b'{' | b'[' | b'"'));
    opens_json && frame_at(raw, at).is_ok()
}

/// An append-only file of records of type `T`.
#[derive(Debug)]
pub struct RecordLog<T> {
    path: PathBuf,
    file: File,
    /// The file's length after the last append that succeeded.
    len: u64,
    records: PhantomData<T>,
}

impl<T: Serialize + DeserializeOwned> RecordLog<T> {
    /// Opens (or creates) the log and returns it with every intact record, in order; cuts a
    /// damaged tail (kept beside the log and reported) and refuses any other damage (see the
    /// module docs).
    pub fn open(path: &Path) -> Result<(RecordLog<T>, Vec<T>), StorageError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io("create directory", dir))?;
        }
        let mut raw = Vec::new();
        if path.exists() {
            File::open(path)
                .and_then(|mut f| f.read_to_end(&mut raw))
                .map_err(io("read", path))?;
        }
        let (records, tail) = replay(&raw).map_err(|c| StorageError::CorruptRecordLog {
            path: path.to_path_buf(),
            offset: c.offset as u64,
            damage: c.damage,
            intact_after: c.intact_after.map(|at| at as u64),
        })?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io("open", path))?;
        let mut len = raw.len() as u64;
        if let Some(tail) = tail {
            let mut kept = path.as_os_str().to_owned();
            kept.push(format!(".damaged-at-{}", tail.offset));
            let kept = PathBuf::from(kept);
            File::create(&kept)
                .and_then(|mut f| f.write_all(&raw[tail.offset..]).and_then(|()| f.sync_all()))
                .map_err(io("keep the damaged tail in", &kept))?;
            len = tail.offset as u64;
            file.set_len(len).map_err(io("truncate", path))?;
            file.sync_all().map_err(io("fsync", path))?;
            tracing::warn!(
                log = %path.display(),
                offset = tail.offset,
                bytes = raw.len() - tail.offset,
                reason = %tail.damage,
                kept = %kept.display(),
                "cut a damaged tail after the last intact record (an interrupted append, or damage to the last record)"
            );
        }
        Ok((
            RecordLog {
                path: path.to_path_buf(),
                file,
                len,
                records: PhantomData,
            },
            records,
        ))
    }

    /// Replaces the log's content with `records` (compaction): written beside it, fsynced, then
    /// renamed over it, so a crash leaves either the old log or the new one.
    pub fn rewrite(path: &Path, records: &[T]) -> Result<RecordLog<T>, StorageError> {
        let staged = path.with_extension("rewrite");
        let mut content = Vec::new();
        for record in records {
            content.extend_from_slice(&frame(record, path)?);
        }
        let mut file = File::create(&staged).map_err(io("create", &staged))?;
        file.write_all(&content).map_err(io("write", &staged))?;
        file.sync_all().map_err(io("fsync", &staged))?;
        std::fs::rename(&staged, path).map_err(io("rename", path))?;
        if let Some(dir) = path.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io("fsync directory", dir))?;
        }
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(io("open", path))?;
        Ok(RecordLog {
            path: path.to_path_buf(),
            file,
            len: content.len() as u64,
            records: PhantomData,
        })
    }

    /// The log's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the log holds no record.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends one record durably.
    pub fn append(&mut self, record: &T) -> Result<(), StorageError> {
        self.append_all(std::slice::from_ref(record))
    }

    /// Appends records durably with one write and one fsync (group commit).
    pub fn append_all(&mut self, records: &[T]) -> Result<(), StorageError> {
        let mut frames = Vec::new();
        for record in records {
            frames.extend_from_slice(&frame(record, &self.path)?);
        }
        let written = self
            .file
            .write_all(&frames)
            .map_err(io("write", &self.path))
            .and_then(|()| self.file.sync_data().map_err(io("fsync", &self.path)));
        match written {
            Ok(()) => {
                self.len += frames.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Unacknowledged: if its bytes stayed, the next append's records would follow
                // a damaged frame, which the next open refuses. Best effort, so the caller
                // gets the append's own error.
                let _ = self.file.set_len(self.len);
                Err(e)
            }
        }
    }
}

/// `u32 length | u32 CRC32C | JSON` of one record.
fn frame<T: Serialize>(record: &T, path: &Path) -> Result<Vec<u8>, StorageError> {
    let body = serde_json::to_vec(record).map_err(|e| StorageError::Io {
        op: "encode record",
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    let mut frame = Vec::with_capacity(body.len() + 8);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Rec {
        A { n: u32 },
    }

    /// Three framed records and the offset of each.
    fn three() -> (Vec<u8>, [usize; 3]) {
        let mut raw = Vec::new();
        let mut offsets = [0; 3];
        for (i, offset) in offsets.iter_mut().enumerate() {
            *offset = raw.len();
            let rec = Rec::A { n: 1000 * i as u32 };
            raw.extend(frame(&rec, Path::new("t")).expect("frames"));
        }
        (raw, offsets)
    }

    fn records(n: usize) -> Vec<Rec> {
        (0..n).map(|i| Rec::A { n: 1000 * i as u32 }).collect()
    }

    #[test]
    fn a_damaged_tail_is_cut_at_the_last_intact_record() {
        let (raw, [_, _, last]) = three();
        assert_eq!(replay::<Rec>(&raw), Ok((records(3), None)));

        let torn = &raw[..raw.len() - 3];
        let (kept, tail) = replay::<Rec>(torn).expect("a tail");
        assert_eq!(kept, records(2));
        let tail = tail.expect("damaged");
        assert_eq!(tail.offset, last);
        assert!(matches!(tail.damage, Damage::PastEnd { .. }), "{tail:?}");

        let mut flipped = raw.clone();
        *flipped.last_mut().expect("bytes") ^= 0x10;
        let (kept, tail) = replay::<Rec>(&flipped).expect("a tail");
        assert_eq!(kept, records(2));
        let tail = tail.expect("damaged");
        assert_eq!(tail.offset, last);
        assert!(matches!(tail.damage, Damage::Checksum { .. }), "{tail:?}");

        let mut zeroed = raw.clone();
        zeroed.extend([0; 4096]);
        let (kept, tail) = replay::<Rec>(&zeroed).expect("a tail");
        assert_eq!(kept, records(3));
        assert_eq!(
            tail,
            Some(DamagedTail {
                offset: raw.len(),
                damage: Damage::Empty
            })
        );
        let (_, tail) = replay::<Rec>(&zeroed[..raw.len() + 5]).expect("a tail");
        assert_eq!(tail.expect("damaged").damage, Damage::ShortHeader(5));
    }

    #[test]
    fn damage_with_intact_records_after_it_is_refused_with_its_offset() {
        let (raw, [_, middle, last]) = three();
        // A flipped bit in the middle record's body.
        let mut flipped = raw.clone();
        flipped[middle + HEADER + 3] ^= 0x01;
        let refused = replay::<Rec>(&flipped).expect_err("refused");
        assert_eq!(refused.offset, middle);
        assert!(matches!(refused.damage, Damage::Checksum { .. }));
        assert_eq!(refused.intact_after, Some(last));
        // A flipped bit in its length.
        let mut flipped = raw.clone();
        flipped[middle] ^= 0x40;
        let refused = replay::<Rec>(&flipped).expect_err("refused");
        assert_eq!((refused.offset, refused.intact_after), (middle, Some(last)));
        assert!(matches!(refused.damage, Damage::PastEnd { .. }));
        // An intact last record this version cannot read is never cut.
        let mut foreign = raw.clone();
        foreign.extend(frame(&"a newer record", Path::new("t")).expect("frames"));
        let refused = replay::<Rec>(&foreign).expect_err("refused");
        assert_eq!(refused.offset, raw.len());
        assert!(matches!(refused.damage, Damage::Undecodable(_)));
        assert_eq!(refused.intact_after, None);
    }

    #[test]
    fn open_keeps_a_cut_tail_beside_the_log_and_changes_nothing_it_refuses() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("x.log");
        let (raw, [_, middle, last]) = three();

        let mut flipped = raw.clone();
        flipped[middle + HEADER + 3] ^= 0x01;
        std::fs::write(&path, &flipped).expect("written");
        let err = RecordLog::<Rec>::open(&path).expect_err("refused");
        let text = err.to_string();
        assert!(
            text.contains(&path.display().to_string())
                && text.contains(&format!("byte offset {middle}"))
                && text.contains("checksum mismatch"),
            "{text}"
        );
        assert_eq!(std::fs::read(&path).expect("read"), flipped, "untouched");

        let mut torn = raw.clone();
        *torn.last_mut().expect("bytes") ^= 0x10;
        std::fs::write(&path, &torn).expect("written");
        let (mut log, replayed) = RecordLog::<Rec>::open(&path).expect("opens");
        assert_eq!(replayed, records(2));
        assert_eq!(
            std::fs::read(dir.path().join(format!("x.log.damaged-at-{last}"))).expect("kept"),
            torn[last..]
        );
        log.append(&Rec::A { n: 7 }).expect("appends");
        let (_, replayed) = RecordLog::<Rec>::open(&path).expect("reopens");
        assert_eq!(replayed.last(), Some(&Rec::A { n: 7 }));
        assert_eq!(replayed.len(), 3);
    }
}
