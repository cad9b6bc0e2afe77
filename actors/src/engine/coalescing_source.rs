//! A [`Source`] that merges the lookups many mirror partitions make at the same moment.
//!
//! Starting a topic elects all its partitions at once, and each one's PREPARING asks the source
//! the same things: the topic's metadata (is it still the topic the mirror copies, where is its
//! leader) and its LastMirroredEpochs. Asked one partition at a time, a Start of 100,000
//! partitions sent 100,000 Metadata requests naming one 100-partition topic each, and as many
//! LastMirroredEpochs: the source's answers and both sides' network stacks were the Start.
//!
//! Merging is group commit: the first ask of a key is sent at once (no added latency); the asks
//! of the same key arriving while it is in flight wait and go out together as the next request.
//! So every answer comes from a request sent after its ask (a topic check never reads an answer
//! older than itself), and a burst costs about one request per round trip, however many
//! partitions ask. What is merged:
//! - `metadata` naming exactly one topic: one request per topic, its answer given to each;
//! - `last_mirrored_epochs`: the partitions of one (asking cluster, topic, topic id) in one
//!   request, each ask answered for its own partitions.
//!
//! Everything else goes straight to the wrapped source.
//!
//! Lifecycle: one per mirror, shared by its partitions. Each key being asked has one task
//! (spawned on the asking arbiter) that sends its rounds until no ask waits; an ask whose
//! caller went away is answered into the void. The task holds the wrapped source, so a mirror
//! retired mid-round keeps its client until that round ends.

use crate::host::Source;
use kmirror_protocol::client::source::{
    AclBinding, ClusterMetadata, CommittedOffset, ConfigEntry, GroupListing, PartitionLme,
};
use kmirror_protocol::client::{ClientConfig, ClientError, FetchSpec, FetchedPartition, Isolation};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;
use uuid::Uuid;

/// One ask waiting for its round: what it asks and where its answer goes.
type Waiter<I, O> = (I, oneshot::Sender<Result<O, ClientError>>);

/// The asks waiting per key; a key is present while its task runs.
struct Rounds<K, I, O> {
    waiting: Mutex<HashMap<K, Vec<Waiter<I, O>>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<K, I, O> Rounds<K, I, O>
where
    K: Hash + Eq + Clone + 'static,
    I: 'static,
    O: 'static,
{
    fn new() -> Arc<Self> {
        Arc::new(Rounds {
            waiting: Mutex::new(HashMap::new()),
        })
    }

    /// Asks `item` under `key`; `send` answers one round (every item, in order).
    async fn ask<F, Fut>(self: &Arc<Self>, key: K, item: I, send: F) -> Result<O, ClientError>
    where
        F: Fn(K, Vec<I>) -> Fut + 'static,
        Fut: Future<Output = Vec<Result<O, ClientError>>> + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let first = match lock(&self.waiting).entry(key.clone()) {
            Entry::Occupied(mut waiting) => {
                waiting.get_mut().push((item, answer));
                false
            }
            Entry::Vacant(slot) => {
                slot.insert(vec![(item, answer)]);
                true
            }
        };
        if first {
            tokio::task::spawn_local(self.clone().send_rounds(key, send));
        }
        answered.await.unwrap_or_else(|_| {
            Err(ClientError::Connection {
                broker: "the source".into(),
                message: "the request was abandoned (its mirror is stopping)".into(),
            })
        })
    }

    /// Sends what waits under `key`, round after round, until nothing does.
    async fn send_rounds<F, Fut>(self: Arc<Self>, key: K, send: F)
    where
        F: Fn(K, Vec<I>) -> Fut,
        Fut: Future<Output = Vec<Result<O, ClientError>>>,
    {
        let mut running = Running {
            rounds: &self,
            key: Some(key.clone()),
        };
        loop {
            let round = {
                let mut waiting = lock(&self.waiting);
                match waiting.get_mut(&key) {
                    Some(asks) if !asks.is_empty() => std::mem::take(asks),
                    _ => {
                        waiting.remove(&key);
                        running.key = None;
                        return;
                    }
                }
            };
            let (items, answers): (Vec<I>, Vec<_>) = round.into_iter().unzip();
            let results = send(key.clone(), items).await;
            for (answer, result) in answers.into_iter().zip(results) {
                let _ = answer.send(result);
            }
        }
    }
}

/// While a key's task runs; a task that ends any other way than by finding nothing waiting
/// (dropped with its arbiter, or a panic) takes its key with it, so the next ask starts a task
/// instead of waiting behind one that is gone. The asks it held are answered "abandoned".
struct Running<'a, K: Hash + Eq, I, O> {
    rounds: &'a Rounds<K, I, O>,
    key: Option<K>,
}

impl<K: Hash + Eq, I, O> Drop for Running<'_, K, I, O> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            lock(&self.rounds.waiting).remove(&key);
        }
    }
}

/// The key of a LastMirroredEpochs round: asking cluster, topic, topic id.
type LmeKey = (String, String, Uuid);

/// The partitions of a merged LastMirroredEpochs round: every ask's, each once.
fn merged_partitions(asks: &[Vec<i32>]) -> Vec<i32> {
    let mut all: Vec<i32> = asks.iter().flatten().copied().collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// Each ask's answer from the merged round's answer for `all`: its own partitions' LMEs, so a
/// partition whose shard could not say fails only the asks that hold it; a request that failed
/// fails every ask.
fn answer_each(
    asks: &[Vec<i32>],
    all: &[i32],
    answer: Result<Vec<PartitionLme>, ClientError>,
) -> Vec<Result<Vec<PartitionLme>, ClientError>> {
    match answer {
        // An answer missing a partition must never read as "no LME" (-1), which would copy the
        // whole partition again.
        Ok(lmes) if lmes.len() != all.len() => {
            let e = ClientError::Protocol {
                broker: "the source".into(),
                api: "LastMirroredEpochs",
                message: format!("{} answers for {} partitions", lmes.len(), all.len()),
            };
            vec![Err(e); asks.len()]
        }
        Ok(lmes) => {
            let by_partition: HashMap<i32, PartitionLme> = all.iter().copied().zip(lmes).collect();
            asks.iter()
                .map(|ask| {
                    Ok(ask
                        .iter()
                        .filter_map(|p| by_partition.get(p).cloned())
                        .collect())
                })
                .collect()
        }
        Err(e) => vec![Err(e); asks.len()],
    }
}

/// A source whose per-partition lookups are merged (see the module docs).
pub struct CoalescingSource<S: Source> {
    inner: Arc<S>,
    metadata: Arc<Rounds<String, (), ClusterMetadata>>,
    lmes: Arc<Rounds<LmeKey, Vec<i32>, Vec<PartitionLme>>>,
}

impl<S: Source> std::fmt::Debug for CoalescingSource<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoalescingSource").finish_non_exhaustive()
    }
}

impl<S: Source> CoalescingSource<S> {
    /// Merges the lookups made through it to `inner`.
    pub fn new(inner: Arc<S>) -> Self {
        CoalescingSource {
            inner,
            metadata: Rounds::new(),
            lmes: Rounds::new(),
        }
    }
}

impl<S: Source> Source for CoalescingSource<S> {
    fn cluster_id(&self) -> impl Future<Output = Result<String, ClientError>> {
        self.inner.cluster_id()
    }

    async fn metadata(&self, topics: Option<&[&str]>) -> Result<ClusterMetadata, ClientError> {
        let Some([topic]) = topics else {
            return self.inner.metadata(topics).await;
        };
        let inner = self.inner.clone();
        let send = move |topic: String, asks: Vec<()>| {
            let inner = inner.clone();
            async move {
                let answer = inner.metadata(Some(&[topic.as_str()])).await;
                vec![answer; asks.len()]
            }
        };
        self.metadata.ask(topic.to_string(), (), send).await
    }

    fn list_offsets(
        &self,
        leader: i32,
        topic: &str,
        partition: i32,
        timestamp: i64,
        isolation: Isolation,
    ) -> impl Future<Output = Result<(i64, i32), ClientError>> {
        self.inner
            .list_offsets(leader, topic, partition, timestamp, isolation)
    }

    fn connect(
        &self,
        broker: i32,
    ) -> impl Future<Output = Result<Option<std::time::Duration>, ClientError>> {
        self.inner.connect(broker)
    }

    fn fetch(
        &self,
        leader: i32,
        spec: &FetchSpec,
    ) -> impl Future<Output = Result<Vec<FetchedPartition>, ClientError>> {
        self.inner.fetch(leader, spec)
    }

    async fn last_mirrored_epochs(
        &self,
        cluster_id: &str,
        topic: &str,
        topic_id: Uuid,
        partitions: &[i32],
    ) -> Result<Vec<PartitionLme>, ClientError> {
        let inner = self.inner.clone();
        let send = move |(cluster_id, topic, topic_id): LmeKey, asks: Vec<Vec<i32>>| {
            let inner = inner.clone();
            async move {
                let all = merged_partitions(&asks);
                let answer = inner
                    .last_mirrored_epochs(&cluster_id, &topic, topic_id, &all)
                    .await;
                answer_each(&asks, &all, answer)
            }
        };
        let key = (cluster_id.to_string(), topic.to_string(), topic_id);
        self.lmes.ask(key, partitions.to_vec(), send).await
    }

    fn describe_topic_configs(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<Vec<ConfigEntry>, ClientError>> {
        self.inner.describe_topic_configs(topic)
    }

    fn list_groups(&self) -> impl Future<Output = Result<Vec<GroupListing>, ClientError>> {
        self.inner.list_groups()
    }

    fn committed_offsets(
        &self,
        group: &str,
    ) -> impl Future<Output = Result<Vec<CommittedOffset>, ClientError>> {
        self.inner.committed_offsets(group)
    }

    fn describe_acls(&self) -> impl Future<Output = Result<Vec<AclBinding>, ClientError>> {
        self.inner.describe_acls()
    }

    fn reconfigure(&self, config: ClientConfig) -> Result<(), ClientError> {
        self.inner.reconfigure(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;
    use tokio::sync::Semaphore;
    use tokio::task::{JoinHandle, spawn_local};

    type Answers = std::pin::Pin<Box<dyn Future<Output = Vec<Result<i32, ClientError>>>>>;

    /// Rounds answering each item with itself times ten, recording every round they send;
    /// each round waits for a permit of `gate`, so the test decides when an answer comes back.
    struct Gated {
        rounds: Arc<Rounds<&'static str, i32, i32>>,
        sent: Rc<RefCell<Vec<Vec<i32>>>>,
        gate: Arc<Semaphore>,
    }

    impl Gated {
        fn new() -> Gated {
            Gated {
                rounds: Rounds::new(),
                sent: Rc::default(),
                gate: Arc::new(Semaphore::new(0)),
            }
        }

        fn ask(&self, key: &'static str, item: i32) -> JoinHandle<Result<i32, ClientError>> {
            let (log, permits, rounds) =
                (self.sent.clone(), self.gate.clone(), self.rounds.clone());
            let send = move |_: &'static str, items: Vec<i32>| {
                log.borrow_mut().push(items.clone());
                let permits = permits.clone();
                Box::pin(async move {
                    permits.acquire().await.expect("open").forget();
                    items.into_iter().map(|i| Ok(i * 10)).collect()
                }) as Answers
            };
            spawn_local(async move { rounds.ask(key, item, send).await })
        }

        fn sent(&self) -> Vec<Vec<i32>> {
            self.sent.borrow().clone()
        }
    }

    async fn answer(ask: JoinHandle<Result<i32, ClientError>>) -> i32 {
        ask.await.expect("runs").expect("answered")
    }

    #[tokio::test]
    async fn asks_made_while_a_round_is_out_go_together_in_the_next_one() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let gated = Gated::new();
                let first = gated.ask("topic", 1);
                tokio::task::yield_now().await;
                assert_eq!(gated.sent(), vec![vec![1]], "the first ask goes at once");
                let later: Vec<_> = (2..=5).map(|i| gated.ask("topic", i)).collect();
                // Another key is not held up by this one's round.
                let other = gated.ask("other", 9);
                tokio::task::yield_now().await;
                assert_eq!(gated.sent().len(), 2, "{:?}", gated.sent());
                gated.gate.add_permits(3);
                assert_eq!(answer(first).await, 10);
                for (i, ask) in (2..=5).zip(later) {
                    assert_eq!(answer(ask).await, i * 10);
                }
                assert_eq!(answer(other).await, 90);
                assert_eq!(
                    gated.sent(),
                    vec![vec![1], vec![9], vec![2, 3, 4, 5]],
                    "the four asks made during the first round went out as one"
                );
                // Nothing waits any more: the next ask starts a round of its own.
                gated.gate.add_permits(1);
                assert_eq!(answer(gated.ask("topic", 6)).await, 60);
                assert_eq!(gated.sent().last(), Some(&vec![6]));
                assert!(lock(&gated.rounds.waiting).is_empty());
            })
            .await;
    }

    #[test]
    fn a_partition_its_shard_could_not_answer_fails_only_the_asks_holding_it() {
        let asks = vec![vec![0], vec![1, 2], vec![2], vec![3]];
        let all = merged_partitions(&asks);
        assert_eq!(all, [0, 1, 2, 3]);
        let loading = ClientError::Broker {
            api: "LastMirroredEpochs",
            code: kmirror_protocol::errors::ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
        };
        let answer = Ok(vec![Ok(4), Ok(-1), Err(loading), Ok(7)]);
        let each: Vec<Vec<Result<i32, String>>> = answer_each(&asks, &all, answer)
            .into_iter()
            .map(|ask| {
                ask.expect("the request was answered")
                    .into_iter()
                    .map(|lme| lme.map_err(|e| e.to_string()))
                    .collect()
            })
            .collect();
        assert_eq!(each[0], [Ok(4)]);
        assert_eq!(each[1][0], Ok(-1));
        assert!(each[1][1].is_err() && each[2][0].is_err(), "{each:?}");
        assert_eq!(each[3], [Ok(7)]);
        // An answer short of a partition is no answer for anyone, never "none" (-1).
        let short = answer_each(&asks, &all, Ok(vec![Ok(4), Ok(5), Ok(6)]));
        assert!(short.iter().all(Result::is_err));
    }

    #[tokio::test]
    async fn a_round_that_dies_does_not_hold_up_the_next_ask() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let rounds: Arc<Rounds<&'static str, i32, i32>> = Rounds::new();
                let dies = |_: &'static str, items: Vec<i32>| async move {
                    assert!(items.is_empty(), "the round's task dies");
                    Vec::new()
                };
                let lost = rounds.ask("topic", 1, dies).await;
                assert!(
                    lost.is_err(),
                    "an ask whose round died is answered, not left waiting"
                );
                assert!(
                    lock(&rounds.waiting).is_empty(),
                    "the dead round took its key"
                );
                let lives = |_: &'static str, items: Vec<i32>| async move {
                    items.into_iter().map(|i| Ok(i * 10)).collect()
                };
                assert_eq!(rounds.ask("topic", 2, lives).await.expect("answered"), 20);
            })
            .await;
    }

    #[tokio::test]
    async fn an_abandoned_ask_does_not_stop_the_others() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let gated = Gated::new();
                let first = gated.ask("topic", 1);
                tokio::task::yield_now().await;
                let abandoned = gated.ask("topic", 2);
                let kept = gated.ask("topic", 3);
                tokio::task::yield_now().await;
                abandoned.abort();
                first.abort();
                gated.gate.add_permits(2);
                assert_eq!(answer(kept).await, 30);
                assert_eq!(gated.sent(), vec![vec![1], vec![2, 3]]);
            })
            .await;
    }
}
