//! `meta.properties` of a log directory, as Kafka writes it: the directory's identity, a
//! `directory.id` drawn when the directory is first used. A cluster's controller records the
//! id each broker registers with, so a broker whose directory was wiped or replaced (a new id)
//! is not admitted while it leads partitions kept in the old one (docs/cluster.md, "A replaced
//! log directory").
//!
//! Contract: the file is written once, durably (temporary file, fsync, rename, fsync of the
//! directory), and never changed; a file without a `directory.id` is an error, not replaced.

use super::StorageError;
use super::error::io;
use std::io::Write;
use std::path::Path;

/// The file's name (Kafka's).
pub const META_PROPERTIES: &str = "meta.properties";

/// The `directory.id` of log directory `dir`, drawn and written on its first use.
pub fn directory_id(dir: &Path) -> Result<String, StorageError> {
    let path = dir.join(META_PROPERTIES);
    match std::fs::read_to_string(&path) {
        Ok(text) => text
            .lines()
            .find_map(|l| l.trim().strip_prefix("directory.id="))
            .map(|id| id.trim().to_string())
            .filter(|id| !id.is_empty())
            .ok_or_else(|| StorageError::Io {
                op: "read the directory.id of",
                path: path.clone(),
                source: std::io::Error::other("no directory.id in it"),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = uuid::Uuid::new_v4().to_string();
            let temporary = dir.join(format!("{META_PROPERTIES}.tmp"));
            let mut file = std::fs::File::create(&temporary).map_err(io("create", &temporary))?;
            file.write_all(format!("version=1\ndirectory.id={id}\n").as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(io("write", &temporary))?;
            std::fs::rename(&temporary, &path).map_err(io("rename", &temporary))?;
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io("sync", dir))?;
            Ok(id)
        }
        Err(e) => Err(io("read", &path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_drawn_once_and_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = directory_id(dir.path()).expect("drawn");
        assert_eq!(directory_id(dir.path()).expect("read"), first);
        let other = tempfile::tempdir().expect("temp dir");
        assert_ne!(directory_id(other.path()).expect("drawn"), first);
    }
}
