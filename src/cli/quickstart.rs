//! `kmirror quickstart`: mirroring and failover on one machine, with nothing set up first.
//!
//! Starts two `kmirror broker` processes (this executable) on free loopback ports with data in
//! a temporary folder: the source cluster and the destination cluster, the destination exporting
//! metrics. Creates topic `orders` (3 partitions) on the source and produces a steady stream to
//! it; creates mirror `quickstart` on the destination and starts the topic; shows the mirror
//! table (state, source offset, destination offset, lag, rate) and the mirror's MB/s (from the
//! destination's `/metrics`) each second; then fails over: stops the topic (the KIP's steps, all
//! partitions STOPPED) and produces to it on the destination, which now accepts writes. Prints
//! where to point a Kafka client and where the metrics are, and keeps the clusters running until
//! Ctrl-C (or ends there with `--exit-after-failover`). Either way both brokers are stopped with
//! SIGTERM (they shut down cleanly) and the folder is removed.

use super::describe::describe_every_broker;
use super::failure::Failure;
use super::mirror_table;
use super::mirrors::{self, MirrorsAction};
use super::topics::{TopicChange, TopicSelection};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{CreateTopicsRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use kmirror_protocol::client::ClientConfig;
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::messages::{DescribeMirrorsRequest, DescribeMirrorsResponse};
use std::path::PathBuf;
use std::process::{Child, ExitCode};
use std::time::{Duration, Instant};

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 3;
const MIRROR: &str = "quickstart";
/// Bytes of each produced record's value.
const VALUE_BYTES: usize = 1000;

/// How the quickstart runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options {
    /// Seconds of mirroring shown before the failover.
    pub(crate) mirror_seconds: u64,
    /// Records produced per second.
    pub(crate) records_per_second: u32,
    /// End after the failover demonstration instead of waiting for Ctrl-C.
    pub(crate) exit_after_failover: bool,
}

/// Runs the quickstart; its exit code.
pub(crate) fn run(options: Options) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kmirror quickstart: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = std::env::temp_dir().join(format!("kmirror-quickstart-{}", std::process::id()));
    let mut clusters = Clusters {
        dir: dir.clone(),
        children: Vec::new(),
    };
    let outcome = runtime.block_on(async {
        tokio::select! {
            outcome = quickstart(options, &mut clusters) => outcome,
            _ = tokio::signal::ctrl_c() => {
                println!("\nCtrl-C: stopping both brokers");
                Ok(())
            }
        }
    });
    drop(clusters);
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kmirror quickstart: {e}");
            ExitCode::from(1)
        }
    }
}

/// The two broker processes and their folder; dropping stops them and removes it.
struct Clusters {
    dir: PathBuf,
    children: Vec<Child>,
}

impl Clusters {
    /// Starts `kmirror broker` with `name`.properties (and its log in `name`.log).
    fn start(&mut self, name: &str, properties: &str) -> Result<(), String> {
        let data = self.dir.join(name);
        std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
        let config = self.dir.join(format!("{name}.properties"));
        std::fs::write(
            &config,
            format!("{properties}log.dirs={}\n", data.display()),
        )
        .map_err(|e| format!("{}: {e}", config.display()))?;
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))
            .map_err(|e| format!("{name}.log: {e}"))?;
        let exe = std::env::current_exe().map_err(|e| format!("this executable: {e}"))?;
        let child = std::process::Command::new(exe)
            .args(["broker", "--config"])
            .arg(&config)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting the {name} broker: {e}"))?;
        self.children.push(child);
        Ok(())
    }
}

impl Drop for Clusters {
    fn drop(&mut self) {
        for child in &self.children {
            // SIGTERM: each broker closes its logs and exits (Ctrl-C on a terminal has sent
            // them SIGINT already, which does the same).
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        for child in &mut self.children {
            let deadline = Instant::now() + Duration::from_secs(15);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

async fn connect(address: &str) -> Result<Connection, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Connection::connect(address, &ClientConfig::plaintext(address), None).await {
            Ok(connection) => return Ok(connection),
            Err(e) if Instant::now() > deadline => return Err(format!("{address}: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn failed(f: Failure) -> String {
    f.message().to_string()
}

async fn quickstart(options: Options, clusters: &mut Clusters) -> Result<(), String> {
    let (source_port, destination_port, metrics_port) = (free_port()?, free_port()?, free_port()?);
    let source = format!("127.0.0.1:{source_port}");
    let destination = format!("127.0.0.1:{destination_port}");
    let metrics = format!("127.0.0.1:{metrics_port}");
    println!(
        "kmirror quickstart: data and logs in {}",
        clusters.dir.display()
    );
    clusters.start(
        "source",
        &format!("node.id=1\nlisteners=PLAINTEXT://{source}\n"),
    )?;
    clusters.start(
        "destination",
        &format!(
            "node.id=1\nlisteners=PLAINTEXT://{destination}\nmetrics.listener=http://{metrics}\n\
             mirror.metadata.refresh.interval.ms=5000\n"
        ),
    )?;
    let source_connection = connect(&source).await?;
    connect(&destination).await?;
    println!("Source cluster      {source}\nDestination cluster {destination}");

    create_topic(&source_connection, TOPIC, PARTITIONS).await?;
    println!(
        "Created topic {TOPIC} ({PARTITIONS} partitions) on the source; producing {} records/s of {VALUE_BYTES} bytes",
        options.records_per_second
    );
    let (stop_producing, producing) = tokio::sync::watch::channel(false);
    let producer = tokio::spawn(produce_steadily(
        source_connection,
        options.records_per_second,
        producing,
    ));

    let mirror_config = clusters.dir.join("quickstart-mirror.properties");
    std::fs::write(&mirror_config, format!("bootstrap.servers={source}\n"))
        .map_err(|e| format!("{}: {e}", mirror_config.display()))?;
    println!(
        "\n$ kmirror mirrors --bootstrap-server {destination} --create --mirror {MIRROR} --mirror-config {}",
        mirror_config.display()
    );
    mirrors::execute(
        &destination,
        MirrorsAction::Create {
            mirror: MIRROR.into(),
            config: mirror_config,
            validate_only: false,
        },
    )
    .await
    .map_err(failed)?;
    println!(
        "$ kmirror mirrors --bootstrap-server {destination} --start --mirror {MIRROR} --topics {TOPIC}"
    );
    topics(
        &destination,
        TopicChange::Start {
            discard_local_records: -1,
        },
    )
    .await?;

    let table = Table::new(&destination, &metrics).await?;
    let mut table = table;
    let until = Instant::now() + Duration::from_secs(options.mirror_seconds);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1)).await;
        table.show("Mirroring").await?;
    }

    println!("\nFailover: the source stops producing; the topic is stopped on the destination.");
    let _ = stop_producing.send(true);
    let produced = producer.await.map_err(|e| format!("the producer: {e}"))??;
    println!(
        "$ kmirror mirrors --bootstrap-server {destination} --stop --mirror {MIRROR} --topics {TOPIC}"
    );
    topics(
        &destination,
        TopicChange::Stop {
            cut_timestamp_ms: -1,
        },
    )
    .await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mirrored: i64 = loop {
        let answer = table.describe().await?;
        if all_in_state(&answer, "STOPPED") {
            // Each partition ends with the failover's PID reset barrier, one offset.
            break partitions(&answer).map(|p| p.destination_offset - 1).sum();
        }
        if Instant::now() > deadline {
            return Err("the topic did not reach STOPPED within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    table.show("Stopped").await?;

    let destination_connection = connect(&destination).await?;
    let mut written = 0;
    for partition in 0..PARTITIONS {
        let base = produce(&destination_connection, partition, 10, written).await?;
        println!("Produced 10 records to {TOPIC}-{partition} on the destination at offset {base}");
        written += 10;
    }
    println!(
        "\n{produced} records were produced to the source; {mirrored} reached the destination \
         before the failover, which then accepted writes.\n\
         Point a Kafka client at the destination: --bootstrap-server {destination} (topic {TOPIC}),\n\
         e.g. kafka-console-consumer.sh --bootstrap-server {destination} --topic {TOPIC} --from-beginning\n\
         Metrics for Prometheus: http://{metrics}/metrics\n\
         The mirror table: kmirror mirrors --bootstrap-server {destination} --describe --watch"
    );
    if options.exit_after_failover {
        println!("Quickstart complete (--exit-after-failover): stopping both brokers.");
        return Ok(());
    }
    println!("Both clusters keep running; Ctrl-C stops them and removes their data.");
    std::future::pending::<()>().await;
    Ok(())
}

async fn topics(destination: &str, change: TopicChange) -> Result<(), String> {
    mirrors::execute(
        destination,
        MirrorsAction::Topics {
            change,
            mirror: MIRROR.into(),
            topics: TopicSelection::Names(vec![TOPIC.into()]),
        },
    )
    .await
    .map_err(failed)
}

fn partitions(
    answer: &DescribeMirrorsResponse,
) -> impl Iterator<Item = &kmirror_protocol::messages::describe_mirrors_response::DescribedPartition>
{
    answer
        .mirrors
        .iter()
        .flat_map(|m| m.topics.iter())
        .flat_map(|t| t.partitions.iter())
}

fn all_in_state(answer: &DescribeMirrorsResponse, state: &str) -> bool {
    partitions(answer).count() == PARTITIONS as usize
        && partitions(answer).all(|p| p.state == state)
}

/// The live mirror table with the mirror's throughput from the destination's metrics.
struct Table {
    destination: String,
    connection: Connection,
    metrics: String,
    previous: mirror_table::Previous,
    bytes: Option<(Instant, f64)>,
}

impl Table {
    async fn new(destination: &str, metrics: &str) -> Result<Table, String> {
        Ok(Table {
            destination: destination.to_string(),
            connection: connect(destination).await?,
            metrics: metrics.to_string(),
            previous: mirror_table::Previous::default(),
            bytes: None,
        })
    }

    async fn describe(&self) -> Result<DescribeMirrorsResponse, String> {
        let request = DescribeMirrorsRequest {
            mirror_names: vec![MIRROR.into()],
            ..Default::default()
        };
        describe_every_broker(&self.destination, &self.connection, &request)
            .await
            .map_err(failed)
    }

    async fn show(&mut self, phase: &str) -> Result<(), String> {
        let answer = self.describe().await?;
        let rows = mirror_table::render(&answer, &mut self.previous);
        let fetched = fetched_bytes(&self.metrics).await;
        let now = Instant::now();
        let rate = match (self.bytes, fetched) {
            (Some((at, before)), Some(bytes)) => {
                let seconds = now.duration_since(at).as_secs_f64();
                format!("{:.2} MB/s", (bytes - before).max(0.0) / seconds / 1e6)
            }
            _ => "- MB/s".to_string(),
        };
        if let Some(bytes) = fetched {
            self.bytes = Some((now, bytes));
        }
        if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            print!("\x1b[2J\x1b[H");
        } else {
            println!();
        }
        println!("{phase}: mirror {MIRROR} fetching {rate} from the source");
        print!("{rows}");
        Ok(())
    }
}

/// `kmirror_fetcher_fetched_bytes_total` of the mirror, from the destination's `/metrics`.
async fn fetched_bytes(metrics: &str) -> Option<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(metrics).await.ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: kmirror\r\n\r\n")
        .await
        .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await.ok()?;
    let prefix = format!(
        "{}{{mirror=\"{MIRROR}\"}} ",
        kmirror_actors::metrics::FETCH_BYTES
    );
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
}

async fn create_topic(connection: &Connection, name: &str, partitions: i32) -> Result<(), String> {
    let request = CreateTopicsRequest::default().with_topics(vec![
        CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_string())))
            .with_num_partitions(partitions)
            .with_replication_factor(1),
    ]);
    let (_, answer) = connection
        .send("CreateTopics", &request, 7)
        .await
        .map_err(|e| format!("creating {name}: {e}"))?;
    match answer.topics.first().map(|t| t.error_code) {
        Some(0) => Ok(()),
        code => Err(format!("creating {name}: error {code:?}")),
    }
}

/// Produces `records_per_second` records, spread over the partitions, until told to stop;
/// returns how many were acknowledged.
async fn produce_steadily(
    connection: Connection,
    records_per_second: u32,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<u64, String> {
    const TICKS_PER_SECOND: u32 = 10;
    let per_partition = (records_per_second / TICKS_PER_SECOND / PARTITIONS as u32).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / TICKS_PER_SECOND as u64));
    let mut produced = 0u64;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return Ok(produced),
        }
        for partition in 0..PARTITIONS {
            produce(&connection, partition, per_partition, produced).await?;
            produced += u64::from(per_partition);
        }
    }
}

/// Produces `count` records (values numbered from `first`) to one partition; the base offset.
async fn produce(
    connection: &Connection,
    partition: i32,
    count: u32,
    first: u64,
) -> Result<i64, String> {
    let now = kmirror::broker::now_ms();
    let records: Vec<Record> = (0..count)
        .map(|i| {
            let n = first + u64::from(i);
            let mut value = format!("order {n:010} ").into_bytes();
            value.resize(VALUE_BYTES, b'.');
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i64::from(i),
                sequence: -1,
                timestamp: now,
                key: Some(Bytes::from(format!("customer-{}", n % 100))),
                value: Some(Bytes::from(value)),
                headers: Default::default(),
            }
        })
        .collect();
    let mut batch = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut batch,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| format!("encoding records: {e}"))?;
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(TOPIC.to_string())))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(batch.freeze())),
                ]),
        ]);
    let (_, answer) = connection
        .send("Produce", &request, 11)
        .await
        .map_err(|e| format!("producing to {TOPIC}-{partition}: {e}"))?;
    let result = answer
        .responses
        .first()
        .and_then(|t| t.partition_responses.first())
        .ok_or_else(|| format!("no answer for {TOPIC}-{partition}"))?;
    if result.error_code != 0 {
        return Err(format!(
            "producing to {TOPIC}-{partition}: error {}",
            result.error_code
        ));
    }
    Ok(result.base_offset)
}
