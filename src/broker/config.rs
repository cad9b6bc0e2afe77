//! `server.properties` for `kmirror broker`: Kafka's `key=value` format and key names. Unknown
//! keys are reported (and ignored); a value that cannot work stops the start with a message
//! naming the key. Every key has a range, Kafka's where Kafka has the key (its config
//! validators), listed with the defaults in `docs/broker-configs.md`.

use super::config_error::{ConfigError, invalid};
use super::consumer_group_config;
use super::network::{self, NetworkConfig};
use crate::acl::AuthorizerConfig;
use crate::groups::consumer::ConsumerSettings;
use crate::storage::{LogConfig, OpenFiles};
use kmirror_actors::engine::fetch_settings::{
    DEFAULT_MAX_FETCHES_IN_FLIGHT, MAX_FETCHES_IN_FLIGHT,
};
use kmirror_actors::liveness::LivenessPolicy;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

/// How many coordinator partitions each kind of key hashes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoordinatorPartitions {
    /// `offsets.topic.num.partitions`: partitions of `__consumer_offsets` (group ids).
    pub groups: i32,
    /// `transaction.state.log.num.partitions`: partitions of `__transaction_state`.
    pub transactions: i32,
}

/// The broker's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerConfig {
    /// With `process.roles`: this node's part in a multi-process cluster (docs/cluster.md);
    /// `None` for a single-node cluster.
    pub cluster: Option<super::quorum_config::ClusterConfig>,
    /// `node.id`.
    pub node_id: i32,
    /// Where the client listener binds (`listeners=PLAINTEXT://host:port`); `None` on a
    /// controller-only node (`process.roles=controller`), which serves no clients.
    pub listener: Option<SocketAddr>,
    /// What clients are told to connect to (`advertised.listeners`, default the listener); on a
    /// controller-only node, its controller address.
    pub advertised: (String, u16),
    /// `log.dirs` (or `log.dir`): the one log directory (several, Kafka's JBOD, are refused).
    pub log_dir: PathBuf,
    /// `num.partitions` for auto-created topics.
    pub num_partitions: i32,
    /// `default.replication.factor` (1): replicas per partition of a topic created without one
    /// (auto-created, mirror topics, CreateTopics asking -1).
    pub default_replication_factor: i32,
    /// `min.insync.replicas` (1): the ISR size acks=all produces need, unless the topic sets
    /// its own.
    pub min_insync_replicas: i32,
    /// `replica.lag.time.max.ms` (30000): a follower not caught up this long leaves the ISR.
    pub replica_lag_time_max_ms: i64,
    /// `auto.create.topics.enable`.
    pub auto_create_topics: bool,
    /// `socket.request.max.bytes`.
    pub max_request_bytes: usize,
    /// `log.retention.check.interval.ms`: how often retention and time-based flushes run.
    pub retention_check_interval_ms: i64,
    /// `transaction.max.timeout.ms`: the longest transaction timeout a producer may ask for.
    pub transaction_max_timeout_ms: i32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`: how often transactions past
    /// their timeout are aborted.
    pub transaction_cleanup_interval_ms: i64,
    /// `mirror.state.topic.num.partitions`: partitions (coordinator shards) of `__mirror_state`.
    pub mirror_state_partitions: i32,
    /// `offsets.topic.num.partitions` and `transaction.state.log.num.partitions`: the
    /// coordinator partitions groups and transactional ids hash to in a multi-process cluster
    /// (docs/cluster.md).
    pub coordinator_partitions: CoordinatorPartitions,
    /// `kmirror.log.format`: `text` (default) or `json`, one JSON object per log line.
    pub log_json: bool,
    /// `mirror.supervision.stall.timeout.ms`, `mirror.supervision.max.restarts` and
    /// `mirror.supervision.restart.window.ms`: when the engine restarts a mirror partition that
    /// makes no progress, and when it gives up (FAILED).
    pub mirror_liveness: LivenessPolicy,
    /// `mirror.metadata.refresh.interval.ms` (30000): how often each mirror's metadata sync runs
    /// (source cluster id, partition counts, topic configs, group offsets, ACLs).
    pub mirror_metadata_refresh_interval_ms: u64,
    /// `mirror.num.replica.fetchers` (256): the most Fetches in flight per source broker per
    /// mirror (each fetcher's pacing finds how many the link wants), unless the mirror's own
    /// configs say otherwise.
    pub mirror_num_replica_fetchers: usize,
    /// `metrics.listener` (`http://host:port`, off when absent): where Prometheus scrapes
    /// `/metrics`.
    pub metrics_listener: Option<SocketAddr>,
    /// `authorizer.enabled`, `super.users` (`;`-separated) and
    /// `allow.everyone.if.no.acl.found`.
    pub authorizer: AuthorizerConfig,
    /// Segment, retention and flush settings (`log.*`).
    pub log: LogConfig,
    /// `log.open.files.max` (half the process's open-file limit): segment log files held open
    /// at once; the least recently used beyond it are closed and reopened on use.
    pub log_open_files_max: usize,
    /// `group.min.session.timeout.ms` (6000) and `group.max.session.timeout.ms` (1800000): the
    /// session timeouts a JoinGroup may ask for (INVALID_SESSION_TIMEOUT outside).
    pub group_session_timeout_ms: std::ops::RangeInclusive<i32>,
    /// The `group.consumer.*` keys: KIP-848 consumer groups (`consumer_group_config`).
    pub group_consumer: ConsumerSettings,
    /// `log.message.timestamp.before.max.ms` (unbounded) and
    /// `log.message.timestamp.after.max.ms` (3600000, Kafka 4's default): how far before or
    /// after the broker's clock a produced record's create time may lie (INVALID_TIMESTAMP).
    pub message_timestamp_max_ms: (i64, i64),
    /// The listener's protections: `connections.max.idle.ms`, `max.connections`,
    /// `max.connections.per.ip`, `queued.max.request.bytes`, `fetch.max.wait.ms`.
    pub network: NetworkConfig,
}

/// Keys this broker knows but does not use yet (kept so they are not reported as unknown).
const ACCEPTED: &[&str] = &[
    "inter.broker.listener.name",
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "group.initial.rebalance.delay.ms",
];

/// Parses `key=value` lines (`#` and `!` comments, blank lines ignored).
pub fn parse_properties(text: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .or_else(|| line.split_once(':'))
            .ok_or_else(|| ConfigError::Syntax {
                line: i + 1,
                text: raw.to_string(),
            })?;
        out.insert(key.trim().to_string(), value.trim().to_string());
    }
    Ok(out)
}

/// How a range is told to whoever set a value outside it.
fn range_text(min: i64, max: i64) -> String {
    if max == i64::MAX {
        format!("must be at least {min}")
    } else {
        format!("must be between {min} and {max}")
    }
}

fn host_port(key: &str, value: &str) -> Result<(String, u16), ConfigError> {
    let first = value.split(',').next().unwrap_or_default().trim();
    let address = first
        .strip_prefix("PLAINTEXT://")
        .ok_or_else(|| invalid(key, value, "only a PLAINTEXT:// listener is supported"))?;
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| invalid(key, value, "expected PLAINTEXT://host:port"))?;
    let port = port
        .parse()
        .map_err(|_| invalid(key, value, "the port must be a number from 0 to 65535"))?;
    Ok((host.to_string(), port))
}

/// The client listener's bind address and what clients are told to connect to
/// (`advertised.listeners`, default the listener).
fn client_listener(
    listeners: &str,
    advertised: Option<&str>,
) -> Result<(SocketAddr, (String, u16)), ConfigError> {
    let (host, port) = host_port("listeners", listeners)?;
    let bind_host = if host.is_empty() {
        "0.0.0.0".to_string()
    } else {
        host.clone()
    };
    let listener: SocketAddr = format!("{bind_host}:{port}")
        .parse()
        .map_err(|_| invalid("listeners", listeners, "the host must be an IP address"))?;
    let advertised = match advertised {
        Some(v) => host_port("advertised.listeners", v)?,
        None => (
            if host.is_empty() {
                "127.0.0.1".to_string()
            } else {
                host
            },
            port,
        ),
    };
    Ok((listener, advertised))
}

/// A controller-only node's controller address as `(host, port)` (it has no other endpoint;
/// its voters entry names the listener's port, as the cluster keys check).
fn controller_endpoint(cluster: &super::quorum_config::ClusterConfig) -> (String, u16) {
    let address = &cluster.controller_address;
    let host = address
        .rsplit_once(':')
        .map_or(address.as_str(), |(host, _)| host);
    (host.to_string(), cluster.controller_listener.port())
}

impl BrokerConfig {
    /// Reads the properties; returns the config and the unknown keys (to report).
    pub fn from_properties(
        props: &BTreeMap<String, String>,
    ) -> Result<(BrokerConfig, Vec<String>), ConfigError> {
        let get = |k: &str| props.get(k).map(String::as_str);
        let number = |k: &'static str, default: i64| -> Result<i64, ConfigError> {
            match get(k) {
                None => Ok(default),
                Some(v) => v.parse().map_err(|_| invalid(k, v, "not a number")),
            }
        };
        // A whole number in `min..=max`.
        let ranged =
            |k: &'static str, default: i64, min: i64, max: i64| -> Result<i64, ConfigError> {
                let v = number(k, default)?;
                if !(min..=max).contains(&v) {
                    return Err(invalid(k, &v.to_string(), range_text(min, max)));
                }
                Ok(v)
            };
        let int_max = i64::from(i32::MAX);
        let node_id = ranged("node.id", 1, 0, int_max)? as i32;
        let cluster = super::quorum_config::from_properties(props, node_id)?;
        let client = match &cluster {
            Some((_, client)) => client.as_deref(),
            None => Some(get("listeners").ok_or(ConfigError::Missing("listeners"))?),
        };
        let (listener, advertised) = match (client, &cluster) {
            (Some(listeners), _) => {
                let (listener, advertised) =
                    client_listener(listeners, get("advertised.listeners"))?;
                (Some(listener), advertised)
            }
            (None, Some((cluster, _))) => (None, controller_endpoint(cluster)),
            (None, None) => return Err(ConfigError::Missing("listeners")),
        };
        let (dirs_key, dirs) = match (get("log.dirs"), get("log.dir")) {
            (Some(dirs), _) => ("log.dirs", dirs),
            (None, Some(dir)) => ("log.dir", dir),
            (None, None) => return Err(ConfigError::Missing("log.dirs")),
        };
        // Empty entries are dropped as Kafka's list parsing does; an empty path would be the
        // working directory.
        let log_dir = match dirs
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .collect::<Vec<_>>()[..]
        {
            [dir] => PathBuf::from(dir),
            [] => return Err(invalid(dirs_key, dirs, "must name a directory")),
            _ => {
                return Err(invalid(
                    dirs_key,
                    dirs,
                    "several log directories (JBOD) are not supported: give one",
                ));
            }
        };
        let num_partitions = ranged("num.partitions", 1, 1, 100_000)?;
        let default_replication_factor = ranged("default.replication.factor", 1, 1, 32_767)?;
        let min_insync_replicas = ranged("min.insync.replicas", 1, 1, 32_767)?;
        let replica_lag_time_max_ms = ranged("replica.lag.time.max.ms", 30_000, 1, int_max)?;
        let auto_create_topics = match get("auto.create.topics.enable").unwrap_or("true") {
            "true" => true,
            "false" => false,
            other => {
                return Err(invalid(
                    "auto.create.topics.enable",
                    other,
                    "must be true or false",
                ));
            }
        };
        let defaults = LogConfig::default();
        let positive = |k: &'static str, default: i64| ranged(k, default, 1, i64::MAX);
        let log = LogConfig {
            segment_bytes: ranged(
                "log.segment.bytes",
                defaults.segment_bytes as i64,
                crate::storage::config::MIN_SEGMENT_BYTES,
                int_max,
            )? as u64,
            // As Kafka: log.roll.ms, else log.roll.hours.
            segment_ms: match get("log.roll.ms") {
                Some(_) => positive("log.roll.ms", defaults.segment_ms)?,
                None => {
                    ranged(
                        "log.roll.hours",
                        defaults.segment_ms / 3_600_000,
                        1,
                        int_max,
                    )? * 3_600_000
                }
            },
            index_interval_bytes: ranged(
                "log.index.interval.bytes",
                defaults.index_interval_bytes as i64,
                0,
                int_max,
            )? as u64,
            // -1 is unlimited.
            retention_bytes: ranged(
                "log.retention.bytes",
                defaults.retention_bytes,
                -1,
                i64::MAX,
            )?,
            // As Kafka: log.retention.ms, else log.retention.minutes, else log.retention.hours.
            retention_ms: match (get("log.retention.ms"), get("log.retention.minutes")) {
                (Some(_), _) => ranged("log.retention.ms", defaults.retention_ms, -1, i64::MAX)?,
                (None, Some(_)) => match ranged("log.retention.minutes", 0, -1, int_max)? {
                    -1 => -1,
                    minutes => minutes * 60_000,
                },
                (None, None) => match ranged(
                    "log.retention.hours",
                    defaults.retention_ms / 3_600_000,
                    -1,
                    int_max,
                )? {
                    -1 => -1,
                    hours => hours * 3_600_000,
                },
            },
            flush_messages: positive("log.flush.interval.messages", i64::MAX)? as u64,
            flush_ms: positive("log.flush.interval.ms", i64::MAX)?,
            max_message_bytes: ranged(
                "message.max.bytes",
                defaults.max_message_bytes as i64,
                0,
                int_max,
            )? as u64,
        };
        let log_open_files_max = positive(
            "log.open.files.max",
            i64::try_from(OpenFiles::default_max()).unwrap_or(i64::MAX),
        )? as usize;
        let max_request_bytes =
            ranged("socket.request.max.bytes", 100 * 1024 * 1024, 1, int_max)? as usize;
        let network = NetworkConfig::from_properties(props, max_request_bytes)?;
        let retention_check_interval_ms = positive("log.retention.check.interval.ms", 300_000)?;
        let transaction_max_timeout_ms = ranged("transaction.max.timeout.ms", 900_000, 1, int_max)?;
        let transaction_cleanup_interval_ms = ranged(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            10_000,
            1,
            int_max,
        )?;
        let flag = |k: &'static str| match get(k).unwrap_or("false") {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(invalid(k, other, "must be true or false")),
        };
        let authorizer = AuthorizerConfig {
            enabled: flag("authorizer.enabled")?,
            super_users: get("super.users")
                .unwrap_or_default()
                .split(';')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect(),
            allow_if_no_acls: flag("allow.everyone.if.no.acl.found")?,
        };
        if let Some(bad) = authorizer.super_users.iter().find(|p| !p.contains(':')) {
            return Err(invalid(
                "super.users",
                bad,
                "principals are written Type:name",
            ));
        }
        let mirror_state_partitions = ranged("mirror.state.topic.num.partitions", 50, 1, 10_000)?;
        let coordinator_partitions = CoordinatorPartitions {
            groups: ranged("offsets.topic.num.partitions", 50, 1, 10_000)? as i32,
            transactions: ranged("transaction.state.log.num.partitions", 50, 1, 10_000)? as i32,
        };
        let log_json = match get("kmirror.log.format").unwrap_or("text") {
            "text" => false,
            "json" => true,
            other => return Err(invalid("kmirror.log.format", other, "text or json")),
        };
        let liveness = LivenessPolicy::default();
        let mirror_liveness = LivenessPolicy {
            stall_timeout_ms: positive(
                "mirror.supervision.stall.timeout.ms",
                liveness.stall_timeout_ms as i64,
            )? as u64,
            max_restarts: ranged(
                "mirror.supervision.max.restarts",
                i64::from(liveness.max_restarts),
                0,
                i64::from(u32::MAX),
            )? as u32,
            restart_window_ms: positive(
                "mirror.supervision.restart.window.ms",
                liveness.restart_window_ms as i64,
            )? as u64,
        };
        let mirror_metadata_refresh_interval_ms =
            positive("mirror.metadata.refresh.interval.ms", 30_000)? as u64;
        let mirror_num_replica_fetchers = ranged(
            "mirror.num.replica.fetchers",
            DEFAULT_MAX_FETCHES_IN_FLIGHT,
            1,
            MAX_FETCHES_IN_FLIGHT,
        )?;
        let message_timestamp_max_ms = (
            ranged("log.message.timestamp.before.max.ms", i64::MAX, 0, i64::MAX)?,
            ranged("log.message.timestamp.after.max.ms", 3_600_000, 0, i64::MAX)?,
        );
        let group_min_session_timeout_ms = positive("group.min.session.timeout.ms", 6_000)?;
        let group_max_session_timeout_ms = positive("group.max.session.timeout.ms", 1_800_000)?;
        if group_max_session_timeout_ms > i64::from(i32::MAX) {
            return Err(invalid(
                "group.max.session.timeout.ms",
                &group_max_session_timeout_ms.to_string(),
                "at most 2147483647",
            ));
        }
        if group_min_session_timeout_ms > group_max_session_timeout_ms {
            return Err(invalid(
                "group.min.session.timeout.ms",
                &group_min_session_timeout_ms.to_string(),
                "must not exceed group.max.session.timeout.ms",
            ));
        }
        let metrics_listener = match get("metrics.listener").map(str::trim) {
            None | Some("") => None,
            Some(value) => Some(
                value
                    .strip_prefix("http://")
                    .unwrap_or(value)
                    .trim_end_matches('/')
                    .parse()
                    .map_err(|_| invalid("metrics.listener", value, "expected http://host:port"))?,
            ),
        };
        let known = [
            "node.id",
            "process.roles",
            "controller.quorum.voters",
            "controller.listener.names",
            "listener.security.protocol.map",
            "broker.heartbeat.interval.ms",
            "broker.session.timeout.ms",
            "auto.leader.rebalance.enable",
            "leader.imbalance.check.interval.seconds",
            "leader.imbalance.per.broker.percentage",
            "controller.quorum.secret.file",
            "metrics.listener",
            "listeners",
            "advertised.listeners",
            "log.dirs",
            "log.dir",
            "num.partitions",
            "default.replication.factor",
            "min.insync.replicas",
            "replica.lag.time.max.ms",
            "auto.create.topics.enable",
            "log.segment.bytes",
            "log.open.files.max",
            "log.roll.ms",
            "log.index.interval.bytes",
            "log.retention.bytes",
            "log.retention.ms",
            "log.retention.minutes",
            "log.retention.hours",
            "log.roll.hours",
            "log.flush.interval.messages",
            "log.flush.interval.ms",
            "message.max.bytes",
            "socket.request.max.bytes",
            "log.retention.check.interval.ms",
            "transaction.max.timeout.ms",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "kmirror.log.format",
            "mirror.state.topic.num.partitions",
            "offsets.topic.num.partitions",
            "transaction.state.log.num.partitions",
            "mirror.supervision.stall.timeout.ms",
            "mirror.supervision.max.restarts",
            "mirror.supervision.restart.window.ms",
            "mirror.metadata.refresh.interval.ms",
            "mirror.num.replica.fetchers",
            "authorizer.enabled",
            "super.users",
            "allow.everyone.if.no.acl.found",
            "group.min.session.timeout.ms",
            "group.max.session.timeout.ms",
            "log.message.timestamp.before.max.ms",
            "log.message.timestamp.after.max.ms",
        ];
        let unknown = props
            .keys()
            .filter(|k| {
                !known.contains(&k.as_str())
                    && !network::KEYS.contains(&k.as_str())
                    && !consumer_group_config::KEYS.contains(&k.as_str())
                    && !ACCEPTED.contains(&k.as_str())
            })
            .cloned()
            .collect();
        Ok((
            BrokerConfig {
                node_id,
                cluster: cluster.map(|(cluster, _)| cluster),
                listener,
                advertised,
                log_dir,
                num_partitions: num_partitions as i32,
                default_replication_factor: default_replication_factor as i32,
                min_insync_replicas: min_insync_replicas as i32,
                replica_lag_time_max_ms,
                auto_create_topics,
                max_request_bytes,
                retention_check_interval_ms,
                transaction_max_timeout_ms: transaction_max_timeout_ms as i32,
                transaction_cleanup_interval_ms,
                mirror_state_partitions: mirror_state_partitions as i32,
                coordinator_partitions,
                mirror_liveness,
                mirror_metadata_refresh_interval_ms,
                mirror_num_replica_fetchers: mirror_num_replica_fetchers as usize,
                log_open_files_max,
                group_session_timeout_ms: group_min_session_timeout_ms as i32
                    ..=group_max_session_timeout_ms as i32,
                group_consumer: consumer_group_config::from_properties(props)?,
                message_timestamp_max_ms,
                network,
                metrics_listener,
                log_json,
                authorizer,
                log,
            },
            unknown,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kafka_style_properties() {
        let props = parse_properties(
            "# broker\nnode.id=3\nlisteners=PLAINTEXT://127.0.0.1:29092\nlog.dirs=/tmp/a\nnum.partitions = 4\nlog.retention.hours=1\nfancy.key=1\nmirror.state.topic.num.partitions=50\n",
        )
        .expect("parses");
        let (c, unknown) = BrokerConfig::from_properties(&props).expect("valid");
        assert_eq!(c.node_id, 3);
        assert_eq!(c.listener, Some("127.0.0.1:29092".parse().expect("addr")));
        assert_eq!(c.advertised, ("127.0.0.1".to_string(), 29092));
        assert_eq!(c.log_dir, PathBuf::from("/tmp/a"));
        assert_eq!(c.num_partitions, 4);
        assert_eq!(c.log.retention_ms, 3_600_000);
        assert_eq!(unknown, ["fancy.key"]);
        assert!(!c.authorizer.enabled, "authorization is off by default");
        assert_eq!(c.transaction_max_timeout_ms, 900_000);
    }

    #[test]
    fn reads_the_authorizer_settings() {
        let props = parse_properties(
            "listeners=PLAINTEXT://127.0.0.1:1\nlog.dirs=/tmp/x\nauthorizer.enabled=true\nsuper.users=User:admin; User:ops\nallow.everyone.if.no.acl.found=true\n",
        )
        .expect("parses");
        let (c, unknown) = BrokerConfig::from_properties(&props).expect("valid");
        assert!(unknown.is_empty());
        assert_eq!(
            c.authorizer,
            AuthorizerConfig {
                enabled: true,
                super_users: vec!["User:admin".to_string(), "User:ops".to_string()],
                allow_if_no_acls: true,
            }
        );
    }

    #[test]
    fn refuses_what_cannot_work() {
        let base = "listeners=PLAINTEXT://127.0.0.1:1\nlog.dirs=/tmp/x\n";
        for (extra, key) in [
            ("num.partitions=0\n", "num.partitions"),
            ("num.partitions=many\n", "num.partitions"),
            ("log.segment.bytes=-5\n", "log.segment.bytes"),
            (
                "auto.create.topics.enable=yes\n",
                "auto.create.topics.enable",
            ),
            ("authorizer.enabled=on\n", "authorizer.enabled"),
            ("super.users=admin\n", "super.users"),
            (
                "transaction.max.timeout.ms=0\n",
                "transaction.max.timeout.ms",
            ),
        ] {
            let props = parse_properties(&format!("{base}{extra}")).expect("parses");
            let err = BrokerConfig::from_properties(&props).expect_err("invalid");
            assert!(err.to_string().starts_with(key), "{err}");
        }
        let props = parse_properties("log.dirs=/tmp/x\n").expect("parses");
        assert_eq!(
            BrokerConfig::from_properties(&props),
            Err(ConfigError::Missing("listeners"))
        );
        let props = parse_properties("listeners=PLAINTEXT://127.0.0.1:1\n").expect("parses");
        assert_eq!(
            BrokerConfig::from_properties(&props),
            Err(ConfigError::Missing("log.dirs"))
        );
        let props = parse_properties("listeners=SSL://h:1\nlog.dirs=/x\n").expect("parses");
        assert!(BrokerConfig::from_properties(&props).is_err());
        assert!(parse_properties("just words\n").is_err());
    }

    /// Issue 18 item 10: each key refuses a value outside its range, naming the key, and takes
    /// the values at the ends of it.
    #[test]
    fn every_key_is_refused_outside_its_range_with_the_key_named() {
        let base = "listeners=PLAINTEXT://127.0.0.1:1\nlog.dirs=/tmp/x\n";
        let config = |extra: &str| {
            let props = parse_properties(&format!("{base}{extra}")).expect("parses");
            BrokerConfig::from_properties(&props)
        };
        for (key, bad) in [
            ("node.id", "-1"),
            ("node.id", "2147483648"),
            ("listeners", "PLAINTEXT://127.0.0.1:65536"),
            ("advertised.listeners", "PLAINTEXT://h:-1"),
            ("num.partitions", "100001"),
            ("socket.request.max.bytes", "0"),
            ("socket.request.max.bytes", "2147483648"),
            ("log.segment.bytes", "1"),
            ("log.segment.bytes", "13"),
            ("log.segment.bytes", "1048575"),
            ("log.segment.bytes", "2147483648"),
            ("log.roll.ms", "0"),
            ("log.index.interval.bytes", "-1"),
            ("log.index.interval.bytes", "2147483648"),
            ("log.retention.bytes", "-2"),
            ("log.retention.ms", "-2"),
            ("log.retention.hours", "-2"),
            ("log.retention.hours", "2147483648"),
            ("log.flush.interval.messages", "0"),
            ("log.flush.interval.ms", "0"),
            ("message.max.bytes", "-1"),
            ("message.max.bytes", "2147483648"),
            ("log.retention.check.interval.ms", "0"),
            ("log.open.files.max", "0"),
            ("transaction.max.timeout.ms", "2147483648"),
            (
                "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                "0",
            ),
            (
                "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                "2147483648",
            ),
            ("allow.everyone.if.no.acl.found", "maybe"),
            ("mirror.state.topic.num.partitions", "10001"),
            ("mirror.supervision.stall.timeout.ms", "0"),
            ("mirror.supervision.max.restarts", "-1"),
            ("mirror.supervision.max.restarts", "4294967296"),
            ("mirror.supervision.restart.window.ms", "0"),
            ("mirror.metadata.refresh.interval.ms", "0"),
            ("mirror.num.replica.fetchers", "0"),
            ("mirror.num.replica.fetchers", "1025"),
            ("metrics.listener", "http://127.0.0.1:65536"),
            ("kmirror.log.format", "xml"),
        ] {
            let err = config(&format!("{key}={bad}\n")).expect_err(key);
            assert!(
                err.to_string().starts_with(&format!("{key}=")),
                "{key}: {err}"
            );
        }
        let (c, unknown) = config(
            "node.id=0\nlog.segment.bytes=1048576\nlog.index.interval.bytes=0\nlog.retention.hours=-1\n\
             log.retention.bytes=-1\nmirror.supervision.max.restarts=0\nmirror.num.replica.fetchers=1024\n\
             mirror.supervision.max.restart=5\nmessage.max.bytes=0\n",
        )
        .expect("the ends of the ranges are valid");
        assert_eq!(c.node_id, 0);
        assert_eq!(c.log.segment_bytes, 1 << 20);
        assert_eq!(c.log.index_interval_bytes, 0);
        assert_eq!((c.log.retention_ms, c.log.retention_bytes), (-1, -1));
        assert_eq!(
            unknown,
            ["mirror.supervision.max.restart"],
            "a misspelt mirror key is reported"
        );
    }

    /// Issue 18 item 10: `log.dirs` names exactly one directory; an empty value (which was the
    /// working directory) and a list (whose later entries were ignored) are refused.
    #[test]
    fn log_dirs_names_exactly_one_directory() {
        let config = |dirs: &str| {
            let props = parse_properties(&format!("listeners=PLAINTEXT://127.0.0.1:1\n{dirs}\n"))
                .expect("parses");
            BrokerConfig::from_properties(&props)
        };
        for (dirs, reason) in [
            ("log.dirs=", "must name a directory"),
            ("log.dirs= , ", "must name a directory"),
            ("log.dir=", "must name a directory"),
            ("log.dirs=/a,/b", "several log directories"),
        ] {
            let err = config(dirs).expect_err(dirs).to_string();
            assert!(
                err.starts_with(dirs.split('=').next().unwrap_or_default()) && err.contains(reason),
                "{dirs}: {err}"
            );
        }
        let (c, _) = config("log.dirs= /a , ").expect("one directory");
        assert_eq!(c.log_dir, PathBuf::from("/a"));
        let (c, _) = config("log.dir=/b").expect("log.dir");
        assert_eq!(c.log_dir, PathBuf::from("/b"));
    }

    /// Kafka's other units of the retention and roll keys are read, with Kafka's precedence
    /// (ms, then minutes, then hours), not warned about and ignored.
    #[test]
    fn retention_and_roll_take_kafkas_minutes_and_hours_keys() {
        let config = |lines: &str| {
            let props = parse_properties(&format!(
                "listeners=PLAINTEXT://127.0.0.1:1\nlog.dirs=/a\n{lines}\n"
            ))
            .expect("parses");
            BrokerConfig::from_properties(&props).expect("valid").0.log
        };
        assert_eq!(config("log.retention.minutes=60").retention_ms, 3_600_000);
        assert_eq!(config("log.retention.minutes=-1").retention_ms, -1);
        let both = config("log.retention.minutes=60\nlog.retention.hours=1000");
        assert_eq!(both.retention_ms, 3_600_000);
        let all = config("log.retention.ms=5\nlog.retention.minutes=60");
        assert_eq!(all.retention_ms, 5);
        assert_eq!(config("log.roll.hours=2").segment_ms, 7_200_000);
        assert_eq!(config("log.roll.hours=2\nlog.roll.ms=9").segment_ms, 9);
        assert_eq!(config("").segment_ms, 7 * 24 * 3_600_000);
    }
}
