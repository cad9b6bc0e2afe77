//! A small file replaced whole and durably: the quorum's vote, its committed log id and its
//! snapshot.
//!
//! Contract: [`write`] returns only once the new content is on disk under its name. It writes a
//! temporary file beside it, fsyncs it, renames it over the old one and fsyncs the directory, so
//! a crash at any point leaves either the old content or the new one, never a mix. The content
//! ends in a CRC32C of it, so [`read`] refuses a file damaged after it was written (a rename
//! never tears it, so a mismatch is damage, not an interrupted write) instead of handing
//! openraft a wrong vote or state.

use crate::storage::StorageError;
use crate::storage::error::io;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Bytes of the CRC32C trailer.
const TRAILER: usize = 4;

/// Replaces the file at `path` with `body`, durably (see the module docs).
pub(super) fn write(path: &Path, body: &[u8]) -> Result<(), StorageError> {
    let staged = staged(path);
    let mut content = Vec::with_capacity(body.len() + TRAILER);
    content.extend_from_slice(body);
    content.extend_from_slice(&crc32c::crc32c(body).to_be_bytes());
    let mut file = File::create(&staged).map_err(io("create", &staged))?;
    file.write_all(&content).map_err(io("write", &staged))?;
    file.sync_all().map_err(io("fsync", &staged))?;
    std::fs::rename(&staged, path).map_err(io("rename", path))?;
    sync_parent(path)
}

/// The body last written to `path`, or `None` when nothing was ever written there; an error
/// naming the file when its checksum does not hold.
pub(super) fn read(path: &Path) -> Result<Option<Vec<u8>>, StorageError> {
    let mut content = match std::fs::read(path) {
        Ok(content) => content,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("read", path)(e)),
    };
    let Some(body_len) = content.len().checked_sub(TRAILER) else {
        return Err(damaged(
            path,
            format!(
                "{} bytes, fewer than its {TRAILER}-byte checksum",
                content.len()
            ),
        ));
    };
    let mut stored = [0; TRAILER];
    stored.copy_from_slice(&content[body_len..]);
    let stored = u32::from_be_bytes(stored);
    content.truncate(body_len);
    let computed = crc32c::crc32c(&content);
    if stored != computed {
        return Err(damaged(
            path,
            format!("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"),
        ));
    }
    Ok(Some(content))
}

/// Fsyncs the directory holding `path`, so a file created or renamed there stays after a crash.
pub(super) fn sync_parent(path: &Path) -> Result<(), StorageError> {
    match path.parent() {
        Some(dir) => File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("fsync directory", dir)),
        None => Ok(()),
    }
}

/// Where [`write`] stages the new content of `path`.
fn staged(path: &Path) -> PathBuf {
    let mut staged = path.as_os_str().to_owned();
    staged.push(".tmp");
    PathBuf::from(staged)
}

/// The error for a file whose content does not hold.
fn damaged(path: &Path, why: String) -> StorageError {
    StorageError::Io {
        op: "verify",
        path: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{why}; the file was damaged after it was written: restore it from a backup or another node"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_write_is_read_back_and_damage_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("vote");
        assert_eq!(read(&path).expect("reads"), None);
        write(&path, b"{\"term\":1}").expect("writes");
        write(&path, b"{\"term\":2}").expect("writes");
        assert_eq!(read(&path).expect("reads"), Some(b"{\"term\":2}".to_vec()));
        assert!(!staged(&path).exists(), "nothing left staged");

        let mut raw = std::fs::read(&path).expect("raw");
        raw[3] ^= 0x01;
        std::fs::write(&path, &raw).expect("damaged");
        let text = read(&path).expect_err("refused").to_string();
        assert!(
            text.contains(&path.display().to_string()) && text.contains("checksum mismatch"),
            "{text}"
        );
        std::fs::write(&path, b"ab").expect("short");
        let text = read(&path).expect_err("refused").to_string();
        assert!(text.contains("fewer than its 4-byte checksum"), "{text}");
    }
}
