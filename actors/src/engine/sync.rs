//! The MirrorMetadataManager's periodic sync (docs/design.md §6), run by each [`Mirror`] actor
//! every `mirror.metadata.refresh.interval.ms`: reads the source and this broker, lets
//! [`super::sync_plan`] decide, and applies the result through the broker's controller.
//!
//! Per loaded mirror, on every broker: the source cluster id is checked against the mirror's
//! `mirror.source.cluster.id`; a mismatch halts the mirror (no further sync) and fails its
//! partitions here with the reason (FAILED, not retried), and sets
//! [`crate::metrics::SYNC_HALTED`]. On every broker that runs some of the mirror's partitions:
//! consumer group offsets of those partitions. Only on the broker leading the mirror's
//! coordinator shard (`mirror_shard(mirrorName)` of `__mirror_state`): partition count growth,
//! topic configs and ACLs, and the start of source topics that `topics.include`
//! selects and this cluster does not have yet (by the same StartTopic as StartMirrorTopics).
//! Topics paused or stopped (`mirror.name` with a suffix) are left alone, and a topic of the
//! name already here (a stopped one, a plain one) is never started by the filter: only an
//! operator's command takes it over. Each step counts its runs and errors ([`crate::metrics::SYNC_RUNS`],
//! [`crate::metrics::SYNC_ERRORS`]) and a failed step never stops the others.
//!
//! Each broker commits group offsets for the mirror partitions whose logs are here (the clamp
//! needs the log's range), which in a single-node cluster is all, at the group's coordinator
//! wherever it is ([`Host::idle_group_offsets`], [`Host::commit_offsets`]); the brokers of a
//! cluster together cover every partition. A group with members is skipped and counted
//! ([`crate::metrics::GROUPS_SKIPPED`]).

use super::mirror::Mirror;
use super::partition_commands::log_rejection;
use super::repeated::{RepeatedWarnings, Verdict};
use super::shard_route::coordinates;
use super::stats::MirrorStats;
use super::sync_plan::{self, DYNAMIC_TOPIC_CONFIG, DestinationLog, SyncFilters};
use super::topics::StartTopic;
use crate::host::{Host, Source};
use crate::metadata::mirror_topics;
use crate::metrics;
use actix::{ActorFutureExt, AsyncContext, Context, WrapFuture};
use kmirror_protocol::acl::AclBinding;
use kmirror_protocol::client::ClientError;
use kmirror_protocol::errors::ErrorCode;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The sync steps, as the `kind` label names them.
const CLUSTER_ID: &str = "cluster_id";
const PARTITIONS: &str = "partitions";
const CONFIGS: &str = "configs";
const GROUPS: &str = "groups";
const ACLS: &str = "acls";
const TOPICS: &str = "topics";

/// One mirror's sync, with what it needs from its actor.
struct SyncJob<H: Host> {
    mirror: String,
    configs: BTreeMap<String, String>,
    source: Arc<H::Source>,
    /// `None` until the source first answered, for a mirror created without
    /// `mirror.source.cluster.id`.
    expected_cluster_id: Option<String>,
    own_cluster_id: String,
    /// This broker leads the mirror's coordinator shard.
    coordinator: bool,
    stats: Arc<MirrorStats>,
    warnings: Arc<RepeatedWarnings>,
    host: H,
}

/// What one mirror's sync found.
struct SyncOutcome {
    /// The source's cluster id, or why it did not answer.
    source_cluster_id: Result<String, String>,
    /// Source topics `topics.include` selects that this cluster does not have.
    to_start: Vec<String>,
}

impl<H: Host> Mirror<H> {
    /// Runs the mirror's sync in the background, unless one is under way or it halted.
    pub(super) fn sync(&mut self, ctx: &mut Context<Self>) {
        if self.syncing || self.halted.is_some() {
            return;
        }
        let Some(configs) = self.host.mirrors().remove(&self.name) else {
            return;
        };
        let job = SyncJob {
            mirror: self.name.clone(),
            expected_cluster_id: configs
                .get("mirror.source.cluster.id")
                .filter(|id| !id.is_empty())
                .or_else(|| self.source_cluster_id.get())
                .cloned(),
            configs,
            source: self.source.clone(),
            own_cluster_id: self.host.cluster_id(),
            coordinator: coordinates(&self.shards, &self.name),
            stats: self.stats.clone(),
            warnings: self.warnings.clone(),
            host: self.host.clone(),
        };
        self.syncing = true;
        let run = async move { sync_mirror(&job).await };
        ctx.spawn(run.into_actor(self).map(|outcome, mirror, ctx| {
            mirror.syncing = false;
            mirror.source_answered(outcome.source_cluster_id);
            for topic in outcome.to_start {
                mirror.auto_start(topic, ctx);
            }
        }));
    }

    /// Starts a source topic `topics.include` selected, as StartMirrorTopics would.
    fn auto_start(&mut self, topic: String, ctx: &mut Context<Self>) {
        let (stats, warnings) = (self.stats.clone(), self.warnings.clone());
        let now_ms = self.host.now_ms();
        let start = StartTopic {
            mirror: self.name.clone(),
            topic: topic.clone(),
            confirmed: Default::default(),
        };
        let mirror = self.name.clone();
        let started = ctx.address().send(start);
        ctx.spawn(
            async move {
                match started.await {
                    Ok(Ok(())) => {
                        stats.auto_started();
                        tracing::info!(mirror, topic, "started a source topic topics.include selects");
                    }
                    // Refused again at each refresh (a name in the way): warned once a while.
                    Ok(Err(e)) => match warnings.check(&format!("start {topic}"), &e.to_string(), now_ms) {
                        Verdict::Warn { repeats } => tracing::warn!(mirror, topic, error = %e, repeats, "starting a source topic topics.include selects"),
                        Verdict::Quiet => tracing::debug!(mirror, topic, error = %e, "starting a source topic topics.include selects"),
                    },
                    Err(_) => {}
                }
            }
            .into_actor(self),
        );
    }

    /// The mirror's source is another cluster: no more sync, and its mirroring partitions here
    /// FAILED. Paused and stopped (or stopping) topics need nothing of the source and are left
    /// alone.
    pub(super) fn halt(&mut self, reason: String) {
        tracing::error!(mirror = self.name, %reason, "halting the mirror's metadata sync and failing its partitions");
        let mirroring = self
            .topics
            .values()
            .filter(|t| t.known.desired == crate::partition::Desired::Mirroring);
        for topic in mirroring {
            for partition in topic.partitions.values() {
                log_rejection(partition.fail(reason.clone()));
            }
        }
        self.halted = Some(reason);
    }
}

/// Counts a step's run and, when it failed, its error (logged at WARN when it is new, then at
/// most every [`super::repeated::REPEAT_EVERY_MS`] while it persists).
fn count<H: Host>(job: &SyncJob<H>, kind: &'static str, result: Result<(), String>) {
    let mirror = job.mirror.as_str();
    ::metrics::counter!(metrics::SYNC_RUNS, "mirror" => mirror.to_string(), "kind" => kind)
        .increment(1);
    let errors =
        ::metrics::counter!(metrics::SYNC_ERRORS, "mirror" => mirror.to_string(), "kind" => kind);
    match result {
        Ok(()) => {
            errors.increment(0);
            job.warnings.cleared(kind);
        }
        Err(e) => {
            match job.warnings.check(kind, &e, job.host.now_ms()) {
                Verdict::Warn { repeats } => {
                    tracing::warn!(mirror, kind, error = %e, repeats, "a metadata sync step failed")
                }
                Verdict::Quiet => {
                    tracing::debug!(mirror, kind, error = %e, "a metadata sync step failed again")
                }
            }
            errors.increment(1);
        }
    }
}

/// Runs one mirror's sync; what the source answered for its cluster id (the mirror halts
/// mirror when it is the wrong cluster, and shows since when it does not answer). A source
/// that does not answer or is the wrong cluster is not synced further.
async fn sync_mirror<H: Host>(job: &SyncJob<H>) -> SyncOutcome {
    let mut to_start = Vec::new();
    let source_cluster_id = sync_steps(job, &mut to_start).await;
    SyncOutcome {
        source_cluster_id,
        to_start,
    }
}

/// The steps of [`sync_mirror`]; the topics to start go to `to_start`.
async fn sync_steps<H: Host>(
    job: &SyncJob<H>,
    to_start: &mut Vec<String>,
) -> Result<String, String> {
    let mirror = job.mirror.as_str();
    let halted = ::metrics::gauge!(metrics::SYNC_HALTED, "mirror" => mirror.to_string());
    let found = match job.source.cluster_id().await {
        Ok(found) => found,
        Err(e) => {
            count(job, CLUSTER_ID, Err(e.to_string()));
            return Err(e.to_string());
        }
    };
    let expected = job.expected_cluster_id.as_deref().unwrap_or(&found);
    let checked = super::mirror_configs::check_not_this_cluster(&found, &job.own_cluster_id)
        .map_err(|e| e.to_string())
        .and_then(|()| sync_plan::check_source_cluster(expected, &found));
    if let Err(reason) = checked {
        halted.set(1.0);
        count(job, CLUSTER_ID, Err(reason));
        return Ok(found);
    }
    halted.set(0.0);
    count(job, CLUSTER_ID, Ok(()));
    let kinds: &[&'static str] = if job.coordinator {
        &[PARTITIONS, CONFIGS, GROUPS, ACLS, TOPICS]
    } else {
        &[GROUPS]
    };
    let filters = match super::mirror_configs::canonical(&job.configs)
        .map_err(|e| e.to_string())
        .and_then(|c| SyncFilters::from_configs(&c.configs).map_err(|e| e.to_string()))
    {
        Ok(filters) => filters,
        Err(e) => {
            for kind in kinds {
                count(job, kind, Err(e.to_string()));
            }
            return Ok(found);
        }
    };
    // Paused and stopped topics carry a suffix and are left alone.
    let topics = job.host.topics();
    let active: Vec<String> = mirror_topics(&topics, mirror)
        .into_iter()
        .filter(|t| {
            topics
                .get(t)
                .is_some_and(|m| m.configs.get("mirror.name").map(String::as_str) == Some(mirror))
        })
        .collect();
    count(job, GROUPS, sync_groups(job, &active, &filters).await);
    if !job.coordinator {
        return Ok(found);
    }
    count(job, PARTITIONS, sync_partitions(job, &active).await);
    count(job, CONFIGS, sync_configs(job, &active, &filters).await);
    count(job, ACLS, sync_acls(job, &filters).await);
    if filters.auto_mirrors() {
        match topics_to_start(job, &filters).await {
            Ok(topics) => {
                count(job, TOPICS, Ok(()));
                *to_start = topics;
            }
            Err(e) => count(job, TOPICS, Err(e)),
        }
    }
    Ok(found)
}

/// The source topics `topics.include` selects that no topic of this cluster has the name of.
/// Internal topics (`__` names: group offsets, transactions, `__mirror_state`) are never
/// started, even with `topics.exclude` emptied: they belong to each cluster.
async fn topics_to_start<H: Host>(
    job: &SyncJob<H>,
    filters: &SyncFilters,
) -> Result<Vec<String>, String> {
    let source = job
        .source
        .metadata(None)
        .await
        .map_err(|e| failed("the source's topics", e))?;
    let here = job.host.topics();
    Ok(source
        .topics
        .into_keys()
        .filter(|t| !t.starts_with("__") && filters.topic_auto_mirrored(t) && !here.contains_key(t))
        .collect())
}

fn failed(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

/// Grows destination topics to the source's partition count.
async fn sync_partitions<H: Host>(job: &SyncJob<H>, active: &[String]) -> Result<(), String> {
    if active.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = active.iter().map(String::as_str).collect();
    let source = job
        .source
        .metadata(Some(&names))
        .await
        .map_err(|e| failed("the source's metadata", e))?;
    let mut errors = Vec::new();
    for topic in active {
        let (Some(source_topic), Some(local)) = (source.topics.get(topic), job.host.topic(topic))
        else {
            continue;
        };
        let count = source_topic.partitions.len();
        if count > local.partitions.len() {
            tracing::info!(
                mirror = job.mirror,
                topic,
                from = local.partitions.len(),
                to = count,
                "the source topic has more partitions"
            );
            if let Err(e) = job.host.create_partitions(topic, count as i32).await {
                errors.push(failed(topic, e));
            }
        }
    }
    joined(errors)
}

/// Copies the source topics' dynamic overrides the filters let through.
async fn sync_configs<H: Host>(
    job: &SyncJob<H>,
    active: &[String],
    filters: &SyncFilters,
) -> Result<(), String> {
    let mut errors = Vec::new();
    for topic in active {
        let entries = match job.source.describe_topic_configs(topic).await {
            Ok(entries) => entries,
            Err(e) => {
                errors.push(failed(topic, e));
                continue;
            }
        };
        let overrides: Vec<(String, String)> = entries
            .into_iter()
            .filter(|e| e.source == DYNAMIC_TOPIC_CONFIG && !e.sensitive)
            .filter_map(|e| Some((e.name, e.value?)))
            .collect();
        let Some(current) = job.host.topic(topic).map(|t| t.configs) else {
            continue;
        };
        if let Some(next) = sync_plan::config_updates(&overrides, &current, filters) {
            tracing::info!(
                mirror = job.mirror,
                topic,
                "topic configs changed on the source"
            );
            if let Err(e) = job.host.set_topic_configs(topic, next).await {
                errors.push(failed(topic, e));
            }
        }
    }
    joined(errors)
}

/// Commits the source groups' offsets of the active topics' partitions whose logs are here, at
/// each group's coordinator, for groups with no members.
async fn sync_groups<H: Host>(
    job: &SyncJob<H>,
    active: &[String],
    filters: &SyncFilters,
) -> Result<(), String> {
    if active.is_empty() {
        return Ok(());
    }
    let groups = job
        .source
        .list_groups()
        .await
        .map_err(|e| failed("listing the source's groups", e))?;
    let mut errors = Vec::new();
    for group in groups {
        let id = group.group_id.as_str();
        let consumer = group.protocol_type.is_empty() || group.protocol_type == "consumer";
        if !consumer || !filters.group_included(id) {
            continue;
        }
        let here = match job.host.idle_group_offsets(id).await {
            Ok(Some(here)) => here,
            Ok(None) => {
                tracing::debug!(
                    mirror = job.mirror,
                    group = id,
                    "skipping a group active here"
                );
                job.stats.group_skipped();
                continue;
            }
            Err(e) => {
                errors.push(format!("{id}: reading its offsets here: {e}"));
                continue;
            }
        };
        let offsets = match job.source.committed_offsets(id).await {
            Ok(offsets) => offsets,
            Err(e) => {
                errors.push(failed(id, e));
                continue;
            }
        };
        let logs = destination_logs(&job.host, active, &offsets);
        let commits = sync_plan::offsets_to_commit(&offsets, &here, &logs);
        if commits.is_empty() {
            continue;
        }
        let count = commits.len();
        match job.host.commit_offsets(id, commits).await {
            Ok(()) => tracing::info!(
                mirror = job.mirror,
                group = id,
                offsets = count,
                "group offsets synced"
            ),
            // A member joined meanwhile: its own commits win; next round decides again.
            Err(e) => errors.push(format!("{id}: committing: {e}")),
        }
    }
    joined(errors)
}

/// The logs here of the active partitions `offsets` name.
fn destination_logs(
    host: &impl Host,
    active: &[String],
    offsets: &[kmirror_protocol::client::source::CommittedOffset],
) -> HashMap<(String, i32), DestinationLog> {
    offsets
        .iter()
        .filter(|c| active.contains(&c.topic))
        .filter_map(|c| {
            let log = host
                .with_log(&c.topic, c.partition, |log| {
                    Ok::<_, crate::host::HostError>(DestinationLog {
                        log_start: log.log_start_offset(),
                        log_end: log.log_end_offset(),
                        epochs: log.epoch_history(),
                    })
                })
                .ok()?;
            Some(((c.topic.clone(), c.partition), log))
        })
        .collect()
}

/// Creates the source's bindings in the mirror's scope, deletes those gone from it.
async fn sync_acls<H: Host>(job: &SyncJob<H>, filters: &SyncFilters) -> Result<(), String> {
    let source = match job.source.describe_acls().await {
        Ok(bindings) => bindings,
        // The source has no authorizer: no ACLs to copy.
        Err(ClientError::Broker { code, .. }) if code == ErrorCode::SECURITY_DISABLED => {
            return Ok(());
        }
        Err(e) => return Err(failed("the source's ACLs", e)),
    };
    let source: Vec<AclBinding> = source
        .into_iter()
        .filter_map(|b| {
            AclBinding::from_wire(
                b.resource_type,
                &b.resource_name,
                b.pattern_type,
                &b.principal,
                &b.host,
                b.operation,
                b.permission_type,
            )
            .ok()
        })
        .collect();
    let destination = job.host.acls();
    let changes = sync_plan::acl_changes(&source, &destination, filters);
    let mut errors = Vec::new();
    if !changes.create.is_empty() {
        tracing::info!(
            mirror = job.mirror,
            bindings = changes.create.len(),
            "creating ACLs from the source"
        );
        if let Err(e) = job.host.create_acls(changes.create).await {
            errors.push(failed("creating ACLs", e));
        }
    }
    if !changes.delete.is_empty() {
        tracing::info!(
            mirror = job.mirror,
            bindings = changes.delete.len(),
            "deleting ACLs gone from the source"
        );
        if let Err(e) = job.host.delete_acls(changes.delete).await {
            errors.push(failed("deleting ACLs", e));
        }
    }
    joined(errors)
}

fn joined(errors: Vec<String>) -> Result<(), String> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}
