//! `kmirror broker` processes the nemesis can crash (SIGKILL), freeze (SIGSTOP/SIGCONT) and
//! restart over the same folder and port; `kmirror mirrors` run with a deadline (a frozen
//! broker must not hang the test); DescribeMirrors; the broker's log and Prometheus metrics.

use kmirror_protocol::client::ClientConfig;
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::messages::DescribeMirrorsRequest;
use kmirror_testkit::kmirror_bin;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A port nothing listens on now.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A `kmirror broker` over `dir` on `port`; killed (SIGKILL) when dropped, so no broker outlives
/// a failing test.
pub(crate) struct Broker {
    pub(crate) name: &'static str,
    pub(crate) dir: PathBuf,
    pub(crate) port: u16,
    child: Option<Child>,
    frozen: bool,
}

impl Broker {
    /// Writes `server.properties` (with `extra` lines) and starts the broker.
    pub(crate) fn start(name: &'static str, dir: &Path, port: u16, extra: &str) -> Broker {
        std::fs::write(
            dir.join("server.properties"),
            format!(
                "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={}/data\n\
                 mirror.state.topic.num.partitions=4\n{extra}",
                dir.display()
            ),
        )
        .expect("server.properties written");
        let mut broker = Broker {
            name,
            dir: dir.to_path_buf(),
            port,
            child: None,
            frozen: false,
        };
        broker.spawn();
        broker
    }

    pub(crate) fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("broker.log"))
            .expect("broker.log opens");
        let child = Command::new(kmirror_bin())
            .args(["broker", "--config"])
            .arg(self.dir.join("server.properties"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("kmirror broker starts");
        self.child = Some(child);
        self.frozen = false;
        // The listener opens once the broker has recovered its logs and resumed its mirrors.
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(self.address()).is_err() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!(
                    "the {} broker exited at start ({status}); see {}",
                    self.name,
                    self.dir.join("broker.log").display()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the {} broker did not listen on {} within 60 s",
                self.name,
                self.address()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, then wait for the process to be gone.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.frozen = false;
    }

    /// SIGKILL and start again over the same folder and port.
    pub(crate) fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Whether the process is up (started and not killed).
    pub(crate) fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub(crate) fn is_frozen(&self) -> bool {
        self.frozen
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let status = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status()
                .expect("kill runs");
            assert!(status.success(), "kill {signal} {}", child.id());
        }
    }

    /// SIGSTOP: the process holds its sockets but answers nothing.
    pub(crate) fn freeze(&mut self) {
        self.signal("-STOP");
        self.frozen = true;
    }

    /// SIGCONT after [`Broker::freeze`].
    pub(crate) fn thaw(&mut self) {
        if self.frozen {
            self.signal("-CONT");
            self.frozen = false;
        }
    }

    /// The broker's log lines (stderr, appended across restarts).
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("broker.log")).unwrap_or_default()
    }

    /// The log of `topic`-`partition`: its segment files concatenated in offset order (where a
    /// log rolls is each broker's own business; the bytes are what must match).
    pub(crate) fn log_bytes(&self, topic: &str, partition: i32) -> Vec<u8> {
        concatenated_segments(&self.dir.join("data").join(format!("{topic}-{partition}")))
    }
}

pub(crate) use kmirror_testkit::concatenated_segments;

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `kmirror mirrors --bootstrap-server address ARGS`, killed after 30 s: exit code (None when
/// killed) and output.
pub(crate) async fn mirrors_cli(address: &str, args: &[&str]) -> (Option<i32>, String) {
    let address = address.to_string();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(kmirror_bin())
            .args(["mirrors", "--bootstrap-server", &address])
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kmirror mirrors runs");
        // Read while it runs: an answer larger than a pipe's buffer (a describe of many
        // topics) would otherwise block it until it is killed.
        let drain = |pipe: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_string(&mut text);
                }
                text
            })
        };
        let out = drain(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let err = drain(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            match child.try_wait().expect("waits") {
                Some(status) => break status.code(),
                None if Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let mut text = out.join().unwrap_or_default();
        text.push_str(&err.join().unwrap_or_default());
        if status.is_none() {
            text.push_str("\n(killed after 30 s)");
        }
        (status, text)
    })
    .await
    .expect("the CLI thread")
}

/// DescribeMirrors of `mirror`: (state, destination offset) per partition of `topic`, in
/// partition order; empty when the broker does not answer within 10 s.
pub(crate) async fn described(address: &str, mirror: &str, topic: &str) -> Vec<(String, i64)> {
    let request = DescribeMirrorsRequest {
        mirror_names: vec![mirror.into()],
        ..Default::default()
    };
    let ask = async {
        let connection = Connection::connect(address, &ClientConfig::plaintext(address), None)
            .await
            .ok()?;
        connection
            .send("DescribeMirrors", &request, 0)
            .await
            .ok()
            .map(|(_, answer)| answer)
    };
    let Ok(Some(answer)) = tokio::time::timeout(Duration::from_secs(10), ask).await else {
        return Vec::new();
    };
    let mut partitions: Vec<_> = answer
        .mirrors
        .iter()
        .flat_map(|m| m.topics.iter())
        .filter(|t| t.topic_name == topic)
        .flat_map(|t| t.partitions.iter())
        .map(|p| {
            let state = match &p.error_message {
                // A failure shows its reason, so a wait that times out says why.
                Some(error) if p.state == "FAILED" => format!("FAILED: {error}"),
                _ => p.state.clone(),
            };
            (p.partition_index, state, p.destination_offset)
        })
        .collect();
    partitions.sort();
    partitions.into_iter().map(|(_, s, o)| (s, o)).collect()
}

/// The sum of `name`'s samples on the Prometheus endpoint at `address` (`host:port`); None
/// when it does not answer. A counter never incremented is not exported: 0.
pub(crate) fn scrape(address: &str, name: &str) -> Option<f64> {
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET /metrics HTTP/1.0\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    if !text.starts_with("HTTP/1.") {
        return None;
    }
    Some(
        text.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}
