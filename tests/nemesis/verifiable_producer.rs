//! Kafka's own idempotent producer beside the replication nemesis's writers: Apache Kafka's
//! VerifiableProducer (made idempotent with acks=all and Kafka's default retries) writes
//! `PREFIX.n` values to the topic for the whole run, spread by Kafka's partitioner, and prints
//! a JSON line per acknowledgement (`producer_send_success`: partition, offset, value) and per
//! failed send (`producer_send_error`: the exception). Its output goes to a file the checker
//! reads after every cycle, so the records Kafka's client saw acknowledged are held to the same
//! rules as the writers': read back at their offset, once, in order.

use kmirror_protocol::kafka_tools::kafka_tool_command;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The value prefix (VerifiableProducer takes an integer): its values are `9.0`, `9.1`, ...
const PREFIX: &str = "9";

/// What the producer printed so far.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Per partition, (offset, value) of each acknowledged record in acknowledgement order.
    pub(crate) acked: BTreeMap<i32, Vec<(i64, String)>>,
    /// Failed sends: "exception: message" lines.
    pub(crate) errors: Vec<String>,
}

/// A running VerifiableProducer.
pub(crate) struct KafkaProducer {
    child: Child,
    out: PathBuf,
    /// Whether [`KafkaProducer::stop`] stopped it.
    stopped: bool,
}

impl KafkaProducer {
    /// Starts it on `topic` at about `rate` records a second, its output in `dir`.
    pub(crate) fn start(bootstrap: &str, topic: &str, rate: u32, dir: &std::path::Path) -> Self {
        // The tool sets `retries=0` (idempotence off); its config file comes after, so these
        // make it Kafka's idempotent producer as applications run it.
        let config = dir.join("producer.properties");
        std::fs::write(
            &config,
            "enable.idempotence=true\nacks=all\nretries=2147483647\n",
        )
        .expect("the producer's config");
        let out = dir.join("verifiable-producer.out");
        let stdout = std::fs::File::create(&out).expect("the producer's output file");
        let stderr = std::fs::File::create(dir.join("verifiable-producer.err"))
            .expect("the producer's error file");
        let child = kafka_tool_command(
            "org.apache.kafka.tools.VerifiableProducer",
            &[
                "--bootstrap-server",
                bootstrap,
                "--topic",
                topic,
                "--throughput",
                &rate.to_string(),
                "--acks",
                "-1",
                "--value-prefix",
                PREFIX,
                "--command-config",
                config.to_str().expect("a UTF-8 path"),
            ],
        )
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr))
        .spawn()
        .expect("VerifiableProducer starts");
        KafkaProducer {
            child,
            out,
            stopped: false,
        }
    }

    /// Holds it (SIGSTOP) while the checker compares the replicas' bytes, which must not grow
    /// meanwhile; its requests in flight are answered when it resumes.
    pub(crate) fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets it go on (SIGCONT).
    pub(crate) fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let _ = std::process::Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status();
    }

    /// Whether the process ended without being stopped.
    pub(crate) fn died(&mut self) -> bool {
        !self.stopped && !self.running()
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its complete output lines so far.
    pub(crate) fn report(&self) -> Report {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let mut report = Report::default();
        // The last line may be half written: only lines ended by a newline count.
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        for line in complete.lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            match event["name"].as_str() {
                Some("producer_send_success") => {
                    let (Some(partition), Some(offset), Some(value)) = (
                        event["partition"].as_i64(),
                        event["offset"].as_i64(),
                        event["value"].as_str(),
                    ) else {
                        continue;
                    };
                    report
                        .acked
                        .entry(partition as i32)
                        .or_default()
                        .push((offset, value.to_string()));
                }
                Some("producer_send_error") => report.errors.push(format!(
                    "{}: {}",
                    event["exception"].as_str().unwrap_or("?"),
                    event["message"].as_str().unwrap_or("")
                )),
                _ => {}
            }
        }
        report
    }

    /// Stops it as an operator would (SIGTERM: it closes the producer, finishing what it has
    /// in flight), killing it after `within`.
    pub(crate) fn stop(&mut self, within: Duration) {
        self.stopped = true;
        self.resume();
        self.signal("-TERM");
        let deadline = Instant::now() + within;
        while Instant::now() < deadline && self.running() {
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for KafkaProducer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
