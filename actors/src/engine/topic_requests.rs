//! KIP-1279's topic RPCs at the request level, as a host's handlers ask them: StartMirrorTopics
//! ([`StartTopics`]) and Stop/Pause/ResumeMirrorTopics ([`ChangeTopics`]), each answered per
//! topic, so the rules are the engine's whatever host embeds it (docs/design.md §7).
//!
//! A request loads the mirror first (one created since the broker started connects to its
//! source), then:
//! - a start adds the source topics its IncludePatterns select (ExcludePatterns win; internal
//!   topics never), checks the discard of a stopped topic's local writes
//!   ([`super::local_writes`]), keeps its patterns in `topics.include` / `topics.exclude` for
//!   auto-discovery, and starts each topic ([`StartTopic`]);
//! - a stop adds the mirror's topics its Patterns match and takes the patterns out of
//!   auto-discovery; a pause, resume or stop of each topic is checked against its
//!   `mirror.name` ([`crate::policy::topic_changes`]) and asked of it ([`ChangeTopic`]).
//!
//! The host authorizes: it refuses the request without ALTER on the mirror, and hands the
//! engine a [`TopicAccess`] that answers, per topic, ALTER_CONFIGS (a topic without it answers
//! TOPIC_AUTHORIZATION_FAILED), and whether patterns may be kept in the mirror's configs.

use super::local_writes::confirm_discarded_writes;
use super::mirror_configs::{self, Patterns};
use super::system::{LoadMirror, MirrorSystem};
use super::topics::{ChangeTopic, SourceTopics, StartTopic};
use crate::host::Host;
use crate::metadata::{MIRROR_NAME, mirror_of, mirror_topics};
use crate::partition::Desired;
use crate::policy::MirrorError;
use crate::policy::patterns::{self, TopicPatterns, is_internal_topic};
use crate::policy::topic_changes::change_refused;
use actix::{Addr, AsyncContext, Context, Handler, Message, ResponseFuture};
use kmirror_protocol::errors::ErrorCode;
use std::sync::Arc;

/// What the principal asking may do, as the host's authorizer answers it.
#[derive(Clone)]
pub struct TopicAccess {
    /// ALTER_CONFIGS on a topic: each topic a request names or its patterns select.
    pub alter_topic_configs: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    /// ALTER_CONFIGS on the mirror: a request's patterns are kept in its configs.
    pub alter_mirror_configs: bool,
}

impl TopicAccess {
    /// Everything allowed (a host without authorization, or a test).
    pub fn all() -> TopicAccess {
        TopicAccess {
            alter_topic_configs: Arc::new(|_| true),
            alter_mirror_configs: true,
        }
    }
}

impl std::fmt::Debug for TopicAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicAccess")
            .field("alter_mirror_configs", &self.alter_mirror_configs)
            .finish_non_exhaustive()
    }
}

/// One topic's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicResult {
    /// The topic.
    pub topic: String,
    /// Why it was refused; `None`: done.
    pub error: Option<MirrorError>,
}

/// StartMirrorTopics.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<Vec<TopicResult>, MirrorError>")]
pub struct StartTopics {
    /// The mirror.
    pub mirror: String,
    /// The topics named.
    pub topics: Vec<String>,
    /// IncludePatterns: source topics they select start too.
    pub include: Vec<String>,
    /// ExcludePatterns: source topics they select do not.
    pub exclude: Vec<String>,
    /// DiscardLocalRecords: the records written here since a stopped topic's failover that the
    /// operator confirmed discarding (0: none).
    pub discard_local_records: i64,
    /// What the asking principal may do.
    pub access: TopicAccess,
}

/// StopMirrorTopics, PauseMirrorTopics or ResumeMirrorTopics.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<Vec<TopicResult>, MirrorError>")]
pub struct ChangeTopics {
    /// The mirror.
    pub mirror: String,
    /// The topics named.
    pub topics: Vec<String>,
    /// A stop's Patterns: the mirror's topics they match stop too.
    pub patterns: Vec<String>,
    /// What the topics should do now.
    pub desired: Desired,
    /// For a stop: a consistent cut's point in time, ms since the epoch (docs/failover.md, "A
    /// consistent cut").
    pub cut_timestamp_ms: Option<i64>,
    /// What the asking principal may do.
    pub access: TopicAccess,
}

impl<H: Host> Handler<StartTopics> for MirrorSystem<H> {
    type Result = ResponseFuture<Result<Vec<TopicResult>, MirrorError>>;

    fn handle(&mut self, msg: StartTopics, ctx: &mut Context<Self>) -> Self::Result {
        let (system, host) = (ctx.address(), self.host.clone());
        Box::pin(async move { start_topics(system, host, msg).await })
    }
}

impl<H: Host> Handler<ChangeTopics> for MirrorSystem<H> {
    type Result = ResponseFuture<Result<Vec<TopicResult>, MirrorError>>;

    fn handle(&mut self, msg: ChangeTopics, ctx: &mut Context<Self>) -> Self::Result {
        let (system, host) = (ctx.address(), self.host.clone());
        Box::pin(async move { change_topics(system, host, msg).await })
    }
}

/// The engine's own system did not answer (it is stopping).
pub(super) fn stopped(e: actix::MailboxError) -> MirrorError {
    MirrorError::new(
        ErrorCode::COORDINATOR_NOT_AVAILABLE,
        format!("the mirroring engine: {e}"),
    )
}

/// What the system answered a start or a change of one topic: its refusal, or `None` (a
/// system that is stopping refuses too).
fn refusal(answer: Result<Result<(), MirrorError>, actix::MailboxError>) -> Option<MirrorError> {
    answer.map_err(stopped).and_then(|r| r).err()
}

/// A topic the principal may not change, or `None`.
fn unauthorized(access: &TopicAccess, topic: &str) -> Option<MirrorError> {
    (!(access.alter_topic_configs)(topic)).then(|| {
        MirrorError::new(
            ErrorCode::TOPIC_AUTHORIZATION_FAILED,
            format!("ALTER_CONFIGS on topic {topic} is needed"),
        )
    })
}

async fn start_topics<H: Host>(
    system: Addr<MirrorSystem<H>>,
    host: H,
    msg: StartTopics,
) -> Result<Vec<TopicResult>, MirrorError> {
    system
        .send(LoadMirror(msg.mirror.clone()))
        .await
        .map_err(stopped)??;
    let include = TopicPatterns::compile(&msg.include)?;
    let exclude = TopicPatterns::compile(&msg.exclude)?;
    let mut names = msg.topics;
    if !include.is_empty() {
        let source = system
            .send(SourceTopics(msg.mirror.clone()))
            .await
            .map_err(stopped)??;
        for name in patterns::select(source, &include, &exclude) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    let mut confirmed = confirm_discarded_writes(
        &system,
        &host,
        &msg.mirror,
        &names,
        msg.discard_local_records,
    )
    .await?;
    // Kept for auto-discovery: the sync starts the source topics created later that they
    // select (docs/mirror-configs.md, topics.include).
    let kept = Patterns {
        include: &msg.include,
        exclude: &msg.exclude,
        ..Default::default()
    };
    save_patterns(&host, &msg.mirror, &kept, &msg.access).await?;
    let mut results = Vec::with_capacity(names.len());
    for topic in names {
        let error = match unauthorized(&msg.access, &topic) {
            Some(refused) => Some(refused),
            // A cluster's internal topics are its own (offsets, transactions, mirror states):
            // a mirror copy of one could be neither used nor deleted.
            None if is_internal_topic(&topic) => Some(MirrorError::new(
                ErrorCode::INVALID_TOPIC_EXCEPTION,
                format!("{topic} is an internal topic name: it cannot be mirrored"),
            )),
            None => {
                let started = StartTopic {
                    mirror: msg.mirror.clone(),
                    topic: topic.clone(),
                    confirmed: confirmed.remove(&topic).unwrap_or_default(),
                };
                refusal(system.send(started).await)
            }
        };
        results.push(TopicResult { topic, error });
    }
    Ok(results)
}

async fn change_topics<H: Host>(
    system: Addr<MirrorSystem<H>>,
    host: H,
    msg: ChangeTopics,
) -> Result<Vec<TopicResult>, MirrorError> {
    system
        .send(LoadMirror(msg.mirror.clone()))
        .await
        .map_err(stopped)??;
    let mut names = msg.topics;
    if !msg.patterns.is_empty() {
        let matching = TopicPatterns::compile(&msg.patterns)?;
        for topic in mirror_topics(&host.topics(), &msg.mirror) {
            if matching.matches(&topic) && !names.contains(&topic) {
                names.push(topic);
            }
        }
        // A stopped topic's pattern starts no new source topics.
        let kept = Patterns {
            stop: &msg.patterns,
            ..Default::default()
        };
        save_patterns(&host, &msg.mirror, &kept, &msg.access).await?;
    }
    let mut results = Vec::with_capacity(names.len());
    for topic in names {
        let value = host
            .topic(&topic)
            .and_then(|t| t.configs.get(MIRROR_NAME).cloned());
        let in_mirror = value
            .as_deref()
            .and_then(mirror_of)
            .is_some_and(|(m, _)| m == msg.mirror);
        let refused = unauthorized(&msg.access, &topic).or_else(|| {
            in_mirror
                .then(|| change_refused(value.as_deref(), &msg.mirror, msg.desired))
                .flatten()
        });
        let error = match refused {
            Some(refused) => Some(refused),
            None => {
                let change = ChangeTopic {
                    mirror: msg.mirror.clone(),
                    topic: topic.clone(),
                    desired: msg.desired,
                    cut_timestamp_ms: msg.cut_timestamp_ms,
                };
                refusal(system.send(change).await)
            }
        };
        results.push(TopicResult { topic, error });
    }
    Ok(results)
}

/// Keeps a start's or a stop's patterns in the mirror's auto-discovery configs
/// ([`mirror_configs::with_patterns`]), checked like any config change; nothing is written when
/// they are there already. The write is refused if another change of the mirror's configs
/// landed since they were read (two starts through two brokers): it is made again from the
/// configs now, a few times, so neither start's patterns are lost.
async fn save_patterns<H: Host>(
    host: &H,
    mirror: &str,
    patterns: &Patterns<'_>,
    access: &TopicAccess,
) -> Result<(), MirrorError> {
    if patterns.include.is_empty() && patterns.exclude.is_empty() && patterns.stop.is_empty() {
        return Ok(());
    }
    // They change the mirror's configs as `--alter` would, and what auto-discovery starts.
    if !access.alter_mirror_configs {
        return Err(MirrorError::new(
            ErrorCode::CLUSTER_MIRROR_AUTHORIZATION_FAILED,
            "patterns are kept in the mirror's topics.include / topics.exclude: ALTER_CONFIGS \
             on the mirror is needed (or name the topics instead)",
        ));
    }
    const ATTEMPTS: u64 = 5;
    let fetchers = host.settings().num_replica_fetchers;
    for attempt in 1..=ATTEMPTS {
        let Some(current) = host.mirrors().remove(mirror) else {
            return Err(MirrorError::unknown_mirror());
        };
        let next = mirror_configs::with_patterns(&current, patterns);
        if next == current {
            return Ok(());
        }
        mirror_configs::validate(&next, fetchers)
            .map_err(|e| MirrorError::new(ErrorCode::INVALID_REQUEST, e.to_string()))?;
        match host.set_mirror_configs(mirror, next, current).await {
            // This broker's metadata may trail the change that won: give it time to arrive.
            Err(e) if e.code == ErrorCode::INVALID_CLUSTER_MIRROR_STATES && attempt < ATTEMPTS => {
                tokio::time::sleep(std::time::Duration::from_millis(100 * attempt)).await;
            }
            written => return written.map_err(|e| MirrorError::new(e.code, e.message)),
        }
    }
    Ok(())
}
