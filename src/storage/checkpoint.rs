//! Small state files written atomically: write a temporary file, fsync it, rename it over the old
//! one, fsync the directory. A crash leaves either the old or the new content, never a mix; a
//! leftover `.tmp` is deleted when the log opens.
//!
//! Format, as Kafka's checkpoint files: a version line, a count line, then one entry per line of
//! space-separated integers.

use super::error::{StorageError, io};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

const VERSION: &str = "0";

/// Writes `entries` to `path` atomically.
pub(crate) fn write(path: &Path, entries: &[Vec<i64>]) -> Result<(), StorageError> {
    let mut text = format!("{VERSION}\n{}\n", entries.len());
    for entry in entries {
        let fields: Vec<String> = entry.iter().map(i64::to_string).collect();
        text.push_str(&fields.join(" "));
        text.push('\n');
    }
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp).map_err(io("create", &tmp))?;
    file.write_all(text.as_bytes()).map_err(io("write", &tmp))?;
    file.sync_all().map_err(io("fsync", &tmp))?;
    fs::rename(&tmp, path).map_err(io("rename", &tmp))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Why a checkpoint file could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CheckpointProblem {
    /// No file.
    Missing,
    /// The file exists but does not parse; the text says where.
    Garbage(String),
}

/// Reads a checkpoint written by [`write`], each entry having `width` fields.
pub(crate) fn read(path: &Path, width: usize) -> Result<Vec<Vec<i64>>, CheckpointProblem> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CheckpointProblem::Missing);
        }
        Err(e) => return Err(CheckpointProblem::Garbage(e.to_string())),
    };
    let garbage = |what: &str| CheckpointProblem::Garbage(format!("{}: {what}", path.display()));
    let mut lines = text.lines();
    if lines.next() != Some(VERSION) {
        return Err(garbage("unknown version line"));
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| garbage("bad count line"))?;
    let entries: Vec<Vec<i64>> = lines
        .map(|line| {
            let fields: Option<Vec<i64>> =
                line.split_whitespace().map(|f| f.parse().ok()).collect();
            fields.filter(|f| f.len() == width)
        })
        .collect::<Option<_>>()
        .ok_or_else(|| garbage("bad entry line"))?;
    if entries.len() != count {
        return Err(garbage("entry count does not match"));
    }
    Ok(entries)
}

/// Makes a directory's entries (creations, renames, deletions) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    let handle = OpenOptions::new()
        .read(true)
        .open(dir)
        .map_err(io("open directory", dir))?;
    handle.sync_all().map_err(io("fsync directory", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("leader-epoch-checkpoint");
        assert_eq!(read(&path, 2), Err(CheckpointProblem::Missing));
        write(&path, &[vec![0, 0], vec![3, 120]]).expect("writes");
        assert_eq!(
            fs::read_to_string(&path).expect("reads"),
            "0\n2\n0 0\n3 120\n"
        );
        assert_eq!(read(&path, 2), Ok(vec![vec![0, 0], vec![3, 120]]));
        for garbage in [
            "",
            "1\n0\n",
            "0\nx\n",
            "0\n2\n0 0\n",
            "0\n1\n0 zero\n",
            "0\n1\n1 2 3\n",
        ] {
            fs::write(&path, garbage).expect("writes");
            assert!(
                matches!(read(&path, 2), Err(CheckpointProblem::Garbage(_))),
                "{garbage:?}"
            );
        }
        assert!(!path.with_extension("tmp").exists());
    }
}
