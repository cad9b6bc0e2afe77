//! The nemesis of the metadata quorum (docs/cluster.md): a destination cluster of three
//! `kmirror broker` processes mirroring a `kmirror broker` source, while topics and mirrors are
//! created through random nodes and a seeded schedule SIGKILLs the active controller or another
//! node (restarting it), and SIGSTOPs the active controller briefly or another node past its
//! session timeout. After each cycle it checks:
//! - a new active controller within 5 s of the active one's kill or freeze;
//! - a node frozen past `broker.session.timeout.ms` is fenced: the other nodes' Metadata shows its
//!   partitions without a leader, and they have their leader back once it thaws;
//! - every acknowledged topic and mirror is on every node, and all nodes show the same
//!   topics with the same leaders and leader epochs;
//!
//! and at the end that every mirror partition, whichever node leads it and however often it was
//! killed, equals the source's log byte for byte (resumed from `__mirror_state` with no gap and
//! no duplicate); then that the topic fails over to the cluster and back to the old source,
//! which ends with the cluster's logs byte for byte.
//!
//! `NEMESIS_SEED` replays a schedule; `NEMESIS_CYCLES` (3) sets the length.

use super::Rng;
use super::process::{Broker, concatenated_segments, free_port, mirrors_cli};
use kafka_protocol::records::Compression;
use kmirror_testkit::client::{self, Outcome, Producer};
use kmirror_testkit::local_cluster::{self, LocalCluster, topics_of};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NODES: usize = 3;
const TOPIC: &str = "q-mirrored";
const PARTITIONS: i32 = 6;
const SESSION: Duration = Duration::from_secs(4);
/// How long a new active controller may take.
const FAILOVER_BOUND: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
enum Fault {
    KillActive,
    KillOther,
    FreezeActive,
    FreezeOtherPastSession,
}

/// What the run saw go wrong.
#[derive(Default)]
struct Violations(Vec<String>);

impl Violations {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            let what = what();
            eprintln!("VIOLATION: {what}");
            self.0.push(what);
        }
    }
}

/// Topics and mirrors whose creation a node acknowledged.
#[derive(Default)]
struct Acknowledged {
    topics: BTreeSet<String>,
    mirrors: BTreeSet<String>,
}

/// Creates topics and mirrors through random nodes until `stop`, recording what was acknowledged.
async fn metadata_writer(
    clients: Vec<String>,
    mirror_config: String,
    cycle: u32,
    seed: u64,
    acknowledged: Arc<Mutex<Acknowledged>>,
    stop: Arc<AtomicBool>,
) {
    let mut rng = Rng(seed);
    let mut k = 0;
    while !stop.load(Ordering::SeqCst) {
        let node = &clients[rng.below(clients.len() as u64) as usize];
        if rng.chance(70) {
            let name = format!("q{cycle}-t{k}");
            if let Ok(0) = client::create_topic(node, &name, 2).await {
                acknowledged.lock().expect("lock").topics.insert(name);
            }
        } else {
            let name = format!("q{cycle}-m{k}");
            let args = [
                "--create",
                "--mirror",
                &name,
                "--mirror-config",
                &mirror_config,
            ];
            if let (Some(0), _) = mirrors_cli(node, &args).await {
                acknowledged.lock().expect("lock").mirrors.insert(name);
            }
        }
        k += 1;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// Writes to the source until `stop`.
async fn source_writer(address: String, stop: Arc<AtomicBool>) {
    let mut producer = Producer::idempotent(&address);
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let partition = (n % PARTITIONS as u64) as i32;
        let values: Vec<String> = (0..20).map(|i| format!("v{n}-{i}")).collect();
        if let Outcome::Unknown(_) = producer
            .produce(TOPIC, partition, &values, Compression::Lz4)
            .await
        {
            producer.reset();
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until a node among `nodes` other than `gone` is the active controller: how long it took.
async fn new_active(cluster: &LocalCluster, nodes: &[usize], since: Instant) -> Option<Duration> {
    loop {
        if cluster.active_controller(nodes).is_some() {
            return Some(since.elapsed());
        }
        if since.elapsed() > Duration::from_secs(30) {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether every node's Metadata shows the partitions led by `node` as `fenced` (leader -1) or
/// not, within `within`.
async fn wait_fenced(
    cluster: &LocalCluster,
    observers: &[usize],
    node: i32,
    fenced: bool,
    within: Duration,
) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let mut all = true;
        for observer in observers {
            let Ok(topics) = topics_of(&cluster.clients[observer - 1]).await else {
                all = false;
                break;
            };
            // The mirrored topic has a partition on every node: its leader shows the fence.
            let views = topics.get(TOPIC).cloned().unwrap_or_default();
            let led = (0..views.len()).filter(|i| {
                let leader = views[*i].leader;
                if fenced { leader == -1 } else { leader == node }
            });
            all &= led.count() > 0;
        }
        if all {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

async fn inject(cluster: &LocalCluster, fault: Fault, rng: &mut Rng, violations: &mut Violations) {
    let all: Vec<usize> = (1..=NODES).collect();
    // A voter thawed by the previous fault may have started an election (Raft without
    // pre-vote): the promise is a new active controller within FAILOVER_BOUND, so wait that long.
    let waited = new_active(cluster, &all, Instant::now()).await;
    let active = waited
        .filter(|took| *took < FAILOVER_BOUND)
        .and_then(|_| cluster.active_controller(&all));
    let Some(active) = active else {
        violations.check(false, || {
            format!("{fault:?}: no active controller within {FAILOVER_BOUND:?} before the fault")
        });
        return;
    };
    let others: Vec<usize> = all.iter().copied().filter(|n| *n != active).collect();
    let other = others[rng.below(others.len() as u64) as usize];
    eprintln!("fault {fault:?} (active controller {active})");
    match fault {
        Fault::KillActive | Fault::FreezeActive => {
            let at = Instant::now();
            if matches!(fault, Fault::KillActive) {
                cluster.kill(active);
            } else {
                cluster.signal(active, "STOP");
            }
            let took = new_active(cluster, &others, at).await;
            violations.check(took.is_some_and(|t| t < FAILOVER_BOUND), || {
                format!("{fault:?}: a new active controller took {took:?}")
            });
            eprintln!("new active controller after {took:?}");
            tokio::time::sleep(rng.millis(500, 2_500)).await;
            if matches!(fault, Fault::KillActive) {
                cluster.restart(active);
            } else {
                cluster.signal(active, "CONT");
            }
        }
        Fault::KillOther => {
            cluster.kill(other);
            tokio::time::sleep(rng.millis(500, 3_000)).await;
            cluster.restart(other);
        }
        Fault::FreezeOtherPastSession => {
            cluster.signal(other, "STOP");
            let observers: Vec<usize> = all.iter().copied().filter(|n| *n != other).collect();
            let fenced = wait_fenced(cluster, &observers, other as i32, true, SESSION * 3).await;
            violations.check(fenced, || {
                format!("node {other} frozen past its session is not shown fenced")
            });
            cluster.signal(other, "CONT");
            let back =
                wait_fenced(cluster, &all, other as i32, false, Duration::from_secs(15)).await;
            violations.check(back, || {
                format!("node {other} thawed does not lead its partitions again")
            });
        }
    }
}

/// Every node has every acknowledged topic and mirror, and all show the same topics, leaders and
/// leader epochs (waiting up to 30 s for them to converge).
async fn check_converged(
    cluster: &LocalCluster,
    acknowledged: &Acknowledged,
    violations: &mut Violations,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    while Instant::now() < deadline {
        let mut views = Vec::new();
        for address in &cluster.clients {
            views.push(topics_of(address).await);
        }
        let mut mirrors_ok = true;
        for address in &cluster.clients {
            let (code, text) = mirrors_cli(address, &["--list", "--json"]).await;
            let missing: Vec<&String> = acknowledged
                .mirrors
                .iter()
                .filter(|m| !text.contains(&format!("\"{m}\"")))
                .collect();
            if code != Some(0) || !missing.is_empty() {
                mirrors_ok = false;
                last = format!("{address} lacks mirrors {missing:?}");
            }
        }
        match views.into_iter().collect::<Result<Vec<_>, _>>() {
            Ok(views) => {
                let missing: Vec<(usize, &String)> = views
                    .iter()
                    .enumerate()
                    .flat_map(|(i, v)| {
                        acknowledged
                            .topics
                            .iter()
                            .filter(|t| !v.contains_key(*t))
                            .map(move |t| (i + 1, t))
                    })
                    .collect();
                let same = views.windows(2).all(|w| w[0] == w[1]);
                if missing.is_empty() && same && mirrors_ok {
                    return;
                }
                if !missing.is_empty() {
                    last = format!("missing topics (node, topic): {missing:?}");
                } else if !same {
                    last = "the nodes' metadata differs".to_string();
                }
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    violations.check(false, || format!("metadata did not converge: {last}"));
}

/// Waits until every mirror partition is MIRRORING at the source's log end, as
/// `kmirror mirrors --describe --json` shows through node 1.
async fn wait_caught_up(cluster: &LocalCluster, source: &str, violations: &mut Violations) {
    let mut ends = Vec::new();
    for p in 0..PARTITIONS {
        ends.push(
            client::end_offset(source, TOPIC, p, false)
                .await
                .expect("source end"),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = String::new();
    while Instant::now() < deadline {
        let (code, text) = mirrors_cli(
            &cluster.clients[0],
            &["--describe", "--mirror", "qm", "--json"],
        )
        .await;
        let parsed = serde_json::from_str::<serde_json::Value>(text.trim());
        if let (Some(0), Ok(json)) = (code, parsed) {
            let mut at: Vec<(i64, String, i64)> = json
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["topic"] == TOPIC)
                .map(|p| {
                    (
                        p["partition"].as_i64().unwrap_or(-1),
                        p["state"].as_str().unwrap_or_default().to_string(),
                        p["destinationOffset"].as_i64().unwrap_or(-1),
                    )
                })
                .collect();
            at.sort();
            let wanted: Vec<(i64, String, i64)> = ends
                .iter()
                .enumerate()
                .map(|(p, e)| (p as i64, "MIRRORING".to_string(), *e))
                .collect();
            if at == wanted {
                return;
            }
            last = format!("{at:?}, waiting for {wanted:?}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    violations.check(false, || format!("the mirror did not catch up: {last}"));
}

/// Partition `p` of the mirrored topic as its leader holds it (its segments in order).
fn leader_log(cluster: &LocalCluster, view: &local_cluster::PartitionView, p: usize) -> Vec<u8> {
    concatenated_segments(
        &cluster
            .data(view.leader as usize)
            .join(format!("{TOPIC}-{p}")),
    )
}

/// Fails the topic over to the cluster (`--stop` through node 2), writes to every partition
/// through its leader, then fails back: the old source mirrors the cluster (fetching from all
/// three brokers) and, once MIRRORING at the cluster's last stable offsets, holds each
/// partition's log byte for byte.
async fn fail_over_and_back(
    cluster: &LocalCluster,
    source: &Broker,
    leaders: &[local_cluster::PartitionView],
    violations: &mut Violations,
) {
    let (code, text) = mirrors_cli(
        &cluster.clients[1],
        &["--stop", "--mirror", "qm", "--topics", TOPIC],
    )
    .await;
    assert_eq!(code, Some(0), "--stop: {text}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, text) = mirrors_cli(
            &cluster.clients[0],
            &["--describe", "--mirror", "qm", "--json"],
        )
        .await;
        if text.matches("\"STOPPED\"").count() == PARTITIONS as usize {
            break;
        }
        assert!(Instant::now() < deadline, "not STOPPED: {text}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for (p, view) in leaders.iter().enumerate() {
        let mut producer = Producer::idempotent(&cluster.clients[view.leader as usize - 1]);
        for batch in 0..5 {
            let values: Vec<String> = (0..20).map(|i| format!("after-{p}-{batch}-{i}")).collect();
            let outcome = producer
                .produce(TOPIC, p as i32, &values, Compression::Lz4)
                .await;
            violations.check(matches!(outcome, Outcome::Acked(_)), || {
                format!("a write to the failed-over partition {p}: {outcome:?}")
            });
        }
    }
    let config = source.dir.join("back.properties");
    std::fs::write(
        &config,
        format!("bootstrap.servers={}\n", cluster.bootstrap()),
    )
    .expect("written");
    let source_address = source.address();
    let config = config.to_str().expect("utf-8").to_string();
    let (code, text) = mirrors_cli(
        &source_address,
        &["--create", "--mirror", "back", "--mirror-config", &config],
    )
    .await;
    assert_eq!(code, Some(0), "--create back: {text}");
    let (code, text) = mirrors_cli(
        &source_address,
        &["--start", "--mirror", "back", "--topics", TOPIC],
    )
    .await;
    assert_eq!(code, Some(0), "failback --start: {text}");
    let mut lsos = Vec::new();
    for (p, view) in leaders.iter().enumerate() {
        let leader = &cluster.clients[view.leader as usize - 1];
        lsos.push(
            client::end_offset(leader, TOPIC, p as i32, true)
                .await
                .expect("the LSO"),
        );
    }
    let wanted: Vec<(String, i64)> = lsos.iter().map(|e| ("MIRRORING".to_string(), *e)).collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let now = super::process::described(&source_address, "back", TOPIC).await;
        if now == wanted {
            break;
        }
        if Instant::now() > deadline {
            violations.check(false, || {
                format!("failback: {now:?}, waiting for {wanted:?}")
            });
            return;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for (p, view) in leaders.iter().enumerate() {
        let front = leader_log(cluster, view, p);
        let back = source.log_bytes(TOPIC, p as i32);
        violations.check(front == back, || {
            format!(
                "after failback partition {p}: the old source holds {} bytes, node {} {} bytes",
                back.len(),
                view.leader,
                front.len()
            )
        });
    }
}

pub(crate) async fn run() {
    let (seed, cycles) = super::schedule();
    let mut rng = Rng(seed);
    let mut violations = Violations::default();

    let source_dir = tempfile::tempdir().expect("temp dir");
    // The producer's records carry timestamps of 2023: retention must not delete them (a node's
    // start runs retention at once).
    let source = Broker::start(
        "source",
        source_dir.path(),
        free_port(),
        "log.roll.ms=2000\nlog.retention.ms=-1\n",
    );
    let source_address = source.address();
    assert_eq!(
        client::create_topic(&source_address, TOPIC, PARTITIONS).await,
        Ok(0),
        "the source topic"
    );
    let cluster = LocalCluster::start(
        NODES,
        &format!(
            "broker.heartbeat.interval.ms=500\nbroker.session.timeout.ms={}\n\
             log.roll.ms=1500\nlog.retention.ms=-1\nmirror.state.topic.num.partitions=6\n",
            SESSION.as_millis()
        ),
    );
    let mirror_config = cluster.dir.join("qm.properties");
    std::fs::write(
        &mirror_config,
        format!("bootstrap.servers={source_address}\n"),
    )
    .expect("written");
    let mirror_config = mirror_config.to_str().expect("utf-8").to_string();
    let (code, text) = mirrors_cli(
        &cluster.clients[1],
        &[
            "--create",
            "--mirror",
            "qm",
            "--mirror-config",
            &mirror_config,
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = mirrors_cli(
        &cluster.clients[2],
        &["--start", "--mirror", "qm", "--topics", TOPIC],
    )
    .await;
    assert_eq!(code, Some(0), "{text}");

    let stop_source = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(source_writer(source_address.clone(), stop_source.clone()));
    let acknowledged = Arc::new(Mutex::new(Acknowledged::default()));
    let faults = [
        Fault::KillActive,
        Fault::KillOther,
        Fault::FreezeActive,
        Fault::FreezeOtherPastSession,
    ];
    for cycle in 0..cycles {
        eprintln!("cycle {cycle}");
        let stop = Arc::new(AtomicBool::new(false));
        let creating = tokio::spawn(metadata_writer(
            cluster.clients.clone(),
            mirror_config.clone(),
            cycle,
            rng.next(),
            acknowledged.clone(),
            stop.clone(),
        ));
        for _ in 0..2 {
            tokio::time::sleep(rng.millis(300, 1_500)).await;
            let fault = faults[rng.below(faults.len() as u64) as usize];
            inject(&cluster, fault, &mut rng, &mut violations).await;
        }
        stop.store(true, Ordering::SeqCst);
        let _ = creating.await;
        let acked = std::mem::take(&mut *acknowledged.lock().expect("lock"));
        eprintln!(
            "cycle {cycle}: {} topics and {} mirrors acknowledged",
            acked.topics.len(),
            acked.mirrors.len()
        );
        check_converged(&cluster, &acked, &mut violations).await;
        let mut kept = acknowledged.lock().expect("lock");
        kept.topics.extend(acked.topics);
        kept.mirrors.extend(acked.mirrors);
    }
    stop_source.store(true, Ordering::SeqCst);
    let _ = writer.await;
    wait_caught_up(&cluster, &source_address, &mut violations).await;
    let leaders = topics_of(&cluster.clients[0]).await.expect("metadata")[TOPIC].clone();
    for (p, view) in leaders.iter().enumerate() {
        let on_destination = leader_log(&cluster, view, p);
        let on_source = source.log_bytes(TOPIC, p as i32);
        violations.check(on_destination == on_source, || {
            format!(
                "partition {p} on node {}: {} bytes, the source's {} bytes differ",
                view.leader,
                on_destination.len(),
                on_source.len()
            )
        });
    }
    fail_over_and_back(&cluster, &source, &leaders, &mut violations).await;
    let kept = acknowledged.lock().expect("lock");
    println!(
        "quorum nemesis seed {seed}: {cycles} cycles, {} topics and {} mirrors acknowledged, {} violations",
        kept.topics.len(),
        kept.mirrors.len(),
        violations.0.len()
    );
    assert!(
        violations.0.is_empty(),
        "NEMESIS_SEED={seed}: {:#?}",
        violations.0
    );
}
