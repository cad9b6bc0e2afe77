//! The failover nemesis with a destination cluster: three `kmirror broker` processes
//! (`scripts/cluster-local.sh`) mirror a source through a fault proxy (the source advertises
//! it), the mirror partitions and the `__mirror_state` shards spread over the three. The source
//! is a `kmirror broker`, or the Apache Kafka `scripts/test.sh` runs (its REMOTE listener
//! advertises the proxy; shared with other tests, it is never crashed). Each cycle mirrors a fresh topic of six partitions while the source is written,
//! injects one fault at one step of the mirror's life, fails the topic over with `--stop`
//! through a random node while a producer writes to every partition's leader, ends the faults
//! and checks:
//! - every partition is STOPPED within [`STATE_BOUND`] once the faults end (and MIRRORING,
//!   caught up with the source, before the stop);
//! - each partition's log on its leader is the source's byte for byte up to one
//!   MIRROR_PID_RESET barrier, which sits at the source's last stable offset (nothing committed
//!   is missing, nothing open is kept);
//! - every write the destination acknowledged lies after that barrier (no produce succeeded
//!   before the failover's data was final) and reads back at its offset with its value, after
//!   every later fault;
//! - the failed-over topic takes writes on every broker;
//! - after a failback (a `kmirror broker` source only: Kafka cannot mirror) the old source is
//!   MIRRORING at each partition's last stable offset on the destination within the bound, its
//!   log the leader's byte for byte; failed over again, it is the destination's up to a second
//!   barrier and takes writes after it.
//!
//! The faults: SIGKILL (then restart) or SIGSTOP (then SIGCONT, past the brokers' session
//! timeout) of the broker leading a mirror partition or of the broker leading its
//! `__mirror_state` shard, SIGKILL of the active controller, the proxy dropping or stalling
//! every connection between the clusters, `--stop` racing `--pause` through two other brokers,
//! and a topic config change racing the stop through another broker, SIGKILL of the old source
//! while it fails back. Each lands while the topic is PREPARING (right after `--start`),
//! MIRRORING, STOPPING (right after `--stop`) or in failback (right after the old source's
//! `--start`; the failback's fetches do not cross the proxy).
//!
//! `NEMESIS_SEED` replays a schedule, `NEMESIS_CYCLES` (3) sets the length; the last line
//! printed is a summary for RELIABILITY.md.

use super::process::{Broker, free_port, mirrors_cli};
use super::proxy::{FaultProxy, Mode};
use super::{Rng, Source, SourceKind, compare_segments, schedule};
use kafka_protocol::messages::IncrementalAlterConfigsRequest;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::client::{ClientConfig, SourceClient};
use kmirror_protocol::kafka_tools::kafka_env;
use kmirror_protocol::sharding::mirror_partition_shard;
use kmirror_testkit::client::{self, Acked, Outcome, Producer};
use kmirror_testkit::local_cluster::{LocalCluster, topics_of};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NODES: usize = 3;
const MIRROR: &str = "cm";
/// The old source's mirror of the destination cluster, for failback.
const BACK: &str = "cm-back";
const PARTITIONS: i32 = 6;
const SHARDS: i32 = 6;
const SESSION: Duration = Duration::from_secs(4);
/// How long a partition may take to reach its desired state once the faults end.
const STATE_BOUND: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillPartitionLeader,
    FreezePartitionLeader,
    KillShardOwner,
    FreezeShardOwner,
    KillActiveController,
    ProxyDrop,
    ProxyStall,
    StopRacesPause,
    ConfigRacesStop,
    KillOldSource,
}

const FAULTS: [Fault; 10] = [
    Fault::KillPartitionLeader,
    Fault::FreezePartitionLeader,
    Fault::KillShardOwner,
    Fault::FreezeShardOwner,
    Fault::KillActiveController,
    Fault::ProxyDrop,
    Fault::ProxyStall,
    Fault::StopRacesPause,
    Fault::ConfigRacesStop,
    Fault::KillOldSource,
];

/// Where in the topic's life the fault lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Preparing,
    Mirroring,
    Stopping,
    Failback,
}

/// Failback last: a Kafka source has no failback.
const STEPS: [Step; 4] = [
    Step::Preparing,
    Step::Mirroring,
    Step::Stopping,
    Step::Failback,
];

struct World {
    rng: Rng,
    seed: u64,
    cycle: u32,
    cluster: LocalCluster,
    source: Source,
    proxy: FaultProxy,
    violations: Vec<String>,
    /// Writes the destination acknowledged, by topic.
    acked: BTreeMap<String, Vec<Acked>>,
    faults: BTreeMap<(Fault, Step), u32>,
    records_checked: u64,
    /// Whether the source has mirror [`BACK`] yet.
    back_created: bool,
    failbacks: u32,
    /// Failbacks followed by a second failover, to the old source.
    failovers_back: u32,
}

impl World {
    fn violation(&mut self, what: String) {
        let what = format!("seed={} cycle={}: {what}", self.seed, self.cycle);
        eprintln!("VIOLATION {what}");
        self.violations.push(what);
    }

    fn note(&self, what: &str) {
        eprintln!("[cluster nemesis cycle {}] {what}", self.cycle);
    }

    fn node(&mut self) -> usize {
        1 + self.rng.below(NODES as u64) as usize
    }

    fn client(&self, node: usize) -> String {
        self.cluster.clients[node - 1].clone()
    }

    async fn cli(&self, node: usize, args: &[&str]) -> (Option<i32>, String) {
        mirrors_cli(&self.client(node), args).await
    }

    /// Each partition's leader (1-based node), as node 1's Metadata shows it (retried while a
    /// node restarts).
    async fn leaders(&self, topic: &str) -> Vec<i32> {
        for _ in 0..100 {
            for address in &self.cluster.clients {
                if let Ok(topics) = topics_of(address).await
                    && let Some(views) = topics.get(topic)
                    && views.iter().all(|v| v.leader > 0)
                {
                    return views.iter().map(|v| v.leader).collect();
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("no leaders for {topic}");
    }

    /// Waits until every partition of `topic` is in `state` (at `ends`, when given).
    async fn wait_state(
        &self,
        topic: &str,
        state: &str,
        ends: Option<&[i64]>,
    ) -> Result<(), Vec<(i32, String, i64)>> {
        wait_described(&self.cluster.clients, MIRROR, topic, state, ends).await
    }

    /// Each partition's last stable offset on its leader (retried while a node restarts).
    async fn lsos(&self, topic: &str) -> Vec<i64> {
        let leaders = self.leaders(topic).await;
        let mut lsos = Vec::new();
        for p in 0..PARTITIONS {
            let leader = self.client(leaders[p as usize] as usize);
            let mut lso = -1;
            for _ in 0..100 {
                if let Ok(at) = client::end_offset(&leader, topic, p, true).await {
                    lso = at;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            lsos.push(lso);
        }
        lsos
    }

    /// The node leading the `__mirror_state` shard of `topic`'s partition `partition`.
    async fn shard_owner(&self, topic: &str, partition: i32) -> Option<i32> {
        let source = SourceClient::connect(ClientConfig::plaintext(&self.source.address()))
            .await
            .ok()?;
        let id = source
            .metadata(Some(&[topic]))
            .await
            .ok()?
            .topics
            .get(topic)?
            .topic_id;
        let shard = mirror_partition_shard(MIRROR, &id, partition, SHARDS);
        let topics = topics_of(&self.client(1)).await.ok()?;
        topics
            .get("__mirror_state")?
            .get(shard as usize)
            .map(|v| v.leader)
    }
}

/// The partitions of `topic` in `mirror` as `--describe --json` shows them through the first of
/// `addresses` that answers: (partition, state, destination offset).
async fn described(addresses: &[String], mirror: &str, topic: &str) -> Vec<(i32, String, i64)> {
    for address in addresses {
        let (code, text) =
            mirrors_cli(address, &["--describe", "--mirror", mirror, "--json"]).await;
        let Ok(json) = serde_json::from_str::<serde_json::Value>(text.trim()) else {
            continue;
        };
        if code != Some(0) {
            continue;
        }
        let mut at: Vec<(i32, String, i64)> = json
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["topic"] == topic)
            .map(|p| {
                let state = match p["errorMessage"].as_str() {
                    Some(e) if p["state"] == "FAILED" => format!("FAILED: {e}"),
                    _ => p["state"].as_str().unwrap_or_default().to_string(),
                };
                (
                    p["partition"].as_i64().unwrap_or(-1) as i32,
                    state,
                    p["destinationOffset"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        at.sort();
        return at;
    }
    Vec::new()
}

/// Waits until every partition of `topic` in `mirror` is in `state` (at `ends`, when given).
async fn wait_described(
    addresses: &[String],
    mirror: &str,
    topic: &str,
    state: &str,
    ends: Option<&[i64]>,
) -> Result<(), Vec<(i32, String, i64)>> {
    let deadline = Instant::now() + STATE_BOUND;
    loop {
        let now = described(addresses, mirror, topic).await;
        let done = now.len() == PARTITIONS as usize
            && now.iter().all(|(p, s, end)| {
                s == state && ends.is_none_or(|e| e.get(*p as usize) == Some(end))
            });
        if done {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(now);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Writes to every partition of `topic` on the source until `stop`.
async fn source_writer(address: String, topic: String, stop: Arc<AtomicBool>) {
    let mut producer = Producer::idempotent(&address);
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let partition = (n % PARTITIONS as u64) as i32;
        let values: Vec<String> = (0..10).map(|i| format!("s{n}-{i}")).collect();
        if let Outcome::Unknown(_) = producer
            .produce(&topic, partition, &values, Compression::Lz4)
            .await
        {
            producer.reset();
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
}

/// Writes to every partition of `topic` on its leader until `stop`, keeping what was
/// acknowledged: before the stop every write must be refused.
async fn destination_writer(
    leaders: Vec<String>,
    topic: String,
    cycle: u32,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<Acked>>>,
) {
    let mut producers: Vec<Producer> = leaders.iter().map(|a| Producer::idempotent(a)).collect();
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        let partition = n % PARTITIONS;
        let value = vec![format!("c{cycle}-dst-{n}")];
        let producer = &mut producers[partition as usize];
        match producer
            .produce(&topic, partition, &value, Compression::None)
            .await
        {
            Outcome::Acked(a) => acked.lock().expect("lock").extend(a),
            Outcome::Unknown(_) => producer.reset(),
            Outcome::Refused(_) => {}
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// IncrementalAlterConfigs of `topic` through `address`: a config the sync does not copy
/// (`min.insync.replicas` is on the exclusion list), so it is allowed on a mirror topic.
async fn alter_topic_config(address: &str, topic: &str, value: &str) -> Result<i16, String> {
    let connection = Connection::connect(address, &ClientConfig::plaintext(address), None)
        .await
        .map_err(|e| e.to_string())?;
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(StrBytes::from_static_str("min.insync.replicas"))
                    .with_config_operation(0)
                    .with_value(Some(StrBytes::from_string(value.to_string()))),
            ]),
    ]);
    let (_, answer) = connection
        .send("IncrementalAlterConfigs", &request, 1)
        .await
        .map_err(|e| e.to_string())?;
    Ok(answer.responses.first().map_or(-1, |r| r.error_code))
}

/// Injects `fault` on a random partition of `topic`, holds it a moment and ends it.
async fn inject(world: &mut World, fault: Fault, topic: &str) {
    let hold = world.rng.millis(1_000, 3_000);
    let partition = world.rng.below(PARTITIONS as u64) as i32;
    world.note(&format!(
        "fault {fault:?} ({topic}-{partition}) for {hold:?}"
    ));
    let leaders = world.leaders(topic).await;
    match fault {
        Fault::KillPartitionLeader | Fault::KillShardOwner | Fault::KillActiveController => {
            let node = match fault {
                Fault::KillPartitionLeader => Some(leaders[partition as usize]),
                Fault::KillShardOwner => world.shard_owner(topic, partition).await,
                _ => world
                    .cluster
                    .active_controller(&(1..=NODES).collect::<Vec<_>>())
                    .map(|n| n as i32),
            };
            if let Some(node) = node {
                world.cluster.kill(node as usize);
                tokio::time::sleep(hold).await;
                world.cluster.restart(node as usize);
            }
        }
        Fault::FreezePartitionLeader | Fault::FreezeShardOwner => {
            let node = match fault {
                Fault::FreezePartitionLeader => Some(leaders[partition as usize]),
                _ => world.shard_owner(topic, partition).await,
            };
            if let Some(node) = node {
                world.cluster.signal(node as usize, "STOP");
                // Past the session timeout: the others fence it.
                tokio::time::sleep(SESSION + hold).await;
                world.cluster.signal(node as usize, "CONT");
            }
        }
        Fault::ProxyDrop | Fault::ProxyStall => {
            world.proxy.set(if fault == Fault::ProxyDrop {
                Mode::Drop
            } else {
                Mode::Stall
            });
            tokio::time::sleep(hold).await;
            world.proxy.set(Mode::Pass);
        }
        Fault::KillOldSource => {
            if let Source::Kmirror(old) = &mut world.source {
                old.kill();
                tokio::time::sleep(hold).await;
                old.restart();
            }
        }
        // Injected with the stop.
        Fault::StopRacesPause | Fault::ConfigRacesStop => {}
    }
}

/// The stop of `topic` through a random node, raced by `fault` when it is one of the two that
/// race the stop (a pause that wins leaves the topic PAUSED: the stop is asked again).
async fn stop(world: &mut World, fault: Option<Fault>, topic: &str) {
    let (a, b) = (world.node(), world.node());
    let stop_args = ["--stop", "--mirror", MIRROR, "--topics", topic];
    match fault {
        Some(Fault::StopRacesPause) => {
            let pause_args = ["--pause", "--mirror", MIRROR, "--topics", topic];
            let (stopped, paused) =
                tokio::join!(world.cli(a, &stop_args), world.cli(b, &pause_args));
            world.note(&format!(
                "--stop via {a}: {:?}; racing --pause via {b}: {:?} {}",
                stopped.0,
                paused.0,
                paused.1.trim()
            ));
            if stopped.0 != Some(0) {
                // The pause won the race: the stop is asked again (a PAUSED topic stops).
                let again = world.cli(a, &stop_args).await;
                world.note(&format!("--stop again: {:?} {}", again.0, again.1.trim()));
            }
        }
        Some(Fault::ConfigRacesStop) => {
            let address = world.client(b);
            let value = format!("{}", 1 + world.rng.below(2));
            let (stopped, altered) = tokio::join!(
                world.cli(a, &stop_args),
                alter_topic_config(&address, topic, &value)
            );
            world.note(&format!(
                "--stop via {a}: {:?}; racing config change via {b}: {altered:?}",
                stopped.0
            ));
        }
        _ => {
            let (code, text) = world.cli(a, &stop_args).await;
            world.note(&format!("--stop via {a}: {code:?} {}", text.trim()));
        }
    }
}

/// Checks every write the destination acknowledged reads back from its partition's leader.
async fn check_acks(world: &mut World) {
    let acked = world.acked.clone();
    for (topic, acks) in &acked {
        let leaders = world.leaders(topic).await;
        let mut read = BTreeMap::new();
        for p in 0..PARTITIONS {
            let leader = world.client(leaders[p as usize] as usize);
            match client::read_back(&leader, topic, p).await {
                Ok(values) => {
                    read.insert(p, values);
                }
                Err(e) => world.violation(format!("{topic}-{p}: cannot be read back: {e}")),
            }
        }
        let mut missing = Vec::new();
        for a in acks {
            let Some(values) = read.get(&a.partition) else {
                continue;
            };
            world.records_checked += 1;
            if values.get(&a.offset) != Some(&a.value) {
                missing.push(format!("{}@{} {}", a.partition, a.offset, a.value));
            }
        }
        if !missing.is_empty() {
            let count = missing.len();
            missing.truncate(5);
            world.violation(format!(
                "{topic}: {count} acknowledged records are gone or changed: {}",
                missing.join("; ")
            ));
        }
    }
}

async fn cycle(world: &mut World, run: &str) {
    let topic = format!("cn-{run}-{}", world.cycle);
    let kmirror = matches!(world.source, Source::Kmirror(_));
    let possible: Vec<Fault> = FAULTS
        .into_iter()
        .filter(|f| kmirror || *f != Fault::KillOldSource)
        .collect();
    let fault = possible[world.rng.below(possible.len() as u64) as usize];
    let racing = matches!(fault, Fault::StopRacesPause | Fault::ConfigRacesStop);
    // A Kafka source has no failback; the failback's fetches do not cross the proxy.
    let steps = if kmirror && !matches!(fault, Fault::ProxyDrop | Fault::ProxyStall) {
        STEPS.len()
    } else {
        STEPS.len() - 1
    };
    let step = match fault {
        _ if racing => Step::Stopping,
        Fault::KillOldSource => Step::Failback,
        _ => STEPS[world.rng.below(steps as u64) as usize],
    };
    *world.faults.entry((fault, step)).or_default() += 1;
    world.note(&format!("topic {topic}, {fault:?} at {step:?}"));
    let source = world.source.address();
    assert_eq!(
        client::create_topic(&source, &topic, PARTITIONS).await,
        Ok(0),
        "the source topic"
    );
    let stop_source = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(source_writer(
        source.clone(),
        topic.clone(),
        stop_source.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let node = world.node();
    let (code, text) = world
        .cli(node, &["--start", "--mirror", MIRROR, "--topics", &topic])
        .await;
    world.note(&format!("--start via {node}: {code:?} {}", text.trim()));
    if code != Some(0) {
        world.violation(format!("{topic}: --start failed: {}", text.trim()));
    }
    if step == Step::Preparing {
        inject(world, fault, &topic).await;
    }
    if let Err(now) = world.wait_state(&topic, "MIRRORING", None).await {
        world.violation(format!(
            "{topic}: not MIRRORING within {STATE_BOUND:?}: {now:?}"
        ));
    }
    if step == Step::Mirroring {
        inject(world, fault, &topic).await;
    }
    stop_source.store(true, Ordering::SeqCst);
    let _ = writer.await;
    // Caught up with the source's last stable offsets: the stop must keep exactly those.
    let mut lsos = Vec::new();
    for p in 0..PARTITIONS {
        lsos.push(
            client::end_offset(&source, &topic, p, true)
                .await
                .unwrap_or(-1),
        );
    }
    if let Err(now) = world.wait_state(&topic, "MIRRORING", Some(&lsos)).await {
        world.violation(format!(
            "{topic}: not caught up with the source's {lsos:?} within {STATE_BOUND:?}: {now:?}"
        ));
    }
    let leaders = world.leaders(&topic).await;
    let addresses: Vec<String> = leaders.iter().map(|n| world.client(*n as usize)).collect();
    let stop_writes = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let racer = tokio::spawn(destination_writer(
        addresses,
        topic.clone(),
        world.cycle,
        stop_writes.clone(),
        acked.clone(),
    ));
    stop(world, racing.then_some(fault), &topic).await;
    if step == Step::Stopping && !racing {
        inject(world, fault, &topic).await;
    }
    if let Err(now) = world.wait_state(&topic, "STOPPED", None).await {
        // A pause that won a race leaves the topic PAUSED: its stop is asked once more.
        world.note(&format!("not STOPPED yet: {now:?}; --stop again"));
        stop(world, None, &topic).await;
        if let Err(now) = world.wait_state(&topic, "STOPPED", None).await {
            world.violation(format!(
                "{topic}: not STOPPED within {STATE_BOUND:?} once the faults ended: {now:?}"
            ));
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop_writes.store(true, Ordering::SeqCst);
    let _ = racer.await;
    let acked = std::mem::take(&mut *acked.lock().expect("lock"));
    world.note(&format!(
        "{} writes acknowledged around the stop",
        acked.len()
    ));
    for p in 0..PARTITIONS {
        let leader = leaders[p as usize];
        let dst = super::process::concatenated_segments(
            &world
                .cluster
                .data(leader as usize)
                .join(format!("{topic}-{p}")),
        );
        let src = world.source.log_bytes(&topic, p);
        let tp = format!("{topic}-{p} (node {leader})");
        let (barrier, wrong) = compare_segments(&tp, &src, &dst, Some(lsos[p as usize]));
        for w in wrong {
            world.violation(w);
        }
        let early: Vec<&Acked> = acked
            .iter()
            .filter(|a| a.partition == p && a.offset <= barrier)
            .collect();
        if !early.is_empty() {
            world.violation(format!(
                "{tp}: writes acknowledged at or before the barrier at {barrier} (before the \
                 failover's data was final): {early:?}"
            ));
        }
    }
    world.acked.entry(topic.clone()).or_default().extend(acked);
    // Writable on every broker.
    let addresses: Vec<String> = leaders.iter().map(|n| world.client(*n as usize)).collect();
    for (p, address) in addresses.iter().enumerate() {
        let mut producer = Producer::idempotent(address);
        let value = vec![format!("c{}-after-{p}", world.cycle)];
        match producer
            .produce(&topic, p as i32, &value, Compression::None)
            .await
        {
            Outcome::Acked(a) => world.acked.entry(topic.clone()).or_default().extend(a),
            other => world.violation(format!(
                "{topic}-{p}: a write after STOPPED was not acknowledged: {other:?}"
            )),
        }
    }
    check_acks(world).await;
    if step == Step::Failback {
        fail_back(world, fault, &topic).await;
    }
}

/// Fails `topic` back: the old source mirrors the destination cluster with mirror [`BACK`],
/// `fault` lands right after its `--start`; once MIRRORING at each partition's last stable
/// offset on the destination its log is the leader's byte for byte. Half the time it then fails
/// over again.
async fn fail_back(world: &mut World, fault: Fault, topic: &str) {
    let Source::Kmirror(old) = &world.source else {
        return;
    };
    let source = old.address();
    if !world.back_created {
        let config = old.dir.join("back.properties");
        std::fs::write(
            &config,
            format!("bootstrap.servers={}\n", world.cluster.clients.join(",")),
        )
        .expect("written");
        let config = config.to_str().expect("utf-8").to_string();
        let (code, text) = mirrors_cli(
            &source,
            &["--create", "--mirror", BACK, "--mirror-config", &config],
        )
        .await;
        assert_eq!(code, Some(0), "--create --mirror {BACK}: {text}");
        world.back_created = true;
    }
    world.failbacks += 1;
    let (code, text) =
        mirrors_cli(&source, &["--start", "--mirror", BACK, "--topics", topic]).await;
    world.note(&format!("failback --start: {code:?} {}", text.trim()));
    if code != Some(0) {
        world.violation(format!("{topic}: failback --start failed: {}", text.trim()));
        return;
    }
    inject(world, fault, topic).await;
    let lsos = world.lsos(topic).await;
    let old = [source.clone()];
    if let Err(now) = wait_described(&old, BACK, topic, "MIRRORING", Some(&lsos)).await {
        world.violation(format!(
            "{topic}: failback not MIRRORING at the destination's last stable offsets {lsos:?} \
             within {STATE_BOUND:?}: {now:?}"
        ));
        return;
    }
    let leaders = world.leaders(topic).await;
    let mut fronts = Vec::new();
    for p in 0..PARTITIONS {
        let leader = leaders[p as usize];
        let front = super::process::concatenated_segments(
            &world
                .cluster
                .data(leader as usize)
                .join(format!("{topic}-{p}")),
        );
        let back = world.source.log_bytes(topic, p);
        world.records_checked += lsos[p as usize].max(0) as u64;
        if back != front {
            world.violation(format!(
                "{topic}-{p}: after failback the old source's log ({} bytes) differs from its \
                 leader's, node {leader} ({} bytes)",
                back.len(),
                front.len()
            ));
        }
        fronts.push(front);
    }
    if world.rng.chance(50) {
        fail_over_again(world, topic, &fronts, &lsos).await;
    }
}

/// After a failback the old source fails over once more (`--stop` of mirror [`BACK`]): its log
/// is then the destination's (`fronts`) up to a second barrier at the destination's last stable
/// offsets `lsos`, and it takes writes after it.
async fn fail_over_again(world: &mut World, topic: &str, fronts: &[Vec<u8>], lsos: &[i64]) {
    let source = world.source.address();
    world.failovers_back += 1;
    let (code, text) = mirrors_cli(&source, &["--stop", "--mirror", BACK, "--topics", topic]).await;
    world.note(&format!("failback --stop: {code:?} {}", text.trim()));
    if code != Some(0) {
        world.violation(format!(
            "{topic}: --stop of mirror {BACK} failed: {}",
            text.trim()
        ));
        return;
    }
    let old = [source.clone()];
    if let Err(now) = wait_described(&old, BACK, topic, "STOPPED", None).await {
        world.violation(format!(
            "{topic}: the old source not STOPPED within {STATE_BOUND:?} of --stop of mirror \
             {BACK}: {now:?}"
        ));
        return;
    }
    for p in 0..PARTITIONS {
        let tp = format!("{topic}-{p} (failed over back)");
        let (checked, wrong) = super::check_failed_over_back(
            &tp,
            &fronts[p as usize],
            &world.source.log_bytes(topic, p),
            lsos[p as usize],
            (&source, topic, p),
            world.cycle,
        )
        .await;
        world.records_checked += checked;
        for w in wrong {
            world.violation(w);
        }
    }
}

pub(crate) async fn run(kind: SourceKind) {
    let (seed, cycles) = schedule();
    let started = Instant::now();
    let source_dir = tempfile::tempdir().expect("temp dir");
    // Every fetch of the mirror crosses the proxy: the source advertises it.
    let (source, proxy, bootstrap) = match kind {
        SourceKind::Kmirror => {
            let port = free_port();
            let proxy_address = format!("127.0.0.1:{}", free_port());
            let proxy = FaultProxy::start(&proxy_address, &format!("127.0.0.1:{port}"));
            let source = Broker::start(
                "source",
                source_dir.path(),
                port,
                &format!(
                    "advertised.listeners=PLAINTEXT://{proxy_address}\n\
                     auto.create.topics.enable=false\nlog.roll.ms=1000\n"
                ),
            );
            let bootstrap = source.address();
            (Source::Kmirror(source), proxy, bootstrap)
        }
        SourceKind::Kafka => {
            // scripts/kafka-local.sh's REMOTE listener advertises a port nothing listens on:
            // the proxy takes it.
            let proxy_address = kafka_env("KMIRROR_KAFKA_REMOTE");
            let proxy =
                FaultProxy::start(&proxy_address, &kafka_env("KMIRROR_KAFKA_REMOTE_LISTENER"));
            let source = Source::Kafka {
                address: kafka_env("KMIRROR_KAFKA_BOOTSTRAP"),
                logs: PathBuf::from(kafka_env("KMIRROR_KAFKA_DATA")).join("logs"),
            };
            (source, proxy, proxy_address)
        }
    };
    let cluster = LocalCluster::start(
        NODES,
        &format!(
            "broker.heartbeat.interval.ms=500\nbroker.session.timeout.ms={}\n\
             log.roll.ms=1500\nmirror.state.topic.num.partitions={SHARDS}\n\
             mirror.metadata.refresh.interval.ms=1000\n",
            SESSION.as_millis()
        ),
    );
    let config = cluster.dir.join("cm.properties");
    std::fs::write(&config, format!("bootstrap.servers={bootstrap}\n")).expect("written");
    let config = config.to_str().expect("utf-8").to_string();
    let (code, text) = mirrors_cli(
        &cluster.clients[0],
        &["--create", "--mirror", MIRROR, "--mirror-config", &config],
    )
    .await;
    assert_eq!(code, Some(0), "{text}");
    let run = super::run_name(kind);
    let mut world = World {
        rng: Rng(seed),
        seed,
        cycle: 0,
        cluster,
        source,
        proxy,
        violations: Vec::new(),
        acked: BTreeMap::new(),
        faults: BTreeMap::new(),
        records_checked: 0,
        back_created: false,
        failbacks: 0,
        failovers_back: 0,
    };
    for c in 1..=cycles {
        world.cycle = c;
        cycle(&mut world, &run).await;
    }
    let faults: Vec<String> = world
        .faults
        .iter()
        .map(|((f, s), n)| format!("{f:?}@{s:?}={n}"))
        .collect();
    println!(
        "CLUSTER_NEMESIS_SUMMARY source={} seed={seed} cycles={cycles} elapsed={}s faults[{}] \
         failbacks={} failovers_back={} records_checked={} violations={}",
        match kind {
            SourceKind::Kmirror => "kmirror",
            SourceKind::Kafka => "Kafka",
        },
        started.elapsed().as_secs(),
        faults.join(" "),
        world.failbacks,
        world.failovers_back,
        world.records_checked,
        world.violations.len()
    );
    if !world.violations.is_empty() {
        eprintln!(
            "kept the source's directory (broker.log): {}",
            source_dir.keep().display()
        );
    }
    assert!(
        world.violations.is_empty(),
        "NEMESIS_SEED={seed}: {:#?}",
        world.violations
    );
}
