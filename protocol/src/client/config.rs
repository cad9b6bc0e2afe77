//! Client settings, read from a mirror's configuration (DECISIONS.md 9): `bootstrap.servers`,
//! `security.protocol`, `sasl.mechanism`, `sasl.username`, `sasl.password`,
//! `ssl.truststore.location` (PEM), `ssl.endpoint.identification.algorithm`,
//! `mirror.socket.receive.buffer.bytes`, plus timeouts. The password is kept out of `Debug`.

use super::error::ClientError;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    /// Plain TCP.
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL over plain TCP.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    fn parse(s: &str) -> Result<SecurityProtocol, ClientError> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => SecurityProtocol::Plaintext,
            "SSL" => SecurityProtocol::Ssl,
            "SASL_PLAINTEXT" => SecurityProtocol::SaslPlaintext,
            "SASL_SSL" => SecurityProtocol::SaslSsl,
            other => {
                return Err(ClientError::Config(format!(
                    "unknown security.protocol {other:?}"
                )));
            }
        })
    }

    /// Whether the connection is encrypted.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether the connection authenticates with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// `sasl.mechanism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    /// PLAIN (RFC 4616).
    Plain,
    /// SCRAM-SHA-256 (RFC 5802, 7677).
    ScramSha256,
    /// SCRAM-SHA-512.
    ScramSha512,
}

impl SaslMechanism {
    /// The name Kafka uses.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    fn parse(s: &str) -> Result<SaslMechanism, ClientError> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "PLAIN" => SaslMechanism::Plain,
            "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
            "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
            other => {
                return Err(ClientError::Config(format!(
                    "unknown sasl.mechanism {other:?}"
                )));
            }
        })
    }
}

/// SASL credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslConfig {
    /// The mechanism.
    pub mechanism: SaslMechanism,
    /// The user.
    pub username: String,
    /// The password (never printed).
    pub password: String,
}

impl fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslConfig")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &"[hidden]")
            .finish()
    }
}

/// Everything a connection to the source needs.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `host:port` pairs to bootstrap from.
    pub bootstrap_servers: Vec<String>,
    /// How connections are secured.
    pub security_protocol: SecurityProtocol,
    /// SASL credentials, for SASL protocols.
    pub sasl: Option<SaslConfig>,
    /// PEM file of trusted CA certificates (the system roots are not used).
    pub truststore: Option<PathBuf>,
    /// Whether the server certificate must match the broker's host name or IP.
    pub verify_hostname: bool,
    /// The client id sent in request headers.
    pub client_id: String,
    /// Limit for connecting (TCP, TLS and SASL together).
    pub connect_timeout: Duration,
    /// Limit for one request.
    pub request_timeout: Duration,
    /// `mirror.socket.receive.buffer.bytes`; `None` leaves it to OS autotuning.
    pub socket_receive_buffer_bytes: Option<u32>,
}

impl ClientConfig {
    /// A plaintext client of `bootstrap` with default timeouts.
    pub fn plaintext(bootstrap: &str) -> ClientConfig {
        ClientConfig {
            bootstrap_servers: bootstrap.split(',').map(|s| s.trim().to_string()).collect(),
            security_protocol: SecurityProtocol::Plaintext,
            sasl: None,
            truststore: None,
            verify_hostname: true,
            client_id: "kmirror".into(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            socket_receive_buffer_bytes: None,
        }
    }

    /// Reads a mirror's configuration map.
    pub fn from_properties(props: &HashMap<String, String>) -> Result<ClientConfig, ClientError> {
        let get = |k: &str| props.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let bootstrap = get("bootstrap.servers")
            .ok_or_else(|| ClientError::Config("bootstrap.servers is required".into()))?;
        let mut config = ClientConfig::plaintext(bootstrap);
        if let Some(p) = get("security.protocol") {
            config.security_protocol = SecurityProtocol::parse(p)?;
        }
        if config.security_protocol.uses_sasl() {
            let mechanism = SaslMechanism::parse(get("sasl.mechanism").unwrap_or("PLAIN"))?;
            let username = get("sasl.username")
                .ok_or_else(|| ClientError::Config("sasl.username is required for SASL".into()))?;
            let password = props.get("sasl.password").cloned().unwrap_or_default();
            config.sasl = Some(SaslConfig {
                mechanism,
                username: username.to_string(),
                password,
            });
        }
        config.truststore = get("ssl.truststore.location").map(PathBuf::from);
        if let Some(algorithm) = props.get("ssl.endpoint.identification.algorithm") {
            config.verify_hostname = !algorithm.trim().is_empty();
        }
        let millis = |k: &str| -> Result<Option<u64>, ClientError> {
            get(k)
                .map(|v| {
                    v.parse().map_err(|_| {
                        ClientError::Config(format!("{k} must be a number of ms, not {v:?}"))
                    })
                })
                .transpose()
        };
        if let Some(ms) = millis("request.timeout.ms")? {
            config.request_timeout = Duration::from_millis(ms);
        }
        if let Some(ms) = millis("socket.connection.setup.timeout.ms")? {
            config.connect_timeout = Duration::from_millis(ms);
        }
        if let Some(v) = get("mirror.socket.receive.buffer.bytes") {
            let bytes: i64 = v.parse().map_err(|_| {
                ClientError::Config(format!(
                    "mirror.socket.receive.buffer.bytes must be a number, not {v:?}"
                ))
            })?;
            config.socket_receive_buffer_bytes = u32::try_from(bytes).ok().filter(|b| *b > 0);
        }
        if config.security_protocol.uses_tls() && config.truststore.is_none() {
            return Err(ClientError::Config(
                "ssl.truststore.location (a PEM file of CA certificates) is required for TLS"
                    .into(),
            ));
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn reads_mirror_configs_and_hides_the_password() {
        let c = ClientConfig::from_properties(&props(&[
            ("bootstrap.servers", "a:9092, b:9092"),
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "alice"),
            ("sasl.password", "s3cret"),
            ("ssl.truststore.location", "/etc/ca.pem"),
            ("ssl.endpoint.identification.algorithm", ""),
            ("mirror.socket.receive.buffer.bytes", "-1"),
        ]))
        .expect("valid");
        assert_eq!(c.bootstrap_servers, ["a:9092", "b:9092"]);
        assert_eq!(c.security_protocol, SecurityProtocol::SaslSsl);
        assert!(!c.verify_hostname);
        assert_eq!(c.socket_receive_buffer_bytes, None);
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn rejects_what_cannot_work() {
        for bad in [
            props(&[]),
            props(&[("bootstrap.servers", "a:1"), ("security.protocol", "TLS")]),
            props(&[("bootstrap.servers", "a:1"), ("security.protocol", "SSL")]),
            props(&[
                ("bootstrap.servers", "a:1"),
                ("security.protocol", "SASL_PLAINTEXT"),
            ]),
            props(&[
                ("bootstrap.servers", "a:1"),
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.username", "u"),
                ("sasl.mechanism", "GSSAPI"),
            ]),
            props(&[("bootstrap.servers", "a:1"), ("request.timeout.ms", "soon")]),
        ] {
            assert!(
                matches!(
                    ClientConfig::from_properties(&bad),
                    Err(ClientError::Config(_))
                ),
                "{bad:?}"
            );
        }
    }
}
