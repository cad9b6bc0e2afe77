//! Arbitrary bytes through the batch iterator, every header accessor, the CRC check, the control
//! record parser and the in-place header rewrite: errors are fine, panics are not.
#![no_main]

use bytes::Bytes;
use kmirror_protocol::batch::{RecordBatches, rewrite_batches};
use kmirror_protocol::records::ControlRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    let mut batches = RecordBatches::new(bytes);
    let mut spanned = 0;
    for batch in batches.by_ref() {
        let Ok(batch) = batch else { break };
        spanned += batch.size();
        let _ = (
            batch.verify_crc(),
            batch.compression(),
            batch.timestamp_type(),
            batch.last_sequence(),
            batch.next_offset(),
            batch.records(),
        );
        if batch.is_control() {
            let _ = ControlRecord::parse(&batch);
        }
    }
    assert!(spanned + batches.partial_tail() <= data.len());

    let mut copy = data.to_vec();
    if let Ok(rewritten) = rewrite_batches(&mut copy, |b| {
        b.set_base_offset(b.base_offset().wrapping_add(1));
        b.set_partition_leader_epoch(b.partition_leader_epoch().wrapping_add(1));
    }) {
        assert!(rewritten <= data.len());
        // Only the two fields outside the CRC may change.
        assert_eq!(copy.len(), data.len());
    }
});
