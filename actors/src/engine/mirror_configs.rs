//! A mirror's configs, checked as a whole in one place: CreateMirror refuses
//! what [`validate`] refuses, naming the key, and the engine loads a mirror through the same
//! function, so a stored mirror runs with exactly what was checked. The parsing itself belongs
//! to the parts that use each key: [`FetchSettings`] (`fetch.*`,
//! `mirror.num.replica.fetchers`, `mirror.replication.throttled.rate`), [`SyncFilters`] (the
//! topic, group, property and ACL patterns) and [`ClientConfig`] (the source client's
//! connection and security keys); this module adds what none of them checks:
//! `bootstrap.servers` as a `host:port` list, `fetch.backoff.ms`, and that every `mirror.*` key
//! is one a mirror has. Other keys are the source client's; those it does not know are
//! ignored, as Kafka's clients ignore them.
//!
//! Key names (docs/mirror-configs.md): the mirror-level keys are the KIP prototype's unprefixed
//! names (`fetch.max.bytes`, `topics.include`, ...). Their earlier `mirror.`-prefixed names stay
//! accepted as aliases ([`ALIASES`]): [`canonical`] renames them before anything reads the
//! configs and says which it renamed, so the caller can warn. Secrets ([`is_password`]) are
//! stored as given and never shown: DescribeConfigs hides them as Kafka hides its PASSWORD
//! type, and no log line prints a mirror's configs.
//!
//! [`check_not_this_cluster`] refuses a mirror whose source is the destination cluster itself
//! (starting a topic through it would truncate the topic it reads from).
//!
//! docs/mirror-configs.md is the operators' reference of these keys; keep the two together.

use super::fetch_settings::FetchSettings;
use super::sync_plan::SyncFilters;
use kmirror_protocol::client::ClientConfig;
use std::collections::{BTreeMap, HashMap};

/// Every `mirror.*` key a mirror's configs may hold under its own name.
pub const MIRROR_KEYS: &[&str] = &[
    "mirror.source.cluster.id",
    "mirror.num.replica.fetchers",
    "mirror.replication.throttled.rate",
    "mirror.topic.properties.exclude",
    super::gap_policy::GAP_POLICY,
];

/// The earlier `mirror.`-prefixed names of mirror-level keys, each with its name now.
pub const ALIASES: &[(&str, &str)] = &[
    ("mirror.fetch.max.bytes", "fetch.max.bytes"),
    (
        "mirror.fetch.response.max.bytes",
        "fetch.response.max.bytes",
    ),
    ("mirror.fetch.wait.max.ms", "fetch.wait.max.ms"),
    ("mirror.fetch.min.bytes", "fetch.min.bytes"),
    ("mirror.fetch.backoff.ms", "fetch.backoff.ms"),
    ("mirror.socket.timeout.ms", "socket.timeout.ms"),
    (
        "mirror.socket.receive.buffer.bytes",
        "socket.receive.buffer.bytes",
    ),
    ("mirror.topics.include", "topics.include"),
    ("mirror.topics.exclude", "topics.exclude"),
    ("mirror.groups.include", "groups.include"),
    ("mirror.groups.exclude", "groups.exclude"),
    ("mirror.acls.include", "acls.include"),
];

/// Whether `key` holds a secret (Kafka's PASSWORD type): a password, a secret, the JAAS entry
/// (it carries the SASL password or client secret) or a private key. Never shown.
pub fn is_password(key: &str) -> bool {
    key.contains("password")
        || key.contains("secret")
        || key == "sasl.jaas.config"
        || key == "ssl.keystore.key"
}

/// Kafka's PASSWORD-typed client keys that [`is_password`] does not name: PEM material given
/// inline (certificates included, as Kafka hides them too).
const INLINE_PEM_KEYS: [&str; 2] = [
    "ssl.keystore.certificate.chain",
    "ssl.truststore.certificates",
];

/// Whether a mirror config is never shown to a client: [`is_password`]'s secrets, a private
/// key's passphrase (`sasl.oauthbearer.assertion.private.key.passphrase`, Kafka 4.1) and
/// [`INLINE_PEM_KEYS`]: every key Kafka types PASSWORD (docs/mirror-configs.md).
pub fn is_secret(key: &str) -> bool {
    is_password(key) || key.contains("passphrase") || INLINE_PEM_KEYS.contains(&key)
}

/// A client's change of a mirror's configs from `current` to `next`, checked as a whole: valid
/// together ([`validate`]), `mirror.source.cluster.id` unchanged (it is what the mirror's
/// cluster-id guard checks), and a source client buildable from them as the engine will build
/// it (stores read, keys decrypted), so a config it could not use is refused, not logged later.
/// Answers the settings, or why the change is refused (INVALID_CONFIG).
pub fn check_change(
    current: &BTreeMap<String, String>,
    next: &BTreeMap<String, String>,
    broker_fetchers: usize,
) -> Result<MirrorSettings, String> {
    let id = "mirror.source.cluster.id";
    if next.get(id) != current.get(id) {
        return Err(format!(
            "{id} cannot change: it names the cluster this mirror copies (create another mirror \
             for another cluster)"
        ));
    }
    let settings = validate(next, broker_fetchers).map_err(|e| e.to_string())?;
    kmirror_protocol::client::SourceClient::new(settings.client.clone())
        .map_err(|e| e.to_string())?;
    Ok(settings)
}

/// A mirror's configs under their names now, and the aliases that were renamed (old, new).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical {
    /// The configs, every alias renamed.
    pub configs: BTreeMap<String, String>,
    /// The aliases found, each with the name it was renamed to.
    pub renamed: Vec<(&'static str, &'static str)>,
}

/// Renames the aliases of `configs`; refused when an alias and its key are both set to
/// different values (which one the operator meant is not knowable).
pub fn canonical(configs: &BTreeMap<String, String>) -> Result<Canonical, MirrorConfigError> {
    let mut out = configs.clone();
    let mut renamed = Vec::new();
    for &(old, new) in ALIASES {
        let Some(value) = out.remove(old) else {
            continue;
        };
        if let Some(current) = out.get(new).filter(|current| **current != value) {
            return Err(MirrorConfigError::Invalid(format!(
                "{old} is the old name of {new}, and the two are set to different values \
                 ({value:?}, {current:?}): keep only {new} (with --alter, also \
                 --delete-config {old})"
            )));
        }
        out.insert(new.to_string(), value);
        renamed.push((old, new));
    }
    Ok(Canonical {
        configs: out,
        renamed,
    })
}

/// Whether the mirror starts source topics by itself (`topics.include` names a pattern).
pub fn auto_mirrors(configs: &BTreeMap<String, String>) -> bool {
    canonical(configs).is_ok_and(|c| {
        c.configs
            .get("topics.include")
            .is_some_and(|v| v.split(',').any(|p| !p.trim().is_empty()))
    })
}

/// The warning for an alias in use.
pub fn alias_warning(old: &str, new: &str) -> String {
    format!("mirror config {old} is deprecated: it is now named {new}")
}

/// A mirror config that cannot be used; the message names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MirrorConfigError {
    /// A key's value is missing, does not parse or is out of range, or the key is unknown.
    #[error("{0}")]
    Invalid(String),
    /// The source is the destination cluster.
    #[error(
        "mirror.source.cluster.id {0} is this cluster's own id: the mirror's bootstrap.servers \
         reach this cluster, and a mirror's source must be another cluster"
    )]
    ThisCluster(String),
}

/// What a mirror runs with, once its configs are checked.
#[derive(Debug, Clone)]
pub struct MirrorSettings {
    /// The aliases its configs use, each with its name now (warn about them).
    pub renamed: Vec<(&'static str, &'static str)>,
    /// How it fetches.
    pub fetch: FetchSettings,
    /// How it reaches the source.
    pub client: ClientConfig,
}

/// Checks every config of a mirror being set (create, alter, a start's patterns), the
/// metadata sync's filters included; `broker_fetchers` is the broker's
/// `mirror.num.replica.fetchers`, the default of the mirror's own.
pub fn validate(
    configs: &BTreeMap<String, String>,
    broker_fetchers: usize,
) -> Result<MirrorSettings, MirrorConfigError> {
    let settings = runnable(configs, broker_fetchers)?;
    let Canonical { configs, renamed } = canonical(configs)?;
    SyncFilters::from_configs(&configs).map_err(|e| invalid_as_set(&e, &renamed))?;
    Ok(settings)
}

/// An invalid config's error, naming the key as the operator set it, old name included.
fn invalid_as_set(
    e: &dyn std::fmt::Display,
    renamed: &[(&'static str, &'static str)],
) -> MirrorConfigError {
    let mut message = e.to_string();
    for (old, new) in renamed {
        if message.contains(new) {
            message.push_str(&format!(" (set as {old}, its old name)"));
        }
    }
    MirrorConfigError::Invalid(message)
}

/// What a mirror runs with, from configs it holds: all checked but the metadata sync's
/// filters, which the sync alone reads and reports per kind when it cannot use them (its
/// counts of errors, docs/metrics.md) while the mirror's data flows on. A mirror loads with
/// this: a pattern a later version refuses (one that compiles only inside the whole-name
/// anchors, `x)|(.*`) must not stop the mirroring of a mirror that kept it before.
pub fn runnable(
    configs: &BTreeMap<String, String>,
    broker_fetchers: usize,
) -> Result<MirrorSettings, MirrorConfigError> {
    let Canonical { configs, renamed } = canonical(configs)?;
    let invalid = |e: &dyn std::fmt::Display| invalid_as_set(e, &renamed);
    let configs = &configs;
    if let Some(key) = configs
        .keys()
        .find(|k| k.starts_with("mirror.") && !MIRROR_KEYS.contains(&k.as_str()))
    {
        return Err(MirrorConfigError::Invalid(format!(
            "{key} is not a mirror config (see docs/mirror-configs.md)"
        )));
    }
    check_bootstrap(configs.get("bootstrap.servers").map(String::as_str))?;
    if configs
        .get("mirror.source.cluster.id")
        .is_some_and(|id| id.trim().is_empty())
    {
        return Err(MirrorConfigError::Invalid(
            "mirror.source.cluster.id is empty".into(),
        ));
    }
    let fetch = FetchSettings::from_configs(configs, broker_fetchers).map_err(|e| invalid(&e))?;
    let props: HashMap<String, String> = configs.clone().into_iter().collect();
    let client = ClientConfig::from_properties(&props).map_err(|e| invalid(&e))?;
    Ok(MirrorSettings {
        renamed,
        fetch,
        client,
    })
}

/// `bootstrap.servers`: required, comma-separated `host:port` entries (an IPv6 host in
/// brackets), no empty entry.
fn check_bootstrap(value: Option<&str>) -> Result<(), MirrorConfigError> {
    let invalid = |why: String| MirrorConfigError::Invalid(format!("bootstrap.servers {why}"));
    let value = value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| invalid("(the source cluster) is required".into()))?;
    for entry in value.split(',').map(str::trim) {
        let valid = entry.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty()
                && !host.contains(char::is_whitespace)
                && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !valid {
            return Err(invalid(format!(
                "{value:?}: {entry:?} is not host:port (a comma-separated list of host:port)"
            )));
        }
    }
    Ok(())
}

/// Refuses a mirror whose source cluster id is `own_cluster_id`.
pub fn check_not_this_cluster(
    source_cluster_id: &str,
    own_cluster_id: &str,
) -> Result<(), MirrorConfigError> {
    if source_cluster_id == own_cluster_id {
        Err(MirrorConfigError::ThisCluster(
            source_cluster_id.to_string(),
        ))
    } else {
        Ok(())
    }
}

/// Patterns a StartMirrorTopics or StopMirrorTopics request keeps for auto-discovery.
#[derive(Debug, Clone, Copy, Default)]
pub struct Patterns<'a> {
    /// A start's IncludePatterns: added to `topics.include`, and taken out of `topics.exclude`
    /// if an earlier stop put them there.
    pub include: &'a [String],
    /// A start's ExcludePatterns: added to `topics.exclude`.
    pub exclude: &'a [String],
    /// A stop's Patterns: each is taken out of `topics.include`, or else added to
    /// `topics.exclude`, so it starts nothing any more.
    pub stop: &'a [String],
}

/// `configs` with `patterns` kept in `topics.include` and `topics.exclude` (comma-separated
/// lists; an alias in use, such as `mirror.topics.include`, is written under its own name). An
/// unset `topics.exclude` starts from its default `__.*`, so internal topics stay excluded.
pub fn with_patterns(
    configs: &BTreeMap<String, String>,
    patterns: &Patterns<'_>,
) -> BTreeMap<String, String> {
    let mut out = configs.clone();
    let key_of = |key: &'static str| {
        ALIASES
            .iter()
            .find(|(old, new)| *new == key && configs.contains_key(*old))
            .map_or(key, |(old, _)| *old)
    };
    let (include_key, exclude_key) = (key_of("topics.include"), key_of("topics.exclude"));
    let list = |key: &str, default: &str| -> Vec<String> {
        configs
            .get(key)
            .map_or(default, String::as_str)
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut include = list(include_key, "");
    let mut exclude = list(exclude_key, "__.*");
    let add = |list: &mut Vec<String>, pattern: &String| {
        if !list.contains(pattern) {
            list.push(pattern.clone());
        }
    };
    for pattern in patterns.include {
        add(&mut include, pattern);
        exclude.retain(|p| p != pattern);
    }
    for pattern in patterns.exclude {
        add(&mut exclude, pattern);
    }
    for pattern in patterns.stop {
        if include.contains(pattern) {
            include.retain(|p| p != pattern);
        } else {
            add(&mut exclude, pattern);
        }
    }
    let mut put = |key: &str, list: Vec<String>, unchanged: Vec<String>| {
        if list == unchanged {
            return;
        }
        if list.is_empty() {
            out.remove(key);
        } else {
            out.insert(key.to_string(), list.join(","));
        }
    };
    put(include_key, include, list(include_key, ""));
    put(exclude_key, exclude, list(exclude_key, "__.*"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_and_stop_patterns_are_kept_for_auto_discovery() {
        let configs = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let s = |v: &[&str]| v.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        let (ord, tmp) = (s(&["ord.*"]), s(&["tmp.*"]));
        let started = with_patterns(
            &configs(&[("bootstrap.servers", "b:9092")]),
            &Patterns {
                include: &ord,
                exclude: &tmp,
                ..Default::default()
            },
        );
        assert_eq!(
            started,
            configs(&[
                ("bootstrap.servers", "b:9092"),
                ("topics.include", "ord.*"),
                ("topics.exclude", "__.*,tmp.*"),
            ])
        );
        // Again: nothing changes.
        let again = Patterns {
            include: &ord,
            ..Default::default()
        };
        assert_eq!(with_patterns(&started, &again), started);
        // A stop takes an included pattern out, and excludes one that was never included.
        let stopped = with_patterns(
            &started,
            &Patterns {
                stop: &s(&["ord.*", "pay.*"]),
                ..Default::default()
            },
        );
        assert_eq!(
            stopped,
            configs(&[
                ("bootstrap.servers", "b:9092"),
                ("topics.exclude", "__.*,tmp.*,pay.*"),
            ])
        );
        // Starting a stopped pattern again undoes the stop's exclusion.
        let pay = s(&["pay.*"]);
        let restarted = with_patterns(
            &stopped,
            &Patterns {
                include: &pay,
                ..Default::default()
            },
        );
        assert_eq!(
            restarted,
            configs(&[
                ("bootstrap.servers", "b:9092"),
                ("topics.include", "pay.*"),
                ("topics.exclude", "__.*,tmp.*"),
            ])
        );
        // An alias in use is written under its own name.
        let aliased = with_patterns(
            &configs(&[("mirror.topics.include", "a.*")]),
            &Patterns {
                include: &ord,
                ..Default::default()
            },
        );
        assert_eq!(aliased, configs(&[("mirror.topics.include", "a.*,ord.*")]));
    }

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn bootstrap_servers_is_a_host_port_list() {
        for good in ["a:9092", "a:9092, b.example:19092", "[::1]:9092"] {
            assert!(
                validate(&configs(&[("bootstrap.servers", good)]), 1).is_ok(),
                "{good}"
            );
        }
        for bad in [
            "", "a", "a:", ":9092", "a:0", "a:70000", "a:9092,", "a b:9092",
        ] {
            let e = validate(&configs(&[("bootstrap.servers", bad)]), 1).expect_err(bad);
            assert!(e.to_string().contains("bootstrap.servers"), "{e}");
        }
    }

    /// A pattern that compiles only inside the whole-name anchors (`x)|(.*` became
    /// `^(?:x)|(.*)$`, every name) is refused when set, old name included; a mirror that
    /// kept one before it was refused still runs: only its metadata sync reports it.
    #[test]
    fn a_pattern_refused_when_set_does_not_stop_a_mirror_that_kept_it() {
        for key in ["topics.include", "mirror.topics.include"] {
            let kept = configs(&[("bootstrap.servers", "a:9092"), (key, "orders,x)|(.*")]);
            let e = validate(&kept, 1).expect_err("refused when set");
            assert!(e.to_string().contains("invalid topics.include"), "{e}");
            if key.starts_with("mirror.") {
                assert!(
                    e.to_string().contains("(set as mirror.topics.include"),
                    "{e}"
                );
            }
            assert!(runnable(&kept, 1).is_ok(), "{key}: it runs");
        }
    }

    #[test]
    fn old_names_are_aliases_and_secrets_are_passwords() {
        let settings = validate(
            &configs(&[
                ("bootstrap.servers", "a:9092"),
                ("mirror.fetch.max.bytes", "4096"),
                ("groups.include", "orders.*"),
            ]),
            1,
        )
        .expect("valid");
        assert_eq!(settings.fetch.partition_max_bytes, 4096);
        assert_eq!(
            settings.renamed,
            vec![("mirror.fetch.max.bytes", "fetch.max.bytes")]
        );
        let both = configs(&[
            ("bootstrap.servers", "a:9092"),
            ("mirror.fetch.max.bytes", "4096"),
            ("fetch.max.bytes", "8192"),
        ]);
        let e = validate(&both, 1).expect_err("ambiguous");
        assert!(e.to_string().contains("keep only fetch.max.bytes"), "{e}");
        let e = validate(
            &configs(&[
                ("bootstrap.servers", "a:9092"),
                ("mirror.fetch.maxbytes", "1"),
            ]),
            1,
        )
        .expect_err("unknown");
        assert!(e.to_string().contains("mirror.fetch.maxbytes"), "{e}");
        for secret in [
            "sasl.jaas.config",
            "ssl.truststore.password",
            "ssl.key.password",
            "ssl.keystore.key",
            "sasl.password",
        ] {
            assert!(is_password(secret), "{secret}");
        }
        assert!(!is_password("bootstrap.servers"));
    }

    #[test]
    fn the_source_may_not_be_this_cluster() {
        assert!(check_not_this_cluster("A", "B").is_ok());
        let e = check_not_this_cluster("A", "A").expect_err("refused");
        assert!(e.to_string().contains("this cluster"), "{e}");
    }
}
