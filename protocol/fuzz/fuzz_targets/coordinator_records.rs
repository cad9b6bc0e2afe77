//! `__mirror_state` records on arbitrary key and value bytes: what decodes must encode and decode
//! to the same record.
#![no_main]

use bytes::Bytes;
use kmirror_protocol::records::CoordinatorRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [split, tombstone, rest @ ..] = data else { return };
    let split = (*split as usize).min(rest.len());
    let key = Bytes::copy_from_slice(&rest[..split]);
    let value = (tombstone & 1 == 0).then(|| Bytes::copy_from_slice(&rest[split..]));
    if let Ok(record) = CoordinatorRecord::decode(key, value) {
        let key = record.key_bytes().expect("a decoded record encodes");
        let value = record.value_bytes().expect("a decoded record encodes");
        assert_eq!(CoordinatorRecord::decode(key, value).as_ref(), Ok(&record));
    }
});
