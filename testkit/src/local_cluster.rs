//! A kmirror cluster of `kmirror broker` processes started by `scripts/cluster-local.sh`
//! (docs/cluster.md), shared by the test binaries and benchmarks that drive one: its nodes'
//! addresses, crashes (SIGKILL), freezes (SIGSTOP/SIGCONT) and restarts, which node is the
//! active controller (from `/metrics`), and what each node's Metadata shows.

use crate::kmirror_bin;
use kafka_protocol::messages::MetadataRequest;
use kmirror_protocol::client::ClientConfig;
use kmirror_protocol::client::connection::Connection;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The nodes started by `scripts/cluster-local.sh`, stopped when dropped; their folder (logs
/// and data) is removed then, unless the test is failing, when its path is printed instead.
#[derive(Debug)]
pub struct LocalCluster {
    pub dir: PathBuf,
    /// Each node's client address, node 1 first (`-` for a controller-only node).
    pub clients: Vec<String>,
    /// The brokers' client addresses.
    bootstrap: String,
    /// Each node's `/metrics` address.
    pub metrics: Vec<String>,
}

/// A partition as a node's Metadata shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionView {
    /// The leader (-1 while its broker is fenced).
    pub leader: i32,
    pub leader_epoch: i32,
    /// The in-sync replicas.
    pub isr: Vec<i32>,
    /// The replicas in assignment order (the first is the preferred leader).
    pub replicas: Vec<i32>,
}

/// `scripts/cluster-local.sh` (the workspace's, beside this crate) with `args`.
fn script(args: &[&str], properties: &str, roles: &str) -> Result<String, String> {
    let out = std::process::Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/cluster-local.sh"
    ))
    .args(args)
    .env("KMIRROR_BIN", kmirror_bin())
    .env("KMIRROR_CLUSTER_PROPERTIES", properties)
    .env("KMIRROR_CLUSTER_ROLES", roles)
    .output()
    .map_err(|e| e.to_string())?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("cluster-local.sh {args:?}: {text}"))
    }
}

impl LocalCluster {
    /// Starts `nodes` combined nodes with `properties` added to each one's server.properties.
    pub fn start(nodes: usize, properties: &str) -> LocalCluster {
        let roles = vec!["broker,controller"; nodes];
        LocalCluster::start_with_roles(&roles, properties)
    }

    /// Starts a node per entry of `roles` (its `process.roles`, node 1 first); the voters are
    /// the nodes with the controller role.
    pub fn start_with_roles(roles: &[&str], properties: &str) -> LocalCluster {
        let dir = tempfile::tempdir().expect("temp dir").keep();
        let path = dir.to_str().expect("a UTF-8 path").to_string();
        script(
            &["start", &roles.len().to_string(), &path],
            properties,
            &roles.join(" "),
        )
        .expect("the cluster starts");
        let env = std::fs::read_to_string(dir.join("env")).expect("the env file");
        let var = |name: &str| -> Vec<String> {
            env.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .unwrap_or_else(|| panic!("{name} in {env}"))
                .split(',')
                .map(str::to_string)
                .collect()
        };
        LocalCluster {
            clients: var("KMIRROR_CLUSTER_CLIENTS"),
            bootstrap: var("KMIRROR_CLUSTER_BOOTSTRAP").join(","),
            metrics: var("KMIRROR_CLUSTER_METRICS"),
            dir,
        }
    }

    /// The brokers' client addresses, as `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        self.bootstrap.clone()
    }

    fn path(&self) -> String {
        self.dir.to_str().expect("a UTF-8 path").to_string()
    }

    /// SIGKILL of node `node` (a crash).
    pub fn kill(&self, node: usize) {
        script(&["kill", &node.to_string(), &self.path()], "", "").expect("killed");
    }

    /// Starts node `node` again on its data and waits until it listens.
    pub fn restart(&self, node: usize) {
        script(&["restart", &node.to_string(), &self.path()], "", "").expect("restarted");
    }

    /// Starts node `node` on its data without waiting for its client listener (a node that
    /// cannot reach the quorum never opens it, one that is refused exits): the caller holds
    /// the process, its output goes to the node's `broker.log`.
    pub fn spawn_unwaited(&self, node: usize) -> std::process::Child {
        let dir = self.dir.join(format!("node-{node}"));
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("broker.log"))
            .expect("the node's log");
        std::process::Command::new(kmirror_bin())
            .args(["broker", "--config", "server.properties"])
            .current_dir(&dir)
            .stdout(log.try_clone().expect("the log"))
            .stderr(log)
            .spawn()
            .expect("the node starts")
    }

    /// Sends `signal` (`STOP`, `CONT`) to node `node`.
    pub fn signal(&self, node: usize, signal: &str) {
        let pid = std::fs::read_to_string(self.dir.join(format!("node-{node}/pid")))
            .expect("the node's pid");
        let _ = std::process::Command::new("kill")
            .args([&format!("-{signal}"), pid.trim()])
            .status();
    }

    /// Node `node`'s log directory.
    pub fn data(&self, node: usize) -> PathBuf {
        self.dir.join(format!("node-{node}")).join("data")
    }

    /// The loss of node `node`'s data disk beside a separate metadata disk (the node stopped):
    /// everything of its log directory but the metadata quorum's files goes, the partitions
    /// and `meta.properties` (so the directory comes back with a new `directory.id`).
    pub fn lose_data_disk(&self, node: usize) {
        let data = self.data(node);
        for entry in std::fs::read_dir(&data).expect("the node's data").flatten() {
            if entry.file_name() == "__cluster_metadata" {
                continue;
            }
            let path = entry.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.unwrap_or_else(|e| panic!("removing {}: {e}", path.display()));
        }
    }

    /// The node among `nodes` whose `/metrics` says it is the active controller.
    pub fn active_controller(&self, nodes: &[usize]) -> Option<usize> {
        nodes.iter().copied().find(|node| {
            scrape_text(&self.metrics[node - 1])
                .lines()
                .any(|l| l.trim() == "kmirror_controller_active 1")
        })
    }

    /// Node `node`'s `kmirror_controller_fenced_brokers` (`None` when it does not answer).
    pub fn fenced_brokers(&self, node: usize) -> Option<u32> {
        scrape_text(&self.metrics[node - 1]).lines().find_map(|l| {
            l.strip_prefix("kmirror_controller_fenced_brokers ")?
                .trim()
                .parse::<f64>()
                .ok()
                .map(|v| v as u32)
        })
    }

    /// Waits for an active controller among `nodes`; panics after `within`.
    pub fn wait_active_controller(&self, nodes: &[usize], within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            if let Some(node) = self.active_controller(nodes) {
                return node;
            }
            assert!(
                Instant::now() < deadline,
                "no active controller among {nodes:?} within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let _ = script(&["stop", &self.path()], "", "");
        if std::thread::panicking() {
            eprintln!(
                "the cluster's logs and data are kept in {}",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `GET /metrics` of a node (empty when it does not answer within 2 s).
pub fn scrape_text(address: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(address) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text
}

/// The brokers a node's Metadata lists, by node id.
pub async fn brokers_of(address: &str) -> Result<Vec<i32>, String> {
    let connection = connect(address).await?;
    let request = MetadataRequest::default().with_topics(Some(Vec::new()));
    let ask = connection.send("Metadata", &request, 12);
    let (_, metadata) = tokio::time::timeout(Duration::from_secs(5), ask)
        .await
        .map_err(|_| format!("{address}: no answer"))?
        .map_err(|e| e.to_string())?;
    let mut brokers: Vec<i32> = metadata.brokers.iter().map(|b| b.node_id.0).collect();
    brokers.sort_unstable();
    Ok(brokers)
}

async fn connect(address: &str) -> Result<Connection, String> {
    let config = ClientConfig::plaintext(address);
    let connect = Connection::connect(address, &config, None);
    tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .map_err(|_| format!("{address}: no connection"))?
        .map_err(|e| e.to_string())
}

/// The topics a node's Metadata lists, each partition's leader and leader epoch.
pub async fn topics_of(address: &str) -> Result<BTreeMap<String, Vec<PartitionView>>, String> {
    let connection = connect(address).await?;
    let request = MetadataRequest::default().with_topics(None);
    let ask = connection.send("Metadata", &request, 12);
    let (_, metadata) = tokio::time::timeout(Duration::from_secs(5), ask)
        .await
        .map_err(|_| format!("{address}: no answer"))?
        .map_err(|e| e.to_string())?;
    Ok(metadata
        .topics
        .into_iter()
        .filter_map(|t| {
            let name = t.name?.0.to_string();
            let mut partitions: Vec<(i32, PartitionView)> = t
                .partitions
                .iter()
                .map(|p| {
                    let view = PartitionView {
                        leader: p.leader_id.0,
                        leader_epoch: p.leader_epoch,
                        isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                        replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                    };
                    (p.partition_index, view)
                })
                .collect();
            partitions.sort_by_key(|(index, _)| *index);
            Some((name, partitions.into_iter().map(|(_, v)| v).collect()))
        })
        .collect())
}
