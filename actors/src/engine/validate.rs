//! CreateMirror with ValidateOnly, the engine's part ([`ValidateSource`]): could a mirror with
//! these configs run from this broker? The broker's network position, trust stores and
//! credentials are what matter, so the checks run here, not in the operator's tool.
//!
//! The checks run in this order and stop at the first that fails: every check answered either
//! passed or is the one that failed; the checks after it were not reached and are not answered.
//! - `configs`: every config as a real CreateMirror checks it
//!   ([`super::mirror_configs::validate`]), a given `mirror.source.cluster.id` that is not this
//!   cluster's, and the stores and credentials the client reads before connecting;
//! - `connection`: a TCP (and TLS) connection to `bootstrap.servers`; a TLS failure names the
//!   trust setting the source's certificate was checked against;
//! - `authentication`: SASL (a refusal names the mechanism and the key holding the
//!   credentials), or none when `security.protocol` has no SASL;
//! - `cluster.id`: the source's id; a given `mirror.source.cluster.id` must be it, and it must
//!   not be this cluster's;
//! - `topics`: Metadata of every topic: how many this principal sees, and topics refused for
//!   authorization (a failure naming them; other per-topic errors are only listed).
//!
//! Nothing is created, stored or started; the source connection is dropped afterwards.

use super::mirror_configs;
use super::system::MirrorSystem;
use crate::host::{Host, Source};
use crate::policy::MirrorError;
use actix::{Context, Handler, Message, ResponseActFuture, WrapFuture};
use kmirror_protocol::client::{ClientConfig, ClientError};
use kmirror_protocol::errors::ErrorCode;
use std::collections::BTreeMap;

/// Checks a mirror's configs and its source from this broker, creating nothing.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Result<Vec<SourceCheck>, MirrorError>")]
pub struct ValidateSource {
    /// The mirror's configs, as CreateMirror would store them.
    pub configs: BTreeMap<String, String>,
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceCheck {
    /// `configs`, `connection`, `authentication`, `cluster.id` or `topics`.
    pub name: &'static str,
    /// NONE when it passed.
    pub code: ErrorCode,
    /// What passed, or why it failed and what to change.
    pub message: String,
}

impl SourceCheck {
    fn passed(name: &'static str, message: impl Into<String>) -> SourceCheck {
        SourceCheck {
            name,
            code: ErrorCode::NONE,
            message: message.into(),
        }
    }

    fn failed(name: &'static str, code: ErrorCode, message: impl Into<String>) -> SourceCheck {
        SourceCheck {
            name,
            code,
            message: message.into(),
        }
    }
}

impl<H: Host> Handler<ValidateSource> for MirrorSystem<H> {
    type Result = ResponseActFuture<Self, Result<Vec<SourceCheck>, MirrorError>>;

    fn handle(&mut self, msg: ValidateSource, _: &mut Context<Self>) -> Self::Result {
        let host = self.host.clone();
        Box::pin(async move { Ok(run(&host, &msg.configs).await) }.into_actor(self))
    }
}

/// The checks, up to the first that fails.
async fn run<H: Host>(host: &H, configs: &BTreeMap<String, String>) -> Vec<SourceCheck> {
    let mut checks = Vec::new();
    let own = host.cluster_id();
    let checked = mirror_configs::validate(configs, host.settings().num_replica_fetchers).and_then(
        |settings| match configs.get("mirror.source.cluster.id") {
            Some(given) => mirror_configs::check_not_this_cluster(given, &own).map(|()| settings),
            None => Ok(settings),
        },
    );
    let client = match checked {
        Ok(settings) => settings.client,
        Err(e) => {
            checks.push(SourceCheck::failed(
                "configs",
                ErrorCode::INVALID_CONFIG,
                e.to_string(),
            ));
            return checks;
        }
    };
    // The client reads its stores and credentials here, before any connection.
    let source = match host.connect_source(client.clone()) {
        Ok(source) => source,
        Err(e) => {
            checks.push(SourceCheck::failed(
                "configs",
                ErrorCode::INVALID_CONFIG,
                e.to_string(),
            ));
            return checks;
        }
    };
    let keys = configs.len();
    checks.push(SourceCheck::passed(
        "configs",
        format!("{keys} key{} valid", if keys == 1 { "" } else { "s" }),
    ));

    // The first request connects: its failure tells which step refused.
    let found = source.cluster_id().await;
    let bootstrap = client.bootstrap_servers.join(",");
    match &found {
        Err(e @ ClientError::Timeout { .. }) => {
            checks.push(SourceCheck::failed(
                "connection",
                ErrorCode::NETWORK_EXCEPTION,
                format!("{e}{}", reach_hint(&bootstrap)),
            ));
            return checks;
        }
        Err(e @ ClientError::Connection { message, .. }) => {
            let hint = if cut_short(message) {
                protocol_hint(configs, &bootstrap)
            } else {
                reach_hint(&bootstrap)
            };
            checks.push(SourceCheck::failed(
                "connection",
                ErrorCode::NETWORK_EXCEPTION,
                format!("{e}{hint}"),
            ));
            return checks;
        }
        Err(ClientError::Tls { message, broker }) => {
            let hint = if cut_short(message)
                || ["InvalidContentType", "CorruptMessage"]
                    .iter()
                    .any(|m| message.contains(m))
            {
                protocol_hint(configs, &bootstrap)
            } else {
                trust_hint(configs, message)
            };
            checks.push(SourceCheck::failed(
                "connection",
                ErrorCode::NETWORK_EXCEPTION,
                format!("TLS handshake with {broker} failed: {message}{hint}"),
            ));
            return checks;
        }
        Err(ClientError::Config(message)) => {
            checks.push(SourceCheck::failed(
                "connection",
                ErrorCode::INVALID_CONFIG,
                message.clone(),
            ));
            return checks;
        }
        // Bytes came back but not Kafka's answers: another protocol on that port (TLS, or
        // not Kafka at all).
        Err(e @ ClientError::Protocol { .. }) => {
            checks.push(SourceCheck::failed(
                "connection",
                ErrorCode::NETWORK_EXCEPTION,
                format!("{e}{}", protocol_hint(configs, &bootstrap)),
            ));
            return checks;
        }
        _ => checks.push(SourceCheck::passed(
            "connection",
            format!("reached {bootstrap} {}", transport(&client, configs)),
        )),
    }
    match &found {
        Err(e @ ClientError::Authentication { .. }) => {
            checks.push(SourceCheck::failed(
                "authentication",
                ErrorCode::SASL_AUTHENTICATION_FAILED,
                format!("{e}{}", credentials_hint(&client, configs)),
            ));
            return checks;
        }
        _ => checks.push(SourceCheck::passed(
            "authentication",
            match &client.sasl {
                Some(sasl) => format!(
                    "SASL {} as {} accepted",
                    sasl.mechanism.name(),
                    sasl.username
                ),
                None if client.keystore.is_some() => {
                    "the TLS client certificate was accepted (no SASL)".to_string()
                }
                None => "none needed: security.protocol has no SASL".to_string(),
            },
        )),
    }
    let id = match found {
        Ok(id) => id,
        Err(e) => {
            let code = match &e {
                ClientError::Broker { code, .. } => *code,
                _ => ErrorCode::UNKNOWN_SERVER_ERROR,
            };
            checks.push(SourceCheck::failed(
                "cluster.id",
                code,
                format!("the source did not tell its cluster id: {e}"),
            ));
            return checks;
        }
    };
    match configs.get("mirror.source.cluster.id") {
        _ if id == own => {
            checks.push(SourceCheck::failed(
                "cluster.id",
                ErrorCode::INVALID_CONFIG,
                format!(
                    "{id} is this cluster's own id: bootstrap.servers ({bootstrap}) reach the \
                     destination itself"
                ),
            ));
            return checks;
        }
        Some(given) if *given != id => {
            checks.push(SourceCheck::failed(
                "cluster.id",
                ErrorCode::INVALID_CONFIG,
                format!(
                    "mirror.source.cluster.id {given} is not the cluster bootstrap.servers reach \
                     ({id}): correct it, or leave it out to take {id}"
                ),
            ));
            return checks;
        }
        Some(_) => checks.push(SourceCheck::passed(
            "cluster.id",
            format!("{id}, as mirror.source.cluster.id says"),
        )),
        None => checks.push(SourceCheck::passed(
            "cluster.id",
            format!("{id} (mirror.source.cluster.id is not set: a create stores this one)"),
        )),
    }

    match source.metadata(None).await {
        Err(e) => {
            let code = match &e {
                ClientError::Broker { code, .. } => *code,
                _ => ErrorCode::UNKNOWN_SERVER_ERROR,
            };
            checks.push(SourceCheck::failed(
                "topics",
                code,
                format!("Metadata of the source's topics failed: {e}"),
            ));
        }
        Ok(metadata) => {
            let visible = metadata.topics.len();
            let mut refused: Vec<(String, ErrorCode)> = metadata.refused.into_iter().collect();
            refused.sort();
            let denied: Vec<&str> = refused
                .iter()
                .filter(|(_, code)| *code == ErrorCode::TOPIC_AUTHORIZATION_FAILED)
                .map(|(name, _)| name.as_str())
                .collect();
            let listed = |names: Vec<String>| {
                let more = names.len().saturating_sub(5);
                let mut text = names.into_iter().take(5).collect::<Vec<_>>().join(", ");
                if more > 0 {
                    text.push_str(&format!(" and {more} more"));
                }
                text
            };
            if !denied.is_empty() {
                checks.push(SourceCheck::failed(
                    "topics",
                    ErrorCode::TOPIC_AUTHORIZATION_FAILED,
                    format!(
                        "{visible} topics visible; {} refused with TOPIC_AUTHORIZATION_FAILED: \
                         {}: grant the mirror's principal DESCRIBE and READ on them",
                        denied.len(),
                        listed(denied.iter().map(|n| n.to_string()).collect())
                    ),
                ));
            } else if refused.is_empty() {
                checks.push(SourceCheck::passed(
                    "topics",
                    if visible == 0 {
                        "0 topics visible: the source has none, or this principal may DESCRIBE \
                         none (Kafka leaves those out)"
                            .to_string()
                    } else {
                        format!("{visible} topics visible")
                    },
                ));
            } else {
                checks.push(SourceCheck::passed(
                    "topics",
                    format!(
                        "{visible} topics visible; {} answered with an error for now: {}",
                        refused.len(),
                        listed(
                            refused
                                .iter()
                                .map(|(name, code)| format!("{name} ({})", code.name()))
                                .collect()
                        )
                    ),
                ));
            }
        }
    }
    checks
}

/// Whether a connection failure means the listener answered, then hung up or sent what this
/// client cannot read: the usual sign of a `security.protocol` the listener does not speak
/// (TLS to a plaintext port, plaintext or no SASL to a TLS or SASL one).
fn cut_short(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    [
        "eof",
        "end of file",
        "stream ended",
        "frame",
        "reset by peer",
        "broken pipe",
    ]
    .iter()
    .any(|sign| lower.contains(sign))
}

/// What to check when the source could not be reached at all.
fn reach_hint(bootstrap: &str) -> String {
    format!(": is bootstrap.servers ({bootstrap}) right, and can this broker reach it?")
}

/// What to check when the listener does not speak the configured security protocol.
fn protocol_hint(configs: &BTreeMap<String, String>, bootstrap: &str) -> String {
    let protocol = configs
        .get("security.protocol")
        .map_or("PLAINTEXT", String::as_str);
    format!(
        ": the listener at {bootstrap} cut the connection short: is security.protocol \
         ({protocol}) the one it expects (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)?"
    )
}

/// How the connection was made, for a passed `connection` check.
fn transport(client: &ClientConfig, configs: &BTreeMap<String, String>) -> String {
    if !client.security_protocol.uses_tls() {
        return "(no TLS)".to_string();
    }
    match trust_key(configs) {
        Some(key) => format!("over TLS, the certificate trusted through {key}"),
        None => "over TLS, the certificate trusted by the system's roots".to_string(),
    }
}

/// The setting holding the certificates the source's is checked against, if one is set.
fn trust_key(configs: &BTreeMap<String, String>) -> Option<&'static str> {
    ["ssl.truststore.location", "ssl.truststore.certificates"]
        .into_iter()
        .find(|k| configs.contains_key(*k))
}

/// What to change after a failed TLS handshake.
fn trust_hint(configs: &BTreeMap<String, String>, message: &str) -> String {
    // The client's own explanation already names the keystore when the source refused the
    // client certificate.
    if message.contains("ssl.keystore") || message.contains("client certificate") {
        return String::new();
    }
    if message.contains("NotValidForName") {
        return ": the source's certificate does not name the host in bootstrap.servers \
                (ssl.endpoint.identification.algorithm= turns the name check off)"
            .to_string();
    }
    match (trust_key(configs), configs.get("ssl.truststore.location")) {
        (Some("ssl.truststore.location"), Some(path)) => format!(
            ": ssl.truststore.location ({path}) must hold the CA that signed the source's \
             certificate"
        ),
        (Some(key), _) => format!(": {key} must hold the CA that signed the source's certificate"),
        (None, _) => ": no ssl.truststore.location is set, so the system's roots were used: set \
                      it to the CA that signed the source's certificate"
            .to_string(),
    }
}

/// What to change after the source refused the SASL credentials.
fn credentials_hint(client: &ClientConfig, configs: &BTreeMap<String, String>) -> String {
    let mechanism = client
        .sasl
        .as_ref()
        .map(|s| s.mechanism.name())
        .unwrap_or("none");
    let key = if configs.contains_key("sasl.jaas.config") {
        "sasl.jaas.config"
    } else {
        "sasl.username and sasl.password"
    };
    format!(
        ": check the user and password in {key}, and sasl.mechanism ({mechanism}): the source \
         must know this user for this mechanism"
    )
}
