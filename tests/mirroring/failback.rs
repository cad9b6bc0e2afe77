//! Failover and failback between two kmirror clusters, each a `kmirror broker` process: A is the
//! source, B mirrors it; A restarts while B mirrors (the source going away and coming back);
//! B is stopped (failover) and takes writes, A comes back with writes B never saw; then A
//! mirrors B: A asks B for the last mirrored epoch, cuts its log where that epoch ends and
//! copies only what B wrote after the failover, so both logs end byte-identical.

use super::process::{
    BrokerProcess, create_mirror, free_port, kmirror_segment, produce, spawn_broker, wait_described,
};
use kmirror_protocol::kafka_tools;
use kmirror_testkit::cli::mirrors_cli;
use kmirror_testkit::source::{source_client, source_ends};

/// Runs `kmirror mirrors` and expects success.
fn cli_ok(address: &str, args: &[&str]) {
    let (code, text) = mirrors_cli(address, args);
    assert_eq!(code, Some(0), "kmirror mirrors {args:?}: {text}");
}

/// Two `kmirror broker` processes, A and B, and a two-partition topic on A that B mirrors
/// (mirror `dr`), caught up.
struct MirroredPair {
    dir_a: tempfile::TempDir,
    dir_b: tempfile::TempDir,
    port_a: u16,
    a_address: String,
    b_address: String,
    topic: String,
    a: BrokerProcess,
    b: BrokerProcess,
}

/// [`MirroredPair`] with `records` written to A's topic (named `prefix-<pid>`) before B
/// mirrors it.
async fn mirrored_pair(prefix: &str, records: u32) -> MirroredPair {
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("temp dir"),
        tempfile::tempdir().expect("temp dir"),
    );
    let (port_a, port_b) = (free_port(), free_port());
    let (a_address, b_address) = (format!("127.0.0.1:{port_a}"), format!("127.0.0.1:{port_b}"));
    let topic = format!("{prefix}-{}", std::process::id());
    let a = spawn_broker(dir_a.path(), port_a);
    let b = spawn_broker(dir_b.path(), port_b);
    let a_topic = (a_address.clone(), topic.clone());
    tokio::task::spawn_blocking(move || kafka_tools::create_topic(&a_topic.0, &a_topic.1, 2, &[]))
        .await
        .expect("created");
    produce(&a_address, &topic, records).await;
    create_mirror(dir_b.path(), &b_address, "dr", &a_address);
    cli_ok(
        &b_address,
        &["--start", "--mirror", "dr", "--topics", &topic],
    );
    let ends = source_ends(&*source_client(&a_address).await, &topic, 2).await;
    wait_described(&b_address, "dr", &topic, "MIRRORING", &ends).await;
    MirroredPair {
        dir_a,
        dir_b,
        port_a,
        a_address,
        b_address,
        topic,
        a,
        b,
    }
}

#[actix_rt::test]
#[ignore = "needs Apache Kafka's tools: run scripts/test.sh"]
async fn failback_truncates_after_the_last_mirrored_epoch_and_copies_only_the_delta() {
    // A -> B, and A restarts while B mirrors it: a new leader epoch on A for what follows.
    let MirroredPair {
        dir_a,
        dir_b,
        port_a,
        a_address,
        b_address,
        topic,
        mut a,
        b,
    } = mirrored_pair("failback", 10_000).await;
    let source_a = source_client(&a_address).await;
    drop(a);
    a = spawn_broker(dir_a.path(), port_a);
    produce(&a_address, &topic, 5_000).await;
    let ends = source_ends(&source_a, &topic, 2).await;
    wait_described(&b_address, "dr", &topic, "MIRRORING", &ends).await;

    // Failover to B: stopped (the PID reset barrier follows the mirrored data), then written.
    cli_ok(
        &b_address,
        &["--stop", "--mirror", "dr", "--topics", &topic],
    );
    let after_barrier: Vec<i64> = ends.iter().map(|e| e + 1).collect();
    wait_described(&b_address, "dr", &topic, "STOPPED", &after_barrier).await;
    produce(&b_address, &topic, 2_000).await;

    // A comes back (another restart, another epoch) and takes writes B never sees.
    drop(a);
    let _a = spawn_broker(dir_a.path(), port_a);
    produce(&a_address, &topic, 1_000).await;
    let source_a = source_client(&a_address).await;
    let diverged = source_ends(&source_a, &topic, 2).await;
    for (p, (d, e)) in diverged.iter().zip(&ends).enumerate() {
        assert!(d > e, "partition {p}: A wrote past the failover point");
    }

    // Failback: A mirrors B. A's topic is a plain topic with the same id, so it joins the mirror.
    create_mirror(dir_a.path(), &a_address, "back", &b_address);
    cli_ok(
        &a_address,
        &["--start", "--mirror", "back", "--topics", &topic],
    );
    let source_b = source_client(&b_address).await;
    let b_ends = source_ends(&source_b, &topic, 2).await;
    wait_described(&a_address, "back", &topic, "MIRRORING", &b_ends).await;
    for p in 0..2 {
        assert!(
            kmirror_segment(dir_a.path(), &topic, p) == kmirror_segment(dir_b.path(), &topic, p),
            "partition {p}: A's log differs from B's after failback"
        );
    }
    // A kept everything up to the end of the last mirrored epoch (the failover point) and cut
    // only its own diverging writes: the alignment it logged says where.
    let log = std::fs::read_to_string(dir_a.path().join("broker.log")).expect("A's log");
    for (p, end) in ends.iter().enumerate() {
        let wanted = format!("alignment=TruncateTo({end})");
        assert!(
            log.lines().any(|l| l.contains(&format!("partition={p} "))
                && l.contains(&topic)
                && l.contains("last_mirrored_epoch=1")
                && l.contains(&wanted)),
            "partition {p}: A did not cut its log at {end} for LME 1:\n{log}"
        );
    }
    drop(b);
}

/// The failback of a topic the old source took no writes to after its last restart. Each start
/// stamps a new leader epoch at the log end; with nothing appended after it, that epoch is the
/// old source's last fetched epoch, the destination answers that the history diverged exactly
/// at the log end, and the truncation there must drop the stamped epoch (as Kafka's does), or
/// the mirror asks again forever and never catches up (the nemesis long run, seed 1001).
#[actix_rt::test]
#[ignore = "needs Apache Kafka's tools: run scripts/test.sh"]
async fn failback_to_a_restarted_source_without_new_writes_catches_up() {
    let MirroredPair {
        dir_a,
        dir_b,
        port_a,
        a_address,
        b_address,
        topic,
        mut a,
        b,
    } = mirrored_pair("failback-quiet", 2_000).await;
    let ends = source_ends(&*source_client(&a_address).await, &topic, 2).await;

    // The region of A goes (SIGKILL); B fails over and takes writes.
    drop(a);
    cli_ok(
        &b_address,
        &["--stop", "--mirror", "dr", "--topics", &topic],
    );
    let after_barrier: Vec<i64> = ends.iter().map(|e| e + 1).collect();
    wait_described(&b_address, "dr", &topic, "STOPPED", &after_barrier).await;
    produce(&b_address, &topic, 1_000).await;

    // A comes back with nothing new and fails back.
    a = spawn_broker(dir_a.path(), port_a);
    create_mirror(dir_a.path(), &a_address, "back", &b_address);
    cli_ok(
        &a_address,
        &["--start", "--mirror", "back", "--topics", &topic],
    );
    let source_b = source_client(&b_address).await;
    let b_ends = source_ends(&source_b, &topic, 2).await;
    wait_described(&a_address, "back", &topic, "MIRRORING", &b_ends).await;
    for p in 0..2 {
        assert!(
            kmirror_segment(dir_a.path(), &topic, p) == kmirror_segment(dir_b.path(), &topic, p),
            "partition {p}: A's log differs from B's after failback"
        );
    }
    drop((a, b));
}
