//! Client settings, read from a mirror's configuration with Kafka's own client keys, so an
//! operator pastes the properties their Kafka clients or MirrorMaker 2 already use:
//! `bootstrap.servers`, `security.protocol`, `sasl.mechanism` with `sasl.jaas.config` (or the
//! `sasl.username` / `sasl.password` shorthand), the `ssl.truststore.*` and `ssl.keystore.*`
//! stores (see [`super::stores`]), `ssl.endpoint.identification.algorithm`,
//! `socket.receive.buffer.bytes`, plus timeouts (`request.timeout.ms`, or the mirror-level
//! `socket.timeout.ms`; both set, they must agree). Secrets are kept out of `Debug`.

use super::error::ClientError;
use super::jaas::{self, LoginModule};
use super::oauthbearer::TokenSource;
use super::stores::{Keystore, Password, StoreSource, StoreType, Truststore};
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
    /// OAUTHBEARER (RFC 7628), with tokens from [`SaslConfig::oauthbearer`].
    OAuthBearer,
}

impl SaslMechanism {
    /// The name Kafka uses.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    fn parse(s: &str) -> Result<SaslMechanism, ClientError> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "PLAIN" => SaslMechanism::Plain,
            "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
            "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
            "OAUTHBEARER" => SaslMechanism::OAuthBearer,
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
    /// Where OAUTHBEARER tokens come from (that mechanism only).
    pub oauthbearer: Option<TokenSource>,
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
    /// The trusted CA certificates (the system roots are not used).
    pub truststore: Option<Truststore>,
    /// The client certificate and key, for sources that require mutual TLS.
    pub keystore: Option<Keystore>,
    /// Whether the server certificate must match the broker's host name or IP.
    pub verify_hostname: bool,
    /// The client id sent in request headers.
    pub client_id: String,
    /// Limit for connecting (TCP, TLS and SASL together).
    pub connect_timeout: Duration,
    /// Limit for one request.
    pub request_timeout: Duration,
    /// `socket.receive.buffer.bytes`; `None` leaves it to OS autotuning.
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
            keystore: None,
            verify_hostname: true,
            client_id: "kmirror".into(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            socket_receive_buffer_bytes: None,
        }
    }

    /// Reads a mirror's configuration map.
    pub fn from_properties(props: &HashMap<String, String>) -> Result<ClientConfig, ClientError> {
        let get = |k: &str| get(props, k);
        let bootstrap = get("bootstrap.servers")
            .ok_or_else(|| ClientError::Config("bootstrap.servers is required".into()))?;
        let mut config = ClientConfig::plaintext(bootstrap);
        if let Some(p) = get("security.protocol") {
            config.security_protocol = SecurityProtocol::parse(p)?;
        }
        if config.security_protocol.uses_sasl() {
            config.sasl = Some(sasl(props)?);
        }
        config.truststore = truststore(props)?;
        config.keystore = keystore(props)?;
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
        match (millis("request.timeout.ms")?, millis("socket.timeout.ms")?) {
            (Some(a), Some(b)) if a != b => {
                return Err(ClientError::Config(format!(
                    "request.timeout.ms ({a}) and socket.timeout.ms ({b}) both set the timeout \
                     of requests to the source: keep one"
                )));
            }
            (Some(ms), _) | (None, Some(ms)) => config.request_timeout = Duration::from_millis(ms),
            (None, None) => {}
        }
        if let Some(ms) = millis("socket.connection.setup.timeout.ms")? {
            config.connect_timeout = Duration::from_millis(ms);
        }
        if let Some(v) = get("socket.receive.buffer.bytes") {
            let bytes: i64 = v.parse().map_err(|_| {
                ClientError::Config(format!(
                    "socket.receive.buffer.bytes must be a number, not {v:?}"
                ))
            })?;
            if bytes > i64::from(u32::MAX) {
                return Err(ClientError::Config(format!(
                    "socket.receive.buffer.bytes must be at most {} (0 or less leaves it to \
                     the OS), not {bytes}",
                    u32::MAX
                )));
            }
            config.socket_receive_buffer_bytes = u32::try_from(bytes).ok().filter(|b| *b > 0);
        }
        if config.security_protocol.uses_tls() && config.truststore.is_none() {
            return Err(ClientError::Config(
                "TLS needs the source's CA certificates: ssl.truststore.location (a PEM or \
                 PKCS12 file) or ssl.truststore.certificates (PEM text)"
                    .into(),
            ));
        }
        Ok(config)
    }
}

/// A property's trimmed value, `None` when absent or blank.
fn get<'a>(props: &'a HashMap<String, String>, key: &str) -> Option<&'a str> {
    props.get(key).map(|v| v.trim()).filter(|v| !v.is_empty())
}

fn password(props: &HashMap<String, String>, key: &str) -> Option<Password> {
    props
        .get(key)
        .filter(|v| !v.is_empty())
        .map(|v| Password(v.clone()))
}

/// SASL credentials: `sasl.jaas.config` as Kafka clients write it, or the `sasl.username` /
/// `sasl.password` shorthand; the login module must fit `sasl.mechanism`.
fn sasl(props: &HashMap<String, String>) -> Result<SaslConfig, ClientError> {
    let mechanism = get(props, "sasl.mechanism")
        .map(SaslMechanism::parse)
        .transpose()?;
    let Some(text) = get(props, "sasl.jaas.config") else {
        let username = get(props, "sasl.username").ok_or_else(|| {
            ClientError::Config(
                "SASL needs credentials: sasl.jaas.config (as Kafka clients write it) or \
                 sasl.username and sasl.password"
                    .into(),
            )
        })?;
        let mechanism = mechanism.unwrap_or(SaslMechanism::Plain);
        if mechanism == SaslMechanism::OAuthBearer {
            return Err(ClientError::Config(
                "sasl.mechanism OAUTHBEARER needs sasl.jaas.config with OAuthBearerLoginModule"
                    .into(),
            ));
        }
        return Ok(SaslConfig {
            mechanism,
            username: username.to_string(),
            password: props.get("sasl.password").cloned().unwrap_or_default(),
            oauthbearer: None,
        });
    };
    let entry = jaas::parse(text)?;
    let module = entry.module()?;
    let mechanism = match (module, mechanism) {
        (LoginModule::Plain, None | Some(SaslMechanism::Plain)) => SaslMechanism::Plain,
        (
            LoginModule::Scram,
            Some(m @ (SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512)),
        ) => m,
        (LoginModule::Scram, None) => {
            return Err(ClientError::Config(
                "sasl.jaas.config uses ScramLoginModule: set sasl.mechanism to SCRAM-SHA-256 \
                 or SCRAM-SHA-512"
                    .into(),
            ));
        }
        (LoginModule::OAuthBearer, None | Some(SaslMechanism::OAuthBearer)) => {
            return Ok(SaslConfig {
                mechanism: SaslMechanism::OAuthBearer,
                username: String::new(),
                password: String::new(),
                oauthbearer: Some(token_source(props, &entry)?),
            });
        }
        (module, Some(mechanism)) => {
            return Err(ClientError::Config(format!(
                "sasl.jaas.config uses {module:?}LoginModule, which does not fit sasl.mechanism \
                 {}",
                mechanism.name()
            )));
        }
    };
    let option = |name: &str| {
        entry.option(name).map(str::to_string).ok_or_else(|| {
            ClientError::Config(format!(
                "sasl.jaas.config has no {name}=\"...\" option, which {} needs",
                mechanism.name()
            ))
        })
    };
    Ok(SaslConfig {
        mechanism,
        username: option("username")?,
        password: option("password")?,
        oauthbearer: None,
    })
}

/// OAUTHBEARER's token source: the client-credentials grant when
/// `sasl.oauthbearer.token.endpoint.url` is set (`clientId`, `clientSecret`, `scope` from the
/// JAAS entry), else an unsecured JWT for `unsecuredLoginStringClaim_sub`.
/// (`sasl.login.callback.handler.class` names Kafka's Java handler for the former; it is
/// accepted and implied by the endpoint.)
fn token_source(
    props: &HashMap<String, String>,
    entry: &jaas::JaasEntry,
) -> Result<TokenSource, ClientError> {
    let required = |name: &str| {
        entry.option(name).map(str::to_string).ok_or_else(|| {
            ClientError::Config(format!(
                "sasl.jaas.config has no {name}=\"...\" option, which the client-credentials \
                 grant of sasl.oauthbearer.token.endpoint.url needs"
            ))
        })
    };
    if let Some(endpoint) = get(props, "sasl.oauthbearer.token.endpoint.url") {
        return Ok(TokenSource::ClientCredentials {
            endpoint: endpoint.to_string(),
            client_id: required("clientId")?,
            client_secret: required("clientSecret")?,
            scope: entry.option("scope").map(str::to_string),
        });
    }
    let principal = entry
        .option("unsecuredLoginStringClaim_sub")
        .ok_or_else(|| {
            ClientError::Config(
                "OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url (with clientId and \
             clientSecret in sasl.jaas.config), or unsecuredLoginStringClaim_sub for a \
             broker that accepts unsecured tokens"
                    .into(),
            )
        })?;
    let lifetime_seconds = match entry.option("unsecuredLoginLifetimeSeconds") {
        None => 3600,
        Some(v) => v.parse().map_err(|_| {
            ClientError::Config(format!(
                "unsecuredLoginLifetimeSeconds={v:?} in sasl.jaas.config is not a number"
            ))
        })?,
    };
    Ok(TokenSource::Unsecured {
        principal: principal.to_string(),
        lifetime_seconds,
        scope: entry
            .option("unsecuredLoginStringClaim_scope")
            .map(str::to_string),
    })
}

fn store_type(
    props: &HashMap<String, String>,
    key: &str,
) -> Result<Option<StoreType>, ClientError> {
    get(props, key)
        .map(|t| StoreType::parse(key, t))
        .transpose()
}

/// `ssl.truststore.location` or `ssl.truststore.certificates`, with its type and password.
fn truststore(props: &HashMap<String, String>) -> Result<Option<Truststore>, ClientError> {
    let store_type = store_type(props, "ssl.truststore.type")?;
    let source = match (
        get(props, "ssl.truststore.location"),
        get(props, "ssl.truststore.certificates"),
    ) {
        (Some(_), Some(_)) => {
            return Err(ClientError::Config(
                "set ssl.truststore.location or ssl.truststore.certificates, not both".into(),
            ));
        }
        (Some(path), None) => StoreSource::File(PathBuf::from(path)),
        (None, Some(pem)) => {
            if store_type.is_some_and(|t| t != StoreType::Pem) {
                return Err(ClientError::Config(
                    "ssl.truststore.certificates is PEM text: ssl.truststore.type must be PEM"
                        .into(),
                ));
            }
            StoreSource::Inline(pem.to_string())
        }
        (None, None) => return Ok(None),
    };
    Ok(Some(Truststore {
        source,
        store_type,
        password: password(props, "ssl.truststore.password"),
    }))
}

/// `ssl.keystore.location` (with its type and passwords) or `ssl.keystore.certificate.chain`
/// with `ssl.keystore.key`.
fn keystore(props: &HashMap<String, String>) -> Result<Option<Keystore>, ClientError> {
    let store_type = store_type(props, "ssl.keystore.type")?;
    let key_password = password(props, "ssl.key.password");
    let chain = get(props, "ssl.keystore.certificate.chain");
    let key = password(props, "ssl.keystore.key");
    match (get(props, "ssl.keystore.location"), chain, key) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => Err(ClientError::Config(
            "set ssl.keystore.location or ssl.keystore.certificate.chain and ssl.keystore.key, \
             not both"
                .into(),
        )),
        (Some(path), None, None) => Ok(Some(Keystore::File {
            path: PathBuf::from(path),
            store_type,
            password: password(props, "ssl.keystore.password"),
            key_password,
        })),
        (None, Some(chain), Some(key)) => {
            if store_type.is_some_and(|t| t != StoreType::Pem) {
                return Err(ClientError::Config(
                    "ssl.keystore.certificate.chain and ssl.keystore.key are PEM text: \
                     ssl.keystore.type must be PEM"
                        .into(),
                ));
            }
            Ok(Some(Keystore::Inline {
                chain: chain.to_string(),
                key,
                key_password,
            }))
        }
        (None, Some(_), None) | (None, None, Some(_)) => Err(ClientError::Config(
            "ssl.keystore.certificate.chain and ssl.keystore.key go together".into(),
        )),
        (None, None, None) => Ok(None),
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
            ("socket.receive.buffer.bytes", "-1"),
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
            props(&[
                ("bootstrap.servers", "a:1"),
                ("socket.receive.buffer.bytes", "4294967296"),
            ]),
            props(&[
                ("bootstrap.servers", "a:1"),
                ("request.timeout.ms", "1000"),
                ("socket.timeout.ms", "2000"),
            ]),
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

    #[test]
    fn kafkas_client_keys_are_read_and_inconsistent_ones_refused() {
        let scram = ClientConfig::from_properties(&props(&[
            ("bootstrap.servers", "a:9093"),
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-256"),
            (
                "sasl.jaas.config",
                "org.apache.kafka.common.security.scram.ScramLoginModule required \
                 username=\"alice\" password=\"s3cret\";",
            ),
            ("ssl.truststore.type", "PKCS12"),
            ("ssl.truststore.location", "/etc/trust.p12"),
            ("ssl.truststore.password", "trust-pass"),
            ("ssl.keystore.location", "/etc/me.p12"),
            ("ssl.keystore.password", "key-pass"),
        ]))
        .expect("valid");
        let sasl = scram.sasl.as_ref().expect("SASL");
        assert_eq!(
            (
                sasl.mechanism,
                sasl.username.as_str(),
                sasl.password.as_str()
            ),
            (SaslMechanism::ScramSha256, "alice", "s3cret")
        );
        assert!(matches!(
            &scram.truststore,
            Some(Truststore {
                store_type: Some(StoreType::Pkcs12),
                ..
            })
        ));
        assert!(scram.keystore.is_some());
        let shown = format!("{scram:?}");
        for secret in ["s3cret", "trust-pass", "key-pass"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        let base = [
            ("bootstrap.servers", "a:9093"),
            ("security.protocol", "SASL_SSL"),
            ("ssl.truststore.location", "/etc/ca.pem"),
        ];
        for (extra, reason) in [
            (
                vec![(
                    "sasl.jaas.config",
                    "x.ScramLoginModule required username=\"a\" password=\"b\";",
                )],
                "set sasl.mechanism to SCRAM",
            ),
            (
                vec![
                    ("sasl.mechanism", "PLAIN"),
                    (
                        "sasl.jaas.config",
                        "x.ScramLoginModule required username=\"a\" password=\"b\";",
                    ),
                ],
                "does not fit sasl.mechanism PLAIN",
            ),
            (
                vec![(
                    "sasl.jaas.config",
                    "x.PlainLoginModule required username=\"a\";",
                )],
                "no password=",
            ),
            (
                vec![
                    ("sasl.username", "a"),
                    ("ssl.truststore.certificates", "-----BEGIN CERTIFICATE-----"),
                ],
                "not both",
            ),
            (
                vec![
                    ("sasl.username", "a"),
                    ("ssl.keystore.key", "-----BEGIN PRIVATE KEY-----"),
                ],
                "go together",
            ),
            (
                vec![("sasl.username", "a"), ("ssl.truststore.type", "JKS")],
                "keytool",
            ),
        ] {
            let mut all: Vec<(&str, &str)> = base.to_vec();
            all.extend(extra);
            let error = ClientConfig::from_properties(&props(&all))
                .expect_err(reason)
                .to_string();
            assert!(error.contains(reason), "{reason}: {error}");
        }
    }
}
