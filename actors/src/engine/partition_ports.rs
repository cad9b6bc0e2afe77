//! A mirror partition actor's ports over the host: its coordinator shard (`__mirror_state`),
//! its fetcher, the host's controller and partition log, and the source cluster.
//!
//! The partition's shard is an actor here or another broker of the cluster (see
//! [`ShardRoute`]); reads and writes go to it as ReadMirrorStates / WriteMirrorStates.
//! Writing the LME rewrites the partition's stored state with the LME added, as one record.

use super::cause;
use super::coalescing_source::CoalescingSource;
use super::fetcher_pool::{Attach, Detach, FetcherPool};
use super::shard_route::ShardRoute;
use super::stats::MirrorStats;
use crate::actor::{
    FetchEpochs, FetcherProgress, PartitionPorts, PortFuture, RaiseDestinationEpoch,
};
use crate::coordinator::{PartitionKey, StateRead, StateWrite};
use crate::epoch::{self, Alignment};
use crate::host::{self, Host, MirrorLog, Source, TopicPartition};
use crate::metadata::{DISCARD_CONFIRMED, STOP_CUT_TIMESTAMP, confirmed_log_ends};
use crate::partition::{Cause, StoredState};
use actix::Addr;
use kmirror_protocol::client::Isolation;
use kmirror_protocol::client::source::{EARLIEST, lme_unanswered};
use std::sync::Arc;
use uuid::Uuid;

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
    source: Arc<CoalescingSource<H::Source>>,
    shard: ShardRoute<H>,
    fetchers: Addr<FetcherPool<H>>,
    stats: Arc<MirrorStats>,
}

impl<H: Host> Clone for EnginePartitionPorts<H> {
    fn clone(&self) -> Self {
        EnginePartitionPorts {
            site: self.site.clone(),
            host: self.host.clone(),
            source: self.source.clone(),
            shard: self.shard.clone(),
            fetchers: self.fetchers.clone(),
            stats: self.stats.clone(),
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
    /// Ports for the partition at `site`; its truncations count in `stats`.
    pub fn new(
        site: MirrorPartitionSite,
        host: H,
        source: Arc<CoalescingSource<H::Source>>,
        shard: ShardRoute<H>,
        fetchers: Addr<FetcherPool<H>>,
        stats: Arc<MirrorStats>,
    ) -> Self {
        EnginePartitionPorts {
            site: Arc::new(site),
            host,
            source,
            shard,
            fetchers,
            stats,
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

    fn topic_partition(&self) -> TopicPartition {
        TopicPartition::new(self.site.topic.clone(), self.site.partition)
    }

    fn key(&self) -> PartitionKey {
        PartitionKey {
            mirror: self.site.mirror.clone(),
            topic_id: self.site.topic_id,
            partition: self.site.partition,
        }
    }

    /// PREPARING's guard (docs/failover.md "Restarting a stopped topic"): cutting the log at
    /// `cut` may remove records this cluster's producers wrote since the failover only if the
    /// restart counted them and the operator confirmed that count, i.e. the topic's
    /// [`DISCARD_CONFIRMED`] names this partition at the log end it still has (`confirmed`,
    /// [`Self::discard_confirmed`], read before the lease: a host may hold its metadata lock for
    /// the lease). The log end is checked under the same lease as the cut; anything else is
    /// refused for good, the records kept.
    fn check_discard_confirmed(
        log: &dyn MirrorLog,
        cut: i64,
        confirmed: Option<i64>,
    ) -> Result<(), Cause> {
        let local = host::local_records_from(log, cut)?;
        if local == 0 {
            return Ok(());
        }
        let end = log.log_end_offset();
        if confirmed == Some(end) {
            return Ok(());
        }
        let counted = confirmed.map_or_else(
            || "the start counted none here".to_string(),
            |at| format!("the start counted them at log end {at}, it is {end} now"),
        );
        Err(Cause::fatal(format!(
            "restarting the mirror would discard {local} records written on this cluster since \
             the failover that the operator did not confirm ({counted}); they are kept. Stop \
             the topic to write to it again, or start it again to count them"
        )))
    }

    /// The point in time of a consistent stop of the topic ([`STOP_CUT_TIMESTAMP`]), if it was
    /// stopped so.
    fn stop_cut_timestamp(&self) -> Option<i64> {
        self.host
            .topic(&self.site.topic)
            .and_then(|t| t.configs.get(STOP_CUT_TIMESTAMP)?.parse().ok())
    }

    /// The log end offset the topic's [`DISCARD_CONFIRMED`] confirms for this partition.
    fn discard_confirmed(&self) -> Option<i64> {
        let site = &self.site;
        self.host
            .topic(&site.topic)
            .and_then(|t| t.configs.get(DISCARD_CONFIRMED).cloned())
            .and_then(|v| confirmed_log_ends(&v).get(&site.partition).copied())
    }

    /// The partition's record in its shard.
    async fn read(&self) -> Result<StateRead, Cause> {
        self.shard
            .read_state(self.key(), &self.site.topic)
            .await?
            .map_err(|code| Cause::retryable(format!("reading the mirror state: {code}")))
    }

    /// The stored state, as the shard holds it.
    async fn load(&self) -> Result<Option<StoredState>, Cause> {
        Ok(self.read().await?.stored)
    }

    async fn store(&self, stored: StoredState, lme: Option<i32>) -> Result<(), Cause> {
        let write = StateWrite {
            topic: self.site.topic.clone(),
            topic_id: self.site.topic_id,
            partition: self.site.partition,
            stored,
            lme,
        };
        self.shard.write_state(&self.site.mirror, write).await
    }

    /// The LME this cluster recorded for the partition when it last stopped (-1: none, as
    /// LastMirroredEpochs answers and PREPARING takes it).
    async fn own_lme(&self) -> Result<i32, Cause> {
        Ok(self.read().await?.lme.unwrap_or(-1))
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

    /// The source partition's log start (its leader's earliest offset), of the topic this
    /// partition copies: ListOffsets names the topic, so its id is checked on the same metadata
    /// (a topic deleted and created again fails as [`super::source_topic::check_now`] says).
    async fn source_log_start(&self) -> Result<i64, Cause> {
        let site = &self.site;
        let metadata = self
            .source
            .metadata(Some(&[site.topic.as_str()]))
            .await
            .map_err(|e| cause(&e))?;
        let (expected, topic, id, partition) = (
            &site.source_cluster_id,
            site.topic.as_str(),
            site.topic_id,
            site.partition,
        );
        let first = super::source_topic::check(&metadata, expected, topic, id, partition);
        super::source_topic::confirm(first, &*self.source, expected, topic, id, partition).await?;
        let leader = metadata
            .topics
            .get(&site.topic)
            .and_then(|t| t.partitions.get(site.partition as usize))
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
        Box::pin(async move { ports.store(stored, None).await })
    }

    fn look_up_lme(&self) -> PortFuture<Result<i32, Cause>> {
        let ports = self.clone();
        Box::pin(async move {
            let site = &ports.site;
            ports.check_source_topic().await?;
            let lme = ports
                .source
                .last_mirrored_epochs(
                    &site.cluster_id,
                    &site.topic,
                    site.topic_id,
                    &[site.partition],
                )
                .await
                .and_then(|lmes| {
                    lmes.into_iter()
                        .next()
                        .unwrap_or_else(|| Err(lme_unanswered(&site.topic, site.partition)))
                })
                .map_err(|e| cause(&e))?;
            match lme {
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
            let confirmed = ports.discard_confirmed();
            let removed = match alignment {
                Alignment::KeepAll => 0,
                Alignment::TruncateTo(offset) => ports.with_log(|log| {
                    Self::check_discard_confirmed(log, offset, confirmed)?;
                    let removed = host::records_from(log, offset)?;
                    log.truncate_to(offset)?;
                    Ok(removed)
                })?,
                Alignment::TruncateFully => {
                    let start = ports.source_log_start().await?;
                    ports.with_log(|log| {
                        let from = log.log_start_offset();
                        Self::check_discard_confirmed(log, from, confirmed)?;
                        let removed = host::records_from(log, from)?;
                        log.truncate_fully_and_start_at(start)?;
                        Ok(removed)
                    })?
                }
            };
            if removed > 0 {
                tracing::warn!(mirror = %site.mirror, topic = %site.topic, partition = site.partition, records = removed, "truncated to the last mirrored epoch: records this cluster held past it are gone");
                ports
                    .stats
                    .truncated_at_start(&ports.topic_partition(), removed);
            }
            Ok(())
        })
    }

    fn await_isr(&self) -> PortFuture<()> {
        // One replica per partition: the leader's truncation is the ISR's.
        Box::pin(std::future::ready(()))
    }

    // Attach and raise go straight into the pool's mailbox, so they reach it in the order the
    // state machine issued them (a raise never overtakes its attach).
    fn attach_fetcher(&self, progress: actix::Recipient<FetcherProgress>, leader_epoch: i32) {
        if !self.fetchers.connected() {
            tracing::error!(topic = %self.site.topic, partition = self.site.partition, "attaching a partition to its fetcher: the mirror's fetcher pool is gone");
            return;
        }
        self.fetchers.do_send(Attach {
            key: self.topic_partition(),
            progress,
            epochs: FetchEpochs {
                topic_id: self.site.topic_id,
                source: -1,
                destination: leader_epoch,
            },
        });
    }

    fn raise_fetcher_epoch(&self, leader_epoch: i32) {
        self.fetchers.do_send(RaiseDestinationEpoch {
            key: self.topic_partition(),
            leader_epoch,
        });
    }

    fn detach_fetcher(&self) -> PortFuture<()> {
        let (done, detached) = tokio::sync::oneshot::channel();
        // In the pool's mailbox at once, behind this partition's attach and raises.
        self.fetchers.do_send(Detach {
            key: self.topic_partition(),
            topic_id: self.site.topic_id,
            done,
        });
        Box::pin(async move {
            // A pool that is gone (its mirror deleted) has no fetcher appending either.
            let _ = detached.await;
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
                .await
                .map_err(Cause::from)?
                .ok_or_else(|| Cause::fatal("the partition is gone"))?;
            Ok(bumped)
        })
    }

    fn truncate_to_lso(&self) -> PortFuture<Result<Option<i32>, Cause>> {
        let ports = self.clone();
        Box::pin(async move {
            // The in-sync replicas first hold everything mirrored (the high watermark at the log
            // end), so the cut is at the source's last stable offset, never at a follower's lag
            // (docs/replication.md §6); an error (leadership lost, replicas too slow) retries.
            ports
                .host
                .make_durable(&ports.site.topic, ports.site.partition)
                .await
                .map_err(Cause::from)?;
            let cluster_id = ports.site.cluster_id.clone();
            let cut_ms = ports.stop_cut_timestamp();
            let (lme, removed) =
                ports.with_log(|log| host::truncate_to_lso(log, &cluster_id, cut_ms))?;
            if removed > 0 {
                let site = &ports.site;
                tracing::warn!(mirror = %site.mirror, topic = %site.topic, partition = site.partition, records = removed, "stopping: truncated to the last stable offset (records of transactions still open on the source at the stop are gone)");
                ports
                    .stats
                    .truncated_at_stop(&ports.topic_partition(), removed);
            }
            Ok(lme)
        })
    }

    fn persist_lme(&self, lme: Option<i32>) -> PortFuture<Result<(), Cause>> {
        let ports = self.clone();
        Box::pin(async move {
            let stored = ports
                .load()
                .await?
                .ok_or_else(|| Cause::retryable("no mirror state to add the LME to"))?;
            ports.store(stored, lme).await
        })
    }

    fn append_pid_reset(&self, leader_epoch: i32) -> PortFuture<Result<(), Cause>> {
        let ports = self.clone();
        Box::pin(async move {
            let source = ports
                .site
                .source_cluster_id
                .get()
                .cloned()
                .unwrap_or_default();
            let cluster_id = &ports.site.cluster_id;
            ports.with_log(|log| {
                // A STOPPING run again after its barrier (the partition took writes since)
                // appends no second one: the log stays the source's up to exactly one barrier.
                if host::own_failover_barrier(log, cluster_id)?.is_some() {
                    return Ok(());
                }
                Ok(log.append_pid_reset(leader_epoch, &source)?)
            })?;
            // The barrier fences the source's producer ids for the writes STOPPED lets in: it
            // must be on disk before them.
            ports
                .host
                .make_durable(&ports.site.topic, ports.site.partition)
                .await
                .map_err(Cause::from)
        })
    }

    fn set_read_only(&self, read_only: bool) {
        self.host
            .set_read_only(&self.site.topic, self.site.partition, read_only);
    }
}
