//! The request scenarios of the behaviour suite: the KIP's request rules and their error codes
//! ([`request_rules`]), and changes racing each other ([`changes_race`]).

use super::{Harness, Side, mirror_from, produce_all, until_identical, until_state};
use crate::engine::topic_requests::{ChangeTopics, StartTopics, TopicAccess, TopicResult};
use crate::partition::Desired;
use crate::policy::MirrorError;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::state::MirrorState;

/// Each topic's error code of a request-level answer (`None`: done), or the request's own.
fn codes(
    answer: Result<Vec<TopicResult>, MirrorError>,
) -> Result<Vec<Option<ErrorCode>>, ErrorCode> {
    answer
        .map(|topics| {
            topics
                .iter()
                .map(|t| t.error.as_ref().map(|e| e.code))
                .collect()
        })
        .map_err(|e| e.code)
}

/// The KIP's request rules and their error codes, per topic, whatever host runs the engine.
pub async fn request_rules(h: &mut impl Harness) {
    h.create_topic(Side::A, "rules", 1);
    produce_all(h, Side::A, "rules", 1, 5);
    mirror_from(h, Side::B, Side::A, "dr");
    let engine = h.engine(Side::B);
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let start = |topics: &[&str], include: &[&str], discard: i64| StartTopics {
        mirror: "dr".into(),
        topics: names(topics),
        include: names(include),
        exclude: Vec::new(),
        discard_local_records: discard,
        access: TopicAccess::all(),
    };
    let change = |topic: &str, desired| ChangeTopics {
        mirror: "dr".into(),
        topics: names(&[topic]),
        patterns: Vec::new(),
        desired,
        cut_timestamp_ms: None,
        access: TopicAccess::all(),
    };
    let bad_pattern = engine.ask(start(&[], &["a,b"], 0)).await;
    assert_eq!(codes(bad_pattern), Err(ErrorCode::INVALID_REQUEST));
    let mut unknown = start(&["rules"], &[], 0);
    unknown.mirror = "nowhere".into();
    assert_eq!(
        codes(engine.ask(unknown).await),
        Err(ErrorCode::UNKNOWN_CLUSTER_MIRROR)
    );
    let started = engine
        .ask(start(&["__consumer_offsets"], &["rul.*"], 0))
        .await;
    assert_eq!(
        codes(started),
        Ok(vec![Some(ErrorCode::INVALID_TOPIC_EXCEPTION), None]),
        "an internal topic is refused, the pattern starts rules"
    );
    until_state(h, Side::B, "dr", "rules", 1, MirrorState::Mirroring).await;
    let answers = [
        (Desired::Mirroring, Some(ErrorCode::MIRROR_TOPIC_NOT_PAUSED)),
        (Desired::Paused, None),
        (
            Desired::Paused,
            Some(ErrorCode::MIRROR_TOPIC_ALREADY_PAUSED),
        ),
        (Desired::Stopped, None),
        (Desired::Paused, Some(ErrorCode::MIRROR_TOPIC_BEING_STOPPED)),
        (
            Desired::Mirroring,
            Some(ErrorCode::MIRROR_TOPIC_BEING_STOPPED),
        ),
    ];
    for (desired, code) in answers {
        let answer = engine.ask(change("rules", desired)).await;
        assert_eq!(codes(answer), Ok(vec![code]), "{desired:?}");
    }
    let outside = engine.ask(change("elsewhere", Desired::Stopped)).await;
    assert_eq!(
        codes(outside),
        Ok(vec![Some(ErrorCode::TOPIC_NOT_IN_CLUSTER_MIRROR)])
    );
    let mut denied = change("rules", Desired::Stopped);
    denied.access.alter_topic_configs = std::sync::Arc::new(|_| false);
    let denied = engine.ask(denied).await;
    assert_eq!(
        codes(denied),
        Ok(vec![Some(ErrorCode::TOPIC_AUTHORIZATION_FAILED)])
    );
    until_state(h, Side::B, "dr", "rules", 1, MirrorState::Stopped).await;
    h.produce(Side::B, "rules", 0, 3)
        .expect("a stopped topic takes writes");
    let unconfirmed = engine.ask(start(&["rules"], &[], 0)).await;
    assert_eq!(
        codes(unconfirmed),
        Err(ErrorCode::POLICY_VIOLATION),
        "a restart that discards local writes needs them confirmed; nothing changes"
    );
    let confirmed = engine.ask(start(&["rules"], &[], 3)).await;
    assert_eq!(codes(confirmed), Ok(vec![None]));
    until_state(h, Side::B, "dr", "rules", 1, MirrorState::Mirroring).await;
    until_identical(h, Side::A, Side::B, "rules", 1).await;
}

/// A pause and a stop of the same topic sent together, several times: the stop always wins
/// in the end (the topic STOPPED, a resume refused as MIRROR_TOPIC_BEING_STOPPED, a restart
/// accepted), whatever the pause was answered; a pause refused never lands.
pub async fn changes_race(h: &mut impl Harness) {
    h.create_topic(Side::A, "race", 1);
    produce_all(h, Side::A, "race", 1, 3);
    mirror_from(h, Side::B, Side::A, "dr");
    let engine = h.engine(Side::B);
    let start = StartTopics {
        mirror: "dr".into(),
        topics: vec!["race".into()],
        include: Vec::new(),
        exclude: Vec::new(),
        discard_local_records: 0,
        access: TopicAccess::all(),
    };
    let change = |desired| ChangeTopics {
        mirror: "dr".into(),
        topics: vec!["race".into()],
        patterns: Vec::new(),
        desired,
        cut_timestamp_ms: None,
        access: TopicAccess::all(),
    };
    for round in 0..5 {
        let started = engine.ask(start.clone()).await;
        assert_eq!(codes(started), Ok(vec![None]), "round {round}: start");
        until_state(h, Side::B, "dr", "race", 1, MirrorState::Mirroring).await;
        let (stopped, paused) = tokio::join!(
            engine.ask(change(Desired::Stopped)),
            engine.ask(change(Desired::Paused))
        );
        assert_eq!(codes(stopped), Ok(vec![None]), "round {round}: the stop");
        let paused = codes(paused);
        assert!(
            paused == Ok(vec![None])
                || paused == Ok(vec![Some(ErrorCode::MIRROR_TOPIC_BEING_STOPPED)]),
            "round {round}: the pause answered {paused:?}"
        );
        until_state(h, Side::B, "dr", "race", 1, MirrorState::Stopped).await;
        let resumed = engine.ask(change(Desired::Mirroring)).await;
        assert_eq!(
            codes(resumed),
            Ok(vec![Some(ErrorCode::MIRROR_TOPIC_BEING_STOPPED)]),
            "round {round}: the topic must be left stopped (the pause answered {paused:?})"
        );
    }
}
