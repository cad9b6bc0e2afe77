//! The reference broker against Apache Kafka's broker, same clients, same settings, same run
//! (`scripts/bench.sh broker_vs_kafka`, which starts Kafka with scripts/kafka-local.sh).
//!
//! For one partition and for eight: Kafka's ProducerPerformance writes `BROKER_BENCH_RECORDS`
//! (default 500,000) records of 1 KiB with acks=all, then ConsumerPerformance reads them all,
//! against a `kmirror broker` process (release build) and against Kafka. Prints records/s, MB/s,
//! the ratio kmirror/Kafka, and each broker's CPU seconds over the workload and peak RSS.
//! Consumer figures are ConsumerPerformance's `fetch.*` columns (reading, group join excluded;
//! the join time is printed on its own line).

use kmirror_protocol::kafka_tools::{kafka_env, kafka_tool};
use std::process::{Child, Command};
use std::time::Duration;

/// CPU seconds (user + system) a process has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 =
        fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    ticks / 100.0
}

/// Peak resident set size in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

struct Figures {
    produce_rps: f64,
    produce_mbps: f64,
    consume_rps: f64,
    consume_mbps: f64,
    join_ms: f64,
    cpu: f64,
}

fn workload(address: &str, pid: u32, topic: &str, partitions: u32, records: u64) -> Figures {
    kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server",
            address,
            "--create",
            "--topic",
            topic,
            "--partitions",
            &partitions.to_string(),
        ],
    );
    let cpu_before = cpu_seconds(pid);
    let props = format!("bootstrap.servers={address}");
    let produced = kafka_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        &[
            "--topic",
            topic,
            "--num-records",
            &records.to_string(),
            "--record-size",
            "1024",
            "--throughput",
            "-1",
            "--producer-props",
            &props,
            "acks=all",
            "linger.ms=5",
            "batch.size=131072",
        ],
    );
    // "N records sent, R records/sec (M MB/sec), ..."
    let summary = produced
        .lines()
        .rfind(|l| l.contains("records sent"))
        .expect("producer summary");
    let number_before = |marker: &str| -> f64 {
        let at = summary.find(marker).expect("marker");
        summary[..at]
            .split([' ', '('])
            .rfind(|s| !s.is_empty())
            .and_then(|s| s.parse().ok())
            .expect("number")
    };
    let (produce_rps, produce_mbps) = (number_before(" records/sec"), number_before(" MB/sec"));
    let consumed = kafka_tool(
        "org.apache.kafka.tools.ConsumerPerformance",
        &[
            "--bootstrap-server",
            address,
            "--topic",
            topic,
            "--messages",
            &records.to_string(),
            "--timeout",
            "60000",
            "--hide-header",
        ],
    );
    let cols: Vec<f64> = consumed
        .lines()
        .find(|l| l.matches(',').count() >= 5)
        .expect("consumer summary")
        .split(',')
        .map(|c| c.trim().parse().unwrap_or(f64::NAN))
        .collect();
    assert_eq!(cols[4] as u64, records, "every record consumed");
    Figures {
        produce_rps,
        produce_mbps,
        // fetch.nMsg.sec and fetch.MB.sec: the reading, without the group join.
        consume_rps: cols[9],
        consume_mbps: cols[8],
        join_ms: cols[6],
        cpu: cpu_seconds(pid) - cpu_before,
    }
}

fn spawn_kmirror(dir: &std::path::Path) -> (Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let config = dir.join("server.properties");
    std::fs::write(
        &config,
        format!(
            "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={}\n",
            dir.join("data").display()
        ),
    )
    .expect("config");
    let child = Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(["broker", "--config"])
        .arg(&config)
        .spawn()
        .expect("kmirror broker starts");
    let address = format!("127.0.0.1:{port}");
    for _ in 0..200 {
        if std::net::TcpStream::connect(&address).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, address)
}

fn main() {
    let records: u64 = std::env::var("BROKER_BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500_000);
    let kafka_address = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let kafka_pid: u32 =
        std::fs::read_to_string(format!("{}/pid", kafka_env("KMIRROR_KAFKA_DATA")))
            .expect("Kafka's pid file")
            .trim()
            .parse()
            .expect("pid");
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut kmirror, kmirror_address) = spawn_kmirror(dir.path());
    let run = std::process::id();
    println!(
        "broker_vs_kafka: {records} records of 1 KiB, acks=all, linger.ms=5, batch.size=128 KiB"
    );
    for partitions in [1u32, 8] {
        let topic = format!("bench-{run}-{partitions}");
        let k = workload(&kmirror_address, kmirror.id(), &topic, partitions, records);
        let a = workload(&kafka_address, kafka_pid, &topic, partitions, records);
        for (what, km, ak) in [
            ("produce records/s", k.produce_rps, a.produce_rps),
            ("produce MB/s", k.produce_mbps, a.produce_mbps),
            ("consume records/s", k.consume_rps, a.consume_rps),
            ("consume MB/s", k.consume_mbps, a.consume_mbps),
            ("group join ms", k.join_ms, a.join_ms),
            ("broker CPU s", k.cpu, a.cpu),
        ] {
            println!(
                "partitions={partitions} {what:<18} kmirror {km:>12.1}  kafka {ak:>12.1}  ratio {:.2}",
                km / ak
            );
        }
    }
    println!(
        "peak RSS MiB: kmirror {:.0}  kafka {:.0} (JVM heap fixed at 512 MiB by kafka-local.sh)",
        peak_rss_mib(kmirror.id()),
        peak_rss_mib(kafka_pid)
    );
    let _ = Command::new("kill").arg(kmirror.id().to_string()).status();
    let _ = kmirror.wait();
}
