//! The nemesis of the failover path: a source `kmirror broker`, a destination `kmirror broker`
//! mirroring it (mirror `m`) through a fault proxy (the source advertises the proxy, so every
//! byte the mirror fetches crosses it), producers over the raw protocol, and a seeded schedule of
//! cycles. Each cycle mirrors a fresh topic while an idempotent and a transactional producer
//! write to the source, injects one to three faults (SIGKILL and restart of either broker,
//! SIGSTOP/SIGCONT of either, the proxy dropping or stalling connections, pause and resume, a
//! `--stop` landing in PREPARING, a SIGKILL landing in STOPPING), ends them, fails the topic
//! over with `kmirror mirrors --stop`, writes to the destination, crashes it once more and
//! checks:
//! - the destination's log is the source's log byte for byte up to the MIRROR_PID_RESET
//!   barrier written at the stop, which sits at the source's last stable offset (nothing
//!   committed is missing, nothing of a transaction open at the stop is kept);
//! - every record the destination acknowledged after its failover reads back (Fetch) at its
//!   offset with its value, after every later crash, in every later cycle;
//! - every record the source acknowledged is in its log (a SIGKILL loses nothing acked);
//! - a produce to the destination before STOPPED is refused with READ_ONLY_TOPIC;
//! - each partition reaches its desired state (MIRRORING caught up, PAUSED, STOPPED) within
//!   60 s once the faults end;
//! - no broker log says `panicked` and `kmirror_mirror_invariant_violations_total` stays 0.
//!
//! `NEMESIS_SEED` replays a schedule (the seed is printed first); `NEMESIS_CYCLES` (3) sets the
//! length. Violations are collected with seed and cycle and the test fails listing them; the last
//! line printed is a summary for RELIABILITY.md.

mod cluster;
mod process;
mod proxy;
mod quorum;
mod replication;
mod verifiable_producer;

use bytes::Bytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use kmirror_protocol::batch::{RecordBatch, RecordBatches};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::kafka_tools::kafka_env;
use kmirror_protocol::records::ControlRecord;
use kmirror_testkit::client::{self, Acked, Outcome, Producer, Sent};
use process::{Broker, described, free_port, mirrors_cli, scrape};
use proxy::{FaultProxy, Mode};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MIRROR: &str = "m";
/// The old source's mirror of the destination, for failback.
const BACK: &str = "back";
const PARTITIONS: i32 = 2;
/// How long a partition may take to reach its desired state once the faults end.
const STATE_BOUND: Duration = Duration::from_secs(60);
const INVARIANT_METRIC: &str = "kmirror_mirror_invariant_violations_total";

/// splitmix64: a tiny deterministic generator, so a seed replays the same schedule.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from + 1))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillDestination,
    KillSource,
    FreezeDestination,
    FreezeSource,
    ProxyDrop,
    ProxyStall,
    PauseResume,
    StopDuringPreparing,
    KillDuringStopping,
    KillDuringPreparing,
    StopWithSourceDown,
    StopWhilePaused,
    StopInPausing,
    FreezeInStopping,
}

const FAULTS: [Fault; 14] = [
    Fault::KillDestination,
    Fault::KillSource,
    Fault::FreezeDestination,
    Fault::FreezeSource,
    Fault::ProxyDrop,
    Fault::ProxyStall,
    Fault::PauseResume,
    Fault::StopDuringPreparing,
    Fault::KillDuringStopping,
    Fault::KillDuringPreparing,
    Fault::StopWithSourceDown,
    Fault::StopWhilePaused,
    Fault::StopInPausing,
    Fault::FreezeInStopping,
];

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::KillDestination => "kill-destination",
            Fault::KillSource => "kill-source",
            Fault::FreezeDestination => "freeze-destination",
            Fault::FreezeSource => "freeze-source",
            Fault::ProxyDrop => "proxy-drop",
            Fault::ProxyStall => "proxy-stall",
            Fault::PauseResume => "pause-resume",
            Fault::StopDuringPreparing => "stop-in-preparing",
            Fault::KillDuringStopping => "kill-in-stopping",
            Fault::KillDuringPreparing => "kill-in-preparing",
            Fault::StopWithSourceDown => "stop-with-source-down",
            Fault::StopWhilePaused => "stop-while-paused",
            Fault::StopInPausing => "stop-in-pausing",
            Fault::FreezeInStopping => "freeze-in-stopping",
        }
    }

    /// Whether the fault belongs to the start or the failover rather than the faults phase.
    fn at_start_or_stop(self) -> bool {
        matches!(
            self,
            Fault::StopDuringPreparing
                | Fault::KillDuringStopping
                | Fault::KillDuringPreparing
                | Fault::StopWithSourceDown
                | Fault::StopWhilePaused
                | Fault::StopInPausing
                | Fault::FreezeInStopping
        )
    }
}

/// The cluster mirrored: a `kmirror broker` the nemesis may crash and freeze, or the Apache
/// Kafka `scripts/test.sh` runs (shared with other tests: never crashed, only cut off by the
/// proxy; its segment files are read from its data folder).
enum Source {
    Kmirror(Broker),
    Kafka { address: String, logs: PathBuf },
}

impl Source {
    fn address(&self) -> String {
        match self {
            Source::Kmirror(b) => b.address(),
            Source::Kafka { address, .. } => address.clone(),
        }
    }

    fn log_bytes(&self, topic: &str, partition: i32) -> Vec<u8> {
        match self {
            Source::Kmirror(b) => b.log_bytes(topic, partition),
            Source::Kafka { logs, .. } => {
                process::concatenated_segments(&logs.join(format!("{topic}-{partition}")))
            }
        }
    }

    fn broker(&mut self) -> Option<&mut Broker> {
        match self {
            Source::Kmirror(b) => Some(b),
            Source::Kafka { .. } => None,
        }
    }
}

/// Both brokers, the proxy between them, and what the run found.
struct World {
    seed: u64,
    cycle: u32,
    rng: Rng,
    source: Source,
    destination: Broker,
    proxy: FaultProxy,
    metrics: String,
    /// The invariant counter already reported for the running destination process.
    metric_reported: f64,
    /// Bytes of each broker log already searched for panics.
    logs_seen: [usize; 2],
    violations: Vec<String>,
    faults: BTreeMap<&'static str, u32>,
    records_checked: u64,
    /// Every record each failed-over topic's destination acknowledged, rechecked every cycle.
    destination_acks: Vec<(String, Vec<Acked>)>,
    /// Produce answers to the destination sampled before STOPPED: code -> count.
    samples: BTreeMap<String, u32>,
    /// Whether the source has mirror `back` of the destination yet.
    back_created: bool,
    failbacks: u32,
    /// Failbacks followed by a second failover, to the old source.
    failovers_back: u32,
}

impl World {
    fn violation(&mut self, what: String) {
        let line = format!("seed={} cycle={}: {what}", self.seed, self.cycle);
        eprintln!("VIOLATION {line}");
        self.violations.push(line);
    }

    fn note(&self, what: &str) {
        eprintln!("[nemesis cycle {}] {what}", self.cycle);
    }

    fn destination(&self) -> String {
        self.destination.address()
    }

    /// Reads the invariant counter of the running destination (a restart resets it, so it is
    /// read before every crash).
    fn check_metric(&mut self) {
        if !self.destination.is_running() || self.destination.is_frozen() {
            return;
        }
        match scrape(&self.metrics, INVARIANT_METRIC) {
            Some(v) if v > self.metric_reported => {
                self.violation(format!(
                    "{INVARIANT_METRIC} is {v} on the destination (expected 0)"
                ));
                self.metric_reported = v;
            }
            Some(_) => {}
            None => self.note("the metrics endpoint did not answer"),
        }
    }

    fn kill_destination(&mut self) {
        self.check_metric();
        self.destination.restart();
        self.metric_reported = 0.0;
    }

    /// Searches what both logs gained since the last search for panics.
    fn check_logs(&mut self) {
        for i in 0..2 {
            let broker = match (i, &self.source) {
                (0, Source::Kmirror(b)) => b,
                (0, Source::Kafka { .. }) => continue,
                _ => &self.destination,
            };
            let (name, log) = (broker.name, broker.log());
            let fresh = log.get(self.logs_seen[i]..).unwrap_or_default();
            let panics: Vec<&str> = fresh.lines().filter(|l| l.contains("panicked")).collect();
            self.logs_seen[i] = log.len();
            if !panics.is_empty() {
                let first = panics
                    .iter()
                    .take(3)
                    .copied()
                    .collect::<Vec<_>>()
                    .join("\n  ");
                self.violation(format!(
                    "the {name} broker's log has {} `panicked` lines:\n  {first}",
                    panics.len()
                ));
            }
        }
    }

    /// `kmirror mirrors` on the destination for `topic`.
    async fn cli(&self, verb: &str, topic: &str) -> (Option<i32>, String) {
        let (code, text) = mirrors_cli(
            &self.destination(),
            &[verb, "--mirror", MIRROR, "--topics", topic],
        )
        .await;
        self.note(&format!("{verb} {topic}: exit {code:?} {}", text.trim()));
        (code, text)
    }

    /// Waits up to [`STATE_BOUND`] until every partition of `topic` is in `state` (and, with
    /// `ends`, at those destination offsets); the last description when it is not.
    async fn wait_state(
        &self,
        topic: &str,
        state: &str,
        ends: Option<&[i64]>,
    ) -> Result<(), Vec<(String, i64)>> {
        wait_mirror_state(&self.destination(), MIRROR, topic, state, ends).await
    }

    /// Produces one record to the destination's `topic`, which is not STOPPED: anything but a
    /// refusal with READ_ONLY_TOPIC while the destination answers is a violation.
    async fn sample_read_only(&mut self, topic: &str) {
        if !self.destination.is_running() || self.destination.is_frozen() {
            return;
        }
        let mut producer = Producer::idempotent(&self.destination());
        let value = format!("c{}-forbidden", self.cycle);
        let answer = match producer
            .produce(topic, 0, &[value], Compression::None)
            .await
        {
            Outcome::Acked(acked) => {
                self.violation(format!(
                    "the destination accepted a produce to mirror topic {topic} before STOPPED \
                     (expected READ_ONLY_TOPIC {}): written at {acked:?}",
                    ErrorCode::READ_ONLY_TOPIC.0
                ));
                "accepted".to_string()
            }
            Outcome::Refused(code) => format!("error {code}"),
            Outcome::Unknown(e) => {
                self.note(&format!("a read-only sample had no answer: {e}"));
                "no answer".to_string()
            }
        };
        *self.samples.entry(answer).or_default() += 1;
    }

    /// Ends whatever fault is in force: the proxy passes, both brokers run and answer.
    fn heal(&mut self) {
        self.proxy.set(Mode::Pass);
        if let Some(source) = self.source.broker() {
            source.thaw();
        }
        self.destination.thaw();
    }
}

/// Waits up to [`STATE_BOUND`] until every partition of `topic` in `mirror` on the broker at
/// `address` is in `state` (and, with `ends`, at those destination offsets); the last
/// description when it is not.
async fn wait_mirror_state(
    address: &str,
    mirror: &str,
    topic: &str,
    state: &str,
    ends: Option<&[i64]>,
) -> Result<(), Vec<(String, i64)>> {
    let deadline = Instant::now() + STATE_BOUND;
    loop {
        let now = described(address, mirror, topic).await;
        let reached = now.len() == PARTITIONS as usize
            && now
                .iter()
                .enumerate()
                .all(|(p, (s, o))| s == state && ends.is_none_or(|e| e.get(p) == Some(o)));
        if reached {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(now);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Writes to the source until told to stop: idempotent batches to either partition, and every
/// few batches a transaction over both partitions, committed or aborted. Failures (the source
/// is down, frozen or restarting) start the producer over after a pause.
async fn write_source(
    address: String,
    topic: String,
    cycle: u32,
    seed: u64,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<Acked>>>,
) -> Option<Sent> {
    let mut rng = Rng(seed);
    let mut idempotent = Producer::idempotent(&address);
    let mut transactional = Producer::transactional(&address, &format!("nemesis-src-{topic}"));
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let compression = if rng.chance(50) {
            Compression::Lz4
        } else {
            Compression::None
        };
        let values = |n: u64, count: u64, kind: &str| -> Vec<String> {
            (0..count)
                .map(|i| format!("c{cycle}-src-{kind}-{n}-{i}"))
                .collect()
        };
        let ok = if n.is_multiple_of(5) {
            let commit = rng.chance(70);
            let mut ok = transactional.add_partitions(&topic, &[0, 1]).await.is_ok();
            for p in 0..PARTITIONS {
                if !ok {
                    break;
                }
                let count = 1 + rng.below(10);
                match transactional
                    .produce(&topic, p, &values(n, count, "txn"), compression)
                    .await
                {
                    Outcome::Acked(a) => acked.lock().expect("acks").extend(a),
                    _ => ok = false,
                }
            }
            // A failed transaction is left to the next InitProducerId, which aborts it.
            ok && transactional.end(commit).await.is_ok()
        } else {
            let p = rng.below(PARTITIONS as u64) as i32;
            let count = 1 + rng.below(20);
            match idempotent
                .produce(&topic, p, &values(n, count, "idem"), compression)
                .await
            {
                Outcome::Acked(a) => {
                    acked.lock().expect("acks").extend(a);
                    true
                }
                _ => false,
            }
        };
        let pause = if ok { 30 } else { 500 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    // A transaction the stop interrupted would hold the source's LSO until it times out.
    if transactional.in_transaction() && transactional.end(true).await.is_err() {
        let _ = transactional.fence().await;
    }
    idempotent.last
}

/// The values of every data record in segment `bytes`, by offset.
fn segment_values(bytes: &[u8]) -> BTreeMap<i64, String> {
    let mut out = BTreeMap::new();
    for batch in RecordBatches::new(Bytes::copy_from_slice(bytes)) {
        let Ok(batch) = batch else { break };
        if batch.is_control() {
            continue;
        }
        let mut b = batch.as_bytes().clone();
        if let Ok(set) = RecordBatchDecoder::decode(&mut b) {
            for r in set.records {
                let v = r.value.map(|v| String::from_utf8_lossy(&v).into_owned());
                out.insert(r.offset, v.unwrap_or_default());
            }
        }
    }
    out
}

/// The batches of segment `bytes` with their byte positions.
fn batches(bytes: &[u8]) -> Vec<(usize, RecordBatch)> {
    let mut iter = RecordBatches::new(Bytes::copy_from_slice(bytes));
    let mut out = Vec::new();
    loop {
        let at = iter.position();
        match iter.next() {
            Some(Ok(b)) => out.push((at, b)),
            _ => return out,
        }
    }
}

/// Compares one failed-over partition's segment files: the destination (`dst`) holds the
/// source's (`src`) bytes up to its (last) MIRROR_PID_RESET barrier, the barrier sits at
/// `expected_stop` (the source's last stable offset at the stop, when the mirror had caught
/// up), and no transaction of the mirrored range is left undecided. Returns the barrier's offset
/// (0 without one) and what is wrong.
fn compare_segments(
    tp: &str,
    src: &[u8],
    dst: &[u8],
    expected_stop: Option<i64>,
) -> (i64, Vec<String>) {
    let mut wrong = Vec::new();
    let dst_batches = batches(dst);
    // The last barrier: a log that failed back holds the earlier failover's barrier too.
    let barrier = dst_batches.iter().rev().find(|(_, b)| {
        b.is_control()
            && matches!(
                ControlRecord::parse(b),
                Ok(ControlRecord::MirrorPidReset { .. })
            )
    });
    let Some((at, barrier)) = barrier else {
        wrong.push(format!(
            "{tp}: the destination's log has no MIRROR_PID_RESET batch after the stop \
             ({} batches, {} bytes)",
            dst_batches.len(),
            dst.len()
        ));
        return (0, wrong);
    };
    let (at, stop) = (*at, barrier.base_offset());
    if src.len() < at || src[..at] != dst[..at] {
        let src_batches = batches(src);
        let first_diff = dst_batches
            .iter()
            .take_while(|(p, _)| *p < at)
            .find(|(p, b)| {
                !src_batches
                    .iter()
                    .any(|(q, s)| q == p && s.as_bytes() == b.as_bytes())
            })
            .map(|(p, b)| format!("offset {} (byte {p})", b.base_offset()));
        wrong.push(format!(
            "{tp}: the destination's mirrored range [0, {stop}) ({at} bytes) is not the \
             source's bytes (the source has {} bytes); first differing batch: {}",
            src.len(),
            first_diff.unwrap_or_else(|| "none: the source is shorter".into())
        ));
    }
    if let Some(expected) = expected_stop
        && expected != stop
    {
        let what = if stop < expected {
            "committed source records are missing"
        } else {
            "records past the source's last stable offset (an open transaction) were kept"
        };
        wrong.push(format!(
            "{tp}: the MIRROR_PID_RESET barrier is at offset {stop}, the source's last stable \
             offset at the stop was {expected}: {what}"
        ));
    }
    // Transactions of the mirrored range: each producer's data needs its marker before the
    // barrier.
    let mut open: BTreeMap<i64, i64> = BTreeMap::new();
    for (_, b) in dst_batches.iter().take_while(|(p, _)| *p < at) {
        if !b.is_transactional() {
            continue;
        }
        if b.is_control() {
            open.remove(&b.producer_id());
        } else {
            open.entry(b.producer_id()).or_insert(b.base_offset());
        }
    }
    if !open.is_empty() {
        wrong.push(format!(
            "{tp}: the destination kept transactions open at the stop (producer id -> first \
             offset): {open:?}"
        ));
    }
    (stop, wrong)
}

/// [`compare_segments`] over both brokers' logs of `topic`-`partition`; returns the
/// number of mirrored offsets compared.
fn check_segments(
    world: &mut World,
    topic: &str,
    partition: i32,
    expected_stop: Option<i64>,
) -> u64 {
    let tp = format!("{topic}-{partition}");
    let (stop, wrong) = compare_segments(
        &tp,
        &world.source.log_bytes(topic, partition),
        &world.destination.log_bytes(topic, partition),
        expected_stop,
    );
    for w in wrong {
        world.violation(w);
    }
    stop.max(0) as u64
}

/// Checks that every record `acked` by the destination reads back (Fetch) with its value.
async fn check_destination_acks(world: &mut World) {
    let acks = world.destination_acks.clone();
    for (topic, acked) in &acks {
        let mut read = BTreeMap::new();
        for p in 0..PARTITIONS {
            match client::read_back(&world.destination(), topic, p).await {
                Ok(values) => {
                    read.insert(p, values);
                }
                Err(e) => {
                    world.violation(format!(
                        "{topic}-{p}: the destination's acknowledged records cannot be read \
                         back: {e}"
                    ));
                }
            }
        }
        let mut missing = Vec::new();
        for a in acked {
            let Some(values) = read.get(&a.partition) else {
                continue;
            };
            world.records_checked += 1;
            if values.get(&a.offset) != Some(&a.value) {
                missing.push(format!(
                    "{}@{} wanted {:?} found {:?}",
                    a.partition,
                    a.offset,
                    a.value,
                    values.get(&a.offset)
                ));
            }
        }
        if !missing.is_empty() {
            let count = missing.len();
            missing.truncate(5);
            world.violation(format!(
                "{topic}: {count} records the destination acknowledged after its failover are \
                 gone or changed: {}",
                missing.join("; ")
            ));
        }
    }
}

/// Produces on the failed-over destination: idempotent batches and two transactions (one
/// committed, one aborted); every write must be acknowledged.
async fn write_destination(world: &mut World, topic: &str) -> Vec<Acked> {
    let address = world.destination();
    let mut acked = Vec::new();
    let mut idempotent = Producer::idempotent(&address);
    let cycle = world.cycle;
    for n in 0..10 {
        let p = n % PARTITIONS;
        let values: Vec<String> = (0..5).map(|i| format!("c{cycle}-dst-{n}-{i}")).collect();
        match idempotent
            .produce(topic, p, &values, Compression::None)
            .await
        {
            Outcome::Acked(a) => acked.extend(a),
            other => world.violation(format!(
                "{topic}-{p}: a produce to the STOPPED destination failed: {other:?}"
            )),
        }
    }
    let mut transactional = Producer::transactional(&address, &format!("nemesis-dst-{topic}"));
    for (round, commit) in [(0, true), (1, false)] {
        let result = async {
            transactional.add_partitions(topic, &[0, 1]).await?;
            let mut written = Vec::new();
            for p in 0..PARTITIONS {
                let values: Vec<String> = (0..3)
                    .map(|i| format!("c{cycle}-dst-txn{round}-{p}-{i}"))
                    .collect();
                match transactional
                    .produce(topic, p, &values, Compression::Lz4)
                    .await
                {
                    Outcome::Acked(a) => written.extend(a),
                    other => return Err(format!("produce: {other:?}")),
                }
            }
            transactional.end(commit).await?;
            Ok::<_, String>(written)
        }
        .await;
        match result {
            Ok(written) => acked.extend(written),
            Err(e) => world.violation(format!(
                "{topic}: a transaction on the STOPPED destination failed: {e}"
            )),
        }
    }
    acked
}

/// Sends the source producer's last acknowledged batch to the failed-over destination, as the
/// producer's retry would after a client fails over: the MIRROR_PID_RESET barrier dropped the
/// source's producer state, so the destination must not answer it as a duplicate of the
/// mirrored copy. Returns (partition, offset) and `when` if it was acknowledged.
async fn resend_source_batch(
    world: &mut World,
    sent: &Sent,
    when: &'static str,
) -> Option<((i32, i64), &'static str)> {
    let outcome = client::resend(&world.destination(), sent).await;
    world.note(&format!(
        "the source's last batch (producer {:?}, at {} on the source) sent to the destination \
         {when}: {outcome:?}",
        sent.producer, sent.base_offset
    ));
    *world
        .samples
        .entry(format!(
            "resend: {}",
            match &outcome {
                Outcome::Acked(_) => "acked".to_string(),
                Outcome::Refused(code) => format!("error {code}"),
                Outcome::Unknown(_) => "no answer".to_string(),
            }
        ))
        .or_default() += 1;
    match outcome {
        Outcome::Acked(a) => Some(((sent.partition, a[0].offset), when)),
        _ => None,
    }
}

/// Produces one record at a time to the destination's `topic` until told to stop, from just
/// before `--stop`; returns what was acknowledged.
async fn race_the_stop(
    address: String,
    topic: String,
    cycle: u32,
    stop: Arc<AtomicBool>,
) -> Vec<Acked> {
    let mut acked = Vec::new();
    let mut producer = Producer::idempotent(&address);
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let value = vec![format!("c{cycle}-race-{n}")];
        if let Outcome::Acked(a) = producer
            .produce(&topic, n % PARTITIONS, &value, Compression::None)
            .await
        {
            acked.extend(a);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    acked
}

/// Injects `fault` (other than the two tied to start and stop), holds it a moment while the
/// source is written, samples the read-only rule, and ends it.
async fn inject(world: &mut World, fault: Fault, topic: &str) {
    if fault.at_start_or_stop() {
        return;
    }
    let hold = world.rng.millis(1_000, 4_000);
    world.note(&format!("fault {} for {hold:?}", fault.name()));
    match fault {
        Fault::KillDestination => {
            tokio::time::sleep(hold / 2).await;
            world.kill_destination();
            world.sample_read_only(topic).await;
        }
        Fault::KillSource => {
            let source = world.source.broker().expect("a kmirror source");
            source.kill();
            tokio::time::sleep(hold).await;
            source.restart();
        }
        Fault::FreezeDestination => {
            world.check_metric();
            world.destination.freeze();
            tokio::time::sleep(hold).await;
            world.destination.thaw();
        }
        Fault::FreezeSource => {
            let source = world.source.broker().expect("a kmirror source");
            source.freeze();
            tokio::time::sleep(hold).await;
            source.thaw();
        }
        Fault::ProxyDrop | Fault::ProxyStall => {
            world.proxy.set(if fault == Fault::ProxyDrop {
                Mode::Drop
            } else {
                Mode::Stall
            });
            // With every connection cut, the mirror cannot advance: if it does, its fetches
            // do not cross the proxy and the proxy's faults test nothing.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let before = described(&world.destination(), MIRROR, topic).await;
            tokio::time::sleep(hold / 2).await;
            world.sample_read_only(topic).await;
            tokio::time::sleep(hold / 2).await;
            let after = described(&world.destination(), MIRROR, topic).await;
            let advanced = before.len() == after.len()
                && before.iter().zip(&after).any(|((_, b), (_, a))| a > b);
            if fault == Fault::ProxyDrop && advanced {
                world.violation(format!(
                    "harness: the mirror advanced from {before:?} to {after:?} with the proxy \
                     dropping every connection: its fetches bypass the proxy"
                ));
            }
            // Sometimes the network stays broken through the next fault (the heal ends it).
            if world.rng.chance(70) {
                world.proxy.set(Mode::Pass);
            } else {
                world.note("the proxy fault stays in force");
            }
        }
        Fault::PauseResume => {
            let (code, text) = world.cli("--pause", topic).await;
            if code == Some(0) {
                if let Err(now) = world.wait_state(topic, "PAUSED", None).await {
                    world.violation(format!(
                        "{topic}: not PAUSED within {STATE_BOUND:?} of --pause: {now:?}"
                    ));
                }
                world.sample_read_only(topic).await;
                tokio::time::sleep(hold).await;
                let (code, text) = world.cli("--resume", topic).await;
                if code != Some(0) {
                    world.violation(format!(
                        "{topic}: --resume of a PAUSED topic failed: {}",
                        text.trim()
                    ));
                }
            } else {
                world.note(&format!("--pause refused: {}", text.trim()));
            }
        }
        _ => unreachable!("injected at the start or at the stop"),
    }
    world.sample_read_only(topic).await;
}

/// Fails `topic` back: the old source mirrors the destination with mirror `back` (sometimes
/// SIGKILLed right after `--start`, in PREPARING), cuts what it holds past the last mirrored
/// epoch (the aborted transaction left open at the stop) and copies what the destination wrote;
/// once MIRRORING at the destination's last stable offsets both logs are byte-identical.
async fn fail_back(world: &mut World, topic: &str) {
    let Source::Kmirror(old_source) = &world.source else {
        return;
    };
    let source = old_source.address();
    if !world.back_created {
        let config = old_source.dir.join("back.properties");
        std::fs::write(
            &config,
            format!("bootstrap.servers={}\n", world.destination()),
        )
        .expect("mirror config written");
        let (code, text) = mirrors_cli(
            &source,
            &[
                "--create",
                "--mirror",
                BACK,
                "--mirror-config",
                config.to_str().expect("a UTF-8 path"),
            ],
        )
        .await;
        assert_eq!(
            code,
            Some(0),
            "kmirror mirrors --create --mirror {BACK}: {text}"
        );
        world.back_created = true;
    }
    world.failbacks += 1;
    let (code, text) =
        mirrors_cli(&source, &["--start", "--mirror", BACK, "--topics", topic]).await;
    world.note(&format!(
        "failback --start {topic}: exit {code:?} {}",
        text.trim()
    ));
    if code != Some(0) {
        world.violation(format!("{topic}: failback --start failed: {}", text.trim()));
        return;
    }
    if world.rng.chance(50) {
        world.note("failback: SIGKILL of the old source right after --start");
        *world.faults.entry("kill-source-in-failback").or_default() += 1;
        if let Some(source) = world.source.broker() {
            source.restart();
        }
    }
    let mut lsos = Vec::new();
    for p in 0..PARTITIONS {
        match client::end_offset(&world.destination(), topic, p, true).await {
            Ok(lso) => lsos.push(lso),
            Err(e) => panic!("the destination's last stable offset of {topic}-{p}: {e}"),
        }
    }
    if let Err(now) = wait_mirror_state(&source, BACK, topic, "MIRRORING", Some(&lsos)).await {
        world.violation(format!(
            "{topic}: failback not MIRRORING at the destination's last stable offsets {lsos:?} \
             within {STATE_BOUND:?}: {now:?}"
        ));
        return;
    }
    for p in 0..PARTITIONS {
        let (back, front) = (
            world.source.log_bytes(topic, p),
            world.destination.log_bytes(topic, p),
        );
        world.records_checked += lsos[p as usize].max(0) as u64;
        if back != front {
            let (b, f) = (batches(&back), batches(&front));
            let first = f
                .iter()
                .find(|(at, batch)| {
                    !b.iter()
                        .any(|(q, x)| q == at && x.as_bytes() == batch.as_bytes())
                })
                .map(|(at, batch)| format!("offset {} (byte {at})", batch.base_offset()));
            world.violation(format!(
                "{topic}-{p}: after failback the old source's log ({} bytes) differs from the \
                 destination's ({} bytes); first destination batch not on the source: {}",
                back.len(),
                front.len(),
                first.unwrap_or_else(|| "none: the source has more".into())
            ));
        }
    }
    if world.rng.chance(50) {
        fail_over_again(world, topic, &lsos).await;
    }
}

/// After a failback, the old source fails over once more (`--stop` of mirror `back`): its log
/// is then the destination's up to a second barrier at the destination's last stable offsets
/// `lsos`, and it takes writes again.
async fn fail_over_again(world: &mut World, topic: &str, lsos: &[i64]) {
    let source = world.source.address();
    world.failovers_back += 1;
    let (code, text) = mirrors_cli(&source, &["--stop", "--mirror", BACK, "--topics", topic]).await;
    world.note(&format!(
        "failback --stop {topic}: exit {code:?} {}",
        text.trim()
    ));
    if code != Some(0) {
        world.violation(format!(
            "{topic}: --stop of mirror {BACK} failed: {}",
            text.trim()
        ));
        return;
    }
    if let Err(now) = wait_mirror_state(&source, BACK, topic, "STOPPED", None).await {
        world.violation(format!(
            "{topic}: the old source not STOPPED within {STATE_BOUND:?} of --stop of mirror \
             {BACK}: {now:?}"
        ));
        return;
    }
    for p in 0..PARTITIONS {
        let tp = format!("{topic}-{p} (failed over back)");
        let (checked, wrong) = check_failed_over_back(
            &tp,
            &world.destination.log_bytes(topic, p),
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

/// The old source, failed over once more: its log `back` is `front` (the log it mirrored back)
/// up to a barrier at `lso`, and a write to `(address, topic, partition)` lands after that
/// barrier. Answers the records checked and what is wrong.
async fn check_failed_over_back(
    tp: &str,
    front: &[u8],
    back: &[u8],
    lso: i64,
    (address, topic, partition): (&str, &str, i32),
    cycle: u32,
) -> (u64, Vec<String>) {
    let (barrier, mut wrong) = compare_segments(tp, front, back, Some(lso));
    let mut producer = Producer::idempotent(address);
    let value = vec![format!("c{cycle}-back-{partition}")];
    match producer
        .produce(topic, partition, &value, Compression::None)
        .await
    {
        Outcome::Acked(a) if a.iter().all(|a| a.offset > barrier) => {}
        other => wrong.push(format!(
            "{tp}: a produce to the old source after it failed over again: {other:?} \
             (expected acknowledged after the barrier at {barrier})"
        )),
    }
    (barrier.max(0) as u64, wrong)
}

/// One cycle of the schedule; violations go to the world.
async fn cycle(world: &mut World, run: &str) {
    let topic = format!("nemesis-{run}-{}", world.cycle);
    let count = 1 + world.rng.below(3);
    // Apache Kafka is shared with other tests: it is cut off, never crashed or frozen.
    let kafka = matches!(world.source, Source::Kafka { .. });
    let possible: Vec<Fault> = FAULTS
        .into_iter()
        .filter(|f| !kafka || !matches!(f, Fault::KillSource | Fault::FreezeSource))
        .collect();
    let faults: Vec<Fault> = (0..count)
        .map(|_| possible[world.rng.below(possible.len() as u64) as usize])
        .collect();
    world.note(&format!(
        "topic {topic}, faults {:?}",
        faults.iter().map(|f| f.name()).collect::<Vec<_>>()
    ));
    for f in &faults {
        *world.faults.entry(f.name()).or_default() += 1;
    }
    match client::create_topic(&world.source.address(), &topic, PARTITIONS).await {
        Ok(0) => {}
        other => panic!("the source did not create {topic}: {other:?}"),
    }

    // The source is written from before the start to the end of the faults.
    let stop_writing = Arc::new(AtomicBool::new(false));
    let source_acks = Arc::new(Mutex::new(Vec::new()));
    let writer = tokio::spawn(write_source(
        world.source.address(),
        topic.clone(),
        world.cycle,
        world.rng.next(),
        stop_writing.clone(),
        source_acks.clone(),
    ));
    tokio::time::sleep(world.rng.millis(200, 1_500)).await;

    let (code, text) = world.cli("--start", &topic).await;
    if code != Some(0) {
        world.violation(format!("{topic}: --start failed: {}", text.trim()));
    }
    if faults.contains(&Fault::StopDuringPreparing) {
        // Lands while the partitions look up the last mirrored epoch; then mirror again.
        let (code, text) = world.cli("--stop", &topic).await;
        if code == Some(0) {
            if let Err(now) = world.wait_state(&topic, "STOPPED", None).await {
                world.violation(format!(
                    "{topic}: not STOPPED within {STATE_BOUND:?} of a --stop in PREPARING: \
                     {now:?}"
                ));
            }
        } else {
            world.note(&format!("--stop in PREPARING refused: {}", text.trim()));
        }
        let (code, text) = world.cli("--start", &topic).await;
        if code != Some(0) {
            world.violation(format!(
                "{topic}: --start after a stop in PREPARING failed: {}",
                text.trim()
            ));
        }
    }
    if faults.contains(&Fault::KillDuringPreparing) {
        // Lands while the partitions look up the last mirrored epoch or truncate.
        world.kill_destination();
    }
    world.sample_read_only(&topic).await;
    for fault in &faults {
        tokio::time::sleep(world.rng.millis(200, 1_500)).await;
        inject(world, *fault, &topic).await;
    }
    world.heal();
    stop_writing.store(true, Ordering::SeqCst);
    let last_source_batch = tokio::time::timeout(Duration::from_secs(60), writer)
        .await
        .expect("the source writer stops within 60 s")
        .expect("the source writer");

    // Sometimes a transaction stays open on the source across the stop: the destination must
    // cut it away.
    let mut dangling = Producer::transactional(
        &world.source.address(),
        &format!("nemesis-dangling-{topic}"),
    );
    if world.rng.chance(50) {
        let opened = async {
            dangling.add_partitions(&topic, &[0, 1]).await?;
            for p in 0..PARTITIONS {
                let values = vec![format!("c{}-dangling-{p}", world.cycle)];
                if let Outcome::Acked(a) = dangling
                    .produce(&topic, p, &values, Compression::None)
                    .await
                {
                    source_acks.lock().expect("acks").extend(a);
                }
            }
            Ok::<_, String>(())
        }
        .await;
        world.note(&format!(
            "a transaction left open on the source: {opened:?}"
        ));
    }

    // Faults over: the mirror catches up with everything decided on the source (it fetches
    // READ_COMMITTED, so up to the source's last stable offset).
    let mut source_lsos = Vec::new();
    for p in 0..PARTITIONS {
        match client::end_offset(&world.source.address(), &topic, p, true).await {
            Ok(lso) => source_lsos.push(lso),
            Err(e) => panic!("the source's last stable offset of {topic}-{p}: {e}"),
        }
    }
    let caught_up = match world
        .wait_state(&topic, "MIRRORING", Some(&source_lsos))
        .await
    {
        Ok(()) => true,
        Err(now) => {
            world.violation(format!(
                "{topic}: not MIRRORING at the source's last stable offsets {source_lsos:?} \
                 within {STATE_BOUND:?} of the faults' end: {now:?}"
            ));
            false
        }
    };
    world.sample_read_only(&topic).await;

    // Failover, sometimes with the source region gone (a mirror caught up loses nothing).
    let source_down = faults.contains(&Fault::StopWithSourceDown);
    if source_down {
        match (world.rng.below(3), world.source.broker()) {
            (0, _) => world.proxy.set(Mode::Drop),
            (2, Some(source)) => source.freeze(),
            _ => world.proxy.set(Mode::Stall),
        }
    }
    // Writes race the stop: whatever the destination acknowledges must land after the barrier
    // and survive.
    let stop_racing = Arc::new(AtomicBool::new(false));
    let racer = tokio::spawn(race_the_stop(
        world.destination(),
        topic.clone(),
        world.cycle,
        stop_racing.clone(),
    ));
    if faults.contains(&Fault::StopWhilePaused) || faults.contains(&Fault::StopInPausing) {
        let (code, text) = world.cli("--pause", &topic).await;
        if code != Some(0) {
            world.violation(format!(
                "{topic}: --pause of a caught-up mirror failed: {}",
                text.trim()
            ));
        } else if faults.contains(&Fault::StopWhilePaused)
            && let Err(now) = world.wait_state(&topic, "PAUSED", None).await
        {
            world.violation(format!(
                "{topic}: not PAUSED within {STATE_BOUND:?} of --pause: {now:?}"
            ));
        }
    }
    let (code, text) = world.cli("--stop", &topic).await;
    if code != Some(0) {
        world.violation(format!("{topic}: --stop failed: {}", text.trim()));
    }
    if faults.contains(&Fault::KillDuringStopping) {
        world.kill_destination();
    }
    if faults.contains(&Fault::FreezeInStopping) {
        world.check_metric();
        world.destination.freeze();
        tokio::time::sleep(world.rng.millis(1_000, 4_000)).await;
        world.destination.thaw();
    }
    let stopped = world.wait_state(&topic, "STOPPED", None).await;
    if source_down {
        world.heal();
    }
    stop_racing.store(true, Ordering::SeqCst);
    let raced = tokio::time::timeout(Duration::from_secs(60), racer)
        .await
        .expect("the racing producer stops within 60 s")
        .expect("the racing producer");
    world.note(&format!(
        "{} records acknowledged while the stop was under way",
        raced.len()
    ));
    if let Err(now) = stopped {
        world.violation(format!(
            "{topic}: not STOPPED within {STATE_BOUND:?} of --stop{}: {now:?}",
            if source_down {
                " (the source unreachable)"
            } else {
                ""
            }
        ));
        let _ = dangling.fence().await;
        return;
    }
    let mut replayed = Vec::new();
    if let Some(sent) = &last_source_batch {
        replayed.extend(resend_source_batch(world, sent, "right after STOPPED").await);
    }
    let mut acked = write_destination(world, &topic).await;
    world.note(&format!(
        "{} records acknowledged by the destination",
        acked.len()
    ));
    acked.extend(raced.iter().cloned());
    world.destination_acks.push((topic.clone(), acked));
    world.kill_destination();
    check_destination_acks(world).await;
    if let Some(sent) = &last_source_batch {
        replayed.extend(resend_source_batch(world, sent, "after a restart").await);
    }

    // The source's own acknowledged records survived its crashes.
    let source_acks = source_acks.lock().expect("acks").clone();
    let mut lost = Vec::new();
    for p in 0..PARTITIONS {
        let values = segment_values(&world.source.log_bytes(&topic, p));
        for a in source_acks.iter().filter(|a| a.partition == p) {
            world.records_checked += 1;
            if values.get(&a.offset) != Some(&a.value) {
                lost.push(format!("{p}@{} {:?}", a.offset, a.value));
            }
        }
    }
    if !lost.is_empty() {
        let count = lost.len();
        lost.truncate(5);
        world.violation(format!(
            "{topic}: {count} records the source acknowledged are not in its log: {}",
            lost.join("; ")
        ));
    }
    for p in 0..PARTITIONS {
        let expected = caught_up.then(|| source_lsos[p as usize]);
        let mirrored = check_segments(world, &topic, p, expected);
        world.records_checked += mirrored;
        for (offset, when) in replayed.iter().filter(|(o, _)| o.0 == p) {
            if offset.1 <= mirrored as i64 {
                world.violation(format!(
                    "{topic}-{p}: the source producer's last batch, sent again to the \
                     destination {when}, was acknowledged at offset {} before the \
                     MIRROR_PID_RESET barrier at {mirrored}: producer state from before the \
                     barrier survived it",
                    offset.1
                ));
            }
        }
        let early: Vec<&Acked> = raced
            .iter()
            .filter(|a| a.partition == p && (a.offset as u64) <= mirrored)
            .collect();
        if !early.is_empty() {
            world.violation(format!(
                "{topic}-{p}: the destination acknowledged writes at or before its \
                 MIRROR_PID_RESET barrier at {mirrored}, i.e. before STOPPED: {early:?}"
            ));
        }
    }
    // Fences and aborts the dangling transaction, so the source's LSO moves on.
    let _ = dangling.fence().await;
    if !kafka && world.rng.chance(40) {
        fail_back(world, &topic).await;
    }
    world.check_metric();
    world.check_logs();
}

/// Which cluster a run mirrors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SourceKind {
    Kmirror,
    Kafka,
}

/// The seed (`NEMESIS_SEED`, else the clock; printed first, so a run can be replayed) and the
/// cycle count (`NEMESIS_CYCLES`, 3).
fn schedule() -> (u64, u32) {
    let seed = std::env::var("NEMESIS_SEED")
        .ok()
        .map(|s| s.parse().expect("NEMESIS_SEED is a number"))
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_nanos() as u64
        });
    let cycles: u32 = std::env::var("NEMESIS_CYCLES")
        .ok()
        .map(|s| s.parse().expect("NEMESIS_CYCLES is a number"))
        .unwrap_or(3);
    println!("NEMESIS_SEED={seed}");
    eprintln!("NEMESIS_SEED={seed}");
    (seed, cycles)
}

/// A name for this run's topics, unique across runs against one long-lived Kafka (process ids
/// are reused: the time too).
fn run_name(kind: SourceKind) -> String {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() % 1_000_000_000);
    match kind {
        SourceKind::Kmirror => format!("{}-{stamp}", std::process::id()),
        SourceKind::Kafka => format!("kafka-{}-{stamp}", std::process::id()),
    }
}

/// Held by a run with Apache Kafka as its source: the proxy takes Kafka's one REMOTE port.
static KAFKA_REMOTE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A whole run: the seed and cycle count from the environment, the brokers, the cycles, the
/// summary line, and a failure listing every violation.
async fn run(kind: SourceKind) {
    let (seed, cycles) = schedule();

    let (dir_s, dir_d) = (
        tempfile::tempdir().expect("temp dir"),
        tempfile::tempdir().expect("temp dir"),
    );
    let (port_s, port_d, port_m) = (free_port(), free_port(), free_port());
    let (source, proxy, proxy_address) = match kind {
        SourceKind::Kmirror => {
            let proxy_address = format!("127.0.0.1:{}", free_port());
            let proxy = FaultProxy::start(&proxy_address, &format!("127.0.0.1:{port_s}"));
            // The source advertises the proxy: the mirror's metadata sends every fetch through
            // it.
            let source = Broker::start(
                "source",
                dir_s.path(),
                port_s,
                &format!(
                    "advertised.listeners=PLAINTEXT://{proxy_address}\n\
                     auto.create.topics.enable=false\nlog.roll.ms=1000\n"
                ),
            );
            (Source::Kmirror(source), proxy, proxy_address)
        }
        SourceKind::Kafka => {
            // scripts/kafka-local.sh's REMOTE listener advertises a port nothing listens on:
            // the proxy takes it, so clients of REMOTE stay behind the proxy after metadata.
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
    let metrics = format!("127.0.0.1:{port_m}");
    let destination = Broker::start(
        "destination",
        dir_d.path(),
        port_d,
        // Small segments (rolled by age, as segment.bytes may not go below 1 MiB), rolled
        // elsewhere than the source's: truncation and recovery cross segment files.
        &format!(
            "metrics.listener=http://{metrics}\nauto.create.topics.enable=false\n\
             log.roll.ms=1700\n"
        ),
    );
    let mirror_config = dir_d.path().join("m.properties");
    std::fs::write(
        &mirror_config,
        format!("bootstrap.servers={proxy_address}\n"),
    )
    .expect("mirror config written");
    let (code, text) = mirrors_cli(
        &destination.address(),
        &[
            "--create",
            "--mirror",
            MIRROR,
            "--mirror-config",
            mirror_config.to_str().expect("a UTF-8 path"),
        ],
    )
    .await;
    assert_eq!(code, Some(0), "kmirror mirrors --create: {text}");

    let mut world = World {
        seed,
        cycle: 0,
        rng: Rng(seed),
        source,
        destination,
        proxy,
        metrics,
        metric_reported: 0.0,
        logs_seen: [0, 0],
        violations: Vec::new(),
        faults: BTreeMap::new(),
        records_checked: 0,
        destination_acks: Vec::new(),
        samples: BTreeMap::new(),
        back_created: false,
        failbacks: 0,
        failovers_back: 0,
    };
    let run = run_name(kind);
    let started = Instant::now();
    for c in 1..=cycles {
        world.cycle = c;
        cycle(&mut world, &run).await;
        world.heal();
    }
    // Otherwise the proxy's faults would have tested nothing.
    let connections = world.proxy.connections();
    if connections == 0 {
        world.violation(
            "harness: no connection crossed the fault proxy: the mirror bypasses it".into(),
        );
    }
    let faults: Vec<String> = world
        .faults
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let kinds: BTreeSet<&str> = world.faults.keys().copied().collect();
    let summary = format!(
        "NEMESIS_SUMMARY source={kind:?} seed={seed} cycles={cycles} elapsed={:.0}s faults[{}] ({} kinds) \
         failbacks={} failovers_back={} proxy_connections={} records_checked={} samples={:?} \
         violations={}",
        started.elapsed().as_secs_f64(),
        faults.join(" "),
        kinds.len(),
        world.failbacks,
        world.failovers_back,
        connections,
        world.records_checked,
        world.samples,
        world.violations.len()
    );
    println!("{summary}");
    eprintln!("{summary}");
    if !world.violations.is_empty() {
        // The brokers' logs and data explain a violation: kept, not deleted with the run.
        for (name, dir) in [("source", dir_s), ("destination", dir_d)] {
            eprintln!(
                "kept the {name}'s directory (broker.log): {}",
                dir.keep().display()
            );
        }
    }
    assert!(
        world.violations.is_empty(),
        "{} violations (replay with NEMESIS_SEED={seed}):\n{}",
        world.violations.len(),
        world.violations.join("\n")
    );
}

/// The nemesis over two `kmirror broker` processes (see the module docs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_quorum_survives_the_nemesis() {
    quorum::run().await;
}

/// The nemesis of replication: three processes, RF=3, acks=all writers and Kafka's
/// VerifiableProducer (see `replication.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn replication_survives_the_nemesis() {
    replication::run().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_survives_the_nemesis() {
    run(SourceKind::Kmirror).await;
}

/// The failover nemesis with a destination cluster of three processes (see `cluster.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_to_a_cluster_survives_the_nemesis() {
    cluster::run(SourceKind::Kmirror).await;
}

/// The nemesis with Apache Kafka as the source: the destination crashes, freezes and is cut off
/// from Kafka by the proxy; Kafka itself is never crashed (other tests share it) and there is no
/// failback (Kafka cannot mirror).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn failover_from_apache_kafka_survives_the_nemesis() {
    let _remote = KAFKA_REMOTE.lock().await;
    run(SourceKind::Kafka).await;
}

/// The cluster nemesis with Apache Kafka as the source (no failback: Kafka cannot mirror).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn failover_from_apache_kafka_to_a_cluster_survives_the_nemesis() {
    let _remote = KAFKA_REMOTE.lock().await;
    cluster::run(SourceKind::Kafka).await;
}

/// The segment checker itself: it must see what it is there to see.
#[cfg(test)]
mod checker {
    use super::compare_segments;
    use kmirror_protocol::records::{ControlBatchHeader, ControlRecord};
    use kmirror_protocol::testing::BatchSpec;

    fn batch(base_offset: i64, producer_id: i64, transactional: bool) -> Vec<u8> {
        BatchSpec {
            base_offset,
            producer_id,
            producer_epoch: if producer_id < 0 { -1 } else { 0 },
            base_sequence: if producer_id < 0 { -1 } else { 0 },
            transactional,
            records: 4,
            ..BatchSpec::default()
        }
        .build()
        .to_vec()
    }

    fn marker(offset: i64, producer_id: i64) -> Vec<u8> {
        ControlRecord::EndTxn {
            commit: true,
            coordinator_epoch: 0,
        }
        .to_batch(&ControlBatchHeader {
            base_offset: offset,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch: 0,
            timestamp_ms: 0,
        })
        .expect("encodes")
        .to_vec()
    }

    fn barrier(offset: i64) -> Vec<u8> {
        ControlRecord::MirrorPidReset {
            source_cluster_id: "src".into(),
        }
        .to_batch(&ControlBatchHeader::without_producer(offset, 1, 0))
        .expect("encodes")
        .to_vec()
    }

    /// Source: plain [0,4), a committed transaction [4,8)+marker 8, an open one at 9.
    fn source() -> Vec<u8> {
        [
            batch(0, -1, false),
            batch(4, 7, true),
            marker(8, 7),
            batch(9, 8, true),
        ]
        .concat()
    }

    #[test]
    fn a_faithful_failover_passes() {
        let src = source();
        let mirrored = src.len() - batch(9, 8, true).len();
        let dst = [&src[..mirrored], &barrier(9)[..], &batch(10, -1, false)[..]].concat();
        assert_eq!(compare_segments("t-0", &src, &dst, Some(9)), (9, vec![]));
    }

    #[test]
    fn changed_bytes_a_missing_barrier_and_a_kept_open_transaction_are_caught() {
        let src = source();
        let mirrored = src.len() - batch(9, 8, true).len();
        let mut flipped = [&src[..mirrored], &barrier(9)[..]].concat();
        flipped[30] ^= 1;
        let (_, wrong) = compare_segments("t-0", &src, &flipped, Some(9));
        assert!(wrong.iter().any(|w| w.contains("offset 0")), "{wrong:?}");

        let (_, wrong) = compare_segments("t-0", &src, &src[..mirrored], Some(9));
        assert!(wrong[0].contains("no MIRROR_PID_RESET"), "{wrong:?}");

        let kept = [&src[..], &barrier(13)[..]].concat();
        let (stop, wrong) = compare_segments("t-0", &src, &kept, Some(9));
        assert_eq!(stop, 13);
        assert!(wrong.iter().any(|w| w.contains("were kept")), "{wrong:?}");
        assert!(
            wrong.iter().any(|w| w.contains("transactions open")),
            "{wrong:?}"
        );

        let short = [&src[..batch(0, -1, false).len()], &barrier(4)[..]].concat();
        let (_, wrong) = compare_segments("t-0", &src, &short, Some(9));
        assert!(wrong.iter().any(|w| w.contains("missing")), "{wrong:?}");
    }
}
