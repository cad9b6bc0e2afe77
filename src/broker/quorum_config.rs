//! The KRaft keys that make a broker a node of a multi-process cluster (docs/cluster.md):
//! `process.roles`, `controller.quorum.voters`, `controller.listener.names`, and the
//! controller's entry in `listeners` (with `listener.security.protocol.map`).
//!
//! Without `process.roles` the broker is today's single-node cluster and none of these keys
//! matter. With it, every key is checked here, and a mistake names the key and what to write.

use super::config::ConfigError;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// A node of a cluster whose metadata a quorum of controllers replicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// `controller.quorum.voters`: each controller's node id and `host:port`.
    pub voters: BTreeMap<i32, String>,
    /// Where this node's controller listener binds.
    pub controller_listener: SocketAddr,
    /// `broker.heartbeat.interval.ms` (2000).
    pub heartbeat_interval: Duration,
    /// `broker.session.timeout.ms` (9000): a broker silent this long is fenced.
    pub session_timeout: Duration,
}

/// One `listeners` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listener<'a> {
    name: &'a str,
    host: &'a str,
    port: u16,
}

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
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
/// cluster settings and the `listeners` entry clients use, as `PLAINTEXT://host:port`.
pub(super) fn from_properties(
    props: &BTreeMap<String, String>,
    node_id: i32,
) -> Result<Option<(ClusterConfig, String)>, ConfigError> {
    let get = |k: &str| props.get(k).map(String::as_str);
    let Some(roles) = get("process.roles") else {
        if props.contains_key("controller.quorum.voters") {
            return Err(invalid(
                "controller.quorum.voters",
                get("controller.quorum.voters").unwrap_or_default(),
                "names a quorum, but process.roles is not set: set process.roles=broker,controller \
                 for a node of a cluster, or remove the key for a single-node broker",
            ));
        }
        return Ok(None);
    };
    let roles: Vec<&str> = roles.split(',').map(str::trim).collect();
    if roles.iter().any(|r| !matches!(*r, "broker" | "controller"))
        || roles.len()
            != roles
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
    {
        return Err(invalid(
            "process.roles",
            &roles.join(","),
            "expected broker, controller or broker,controller, each once",
        ));
    }
    if !(roles.contains(&"broker") && roles.contains(&"controller")) {
        return Err(invalid(
            "process.roles",
            &roles.join(","),
            "only combined nodes (broker,controller) are supported: every node of a kmirror \
             cluster runs a broker and a controller",
        ));
    }
    if !props.contains_key("node.id") {
        return Err(ConfigError::Missing("node.id"));
    }
    let voters = voters(
        get("controller.quorum.voters").ok_or(ConfigError::Missing("controller.quorum.voters"))?,
    )?;
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
                "a controller needs a listener named {} (controller.listener.names)",
                names[0]
            ),
        )
    })?;
    let client = entries
        .iter()
        .find(|l| !names.contains(&l.name))
        .ok_or_else(|| {
            invalid(
                "listeners",
                listeners_value,
                "a broker needs a listener for clients besides the controller's",
            )
        })?;
    for listener in [controller, client] {
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
    if controller.port == client.port {
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
    match voters.get(&node_id) {
        Some(address) if address.ends_with(&format!(":{}", controller.port)) => {}
        Some(address) => {
            return Err(invalid(
                "controller.quorum.voters",
                get("controller.quorum.voters").unwrap_or_default(),
                format!(
                    "node {node_id}'s entry ({address}) must name its controller listener's \
                     port {}",
                    controller.port
                ),
            ));
        }
        None => {
            return Err(invalid(
                "controller.quorum.voters",
                get("controller.quorum.voters").unwrap_or_default(),
                format!("a controller's node.id ({node_id}) must be one of the voters"),
            ));
        }
    }
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
    let client = format!("PLAINTEXT://{}:{}", client.host, client.port);
    Ok(Some((
        ClusterConfig {
            voters,
            controller_listener,
            heartbeat_interval,
            session_timeout,
        },
        client,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::config::parse_properties;

    fn read(text: &str) -> Result<Option<(ClusterConfig, String)>, ConfigError> {
        from_properties(&parse_properties(text).expect("parses"), 2)
    }

    const NODE_2: &str = "process.roles=broker,controller\nnode.id=2\n\
        controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097\n\
        controller.listener.names=CONTROLLER\n\
        listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n";

    #[test]
    fn a_combined_node_reads_its_voters_and_both_listeners() {
        let (cluster, client) = read(&format!(
            "{NODE_2}listeners=CONTROLLER://127.0.0.1:9095,PLAINTEXT://127.0.0.1:9094\n"
        ))
        .expect("valid")
        .expect("a cluster node");
        assert_eq!(client, "PLAINTEXT://127.0.0.1:9094");
        assert_eq!(cluster.controller_listener.port(), 9095);
        assert_eq!(cluster.voters.len(), 3);
        assert_eq!(cluster.voters[&3], "127.0.0.1:9097");
        assert_eq!(read("listeners=PLAINTEXT://:1\n").expect("valid"), None);
    }

    #[test]
    fn mistakes_name_the_key_and_the_fix() {
        let listeners = "listeners=CONTROLLER://127.0.0.1:9095,PLAINTEXT://127.0.0.1:9094\n";
        let cases = [
            (NODE_2.replace("broker,controller", "broker"), "combined"),
            (
                NODE_2.replace("broker,controller", "broker,zookeeper"),
                "expected broker",
            ),
            (
                NODE_2.replace("2@127.0.0.1:9095,", ""),
                "must be one of the voters",
            ),
            (
                NODE_2.replace("2@127.0.0.1:9095", "2@127.0.0.1:9999"),
                "port 9095",
            ),
            (NODE_2.replace("3@", "2@"), "named twice"),
            (
                NODE_2.replace("broker,controller", "broker,controller,broker"),
                "each once",
            ),
            (NODE_2.replace("1@127.0.0.1:9093", "one@x"), "id@host:port"),
            (
                NODE_2.replace("CONTROLLER:PLAINTEXT", "CONTROLLER:SSL"),
                "must be PLAINTEXT",
            ),
        ];
        for (text, expected) in cases {
            let error = read(&format!("{text}{listeners}")).expect_err(expected);
            assert!(
                error.to_string().contains(expected),
                "{error} lacks {expected:?}"
            );
        }
        let error = read(&format!("{NODE_2}listeners=PLAINTEXT://127.0.0.1:9094\n"))
            .expect_err("no controller listener");
        assert!(error.to_string().contains("named CONTROLLER"), "{error}");
        let error = read(&format!("{NODE_2}listeners=CONTROLLER://127.0.0.1:9095\n"))
            .expect_err("no client listener");
        assert!(error.to_string().contains("for clients"), "{error}");
        let error = read(&format!(
            "{NODE_2}listeners=CONTROLLER://127.0.0.1:9095,PLAINTEXT://127.0.0.1:9095\n"
        ))
        .expect_err("one port for both");
        assert!(error.to_string().contains("ports of their own"), "{error}");
        let error = read("listeners=PLAINTEXT://:1\ncontroller.quorum.voters=1@h:2\n")
            .expect_err("voters without roles");
        assert!(
            error.to_string().contains("process.roles is not set"),
            "{error}"
        );
    }
}
