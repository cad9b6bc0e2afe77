//! `kmirror mirrors --verify` against mirroring the same data, end to end, in one run
//! (`scripts/bench.sh verify_vs_mirror`, which starts Kafka with scripts/kafka-local.sh): Apache
//! Kafka holds `VERIFY_BENCH_MB` (default 300) MB of 1 KiB records, uncompressed, in four
//! partitions; a `kmirror broker` process (release build) mirrors it all, timed until the
//! destination reaches the source's end; then `--verify` compares every partition with the
//! source, timed until the command returns. The broker's CPU time (`/proc`) is read around each
//! phase. Prints MB/s and CPU seconds per GB of each, and the ratios verify/mirror.
//!
//! Both phases read the same bytes from the same Kafka; mirroring also writes them, verifying
//! reads the destination's copy back (from the page cache, warm from the mirroring) and
//! computes its CRCs.

mod support;

use kmirror_protocol::kafka_tools::{self, kafka_env};
use std::process::Command;
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 4;

fn main() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let megabytes: u64 = std::env::var("VERIFY_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let topic = format!("bench-verify-{}", std::process::id());
    kafka_tools::create_topic(&bootstrap, &topic, PARTITIONS as u32, &[]);
    support::produce_backlog(&bootstrap, &topic, megabytes * 1000, "none");
    let source_ends = support::log_ends(&runtime, PARTITIONS, &bootstrap, &topic);

    let dir = tempfile::tempdir().expect("temp dir");
    let (mut broker, address) = support::spawn_kmirror(dir.path(), "");
    let pid = broker.id();
    let config = dir.path().join("mirror.properties");
    std::fs::write(&config, format!("bootstrap.servers={bootstrap}\n")).expect("written");
    let config = config.to_str().expect("UTF-8");
    support::mirrors_cli(
        &address,
        &["--create", "--mirror", "bench", "--mirror-config", config],
    );
    let (cpu_before, started) = (support::cpu_seconds(pid), Instant::now());
    support::mirrors_cli(
        &address,
        &["--start", "--mirror", "bench", "--topics", &topic],
    );
    let deadline = Instant::now() + Duration::from_secs(900);
    while support::log_ends(&runtime, PARTITIONS, &address, &topic) != source_ends {
        assert!(Instant::now() < deadline, "the mirror never caught up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mirror_seconds = started.elapsed().as_secs_f64();
    let mirror_cpu = support::cpu_seconds(pid) - cpu_before;

    let (cpu_before, started) = (support::cpu_seconds(pid), Instant::now());
    let out = Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(["mirrors", "--bootstrap-server", &address])
        .args(["--verify", "--mirror", "bench", "--json"])
        .output()
        .expect("kmirror mirrors runs");
    let verify_seconds = started.elapsed().as_secs_f64();
    let verify_cpu = support::cpu_seconds(pid) - cpu_before;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "--verify: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_str(text.trim()).expect("JSON");
    let verified: f64 = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["bytes"].as_f64().unwrap_or(0.0))
        .sum();
    support::terminate(&mut broker);

    let mb = verified / 1e6;
    println!(
        "verify_vs_mirror: {mb:.0} MB ({megabytes} MB asked) of 1 KiB records in {PARTITIONS} \
         partitions, Apache Kafka -> kmirror broker"
    );
    println!(
        "  mirror: {:.1} MB/s, broker CPU {:.2} s per GB",
        mb / mirror_seconds,
        mirror_cpu / (mb / 1e3)
    );
    println!(
        "  verify: {:.1} MB/s, broker CPU {:.2} s per GB",
        mb / verify_seconds,
        verify_cpu / (mb / 1e3)
    );
    println!(
        "  verify/mirror: throughput {:.2}, CPU per GB {:.2}",
        mirror_seconds / verify_seconds,
        verify_cpu / mirror_cpu
    );
}
