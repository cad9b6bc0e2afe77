//! `kmirror mirrors --verify --mirror M [--topics ...] [--from-offset N | --last N] [--rate MB]`:
//! proof that a mirror holds the source's records (docs/failover.md, "Verifying a mirror").
//! Each broker is sent VerifyMirrorTopics for the partitions it leads and compares them with
//! the source by their batches' offsets, sizes and CRCs, beside mirroring; an answer says how far
//! it got within its time budget and the command asks again from there, the range's end fixed
//! by the first answer (the destination's log end then), until every partition is done or
//! differs. A retriable error (the broker's connection to the source broke, say across a lossy
//! WAN) is asked again after a pause, up to [`MAX_RETRIES`] times per partition. It prints per
//! partition the range verified and the first differing offset, and exits 1 when a partition
//! differs or could not be verified.

use super::failure::{Failure, refused};
use super::topics::{TopicSelection, mirror_topics_matching};
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::client::source::LATEST;
use kmirror_protocol::client::{ClientConfig, Isolation, SourceClient};
use kmirror_protocol::errors::{ErrorClass, ErrorCode};
use kmirror_protocol::messages::verify_mirror_topics_request as request;
use kmirror_protocol::messages::{VerifyMirrorTopicsRequest, VerifyMirrorTopicsResponse};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// How long one broker may verify per request.
const BUDGET_MS: i32 = 10_000;

/// Where each partition's range starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// The destination's log start (or the source's, if later).
    Beginning,
    /// `--from-offset N`.
    Offset(i64),
    /// `--last N`: the last N offsets of the destination.
    Last(i64),
}

/// What `--verify` was asked.
#[derive(Debug, Clone)]
pub(crate) struct Verify {
    pub(crate) mirror: String,
    /// `None`: every topic of the mirror.
    pub(crate) topics: Option<TopicSelection>,
    pub(crate) start: Start,
    /// The most source bytes per second each broker reads (`None`: unlimited).
    pub(crate) rate: Option<i64>,
    pub(crate) json: bool,
}

/// One partition's verification as it goes.
#[derive(Debug, Clone, Default)]
struct Progress {
    leader: i32,
    from: i64,
    /// The next offset to compare.
    at: i64,
    /// The range's end (-1 until the first answer).
    end: i64,
    batches: i64,
    bytes: i64,
    difference: Option<(i64, String)>,
    error: Option<String>,
    /// Offsets of the range not compared: one side deleted them while it ran.
    not_compared: i64,
    /// Retriable errors answered so far.
    retries: u32,
    done: bool,
}

/// Retriable errors a partition may be answered before it is reported as not verified.
const MAX_RETRIES: u32 = 5;
/// The pause before asking again after a retriable error.
const RETRY_BACKOFF: Duration = Duration::from_millis(500);

/// Answers in a row from a broker that compare nothing before its partitions are reported as
/// stuck.
const MAX_STALLS: u32 = 3;

/// Runs `--verify` against the cluster at `bootstrap`.
pub(crate) async fn run(
    bootstrap: &str,
    connection: &Connection,
    verify: Verify,
) -> Result<(), Failure> {
    let unreachable =
        |e: kmirror_protocol::client::ClientError| Failure::Unreachable(e.to_string());
    let pattern = match &verify.topics {
        None => ".*".to_string(),
        Some(TopicSelection::Pattern(p)) => p.clone(),
        Some(TopicSelection::Names(_)) => String::new(),
    };
    let topics = match &verify.topics {
        Some(TopicSelection::Names(names)) => names.clone(),
        _ => mirror_topics_matching(connection, &verify.mirror, &pattern).await?,
    };
    let cluster = SourceClient::connect(ClientConfig::plaintext(bootstrap))
        .await
        .map_err(unreachable)?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let metadata = cluster.metadata(Some(&names)).await.map_err(unreachable)?;
    let mut progress: BTreeMap<(String, i32), Progress> = BTreeMap::new();
    for topic in &topics {
        let Some(t) = metadata.topics.get(topic) else {
            return Err(refused(
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0,
                Some(format!("no topic {topic} on the destination")),
            ));
        };
        for p in &t.partitions {
            let from = match verify.start {
                Start::Beginning => -1,
                Start::Offset(n) => n,
                Start::Last(n) => {
                    let (end, _) = cluster
                        .list_offsets(
                            p.leader,
                            topic,
                            p.partition,
                            LATEST,
                            Isolation::ReadUncommitted,
                        )
                        .await
                        .map_err(unreachable)?;
                    (end - n).max(0)
                }
            };
            progress.insert(
                (topic.clone(), p.partition),
                Progress {
                    leader: p.leader,
                    from,
                    at: from,
                    end: -1,
                    ..Progress::default()
                },
            );
        }
    }
    let began = Instant::now();
    let mut stalls: BTreeMap<i32, u32> = BTreeMap::new();
    while progress.values().any(|p| !p.done) {
        let leaders: Vec<i32> = {
            let mut l: Vec<i32> = progress
                .values()
                .filter(|p| !p.done)
                .map(|p| p.leader)
                .collect();
            l.sort_unstable();
            l.dedup();
            l
        };
        for leader in leaders {
            let Some(address) = metadata.brokers.get(&leader) else {
                for p in progress
                    .values_mut()
                    .filter(|p| !p.done && p.leader == leader)
                {
                    p.error = Some(format!("its leader (broker {leader}) is not known"));
                    p.done = true;
                }
                continue;
            };
            let asked = request_for(&verify, leader, &progress);
            let answer = match send(address, &asked).await {
                Ok(answer) => answer,
                Err(e) => {
                    for p in progress
                        .values_mut()
                        .filter(|p| !p.done && p.leader == leader)
                    {
                        p.error = Some(format!("broker {address} did not answer: {e}"));
                        p.done = true;
                    }
                    continue;
                }
            };
            if answer.error_code != 0 {
                return Err(refused(answer.error_code, answer.error_message));
            }
            if take(&mut progress, answer) {
                stalls.remove(&leader);
                let retrying = progress
                    .values()
                    .any(|p| !p.done && p.leader == leader && p.error.is_some());
                if retrying {
                    tokio::time::sleep(RETRY_BACKOFF).await;
                }
                continue;
            }
            // Nothing compared in a whole budget: tried again a few times, then reported.
            let n = stalls.entry(leader).or_insert(0);
            *n += 1;
            if *n >= MAX_STALLS {
                for p in progress
                    .values_mut()
                    .filter(|p| !p.done && p.leader == leader)
                {
                    p.error = Some(format!(
                        "no progress at offset {} on broker {address}",
                        p.at
                    ));
                    p.done = true;
                }
            }
        }
    }
    let seconds = began.elapsed().as_secs_f64();
    report(&progress, seconds, verify.json)
}

/// The request for the partitions `leader` leads that are not done.
fn request_for(
    verify: &Verify,
    leader: i32,
    progress: &BTreeMap<(String, i32), Progress>,
) -> VerifyMirrorTopicsRequest {
    let mut topics: BTreeMap<&str, Vec<request::Partition>> = BTreeMap::new();
    for ((topic, partition), p) in progress {
        if p.done || p.leader != leader {
            continue;
        }
        topics.entry(topic).or_default().push(request::Partition {
            partition_index: *partition,
            from_offset: p.at,
            to_offset: p.end,
            ..Default::default()
        });
    }
    VerifyMirrorTopicsRequest {
        mirror_name: verify.mirror.clone(),
        topics: topics
            .into_iter()
            .map(|(name, partitions)| request::Topic {
                name: name.to_string(),
                partitions,
                ..Default::default()
            })
            .collect(),
        time_budget_ms: BUDGET_MS,
        rate_bytes_per_second: verify.rate.unwrap_or(-1),
        ..Default::default()
    }
}

async fn send(
    address: &str,
    request: &VerifyMirrorTopicsRequest,
) -> Result<VerifyMirrorTopicsResponse, kmirror_protocol::client::ClientError> {
    let connection = Connection::connect(address, &ClientConfig::plaintext(address), None).await?;
    Ok(connection.send("VerifyMirrorTopics", request, 0).await?.1)
}

/// Takes a broker's answer into `progress`: whether any partition moved on.
fn take(
    progress: &mut BTreeMap<(String, i32), Progress>,
    answer: VerifyMirrorTopicsResponse,
) -> bool {
    let mut moved = false;
    for topic in answer.topics {
        for a in topic.partitions {
            let Some(p) = progress.get_mut(&(topic.name.clone(), a.partition_index)) else {
                continue;
            };
            if a.end_offset < 0 {
                // Failed before comparing anything, or not reached within this request's budget.
                if a.error_code != 0 {
                    failed(p, &a);
                    moved = true;
                }
                continue;
            }
            if p.end < 0 {
                if a.error_code == 0 && a.verified_from > a.end_offset {
                    p.error = Some(format!(
                        "the range starts at {}, past the destination's log end {} (or the \
                         source's log start is past it): nothing to compare",
                        a.verified_from, a.end_offset
                    ));
                    p.done = true;
                    moved = true;
                    continue;
                }
                p.from = a.verified_from;
                p.end = a.end_offset;
                p.at = a.verified_from;
            } else if a.verified_from > p.at {
                // One side's log start moved past where this range was: not compared.
                p.not_compared += a.verified_from.min(p.end) - p.at;
            }
            p.batches += a.batches;
            p.bytes += a.bytes;
            moved |= a.verified_to > p.at;
            p.at = a.verified_to.max(p.at).min(p.end);
            if a.error_code != 0 {
                failed(p, &a);
                moved = true;
                continue;
            }
            p.error = None;
            if a.difference_offset >= 0 {
                p.difference = Some((a.difference_offset, a.difference.unwrap_or_default()));
                p.done = true;
                moved = true;
                continue;
            }
            p.done = p.at >= p.end;
            moved |= p.done;
        }
    }
    moved
}

/// A partition's answer failed: a retriable error is asked again (up to [`MAX_RETRIES`] in
/// all), any other ends the partition.
fn failed(
    p: &mut Progress,
    a: &kmirror_protocol::messages::verify_mirror_topics_response::Partition,
) {
    p.error = Some(error_of(a));
    let retriable = ErrorCode(a.error_code).class() == Some(ErrorClass::Retriable);
    p.retries += u32::from(retriable);
    p.done = !retriable || p.retries > MAX_RETRIES;
}

/// A partition's error as the report shows it.
fn error_of(a: &kmirror_protocol::messages::verify_mirror_topics_response::Partition) -> String {
    format!(
        "{} ({}): {}",
        ErrorCode(a.error_code).name(),
        a.error_code,
        a.error_message.clone().unwrap_or_default()
    )
}

/// Prints the result; fails when a partition differs or could not be verified.
fn report(
    progress: &BTreeMap<(String, i32), Progress>,
    seconds: f64,
    json: bool,
) -> Result<(), Failure> {
    let differing = progress.values().filter(|p| p.difference.is_some()).count();
    let failed = progress
        .values()
        .filter(|p| p.difference.is_none() && p.error.is_some())
        .count();
    let bytes: i64 = progress.values().map(|p| p.bytes).sum();
    if json {
        let rows: Vec<serde_json::Value> = progress
            .iter()
            .map(|((topic, partition), p)| {
                serde_json::json!({
                    "topic": topic,
                    "partition": partition,
                    "verifiedFrom": p.from,
                    "verifiedTo": p.at,
                    "endOffset": p.end,
                    "batches": p.batches,
                    "bytes": p.bytes,
                    "notCompared": p.not_compared,
                    "differenceOffset": p.difference.as_ref().map(|d| d.0),
                    "difference": p.difference.as_ref().map(|d| d.1.clone()),
                    "error": p.error,
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
    } else {
        let mut out = format!(
            "{:<32} {:>9} {:>12} {:>12} {:>9} {:>10}  RESULT\n",
            "TOPIC", "PARTITION", "FROM", "TO", "BATCHES", "MB"
        );
        for ((topic, partition), p) in progress {
            let result = match (&p.difference, &p.error) {
                (Some((offset, why)), _) => format!("DIFFERS at {offset}: {why}"),
                (None, Some(error)) => format!("ERROR: {error}"),
                _ if p.not_compared > 0 => format!(
                    "OK, but {} offsets were deleted during the verification and not compared",
                    p.not_compared
                ),
                _ if p.batches == 0 => "OK (nothing to compare in the range)".to_string(),
                _ => "OK".to_string(),
            };
            let _ = writeln!(
                out,
                "{:<32} {:>9} {:>12} {:>12} {:>9} {:>10.1}  {result}",
                topic,
                partition,
                p.from,
                p.at,
                p.batches,
                p.bytes as f64 / 1e6
            );
        }
        print!("{out}");
        println!(
            "verified {:.1} MB in {seconds:.1} s ({:.1} MB/s)",
            bytes as f64 / 1e6,
            bytes as f64 / 1e6 / seconds.max(1e-3)
        );
    }
    match (differing, failed) {
        (0, 0) => Ok(()),
        (0, n) => Err(Failure::Refused(format!(
            "{n} partition(s) could not be verified"
        ))),
        (n, _) => Err(Failure::Refused(format!(
            "{n} partition(s) differ from the source"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_protocol::messages::verify_mirror_topics_response::{Partition, Topic};

    fn answer(error_code: i16, verified_to: i64) -> VerifyMirrorTopicsResponse {
        VerifyMirrorTopicsResponse {
            topics: vec![Topic {
                name: "t".to_string(),
                partitions: vec![Partition {
                    partition_index: 0,
                    error_code,
                    verified_from: 0,
                    verified_to,
                    end_offset: 100,
                    ..Partition::default()
                }],
                ..Topic::default()
            }],
            ..VerifyMirrorTopicsResponse::default()
        }
    }

    /// A broken source connection is asked again, and forgotten once an answer comes; past
    /// [`MAX_RETRIES`] in a row, or for an error retrying cannot cure, the partition is not
    /// verified.
    #[test]
    fn retriable_errors_are_asked_again_a_few_times() {
        let network = ErrorCode::NETWORK_EXCEPTION.0;
        let key = ("t".to_string(), 0);
        let fresh = || Progress {
            end: -1,
            ..Progress::default()
        };
        let mut progress = BTreeMap::from([(key.clone(), fresh())]);
        assert!(take(&mut progress, answer(0, 40)));
        assert!(take(&mut progress, answer(network, 40)));
        assert!(!progress[&key].done && progress[&key].error.is_some());
        assert!(take(&mut progress, answer(0, 70)));
        assert_eq!(
            (progress[&key].at, progress[&key].error.clone()),
            (70, None)
        );
        for _ in 0..MAX_RETRIES - 1 {
            take(&mut progress, answer(network, 70));
        }
        assert!(!progress[&key].done, "{:?}", progress[&key]);
        take(&mut progress, answer(network, 70));
        assert!(progress[&key].done, "given up: {:?}", progress[&key]);
        let mut fatal = BTreeMap::from([(key.clone(), fresh())]);
        take(&mut fatal, answer(0, 10));
        take(
            &mut fatal,
            answer(ErrorCode::TOPIC_AUTHORIZATION_FAILED.0, 10),
        );
        assert!(fatal[&key].done && fatal[&key].error.is_some());
    }
}
