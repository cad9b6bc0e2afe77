//! The engine's behaviour suite, written once against [`Harness`]: two clusters, A (the source
//! at first) and B (the destination), each running the engine over some host. The in-memory
//! host runs it in this crate's tests; kmirror's broker runs the same scenarios over its
//! adapter (the workspace's `tests/mirroring/scenarios.rs`).
//!
//! Every scenario checks what a user of the cluster sees: the bytes of the mirrored logs, the
//! states DescribeMirrors shows, whether a producer is refused, the offsets after a failover.
//!
//! - [`create_and_start`]: a mirror created on B, a topic started, its partitions MIRRORING and
//!   B's logs byte-identical to A's, read-only to producers;
//! - [`pause_and_resume`]: PAUSED stops copying, resume copies what was missed;
//! - [`stop_with_the_source_gone`]: the source unreachable, the stop still reaches STOPPED, the
//!   topic takes writes, nothing mirrored is lost;
//! - [`failback`]: after a stop, A mirrors back from B: A's log is cut back to the last
//!   mirrored epoch and then equals B's, writes made on B after the stop included;
//! - [`restart_resumes_from_the_state_topic`]: B's engine restarted mid-mirroring and after a
//!   stop: each partition resumes in the state `__mirror_state` holds;
//! - [`source_unreachable_then_back`]: the partitions wait while the source is gone (nothing
//!   is truncated) and catch up when it answers again;
//! - [`leadership_moves`]: a destination leader epoch bumped by someone else, and the
//!   mirroring goes on and stays byte-identical;
//! - [`topics_by_pattern`]: a mirror with `topics.include` / `topics.exclude` starts the source
//!   topics they select by itself, and no other.
//!
//! - [`request_rules`]: the KIP's request rules and their error codes, as StartMirrorTopics
//!   and Stop/Pause/ResumeMirrorTopics answer them per topic: internal topics, bad patterns,
//!   pause/resume/stop legality, topics outside the mirror, authorization, and the confirmed
//!   discard of a stopped topic's local writes on restart.
//!
//! - [`changes_race`]: a pause sent together with a stop: whichever is refused never lands,
//!   and the topic ends stopped with the `mirror.name` a stop writes.
//!
//! [`failback`] also checks the truncation report: the records A's failback removed, as
//! DescribeMirrors shows them.

use crate::engine::Engine;
use crate::engine::describe::{DescribeMirror, PartitionView};
use crate::engine::stats::Truncated;
use crate::engine::system::LoadMirror;
use crate::engine::topics::{ChangeTopic, StartTopic};
use crate::partition::Desired;
use crate::policy::MirrorError;
use kmirror_protocol::state::MirrorState;
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

mod requests;
pub use requests::{changes_race, request_rules};

/// One of the two clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The source at first.
    A,
    /// The destination at first.
    B,
}

/// Two clusters running the engine, as a scenario drives them.
pub trait Harness {
    /// The engine of a cluster (a new handle after [`Harness::restart`]).
    fn engine(&self, side: Side) -> Engine;
    /// A cluster's id.
    fn cluster_id(&self, side: Side) -> String;
    /// Where the other cluster's clients reach it (its `bootstrap.servers`).
    fn address(&self, side: Side) -> String;
    /// CreateMirror on a cluster.
    fn create_mirror(&self, side: Side, name: &str, configs: BTreeMap<String, String>);
    /// Creates a plain topic.
    fn create_topic(&self, side: Side, topic: &str, partitions: i32);
    /// A producer's batch of `records` records to a partition, or why it was refused.
    fn produce(
        &self,
        side: Side,
        topic: &str,
        partition: i32,
        records: usize,
    ) -> Result<(), String>;
    /// The partition's record batches, back to back.
    fn log_bytes(&self, side: Side, topic: &str, partition: i32) -> Vec<u8>;
    /// The partition's log end offset (-1 when the cluster has no such partition).
    fn log_end(&self, side: Side, topic: &str, partition: i32) -> i64;
    /// Restarts a cluster's engine (and broker) from its durable state.
    fn restart(&mut self, side: Side) -> impl Future<Output = ()>;
    /// Makes a cluster unreachable to the other one's clients, or reachable again.
    fn set_reachable(&mut self, side: Side, reachable: bool) -> impl Future<Output = ()>;
    /// BumpLeaderEpochs on a partition from outside the engine (a controller's leader change).
    fn bump_leader_epoch(
        &self,
        side: Side,
        topic: &str,
        partition: i32,
    ) -> impl Future<Output = ()>;
    /// Stops both clusters (their engines, listeners, logs).
    fn shut(self) -> impl Future<Output = ()>;
}

/// One `#[tokio::test]` per scenario of this suite, each on a fresh harness that `$make` (an
/// expression, `.await` allowed) builds and [`Harness::shut`] stops: how each host runs the
/// suite.
#[macro_export]
macro_rules! scenario_tests {
    ($make:expr) => {
        $crate::scenario_tests!(@each $make;
            create_and_start,
            pause_and_resume,
            stop_with_the_source_gone,
            failback,
            restart_resumes_from_the_state_topic,
            source_unreachable_then_back,
            leadership_moves,
            topics_by_pattern,
            request_rules,
            changes_race,
        );
    };
    (@each $make:expr; $($name:ident,)+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                use $crate::scenarios::Harness as _;
                let mut harness = $make;
                $crate::scenarios::$name(&mut harness).await;
                harness.shut().await;
            }
        )+
    };
}

/// How long a scenario waits for the engine to get somewhere.
const PATIENCE: Duration = Duration::from_secs(30);

/// A mirror's configs for a source at `source` with cluster id `source_id`.
fn mirror_configs(source: &str, source_id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("bootstrap.servers".to_string(), source.to_string()),
        (
            "mirror.source.cluster.id".to_string(),
            source_id.to_string(),
        ),
    ])
}

/// A mirror on `to` of the cluster `from`.
fn mirror_from(h: &impl Harness, to: Side, from: Side, name: &str) {
    h.create_mirror(
        to,
        name,
        mirror_configs(&h.address(from), &h.cluster_id(from)),
    );
}

/// The engine's answer to `request`, asked again while it answers COORDINATOR_NOT_AVAILABLE
/// (`__mirror_state` being created).
async fn ask_ok<M: crate::engine::EngineRequest + Clone>(engine: &Engine, request: M) -> M::Answer {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match engine.ask(request.clone()).await {
            Ok(answer) => return answer,
            Err(e) if tokio::time::Instant::now() < deadline && retriable(&e) => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("the engine refused: {e}"),
        }
    }
}

fn retriable(e: &MirrorError) -> bool {
    e.code == kmirror_protocol::errors::ErrorCode::COORDINATOR_NOT_AVAILABLE
}

/// Loads the mirror and starts `topic` from its source.
async fn start(h: &impl Harness, side: Side, mirror: &str, topic: &str) {
    let engine = h.engine(side);
    ask_ok(&engine, LoadMirror(mirror.to_string())).await;
    ask_ok(
        &engine,
        StartTopic {
            mirror: mirror.to_string(),
            topic: topic.to_string(),
            confirmed: Default::default(),
        },
    )
    .await;
}

async fn change(h: &impl Harness, side: Side, mirror: &str, topic: &str, desired: Desired) {
    let engine = h.engine(side);
    ask_ok(&engine, LoadMirror(mirror.to_string())).await;
    ask_ok(
        &engine,
        ChangeTopic {
            mirror: mirror.to_string(),
            topic: topic.to_string(),
            desired,
            cut_timestamp_ms: None,
        },
    )
    .await;
}

/// What DescribeMirrors shows for `topic`'s partitions on `side`, by partition.
async fn described(h: &impl Harness, side: Side, mirror: &str, topic: &str) -> Vec<PartitionView> {
    let engine = h.engine(side);
    let Ok(()) = engine.ask(LoadMirror(mirror.to_string())).await else {
        return Vec::new();
    };
    let Ok(topics) = engine
        .ask(DescribeMirror(mirror.to_string(), Default::default()))
        .await
    else {
        return Vec::new();
    };
    topics
        .into_iter()
        .filter(|t| t.topic == topic)
        .flat_map(|t| t.partitions)
        .collect()
}

/// The states DescribeMirrors shows for `topic`'s partitions on `side`, by partition.
async fn states(h: &impl Harness, side: Side, mirror: &str, topic: &str) -> Vec<MirrorState> {
    described(h, side, mirror, topic)
        .await
        .into_iter()
        .map(|p| p.snapshot.state)
        .collect()
}

/// Waits until every partition of `topic` on `side` shows `state` (and there are `count`).
async fn until_state(
    h: &impl Harness,
    side: Side,
    mirror: &str,
    topic: &str,
    count: usize,
    state: MirrorState,
) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let now = states(h, side, mirror, topic).await;
        if now.len() == count && now.iter().all(|s| *s == state) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{topic} on {side:?} is {now:?}, not {count} x {state}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `topic`'s partitions on `to` hold exactly what they hold on `from`.
async fn until_identical(h: &impl Harness, from: Side, to: Side, topic: &str, partitions: i32) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let same = (0..partitions).all(|p| {
            let source = h.log_bytes(from, topic, p);
            !source.is_empty() && source == h.log_bytes(to, topic, p)
        });
        if same {
            return;
        }
        let ends: Vec<(i64, i64)> = (0..partitions)
            .map(|p| (h.log_end(from, topic, p), h.log_end(to, topic, p)))
            .collect();
        assert!(
            tokio::time::Instant::now() < deadline,
            "{topic}: {to:?} never equalled {from:?} (log ends {ends:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn produce_all(h: &impl Harness, side: Side, topic: &str, partitions: i32, batches: usize) {
    for round in 0..batches {
        for p in 0..partitions {
            h.produce(side, topic, p, 1 + round % 5)
                .unwrap_or_else(|e| panic!("producing to {topic}-{p} on {side:?}: {e}"));
        }
    }
}

/// A mirror created on B, a topic started: MIRRORING, byte-identical, read-only.
pub async fn create_and_start(h: &mut impl Harness) {
    h.create_topic(Side::A, "orders", 3);
    produce_all(h, Side::A, "orders", 3, 20);
    mirror_from(h, Side::B, Side::A, "dr");
    start(h, Side::B, "dr", "orders").await;
    until_state(h, Side::B, "dr", "orders", 3, MirrorState::Mirroring).await;
    until_identical(h, Side::A, Side::B, "orders", 3).await;
    produce_all(h, Side::A, "orders", 3, 10);
    until_identical(h, Side::A, Side::B, "orders", 3).await;
    let refused = h.produce(Side::B, "orders", 0, 1);
    assert!(refused.is_err(), "a mirror topic refuses producers");
}

/// PAUSED copies nothing; resumed, it copies what it missed.
pub async fn pause_and_resume(h: &mut impl Harness) {
    h.create_topic(Side::A, "clicks", 2);
    produce_all(h, Side::A, "clicks", 2, 5);
    mirror_from(h, Side::B, Side::A, "dr");
    start(h, Side::B, "dr", "clicks").await;
    until_identical(h, Side::A, Side::B, "clicks", 2).await;
    change(h, Side::B, "dr", "clicks", Desired::Paused).await;
    until_state(h, Side::B, "dr", "clicks", 2, MirrorState::Paused).await;
    let paused_at: Vec<i64> = (0..2).map(|p| h.log_end(Side::B, "clicks", p)).collect();
    produce_all(h, Side::A, "clicks", 2, 5);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let still: Vec<i64> = (0..2).map(|p| h.log_end(Side::B, "clicks", p)).collect();
    assert_eq!(still, paused_at, "a paused mirror copies nothing");
    change(h, Side::B, "dr", "clicks", Desired::Mirroring).await;
    until_state(h, Side::B, "dr", "clicks", 2, MirrorState::Mirroring).await;
    until_identical(h, Side::A, Side::B, "clicks", 2).await;
}

/// The source gone, a stop still completes; the topic takes writes and keeps what it copied.
pub async fn stop_with_the_source_gone(h: &mut impl Harness) {
    h.create_topic(Side::A, "payments", 2);
    produce_all(h, Side::A, "payments", 2, 10);
    mirror_from(h, Side::B, Side::A, "dr");
    start(h, Side::B, "dr", "payments").await;
    until_identical(h, Side::A, Side::B, "payments", 2).await;
    let copied: Vec<Vec<u8>> = (0..2)
        .map(|p| h.log_bytes(Side::B, "payments", p))
        .collect();
    h.set_reachable(Side::A, false).await;
    change(h, Side::B, "dr", "payments", Desired::Stopped).await;
    until_state(h, Side::B, "dr", "payments", 2, MirrorState::Stopped).await;
    for (p, before) in (0..).zip(&copied) {
        let after = h.log_bytes(Side::B, "payments", p);
        assert!(
            after.starts_with(before),
            "payments-{p}: what was mirrored stays after the stop"
        );
    }
    h.produce(Side::B, "payments", 0, 3)
        .expect("a stopped topic takes writes");
    h.set_reachable(Side::A, true).await;
}

/// After a stop on B, A mirrors back from B: A's log is cut back to what both share and then
/// equals B's, B's own writes since the stop included.
pub async fn failback(h: &mut impl Harness) {
    h.create_topic(Side::A, "ledger", 1);
    produce_all(h, Side::A, "ledger", 1, 10);
    mirror_from(h, Side::B, Side::A, "dr");
    start(h, Side::B, "dr", "ledger").await;
    until_identical(h, Side::A, Side::B, "ledger", 1).await;
    change(h, Side::B, "dr", "ledger", Desired::Stopped).await;
    until_state(h, Side::B, "dr", "ledger", 1, MirrorState::Stopped).await;
    // Both sides write after the failover: A's writes diverge and must go.
    h.produce(Side::A, "ledger", 0, 4)
        .expect("A still takes writes");
    h.produce(Side::B, "ledger", 0, 6)
        .expect("B takes writes once stopped");
    mirror_from(h, Side::A, Side::B, "back");
    start(h, Side::A, "back", "ledger").await;
    until_state(h, Side::A, "back", "ledger", 1, MirrorState::Mirroring).await;
    until_identical(h, Side::B, Side::A, "ledger", 1).await;
    // The report names what the failback cut: A's 4 records, nothing at B's stop.
    let truncated: Vec<Truncated> = described(h, Side::A, "back", "ledger")
        .await
        .iter()
        .map(|p| p.truncated)
        .collect();
    assert_eq!(
        truncated,
        [Truncated {
            at_stop: 0,
            at_start: 4
        }]
    );
    let at_stop: Vec<Truncated> = described(h, Side::B, "dr", "ledger")
        .await
        .iter()
        .map(|p| p.truncated)
        .collect();
    assert_eq!(
        at_stop,
        [Truncated::default()],
        "no open transaction at the stop"
    );
}

/// `topics.include` starts the source topics it matches within a metadata refresh, without a
/// command, and `topics.exclude` keeps some out; a topic created on the source later follows.
pub async fn topics_by_pattern(h: &mut impl Harness) {
    h.create_topic(Side::A, "inv-east", 2);
    h.create_topic(Side::A, "inv-secret", 1);
    h.create_topic(Side::A, "other", 1);
    produce_all(h, Side::A, "inv-east", 2, 5);
    produce_all(h, Side::A, "inv-secret", 1, 5);
    let mut configs = mirror_configs(&h.address(Side::A), &h.cluster_id(Side::A));
    configs.insert("topics.include".into(), "inv-.*".into());
    configs.insert("topics.exclude".into(), "inv-secret".into());
    h.create_mirror(Side::B, "auto", configs);
    until_state(h, Side::B, "auto", "inv-east", 2, MirrorState::Mirroring).await;
    until_identical(h, Side::A, Side::B, "inv-east", 2).await;
    h.create_topic(Side::A, "inv-west", 1);
    produce_all(h, Side::A, "inv-west", 1, 3);
    until_state(h, Side::B, "auto", "inv-west", 1, MirrorState::Mirroring).await;
    until_identical(h, Side::A, Side::B, "inv-west", 1).await;
    for left_out in ["inv-secret", "other"] {
        assert!(
            states(h, Side::B, "auto", left_out).await.is_empty(),
            "{left_out} is not selected"
        );
        assert_eq!(
            h.log_end(Side::B, left_out, 0),
            -1,
            "{left_out} was created on B"
        );
    }
}

/// B's engine restarted while mirroring, and again after a stop: each partition resumes in the
/// state `__mirror_state` holds.
pub async fn restart_resumes_from_the_state_topic(h: &mut impl Harness) {
    h.create_topic(Side::A, "events", 2);
    produce_all(h, Side::A, "events", 2, 10);
    mirror_from(h, Side::B, Side::A, "dr");
    start(h, Side::B, "dr", "events").await;
    until_identical(h, Side::A, Side::B, "events", 2).await;
    h.restart(Side::B).await;
    until_state(h, Side::B, "dr", "events", 2, MirrorState::Mirroring).await;
    produce_all(h, Side::A, "events", 2, 5);
    until_identical(h, Side::A, Side::B, "events", 2).await;
    change(h, Side::B, "dr", "events", Desired::Stopped).await;
    until_state(h, Side::B, "dr", "events", 2, MirrorState::Stopped).await;
    let stopped: Vec<i64> = (0..2).map(|p| h.log_end(Side::B, "events", p)).collect();
    h.restart(Side::B).await;
    until_state(h, Side::B, "dr", "events", 2, MirrorState::Stopped).await;
    let after: Vec<i64> = (0..2).map(|p| h.log_end(Side::B, "events", p)).collect();
    assert_eq!(after, stopped, "a restart after the stop truncates nothing");
    h.produce(Side::B, "events", 1, 2)
        .expect("still writable after the restart");
}

/// While the source is gone nothing is truncated; when it answers again the mirror catches up.
pub async fn source_unreachable_then_back(h: &mut impl Harness) {
    h.create_topic(Side::A, "metrics", 2);
    produce_all(h, Side::A, "metrics", 2, 5);
    mirror_from(h, Side::B, Side::A, "dr");
    start(h, Side::B, "dr", "metrics").await;
    until_identical(h, Side::A, Side::B, "metrics", 2).await;
    h.set_reachable(Side::A, false).await;
    let before: Vec<Vec<u8>> = (0..2).map(|p| h.log_bytes(Side::B, "metrics", p)).collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during: Vec<Vec<u8>> = (0..2).map(|p| h.log_bytes(Side::B, "metrics", p)).collect();
    assert_eq!(during, before, "nothing changes while the source is gone");
    h.set_reachable(Side::A, true).await;
    produce_all(h, Side::A, "metrics", 2, 5);
    until_identical(h, Side::A, Side::B, "metrics", 2).await;
    until_state(h, Side::B, "dr", "metrics", 2, MirrorState::Mirroring).await;
}

/// A destination leader epoch bumped by the controller (a leader change) while mirroring: the
/// partition takes the new epoch and the copy stays byte-identical.
pub async fn leadership_moves(h: &mut impl Harness) {
    h.create_topic(Side::A, "audit", 2);
    produce_all(h, Side::A, "audit", 2, 5);
    mirror_from(h, Side::B, Side::A, "dr");
    start(h, Side::B, "dr", "audit").await;
    until_identical(h, Side::A, Side::B, "audit", 2).await;
    h.bump_leader_epoch(Side::B, "audit", 0).await;
    produce_all(h, Side::A, "audit", 2, 5);
    until_identical(h, Side::A, Side::B, "audit", 2).await;
    until_state(h, Side::B, "dr", "audit", 2, MirrorState::Mirroring).await;
}
