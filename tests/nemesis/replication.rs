//! The nemesis of replication (docs/replication.md): three `kmirror broker` processes
//! (`scripts/cluster-local.sh`, each a broker and a voter of the metadata quorum) hold a topic of
//! [`PARTITIONS`] partitions with three replicas each and `min.insync.replicas=2`, unclean
//! election off. A writer per partition produces with acks=all as an idempotent Kafka producer
//! retries: a batch keeps its producer id and sequence however often it is sent, to whichever
//! broker leads the partition by then; beside them Apache Kafka's VerifiableProducer (its
//! idempotent acks=all producer) writes through every fault, held (SIGSTOP) while each cycle's
//! checks compare the replicas ([`super::verifiable_producer`]). Each cycle a seeded schedule injects one fault: SIGKILL
//! (then restart) or SIGSTOP past the session timeout (then SIGCONT) of a partition's leader, of
//! one of its followers or of the active controller, or the data directory of a partition's
//! follower or leader wiped while it is down (its log directory, not the metadata quorum's
//! files: a lost data disk), so it comes back with a new directory id, loses what it led (a
//! leader restarted within its session still held leadership) and fetches every replica again.
//! A consumer group's coordinator is looked up first, so `__consumer_offsets` exists, its 50
//! partitions replicated too (each must be in sync again after a fault, and a wiped broker is
//! accepted back since another replica of each is in sync). Once the fault ends it checks:
//! - every batch is acknowledged within [`BOUND`] (the partition is available again), and no
//!   produce is refused with an error an idempotent producer cannot retry;
//! - within [`BOUND`] every partition has a leader, all three replicas in its ISR on every node,
//!   the three replicas' segment files byte for byte equal, and no node reports under-replicated
//!   or offline partitions;
//! - every record ever acknowledged reads back from the leader at its offset with its value,
//!   no record is in the log twice, and each writer's records are in the order it wrote them;
//! - a replica outside the ISR never leads: an observer polls every node's Metadata every
//!   [`POLL`] and reports a broker that leads at a new leader epoch when that node last showed
//!   it outside the ISR (a node that did not answer a poll is observed afresh);
//! - no node's log says `panicked`.
//!
//! `NEMESIS_SEED` replays a schedule, `NEMESIS_CYCLES` (3) sets the length; the last line
//! printed is a summary for RELIABILITY.md.

use super::Rng;
use super::process::concatenated_segments;
use super::verifiable_producer::{KafkaProducer, Report};
use kafka_protocol::messages::FindCoordinatorRequest;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use kmirror_protocol::client::ClientConfig;
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::errors::ErrorCode;
use kmirror_testkit::client::{self, Acked, Outcome, RetryingProducer};
use kmirror_testkit::local_cluster::{LocalCluster, PartitionView, scrape_text, topics_of};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NODES: usize = 3;
const TOPIC: &str = "replicated";
const PARTITIONS: i32 = 3;
const SESSION: Duration = Duration::from_secs(4);
/// How long a partition may take to be writable, in sync and converged once the fault ends.
const BOUND: Duration = Duration::from_secs(60);
/// How often the observer reads every node's Metadata.
const POLL: Duration = Duration::from_millis(100);
const BATCH: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillLeader,
    FreezeLeader,
    KillFollower,
    FreezeFollower,
    KillController,
    FreezeController,
    WipeFollower,
    WipeLeader,
}

const FAULTS: [Fault; 8] = [
    Fault::KillLeader,
    Fault::FreezeLeader,
    Fault::KillFollower,
    Fault::FreezeFollower,
    Fault::KillController,
    Fault::FreezeController,
    Fault::WipeFollower,
    Fault::WipeLeader,
];

/// What the writers and the observer found, shared with the cycle.
#[derive(Default)]
struct Shared {
    violations: Vec<String>,
    /// Per partition, every acknowledged record in the order it was written.
    acked: BTreeMap<i32, Vec<Acked>>,
    /// Retriable refusals the writers met, by error name.
    refusals: BTreeMap<String, u64>,
    /// Metadata views the observer compared.
    observations: u64,
}

impl Shared {
    fn violation(&mut self, what: String) {
        eprintln!("VIOLATION {what}");
        self.violations.push(what);
    }
}

type SharedRef = Arc<Mutex<Shared>>;

fn lock(shared: &SharedRef) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// Errors an idempotent producer retries with the same batch.
fn retriable(code: i16) -> bool {
    [
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode::LEADER_NOT_AVAILABLE,
        ErrorCode::NOT_LEADER_OR_FOLLOWER,
        ErrorCode::REQUEST_TIMED_OUT,
        ErrorCode::NOT_ENOUGH_REPLICAS,
        ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode::FENCED_LEADER_EPOCH,
        ErrorCode::UNKNOWN_LEADER_EPOCH,
    ]
    .iter()
    .any(|c| c.0 == code)
}

/// The client address of the broker leading `partition`, as the first node that answers shows it.
async fn leader_of(clients: &[String], partition: i32) -> Option<String> {
    for address in clients {
        if let Ok(topics) = topics_of(address).await
            && let Some(view) = topics.get(TOPIC).and_then(|t| t.get(partition as usize))
            && view.leader > 0
        {
            return clients.get(view.leader as usize - 1).cloned();
        }
    }
    None
}

/// Writes batches to `partition` until `stop`, each sent again until a broker acknowledges it;
/// a refusal no idempotent producer retries is a violation and starts a new producer.
async fn writer(
    clients: Vec<String>,
    partition: i32,
    cycle: u32,
    stop: Arc<AtomicBool>,
    shared: SharedRef,
) {
    let mut producer: Option<RetryingProducer> = None;
    let mut leader: Option<String> = None;
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        if producer.is_none() {
            for address in &clients {
                if let Ok(p) = RetryingProducer::init(address).await {
                    producer = Some(p);
                    break;
                }
            }
        }
        let Some(p) = producer.as_mut() else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let values: Vec<String> = (0..BATCH)
            .map(|i| format!("c{cycle}-p{partition}-b{n}-{i}"))
            .collect();
        let compression = if n.is_multiple_of(2) {
            Compression::Lz4
        } else {
            Compression::None
        };
        let sent = p.batch(TOPIC, partition, &values, compression);
        n += 1;
        loop {
            if leader.is_none() {
                leader = leader_of(&clients, partition).await;
            }
            let Some(address) = leader.clone() else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            match client::resend(&address, &sent).await {
                Outcome::Acked(a) => {
                    let base = a[0].offset;
                    lock(&shared).acked.entry(partition).or_default().extend(
                        values.iter().enumerate().map(|(i, v)| Acked {
                            partition,
                            offset: base + i as i64,
                            value: v.clone(),
                        }),
                    );
                    break;
                }
                Outcome::Refused(code) if retriable(code) => {
                    *lock(&shared)
                        .refusals
                        .entry(ErrorCode(code).name().to_string())
                        .or_default() += 1;
                    leader = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Outcome::Refused(code) => {
                    lock(&shared).violation(format!(
                        "{TOPIC}-{partition}: a batch ({}) refused with {}, which no idempotent \
                         producer retries",
                        values[0],
                        ErrorCode(code).name()
                    ));
                    producer = None;
                    break;
                }
                Outcome::Unknown(_) => {
                    leader = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls every node's Metadata until `stop` and reports a broker leading at a new leader epoch
/// when the same node's previous answer showed it outside the ISR.
async fn observer(clients: Vec<String>, stop: Arc<AtomicBool>, shared: SharedRef) {
    // Per (node, partition): the last view and the brokers it showed outside the ISR.
    let mut last: BTreeMap<(usize, i32), (PartitionView, BTreeSet<i32>)> = BTreeMap::new();
    while !stop.load(Ordering::SeqCst) {
        for (n, address) in clients.iter().enumerate() {
            let answer = tokio::time::timeout(POLL * 3, topics_of(address)).await;
            let Some(views) = answer
                .ok()
                .and_then(Result::ok)
                .and_then(|mut t| t.remove(TOPIC))
            else {
                // A node that does not answer may skip changes: it is observed afresh.
                last.retain(|(node, _), _| *node != n);
                continue;
            };
            for (p, view) in views.into_iter().enumerate() {
                let key = (n, p as i32);
                let outside: BTreeSet<i32> = (1..=NODES as i32)
                    .filter(|r| !view.isr.contains(r))
                    .collect();
                if let Some((before, was_outside)) = last.get(&key)
                    && view.leader > 0
                    && view.leader_epoch > before.leader_epoch
                    && was_outside.contains(&view.leader)
                {
                    lock(&shared).violation(format!(
                        "node {} showed broker {} leading {TOPIC}-{p} at epoch {} right after \
                         showing it outside the ISR {:?} at epoch {}: a replica outside the ISR \
                         was elected with unclean election off",
                        n + 1,
                        view.leader,
                        view.leader_epoch,
                        before.isr,
                        before.leader_epoch
                    ));
                }
                lock(&shared).observations += 1;
                last.insert(key, (view, outside));
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

struct World {
    rng: Rng,
    seed: u64,
    cycle: u32,
    cluster: LocalCluster,
    shared: SharedRef,
    faults: BTreeMap<Fault, u32>,
    records_checked: u64,
    /// Bytes of each node's log already searched for panics.
    logs_seen: [usize; NODES],
    /// The longest a cycle waited for convergence once the fault ended.
    slowest_convergence: Duration,
    /// Kafka's VerifiableProducer, writing through every cycle.
    kafka: KafkaProducer,
    /// Its figures at the last check: records acknowledged, send errors seen.
    kafka_checked: (u64, usize),
    /// Where its output goes.
    _kafka_dir: tempfile::TempDir,
}

impl World {
    fn violation(&self, what: String) {
        let what = format!("seed={} cycle={}: {what}", self.seed, self.cycle);
        lock(&self.shared).violation(what);
    }

    fn note(&self, what: &str) {
        eprintln!("[replication nemesis cycle {}] {what}", self.cycle);
    }

    /// Each partition's view on the first node that answers.
    async fn views(&self) -> Option<Vec<PartitionView>> {
        for address in &self.cluster.clients {
            if let Ok(mut topics) = topics_of(address).await
                && let Some(views) = topics.remove(TOPIC)
            {
                return Some(views);
            }
        }
        None
    }

    /// One replica of `partition`'s log on node `node`, its segments concatenated.
    fn replica_bytes(&self, node: usize, partition: i32) -> Vec<u8> {
        concatenated_segments(&self.cluster.data(node).join(format!("{TOPIC}-{partition}")))
    }

    /// Whether every node shows every partition led with all replicas in sync, every replica's
    /// bytes are equal, and no node counts under-replicated or offline partitions; else why not.
    async fn converged(&self) -> Result<(), String> {
        for (n, address) in self.cluster.clients.iter().enumerate() {
            let topics = topics_of(address)
                .await
                .map_err(|e| format!("node {}: {e}", n + 1))?;
            let views = topics
                .get(TOPIC)
                .ok_or_else(|| format!("node {} lacks {TOPIC}", n + 1))?;
            for (p, v) in views.iter().enumerate() {
                if v.leader <= 0 || v.isr.len() != NODES {
                    return Err(format!("node {} shows {TOPIC}-{p} as {v:?}", n + 1));
                }
            }
        }
        for p in 0..PARTITIONS {
            let sizes: Vec<Vec<u8>> = (1..=NODES).map(|n| self.replica_bytes(n, p)).collect();
            if sizes.iter().any(|b| *b != sizes[0]) {
                let lengths: Vec<usize> = sizes.iter().map(Vec::len).collect();
                return Err(format!(
                    "{TOPIC}-{p}: replicas differ (segment bytes per node {lengths:?})"
                ));
            }
        }
        for (n, metrics) in self.cluster.metrics.iter().enumerate() {
            let text = scrape_text(metrics);
            for name in [
                "kmirror_replication_under_replicated_partitions",
                "kmirror_replication_under_min_isr_partitions",
                "kmirror_controller_offline_partitions",
            ] {
                let value = text
                    .lines()
                    .find_map(|l| l.strip_prefix(name).map(str::trim))
                    .and_then(|v| v.parse::<f64>().ok());
                if value.is_some_and(|v| v != 0.0) {
                    return Err(format!("node {} reports {name} {value:?}", n + 1));
                }
            }
        }
        Ok(())
    }

    /// Every record of `partition`, read from its leader (asked again while a view is stale
    /// or a leader moves, for at most [`BOUND`]).
    async fn read_back(&self, partition: i32) -> Result<BTreeMap<i64, String>, String> {
        let deadline = Instant::now() + BOUND;
        loop {
            let read = match self.views().await {
                Some(views) if views[partition as usize].leader > 0 => {
                    let leader = views[partition as usize].leader as usize;
                    client::read_back(&self.cluster.clients[leader - 1], TOPIC, partition).await
                }
                _ => Err("no leader".to_string()),
            };
            match read {
                Ok(log) => return Ok(log),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
            }
        }
    }

    /// Reads every partition back from its leader and checks every acknowledged record.
    async fn check_records(&mut self) {
        let acked = lock(&self.shared).acked.clone();
        let kafka = self.kafka.report();
        self.check_kafka_producer(&kafka);
        for p in 0..PARTITIONS {
            let log = match self.read_back(p).await {
                Ok(log) => log,
                Err(e) => {
                    self.violation(format!(
                        "{TOPIC}-{p}: cannot be read back within {BOUND:?}: {e}"
                    ));
                    continue;
                }
            };
            let mut seen: BTreeMap<&str, i64> = BTreeMap::new();
            for (offset, value) in &log {
                if let Some(first) = seen.insert(value, *offset) {
                    self.violation(format!(
                        "{TOPIC}-{p}: {value} is in the log twice, at {first} and {offset}"
                    ));
                }
            }
            let mut wrong = Vec::new();
            let mut previous = -1;
            for a in acked.get(&p).into_iter().flatten() {
                self.records_checked += 1;
                if log.get(&a.offset) != Some(&a.value) {
                    wrong.push(format!(
                        "{}@{} reads {:?}",
                        a.value,
                        a.offset,
                        log.get(&a.offset)
                    ));
                }
                if a.offset <= previous {
                    wrong.push(format!(
                        "{}@{} acknowledged after a later write at {previous}",
                        a.value, a.offset
                    ));
                }
                previous = a.offset;
            }
            // Kafka's producer's acknowledgements, in the order it got them.
            let mut previous = -1;
            for (offset, value) in kafka.acked.get(&p).into_iter().flatten() {
                self.records_checked += 1;
                if log.get(offset) != Some(value) {
                    wrong.push(format!(
                        "VerifiableProducer's {value}@{offset} reads {:?}",
                        log.get(offset)
                    ));
                }
                if *offset <= previous {
                    wrong.push(format!(
                        "VerifiableProducer's {value}@{offset} acknowledged after a later write at {previous}"
                    ));
                }
                previous = *offset;
            }
            if !wrong.is_empty() {
                let count = wrong.len();
                wrong.truncate(5);
                self.violation(format!(
                    "{TOPIC}-{p}: {count} acknowledged records are gone, moved or out of order: {}",
                    wrong.join("; ")
                ));
            }
        }
    }

    /// Kafka's producer still runs, and every send it made was acknowledged (its own retries
    /// cover leader moves; an error reaching it is one it does not retry, or a partition
    /// unavailable past its 120 s delivery timeout).
    fn check_kafka_producer(&mut self, report: &Report) {
        if self.kafka.died() {
            self.violation("Kafka's VerifiableProducer exited".into());
            self.kafka.stop(Duration::ZERO);
        }
        for error in report.errors.iter().skip(self.kafka_checked.1) {
            self.violation(format!("a VerifiableProducer send failed: {error}"));
        }
        self.kafka_checked = (
            report.acked.values().map(|a| a.len() as u64).sum(),
            report.errors.len(),
        );
    }

    /// Searches what every node's log gained since the last search for panics.
    fn check_logs(&mut self) {
        for n in 0..NODES {
            let path = self.cluster.dir.join(format!("node-{}/broker.log", n + 1));
            let log = std::fs::read_to_string(path).unwrap_or_default();
            let fresh = log.get(self.logs_seen[n]..).unwrap_or_default();
            let panics = fresh.lines().filter(|l| l.contains("panicked")).count();
            self.logs_seen[n] = log.len();
            if panics > 0 {
                self.violation(format!(
                    "node {}'s log has {panics} `panicked` lines",
                    n + 1
                ));
            }
        }
    }

    /// The node this fault strikes, from `partition`'s view.
    fn target(&mut self, fault: Fault, view: &PartitionView) -> Option<usize> {
        let followers: Vec<i32> = (1..=NODES as i32).filter(|r| *r != view.leader).collect();
        let node = match fault {
            Fault::KillLeader | Fault::FreezeLeader | Fault::WipeLeader => view.leader,
            Fault::KillFollower | Fault::FreezeFollower | Fault::WipeFollower => {
                followers[self.rng.below(followers.len() as u64) as usize]
            }
            Fault::KillController | Fault::FreezeController => {
                self.cluster
                    .active_controller(&(1..=NODES).collect::<Vec<_>>())? as i32
            }
        };
        (node > 0).then_some(node as usize)
    }

    /// Injects `fault`, holds it a moment and ends it.
    async fn inject(&mut self, fault: Fault) {
        let partition = self.rng.below(PARTITIONS as u64) as i32;
        let hold = self.rng.millis(300, 2_500);
        let Some(views) = self.views().await else {
            self.violation("no node answers Metadata before the fault".into());
            return;
        };
        let Some(node) = self.target(fault, &views[partition as usize]) else {
            self.note(&format!("{fault:?}: no target"));
            return;
        };
        *self.faults.entry(fault).or_default() += 1;
        self.note(&format!(
            "{fault:?} node {node} ({TOPIC}-{partition} {:?}) for {hold:?}",
            views[partition as usize]
        ));
        match fault {
            Fault::KillLeader | Fault::KillFollower | Fault::KillController => {
                self.cluster.kill(node);
                tokio::time::sleep(hold).await;
                self.cluster.restart(node);
            }
            Fault::FreezeLeader | Fault::FreezeFollower | Fault::FreezeController => {
                self.cluster.signal(node, "STOP");
                // Past the session timeout: the others fence it.
                tokio::time::sleep(SESSION + hold).await;
                self.cluster.signal(node, "CONT");
            }
            Fault::WipeFollower | Fault::WipeLeader => {
                self.cluster.kill(node);
                self.cluster.lose_data_disk(node);
                tokio::time::sleep(hold).await;
                self.cluster.restart(node);
            }
        }
    }
}

async fn cycle(world: &mut World) {
    let fault = FAULTS[world.rng.below(FAULTS.len() as u64) as usize];
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..PARTITIONS)
        .map(|p| {
            tokio::spawn(writer(
                world.cluster.clients.clone(),
                p,
                world.cycle,
                stop.clone(),
                world.shared.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(world.rng.millis(300, 1_500)).await;
    world.inject(fault).await;
    tokio::time::sleep(world.rng.millis(300, 1_500)).await;
    stop.store(true, Ordering::SeqCst);
    // Kafka's producer too holds still while the replicas are compared.
    world.kafka.pause();
    let ended = Instant::now();
    for (p, w) in writers.into_iter().enumerate() {
        let left = BOUND.saturating_sub(ended.elapsed());
        if tokio::time::timeout(left, w).await.is_err() {
            world.violation(format!(
                "{TOPIC}-{p}: a batch was not acknowledged within {BOUND:?} of the fault's end"
            ));
        }
    }
    let mut why = String::new();
    let converged = loop {
        match world.converged().await {
            Ok(()) => break true,
            Err(e) => why = e,
        }
        if ended.elapsed() > BOUND {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    if converged {
        world.slowest_convergence = world.slowest_convergence.max(ended.elapsed());
    } else {
        world.violation(format!(
            "not converged within {BOUND:?} of the fault's end: {why}"
        ));
    }
    world.check_records().await;
    world.check_logs();
    world.kafka.resume();
}

pub(crate) async fn run() {
    let (seed, cycles) = super::schedule();
    let started = Instant::now();
    let cluster = LocalCluster::start(
        NODES,
        &format!(
            "broker.heartbeat.interval.ms=500\nbroker.session.timeout.ms={}\n\
             min.insync.replicas=2\nreplica.lag.time.max.ms=5000\nlog.roll.ms=3000\n",
            SESSION.as_millis()
        ),
    );
    assert_eq!(
        client::create_replicated_topic(&cluster.clients[0], TOPIC, PARTITIONS, 3).await,
        Ok(0),
        "the replicated topic"
    );
    // FindCoordinator creates __consumer_offsets (a coordinator partition on every broker).
    let group = FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_key(StrBytes::from_static_str("nemesis-readers"));
    let connection = Connection::connect(
        &cluster.clients[0],
        &ClientConfig::plaintext(&cluster.clients[0]),
        None,
    )
    .await
    .expect("connects");
    let (_, found) = connection
        .send("FindCoordinator", &group, 3)
        .await
        .expect("FindCoordinator answered");
    assert_eq!(found.error_code, 0, "a group coordinator");
    let kafka_dir = tempfile::tempdir().expect("a directory for the producer's output");
    let kafka = KafkaProducer::start(&cluster.bootstrap(), TOPIC, 50, kafka_dir.path());
    let shared: SharedRef = Arc::default();
    let stop_observing = Arc::new(AtomicBool::new(false));
    let observing = tokio::spawn(observer(
        cluster.clients.clone(),
        stop_observing.clone(),
        shared.clone(),
    ));
    let mut world = World {
        rng: Rng(seed),
        seed,
        cycle: 0,
        cluster,
        shared: shared.clone(),
        faults: BTreeMap::new(),
        records_checked: 0,
        logs_seen: [0; NODES],
        slowest_convergence: Duration::ZERO,
        kafka,
        kafka_checked: (0, 0),
        _kafka_dir: kafka_dir,
    };
    for c in 1..=cycles {
        world.cycle = c;
        cycle(&mut world).await;
    }
    // Kafka's producer closes, finishing what it has in flight; then everything it saw
    // acknowledged is checked once more.
    world.kafka.stop(BOUND);
    world.check_records().await;
    stop_observing.store(true, Ordering::SeqCst);
    let _ = observing.await;
    let shared = lock(&shared);
    let faults: Vec<String> = world
        .faults
        .iter()
        .map(|(f, n)| format!("{f:?}={n}"))
        .collect();
    let refusals: Vec<String> = shared
        .refusals
        .iter()
        .map(|(e, n)| format!("{e}={n}"))
        .collect();
    println!(
        "REPLICATION_NEMESIS_SUMMARY seed={seed} cycles={cycles} elapsed={}s faults[{}] \
         acked_records={} verifiable_producer_acked={} records_checked={} retried[{}] \
         observations={} slowest_convergence={}ms violations={}",
        started.elapsed().as_secs(),
        faults.join(" "),
        shared.acked.values().map(Vec::len).sum::<usize>(),
        world.kafka_checked.0,
        world.records_checked,
        refusals.join(" "),
        shared.observations,
        world.slowest_convergence.as_millis(),
        shared.violations.len()
    );
    assert!(
        shared.violations.is_empty(),
        "NEMESIS_SEED={seed}: {:#?}",
        shared.violations
    );
}
