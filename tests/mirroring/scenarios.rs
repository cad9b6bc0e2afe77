//! The engine's behaviour suite (`kmirror_actors::scenarios`, also run on the in-memory host)
//! over the broker's adapter: two kmirror brokers in this process, each with its log folder,
//! listener and mirroring engine as `kmirror broker` runs them; the destination reaches the
//! source over TCP with the Kafka client. A cluster made unreachable stops listening (its
//! clients see connections refused) and listens again on the same port; a restart closes the
//! broker and opens it again from its folder, engine and all.

use kmirror::broker::Broker;
use kmirror::broker::config::{BrokerConfig, parse_properties};
use kmirror::mirror::BrokerHost;
use kmirror_actors::engine::{Engine, EngineRuntime};
use kmirror_actors::scenarios::{Harness, Side};
use kmirror_protocol::testing::BatchSpec;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// One broker: its folder, port, engine and listener.
struct Node {
    _dir: tempfile::TempDir,
    path: PathBuf,
    port: u16,
    broker: Arc<Broker>,
    engine: Option<EngineRuntime>,
    server: Option<(
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    )>,
}

impl Node {
    async fn start() -> Node {
        let dir = tempfile::tempdir().expect("temp dir");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let port = listener.local_addr().expect("address").port();
        let path = dir.path().to_path_buf();
        let broker = open(&path, port);
        let engine = EngineRuntime::start(BrokerHost(broker.clone())).expect("engine");
        let mut node = Node {
            _dir: dir,
            path,
            port,
            broker,
            engine: Some(engine),
            server: None,
        };
        node.serve(listener);
        node
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let engine = self.engine.as_ref().map(|e| e.engine().clone());
        let server = tokio::spawn(kmirror::broker::server::serve(
            self.broker.clone(),
            engine,
            listener,
            stopped,
        ));
        self.server = Some((stop, server));
    }

    async fn stop_listening(&mut self) {
        if let Some((stop, server)) = self.server.take() {
            let _ = stop.send(true);
            let _ = server.await;
        }
    }

    async fn listen_again(&mut self) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .expect("binds its port again");
        self.serve(listener);
    }

    async fn shut(&mut self) {
        self.stop_listening().await;
        if let Some(engine) = self.engine.take() {
            engine.stop();
        }
        self.broker.close().expect("closes");
    }
}

fn open(path: &std::path::Path, port: u16) -> Arc<Broker> {
    let props = parse_properties(&format!(
        "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={}\n\
         mirror.state.topic.num.partitions=4\nmirror.metadata.refresh.interval.ms=500\n",
        path.display()
    ))
    .expect("parses");
    let (config, _) = BrokerConfig::from_properties(&props).expect("valid");
    Arc::new(Broker::open(config).expect("opens"))
}

struct BrokerHarness {
    nodes: [Node; 2],
}

fn index(side: Side) -> usize {
    match side {
        Side::A => 0,
        Side::B => 1,
    }
}

impl BrokerHarness {
    async fn new() -> Self {
        BrokerHarness {
            nodes: [Node::start().await, Node::start().await],
        }
    }

    fn broker(&self, side: Side) -> &Arc<Broker> {
        &self.nodes[index(side)].broker
    }
}

impl Harness for BrokerHarness {
    fn engine(&self, side: Side) -> Engine {
        self.nodes[index(side)]
            .engine
            .as_ref()
            .expect("running")
            .engine()
            .clone()
    }

    fn cluster_id(&self, side: Side) -> String {
        self.broker(side).cluster_id()
    }

    fn address(&self, side: Side) -> String {
        format!("127.0.0.1:{}", self.nodes[index(side)].port)
    }

    fn create_mirror(&self, side: Side, name: &str, configs: BTreeMap<String, String>) {
        crate::written(self.broker(side).create_mirror(name, configs)).expect("mirror created");
    }

    fn create_topic(&self, side: Side, topic: &str, partitions: i32) {
        crate::written(
            self.broker(side)
                .create_topic(topic, partitions, 1, BTreeMap::new(), None),
        )
        .expect("topic created");
    }

    fn produce(
        &self,
        side: Side,
        topic: &str,
        partition: i32,
        records: usize,
    ) -> Result<(), String> {
        let broker = self.broker(side);
        let opened = broker
            .partition(topic, partition)
            .ok_or_else(|| format!("no partition {topic}-{partition}"))?;
        if opened.read_only.load(Ordering::SeqCst) {
            return Err(format!(
                "{topic}-{partition} is a mirror topic: READ_ONLY_TOPIC"
            ));
        }
        let epoch = broker
            .leader_epoch(topic, partition)
            .ok_or_else(|| format!("no partition {topic}-{partition}"))?;
        let batch = BatchSpec {
            records,
            value_size: 16,
            timestamp_ms: kmirror::broker::now_ms(),
            ..BatchSpec::default()
        }
        .build();
        let mut log = opened.log.lock().unwrap_or_else(|e| e.into_inner());
        log.append_as_leader(batch, epoch, kmirror::broker::now_ms())
            .map_err(|e| e.to_string())?;
        let end = log.log_end_offset();
        log.update_high_watermark(end);
        Ok(())
    }

    fn log_bytes(&self, side: Side, topic: &str, partition: i32) -> Vec<u8> {
        let Some(opened) = self.broker(side).partition(topic, partition) else {
            return Vec::new();
        };
        let log = opened.log.lock().unwrap_or_else(|e| e.into_inner());
        let mut bytes = Vec::new();
        log.for_each_batch(log.log_start_offset(), |batch| {
            bytes.extend_from_slice(batch.as_bytes());
            Ok(())
        })
        .expect("readable");
        bytes
    }

    fn log_end(&self, side: Side, topic: &str, partition: i32) -> i64 {
        self.broker(side)
            .partition(topic, partition)
            .map_or(-1, |p| {
                p.log
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .log_end_offset()
            })
    }

    async fn restart(&mut self, side: Side) {
        let node = &mut self.nodes[index(side)];
        node.shut().await;
        node.broker = open(&node.path, node.port);
        node.engine = Some(EngineRuntime::start(BrokerHost(node.broker.clone())).expect("engine"));
        node.listen_again().await;
    }

    async fn set_reachable(&mut self, side: Side, reachable: bool) {
        let node = &mut self.nodes[index(side)];
        if reachable {
            node.listen_again().await;
        } else {
            node.stop_listening().await;
        }
    }

    async fn shut(mut self) {
        for node in &mut self.nodes {
            node.shut().await;
        }
    }

    async fn bump_leader_epoch(&self, side: Side, topic: &str, partition: i32) {
        self.broker(side)
            .bump_leader_epoch(topic, partition, -1)
            .await
            .expect("bumped")
            .expect("the partition exists");
    }
}

kmirror_actors::scenario_tests!(BrokerHarness::new().await);

/// Hostile report 2026-12-02 finding 5: `max.message.bytes` limits producers only. A source
/// batch larger than the destination topic's limit (the broker default, 1048588 bytes: the
/// source's own setting is excluded from the sync) is mirrored byte for byte, as Kafka's
/// replicas take what their leader wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirrored_batch_larger_than_max_message_bytes_is_appended() {
    use kmirror_actors::engine::system::LoadMirror;
    use kmirror_actors::engine::topics::StartTopic;
    use kmirror_actors::scenarios::Harness as _;
    use std::time::{Duration, Instant};
    let harness = BrokerHarness::new().await;
    let source = harness.broker(Side::A);
    crate::written(source.create_topic(
        "large",
        1,
        1,
        BTreeMap::from([("max.message.bytes".to_string(), "4000000".to_string())]),
        None,
    ))
    .expect("created");
    let batch = BatchSpec {
        records: 2,
        value_size: 1_000_000,
        timestamp_ms: kmirror::broker::now_ms(),
        ..BatchSpec::default()
    }
    .build();
    assert!(batch.len() > 2_000_000, "{} bytes", batch.len());
    {
        let partition = source.partition("large", 0).expect("open");
        let mut log = partition.log.lock().expect("log");
        log.append_as_leader(batch, 0, kmirror::broker::now_ms())
            .expect("appended on the source");
        let end = log.log_end_offset();
        log.update_high_watermark(end);
    }
    harness.create_mirror(
        Side::B,
        "dr",
        BTreeMap::from([
            ("bootstrap.servers".to_string(), harness.address(Side::A)),
            (
                "mirror.source.cluster.id".to_string(),
                harness.cluster_id(Side::A),
            ),
            (
                "mirror.topic.properties.exclude".to_string(),
                "max\\.message\\.bytes".to_string(),
            ),
        ]),
    );
    let engine = harness.engine(Side::B);
    let deadline = Instant::now() + Duration::from_secs(60);
    // The engine answers COORDINATOR_NOT_AVAILABLE while it creates `__mirror_state`.
    loop {
        let started = match engine.ask(LoadMirror("dr".into())).await {
            Ok(()) => engine
                .ask(StartTopic {
                    mirror: "dr".into(),
                    topic: "large".into(),
                    confirmed: Default::default(),
                })
                .await
                .map(|_| ()),
            Err(e) => Err(e),
        };
        match started {
            Ok(()) => break,
            Err(e) => assert!(Instant::now() < deadline, "the engine refused: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    loop {
        let mirrored = harness.log_bytes(Side::B, "large", 0);
        if !mirrored.is_empty() {
            assert_eq!(
                mirrored,
                harness.log_bytes(Side::A, "large", 0),
                "byte for byte"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the batch never arrived (destination log end {})",
            harness.log_end(Side::B, "large", 0)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let configs = harness
        .broker(Side::B)
        .topic("large")
        .expect("mirrored")
        .configs;
    assert!(
        !configs.contains_key("max.message.bytes"),
        "the destination keeps the default limit: {configs:?}"
    );
    harness.shut().await;
}
