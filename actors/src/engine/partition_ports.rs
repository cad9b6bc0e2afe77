//! A mirror partition actor's ports over the host: its coordinator shard (`__mirror_state`),
//! its fetcher, the host's controller and partition log, and the source cluster.
//!
//! The partition's shard is an actor here or another broker of the cluster (see
//! [`ShardRoute`]); reads and writes go to it as ReadMirrorStates / WriteMirrorStates.
//! Writing the LME rewrites the partition's stored state with the LME added, as one record.

use super::cause;
use super::fetch::{DestinationEpochs, raise_epoch};
use super::fetcher_pool::{Attach, Detach, FetcherPool};
use super::shard_route::ShardRoute;
use crate::actor::{FetcherProgress, PartitionPorts, PortFuture};
use crate::epoch::{self, Alignment};
use crate::host::{self, Host, MirrorLog, Source};
use crate::partition::{Cause, StoredState};
use actix::Addr;
use kmirror_protocol::client::Isolation;
use kmirror_protocol::client::source::EARLIEST;
use kmirror_protocol::messages::{
    ReadMirrorStatesRequest, WriteMirrorStatesRequest, read_mirror_states_request,
    write_mirror_states_request,
};
use kmirror_protocol::state::MirrorState;
use std::sync::Arc;
use uuid::Uuid;

const FENCED_LEADER_EPOCH: i16 = kmirror_protocol::errors::ErrorCode::FENCED_LEADER_EPOCH.0;

/// Which mirror partition, and where things live for it.
#[derive(Debug, Clone)]
pub struct MirrorPartitionSite {
    /// The mirror.
    pub mirror: String,
    /// The topic (same name and id on both clusters).
    pub topic: String,
    /// The topic id.
    pub topic_id: Uuid,
    /// The partition.
    pub partition: i32,
    /// This cluster's id (asked by the source's LastMirroredEpochs).
    pub cluster_id: String,
    /// The source cluster's id (written into the MIRROR_PID_RESET barrier): the mirror's
    /// `mirror.source.cluster.id`, or what the source answered first; empty while unknown.
    pub source_cluster_id: Arc<std::sync::OnceLock<String>>,
}

/// The ports of one mirror partition.
pub struct EnginePartitionPorts<H: Host> {
    site: Arc<MirrorPartitionSite>,
    host: H,
    source: Arc<H::Source>,
    shard: ShardRoute<H>,
    fetchers: Addr<FetcherPool<H>>,
    destination_epochs: DestinationEpochs,
}

impl<H: Host> Clone for EnginePartitionPorts<H> {
    fn clone(&self) -> Self {
        EnginePartitionPorts {
            site: self.site.clone(),
            host: self.host.clone(),
            source: self.source.clone(),
            shard: self.shard.clone(),
            fetchers: self.fetchers.clone(),
            destination_epochs: self.destination_epochs.clone(),
        }
    }
}

impl<H: Host> std::fmt::Debug for EnginePartitionPorts<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnginePartitionPorts")
            .field("site", &self.site)
            .finish_non_exhaustive()
    }
}

impl<H: Host> EnginePartitionPorts<H> {
    /// Ports for the partition at `site`.
    pub fn new(
        site: MirrorPartitionSite,
        host: H,
        source: Arc<H::Source>,
        shard: ShardRoute<H>,
        fetchers: Addr<FetcherPool<H>>,
        destination_epochs: DestinationEpochs,
    ) -> Self {
        EnginePartitionPorts {
            site: Arc::new(site),
            host,
            source,
            shard,
            fetchers,
            destination_epochs,
        }
    }

    /// Runs `f` on the partition's log now (a log change of the state machine happens within
    /// one poll of its future).
    fn with_log<T>(
        &self,
        f: impl FnOnce(&mut dyn MirrorLog) -> Result<T, Cause>,
    ) -> Result<T, Cause> {
        self.host.with_log(&self.site.topic, self.site.partition, f)
    }

    fn read_request(&self) -> ReadMirrorStatesRequest {
        ReadMirrorStatesRequest {
            mirror_name: self.site.mirror.clone(),
            topics: vec![read_mirror_states_request::Topic {
                topic_id: self.site.topic_id,
                name: self.site.topic.clone(),
                partitions: vec![read_mirror_states_request::Partition {
                    partition_index: self.site.partition,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn write_request(&self, stored: &StoredState, lme: i32) -> WriteMirrorStatesRequest {
        WriteMirrorStatesRequest {
            mirror_name: self.site.mirror.clone(),
            topics: vec![write_mirror_states_request::Topic {
                topic_id: self.site.topic_id,
                name: self.site.topic.clone(),
                partitions: vec![write_mirror_states_request::Partition {
                    partition_index: self.site.partition,
                    leader_epoch: stored.leader_epoch,
                    state: stored.state.wire_value(),
                    previous_state: stored.previous.wire_value(),
                    retry_attempt: stored.retry_attempt,
                    error_message: stored.error.clone(),
                    last_mirror_epoch: lme,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// The stored state, as the shard holds it.
    async fn load(&self) -> Result<Option<StoredState>, Cause> {
        let answer = self.shard.read(self.read_request()).await?;
        let p = answer
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or_else(|| Cause::retryable("the coordinator shard answered nothing"))?;
        if p.error_code != 0 {
            return Err(Cause::retryable(format!(
                "reading the mirror state: error {}",
                p.error_code
            )));
        }
        let state = MirrorState::from_wire(p.state).unwrap_or(MirrorState::Unknown);
        Ok((state != MirrorState::Unknown).then(|| StoredState {
            state,
            previous: MirrorState::from_wire(p.previous_state).unwrap_or(MirrorState::Unknown),
            retry_attempt: p.retry_attempt,
            error: p.error_message.clone(),
            leader_epoch: p.leader_epoch,
        }))
    }

    async fn store(&self, stored: StoredState, lme: i32) -> Result<(), Cause> {
        let answer = self.shard.write(self.write_request(&stored, lme)).await?;
        match answer
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| p.error_code)
        {
            Some(0) => Ok(()),
            Some(code) if code == FENCED_LEADER_EPOCH => Err(Cause::fatal(
                "a newer leader wrote this partition's mirror state",
            )),
            Some(code) => Err(Cause::retryable(format!(
                "writing the mirror state: error {code}"
            ))),
            None => Err(Cause::retryable("the coordinator shard answered nothing")),
        }
    }

    /// The LME this cluster recorded for the partition when it last stopped (-1: none).
    async fn own_lme(&self) -> Result<i32, Cause> {
        let answer = self.shard.read(self.read_request()).await?;
        answer
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .filter(|p| p.error_code == 0)
            .map(|p| p.last_mirror_epoch)
            .ok_or_else(|| Cause::retryable("the coordinator shard answered no LME"))
    }

    /// The source must still have the topic this partition copies, with its id: a topic
    /// deleted (and perhaps created again) on the source is not the one the local log holds,
    /// and aligning with it would discard that log. Not retried: an operator decides.
    async fn check_source_topic(&self) -> Result<(), Cause> {
        let site = &self.site;
        super::source_topic::check_now(
            &*self.source,
            &site.source_cluster_id,
            &site.topic,
            site.topic_id,
            site.partition,
        )
        .await
    }

    /// The source partition's log start (its leader's earliest offset).
    async fn source_log_start(&self) -> Result<i64, Cause> {
        let metadata = self
            .source
            .metadata(Some(&[self.site.topic.as_str()]))
            .await
            .map_err(|e| cause(&e))?;
        let leader = metadata
            .topics
            .get(&self.site.topic)
            .and_then(|t| t.partitions.get(self.site.partition as usize))
            .map(|p| p.leader)
            .ok_or_else(|| Cause::fatal("the source topic or partition is gone"))?;
        let (offset, _) = self
            .source
            .list_offsets(
                leader,
                &self.site.topic,
                self.site.partition,
                EARLIEST,
                Isolation::ReadCommitted,
            )
            .await
            .map_err(|e| cause(&e))?;
        Ok(offset)
    }
}

impl<H: Host> PartitionPorts for EnginePartitionPorts<H> {
    fn load_state(&self) -> PortFuture<Result<Option<StoredState>, Cause>> {
        let ports = self.clone();
        Box::pin(async move { ports.load().await })
    }

    fn persist_state(&self, stored: StoredState) -> PortFuture<Result<(), Cause>> {
        let ports = self.clone();
        Box::pin(async move { ports.store(stored, -1).await })
    }

    fn look_up_lme(&self) -> PortFuture<Result<i32, Cause>> {
        let ports = self.clone();
        Box::pin(async move {
            let site = &ports.site;
            ports.check_source_topic().await?;
            let lmes = ports
                .source
                .last_mirrored_epochs(
                    &site.cluster_id,
                    &site.topic,
                    site.topic_id,
                    &[site.partition],
                )
                .await
                .map_err(|e| cause(&e))?;
            match lmes.first().copied().unwrap_or(-1) {
                // The source never mirrored from this cluster: a topic stopped here continues
                // from the LME this cluster recorded when it stopped, so only what it wrote
                // since goes (the operator confirmed that at StartMirrorTopics).
                -1 => ports.own_lme().await,
                lme => Ok(lme),
            }
        })
    }

    fn truncate_for_lme(&self, lme: i32) -> PortFuture<Result<(), Cause>> {
        let ports = self.clone();
        Box::pin(async move {
            let alignment = ports.with_log(|log| {
                Ok(epoch::alignment_for_lme(
                    lme,
                    &log.epoch_history(),
                    log.log_end_offset(),
                ))
            })?;
            let site = &ports.site;
            tracing::info!(mirror = %site.mirror, topic = %site.topic, partition = site.partition, last_mirrored_epoch = lme, ?alignment, "aligning the log to the last mirrored epoch");
            match alignment {
                Alignment::KeepAll => Ok(()),
                Alignment::TruncateTo(offset) => ports.with_log(|log| log.truncate_to(offset)),
                Alignment::TruncateFully => {
                    let start = ports.source_log_start().await?;
                    ports.with_log(|log| log.truncate_fully_and_start_at(start))
                }
            }
        })
    }

    fn await_isr(&self) -> PortFuture<()> {
        // One replica per partition: the leader's truncation is the ISR's.
        Box::pin(std::future::ready(()))
    }

    fn attach_fetcher(&self, progress: actix::Recipient<FetcherProgress>) {
        let fetchers = self.fetchers.clone();
        let key = (self.site.topic.clone(), self.site.partition);
        actix::spawn(async move {
            if let Err(e) = fetchers.send(Attach { key, progress }).await {
                tracing::error!(error = %e, "attaching a partition to its fetcher");
            }
        });
    }

    fn detach_fetcher(&self) -> PortFuture<()> {
        let fetchers = self.fetchers.clone();
        let key = (self.site.topic.clone(), self.site.partition);
        Box::pin(async move {
            // A pool that is gone (its mirror deleted) has no fetcher appending either.
            let _ = fetchers.send(Detach(key)).await;
        })
    }

    fn bump_leader_epoch(&self, min_leader_epoch: Option<i32>) -> PortFuture<Result<i32, Cause>> {
        let ports = self.clone();
        Box::pin(async move {
            let min = match min_leader_epoch {
                Some(min) => min,
                None => ports.with_log(|log| {
                    Ok(log.epoch_history().last().map_or(-1, |(epoch, _)| *epoch))
                })?,
            };
            let bumped = ports
                .host
                .bump_leader_epoch(&ports.site.topic, ports.site.partition, min)
                .await?
                .ok_or_else(|| Cause::fatal("the partition is gone"))?;
            raise_epoch(
                &ports.destination_epochs,
                (ports.site.topic.clone(), ports.site.partition),
                bumped,
            );
            Ok(bumped)
        })
    }

    fn truncate_to_lso(&self) -> PortFuture<Result<i32, Cause>> {
        let ports = self.clone();
        Box::pin(async move { ports.with_log(host::truncate_to_lso) })
    }

    fn persist_lme(&self, lme: i32) -> PortFuture<Result<(), Cause>> {
        let ports = self.clone();
        Box::pin(async move {
            let stored = ports
                .load()
                .await?
                .ok_or_else(|| Cause::retryable("no mirror state to add the LME to"))?;
            ports.store(stored, lme).await
        })
    }

    fn append_pid_reset(&self) -> PortFuture<Result<(), Cause>> {
        let ports = self.clone();
        Box::pin(async move {
            let epoch = ports
                .destination_epochs
                .get(&(ports.site.topic.clone(), ports.site.partition))
                .map(|e| *e)
                .ok_or_else(|| Cause::retryable("the partition is not led here"))?;
            let source = ports
                .site
                .source_cluster_id
                .get()
                .cloned()
                .unwrap_or_default();
            ports.with_log(|log| {
                if host::ends_with_barrier(log)? {
                    return Ok(());
                }
                log.append_pid_reset(epoch, &source)
            })?;
            // The barrier fences the source's producer ids for the writes STOPPED lets in: it
            // must be on disk before them.
            ports
                .host
                .make_durable(&ports.site.topic, ports.site.partition)
                .await
        })
    }

    fn set_read_only(&self, read_only: bool) {
        self.host
            .set_read_only(&self.site.topic, self.site.partition, read_only);
    }
}
