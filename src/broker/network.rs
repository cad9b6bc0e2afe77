//! What the listener does against clients that would hold the broker: Kafka's connection keys,
//! the bound on request bytes being read, the cap on a Fetch's wait and the accept loop's
//! back-off. The decisions are pure code, here and in [`crate::accept_errors`] (the back-off);
//! [`super::server`] is the async shell applying them.
//!
//! - `max.connections` (2147483647): at the cap the listener stops accepting until a connection
//!   closes; new ones wait in the kernel's backlog, as behind Kafka's acceptor.
//! - `max.connections.per.ip` (2147483647): a connection beyond it is closed once accepted.
//! - `connections.max.idle.ms` (600000, -1 never): a connection that completes no request for
//!   that long is closed, whether it sent nothing or half a frame; so is one whose response the
//!   client does not take within it. A request being served is not idleness.
//! - `queued.max.request.bytes` (-1, unbounded): the bytes of requests being read or served at
//!   once. A frame reserves its declared size before its body is read; a connection that cannot
//!   reserve is not read (backpressure) until others finish. Memory follows the bytes received
//!   either way (`kmirror_protocol::frame::FrameBody`).
//! - `fetch.max.wait.ms` (30000): the longest a Fetch waits for data, whatever its
//!   `max_wait_ms`; a Fetch is released at once when its client disconnects.
//! - Accept errors (descriptors exhausted) pause the accept loop, doubling from 5 ms to 1 s until
//!   one succeeds, and are logged at most once per 10 s with how many occurred.

use super::config_error::{ConfigError, invalid};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::Duration;

/// The listener's protective settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkConfig {
    /// `connections.max.idle.ms`; None (-1): connections never idle out.
    pub connections_max_idle: Option<Duration>,
    /// `max.connections`.
    pub max_connections: usize,
    /// `max.connections.per.ip`.
    pub max_connections_per_ip: usize,
    /// `queued.max.request.bytes`; None (-1): unbounded.
    pub queued_max_request_bytes: Option<usize>,
    /// `fetch.max.wait.ms`: the cap on a Fetch's `max_wait_ms`.
    pub fetch_max_wait: Duration,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            connections_max_idle: Some(Duration::from_millis(600_000)),
            max_connections: i32::MAX as usize,
            max_connections_per_ip: i32::MAX as usize,
            queued_max_request_bytes: None,
            fetch_max_wait: Duration::from_millis(30_000),
        }
    }
}

/// The keys [`NetworkConfig::from_properties`] reads.
pub const KEYS: &[&str] = &[
    "connections.max.idle.ms",
    "max.connections",
    "max.connections.per.ip",
    "queued.max.request.bytes",
    "fetch.max.wait.ms",
];

impl NetworkConfig {
    /// Reads [`KEYS`] (absent keys take Kafka's defaults); `socket_request_max_bytes` bounds
    /// `queued.max.request.bytes` from below, as Kafka requires, so any frame fits the pool.
    pub fn from_properties(
        props: &BTreeMap<String, String>,
        socket_request_max_bytes: usize,
    ) -> Result<NetworkConfig, ConfigError> {
        let defaults = NetworkConfig::default();
        let number = |key: &'static str| -> Result<Option<i64>, ConfigError> {
            props
                .get(key)
                .map(|v| {
                    v.parse()
                        .map_err(|_| invalid(key, v, "not a number".to_string()))
                })
                .transpose()
        };
        let out_of =
            |key: &str, value: i64, reason: String| invalid(key, &value.to_string(), reason);
        let connections_max_idle = match number("connections.max.idle.ms")? {
            None => defaults.connections_max_idle,
            Some(-1) => None,
            Some(ms) if ms >= 1 => Some(Duration::from_millis(ms as u64)),
            Some(ms) => {
                return Err(out_of(
                    "connections.max.idle.ms",
                    ms,
                    "must be -1 (never) or positive".to_string(),
                ));
            }
        };
        let count = |key: &'static str, default: usize| -> Result<usize, ConfigError> {
            match number(key)? {
                None => Ok(default),
                Some(n) if (1..=i64::from(i32::MAX)).contains(&n) => Ok(n as usize),
                Some(n) => Err(out_of(
                    key,
                    n,
                    "must be between 1 and 2147483647".to_string(),
                )),
            }
        };
        let max_connections = count("max.connections", defaults.max_connections)?;
        let max_connections_per_ip =
            count("max.connections.per.ip", defaults.max_connections_per_ip)?;
        let queued_max_request_bytes = match number("queued.max.request.bytes")? {
            None | Some(-1) => None,
            Some(n) if usize::try_from(n).is_ok_and(|n| n >= socket_request_max_bytes) => {
                Some(n as usize)
            }
            Some(n) => {
                return Err(out_of(
                    "queued.max.request.bytes",
                    n,
                    format!(
                        "must be -1 (unbounded) or at least socket.request.max.bytes \
                         ({socket_request_max_bytes})"
                    ),
                ));
            }
        };
        let fetch_max_wait = match number("fetch.max.wait.ms")? {
            None => defaults.fetch_max_wait,
            Some(ms) if (0..=i64::from(i32::MAX)).contains(&ms) => Duration::from_millis(ms as u64),
            Some(ms) => {
                return Err(out_of(
                    "fetch.max.wait.ms",
                    ms,
                    "must be between 0 and 2147483647".to_string(),
                ));
            }
        };
        Ok(NetworkConfig {
            connections_max_idle,
            max_connections,
            max_connections_per_ip,
            queued_max_request_bytes,
            fetch_max_wait,
        })
    }
}

/// The connections open, per client address, against `max.connections` and
/// `max.connections.per.ip`. Every [`Connections::admit`] that returns true is matched by one
/// [`Connections::close`] of the same address.
#[derive(Debug)]
pub struct Connections {
    max: usize,
    max_per_ip: usize,
    open: usize,
    by_ip: HashMap<IpAddr, usize>,
}

impl Connections {
    /// No connection open yet.
    pub fn new(config: &NetworkConfig) -> Connections {
        Connections {
            max: config.max_connections,
            max_per_ip: config.max_connections_per_ip,
            open: 0,
            by_ip: HashMap::new(),
        }
    }

    /// Whether `max.connections` are open: accept nothing until one closes.
    pub fn is_full(&self) -> bool {
        self.open >= self.max
    }

    /// Counts a connection from `ip` if `max.connections.per.ip` allows it.
    pub fn admit(&mut self, ip: IpAddr) -> bool {
        let from_ip = self.by_ip.entry(ip).or_default();
        if *from_ip >= self.max_per_ip {
            return false;
        }
        *from_ip += 1;
        self.open += 1;
        true
    }

    /// A connection [`Connections::admit`] counted has closed.
    pub fn close(&mut self, ip: IpAddr) {
        if let Some(from_ip) = self.by_ip.get_mut(&ip) {
            *from_ip -= 1;
            if *from_ip == 0 {
                self.by_ip.remove(&ip);
            }
            self.open -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(text: &str) -> BTreeMap<String, String> {
        super::super::config::parse_properties(text).expect("parses")
    }

    #[test]
    fn kafka_defaults_and_ranges_with_the_key_named() {
        let config = NetworkConfig::from_properties(&props(""), 100).expect("valid");
        assert_eq!(config, NetworkConfig::default());
        assert_eq!(config.connections_max_idle, Some(Duration::from_secs(600)));
        assert_eq!(config.max_connections, 2_147_483_647);
        assert_eq!(config.queued_max_request_bytes, None);
        let config = NetworkConfig::from_properties(
            &props(
                "connections.max.idle.ms=-1\nmax.connections=10\nmax.connections.per.ip=2\n\
                 queued.max.request.bytes=100\nfetch.max.wait.ms=0\n",
            ),
            100,
        )
        .expect("valid");
        assert_eq!(config.connections_max_idle, None);
        assert_eq!(config.max_connections, 10);
        assert_eq!(config.max_connections_per_ip, 2);
        assert_eq!(config.queued_max_request_bytes, Some(100));
        assert_eq!(config.fetch_max_wait, Duration::ZERO);
        for (line, key) in [
            ("connections.max.idle.ms=0", "connections.max.idle.ms"),
            ("connections.max.idle.ms=-2", "connections.max.idle.ms"),
            ("max.connections=0", "max.connections"),
            ("max.connections=2147483648", "max.connections"),
            ("max.connections.per.ip=-1", "max.connections.per.ip"),
            ("queued.max.request.bytes=99", "queued.max.request.bytes"),
            ("queued.max.request.bytes=0", "queued.max.request.bytes"),
            ("fetch.max.wait.ms=-1", "fetch.max.wait.ms"),
            ("fetch.max.wait.ms=soon", "fetch.max.wait.ms"),
        ] {
            let err = NetworkConfig::from_properties(&props(line), 100).expect_err(line);
            assert!(err.to_string().starts_with(&format!("{key}=")), "{err}");
        }
    }

    #[test]
    fn the_broker_config_reads_them_as_known_keys() {
        let (config, unknown) = super::super::config::BrokerConfig::from_properties(&props(
            "listeners=PLAINTEXT://127.0.0.1:1\nlog.dirs=/tmp/x\nsocket.request.max.bytes=1000\n\
             queued.max.request.bytes=1000\nmax.connections.per.ip=7\nfetch.max.wait.ms=250\n",
        ))
        .expect("valid");
        assert!(unknown.is_empty(), "{unknown:?}");
        assert_eq!(config.network.queued_max_request_bytes, Some(1000));
        assert_eq!(config.network.max_connections_per_ip, 7);
        assert_eq!(config.network.fetch_max_wait, Duration::from_millis(250));
        let err = super::super::config::BrokerConfig::from_properties(&props(
            "listeners=PLAINTEXT://127.0.0.1:1\nlog.dirs=/tmp/x\nqueued.max.request.bytes=1000\n",
        ))
        .expect_err("below the default socket.request.max.bytes");
        assert!(
            err.to_string().starts_with("queued.max.request.bytes=1000"),
            "{err}"
        );
    }

    #[test]
    fn connections_are_capped_in_all_and_per_address() {
        let config = NetworkConfig {
            max_connections: 3,
            max_connections_per_ip: 2,
            ..NetworkConfig::default()
        };
        let mut connections = Connections::new(&config);
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        assert!(connections.admit(a));
        assert!(connections.admit(a));
        assert!(!connections.admit(a), "a third from one address");
        assert!(!connections.is_full());
        assert!(connections.admit(b));
        assert!(connections.is_full());
        connections.close(a);
        assert!(!connections.is_full());
        assert!(connections.admit(a), "a slot of its address freed");
        connections.close(a);
        connections.close(a);
        connections.close(b);
        assert_eq!((connections.open, connections.by_ip.len()), (0, 0));
    }
}
