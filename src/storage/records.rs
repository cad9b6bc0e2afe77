//! Record batches as a Fetch answers them: whole batches of one segment file named by their byte
//! range ([`FileRange`]), not read into memory, so the listener streams them from the page cache
//! to the socket (`sendfile`) while the rest of the response is still to go; or bytes already in
//! memory.
//!
//! Contract: a range covers whole batches that were appended before it was taken, and the file
//! it holds never changes under it: retention unlinks segments (the open file stays readable),
//! and a cut replaces the segment's file rather than shortening it (`Segment::cut_at`), since
//! bytes `sendfile` handed to a socket are still references to the file's pages
//! (docs/wire.md, "Records"). A file shorter than the range all the same is an error for the
//! reader and the listener, never fewer bytes than the length they announced.

use bytes::Bytes;
use std::fs::File;
use std::sync::Arc;

/// Whole batches of one segment file: `len` bytes from `position`.
#[derive(Debug, Clone)]
pub struct FileRange {
    file: Arc<File>,
    position: u64,
    len: usize,
}

impl FileRange {
    pub(crate) fn new(file: Arc<File>, position: u64, len: usize) -> Self {
        Self {
            file,
            position,
            len,
        }
    }

    /// The open segment file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The byte position of the first batch in the file.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// How many bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes, read into a buffer of their own (not zeroed first).
    pub fn read(&self) -> std::io::Result<Bytes> {
        let mut buf = Vec::with_capacity(self.len);
        while buf.len() < self.len {
            let at = self.position + buf.len() as u64;
            let want = self.len - buf.len();
            let got = rustix::io::pread(&*self.file, rustix::buffer::spare_capacity(&mut buf), at)?;
            if got == 0 {
                return Err(cut_short(at, want));
            }
        }
        Ok(Bytes::from(buf))
    }
}

/// The error for a range whose file ends before it does (the segment was truncated).
pub fn cut_short(at: u64, missing: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!("the segment ends at byte {at}, {missing} bytes before the records read"),
    )
}

/// Records of a response: in memory, or a range of a segment file sent as it is.
#[derive(Debug, Clone)]
pub enum Records {
    /// Bytes in memory.
    Bytes(Bytes),
    /// A range of a segment file.
    File(FileRange),
}

impl Records {
    /// How many bytes.
    pub fn len(&self) -> usize {
        match self {
            Self::Bytes(bytes) => bytes.len(),
            Self::File(range) => range.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes (a file range is read).
    pub fn to_bytes(&self) -> std::io::Result<Bytes> {
        match self {
            Self::Bytes(bytes) => Ok(bytes.clone()),
            Self::File(range) => range.read(),
        }
    }
}

impl From<Bytes> for Records {
    fn from(bytes: Bytes) -> Self {
        Self::Bytes(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_range_reads_its_bytes_and_a_cut_file_is_an_error() {
        let mut file = tempfile::tempfile().expect("temp file");
        file.write_all(b"0123456789").expect("written");
        let file = Arc::new(file);
        let range = FileRange::new(file.clone(), 2, 5);
        assert_eq!(range.read().expect("read"), Bytes::from_static(b"23456"));
        assert_eq!(
            Records::File(range.clone()).to_bytes().expect("read"),
            Bytes::from_static(b"23456")
        );
        file.set_len(4).expect("cut");
        let err = range.read().expect_err("cut short");
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
