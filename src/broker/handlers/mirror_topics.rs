//! KIP-1279's topic RPCs, carried out by the broker's mirroring engine: StartMirrorTopics,
//! StopMirrorTopics, PauseMirrorTopics, ResumeMirrorTopics and DescribeMirrors.
//!
//! StartMirrorTopics starts the named topics and the source topics its IncludePatterns match
//! (whole names, Java-style; ExcludePatterns win; internal `__` topics never), resolved against
//! the source when the request arrives.
//!
//! Each needs ALTER on the mirror (DESCRIBE for DescribeMirrors) and, for the topic changes,
//! ALTER_CONFIGS on each topic (docs/design.md §7). A mirror the engine has not loaded yet (created
//! since the broker started) is loaded first, connecting to its source. Pause of a paused
//! topic answers MIRROR_TOPIC_ALREADY_PAUSED, resume of one that is not paused
//! MIRROR_TOPIC_NOT_PAUSED, either on a stopped one MIRROR_TOPIC_BEING_STOPPED.
//!
//! DescribeMirrors reports, per partition this broker leads, the state, the source's last
//! stable offset (asked at describe time; -1 if the source does not answer), the destination
//! log end offset, the lag between them (-1 when unknown), the retry attempt and the error.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::Broker;
use crate::controller::ControllerError;
use kmirror_actors::engine::mirror_configs::{self, Patterns};
use kmirror_actors::engine::system::LoadMirror;
use kmirror_actors::engine::topics::{
    ChangeTopic, CountLocalWrites, DescribeMirror, LocalWrites, SourceTopics, StartTopic,
};
use kmirror_actors::engine::{Engine, MirrorError};
use kmirror_actors::metadata::mirror_of;
use kmirror_actors::partition::Desired;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    DescribeMirrorsRequest, DescribeMirrorsResponse, PauseMirrorTopicsRequest,
    PauseMirrorTopicsResponse, ResumeMirrorTopicsRequest, ResumeMirrorTopicsResponse,
    StartMirrorTopicsRequest, StartMirrorTopicsResponse, StopMirrorTopicsRequest,
    StopMirrorTopicsResponse, describe_mirrors_request, describe_mirrors_response,
    pause_mirror_topics_response, resume_mirror_topics_response, start_mirror_topics_response,
    stop_mirror_topics_response,
};
use std::collections::BTreeMap;

/// A top-level answer and one per topic: (topic, error code, message).
struct Outcome {
    error: (i16, Option<String>),
    topics: Vec<(String, i16, Option<String>)>,
}

impl Outcome {
    fn refused(code: i16, message: impl Into<String>) -> Outcome {
        Outcome {
            error: (code, Some(message.into())),
            topics: Vec::new(),
        }
    }

    /// The request's own error, else the first topic's, with the topic named.
    fn top_level_error(&self) -> (i16, Option<String>) {
        if self.error.0 != 0 {
            return self.error.clone();
        }
        self.topics.iter().find(|(_, code, _)| *code != 0).map_or(
            (0, None),
            |(topic, code, message)| {
                let why = message
                    .clone()
                    .unwrap_or_else(|| ErrorCode(*code).info().map_or("", |i| i.message).into());
                (*code, Some(format!("{topic}: {why}")))
            },
        )
    }
}

/// StateValidationOffset is how the KIP prototype's brokers tell its controller at which
/// metadata offset they checked a request; admin clients send -1. kmirror's brokers forward
/// nothing of the kind, so any other value is refused rather than silently not checked.
fn refuse_state_validation_offset(offset: i64) -> Option<Outcome> {
    (offset != -1).then(|| {
        Outcome::refused(
            ErrorCode::INVALID_REQUEST.0,
            format!(
                "StateValidationOffset {offset}: this broker validates the request itself; \
                 clients send -1"
            ),
        )
    })
}

fn from_error(e: MirrorError) -> (i16, Option<String>) {
    (e.code.0, Some(e.message))
}

/// The engine, or COORDINATOR_NOT_AVAILABLE when it does not run.
fn running(engine: Option<&Engine>) -> Result<&Engine, MirrorError> {
    engine.ok_or_else(|| {
        MirrorError::new(
            ErrorCode::COORDINATOR_NOT_AVAILABLE,
            "the mirroring engine is not running",
        )
    })
}

/// Checks the mirror and loads it into the engine.
async fn prepare<'a>(
    engine: Option<&'a Engine>,
    access: &Access<'_>,
    mirror: &str,
) -> Result<&'a Engine, Outcome> {
    if !access.mirror(Operation::Alter, mirror) {
        return Err(Outcome::refused(
            ErrorCode::CLUSTER_MIRROR_AUTHORIZATION_FAILED.0,
            "ALTER on the mirror is needed",
        ));
    }
    let loaded = match running(engine) {
        Ok(engine) => engine
            .ask(LoadMirror(mirror.to_string()))
            .await
            .map(|()| engine),
        Err(e) => Err(e),
    };
    loaded.map_err(|e| Outcome {
        error: from_error(e),
        topics: Vec::new(),
    })
}

/// Whole-name regular expressions, or INVALID_REQUEST naming the one that does not compile.
/// Empty patterns and patterns with a comma are refused too: `topics.include` and
/// `topics.exclude` keep them as a comma-separated list.
fn compile_patterns(patterns: &[String]) -> Result<Vec<regex::Regex>, (i16, Option<String>)> {
    let invalid = |why: String| (ErrorCode::INVALID_REQUEST.0, Some(why));
    patterns
        .iter()
        .map(|p| {
            if p.trim().is_empty() || p.contains(',') {
                return Err(invalid(format!(
                    "pattern {p:?}: a pattern is kept in a comma-separated list, so it may be \
                     neither empty nor hold a comma"
                )));
            }
            regex::Regex::new(&format!("^(?:{p})$"))
                .map_err(|e| invalid(format!("pattern {p:?} (Rust regex syntax): {e}")))
        })
        .collect()
}

/// Writes a start's or a stop's patterns into the mirror's auto-discovery configs
/// ([`mirror_configs::with_patterns`]), checked like any config change; nothing is written when
/// they are there already. The write is refused if another change of the mirror's configs
/// landed since they were read (two starts through two brokers): it is made again from the
/// configs now, a few times, so neither start's patterns are lost.
async fn save_patterns(
    broker: &Broker,
    access: &Access<'_>,
    mirror: &str,
    patterns: &Patterns<'_>,
) -> Result<(), (i16, Option<String>)> {
    if patterns.include.is_empty() && patterns.exclude.is_empty() && patterns.stop.is_empty() {
        return Ok(());
    }
    // They change the mirror's configs as `--alter` would, and what auto-discovery starts.
    if !access.mirror(Operation::AlterConfigs, mirror) {
        return Err((
            ErrorCode::CLUSTER_MIRROR_AUTHORIZATION_FAILED.0,
            Some(
                "patterns are kept in the mirror's topics.include / topics.exclude: \
                 ALTER_CONFIGS on the mirror is needed (or name the topics instead)"
                    .into(),
            ),
        ));
    }
    const ATTEMPTS: u64 = 5;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let Some(current) = broker.mirrors().remove(mirror) else {
            return Ok(()); // the engine answers UNKNOWN_CLUSTER_MIRROR
        };
        let next = mirror_configs::with_patterns(&current, patterns);
        if next == current {
            return Ok(());
        }
        mirror_configs::validate(&next, broker.config().mirror_num_replica_fetchers)
            .map_err(|e| (ErrorCode::INVALID_REQUEST.0, Some(e.to_string())))?;
        match broker.set_mirror_configs(mirror, next, current).await {
            // This broker's metadata may trail the change that won: give it time to arrive.
            Err(ControllerError::MirrorConfigsChanged(_)) if attempt < ATTEMPTS => {
                tokio::time::sleep(std::time::Duration::from_millis(100 * attempt)).await;
            }
            written => return written.map_err(|e| (e.error_code(), Some(e.to_string()))),
        }
    }
}

/// The source topics IncludePatterns select and ExcludePatterns do not (whole-name matches,
/// internal `__` topics never), or why the patterns cannot be used.
async fn matching_source_topics(
    engine: &Engine,
    request: &StartMirrorTopicsRequest,
) -> Result<Vec<String>, (i16, Option<String>)> {
    let include = compile_patterns(&request.include_patterns)?;
    let exclude = compile_patterns(&request.exclude_patterns)?;
    if include.is_empty() {
        return Ok(Vec::new());
    }
    let names = engine
        .ask(SourceTopics(request.mirror_name.clone()))
        .await
        .map_err(from_error)?;
    Ok(names
        .into_iter()
        .filter(|n| !n.starts_with("__"))
        .filter(|n| include.iter().any(|r| r.is_match(n)))
        .filter(|n| !exclude.iter().any(|r| r.is_match(n)))
        .collect())
}

async fn start(
    broker: &Broker,
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: StartMirrorTopicsRequest,
) -> Outcome {
    if let Some(refused) = refuse_state_validation_offset(request.state_validation_offset) {
        return refused;
    }
    let engine = match prepare(engine, access, &request.mirror_name).await {
        Ok(engine) => engine,
        Err(refused) => return refused,
    };
    let matched = match matching_source_topics(engine, &request).await {
        Ok(matched) => matched,
        Err(error) => {
            return Outcome {
                error,
                topics: Vec::new(),
            };
        }
    };
    let mut names: Vec<String> = request.topics.into_iter().map(|t| t.topic_name).collect();
    names.extend(
        matched
            .into_iter()
            .filter(|m| !names.contains(m))
            .collect::<Vec<_>>(),
    );
    let mut confirmed = match confirm_discarded_writes(
        broker,
        engine,
        &request.mirror_name,
        &names,
        request.discard_local_records,
    )
    .await
    {
        Ok(confirmed) => confirmed,
        Err(refused) => return refused,
    };
    // The patterns are kept for auto-discovery too: the sync starts the source topics created
    // later that they select (docs/mirror-configs.md, topics.include).
    let patterns = Patterns {
        include: &request.include_patterns,
        exclude: &request.exclude_patterns,
        ..Default::default()
    };
    if let Err(error) = save_patterns(broker, access, &request.mirror_name, &patterns).await {
        return Outcome {
            error,
            topics: Vec::new(),
        };
    }
    let mut topics = Vec::new();
    for name in names {
        if !access.topic(Operation::AlterConfigs, &name) {
            topics.push((name, ErrorCode::TOPIC_AUTHORIZATION_FAILED.0, None));
            continue;
        }
        if name.starts_with("__") {
            // A cluster's internal topics are its own (offsets, transactions, mirror states):
            // a mirror copy of one could be neither used nor deleted. Patterns skip them too.
            let why = format!("{name} is an internal topic name: it cannot be mirrored");
            topics.push((name, ErrorCode::INVALID_TOPIC_EXCEPTION.0, Some(why)));
            continue;
        }
        let started = engine
            .ask(StartTopic {
                mirror: request.mirror_name.clone(),
                topic: name.clone(),
                confirmed: confirmed.remove(&name).unwrap_or_default(),
            })
            .await;
        let (code, message) = match started {
            Ok(()) => (0, None),
            Err(e) => from_error(e),
        };
        topics.push((name, code, message));
    }
    Outcome {
        error: (0, None),
        topics,
    }
}

/// Restarting the mirror of a stopped topic cuts its log back to where it failed over,
/// discarding what this cluster wrote since (docs/failover.md "Restarting a stopped topic").
/// That is never done unasked: every partition's leader counts its partition's records (the
/// topic may be spread over the brokers), and the start is refused, naming the total, unless
/// `confirmed` is exactly that many. Answers, per stopped topic, the log end offset each
/// partition with such records was counted at: the restart records it with `mirror.name`, and
/// PREPARING cuts only a log that still ends there, so a write that lands after the count (the
/// topic is writable until `mirror.name` changes) is kept, never cut unconfirmed.
async fn confirm_discarded_writes(
    broker: &Broker,
    engine: &Engine,
    mirror: &str,
    names: &[String],
    confirmed: i64,
) -> Result<BTreeMap<String, BTreeMap<i32, i64>>, Outcome> {
    let stopped: Vec<String> = names
        .iter()
        .filter(|name| {
            broker
                .topic(name)
                .and_then(|t| t.configs.get("mirror.name").cloned())
                .is_some_and(|v| mirror_of(&v) == Some((mirror, Desired::Stopped)))
        })
        .cloned()
        .collect();
    if stopped.is_empty() {
        return Ok(BTreeMap::new());
    }
    let counted = count_local_writes(broker, engine, mirror, &stopped)
        .await
        .map_err(|why| {
            Outcome::refused(
                ErrorCode::LEADER_NOT_AVAILABLE.0,
                format!("{why}; nothing was changed, try again"),
            )
        })?;
    let total: u64 = counted.iter().map(|w| w.records).sum();
    let total = records(total);
    if total != 0 && confirmed != total {
        let details: Vec<String> = counted
            .iter()
            .filter(|w| w.records > 0)
            .map(|w| format!("{}-{}: {}", w.topic, w.partition, w.records))
            .collect();
        return Err(Outcome::refused(
            ErrorCode::POLICY_VIOLATION.0,
            format!(
                "restarting the mirror discards {total} records written on this cluster since \
                 the failover ({}); nothing was changed. To discard them, start again with \
                 --discard-local-writes {total}",
                details.join(", ")
            ),
        ));
    }
    let mut log_ends: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
    for w in counted.into_iter().filter(|w| w.records > 0) {
        log_ends
            .entry(w.topic)
            .or_default()
            .insert(w.partition, w.log_end);
    }
    Ok(log_ends)
}

/// Every partition's count of [`confirm_discarded_writes`], from its leader: this broker's
/// engine for its own, DescribeMirrors (its `LocalRecords`) for the others'. Fails naming a
/// partition whose leader gave none.
async fn count_local_writes(
    broker: &Broker,
    engine: &Engine,
    mirror: &str,
    topics: &[String],
) -> Result<Vec<LocalWrites>, String> {
    let mut counted = engine
        .ask(CountLocalWrites {
            mirror: mirror.to_string(),
            topics: topics.to_vec(),
        })
        .await
        .map_err(|e| e.message)?;
    // Each partition's count is taken from its leader only: a broker that led it before a
    // move may still answer for it.
    let mut leaders: BTreeMap<(String, i32), Option<i32>> = BTreeMap::new();
    let mut others = std::collections::BTreeSet::new();
    for name in topics {
        let Some(topic) = broker.topic(name) else {
            continue;
        };
        for (index, partition) in (0..).zip(&topic.partitions) {
            let local = broker.leads(partition);
            leaders.insert((name.clone(), index), (!local).then_some(partition.leader));
            if !local {
                others.insert(partition.leader);
            }
        }
    }
    counted.retain(|w| leaders.get(&(w.topic.clone(), w.partition)) == Some(&None));
    let request = DescribeMirrorsRequest {
        mirror_names: vec![mirror.to_string()],
        ..Default::default()
    };
    for node in others {
        let answer = broker
            .call_broker(node, "DescribeMirrors", &request, 0)
            .await
            .map_err(|e| format!("broker {node} could not count its partitions' writes: {e}"))?;
        for described in answer
            .mirrors
            .into_iter()
            .filter(|m| m.mirror_name == mirror)
        {
            for topic in described.topics {
                let leads =
                    |p: i32| leaders.get(&(topic.topic_name.clone(), p)) == Some(&Some(node));
                for p in topic
                    .partitions
                    .into_iter()
                    .filter(|p| p.local_records >= 0 && leads(p.partition_index))
                {
                    counted.push(LocalWrites {
                        topic: topic.topic_name.clone(),
                        partition: p.partition_index,
                        records: u64::try_from(p.local_records).unwrap_or(0),
                        log_end: p.destination_offset,
                    });
                }
            }
        }
    }
    for (name, index) in leaders.keys() {
        if !counted
            .iter()
            .any(|w| &w.topic == name && w.partition == *index)
        {
            return Err(format!(
                "the leader of {name}-{index} did not count the records written there since \
                 the failover (it is away, or has not seen the stop yet)"
            ));
        }
    }
    Ok(counted)
}

/// Refuses a pause or resume the topic's current `mirror.name` does not allow.
fn refuse_change(broker: &Broker, mirror: &str, topic: &str, desired: Desired) -> Option<i16> {
    let value = broker
        .topic(topic)
        .and_then(|t| t.configs.get("mirror.name").cloned())?;
    let asked = mirror_of(&value)
        .filter(|(m, _)| *m == mirror)
        .map(|(_, d)| d);
    let paused = asked == Some(Desired::Paused);
    let stopped = asked == Some(Desired::Stopped);
    match desired {
        Desired::Paused if stopped => Some(ErrorCode::MIRROR_TOPIC_BEING_STOPPED.0),
        Desired::Paused if paused => Some(ErrorCode::MIRROR_TOPIC_ALREADY_PAUSED.0),
        Desired::Mirroring if stopped => Some(ErrorCode::MIRROR_TOPIC_BEING_STOPPED.0),
        Desired::Mirroring if !paused => Some(ErrorCode::MIRROR_TOPIC_NOT_PAUSED.0),
        _ => None,
    }
}

/// Asks `desired` of each of `names`, on an engine [`prepare`] gave.
async fn change(
    broker: &Broker,
    engine: &Engine,
    access: &Access<'_>,
    mirror: String,
    names: Vec<String>,
    desired: Desired,
) -> Outcome {
    let mut topics = Vec::new();
    for name in names {
        if !access.topic(Operation::AlterConfigs, &name) {
            topics.push((name, ErrorCode::TOPIC_AUTHORIZATION_FAILED.0, None));
            continue;
        }
        if let Some(code) = refuse_change(broker, &mirror, &name, desired) {
            topics.push((name, code, None));
            continue;
        }
        let changed = engine
            .ask(ChangeTopic {
                mirror: mirror.clone(),
                topic: name.clone(),
                desired,
            })
            .await;
        let (code, message) = match changed {
            Ok(()) => (0, None),
            Err(e) => from_error(e),
        };
        topics.push((name, code, message));
    }
    Outcome {
        error: (0, None),
        topics,
    }
}

/// The response of a topic RPC (each has its own generated types, of one shape).
/// The top-level error is the request's own, else the first topic's (as the KIP prototype's
/// schemas say), so a client that reads only it sees a refusal.
macro_rules! topic_response {
    ($response:ident, $module:ident, $outcome:expr) => {{
        let outcome: Outcome = $outcome;
        let (error_code, error_message) = outcome.top_level_error();
        $response {
            error_code,
            error_message,
            topics: outcome
                .topics
                .into_iter()
                .map(|(name, error_code, error_message)| $module::TopicResult {
                    name,
                    error_code,
                    error_message,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }};
}

pub(super) async fn start_topics(
    broker: &Broker,
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: StartMirrorTopicsRequest,
) -> StartMirrorTopicsResponse {
    topic_response!(
        StartMirrorTopicsResponse,
        start_mirror_topics_response,
        start(broker, engine, access, request).await
    )
}

pub(super) async fn stop_topics(
    broker: &Broker,
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: StopMirrorTopicsRequest,
) -> StopMirrorTopicsResponse {
    topic_response!(
        StopMirrorTopicsResponse,
        stop_mirror_topics_response,
        stop(broker, engine, access, request).await
    )
}

/// StopMirrorTopics: the named topics and the mirror's topics its Patterns match; the patterns
/// leave auto-discovery too (taken out of `topics.include`, or added to `topics.exclude`), so a
/// stopped topic's pattern does not start new source topics.
async fn stop(
    broker: &Broker,
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: StopMirrorTopicsRequest,
) -> Outcome {
    if let Some(refused) = refuse_state_validation_offset(request.state_validation_offset) {
        return refused;
    }
    let engine = match prepare(engine, access, &request.mirror_name).await {
        Ok(engine) => engine,
        Err(refused) => return refused,
    };
    let mut names: Vec<String> = request.topics.into_iter().map(|t| t.topic_name).collect();
    if !request.patterns.is_empty() {
        let patterns = match compile_patterns(&request.patterns) {
            Ok(patterns) => patterns,
            Err(error) => {
                return Outcome {
                    error,
                    topics: Vec::new(),
                };
            }
        };
        for topic in broker.mirror_topics(&request.mirror_name) {
            if patterns.iter().any(|r| r.is_match(&topic)) && !names.contains(&topic) {
                names.push(topic);
            }
        }
        let saved = save_patterns(
            broker,
            access,
            &request.mirror_name,
            &Patterns {
                stop: &request.patterns,
                ..Default::default()
            },
        )
        .await;
        if let Err(error) = saved {
            return Outcome {
                error,
                topics: Vec::new(),
            };
        }
    }
    change(
        broker,
        engine,
        access,
        request.mirror_name,
        names,
        Desired::Stopped,
    )
    .await
}

/// PauseMirrorTopics and ResumeMirrorTopics: `desired` of the named topics.
async fn pause_or_resume(
    broker: &Broker,
    engine: Option<&Engine>,
    access: &Access<'_>,
    (mirror, names, state_validation_offset): (String, Vec<String>, i64),
    desired: Desired,
) -> Outcome {
    if let Some(refused) = refuse_state_validation_offset(state_validation_offset) {
        return refused;
    }
    match prepare(engine, access, &mirror).await {
        Ok(engine) => change(broker, engine, access, mirror, names, desired).await,
        Err(refused) => refused,
    }
}

pub(super) async fn pause_topics(
    broker: &Broker,
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: PauseMirrorTopicsRequest,
) -> PauseMirrorTopicsResponse {
    let names = request.topics.into_iter().map(|t| t.topic_name).collect();
    let asked = (request.mirror_name, names, request.state_validation_offset);
    topic_response!(
        PauseMirrorTopicsResponse,
        pause_mirror_topics_response,
        pause_or_resume(broker, engine, access, asked, Desired::Paused).await
    )
}

pub(super) async fn resume_topics(
    broker: &Broker,
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: ResumeMirrorTopicsRequest,
) -> ResumeMirrorTopicsResponse {
    let names = request.topics.into_iter().map(|t| t.topic_name).collect();
    let asked = (request.mirror_name, names, request.state_validation_offset);
    topic_response!(
        ResumeMirrorTopicsResponse,
        resume_mirror_topics_response,
        pause_or_resume(broker, engine, access, asked, Desired::Mirroring).await
    )
}

pub(super) async fn describe(
    broker: &Broker,
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: DescribeMirrorsRequest,
) -> DescribeMirrorsResponse {
    let Some(engine) = engine else {
        return DescribeMirrorsResponse {
            error_code: ErrorCode::COORDINATOR_NOT_AVAILABLE.0,
            error_message: Some("the mirroring engine is not running".into()),
            ..Default::default()
        };
    };
    let lookup_results = match (
        &request.cluster_id,
        request.last_mirror_epoch_lookups.is_empty(),
    ) {
        (Some(asking), false) => {
            if !access.cluster(Operation::ClusterAction) {
                return DescribeMirrorsResponse {
                    error_code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0,
                    error_message: Some("the failback lookup needs CLUSTER_ACTION".into()),
                    ..Default::default()
                };
            }
            match failback_lookup(broker, engine, asking, &request.last_mirror_epoch_lookups).await
            {
                Ok(results) => results,
                Err((error_code, error_message)) => {
                    return DescribeMirrorsResponse {
                        error_code,
                        error_message,
                        ..Default::default()
                    };
                }
            }
        }
        _ => Vec::new(),
    };
    let names: Vec<String> = if request.mirror_names.is_empty() {
        broker.mirrors().into_keys().collect()
    } else {
        request.mirror_names
    };
    let mut mirrors = Vec::new();
    for name in names {
        let mut described = describe_mirrors_response::DescribedMirror {
            mirror_name: name.clone(),
            ..Default::default()
        };
        if !access.mirror(Operation::Describe, &name) {
            described.error_code = ErrorCode::CLUSTER_MIRROR_AUTHORIZATION_FAILED.0;
            mirrors.push(described);
            continue;
        }
        let loaded = match engine.ask(LoadMirror(name.clone())).await {
            Ok(()) => engine.ask(DescribeMirror(name.clone())).await,
            Err(e) => Err(e),
        };
        let local_writes = match &loaded {
            Ok(topics) => engine
                .ask(CountLocalWrites {
                    mirror: name.clone(),
                    topics: topics.iter().map(|t| t.topic.clone()).collect(),
                })
                .await
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        match loaded {
            Ok(topics) => {
                described.topics = topics
                    .into_iter()
                    .map(|t| {
                        let partitions = t
                            .partitions
                            .iter()
                            .map(|view| {
                                let (end, stable) = broker
                                    .partition(&t.topic, view.partition)
                                    .map_or((-1, -1), |part| {
                                        let log =
                                            part.log.lock().unwrap_or_else(|e| e.into_inner());
                                        (log.log_end_offset(), log.last_stable_offset())
                                    });
                                let counted = local_writes
                                    .iter()
                                    .find(|w| w.topic == t.topic && w.partition == view.partition);
                                let local = counted.map_or(-1, |w| records(w.records));
                                // The count's own log end: the two come from one read.
                                let end = counted.map_or(end, |w| w.log_end);
                                let source = view.source_offset.unwrap_or(-1);
                                let lag = if source >= 0 && end >= 0 {
                                    (source - end).max(0)
                                } else {
                                    -1
                                };
                                describe_mirrors_response::DescribedPartition {
                                    partition_index: view.partition,
                                    state: view.snapshot.state.name().to_string(),
                                    source_offset: source,
                                    destination_offset: end,
                                    lag,
                                    retry_attempt: view.snapshot.retry_attempt,
                                    error_message: view.snapshot.error.clone(),
                                    lag_time_ms: view.lag_ms.unwrap_or(-1),
                                    truncated_at_stop_records: records(view.truncated.at_stop),
                                    truncated_at_start_records: records(view.truncated.at_start),
                                    source_high_watermark: view.source_high_watermark.unwrap_or(-1),
                                    destination_last_stable_offset: stable,
                                    local_records: local,
                                    ..Default::default()
                                }
                            })
                            .collect();
                        describe_mirrors_response::DescribedTopic {
                            topic_name: t.topic,
                            topic_id: t.topic_id,
                            partitions,
                            ..Default::default()
                        }
                    })
                    .collect();
            }
            Err(e) => {
                described.error_code = e.code.0;
                described.error_message = Some(e.message);
            }
        }
        mirrors.push(described);
    }
    DescribeMirrorsResponse {
        mirrors,
        lookup_results,
        ..Default::default()
    }
}

/// The KIP prototype's failback lookup, carried by DescribeClusterMirrors' tagged fields: the
/// same answer as LastMirroredEpochs, by topic id. Its results have no per-partition error, so a
/// partition whose shard cannot answer yet fails the whole request (retriable), never -1, which
/// would make the asking cluster copy everything again; a topic id this cluster does not have
/// answers -1.
async fn failback_lookup(
    broker: &Broker,
    engine: &Engine,
    asking: &str,
    lookups: &[describe_mirrors_request::LastMirrorEpochLookup],
) -> Result<Vec<describe_mirrors_response::LastMirrorEpochLookupResult>, (i16, Option<String>)> {
    let mut asked = Vec::new();
    let mut unknown = Vec::new();
    for lookup in lookups {
        match broker.topic_name(&lookup.topic_id) {
            Some(name) => asked.push((name, lookup.topic_id, lookup.partitions.clone())),
            None => unknown.push((lookup.topic_id, lookup.partitions.clone())),
        }
    }
    let found = super::mirrors::lookup_lmes(broker, Some(engine), asking, asked).await?;
    let mut results = Vec::new();
    for (name, topic_id, partitions) in found {
        let mut answered = Vec::new();
        for (partition_index, lme) in partitions {
            let last_mirror_epoch = lme.map_err(|code| {
                (
                    code.0,
                    Some(format!(
                        "the last mirror epoch of {name}-{partition_index} cannot be read yet; ask again"
                    )),
                )
            })?;
            answered.push(describe_mirrors_response::LastMirrorEpochPartitionResult {
                partition_index,
                last_mirror_epoch,
                ..Default::default()
            });
        }
        results.push(describe_mirrors_response::LastMirrorEpochLookupResult {
            topic_id,
            partitions: answered,
            ..Default::default()
        });
    }
    for (topic_id, partitions) in unknown {
        results.push(describe_mirrors_response::LastMirrorEpochLookupResult {
            topic_id,
            partitions: partitions
                .into_iter()
                .map(
                    |partition_index| describe_mirrors_response::LastMirrorEpochPartitionResult {
                        partition_index,
                        last_mirror_epoch: -1,
                        ..Default::default()
                    },
                )
                .collect(),
            ..Default::default()
        });
    }
    Ok(results)
}

/// A count of records as an `int64` field.
fn records(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
