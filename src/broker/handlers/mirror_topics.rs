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
use crate::mirror::system::{LoadMirror, MirrorError};
use crate::mirror::topics::{ChangeTopic, DescribeMirror, SourceTopics, StartTopic};
use kmirror_actors::partition::Desired;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    DescribeMirrorsRequest, DescribeMirrorsResponse, PauseMirrorTopicsRequest,
    PauseMirrorTopicsResponse, ResumeMirrorTopicsRequest, ResumeMirrorTopicsResponse,
    StartMirrorTopicsRequest, StartMirrorTopicsResponse, StopMirrorTopicsRequest,
    StopMirrorTopicsResponse, describe_mirrors_response, pause_mirror_topics_response,
    resume_mirror_topics_response, start_mirror_topics_response, stop_mirror_topics_response,
};

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
}

fn from_error(e: MirrorError) -> (i16, Option<String>) {
    (e.code.0, Some(e.message))
}

/// Checks the mirror and loads it into the engine.
async fn prepare(broker: &Broker, access: &Access<'_>, mirror: &str) -> Result<(), Outcome> {
    if !access.mirror(Operation::Alter, mirror) {
        return Err(Outcome::refused(
            ErrorCode::MIRROR_AUTHORIZATION_FAILED.0,
            "ALTER on the mirror is needed",
        ));
    }
    let engine = broker.mirror_engine().ok_or_else(|| {
        Outcome::refused(
            ErrorCode::COORDINATOR_NOT_AVAILABLE.0,
            "the mirroring engine is not running",
        )
    })?;
    match engine.send(LoadMirror(mirror.to_string())).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            let (code, message) = from_error(e);
            Err(Outcome {
                error: (code, message),
                topics: Vec::new(),
            })
        }
        Err(e) => Err(Outcome::refused(
            ErrorCode::COORDINATOR_NOT_AVAILABLE.0,
            e.to_string(),
        )),
    }
}

/// The source topics IncludePatterns select and ExcludePatterns do not (whole-name matches,
/// internal `__` topics never), or why the patterns cannot be used.
async fn matching_source_topics(
    broker: &Broker,
    request: &StartMirrorTopicsRequest,
) -> Result<Vec<String>, (i16, Option<String>)> {
    if request.include_patterns.is_empty() {
        return Ok(Vec::new());
    }
    let compile = |patterns: &[String]| -> Result<Vec<regex::Regex>, (i16, Option<String>)> {
        patterns
            .iter()
            .map(|p| {
                regex::Regex::new(&format!("^(?:{p})$")).map_err(|e| {
                    (
                        ErrorCode::INVALID_REQUEST.0,
                        Some(format!("pattern {p:?}: {e}")),
                    )
                })
            })
            .collect()
    };
    let include = compile(&request.include_patterns)?;
    let exclude = compile(&request.exclude_patterns)?;
    let engine = broker.mirror_engine().ok_or((
        ErrorCode::COORDINATOR_NOT_AVAILABLE.0,
        Some("the mirroring engine is not running".to_string()),
    ))?;
    let names = engine
        .send(SourceTopics(request.mirror_name.clone()))
        .await
        .map_err(|e| (ErrorCode::COORDINATOR_NOT_AVAILABLE.0, Some(e.to_string())))?
        .map_err(from_error)?;
    Ok(names
        .into_iter()
        .filter(|n| !n.starts_with("__"))
        .filter(|n| include.iter().any(|r| r.is_match(n)))
        .filter(|n| !exclude.iter().any(|r| r.is_match(n)))
        .collect())
}

async fn start(broker: &Broker, access: &Access<'_>, request: StartMirrorTopicsRequest) -> Outcome {
    if let Err(refused) = prepare(broker, access, &request.mirror_name).await {
        return refused;
    }
    let matched = match matching_source_topics(broker, &request).await {
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
    if let Err(refused) = confirm_discarded_writes(
        broker,
        &request.mirror_name,
        &names,
        request.discard_local_records,
    ) {
        return refused;
    }
    let mut topics = Vec::new();
    for name in names {
        if !access.topic(Operation::AlterConfigs, &name) {
            topics.push((name, ErrorCode::TOPIC_AUTHORIZATION_FAILED.0, None));
            continue;
        }
        let Some(engine) = broker.mirror_engine() else {
            topics.push((name, ErrorCode::COORDINATOR_NOT_AVAILABLE.0, None));
            continue;
        };
        let started = engine
            .send(StartTopic {
                mirror: request.mirror_name.clone(),
                topic: name.clone(),
            })
            .await;
        let (code, message) = match started {
            Ok(Ok(())) => (0, None),
            Ok(Err(e)) => from_error(e),
            Err(e) => (ErrorCode::COORDINATOR_NOT_AVAILABLE.0, Some(e.to_string())),
        };
        topics.push((name, code, message));
    }
    Outcome {
        error: (0, None),
        topics,
    }
}

/// Restarting the mirror of a stopped topic cuts its log back to where it failed over,
/// discarding what this cluster wrote since. The engine never does that unasked: the start is
/// refused, naming how many records would go, unless `confirmed` is exactly that many.
fn confirm_discarded_writes(
    broker: &Broker,
    mirror: &str,
    names: &[String],
    confirmed: i64,
) -> Result<(), Outcome> {
    let stopped = format!("{mirror}.removed");
    let mut total = 0i64;
    let mut details = Vec::new();
    for name in names {
        let Some(topic) = broker.topic(name) else {
            continue;
        };
        if topic.configs.get("mirror.name") != Some(&stopped) {
            continue;
        }
        for index in 0..topic.partitions.len() as i32 {
            let Some(partition) = broker.partition(name, index) else {
                continue;
            };
            let log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
            let written = crate::mirror::log::written_since_failover(&log).map_err(|e| {
                Outcome::refused(
                    ErrorCode::KAFKA_STORAGE_ERROR.0,
                    format!("reading {name}-{index}: {e}"),
                )
            })?;
            if written > 0 {
                total += written;
                details.push(format!("{name}-{index}: {written}"));
            }
        }
    }
    if total == 0 || confirmed == total {
        return Ok(());
    }
    Err(Outcome::refused(
        ErrorCode::POLICY_VIOLATION.0,
        format!(
            "restarting the mirror discards {total} records written on this cluster since the \
             failover ({}); nothing was changed. To discard them, start again with \
             --discard-local-writes {total}",
            details.join(", ")
        ),
    ))
}

/// Refuses a pause or resume the topic's current `mirror.name` does not allow.
fn refuse_change(broker: &Broker, mirror: &str, topic: &str, desired: Desired) -> Option<i16> {
    let value = broker
        .topic(topic)
        .and_then(|t| t.configs.get("mirror.name").cloned())?;
    let paused = value == format!("{mirror}.paused");
    let stopped = value == format!("{mirror}.removed");
    match desired {
        Desired::Paused if stopped => Some(ErrorCode::MIRROR_TOPIC_BEING_STOPPED.0),
        Desired::Paused if paused => Some(ErrorCode::MIRROR_TOPIC_ALREADY_PAUSED.0),
        Desired::Mirroring if stopped => Some(ErrorCode::MIRROR_TOPIC_BEING_STOPPED.0),
        Desired::Mirroring if !paused => Some(ErrorCode::MIRROR_TOPIC_NOT_PAUSED.0),
        _ => None,
    }
}

async fn change(
    broker: &Broker,
    access: &Access<'_>,
    mirror: String,
    names: Vec<String>,
    desired: Desired,
) -> Outcome {
    if let Err(refused) = prepare(broker, access, &mirror).await {
        return refused;
    }
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
        let Some(engine) = broker.mirror_engine() else {
            topics.push((name, ErrorCode::COORDINATOR_NOT_AVAILABLE.0, None));
            continue;
        };
        let changed = engine
            .send(ChangeTopic {
                mirror: mirror.clone(),
                topic: name.clone(),
                desired,
            })
            .await;
        let (code, message) = match changed {
            Ok(Ok(())) => (0, None),
            Ok(Err(e)) => from_error(e),
            Err(e) => (ErrorCode::COORDINATOR_NOT_AVAILABLE.0, Some(e.to_string())),
        };
        topics.push((name, code, message));
    }
    Outcome {
        error: (0, None),
        topics,
    }
}

/// The response of a topic RPC (each has its own generated types, of one shape).
macro_rules! topic_response {
    ($response:ident, $module:ident, $outcome:expr) => {{
        let outcome = $outcome;
        $response {
            error_code: outcome.error.0,
            error_message: outcome.error.1,
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
    access: &Access<'_>,
    request: StartMirrorTopicsRequest,
) -> StartMirrorTopicsResponse {
    topic_response!(
        StartMirrorTopicsResponse,
        start_mirror_topics_response,
        start(broker, access, request).await
    )
}

pub(super) async fn stop_topics(
    broker: &Broker,
    access: &Access<'_>,
    request: StopMirrorTopicsRequest,
) -> StopMirrorTopicsResponse {
    let names = request.topics.into_iter().map(|t| t.topic_name).collect();
    topic_response!(
        StopMirrorTopicsResponse,
        stop_mirror_topics_response,
        change(broker, access, request.mirror_name, names, Desired::Stopped).await
    )
}

pub(super) async fn pause_topics(
    broker: &Broker,
    access: &Access<'_>,
    request: PauseMirrorTopicsRequest,
) -> PauseMirrorTopicsResponse {
    let names = request.topics.into_iter().map(|t| t.topic_name).collect();
    topic_response!(
        PauseMirrorTopicsResponse,
        pause_mirror_topics_response,
        change(broker, access, request.mirror_name, names, Desired::Paused).await
    )
}

pub(super) async fn resume_topics(
    broker: &Broker,
    access: &Access<'_>,
    request: ResumeMirrorTopicsRequest,
) -> ResumeMirrorTopicsResponse {
    let names = request.topics.into_iter().map(|t| t.topic_name).collect();
    topic_response!(
        ResumeMirrorTopicsResponse,
        resume_mirror_topics_response,
        change(
            broker,
            access,
            request.mirror_name,
            names,
            Desired::Mirroring
        )
        .await
    )
}

pub(super) async fn describe(
    broker: &Broker,
    access: &Access<'_>,
    request: DescribeMirrorsRequest,
) -> DescribeMirrorsResponse {
    let Some(engine) = broker.mirror_engine() else {
        return DescribeMirrorsResponse {
            error_code: ErrorCode::COORDINATOR_NOT_AVAILABLE.0,
            error_message: Some("the mirroring engine is not running".into()),
            ..Default::default()
        };
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
            described.error_code = ErrorCode::MIRROR_AUTHORIZATION_FAILED.0;
            mirrors.push(described);
            continue;
        }
        let loaded = match engine.send(LoadMirror(name.clone())).await {
            Ok(Ok(())) => engine.send(DescribeMirror(name.clone())).await,
            Ok(Err(e)) => Ok(Err(e)),
            Err(e) => Err(e),
        };
        match loaded {
            Ok(Ok(topics)) => {
                described.topics = topics
                    .into_iter()
                    .map(|t| {
                        let partitions = t
                            .partitions
                            .iter()
                            .map(|(index, p, source)| {
                                let end = broker.partition(&t.topic, *index).map_or(-1, |part| {
                                    part.log
                                        .lock()
                                        .unwrap_or_else(|e| e.into_inner())
                                        .log_end_offset()
                                });
                                let lag = if *source >= 0 && end >= 0 {
                                    (source - end).max(0)
                                } else {
                                    -1
                                };
                                describe_mirrors_response::DescribedPartition {
                                    partition_index: *index,
                                    state: p.state.name().to_string(),
                                    source_offset: *source,
                                    destination_offset: end,
                                    lag,
                                    retry_attempt: p.retry_attempt,
                                    error_message: p.error.clone(),
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
            Ok(Err(e)) => {
                described.error_code = e.code.0;
                described.error_message = Some(e.message);
            }
            Err(e) => {
                described.error_code = ErrorCode::COORDINATOR_NOT_AVAILABLE.0;
                described.error_message = Some(e.to_string());
            }
        }
        mirrors.push(described);
    }
    DescribeMirrorsResponse {
        mirrors,
        ..Default::default()
    }
}
