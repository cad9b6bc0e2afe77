//! A consumer Fetch apart from its sending: what is asked ([`FetchSpec`]), what comes back
//! ([`FetchedPartition`]), and the incremental fetch session (KIP-227) kept with a broker in
//! between. [`build_fetch`] makes the request from the session and the spec, [`process_fetch`]
//! reads the answer and yields the session the next fetch goes in; the source client only
//! sends in between. Both are pure, so the session's rules are tested here without a broker.
//!
//! Records stay zero-copy slices of the response buffer: no batch is decoded or re-encoded on
//! the way (docs/design.md §4, "Appending").

use super::error::ClientError;
use crate::errors::ErrorCode;
use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use std::collections::HashMap;
use uuid::Uuid;

/// Isolation of a fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Everything up to the high watermark.
    ReadUncommitted,
    /// Up to the last stable offset, with the aborted transactions listed.
    ReadCommitted,
}

/// One partition of a fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartitionSpec {
    /// The topic name.
    pub topic: String,
    /// The topic id (Fetch v13+ addresses topics by id).
    pub topic_id: Uuid,
    /// The partition.
    pub partition: i32,
    /// Where to read from.
    pub offset: i64,
    /// The leader epoch the client believes current, or -1.
    pub current_leader_epoch: i32,
    /// The epoch of the last batch the client holds, or -1 (enables DivergingEpoch).
    pub last_fetched_epoch: i32,
    /// Most bytes for this partition.
    pub max_bytes: i32,
}

/// A consumer fetch to one broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSpec {
    /// The partitions, all led by the broker asked.
    pub partitions: Vec<FetchPartitionSpec>,
    /// Isolation.
    pub isolation: Isolation,
    /// Longest wait for `min_bytes`.
    pub max_wait_ms: i32,
    /// Bytes to wait for.
    pub min_bytes: i32,
    /// Most bytes in the whole response.
    pub max_bytes: i32,
}

/// An aborted transaction in a READ_COMMITTED answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    /// The producer.
    pub producer_id: i64,
    /// The transaction's first offset.
    pub first_offset: i64,
}

/// One partition of a fetch answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedPartition {
    /// The topic id.
    pub topic_id: Uuid,
    /// The topic name (empty when the broker answered by id only).
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// Kafka's error for this partition.
    pub error: ErrorCode,
    /// The high watermark.
    pub high_watermark: i64,
    /// The last stable offset (-1 if unknown).
    pub last_stable_offset: i64,
    /// The log start offset (-1 if unknown).
    pub log_start_offset: i64,
    /// The record batches, a zero-copy slice of the response (the last one may be partial).
    pub records: Bytes,
    /// For READ_COMMITTED: aborted transactions overlapping the records.
    pub aborted_transactions: Vec<AbortedTransaction>,
    /// `(epoch, end offset)` when the client's history diverged from the leader's.
    pub diverging_epoch: Option<(i32, i64)>,
    /// `(leader id, leader epoch)` when the broker knows a newer leader.
    pub current_leader: Option<(i32, i32)>,
}

/// A partition of a fetch session: (topic id, topic name, partition).
pub(super) type SessionKey = (Uuid, String, i32);

/// What the broker's session holds for a partition: what this client last sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SentPartition {
    offset: i64,
    current_leader_epoch: i32,
    last_fetched_epoch: i32,
    max_bytes: i32,
}

/// An incremental fetch session with one broker.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct FetchSession {
    /// The id the broker gave it.
    pub(super) id: i32,
    /// The epoch the next request carries.
    pub(super) epoch: i32,
    sent: HashMap<SessionKey, SentPartition>,
}

/// What a request asked, to read its answer with: the session it went in (id and epoch 0 when
/// none) and every partition wanted, all of which the broker's session holds once answered.
#[derive(Debug)]
pub(super) struct Asked {
    session_id: i32,
    session_epoch: i32,
    wanted: HashMap<SessionKey, SentPartition>,
}

/// The request for `spec` at Fetch `version`, and what it asks. Without a session the fetch is
/// full and asks for one; within `session` it lists only the partitions whose position changed
/// since last sent and forgets those no longer wanted. Topics go by id from v13, by name below;
/// the last fetched epoch is sent from v12.
pub(super) fn build_fetch(
    session: Option<&FetchSession>,
    spec: &FetchSpec,
    version: i16,
) -> (FetchRequest, Asked) {
    let by_id = version >= 13;
    let key = |p: &FetchPartitionSpec| (p.topic_id, p.topic.clone(), p.partition);
    let wanted: HashMap<SessionKey, SentPartition> = spec
        .partitions
        .iter()
        .map(|p| {
            (
                key(p),
                SentPartition {
                    offset: p.offset,
                    current_leader_epoch: p.current_leader_epoch,
                    last_fetched_epoch: p.last_fetched_epoch,
                    max_bytes: p.max_bytes,
                },
            )
        })
        .collect();
    let (session_id, session_epoch, to_send, forgotten): (
        i32,
        i32,
        Vec<&FetchPartitionSpec>,
        Vec<SessionKey>,
    ) = match session {
        Some(s) => (
            s.id,
            s.epoch,
            spec.partitions
                .iter()
                .filter(|p| s.sent.get(&key(p)) != wanted.get(&key(p)))
                .collect(),
            s.sent
                .keys()
                .filter(|k| !wanted.contains_key(*k))
                .cloned()
                .collect(),
        ),
        None => (0, 0, spec.partitions.iter().collect(), Vec::new()),
    };
    let mut topics: Vec<FetchTopic> = Vec::new();
    for p in to_send {
        let partition = FetchPartition::default()
            .with_partition(p.partition)
            .with_current_leader_epoch(p.current_leader_epoch)
            .with_fetch_offset(p.offset)
            .with_last_fetched_epoch(if version >= 12 {
                p.last_fetched_epoch
            } else {
                -1
            })
            .with_log_start_offset(-1)
            .with_partition_max_bytes(p.max_bytes);
        let same = |t: &FetchTopic| {
            if by_id {
                t.topic_id == p.topic_id
            } else {
                t.topic.0.as_str() == p.topic
            }
        };
        match topics.iter_mut().find(|t| same(t)) {
            Some(t) => t.partitions.push(partition),
            None => {
                let topic = if by_id {
                    FetchTopic::default().with_topic_id(p.topic_id)
                } else {
                    FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(p.topic.clone())))
                };
                topics.push(topic.with_partitions(vec![partition]));
            }
        }
    }
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(spec.max_wait_ms)
        .with_min_bytes(spec.min_bytes)
        .with_max_bytes(spec.max_bytes)
        .with_isolation_level(match spec.isolation {
            Isolation::ReadUncommitted => 0,
            Isolation::ReadCommitted => 1,
        })
        .with_session_id(session_id)
        .with_session_epoch(session_epoch)
        .with_topics(topics)
        .with_forgotten_topics_data(forgotten_topics(&forgotten, by_id));
    let asked = Asked {
        session_id,
        session_epoch,
        wanted,
    };
    (request, asked)
}

/// The partitions of `response`, the answer to what was `asked`, and the session the next fetch
/// goes in: the broker's at the next epoch, or none when the broker keeps none (the next fetch
/// is full). An error for the whole fetch (FETCH_SESSION_ID_NOT_FOUND,
/// INVALID_FETCH_SESSION_EPOCH, ...) is returned, and leaves no session either.
pub(super) fn process_fetch(
    response: FetchResponse,
    asked: Asked,
) -> Result<(Vec<FetchedPartition>, Option<FetchSession>), ClientError> {
    if response.error_code != 0 {
        return Err(ClientError::Broker {
            api: "Fetch",
            code: ErrorCode(response.error_code),
        });
    }
    // Over its quota, a broker answers a Fetch with no partitions and the time to wait: not
    // "nothing new" for each partition asked.
    if response.throttle_time_ms > 0 && response.responses.is_empty() {
        return Err(ClientError::Throttled {
            api: "Fetch",
            throttle_ms: response.throttle_time_ms,
        });
    }
    let next = (response.session_id != 0).then(|| FetchSession {
        id: response.session_id,
        // Epochs count 1, 2, ... and wrap back to 1 (0 asks for a new session).
        epoch: if asked.session_id == response.session_id {
            asked.session_epoch.checked_add(1).unwrap_or(1)
        } else {
            1
        },
        sent: asked.wanted,
    });
    let mut out = Vec::new();
    for t in response.responses {
        for p in t.partitions {
            let diverging = (p.diverging_epoch.epoch >= 0)
                .then_some((p.diverging_epoch.epoch, p.diverging_epoch.end_offset));
            let leader = (p.current_leader.leader_id.0 >= 0)
                .then_some((p.current_leader.leader_id.0, p.current_leader.leader_epoch));
            out.push(FetchedPartition {
                topic_id: t.topic_id,
                topic: t.topic.0.to_string(),
                partition: p.partition_index,
                error: ErrorCode(p.error_code),
                high_watermark: p.high_watermark,
                last_stable_offset: p.last_stable_offset,
                log_start_offset: p.log_start_offset,
                records: p.records.unwrap_or_default(),
                aborted_transactions: p
                    .aborted_transactions
                    .unwrap_or_default()
                    .iter()
                    .map(|a| AbortedTransaction {
                        producer_id: a.producer_id.0,
                        first_offset: a.first_offset,
                    })
                    .collect(),
                diverging_epoch: diverging,
                current_leader: leader,
            });
        }
    }
    Ok((out, next))
}

fn forgotten_topics(keys: &[SessionKey], by_id: bool) -> Vec<ForgottenTopic> {
    let mut out: Vec<ForgottenTopic> = Vec::new();
    for (id, name, partition) in keys {
        let same = |t: &ForgottenTopic| {
            if by_id {
                t.topic_id == *id
            } else {
                t.topic.0.as_str() == name
            }
        };
        match out.iter_mut().find(|t| same(t)) {
            Some(t) => t.partitions.push(*partition),
            None => {
                let topic = if by_id {
                    ForgottenTopic::default().with_topic_id(*id)
                } else {
                    ForgottenTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(name.clone())))
                };
                out.push(topic.with_partitions(vec![*partition]));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! Table tests in the manner of Kafka's FetchSessionHandlerTest: what each request lists
    //! and forgets, and which session each answer leaves.

    use super::*;
    use kafka_protocol::messages::ProducerId;
    use kafka_protocol::messages::fetch_response::{
        self, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, PartitionData,
    };

    /// The test topics; a topic's id is its place here plus one.
    const TOPICS: [&str; 3] = ["a", "b", "c"];

    fn id_of(topic: &str) -> Uuid {
        let place = TOPICS
            .iter()
            .position(|t| *t == topic)
            .expect("a test topic");
        Uuid::from_u128(place as u128 + 1)
    }

    fn name_of(id: Uuid) -> &'static str {
        TOPICS[id.as_u128() as usize - 1]
    }

    /// `topic`-`partition` read from `offset`, at leader epoch 5, last fetched epoch 4.
    fn at(topic: &str, partition: i32, offset: i64) -> FetchPartitionSpec {
        FetchPartitionSpec {
            topic: topic.to_string(),
            topic_id: id_of(topic),
            partition,
            offset,
            current_leader_epoch: 5,
            last_fetched_epoch: 4,
            max_bytes: 1024,
        }
    }

    fn spec(partitions: Vec<FetchPartitionSpec>) -> FetchSpec {
        FetchSpec {
            partitions,
            isolation: Isolation::ReadCommitted,
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 1 << 20,
        }
    }

    /// Session `id` at `epoch`, the broker holding `partitions` as this client sent them.
    fn session(id: i32, epoch: i32, partitions: &[FetchPartitionSpec]) -> FetchSession {
        let sent = partitions
            .iter()
            .map(|p| {
                let sent = SentPartition {
                    offset: p.offset,
                    current_leader_epoch: p.current_leader_epoch,
                    last_fetched_epoch: p.last_fetched_epoch,
                    max_bytes: p.max_bytes,
                };
                ((p.topic_id, p.topic.clone(), p.partition), sent)
            })
            .collect();
        FetchSession { id, epoch, sent }
    }

    type Listed = Vec<(&'static str, Vec<(i32, i64, i32)>)>;
    type Forgotten = Vec<(&'static str, Vec<i32>)>;

    /// What `request` lists, as `(topic, [(partition, offset, last fetched epoch)])`, and
    /// forgets, as `(topic, [partition])` sorted; every topic checked to go by id from v13 and
    /// by name below.
    fn listed(request: &FetchRequest, version: i16) -> (Listed, Forgotten) {
        let name = |id: Uuid, topic: &TopicName| {
            if version >= 13 {
                assert!(topic.0.is_empty(), "v{version} names topics by id");
                name_of(id)
            } else {
                assert!(id.is_nil(), "v{version} names topics by name");
                name_of(id_of(topic.0.as_str()))
            }
        };
        let listed = request
            .topics
            .iter()
            .map(|t| {
                let partitions = t.partitions.iter();
                let partitions =
                    partitions.map(|p| (p.partition, p.fetch_offset, p.last_fetched_epoch));
                (name(t.topic_id, &t.topic), partitions.collect())
            })
            .collect();
        let mut forgotten: Forgotten = request
            .forgotten_topics_data
            .iter()
            .map(|t| {
                let mut partitions = t.partitions.clone();
                partitions.sort();
                (name(t.topic_id, &t.topic), partitions)
            })
            .collect();
        forgotten.sort();
        (listed, forgotten)
    }

    fn answer(error: ErrorCode, session_id: i32) -> FetchResponse {
        FetchResponse::default()
            .with_error_code(error.0)
            .with_session_id(session_id)
    }

    #[test]
    fn build_fetch_lists_only_what_the_session_lacks() {
        let held = [at("a", 0, 10), at("a", 1, 20), at("b", 0, 30)];
        let moved = |p: FetchPartitionSpec| vec![p, at("a", 1, 20), at("b", 0, 30)];
        struct Case {
            name: &'static str,
            session: Option<FetchSession>,
            wanted: Vec<FetchPartitionSpec>,
            version: i16,
            sent_in: (i32, i32),
            listed: Listed,
            forgotten: Forgotten,
        }
        let cases = [
            Case {
                name: "no session: a full fetch asking for one",
                session: None,
                wanted: held.to_vec(),
                version: 13,
                sent_in: (0, 0),
                listed: vec![("a", vec![(0, 10, 4), (1, 20, 4)]), ("b", vec![(0, 30, 4)])],
                forgotten: vec![],
            },
            Case {
                name: "a session: only the partition that moved",
                session: Some(session(7, 3, &held)),
                wanted: moved(at("a", 0, 15)),
                version: 13,
                sent_in: (7, 3),
                listed: vec![("a", vec![(0, 15, 4)])],
                forgotten: vec![],
            },
            Case {
                name: "a session: nothing moved, nothing listed",
                session: Some(session(7, 3, &held)),
                wanted: held.to_vec(),
                version: 13,
                sent_in: (7, 3),
                listed: vec![],
                forgotten: vec![],
            },
            Case {
                name: "a session: removed partitions forgotten, a new one listed",
                session: Some(session(7, 3, &held)),
                wanted: vec![at("a", 0, 10), at("c", 0, 0)],
                version: 13,
                sent_in: (7, 3),
                listed: vec![("c", vec![(0, 0, 4)])],
                forgotten: vec![("a", vec![1]), ("b", vec![0])],
            },
            Case {
                name: "a session: a new leader epoch is news",
                session: Some(session(7, 3, &held)),
                wanted: moved(FetchPartitionSpec {
                    current_leader_epoch: 6,
                    ..at("a", 0, 10)
                }),
                version: 13,
                sent_in: (7, 3),
                listed: vec![("a", vec![(0, 10, 4)])],
                forgotten: vec![],
            },
            Case {
                name: "a session: a new last fetched epoch is news",
                session: Some(session(7, 3, &held)),
                wanted: moved(FetchPartitionSpec {
                    last_fetched_epoch: 5,
                    ..at("a", 0, 10)
                }),
                version: 13,
                sent_in: (7, 3),
                listed: vec![("a", vec![(0, 10, 5)])],
                forgotten: vec![],
            },
            Case {
                name: "a session: a new size is news",
                session: Some(session(7, 3, &held)),
                wanted: moved(FetchPartitionSpec {
                    max_bytes: 2048,
                    ..at("a", 0, 10)
                }),
                version: 13,
                sent_in: (7, 3),
                listed: vec![("a", vec![(0, 10, 4)])],
                forgotten: vec![],
            },
            Case {
                name: "v12: topics listed and forgotten by name",
                session: Some(session(7, 3, &held)),
                wanted: vec![at("a", 0, 10), at("c", 0, 0)],
                version: 12,
                sent_in: (7, 3),
                listed: vec![("c", vec![(0, 0, 4)])],
                forgotten: vec![("a", vec![1]), ("b", vec![0])],
            },
            Case {
                name: "v11: no last fetched epoch on the wire",
                session: None,
                wanted: vec![at("a", 0, 10)],
                version: 11,
                sent_in: (0, 0),
                listed: vec![("a", vec![(0, 10, -1)])],
                forgotten: vec![],
            },
        ];
        for case in cases {
            let (request, _) = build_fetch(case.session.as_ref(), &spec(case.wanted), case.version);
            let sent_in = (request.session_id, request.session_epoch);
            assert_eq!(sent_in, case.sent_in, "{}: session", case.name);
            let (listed, forgotten) = listed(&request, case.version);
            assert_eq!(listed, case.listed, "{}: listed", case.name);
            assert_eq!(forgotten, case.forgotten, "{}: forgotten", case.name);
        }
    }

    #[test]
    fn build_fetch_carries_the_spec() {
        let wanted = FetchPartitionSpec {
            current_leader_epoch: 6,
            max_bytes: 2048,
            ..at("a", 0, 10)
        };
        let (request, _) = build_fetch(None, &spec(vec![wanted]), 13);
        assert_eq!(request.replica_id, BrokerId(-1), "a consumer fetch");
        assert_eq!(request.isolation_level, 1, "READ_COMMITTED");
        let limits = (request.max_wait_ms, request.min_bytes, request.max_bytes);
        assert_eq!(limits, (500, 1, 1 << 20));
        let p = &request.topics[0].partitions[0];
        let position = (
            p.current_leader_epoch,
            p.log_start_offset,
            p.partition_max_bytes,
        );
        assert_eq!(position, (6, -1, 2048));
    }

    #[test]
    fn process_fetch_keeps_or_ends_the_session() {
        let held = [at("a", 0, 10), at("a", 1, 20), at("b", 0, 30)];
        // The next session holds every partition wanted, not only those listed.
        let wanted = vec![at("a", 0, 10), at("a", 1, 25), at("c", 0, 0)];
        struct Case {
            name: &'static str,
            sent_in: Option<(i32, i32)>,
            answer: (ErrorCode, i32),
            next: Result<Option<(i32, i32)>, ErrorCode>,
        }
        let cases = [
            Case {
                name: "a full fetch granted a session",
                sent_in: None,
                answer: (ErrorCode::NONE, 7),
                next: Ok(Some((7, 1))),
            },
            Case {
                name: "a full fetch granted none",
                sent_in: None,
                answer: (ErrorCode::NONE, 0),
                next: Ok(None),
            },
            Case {
                name: "an incremental fetch answered",
                sent_in: Some((7, 3)),
                answer: (ErrorCode::NONE, 7),
                next: Ok(Some((7, 4))),
            },
            Case {
                name: "the epoch wraps back to 1",
                sent_in: Some((7, i32::MAX)),
                answer: (ErrorCode::NONE, 7),
                next: Ok(Some((7, 1))),
            },
            Case {
                name: "the broker started another session",
                sent_in: Some((7, 3)),
                answer: (ErrorCode::NONE, 9),
                next: Ok(Some((9, 1))),
            },
            Case {
                name: "the broker closed the session",
                sent_in: Some((7, 3)),
                answer: (ErrorCode::NONE, 0),
                next: Ok(None),
            },
            Case {
                name: "FETCH_SESSION_ID_NOT_FOUND ends it",
                sent_in: Some((7, 3)),
                answer: (ErrorCode::FETCH_SESSION_ID_NOT_FOUND, 0),
                next: Err(ErrorCode::FETCH_SESSION_ID_NOT_FOUND),
            },
            Case {
                name: "INVALID_FETCH_SESSION_EPOCH ends it",
                sent_in: Some((7, 3)),
                answer: (ErrorCode::INVALID_FETCH_SESSION_EPOCH, 0),
                next: Err(ErrorCode::INVALID_FETCH_SESSION_EPOCH),
            },
            Case {
                name: "an error ends it even naming the session",
                sent_in: Some((7, 3)),
                answer: (ErrorCode::INVALID_FETCH_SESSION_EPOCH, 7),
                next: Err(ErrorCode::INVALID_FETCH_SESSION_EPOCH),
            },
        ];
        for case in cases {
            let previous = case.sent_in.map(|(id, epoch)| session(id, epoch, &held));
            let (_, asked) = build_fetch(previous.as_ref(), &spec(wanted.clone()), 13);
            let got = match process_fetch(answer(case.answer.0, case.answer.1), asked) {
                Ok((_, next)) => Ok(next),
                Err(ClientError::Broker { api: "Fetch", code }) => Err(code),
                Err(e) => panic!("{}: {e}", case.name),
            };
            let next = case
                .next
                .map(|n| n.map(|(id, epoch)| session(id, epoch, &wanted)));
            assert_eq!(got, next, "{}", case.name);
        }
    }

    /// A broker over its client quota answers a Fetch with no partitions and a throttle time:
    /// that is an error to back off from, not "nothing new" for every partition asked (the
    /// mirror would count them caught up).
    #[test]
    fn a_throttled_empty_answer_is_not_nothing_new() {
        let wanted = vec![at("a", 0, 10)];
        let (_, asked) = build_fetch(None, &spec(wanted.clone()), 13);
        let throttled = answer(ErrorCode::NONE, 7).with_throttle_time_ms(250);
        let error = process_fetch(throttled, asked).expect_err("throttled");
        assert!(
            matches!(
                error,
                ClientError::Throttled {
                    throttle_ms: 250,
                    ..
                }
            ),
            "{error}"
        );
        assert!(error.is_retriable());
        let (_, asked) = build_fetch(None, &spec(wanted), 13);
        let (fetched, _) = process_fetch(answer(ErrorCode::NONE, 7), asked).expect("answered");
        assert!(
            fetched.is_empty(),
            "an unthrottled empty answer is nothing new"
        );
    }

    #[test]
    fn a_session_error_resets_to_a_full_fetch() {
        let first = vec![at("a", 0, 10), at("b", 0, 30)];
        let (request, asked) = build_fetch(None, &spec(first.clone()), 13);
        assert_eq!((request.session_id, request.session_epoch), (0, 0));
        let (_, next) = process_fetch(answer(ErrorCode::NONE, 7), asked).expect("answered");

        let moved = vec![at("a", 0, 15), at("b", 0, 30)];
        let (request, asked) = build_fetch(next.as_ref(), &spec(moved.clone()), 13);
        assert_eq!((request.session_id, request.session_epoch), (7, 1));
        assert_eq!(listed(&request, 13).0, vec![("a", vec![(0, 15, 4)])]);
        let (_, next) = process_fetch(answer(ErrorCode::NONE, 7), asked).expect("answered");

        let (request, asked) = build_fetch(next.as_ref(), &spec(moved.clone()), 13);
        assert_eq!((request.session_id, request.session_epoch), (7, 2));
        let lost = answer(ErrorCode::FETCH_SESSION_ID_NOT_FOUND, 0);
        let error = process_fetch(lost, asked).expect_err("the session is lost");
        assert!(
            matches!(error, ClientError::Broker { code, .. } if code == ErrorCode::FETCH_SESSION_ID_NOT_FOUND),
            "{error}"
        );

        // No session is left: the next fetch is full and asks for a new one.
        let (request, _) = build_fetch(None, &spec(moved), 13);
        assert_eq!((request.session_id, request.session_epoch), (0, 0));
        let everything = vec![("a", vec![(0, 15, 4)]), ("b", vec![(0, 30, 4)])];
        assert_eq!(listed(&request, 13), (everything, vec![]));
    }

    #[test]
    fn process_fetch_maps_each_partition() {
        let buffer = Bytes::from(b"header|batches as fetched".to_vec());
        let records = buffer.slice(7..);
        let fetched = |topic: &str, partition: i32| FetchedPartition {
            topic_id: id_of(topic),
            topic: topic.to_string(),
            partition,
            error: ErrorCode::NONE,
            high_watermark: 100,
            last_stable_offset: -1,
            log_start_offset: -1,
            records: Bytes::new(),
            aborted_transactions: vec![],
            diverging_epoch: None,
            current_leader: None,
        };
        let data = |partition: i32| {
            PartitionData::default()
                .with_partition_index(partition)
                .with_high_watermark(100)
        };
        struct Case {
            name: &'static str,
            topic: &'static str,
            data: PartitionData,
            fetched: FetchedPartition,
        }
        let cases = [
            Case {
                name: "records and aborted transactions as answered",
                topic: "a",
                data: data(0)
                    .with_last_stable_offset(90)
                    .with_log_start_offset(5)
                    .with_aborted_transactions(Some(vec![
                        fetch_response::AbortedTransaction::default()
                            .with_producer_id(ProducerId(9))
                            .with_first_offset(50),
                    ]))
                    .with_records(Some(records.clone())),
                fetched: FetchedPartition {
                    last_stable_offset: 90,
                    log_start_offset: 5,
                    records: records.clone(),
                    aborted_transactions: vec![AbortedTransaction {
                        producer_id: 9,
                        first_offset: 50,
                    }],
                    ..fetched("a", 0)
                },
            },
            Case {
                name: "no records, no aborted transactions",
                topic: "a",
                data: data(1).with_records(None).with_aborted_transactions(None),
                fetched: fetched("a", 1),
            },
            Case {
                name: "NOT_LEADER_OR_FOLLOWER with the new leader",
                topic: "b",
                data: data(0)
                    .with_error_code(ErrorCode::NOT_LEADER_OR_FOLLOWER.0)
                    .with_current_leader(
                        LeaderIdAndEpoch::default()
                            .with_leader_id(BrokerId(2))
                            .with_leader_epoch(6),
                    ),
                fetched: FetchedPartition {
                    error: ErrorCode::NOT_LEADER_OR_FOLLOWER,
                    current_leader: Some((2, 6)),
                    ..fetched("b", 0)
                },
            },
            Case {
                name: "OFFSET_OUT_OF_RANGE",
                topic: "b",
                data: data(1).with_error_code(ErrorCode::OFFSET_OUT_OF_RANGE.0),
                fetched: FetchedPartition {
                    error: ErrorCode::OFFSET_OUT_OF_RANGE,
                    ..fetched("b", 1)
                },
            },
            Case {
                name: "a diverging epoch",
                topic: "c",
                data: data(0).with_diverging_epoch(
                    EpochEndOffset::default().with_epoch(3).with_end_offset(120),
                ),
                fetched: FetchedPartition {
                    diverging_epoch: Some((3, 120)),
                    ..fetched("c", 0)
                },
            },
            Case {
                name: "a topic answered by id only",
                topic: "",
                data: data(0),
                fetched: FetchedPartition {
                    topic_id: Uuid::nil(),
                    topic: String::new(),
                    ..fetched("a", 0)
                },
            },
        ];
        let (names, expected): (Vec<_>, Vec<_>) =
            cases.iter().map(|c| (c.name, c.fetched.clone())).unzip();
        let topics = cases
            .into_iter()
            .map(|c| {
                let id = if c.topic.is_empty() {
                    Uuid::nil()
                } else {
                    id_of(c.topic)
                };
                FetchableTopicResponse::default()
                    .with_topic(TopicName(StrBytes::from_static_str(c.topic)))
                    .with_topic_id(id)
                    .with_partitions(vec![c.data])
            })
            .collect();
        let response = answer(ErrorCode::NONE, 7).with_responses(topics);
        let (_, asked) = build_fetch(None, &spec(vec![]), 13);
        let (got, _) = process_fetch(response, asked).expect("answered");
        assert_eq!(got.len(), expected.len(), "one per partition answered");
        for ((name, got), expected) in names.iter().zip(&got).zip(&expected) {
            assert_eq!(got, expected, "{name}");
        }
        assert_eq!(
            got[0].records.as_ptr(),
            buffer[7..].as_ptr(),
            "records are the response's bytes, not a copy"
        );
    }
}
