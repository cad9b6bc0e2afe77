//! `kmirror mirrors`: the operator's tool for a kmirror cluster's mirrors, modelled on
//! `kafka-cluster-mirrors.sh`: create, list and delete mirrors; start, stop, pause and resume
//! topics (`--topics a,b,c` or a regular expression); describe mirrors (a table, or `--json`;
//! every broker of the cluster is asked and the answers merged; `--failed` keeps FAILED
//! partitions only; `--watch` redraws the table every few seconds with each partition's rate).
//!
//! `--create` reads the mirror's configs from a properties file (`bootstrap.servers` and the
//! source client's security settings), asks the source for its cluster id and stores it as
//! `mirror.source.cluster.id`. `--create --validate-only` sends the file as it is to the
//! destination broker, which checks the configs and the source from where the mirror would run
//! (CreateMirror v1, docs/mirror-configs.md): one line per check, up to the first that failed,
//! and nothing is created. `--alter` changes a mirror's configs (IncrementalAlterConfigs on
//! the mirror's config resource); `--describe-configs` shows them, secrets hidden. Exit codes: 0 done, 1 refused by the broker (its error code and
//! message are printed, with what to do for KIP-1279's codes; docs/errors.md), 2 bad usage or
//! configuration, 3 a cluster could not be reached ([`Failure`]). Names echoed (a mirror's, a
//! topic's, also inside the broker's messages) are cut, saying how long they were ([`shown`]).

use super::describe::{describe_every_broker, mirror_error};
use super::failover::Failover;
use super::failure::{Failure, explained, refused, shown, with_names_shown};
use super::mirror_table;
use super::topics::{
    TopicChange, TopicFilter, TopicSelection, change_topics, kept_pattern, mirror_topics_matching,
};
use kafka_protocol::messages::{
    DescribeConfigsRequest, IncrementalAlterConfigsRequest, describe_configs_request,
    incremental_alter_configs_request,
};
use kafka_protocol::protocol::StrBytes;
use kmirror::broker::config::parse_properties;
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::client::{ClientConfig, ClientError, SourceClient};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    CreateMirrorRequest, DeleteMirrorRequest, DescribeMirrorsRequest, DescribeMirrorsResponse,
    LastMirroredEpochsRequest, ListMirrorsRequest, create_mirror_request,
};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// The config resource type of a cluster mirror (KIP-1279's CLUSTER_MIRROR).
const CLUSTER_MIRROR_RESOURCE: i8 = 64;

/// What `kmirror mirrors` was asked to do.
#[derive(Debug)]
pub(crate) enum MirrorsAction {
    /// `--create --mirror M --mirror-config FILE [--validate-only]`.
    Create {
        mirror: String,
        config: PathBuf,
        validate_only: bool,
    },
    /// `--list [--json]`.
    List { json: bool },
    /// `--delete --mirror M`.
    Delete { mirror: String },
    /// `--alter --mirror M [--mirror-config FILE] [--delete-config k,...]`: the file's keys are
    /// set, the listed ones removed.
    Alter {
        mirror: String,
        set: Option<PathBuf>,
        delete: Vec<String>,
    },
    /// `--describe-configs --mirror M`.
    DescribeConfigs { mirror: String },
    /// `--start|--stop|--pause|--resume --mirror M --topics a,b|REGEX`.
    Topics {
        change: TopicChange,
        mirror: String,
        topics: TopicSelection,
    },
    /// `--describe [--mirror M] [--topics X] [--failed] [--json] [--watch [SECONDS]]`: with
    /// `watch`, the table (or a line of JSON) again every period, until Ctrl-C or until
    /// stdout's reader is gone.
    Describe {
        mirror: Option<String>,
        topics: Option<TopicFilter>,
        failed: bool,
        json: bool,
        watch: Option<std::time::Duration>,
    },
    /// `--failover --mirror M --topics X [--max-lag N] [--max-lag-seconds S] [--timeout D]
    /// [--dry-run] [--consistent [--discard-records N]]`.
    Failover(Failover),
    /// `--verify --mirror M [--topics X] [--from-offset N | --last N] [--rate MB]`.
    Verify(super::verify::Verify),
}

/// Runs the action against the cluster at `bootstrap`.
pub(crate) fn run(bootstrap: &str, action: MirrorsAction) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return Failure::Usage(e.to_string()).exit(),
    };
    match runtime.block_on(execute(bootstrap, action)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.exit(),
    }
}

/// Writes `text` to stdout: `false` once its reader is gone (`--watch | head`), which ends the
/// output quietly instead of failing.
fn emit(text: &str) -> Result<bool, Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(Failure::Usage(format!("writing to stdout: {e}"))),
    }
}

/// How many names a refusal lists.
const NAMES_LISTED: usize = 5;

/// Keeps the topics of `answer` that `filter` takes; what to refuse when it took nothing it
/// was asked for: the listed names that no mirror in the answer has, or a pattern that matched
/// no topic (a mistyped list such as `a;b` is read as one).
fn keep_topics(answer: &mut DescribeMirrorsResponse, filter: &TopicFilter) -> Option<Failure> {
    for m in &mut answer.mirrors {
        m.topics.retain(|t| filter.takes(&t.topic_name));
    }
    let has = |name: &str| {
        answer
            .mirrors
            .iter()
            .any(|m| m.topics.iter().any(|t| t.topic_name == name))
    };
    match filter {
        TopicFilter::Names(names) => {
            let absent: Vec<&String> = names.iter().filter(|n| !has(n)).collect();
            if absent.is_empty() {
                return None;
            }
            let listed: Vec<String> = absent.iter().take(NAMES_LISTED).map(|n| shown(n)).collect();
            let more = match absent.len().saturating_sub(NAMES_LISTED) {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            Some(Failure::Refused(format!(
                "no mirror described has {}{more}",
                listed.join(", ")
            )))
        }
        TopicFilter::Pattern { pattern, .. } => {
            let matched = answer.mirrors.iter().any(|m| !m.topics.is_empty());
            (!matched).then(|| {
                Failure::Usage(format!(
                    "no topic of the mirrors described matches \"{}\" (a regular expression \
                     over whole topic names; --describe alone shows them)",
                    shown(pattern)
                ))
            })
        }
    }
}

/// Keeps the FAILED partitions of `answer` alone (`--failed`).
fn keep_failed(answer: &mut DescribeMirrorsResponse) {
    for m in &mut answer.mirrors {
        for t in &mut m.topics {
            t.partitions.retain(|p| p.state == "FAILED");
        }
        m.topics.retain(|t| !t.partitions.is_empty());
    }
}

/// Prints a describe answer as the table or as one line of JSON; `false` once stdout's reader
/// is gone.
fn show(
    answer: &DescribeMirrorsResponse,
    json: bool,
    previous: &mut mirror_table::Previous,
) -> Result<bool, Failure> {
    if json {
        emit(&format!("{}\n", mirror_table::json(answer)))
    } else if answer.mirrors.iter().any(|m| m.error_code == 0) {
        emit(&mirror_table::render(answer, previous))
    } else {
        Ok(true)
    }
}

/// Runs the action against the cluster at `bootstrap` on the caller's runtime.
pub(crate) async fn execute(bootstrap: &str, action: MirrorsAction) -> Result<(), Failure> {
    let address = bootstrap
        .split(',')
        .next()
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .ok_or_else(|| Failure::Usage("--bootstrap-server is empty".into()))?;
    let connection = Connection::connect(address, &ClientConfig::plaintext(bootstrap), None)
        .await
        .map_err(|e| Failure::Unreachable(format!("{bootstrap}: {e}")))?;
    let unreachable =
        |e: kmirror_protocol::client::ClientError| Failure::Unreachable(e.to_string());
    match action {
        MirrorsAction::Create {
            mirror,
            config,
            validate_only,
        } => {
            let text = std::fs::read_to_string(&config)
                .map_err(|e| Failure::Usage(format!("{}: {e}", config.display())))?;
            let mut props = parse_properties(&text)
                .map_err(|e| Failure::Usage(format!("{}: {e}", config.display())))?;
            if validate_only {
                return validate_create(&connection, &mirror, props).await;
            }
            // The mirror's source cluster id is the one its bootstrap servers answer with; one
            // given in the file must be that one (another would fail every partition later).
            let client_props: HashMap<String, String> = props.clone().into_iter().collect();
            let client_config = ClientConfig::from_properties(&client_props)
                .map_err(|e| Failure::Usage(format!("{}: {e}", config.display())))?;
            let found = match SourceClient::connect(client_config).await {
                Ok(source) => source.cluster_id().await,
                Err(e) => Err(e),
            };
            match (props.get("mirror.source.cluster.id"), found) {
                (None, Ok(id)) => {
                    props.insert("mirror.source.cluster.id".into(), id);
                }
                // A store or credential that cannot be read is the configuration's fault (exit
                // 2), not the source's.
                (_, Err(e @ ClientError::Config(_))) => {
                    return Err(Failure::Usage(format!("{}: {e}", config.display())));
                }
                (None, Err(e)) => {
                    return Err(Failure::Unreachable(format!("the source cluster: {e}")));
                }
                (Some(given), Ok(id)) if *given != id => {
                    return Err(Failure::Refused(format!(
                        "mirror.source.cluster.id {given} is not the cluster bootstrap.servers \
                         reach ({id})"
                    )));
                }
                (Some(_), Ok(_)) => {}
                (Some(given), Err(e)) => eprintln!(
                    "warning: the source cluster does not answer ({e}); mirror.source.cluster.id \
                     {given} is taken as given"
                ),
            }
            let request = create_request(&mirror, props, false);
            let (_, answer) = connection
                .send("CreateMirror", &request, 0)
                .await
                .map_err(unreachable)?;
            if answer.error_code != 0 {
                return Err(refused(answer.error_code, answer.error_message));
            }
            println!("Created mirror {}.", shown(&mirror));
        }
        MirrorsAction::Alter {
            mirror,
            set,
            delete,
        } => {
            let mut changes = Vec::new();
            if let Some(path) = set {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))?;
                let props = parse_properties(&text)
                    .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))?;
                changes.extend(props.into_iter().map(|(k, v)| (k, 0, Some(v))));
            }
            changes.extend(delete.into_iter().map(|k| (k, 1, None)));
            let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
                incremental_alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(CLUSTER_MIRROR_RESOURCE)
                    .with_resource_name(StrBytes::from_string(mirror.clone()))
                    .with_configs(
                        changes
                            .into_iter()
                            .map(|(name, operation, value)| {
                                incremental_alter_configs_request::AlterableConfig::default()
                                    .with_name(StrBytes::from_string(name))
                                    .with_config_operation(operation)
                                    .with_value(value.map(StrBytes::from_string))
                            })
                            .collect(),
                    ),
            ]);
            let (_, answer) = connection
                .send("IncrementalAlterConfigs", &request, 1)
                .await
                .map_err(unreachable)?;
            if let Some(r) = answer.responses.iter().find(|r| r.error_code != 0) {
                return Err(refused(
                    r.error_code,
                    r.error_message.as_ref().map(|m| m.to_string()),
                ));
            }
            println!(
                "Altered the configs of mirror {}: its fetchers and the next connection to its \
                 source use them.",
                shown(&mirror)
            );
        }
        MirrorsAction::DescribeConfigs { mirror } => {
            let request = DescribeConfigsRequest::default().with_resources(vec![
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(CLUSTER_MIRROR_RESOURCE)
                    .with_resource_name(StrBytes::from_string(mirror.clone()))
                    .with_configuration_keys(None),
            ]);
            let (_, answer) = connection
                .send("DescribeConfigs", &request, 4)
                .await
                .map_err(unreachable)?;
            let result = answer
                .results
                .first()
                .ok_or_else(|| Failure::Refused("DescribeConfigs answered nothing".into()))?;
            if result.error_code != 0 {
                return Err(refused(
                    result.error_code,
                    result.error_message.as_ref().map(|m| m.to_string()),
                ));
            }
            println!("Configs of mirror {}:", shown(&mirror));
            for c in &result.configs {
                let value = match &c.value {
                    Some(v) if !c.is_sensitive => v.to_string(),
                    _ => "(sensitive, hidden)".to_string(),
                };
                println!("  {}={value}", c.name);
            }
        }
        MirrorsAction::List { json } => {
            let request = ListMirrorsRequest {
                include_topic_names: true,
                ..Default::default()
            };
            let (_, answer) = connection
                .send("ListMirrors", &request, 0)
                .await
                .map_err(unreachable)?;
            if answer.error_code != 0 {
                return Err(refused(answer.error_code, answer.error_message));
            }
            if json {
                let mirrors: Vec<serde_json::Value> = answer
                    .mirrors
                    .iter()
                    .map(|m| {
                        serde_json::json!({
                            "mirror": m.mirror_name,
                            "sourceBootstrap": m.source_bootstrap,
                            "sourceClusterId": m.source_cluster_id,
                            "topicCount": m.topic_count,
                            "topics": m.topic_names,
                        })
                    })
                    .collect();
                println!("{}", serde_json::json!({ "mirrors": mirrors }));
            } else {
                println!(
                    "{:<24} {:<32} {:<24} {:>6}",
                    "MIRROR", "SOURCE BOOTSTRAP", "SOURCE CLUSTER ID", "TOPICS"
                );
                for m in &answer.mirrors {
                    println!(
                        "{:<24} {:<32} {:<24} {:>6}",
                        m.mirror_name, m.source_bootstrap, m.source_cluster_id, m.topic_count
                    );
                }
            }
        }
        MirrorsAction::Delete { mirror } => {
            let request = DeleteMirrorRequest {
                mirror_name: mirror.clone(),
                ..Default::default()
            };
            let (_, answer) = connection
                .send("DeleteMirror", &request, 0)
                .await
                .map_err(unreachable)?;
            if answer.error_code != 0 {
                return Err(refused(answer.error_code, answer.error_message));
            }
            println!("Deleted mirror {}.", shown(&mirror));
        }
        MirrorsAction::Topics {
            change,
            mirror,
            topics,
        } => {
            let (names, patterns) = match (topics, change) {
                (TopicSelection::Names(names), _) => (names, Vec::new()),
                // The broker matches it against the source's topics (parsing checked it).
                // The broker keeps it in `topics.include`, a comma-separated list.
                (TopicSelection::Pattern(pattern), TopicChange::Start { .. }) => {
                    if pattern.contains(',') {
                        return Err(Failure::Usage(format!(
                            "--start --topics \"{}\": a pattern to start holds no comma (the \
                             mirror keeps it in topics.include, a comma-separated list); \
                             nothing was started",
                            shown(&pattern)
                        )));
                    }
                    (Vec::new(), vec![pattern])
                }
                // A stop also takes the pattern out of auto-discovery (the broker keeps it). One
                // with a comma was never kept (the configs are comma-separated lists).
                (TopicSelection::Pattern(pattern), TopicChange::Stop { .. }) => (
                    mirror_topics_matching(&connection, &mirror, &pattern).await?,
                    kept_pattern(pattern),
                ),
                (TopicSelection::Pattern(pattern), _) => (
                    mirror_topics_matching(&connection, &mirror, &pattern).await?,
                    Vec::new(),
                ),
            };
            let mirror_name = mirror.clone();
            let results = change_topics(&connection, change, mirror, names, patterns.clone())
                .await
                .map_err(unreachable)?;
            let (error_code, error_message, per_topic) = results;
            if error_code != 0 {
                return Err(refused(error_code, error_message));
            }
            if per_topic.is_empty() {
                // Only a regular expression can select nothing: the broker answers every
                // name it is given.
                let pattern = patterns.first().map(String::as_str).unwrap_or_default();
                return Err(Failure::Usage(format!(
                    "no topic of the source cluster of mirror {} matches \"{}\" (a regular \
                     expression over whole topic names): nothing was started now, and the \
                     mirror keeps the pattern in topics.include, so topics created later that \
                     match it start by themselves (--stop --topics with the same pattern takes \
                     it out)",
                    shown(&mirror_name),
                    shown(pattern)
                )));
            }
            let mut failed = false;
            for (topic, code, message) in per_topic {
                if code == 0 {
                    println!("{}: done", shown(&topic));
                } else {
                    failed = true;
                    println!("{}: {}", shown(&topic), explained(code, message));
                }
            }
            if failed {
                return Err(Failure::Refused("some topics were refused".into()));
            }
        }
        MirrorsAction::Describe {
            mirror,
            topics,
            failed,
            json,
            watch,
        } => {
            let request = DescribeMirrorsRequest {
                mirror_names: mirror.into_iter().collect(),
                ..Default::default()
            };
            let mut previous = mirror_table::Previous::default();
            let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
            let mut first = true;
            loop {
                let mut answer = describe_every_broker(bootstrap, &connection, &request).await?;
                let refusal = topics.as_ref().and_then(|f| keep_topics(&mut answer, f));
                if failed {
                    keep_failed(&mut answer);
                }
                // What was asked for is checked on the first refresh only: a watch may outlive
                // a topic. A pattern that matched nothing is a usage error, and shows nothing.
                let checked = std::mem::take(&mut first);
                let refusal = match refusal.filter(|_| checked) {
                    Some(usage @ Failure::Usage(_)) => {
                        mirror_error(&answer)?;
                        return Err(usage);
                    }
                    refusal => refusal,
                };
                let Some(every) = watch else {
                    // Once: the table of what was found, then why the rest was not.
                    show(&answer, json, &mut previous)?;
                    mirror_error(&answer)?;
                    return refusal.map_or(Ok(()), Err);
                };
                // A mirror that does not exist (or may not be described) will not appear.
                mirror_error(&answer)?;
                if let Some(refusal) = refusal {
                    return Err(refusal);
                }
                if terminal && !json {
                    // Clear the screen and redraw in place.
                    if !emit("\x1b[2J\x1b[H")? {
                        break;
                    }
                } else if !json && !emit("\n")? {
                    break;
                }
                if !show(&answer, json, &mut previous)? {
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = tokio::signal::ctrl_c() => break,
                }
            }
        }
        MirrorsAction::Failover(failover) => {
            super::failover::run(bootstrap, &connection, failover).await?;
        }
        MirrorsAction::Verify(verify) => {
            super::verify::run(bootstrap, &connection, verify).await?;
        }
    }
    Ok(())
}

/// CreateMirror of `mirror` with the configs `props`.
fn create_request(
    mirror: &str,
    props: impl IntoIterator<Item = (String, String)>,
    validate_only: bool,
) -> CreateMirrorRequest {
    CreateMirrorRequest {
        mirror_name: mirror.to_string(),
        configs: props
            .into_iter()
            .map(|(name, value)| create_mirror_request::MirrorConfig {
                name,
                value: Some(value),
                ..Default::default()
            })
            .collect(),
        validate_only,
        ..Default::default()
    }
}

/// `--create --validate-only`: CreateMirror v1 with ValidateOnly and the file's configs as they
/// are (the broker reaches the source, not this tool); one line per check the broker made.
async fn validate_create(
    connection: &Connection,
    mirror: &str,
    props: impl IntoIterator<Item = (String, String)>,
) -> Result<(), Failure> {
    // ValidateOnly is a kmirror tagged field: a broker without it would ignore the tag and
    // create the mirror, so only a kmirror broker (it also serves LastMirroredEpochs) is asked.
    if connection
        .version_of::<LastMirroredEpochsRequest>()
        .is_none()
    {
        return Err(Failure::Refused(
            "the broker does not support --validate-only (a kmirror extension of CreateClusterMirror): nothing was created"
                .into(),
        ));
    }
    let request = create_request(mirror, props, true);
    let (_, answer) = connection
        .send("CreateMirror", &request, 0)
        .await
        .map_err(|e| Failure::Unreachable(e.to_string()))?;
    if answer.error_code != 0 {
        return Err(Failure::Refused(format!(
            "{}\nnothing was created",
            explained(answer.error_code, answer.error_message)
        )));
    }
    let mut failed = None;
    for check in &answer.checks {
        let message = with_names_shown(check.error_message.as_deref().unwrap_or_default());
        if check.error_code == 0 {
            println!("OK   {}: {message}", check.name);
        } else {
            let name = ErrorCode(check.error_code).name();
            println!(
                "FAIL {}: {name} ({}): {message}",
                check.name, check.error_code
            );
            failed = Some(check.name.clone());
        }
    }
    match failed {
        Some(check) => Err(Failure::Refused(format!(
            "mirror {} would not work: the {check} check failed (the checks after it were not \
             run); nothing was created",
            shown(mirror)
        ))),
        None => {
            println!(
                "All checks passed: mirror {} can be created; nothing was created \
                 (--validate-only).",
                shown(mirror)
            );
            Ok(())
        }
    }
}
