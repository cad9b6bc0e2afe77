//! `mirror.replication.throttled.rate`, measured end to end (`scripts/bench.sh throttled_mirror`,
//! which starts Kafka with scripts/kafka-local.sh): Apache Kafka holds a backlog of
//! `THROTTLE_BENCH_MB` (default 120) MB of 1 KiB records, uncompressed, in four partitions; a
//! `kmirror broker` process mirrors it with the rate set to `THROTTLE_BENCH_RATE` bytes/s
//! (default 5,000,000). The rate the mirror moves is read from the broker's own counter of
//! fetched bytes (`kmirror_fetcher_fetched_bytes_total` on its metrics listener) over
//! `THROTTLE_BENCH_SECONDS` (default 12) after a 3 s warm-up. Then the throttle is lifted with
//! `kmirror mirrors --alter --delete-config` while the mirror runs, and the rest of the backlog
//! is timed until the destination reaches the source's end. Prints both rates, the throttled
//! one's deviation from the target and the ratio.

mod support;

use kmirror_protocol::kafka_tools::{self, kafka_env};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 4;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The broker's `kmirror_fetcher_fetched_bytes_total` of `mirror`.
fn fetched_bytes(metrics: &str, mirror: &str) -> f64 {
    let body = support::scrape(metrics);
    let prefix = format!("kmirror_fetcher_fetched_bytes_total{{mirror=\"{mirror}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn main() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let megabytes = env_or("THROTTLE_BENCH_MB", 120);
    let rate = env_or("THROTTLE_BENCH_RATE", 5_000_000);
    let window = Duration::from_secs(env_or("THROTTLE_BENCH_SECONDS", 12));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    let topic = format!("bench-throttle-{}", std::process::id());
    kafka_tools::create_topic(&bootstrap, &topic, PARTITIONS as u32, &[]);
    let records = megabytes * 1000;
    support::produce_backlog(&bootstrap, &topic, records, "none");
    let source_ends = support::log_ends(&runtime, PARTITIONS, &bootstrap, &topic);

    let dir = tempfile::tempdir().expect("temp dir");
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let (mut broker, address) =
        support::spawn_kmirror(dir.path(), &format!("metrics.listener=http://{metrics}\n"));
    let config = dir.path().join("mirror.properties");
    std::fs::write(
        &config,
        format!("bootstrap.servers={bootstrap}\nmirror.replication.throttled.rate={rate}\n"),
    )
    .expect("written");
    let config = config.to_str().expect("UTF-8");
    support::mirrors_cli(
        &address,
        &["--create", "--mirror", "bench", "--mirror-config", config],
    );
    support::mirrors_cli(
        &address,
        &["--start", "--mirror", "bench", "--topics", &topic],
    );

    std::thread::sleep(Duration::from_secs(3));
    let (start, before) = (Instant::now(), fetched_bytes(&metrics, "bench"));
    std::thread::sleep(window);
    let (seconds, after) = (
        start.elapsed().as_secs_f64(),
        fetched_bytes(&metrics, "bench"),
    );
    let throttled = (after - before) / seconds;

    support::mirrors_cli(
        &address,
        &[
            "--alter",
            "--mirror",
            "bench",
            "--delete-config",
            "mirror.replication.throttled.rate",
        ],
    );
    let (lifted_at, lifted_bytes) = (Instant::now(), fetched_bytes(&metrics, "bench"));
    let deadline = Instant::now() + Duration::from_secs(600);
    while support::log_ends(&runtime, PARTITIONS, &address, &topic) != source_ends {
        assert!(Instant::now() < deadline, "the mirror never caught up");
        std::thread::sleep(Duration::from_millis(100));
    }
    let rest_seconds = lifted_at.elapsed().as_secs_f64();
    let unthrottled = (fetched_bytes(&metrics, "bench") - lifted_bytes) / rest_seconds;
    support::terminate(&mut broker);

    let target = rate as f64;
    println!(
        "throttled_mirror: backlog {megabytes} MB in {PARTITIONS} partitions; \
         mirror.replication.throttled.rate={rate} bytes/s"
    );
    println!(
        "  throttled: {:.2} MB/s over {seconds:.1} s ({:+.1}% from the target {:.2} MB/s)",
        throttled / 1e6,
        (throttled - target) / target * 100.0,
        target / 1e6
    );
    println!(
        "  lifted at runtime: {:.2} MB/s for the remaining {:.1} MB ({rest_seconds:.1} s); \
         lifted/throttled {:.1}",
        unthrottled / 1e6,
        unthrottled * rest_seconds / 1e6,
        unthrottled / throttled
    );
}
