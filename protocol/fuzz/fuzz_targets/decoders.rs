//! Every generated decoder on arbitrary bytes. The first byte picks the type, the second the
//! version (-1 to 2, to reach the version checks); whatever decodes must encode again, and that
//! encoding must decode to the same bytes once more.
#![no_main]

use bytes::Bytes;
use kmirror_protocol::messages::{ALL_TYPES, decode_and_reencode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [pick, version, rest @ ..] = data else { return };
    let name = ALL_TYPES[*pick as usize % ALL_TYPES.len()];
    let version = i16::from(*version % 4) - 1;
    let decoded = decode_and_reencode(name, Bytes::copy_from_slice(rest), version)
        .expect("every listed name has a decoder");
    if let Ok(encoded) = decoded {
        let again = decode_and_reencode(name, encoded.clone(), version)
            .expect("every listed name has a decoder")
            .expect("an encoding we produced decodes");
        assert_eq!(again, encoded, "{name} v{version} does not re-encode stably");
    }
});
