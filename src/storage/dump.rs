//! `kmirror dump-log`: prints the batches of a partition directory (or one `.log` file) without
//! changing anything, like Kafka's `kafka-dump-log.sh`. Where a segment holds a torn or corrupt
//! batch the dump says so and moves to the next segment, so an operator can see what a recovery
//! would cut.

use super::error::{StorageError, io};
use bytes::Bytes;
use kmirror_protocol::batch::{BatchHeader, HEADER_SIZE, RecordBatch, RecordBatches};
use kmirror_protocol::records::ControlRecord;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const CHUNK: usize = 8 << 20;

/// Totals of a dump.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DumpSummary {
    /// Segment files read.
    pub segments: usize,
    /// Whole batches printed.
    pub batches: usize,
    /// Batches whose CRC does not match.
    pub corrupt_batches: usize,
    /// Bytes after the last readable batch of each segment, summed.
    pub unreadable_bytes: u64,
}

/// Dumps `path`: a partition directory (every `*.log`, in offset order) or one segment file.
pub fn dump(path: &Path, out: &mut impl Write) -> Result<DumpSummary, StorageError> {
    let files = if path.is_dir() {
        let mut logs: Vec<PathBuf> = fs::read_dir(path)
            .map_err(io("list", path))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        logs.sort();
        logs
    } else {
        vec![path.to_path_buf()]
    };
    let mut summary = DumpSummary::default();
    for file in files {
        dump_segment(&file, out, &mut summary)?;
    }
    let write = io("write", "standard output");
    writeln!(
        out,
        "Summary: {} segments, {} batches, {} with a bad CRC, {} unreadable bytes",
        summary.segments, summary.batches, summary.corrupt_batches, summary.unreadable_bytes
    )
    .map_err(write)?;
    Ok(summary)
}

fn control_name(batch: &RecordBatch) -> String {
    match ControlRecord::parse(batch) {
        Ok(ControlRecord::EndTxn {
            commit,
            coordinator_epoch,
        }) => format!(
            " controlType: {} coordinatorEpoch: {coordinator_epoch}",
            if commit { "COMMIT" } else { "ABORT" }
        ),
        Ok(ControlRecord::MirrorPidReset { source_cluster_id }) => {
            format!(" controlType: MIRROR_PID_RESET sourceClusterId: {source_cluster_id}")
        }
        Ok(ControlRecord::Other { record_type }) => format!(" controlType: {record_type}"),
        Err(e) => format!(" controlType: invalid ({e})"),
    }
}

fn dump_segment(
    path: &Path,
    out: &mut impl Write,
    summary: &mut DumpSummary,
) -> Result<(), StorageError> {
    let file = File::open(path).map_err(io("open", path))?;
    let size = file.metadata().map_err(io("stat", path))?.len();
    let read = |position: u64, len: usize| -> Result<Bytes, StorageError> {
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, position)
            .map_err(io("read", path))?;
        Ok(Bytes::from(buf))
    };
    let write = |e| io("write", "standard output")(e);
    writeln!(out, "Dumping {}", path.display()).map_err(write)?;
    summary.segments += 1;
    let mut position = 0u64;
    while position < size {
        let len = ((size - position) as usize).min(CHUNK);
        let mut chunk = read(position, len)?;
        let head = chunk.slice(..HEADER_SIZE.min(chunk.len()));
        if let Ok(Some(h)) = BatchHeader::parse(&head, position as usize)
            && h.size > chunk.len()
            && position + h.size as u64 <= size
        {
            chunk = read(position, h.size)?;
        }
        let mut batches = RecordBatches::new(chunk);
        let mut advanced = 0usize;
        let mut problem = None;
        for batch in batches.by_ref() {
            let batch = match batch {
                Ok(b) => b,
                Err(e) => {
                    problem = Some(e.to_string());
                    break;
                }
            };
            let crc_ok = batch.verify_crc().is_ok();
            summary.batches += 1;
            summary.corrupt_batches += usize::from(!crc_ok);
            let compression = batch.compression().map_or("unknown", |c| c.name());
            let control = if batch.is_control() {
                control_name(&batch)
            } else {
                String::new()
            };
            writeln!(
                out,
                "baseOffset: {} lastOffset: {} count: {} position: {} size: {} partitionLeaderEpoch: {} producerId: {} producerEpoch: {} baseSequence: {} isTransactional: {} isControl: {} compression: {} maxTimestamp: {} crcValid: {}{}",
                batch.base_offset(),
                batch.last_offset(),
                batch.records_count(),
                position + advanced as u64,
                batch.size(),
                batch.partition_leader_epoch(),
                batch.producer_id(),
                batch.producer_epoch(),
                batch.base_sequence(),
                batch.is_transactional(),
                batch.is_control(),
                compression,
                batch.max_timestamp(),
                crc_ok,
                control
            )
            .map_err(write)?;
            advanced += batch.size();
        }
        position += advanced as u64;
        if problem.is_some() || advanced == 0 {
            let rest = size - position;
            summary.unreadable_bytes += rest;
            let why = problem.unwrap_or_else(|| "a torn batch".to_string());
            writeln!(
                out,
                "Stopped at position {position}: {why}; {rest} bytes not read"
            )
            .map_err(write)?;
            break;
        }
    }
    Ok(())
}
