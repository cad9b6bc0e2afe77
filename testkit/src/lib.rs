//! What kmirror's process-level test binaries and benchmarks share (dev-only, never published):
//! - [`local_cluster`]: a cluster of `kmirror broker` processes started by
//!   `scripts/cluster-local.sh` (docs/cluster.md), its crashes, freezes and restarts;
//! - [`client`]: Kafka clients over the raw protocol (producers that record what was
//!   acknowledged, a reader that fetches a partition back);
//! - [`cli`]: `kmirror mirrors` as operators run it, and its `--describe --json`;
//! - [`source`]: the Apache Kafka source of the tests (`scripts/kafka-local.sh`): a client, its
//!   last stable offsets, its segment files;
//! - [`wan_proxy`]: a WAN model on loopback (delay, a shared bandwidth cap, a window per
//!   connection, connections cut mid-answer);
//! - [`kmirror_bin`] and [`eventually`].

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub mod cli;
pub mod client;
pub mod local_cluster;
pub mod source;
pub mod wan_proxy;

/// The `kmirror` binary cargo built for the test or benchmark that runs: `CARGO_BIN_EXE_kmirror`
/// (which cargo sets when it runs an integration test or a benchmark of the root package), else
/// the `kmirror` beside the folder of the running test binary (`target/<profile>/deps/..`), for a
/// test binary run by hand.
pub fn built_kmirror() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_kmirror") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps");
    profile.join(format!("kmirror{}", std::env::consts::EXE_SUFFIX))
}

/// The `kmirror` binary the process tests run: `KMIRROR_TEST_BIN` (a long nemesis run started
/// with a release binary kept apart from later builds), else [`built_kmirror`].
pub fn kmirror_bin() -> PathBuf {
    std::env::var_os("KMIRROR_TEST_BIN").map_or_else(built_kmirror, PathBuf::from)
}

/// Every segment file (`*.log`) of the partition directory `dir`, concatenated in offset order
/// (empty when there is none): a replica's bytes, whatever its segments' boundaries.
pub fn concatenated_segments(dir: &std::path::Path) -> Vec<u8> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect()
        })
        .unwrap_or_default();
    // Zero-padded base offsets: the names sort as the offsets do.
    segments.sort();
    segments
        .iter()
        .flat_map(|s| std::fs::read(s).unwrap_or_default())
        .collect()
}

/// Waits until `check` holds (asked every 200 ms, for at most 60 s); panics with `what` and the
/// last answer.
pub async fn eventually<T: std::fmt::Debug, F: Future<Output = T>>(
    what: &str,
    mut ask: impl FnMut() -> F,
    check: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = ask().await;
        if check(&answer) {
            return answer;
        }
        assert!(Instant::now() < deadline, "{what}: still {answer:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
