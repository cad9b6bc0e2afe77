//! VerifyMirrorTopics (kmirror's key 106): compares the partitions this broker leads of a
//! mirror's topics with the source, by their batches' offsets, sizes and CRCs, for at most the
//! request's time budget and rate (the engine's `verify`, docs/failover.md "Verifying a
//! mirror"). Needs DESCRIBE on the mirror. `kmirror mirrors --verify` sends each broker the
//! partitions it leads and asks again from where an answer stopped.

use super::access::Access;
use crate::acl::Operation;
use kmirror_actors::engine::Engine;
use kmirror_actors::engine::system::LoadMirror;
use kmirror_actors::engine::verify::{VerifyRange, VerifyTopic};
use kmirror_actors::policy::MirrorError;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::verify_mirror_topics_response as response;
use kmirror_protocol::messages::{VerifyMirrorTopicsRequest, VerifyMirrorTopicsResponse};
use std::time::Duration;

/// The longest time budget a request may ask for: a client's request timeout is 30 s.
const MAX_BUDGET_MS: i32 = 25_000;

pub(super) async fn verify(
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: VerifyMirrorTopicsRequest,
) -> VerifyMirrorTopicsResponse {
    let answer = async {
        let engine = engine.ok_or_else(MirrorError::engine_not_running)?;
        if !access.mirror(Operation::Describe, &request.mirror_name) {
            return Err(MirrorError::new(
                ErrorCode::CLUSTER_MIRROR_AUTHORIZATION_FAILED,
                "DESCRIBE on the mirror is needed",
            ));
        }
        if request.time_budget_ms <= 0 || request.rate_bytes_per_second == 0 {
            return Err(MirrorError::new(
                ErrorCode::INVALID_REQUEST,
                "TimeBudgetMs and RateBytesPerSecond must be positive (-1: no rate limit)",
            ));
        }
        engine.ask(LoadMirror(request.mirror_name.clone())).await?;
        let budget = Duration::from_millis(request.time_budget_ms.min(MAX_BUDGET_MS) as u64);
        // One budget for the whole request, over every topic.
        let deadline = tokio::time::Instant::now() + budget;
        let rate = u64::try_from(request.rate_bytes_per_second).ok();
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let ranges = topic
                .partitions
                .iter()
                .map(|p| VerifyRange {
                    partition: p.partition_index,
                    from: p.from_offset,
                    to: p.to_offset,
                })
                .collect();
            let asked = VerifyTopic {
                mirror: request.mirror_name.clone(),
                topic: topic.name.clone(),
                ranges,
                deadline,
                rate,
            };
            let partitions = match engine.ask(asked).await {
                Ok(verified) => verified
                    .into_iter()
                    .map(|v| match v.outcome {
                        // A side that failed after some progress: both are answered.
                        Ok(done) => response::Partition {
                            partition_index: v.partition,
                            error_code: done.error.as_ref().map_or(0, |e| e.code.0),
                            error_message: done.error.map(|e| e.message),
                            verified_from: done.from,
                            verified_to: done.to,
                            end_offset: done.end,
                            difference_offset: done.difference.as_ref().map_or(-1, |d| d.offset),
                            difference: done.difference.map(|d| d.reason),
                            batches: i64::try_from(done.batches).unwrap_or(i64::MAX),
                            bytes: i64::try_from(done.bytes).unwrap_or(i64::MAX),
                            ..Default::default()
                        },
                        Err(e) => failed(v.partition, &e),
                    })
                    .collect(),
                Err(e) => topic
                    .partitions
                    .iter()
                    .map(|p| failed(p.partition_index, &e))
                    .collect(),
            };
            topics.push(response::Topic {
                name: topic.name,
                partitions,
                ..Default::default()
            });
        }
        Ok(VerifyMirrorTopicsResponse {
            topics,
            ..Default::default()
        })
    };
    answer
        .await
        .unwrap_or_else(|e: MirrorError| VerifyMirrorTopicsResponse {
            error_code: e.code.0,
            error_message: Some(e.message),
            ..Default::default()
        })
}

/// A partition that could not be verified.
fn failed(partition: i32, e: &MirrorError) -> response::Partition {
    response::Partition {
        partition_index: partition,
        error_code: e.code.0,
        error_message: Some(e.message.clone()),
        ..Default::default()
    }
}
