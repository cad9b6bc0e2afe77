//! The broker's request path on arbitrary frames: header and body decoding and every handler,
//! against one real broker over a temporary log directory. The first two bytes pick a served API
//! and a version in its range (so the input reaches the decoders rather than the key check); the
//! rest is the frame after them. Anything may be refused; nothing may panic or hang (the clock is
//! paused, so a long poll or a rebalance wait ends as soon as the broker is idle).
#![no_main]

use bytes::{BufMut, Bytes, BytesMut};
use kmirror::broker::Broker;
use kmirror::broker::config::{BrokerConfig, parse_properties};
use kmirror::broker::server::{handle, served_versions};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

struct Target {
    broker: Arc<Broker>,
    runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

fn target() -> &'static Target {
    static TARGET: OnceLock<Target> = OnceLock::new();
    TARGET.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let props = parse_properties(&format!(
            "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:9092\nlog.dirs={}\nlog.segment.bytes=1048576\n",
            dir.path().display()
        ))
        .expect("parses");
        let (config, _) = BrokerConfig::from_properties(&props).expect("valid");
        let broker = Arc::new(Broker::open(config).expect("opens"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        Target {
            broker,
            runtime,
            _dir: dir,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let [pick, version, rest @ ..] = data else { return };
    let apis = served_versions();
    let (api, min, max) = apis[*pick as usize % apis.len()];
    let version = min + i16::from(*version) % (max - min + 1);
    let mut frame = BytesMut::with_capacity(rest.len() + 4);
    frame.put_i16(api as i16);
    frame.put_i16(version);
    frame.put_slice(rest);
    let t = target();
    let _ = t
        .runtime
        .block_on(handle(&t.broker, None, "/fuzz", Bytes::from(frame)));
});
