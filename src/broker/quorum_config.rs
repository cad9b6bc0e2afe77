//! The KRaft keys that make a broker a node of a multi-process cluster (docs/cluster.md):
//! `process.roles`, `controller.quorum.voters`, `controller.listener.names`, and the
//! controller's entry in `listeners` (with `listener.security.protocol.map`).
//!
//! Without `process.roles` the broker is today's single-node cluster and none of these keys
//! matter. With it, every key is checked here, and a mistake names the key and what to write:
//! a voter (`controller` role) must be in `controller.quorum.voters` and a broker-only node
//! must not; a controller-only node has the controller listener alone; a broker has a client
//! listener besides it.

use super::config_error::{ConfigError, invalid};
use crate::controller::quorum::{LeaderRebalance, ProcessRoles, QuorumSecret};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// A node of a cluster whose metadata a quorum of controllers replicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// `process.roles`.
    pub roles: ProcessRoles,
    /// `controller.quorum.voters`: each controller's node id and `host:port`.
    pub voters: BTreeMap<i32, String>,
    /// Where this node's controller listener binds.
    pub controller_listener: SocketAddr,
    /// Where the other nodes reach it: a voter's entry in the voters, a broker-only node's
    /// `listeners` entry (which must name a host, not 0.0.0.0).
    pub controller_address: String,
    /// `broker.heartbeat.interval.ms` (2000).
    pub heartbeat_interval: Duration,
    /// `broker.session.timeout.ms` (9000): a broker silent this long is fenced.
    pub session_timeout: Duration,
    /// `controller.quorum.secret.file`: the nodes' shared secret, read at start (`None`: the
    /// controller listener is unauthenticated).
    pub secret: Option<QuorumSecret>,
    /// `auto.leader.rebalance.enable` (true), `leader.imbalance.check.interval.seconds` (300)
    /// and `leader.imbalance.per.broker.percentage` (10).
    pub leader_rebalance: Option<LeaderRebalance>,
}

/// One `listeners` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listener<'a> {
    name: &'a str,
    host: &'a str,
    port: u16,
}

fn listeners(value: &str) -> Result<Vec<Listener<'_>>, ConfigError> {
    value
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let wrong = || invalid("listeners", value, "expected NAME://host:port entries");
            let (name, address) = entry.split_once("://").ok_or_else(wrong)?;
            let (host, port) = address.rsplit_once(':').ok_or_else(wrong)?;
            let port = port.parse().map_err(|_| {
                invalid(
                    "listeners",
                    value,
                    "the port must be a number from 0 to 65535",
                )
            })?;
            Ok(Listener { name, host, port })
        })
        .collect()
}

/// The security protocol a listener name maps to (`listener.security.protocol.map`, else the
/// name itself, as Kafka does for the protocol names).
fn protocol<'a>(map: Option<&'a str>, name: &'a str) -> &'a str {
    map.into_iter()
        .flat_map(|m| m.split(','))
        .filter_map(|pair| pair.trim().split_once(':'))
        .find(|(listener, _)| *listener == name)
        .map_or(name, |(_, protocol)| protocol)
}

/// `controller.quorum.voters`: `id@host:port,...`.
fn voters(value: &str) -> Result<BTreeMap<i32, String>, ConfigError> {
    let key = "controller.quorum.voters";
    let mut voters = BTreeMap::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let wrong = || {
            invalid(
                key,
                value,
                "expected id@host:port entries, e.g. 1@localhost:9093",
            )
        };
        let (id, address) = entry.split_once('@').ok_or_else(wrong)?;
        let id: i32 = id.parse().ok().filter(|id| *id >= 0).ok_or_else(wrong)?;
        let (_, port) = address.rsplit_once(':').ok_or_else(wrong)?;
        port.parse::<u16>().map_err(|_| wrong())?;
        if voters.insert(id, address.to_string()).is_some() {
            return Err(invalid(key, value, format!("node {id} is named twice")));
        }
    }
    if voters.is_empty() {
        return Err(invalid(key, value, "names no controller"));
    }
    Ok(voters)
}

/// Reads the cluster keys: `None` without `process.roles` (a single-node cluster). Returns the
/// cluster settings and the `listeners` entry clients use, as `PLAINTEXT://host:port` (`None`
/// on a controller-only node, which serves no clients).
pub(super) fn from_properties(
    props: &BTreeMap<String, String>,
    node_id: i32,
) -> Result<Option<(ClusterConfig, Option<String>)>, ConfigError> {
    let get = |k: &str| props.get(k).map(String::as_str);
    let Some(roles_value) = get("process.roles") else {
        if props.contains_key("controller.quorum.voters") {
            return Err(invalid(
                "controller.quorum.voters",
                get("controller.quorum.voters").unwrap_or_default(),
                "names a quorum, but process.roles is not set: set process.roles (broker, \
                 controller or broker,controller) for a node of a cluster, or remove the key for \
                 a single-node broker",
            ));
        }
        return Ok(None);
    };
    let roles = ProcessRoles::parse(roles_value)
        .map_err(|e| invalid("process.roles", roles_value, e.to_string()))?;
    if !props.contains_key("node.id") {
        return Err(ConfigError::Missing("node.id"));
    }
    let voters_value =
        get("controller.quorum.voters").ok_or(ConfigError::Missing("controller.quorum.voters"))?;
    let voters = voters(voters_value)?;
    let names_value = get("controller.listener.names")
        .ok_or(ConfigError::Missing("controller.listener.names"))?;
    let names: Vec<&str> = names_value.split(',').map(str::trim).collect();
    let listeners_value = get("listeners").ok_or(ConfigError::Missing("listeners"))?;
    let entries = listeners(listeners_value)?;
    let map = get("listener.security.protocol.map");
    let controller = entries.iter().find(|l| l.name == names[0]).ok_or_else(|| {
        invalid(
            "listeners",
            listeners_value,
            format!(
                "every node of a cluster needs a listener named {} (controller.listener.names): \
                 controllers vote on it and broker-only nodes receive the metadata log on it",
                names[0]
            ),
        )
    })?;
    let client = entries.iter().find(|l| !names.contains(&l.name));
    let client = match (roles.is_broker(), client) {
        (true, Some(client)) => Some(client),
        (true, None) => {
            return Err(invalid(
                "listeners",
                listeners_value,
                "a broker needs a listener for clients besides the controller's",
            ));
        }
        (false, None) => None,
        (false, Some(client)) => {
            return Err(invalid(
                "listeners",
                listeners_value,
                format!(
                    "a controller-only node (process.roles=controller) serves no clients: \
                     listeners must hold only the controller listener {} (remove {})",
                    names[0], client.name
                ),
            ));
        }
    };
    for listener in std::iter::once(controller).chain(client) {
        if protocol(map, listener.name) != "PLAINTEXT" {
            return Err(invalid(
                "listener.security.protocol.map",
                map.unwrap_or_default(),
                format!(
                    "listener {} must be PLAINTEXT (map it, e.g. {}:PLAINTEXT)",
                    listener.name, listener.name
                ),
            ));
        }
    }
    if client.is_some_and(|client| controller.port == client.port) {
        return Err(invalid(
            "listeners",
            listeners_value,
            "the controller listener and the client listener need ports of their own",
        ));
    }
    let bind = if controller.host.is_empty() {
        "0.0.0.0"
    } else {
        controller.host
    };
    let controller_listener: SocketAddr =
        format!("{bind}:{}", controller.port).parse().map_err(|_| {
            invalid(
                "listeners",
                listeners_value,
                "the host must be an IP address",
            )
        })?;
    let controller_address = match (roles.is_voter(), voters.get(&node_id)) {
        (true, Some(address)) if address.ends_with(&format!(":{}", controller.port)) => {
            address.clone()
        }
        (true, Some(address)) => {
            return Err(invalid(
                "controller.quorum.voters",
                voters_value,
                format!(
                    "node {node_id}'s entry ({address}) must name its controller listener's \
                     port {}",
                    controller.port
                ),
            ));
        }
        (true, None) => {
            return Err(invalid(
                "controller.quorum.voters",
                voters_value,
                format!(
                    "a controller's node.id ({node_id}) must be one of the voters \
                     (process.roles={})",
                    roles.as_str()
                ),
            ));
        }
        (false, Some(_)) => {
            return Err(invalid(
                "controller.quorum.voters",
                voters_value,
                format!(
                    "node {node_id} is a voter, but process.roles=broker: a broker-only node \
                     follows the quorum without a vote. Remove it from the voters, or set \
                     process.roles=broker,controller"
                ),
            ));
        }
        // The active controller pushes the log to this address: it must be one others reach.
        (false, None) if controller_listener.ip().is_unspecified() => {
            return Err(invalid(
                "listeners",
                listeners_value,
                format!(
                    "a broker-only node's controller listener {} is the address the active \
                     controller sends the metadata log to: give it a host the other nodes \
                     reach, not 0.0.0.0 or an empty host",
                    names[0]
                ),
            ));
        }
        (false, None) => controller_listener.to_string(),
    };
    let millis = |key: &str, default: u64| -> Result<Duration, ConfigError> {
        match get(key) {
            None => Ok(Duration::from_millis(default)),
            Some(v) => v
                .parse::<u64>()
                .ok()
                .filter(|ms| (1..=3_600_000).contains(ms))
                .map(Duration::from_millis)
                .ok_or_else(|| invalid(key, v, "must be between 1 and 3600000 (milliseconds)")),
        }
    };
    let heartbeat_interval = millis("broker.heartbeat.interval.ms", 2_000)?;
    let session_timeout = millis("broker.session.timeout.ms", 9_000)?;
    if session_timeout <= heartbeat_interval {
        return Err(invalid(
            "broker.session.timeout.ms",
            &session_timeout.as_millis().to_string(),
            "must be longer than broker.heartbeat.interval.ms",
        ));
    }
    let leader_rebalance = match get("auto.leader.rebalance.enable") {
        None | Some("true") => {
            let key = "leader.imbalance.check.interval.seconds";
            let interval = match get(key) {
                None => 300,
                Some(v) => v
                    .parse::<u64>()
                    .ok()
                    .filter(|s| (1..=86_400).contains(s))
                    .ok_or_else(|| invalid(key, v, "must be between 1 and 86400 (seconds)"))?,
            };
            let key = "leader.imbalance.per.broker.percentage";
            let imbalance_percentage = match get(key) {
                None => 10,
                Some(v) => v
                    .parse::<u32>()
                    .ok()
                    .filter(|p| *p <= 100)
                    .ok_or_else(|| invalid(key, v, "must be between 0 and 100"))?,
            };
            Some(LeaderRebalance {
                interval: Duration::from_secs(interval),
                imbalance_percentage,
            })
        }
        Some("false") => None,
        Some(v) => {
            return Err(invalid(
                "auto.leader.rebalance.enable",
                v,
                "must be true or false",
            ));
        }
    };
    let secret_key = "controller.quorum.secret.file";
    let secret = get(secret_key)
        .map(|path| {
            QuorumSecret::read(std::path::Path::new(path)).map_err(|e| invalid(secret_key, path, e))
        })
        .transpose()?;
    let client = client.map(|client| format!("PLAINTEXT://{}:{}", client.host, client.port));
    Ok(Some((
        ClusterConfig {
            roles,
            voters,
            controller_listener,
            controller_address,
            heartbeat_interval,
            session_timeout,
            secret,
            leader_rebalance,
        },
        client,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::config::parse_properties;

    type Read = Result<Option<(ClusterConfig, Option<String>)>, ConfigError>;

    /// Reads `text` as the node its `node.id` names (2 without one).
    fn read(text: &str) -> Read {
        let props = parse_properties(text).expect("parses");
        let node_id = props
            .get("node.id")
            .map_or(2, |id| id.parse().expect("a number"));
        from_properties(&props, node_id)
    }

    const VOTERS: &str = "controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097\n\
        controller.listener.names=CONTROLLER\n\
        listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n";
    const BOTH: &str = "listeners=CONTROLLER://127.0.0.1:9095,PLAINTEXT://127.0.0.1:9094\n";

    fn node(roles: &str, id: i32, listeners: &str) -> String {
        format!("process.roles={roles}\nnode.id={id}\n{VOTERS}listeners={listeners}\n")
    }

    #[test]
    fn a_combined_node_reads_its_voters_and_both_listeners() {
        let (cluster, client) = read(&format!(
            "process.roles=broker,controller\nnode.id=2\n{VOTERS}{BOTH}"
        ))
        .expect("valid")
        .expect("a cluster node");
        assert_eq!(cluster.roles, ProcessRoles::Combined);
        assert_eq!(client.as_deref(), Some("PLAINTEXT://127.0.0.1:9094"));
        assert_eq!(cluster.controller_listener.port(), 9095);
        assert_eq!(cluster.controller_address, "127.0.0.1:9095");
        assert_eq!(cluster.voters.len(), 3);
        assert_eq!(cluster.voters[&3], "127.0.0.1:9097");
        assert_eq!(read("listeners=PLAINTEXT://:1\n").expect("valid"), None);
    }

    #[test]
    fn a_controller_only_node_has_the_controller_listener_alone() {
        let (cluster, client) = read(&node("controller", 1, "CONTROLLER://127.0.0.1:9093"))
            .expect("valid")
            .expect("a cluster node");
        assert_eq!(cluster.roles, ProcessRoles::Controller);
        assert_eq!(client, None);
        assert_eq!(cluster.controller_address, "127.0.0.1:9093");
    }

    #[test]
    fn a_broker_only_node_is_no_voter_and_names_where_it_receives_the_log() {
        let listeners = "PLAINTEXT://127.0.0.1:9100,CONTROLLER://127.0.0.1:9101";
        let (cluster, client) = read(&node("broker", 4, listeners))
            .expect("valid")
            .expect("a cluster node");
        assert_eq!(cluster.roles, ProcessRoles::Broker);
        assert_eq!(client.as_deref(), Some("PLAINTEXT://127.0.0.1:9100"));
        assert_eq!(cluster.controller_address, "127.0.0.1:9101");
        assert!(!cluster.voters.contains_key(&4));
    }

    #[test]
    fn mistakes_name_the_key_and_the_fix() {
        let combined = format!("process.roles=broker,controller\nnode.id=2\n{VOTERS}{BOTH}");
        let broker_only = "PLAINTEXT://127.0.0.1:9100,CONTROLLER://127.0.0.1:9101";
        let cases = [
            (
                combined.replace("broker,controller", "broker,zookeeper"),
                "process.roles=",
                "expected broker",
            ),
            (
                combined.replace("broker,controller", "broker,controller,broker"),
                "process.roles=",
                "each once",
            ),
            (
                combined.replace("2@127.0.0.1:9095,", ""),
                "controller.quorum.voters=",
                "must be one of the voters",
            ),
            (
                node("controller", 4, "CONTROLLER://127.0.0.1:9101"),
                "controller.quorum.voters=",
                "a controller's node.id (4) must be one of the voters (process.roles=controller)",
            ),
            (
                combined.replace("2@127.0.0.1:9095", "2@127.0.0.1:9999"),
                "controller.quorum.voters=",
                "port 9095",
            ),
            (
                combined.replace("3@", "2@"),
                "controller.quorum.voters=",
                "named twice",
            ),
            (
                combined.replace("1@127.0.0.1:9093", "one@x"),
                "controller.quorum.voters=",
                "id@host:port",
            ),
            (
                combined.replace("CONTROLLER:PLAINTEXT", "CONTROLLER:SSL"),
                "listener.security.protocol.map=",
                "must be PLAINTEXT",
            ),
            (
                node("broker", 2, broker_only),
                "controller.quorum.voters=",
                "node 2 is a voter, but process.roles=broker",
            ),
            (
                node(
                    "controller",
                    1,
                    "CONTROLLER://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
                ),
                "listeners=",
                "a controller-only node (process.roles=controller) serves no clients",
            ),
            (
                node(
                    "broker",
                    4,
                    "PLAINTEXT://127.0.0.1:9100,CONTROLLER://0.0.0.0:9101",
                ),
                "listeners=",
                "not 0.0.0.0",
            ),
            (
                node("broker", 4, "PLAINTEXT://127.0.0.1:9100"),
                "listeners=",
                "named CONTROLLER",
            ),
            (
                node("controller", 1, "PLAINTEXT://127.0.0.1:9093"),
                "listeners=",
                "named CONTROLLER",
            ),
            (
                node("broker", 4, "CONTROLLER://127.0.0.1:9101"),
                "listeners=",
                "for clients",
            ),
            (
                node("broker", 4, broker_only).replace(
                    "controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097\n",
                    "",
                ),
                "controller.quorum.voters",
                "is required",
            ),
            (
                node("broker", 4, broker_only).replace("node.id=4\n", ""),
                "node.id",
                "is required",
            ),
            (
                combined.replace(
                    BOTH,
                    "listeners=CONTROLLER://127.0.0.1:9095,PLAINTEXT://127.0.0.1:9095\n",
                ),
                "listeners=",
                "ports of their own",
            ),
            (
                "listeners=PLAINTEXT://:1\ncontroller.quorum.voters=1@h:2\n".to_string(),
                "controller.quorum.voters=",
                "process.roles is not set",
            ),
            (
                format!("{combined}controller.quorum.secret.file=/nonexistent/quorum.secret\n"),
                "controller.quorum.secret.file=",
                "cannot read /nonexistent/quorum.secret",
            ),
        ];
        for (text, key, expected) in cases {
            let error = read(&text).expect_err(expected).to_string();
            assert!(error.starts_with(key), "{error} does not name {key:?}");
            assert!(error.contains(expected), "{error} lacks {expected:?}");
        }
    }
}
