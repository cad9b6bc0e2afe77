//! Verifying a mirror against its source (`kmirror mirrors --verify`, docs/failover.md
//! "Verifying a mirror"): per partition this broker leads, the source's and the destination's
//! batches over a range of offsets are compared by their offsets, sizes and CRCs, with no
//! payload decoded. A mirror partition holds the source's batches byte for byte at the same
//! offsets, so any difference is a fault: a destination batch whose bytes no longer match its
//! own CRC (corrupt on disk), batches that begin or end at other offsets, or another CRC (the
//! histories diverged, as after a failover the destination took writes).
//!
//! It runs beside mirroring, bounded: one partition at a time, at most [`CHUNK_BYTES`] of
//! each side in memory, at most `rate` bytes per second of the source, and until the request's
//! deadline (one budget over all its topics), after which it answers how far it got; the caller asks again from
//! there. It fetches through a client of its own (its own connections and fetch session), so
//! the mirror's fetchers and control requests do not wait behind it.
//!
//! The range ends at the destination's log end when the request arrived: what the mirror has
//! not copied yet is not compared. Destination offsets beyond the source's high watermark are
//! a difference (the destination holds records the source does not). The last result per
//! partition is published as metrics.

use super::mirror::Mirror;
use crate::host::{Host, Source, TopicPartition};
use crate::metadata::{MIRROR_NAME, mirror_of};
use crate::policy::MirrorError;
use actix::{Context, Handler, Message, ResponseFuture};
use kmirror_protocol::batch::{RecordBatch, RecordBatches};
use kmirror_protocol::client::source::EARLIEST;
use kmirror_protocol::client::{FetchPartitionSpec, FetchSpec, Isolation};
use kmirror_protocol::errors::ErrorCode;
use std::time::Duration;

/// The most bytes of each side read per step.
pub const CHUNK_BYTES: i32 = 1 << 20;

/// One partition's range to verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyRange {
    /// The partition.
    pub partition: i32,
    /// The first offset (-1: the destination's log start).
    pub from: i64,
    /// The end, exclusive (-1: the destination's log end).
    pub to: i64,
}

/// Verify some partitions of a topic of a mirror on this broker.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<Vec<PartitionVerified>, MirrorError>")]
pub struct VerifyTopic {
    /// The mirror.
    pub mirror: String,
    /// The topic.
    pub topic: String,
    /// The partitions and their ranges.
    pub ranges: Vec<VerifyRange>,
    /// When this verification must answer (the request's budget, over all its topics).
    pub deadline: tokio::time::Instant,
    /// The most source bytes per second (`None`: unlimited).
    pub rate: Option<u64>,
}

/// A difference between the two sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The first offset that differs.
    pub offset: i64,
    /// How.
    pub reason: String,
}

/// How far a partition was verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The first offset compared.
    pub from: i64,
    /// Everything below this was compared (equal, unless `difference`).
    pub to: i64,
    /// Where the range ends: `to` equals it once done.
    pub end: i64,
    /// The first difference, which ends the verification.
    pub difference: Option<Difference>,
    /// Batches and bytes compared.
    pub batches: u64,
    pub bytes: u64,
    /// Why it stopped before the end, when a side could not be read after some progress
    /// (the progress stands).
    pub error: Option<MirrorError>,
}

/// One partition's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionVerified {
    /// The partition.
    pub partition: i32,
    /// How far it got, or why it could not.
    pub outcome: Result<Verified, MirrorError>,
}

/// What is compared of a batch: never its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchView {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The CRC the batch carries.
    pub crc: u32,
    /// Whether its bytes match that CRC.
    pub intact: bool,
    pub size: usize,
}

impl BatchView {
    /// The view of `batch`, its CRC computed over its bytes.
    pub fn of(batch: &RecordBatch) -> BatchView {
        BatchView {
            base_offset: batch.base_offset(),
            last_offset: batch.last_offset(),
            crc: batch.crc(),
            intact: batch.compute_crc() == batch.crc(),
            size: batch.as_bytes().len(),
        }
    }
}

/// What one comparison step found: the batches equal below `next`, and the difference that
/// ended it, if one did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub next: i64,
    pub batches: u64,
    pub bytes: u64,
    pub difference: Option<Difference>,
}

/// Compares the source's batches with the destination's from offset `at` (batches ending
/// below it are skipped on both sides), as far as both sides go or up to the first difference.
pub fn compare(at: i64, source: &[BatchView], destination: &[BatchView]) -> Step {
    let mut step = Step {
        next: at,
        batches: 0,
        bytes: 0,
        difference: None,
    };
    let mut dest = destination.iter().filter(|d| d.last_offset >= at);
    for s in source.iter().filter(|s| s.last_offset >= at) {
        let Some(d) = dest.next() else {
            break;
        };
        if let Some(difference) = differ(s, d) {
            step.difference = Some(difference);
            break;
        }
        step.next = s.last_offset + 1;
        step.batches += 1;
        step.bytes += s.size as u64;
    }
    step
}

/// How the destination's batch `d` differs from the source's `s` at the same place, if it does.
fn differ(s: &BatchView, d: &BatchView) -> Option<Difference> {
    let differs = |offset: i64, reason: String| Some(Difference { offset, reason });
    if !s.intact {
        return differs(
            s.base_offset,
            format!(
                "the source's batch at {} does not match its CRC",
                s.base_offset
            ),
        );
    }
    if !d.intact {
        return differs(
            d.base_offset,
            format!(
                "the destination's batch at {} is corrupt: its bytes do not match its CRC \
                 {:#010x}",
                d.base_offset, d.crc
            ),
        );
    }
    if (d.base_offset, d.last_offset) != (s.base_offset, s.last_offset) {
        return differs(
            s.base_offset.min(d.base_offset),
            format!(
                "the batches differ in their offsets: the source's holds {} to {}, the \
                 destination's {} to {}",
                s.base_offset, s.last_offset, d.base_offset, d.last_offset
            ),
        );
    }
    if d.crc != s.crc || d.size != s.size {
        return differs(
            s.base_offset,
            format!(
                "the batches at {} differ: CRC {:#010x} and {} bytes at the source, {:#010x} \
                 and {} bytes here",
                s.base_offset, s.crc, s.size, d.crc, d.size
            ),
        );
    }
    None
}

impl<H: Host> Handler<VerifyTopic> for Mirror<H> {
    type Result = ResponseFuture<Result<Vec<PartitionVerified>, MirrorError>>;

    fn handle(&mut self, msg: VerifyTopic, _: &mut Context<Self>) -> Self::Result {
        let host = self.host.clone();
        let stats = self.stats.clone();
        let client = super::mirror_configs::validate(
            &self.configs,
            self.host.settings().num_replica_fetchers,
        )
        .map(|settings| settings.client)
        .map_err(|e| MirrorError::new(ErrorCode::INVALID_CONFIG, e.to_string()));
        Box::pin(async move {
            let source = host
                .connect_source(client?)
                .map_err(|e| MirrorError::new(ErrorCode::NETWORK_EXCEPTION, e.to_string()))?;
            let topic = host.topic(&msg.topic).filter(|t| {
                t.configs
                    .get(MIRROR_NAME)
                    .and_then(|v| mirror_of(v))
                    .is_some_and(|(m, _)| m == msg.mirror)
            });
            let Some(topic) = topic else {
                return Err(MirrorError::new(
                    ErrorCode::TOPIC_NOT_IN_CLUSTER_MIRROR,
                    format!("{} is not a topic of mirror {}", msg.topic, msg.mirror),
                ));
            };
            let metadata = source
                .metadata(Some(&[msg.topic.as_str()]))
                .await
                .map_err(source_error)?;
            let source_topic = metadata
                .topics
                .get(&msg.topic)
                .filter(|t| t.topic_id.is_nil() || t.topic_id == topic.topic_id)
                .ok_or_else(|| {
                    MirrorError::new(
                        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                        format!(
                            "the source has no topic {} of this topic's id (deleted, or created \
                             again)",
                            msg.topic
                        ),
                    )
                })?
                .clone();
            let deadline = msg.deadline;
            let mut out = Vec::with_capacity(msg.ranges.len());
            for range in msg.ranges {
                let leads = topic
                    .partitions
                    .get(range.partition as usize)
                    .is_some_and(|p| host.leads(p));
                let leader = source_topic
                    .partitions
                    .get(range.partition as usize)
                    .map(|p| p.leader);
                let outcome = match (leads, leader) {
                    (false, _) => Err(MirrorError::new(
                        ErrorCode::NOT_LEADER_OR_FOLLOWER,
                        "this broker does not lead the partition",
                    )),
                    (true, None) => Err(MirrorError::new(
                        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                        "the source topic has no such partition",
                    )),
                    (true, Some(leader)) => {
                        let partition = SourcePartition {
                            topic: &msg.topic,
                            topic_id: topic.topic_id,
                            partition: range.partition,
                            leader,
                        };
                        verify_partition(&host, &source, partition, range, deadline, msg.rate).await
                    }
                };
                if let Some(verified) = outcome.as_ref().ok().filter(|v| v.end >= 0) {
                    stats.verified(
                        &TopicPartition::new(msg.topic.clone(), range.partition),
                        verified,
                        host.now_ms(),
                    );
                }
                out.push(PartitionVerified {
                    partition: range.partition,
                    outcome,
                });
            }
            Ok(out)
        })
    }
}

/// A failure to ask the source, as the verification's answer: the broker's own code when it
/// answered with one, NETWORK_EXCEPTION otherwise.
fn source_error(e: kmirror_protocol::client::ClientError) -> MirrorError {
    let code = match &e {
        kmirror_protocol::client::ClientError::Broker { code, .. } => *code,
        _ => ErrorCode::NETWORK_EXCEPTION,
    };
    MirrorError::new(code, format!("the source: {e}"))
}

/// The source partition a verification reads.
struct SourcePartition<'a> {
    topic: &'a str,
    topic_id: uuid::Uuid,
    partition: i32,
    leader: i32,
}

/// Verifies one partition's `range` until `deadline`, at most `rate` source bytes a second.
async fn verify_partition<H: Host>(
    host: &H,
    source: &H::Source,
    p: SourcePartition<'_>,
    range: VerifyRange,
    deadline: tokio::time::Instant,
    rate: Option<u64>,
) -> Result<Verified, MirrorError> {
    let (start, end) = host
        .with_log(p.topic, p.partition, |log| {
            Ok::<_, crate::host::HostError>((log.log_start_offset(), log.log_end_offset()))
        })
        .map_err(|e| MirrorError::new(e.code, e.message))?;
    let end = if range.to < 0 { end } else { range.to.min(end) };
    if tokio::time::Instant::now() >= deadline {
        // The budget went to the partitions before it: nothing compared, nothing known.
        return Ok(Verified {
            from: -1,
            to: -1,
            end: -1,
            difference: None,
            batches: 0,
            bytes: 0,
            error: None,
        });
    }
    let (source_start, _) = source
        .list_offsets(
            p.leader,
            p.topic,
            p.partition,
            EARLIEST,
            Isolation::ReadUncommitted,
        )
        .await
        .map_err(source_error)?;
    // Offsets one side no longer has (retention, DeleteRecords) cannot be compared.
    let from = range.from.max(start).max(source_start);
    let mut verified = Verified {
        from,
        to: from,
        end,
        difference: None,
        batches: 0,
        bytes: 0,
        error: None,
    };
    let began = tokio::time::Instant::now();
    let mut high_watermark = -1;
    while verified.to < end && tokio::time::Instant::now() < deadline {
        let at = verified.to;
        let source_views =
            match source_chunk(source, &p, (at, end, source_start), &mut high_watermark).await {
                Ok(views) => views,
                Err(e) => {
                    verified.error = Some(e);
                    break;
                }
            };
        if source_views.iter().all(|s| s.last_offset < at) {
            // The source has nothing at `at`, which the destination holds.
            verified.difference = Some(Difference {
                offset: at,
                reason: format!(
                    "the destination holds offsets from {at} on that the source does not have \
                     (its high watermark is {high_watermark})"
                ),
            });
            break;
        }
        let upto = source_views.last().map_or(at, |s| s.last_offset + 1);
        let destination_views = host
            .spawn_with_log(p.topic, p.partition, move |log| {
                let mut views = Vec::new();
                log.find_batch(at, &mut |batch| {
                    if batch.base_offset() >= upto {
                        return true;
                    }
                    views.push(BatchView::of(batch));
                    false
                })?;
                Ok::<_, crate::host::HostError>(views)
            })
            .await;
        let destination_views = match destination_views {
            Ok(views) => views,
            Err(e) => {
                verified.error = Some(MirrorError::new(e.code, e.message));
                break;
            }
        };
        let step = compare(at, &source_views, &destination_views);
        verified.to = step.next.min(end);
        verified.batches += step.batches;
        verified.bytes += step.bytes;
        if let Some(difference) = step.difference {
            verified.difference = Some(difference);
            break;
        }
        if step.next == at {
            // Neither side moved: the destination has a hole where the source has batches.
            verified.difference = Some(Difference {
                offset: at,
                reason: format!("the destination has no batch at {at}, which the source has"),
            });
            break;
        }
        if let Some(rate) = rate.filter(|r| *r > 0) {
            // Paced, but never past the request's budget: the caller asks again.
            let due = began + Duration::from_secs_f64(verified.bytes as f64 / rate as f64);
            tokio::time::sleep_until(due.min(deadline)).await;
        }
    }
    Ok(verified)
}

/// The source's batches from `at` (those starting before `end`), by one fetch without waiting;
/// `high_watermark` is kept up to date. A partition the answer leaves out (a fetch session
/// leaves out partitions with nothing new) has nothing at `at`.
async fn source_chunk<S: Source>(
    source: &S,
    p: &SourcePartition<'_>,
    (at, end, source_start): (i64, i64, i64),
    high_watermark: &mut i64,
) -> Result<Vec<BatchView>, MirrorError> {
    let spec = FetchSpec {
        partitions: vec![FetchPartitionSpec {
            topic: p.topic.to_string(),
            topic_id: p.topic_id,
            partition: p.partition,
            offset: at,
            current_leader_epoch: -1,
            last_fetched_epoch: -1,
            max_bytes: CHUNK_BYTES,
        }],
        isolation: Isolation::ReadUncommitted,
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes: CHUNK_BYTES,
    };
    let answer = source.fetch(p.leader, &spec).await.map_err(source_error)?;
    let Some(fetched) = answer.into_iter().find(|a| a.partition == p.partition) else {
        return Ok(Vec::new());
    };
    // Past the source's end (a failed-over topic that took writes here): nothing there.
    if fetched.error == ErrorCode::OFFSET_OUT_OF_RANGE && at >= source_start {
        return Ok(Vec::new());
    }
    if fetched.error != ErrorCode::NONE {
        return Err(MirrorError::new(
            fetched.error,
            format!(
                "the source answered a fetch at {at} with {}",
                fetched.error.name()
            ),
        ));
    }
    *high_watermark = fetched.high_watermark;
    Ok(RecordBatches::new(fetched.records)
        .map_while(Result::ok)
        .filter(|b| b.base_offset() < end)
        .map(|b| BatchView::of(&b))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(base: i64, last: i64, crc: u32) -> BatchView {
        BatchView {
            base_offset: base,
            last_offset: last,
            crc,
            intact: true,
            size: 100,
        }
    }

    #[test]
    fn equal_batches_verify_and_the_first_difference_is_named() {
        let source = [view(0, 4, 1), view(5, 9, 2), view(10, 14, 3)];
        let equal = |next, batches| Step {
            next,
            batches,
            bytes: batches * 100,
            difference: None,
        };
        assert_eq!(compare(0, &source, &source), equal(15, 3));
        // From inside a batch, the batch holding the offset is compared.
        assert_eq!(compare(7, &source, &source[1..]), equal(15, 2));
        // The destination ends first: verified as far as it goes.
        assert_eq!(compare(0, &source, &source[..1]), equal(5, 1));
        // A difference ends the step; what was equal before it counts.
        let other_crc = [view(0, 4, 1), view(5, 9, 7)];
        let step = compare(0, &source, &other_crc);
        assert_eq!((step.next, step.batches), (5, 1));
        assert_eq!(step.difference.map(|d| d.offset), Some(5));
        let mut corrupt = other_crc;
        corrupt[1] = BatchView {
            intact: false,
            ..view(5, 9, 2)
        };
        let d = compare(0, &source, &corrupt)
            .difference
            .expect("a difference");
        assert_eq!(d.offset, 5);
        assert!(d.reason.contains("corrupt"), "{}", d.reason);
        let split = [view(0, 4, 1), view(5, 6, 2)];
        let d = compare(0, &source, &split)
            .difference
            .expect("a difference");
        assert_eq!(d.offset, 5);
    }
}
