//! The fetcher pool over an in-memory destination and source on paused time: what a partition
//! hears from it (failures) and what lands in its log (appends), around leader lookups and
//! detaches.

use super::*;
use crate::engine::fetch_lanes::FetchLanes;
use crate::host::Host;
use crate::memory::{MemoryCluster, MemoryNetwork};
use kmirror_protocol::client::ClientConfig;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use uuid::Uuid;

/// Stands in for a partition actor: collects what the pool and its fetchers report.
struct Reports(Rc<RefCell<Vec<FetcherProgress>>>);

impl Actor for Reports {
    type Context = Context<Self>;
}

impl Handler<FetcherProgress> for Reports {
    type Result = ();

    fn handle(&mut self, msg: FetcherProgress, _: &mut Context<Self>) {
        self.0.borrow_mut().push(msg);
    }
}

/// A source cluster and a destination cluster on one network, the destination mirroring topic
/// [`TOPIC`] through `pool`, whose reports to the partition go to `reports`.
struct Setup {
    network: MemoryNetwork,
    source: MemoryCluster,
    destination: MemoryCluster,
    pool: Addr<FetcherPool<MemoryCluster>>,
    /// The destination topic's id.
    id: Uuid,
    reports: Rc<RefCell<Vec<FetcherProgress>>>,
}

const TOPIC: &str = "t";

fn key() -> TopicPartition {
    TopicPartition::new(TOPIC, 0)
}

/// The [`Setup`] of a one-partition destination topic with id `id`, led here at epoch 0; the
/// source has no topic yet.
async fn setup(id: Uuid) -> Setup {
    let network = MemoryNetwork::default();
    let source = network.cluster("src");
    let destination = network.cluster("dst");
    destination
        .create_topic(TOPIC, 1, BTreeMap::new(), Some(id))
        .await
        .expect("destination topic");
    let client = || {
        Arc::new(
            destination
                .connect_source(ClientConfig::plaintext(&source.address()))
                .expect("source client"),
        )
    };
    let lanes = FetchLanes::new(
        destination.clone(),
        ClientConfig::plaintext(&source.address()),
    )
    .expect("lanes");
    let pool = FetcherPool::new(
        destination.clone(),
        client(),
        Arc::new(lanes),
        Arc::new(MirrorStats::new("m")),
        FetchSettings::default(),
        Arc::new(Throttle::new(None)),
        SourceClusterId::default(),
    )
    .start();
    Setup {
        network,
        source,
        destination,
        pool,
        id,
        reports: Rc::default(),
    }
}

impl Setup {
    /// Attaches the partition, as its actor does (without waiting for the leader lookup).
    fn attach(&self) {
        self.attach_incarnation(self.id);
    }

    /// Attaches the partition as an actor of the topic with id `topic_id` would.
    fn attach_incarnation(&self, topic_id: Uuid) {
        let progress = Reports(self.reports.clone()).start().recipient();
        self.pool.do_send(Attach {
            key: key(),
            progress,
            epochs: crate::actor::FetchEpochs {
                topic_id,
                source: -1,
                destination: 0,
            },
        });
    }

    /// The source topic, with id `id` and 5 records.
    async fn source_with_records(&self, id: Uuid) {
        self.source
            .create_topic(TOPIC, 1, BTreeMap::new(), Some(id))
            .await
            .expect("source topic");
        self.source.produce(TOPIC, 0, 5).expect("produced");
    }

    /// Detaches the partition while an apply of its 5 records is held, then releases it
    /// (`release`): the Detach completes only after that append.
    async fn held_apply_lands_before_the_detach(&self, release: tokio::sync::oneshot::Sender<()>) {
        let detached_at = Rc::new(RefCell::new(None));
        let (done, detach) = tokio::sync::oneshot::channel();
        self.pool.do_send(Detach {
            key: key(),
            topic_id: self.id,
            done,
        });
        let (at, destination) = (detached_at.clone(), self.destination.clone());
        actix::spawn(async move {
            detach.await.expect("detached");
            *at.borrow_mut() = Some(destination.log_end(TOPIC, 0));
        });
        pause(500).await;
        assert_eq!(*detached_at.borrow(), None, "done with an apply in flight");
        let _ = release.send(());
        pause(500).await;
        assert_eq!(
            self.destination.log_end(TOPIC, 0),
            5,
            "the held apply appended"
        );
        assert_eq!(
            *detached_at.borrow(),
            Some(5),
            "the log end when the Detach completed: an append landed after it"
        );
    }

    /// The failures reported so far.
    fn failures(&self) -> Vec<Cause> {
        self.reports
            .borrow()
            .iter()
            .filter_map(|p| match p {
                FetcherProgress(Err(cause)) => Some(cause.clone()),
                _ => None,
            })
            .collect()
    }
}

/// A [`Setup`] whose source has 5 records, the partition attached, and its first apply held
/// until the returned sender fires.
async fn with_an_apply_held(id: Uuid) -> (Setup, tokio::sync::oneshot::Sender<()>) {
    let s = setup(id).await;
    s.source_with_records(id).await;
    let release = s.destination.hold_next_lease(TOPIC, 0);
    s.attach();
    pause(100).await;
    assert_eq!(s.destination.log_end(TOPIC, 0), 0, "the apply is held");
    (s, release)
}

async fn pause(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Engine review finding 10: a lookup that finds no source leader moves the partition off its
/// fetcher without waiting, and an apply still in flight there must not land after the
/// partition's Detach completed (STOPPING cuts the log to its LSO right after it). Failed
/// before the fix: the Detach waited only on the fetcher the partition was then on (none), and
/// the held apply appended the records after it.
#[actix_rt::test]
async fn no_append_lands_after_a_detach_from_the_previous_fetcher() {
    tokio::time::pause();
    let (s, release) = with_an_apply_held(Uuid::from_u128(7)).await;
    // The source stops answering: attached again once its leaders are stale, the partition
    // waits on no fetcher while the old one still applies.
    s.network.set_reachable(&s.source.address(), false);
    pause(600).await;
    s.attach();
    pause(100).await;
    s.held_apply_lands_before_the_detach(release).await;
}

/// An attachment of a former incarnation of the topic (deleted and created again under its name
/// while its actor still fetched) appends nothing to the topic there now.
#[actix_rt::test]
async fn an_answer_for_a_former_incarnation_is_not_applied() {
    tokio::time::pause();
    let id = Uuid::from_u128(6);
    let s = setup(id).await;
    s.source_with_records(id).await;
    s.attach_incarnation(Uuid::from_u128(5));
    pause(1000).await;
    assert_eq!(
        s.destination.log_end(TOPIC, 0),
        0,
        "applied to another topic"
    );
    s.attach();
    pause(1000).await;
    assert_eq!(
        s.destination.log_end(TOPIC, 0),
        5,
        "the topic's own actor mirrors"
    );
}

/// A released actor's late Detach (its topic deleted and created again, the new actor attached
/// meanwhile) leaves the new incarnation attached: it goes on mirroring.
#[actix_rt::test]
async fn a_detach_of_a_former_incarnation_leaves_the_new_one_attached() {
    tokio::time::pause();
    let id = Uuid::from_u128(4);
    let s = setup(id).await;
    s.source_with_records(id).await;
    s.attach();
    let (done, detached) = tokio::sync::oneshot::channel();
    s.pool.do_send(Detach {
        key: key(),
        topic_id: Uuid::from_u128(3),
        done,
    });
    detached.await.expect("answered");
    pause(1000).await;
    assert_eq!(
        s.destination.log_end(TOPIC, 0),
        5,
        "the new incarnation mirrors"
    );
}

/// Engine review finding 11: a source whose metadata lags (a ZooKeeper-mode broker) does not
/// know a topic it has; one lookup that misses it is asked again a second later, so the
/// partition only retries (its actor attaches again after its backoff) and then mirrors.
/// Failed before the fix: the first lookup failed the partition for good as deleted.
#[actix_rt::test]
async fn a_topic_only_the_first_lookup_misses_is_retried_and_mirrored() {
    tokio::time::pause();
    let id = Uuid::from_u128(8);
    let s = setup(id).await;
    s.attach();
    pause(500).await;
    s.source_with_records(id).await;
    pause(1000).await;
    let failures = s.failures();
    assert!(
        failures.iter().all(|cause| cause.retryable),
        "failed for good: {failures:?}"
    );
    s.attach();
    pause(500).await;
    assert_eq!(
        s.destination.log_end(TOPIC, 0),
        5,
        "the records are mirrored"
    );
}

/// Engine review finding 11: a topic that both lookups, a second apart, miss is gone: the
/// partition fails for good, and only after the second lookup.
#[actix_rt::test]
async fn a_topic_both_lookups_miss_is_gone() {
    tokio::time::pause();
    let s = setup(Uuid::from_u128(9)).await;
    s.attach();
    pause(500).await;
    assert_eq!(s.failures(), Vec::new(), "failed on one lookup");
    pause(1000).await;
    let failures = s.failures();
    let [cause] = failures.as_slice() else {
        panic!("one failure, not {failures:?}");
    };
    assert!(
        !cause.retryable && cause.message.contains("was deleted"),
        "{cause:?}"
    );
}

/// Produces `batches` batches of two records on the source while the partition is caught up,
/// and returns how many records the first apply that follows appended (its lease held until the
/// next one is held too); then lets the rest land.
async fn first_apply_of(s: &Setup, batches: usize) -> i64 {
    let before = s.destination.log_end(TOPIC, 0);
    let first = s.destination.hold_next_lease(TOPIC, 0);
    for _ in 0..batches {
        s.source.produce(TOPIC, 0, 2).expect("produced");
    }
    pause(300).await;
    let next = s.destination.hold_next_lease(TOPIC, 0);
    let _ = first.send(());
    pause(300).await;
    let appended = s.destination.log_end(TOPIC, 0) - before;
    let _ = next.send(());
    pause(1000).await;
    appended
}

/// A mirror's fetch settings altered while it runs apply to its partitions at once (the
/// reviewer of issue 38 altered `mirror.num.replica.fetchers` from 1 to 64 and saw one Fetch
/// in flight for 200 MB: the pool kept the fetchers its settings had made). Here
/// `fetch.max.bytes` goes from 1 MiB to 1 byte: an answer brings one batch, not three.
#[actix_rt::test]
async fn new_fetch_settings_apply_to_the_partitions_at_once() {
    tokio::time::pause();
    let id = Uuid::from_u128(10);
    let s = setup(id).await;
    s.source_with_records(id).await;
    s.attach();
    pause(500).await;
    assert_eq!(s.destination.log_end(TOPIC, 0), 5);
    assert_eq!(first_apply_of(&s, 3).await, 6, "1 MiB: the three batches");
    s.pool.do_send(FetchSettingsChanged(FetchSettings {
        partition_max_bytes: 1,
        response_max_bytes: 1,
        ..FetchSettings::default()
    }));
    pause(500).await;
    assert_eq!(first_apply_of(&s, 3).await, 2, "1 byte: one batch");
    assert_eq!(s.destination.log_end(TOPIC, 0), 17, "all of them after");
}

/// The fetchers new settings replaced are waited for as the others are: an apply still in
/// flight on one lands before a Detach of its partition completes (STOPPING cuts the log to
/// its LSO right after). Fails if a Detach waits only on the pool's current fetchers.
#[actix_rt::test]
async fn no_append_lands_after_a_detach_from_a_fetcher_new_settings_replaced() {
    tokio::time::pause();
    let (s, release) = with_an_apply_held(Uuid::from_u128(11)).await;
    // The new fetcher cannot reach the source: only the old one's apply can append.
    s.network.set_reachable(&s.source.address(), false);
    s.pool.do_send(FetchSettingsChanged(FetchSettings {
        partition_max_bytes: 4096,
        ..FetchSettings::default()
    }));
    pause(100).await;
    s.held_apply_lands_before_the_detach(release).await;
}
