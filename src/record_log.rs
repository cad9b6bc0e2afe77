//! A small durable log of serde records, for state that changes only by appending records and
//! is rebuilt by replaying them (controller metadata, committed offsets).
//!
//! Framing: `u32 length | u32 CRC32C of the JSON | JSON`. Opening replays every intact record and
//! cuts a torn or corrupt tail (an append that crashed was never acknowledged); every append is
//! fsynced before it returns.

use crate::storage::StorageError;
use crate::storage::error::io;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// An append-only file of records of type `T`.
#[derive(Debug)]
pub struct RecordLog<T> {
    path: PathBuf,
    file: File,
    records: PhantomData<T>,
}

impl<T: Serialize + DeserializeOwned> RecordLog<T> {
    /// Opens (or creates) the log and returns it with every intact record, in order.
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
        let mut records = Vec::new();
        let mut position = 0;
        while raw.len() >= position + 8 {
            let word =
                |at: usize| u32::from_be_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
            let (len, crc) = (word(position) as usize, word(position + 4));
            let Some(body) = raw.get(position + 8..position + 8 + len) else {
                break;
            };
            if crc32c::crc32c(body) != crc {
                break;
            }
            let Ok(record) = serde_json::from_slice::<T>(body) else {
                break;
            };
            records.push(record);
            position += 8 + len;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io("open", path))?;
        if position < raw.len() {
            file.set_len(position as u64)
                .map_err(io("truncate", path))?;
            file.sync_all().map_err(io("fsync", path))?;
        }
        Ok((
            RecordLog {
                path: path.to_path_buf(),
                file,
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
            records: PhantomData,
        })
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
        self.file
            .write_all(&frames)
            .map_err(io("write", &self.path))?;
        self.file.sync_data().map_err(io("fsync", &self.path))
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
