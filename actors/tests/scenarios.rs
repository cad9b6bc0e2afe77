//! The engine's behaviour suite ([`kmirror_actors::scenarios`]) on the in-memory host: two
//! clusters on one memory network, each running the engine on its own thread, as a broker
//! runs it.

use kmirror_actors::engine::{Engine, EngineRuntime};
use kmirror_actors::memory::{MemoryCluster, MemoryNetwork};
use kmirror_actors::scenarios::{Harness, Side};
use std::collections::BTreeMap;

struct MemoryHarness {
    network: MemoryNetwork,
    clusters: [MemoryCluster; 2],
    engines: [Option<EngineRuntime>; 2],
}

fn index(side: Side) -> usize {
    match side {
        Side::A => 0,
        Side::B => 1,
    }
}

impl MemoryHarness {
    fn new() -> Self {
        let network = MemoryNetwork::default();
        let clusters = [network.cluster("cluster-a"), network.cluster("cluster-b")];
        let engines = [
            Some(EngineRuntime::start(clusters[0].clone()).expect("engine A")),
            Some(EngineRuntime::start(clusters[1].clone()).expect("engine B")),
        ];
        MemoryHarness {
            network,
            clusters,
            engines,
        }
    }

    fn cluster(&self, side: Side) -> &MemoryCluster {
        &self.clusters[index(side)]
    }
}

impl Drop for MemoryHarness {
    fn drop(&mut self) {
        for engine in self.engines.iter_mut().filter_map(Option::take) {
            engine.stop();
        }
    }
}

impl Harness for MemoryHarness {
    fn engine(&self, side: Side) -> Engine {
        self.engines[index(side)]
            .as_ref()
            .expect("running")
            .engine()
            .clone()
    }

    fn cluster_id(&self, side: Side) -> String {
        use kmirror_actors::host::Host;
        self.cluster(side).cluster_id()
    }

    fn address(&self, side: Side) -> String {
        self.cluster(side).address()
    }

    fn create_mirror(&self, side: Side, name: &str, configs: BTreeMap<String, String>) {
        self.cluster(side).create_mirror(name, configs);
    }

    fn create_topic(&self, side: Side, topic: &str, partitions: i32) {
        self.cluster(side)
            .create_plain_topic(topic, partitions)
            .expect("topic created");
    }

    fn produce(
        &self,
        side: Side,
        topic: &str,
        partition: i32,
        records: usize,
    ) -> Result<(), String> {
        self.cluster(side).produce(topic, partition, records)
    }

    fn log_bytes(&self, side: Side, topic: &str, partition: i32) -> Vec<u8> {
        self.cluster(side).log_bytes(topic, partition)
    }

    fn log_end(&self, side: Side, topic: &str, partition: i32) -> i64 {
        self.cluster(side).log_end(topic, partition)
    }

    async fn restart(&mut self, side: Side) {
        if let Some(engine) = self.engines[index(side)].take() {
            engine.stop();
        }
        self.cluster(side).reopen();
        self.engines[index(side)] =
            Some(EngineRuntime::start(self.cluster(side).clone()).expect("engine restarted"));
    }

    async fn set_reachable(&mut self, side: Side, reachable: bool) {
        self.network
            .set_reachable(&self.cluster(side).address(), reachable);
    }

    async fn shut(self) {
        // The engines stop when the harness is dropped.
    }

    async fn bump_leader_epoch(&self, side: Side, topic: &str, partition: i32) {
        use kmirror_actors::host::Host;
        let bumped = self
            .cluster(side)
            .bump_leader_epoch(topic, partition, -1)
            .await;
        assert!(bumped.is_ok_and(|epoch| epoch.is_some()), "bumped");
    }
}

kmirror_actors::scenario_tests!(MemoryHarness::new());
