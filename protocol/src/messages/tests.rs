use super::*;
use crate::codec::{CodecError, WireFormat};
use bytes::{Bytes, BytesMut};
use proptest::test_runner::{Config, TestRunner};
use uuid::Uuid;

/// Encodes, decodes and compares every generated type at every version it defines, with values
/// drawn from the type's own strategy (unknown tagged fields included where flexible). Every
/// strict prefix of an encoding must fail to decode, never panic.
macro_rules! round_trip {
    ($t:ty) => {{
        for version in <$t>::MIN_VERSION..=<$t>::MAX_VERSION {
            let mut runner = TestRunner::new(Config {
                cases: 128,
                failure_persistence: None,
                ..Config::default()
            });
            runner
                .run(&<$t>::arbitrary(version), |value| {
                    let bytes = value.to_bytes(version).expect("valid values encode");
                    assert_eq!(value.encoded_size(version), Ok(bytes.len()));
                    let decoded = <$t>::from_bytes(bytes.clone(), version).expect("decodes");
                    assert_eq!(decoded, value);
                    for cut in 0..bytes.len() {
                        assert!(<$t>::from_bytes(bytes.slice(..cut), version).is_err());
                    }
                    Ok(())
                })
                .unwrap_or_else(|e| panic!("{} v{version}: {e}", <$t>::NAME));
        }
        COVERED.with(|c| c.borrow_mut().push(<$t>::NAME));
    }};
}

thread_local! {
    static COVERED: std::cell::RefCell<Vec<&'static str>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[test]
fn every_message_and_record_round_trips_at_every_version() {
    for_each_message!(round_trip);
    let covered = COVERED.with(|c| c.borrow().clone());
    // 13 RPCs x (request, response) + 2 coordinator records x (key, value) + the PID reset value.
    assert_eq!(covered.len(), 13 * 2 + 4 + 1, "{covered:?}");
}

#[test]
fn api_keys_are_the_prototypes_and_kmirrors() {
    let keys: Vec<(i16, &str)> = MirrorApiKey::ALL
        .iter()
        .map(|k| (k.key(), k.name()))
        .collect();
    assert_eq!(
        keys,
        [
            (94, "CreateMirror"),
            (95, "StartMirrorTopics"),
            (96, "StopMirrorTopics"),
            (97, "LastMirroredEpochs"),
            (98, "ListMirrors"),
            (99, "DescribeMirrors"),
            (100, "ReadMirrorStates"),
            (101, "WriteMirrorStates"),
            (102, "PauseMirrorTopics"),
            (103, "ResumeMirrorTopics"),
            (104, "DeleteMirror"),
            (105, "BumpLeaderEpochs"),
            (106, "VerifyMirrorTopics"),
        ]
    );
    for key in MirrorApiKey::ALL {
        assert_eq!(MirrorApiKey::from_i16(key.key()), Some(key));
        assert_eq!(key.versions(), (0, 0));
        assert!(key.is_flexible(0));
    }
    assert_eq!(MirrorApiKey::from_i16(93), None);
}

fn start_request() -> StartMirrorTopicsRequest {
    StartMirrorTopicsRequest {
        mirror_name: "m".into(),
        topics: vec![start_mirror_topics_request::TopicMetadata {
            topic_id: Uuid::from_bytes([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]),
            topic_name: "t".into(),
            num_partitions: 3,
            ..Default::default()
        }],
        include_patterns: vec!["a.*".into()],
        ..Default::default()
    }
}

/// The wire form written out by hand from Kafka's flexible-version rules.
const START_REQUEST_V0: &[u8] = &[
    0x02, b'm', // MirrorName: compact string, length + 1
    0x02, // Topics: compact array of 1
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, // TopicId
    0x02, b't', // TopicName
    0x00, 0x00, 0x00, 0x03, // NumPartitions
    0x00, // the topic's tagged fields: none
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // StateValidationOffset: -1
    0x01, // one tagged field
    0x00, // tag 0: IncludePatterns
    0x05, // its size in bytes
    0x02, 0x04, b'a', b'.', b'*', // compact array of 1 compact string "a.*"
];

#[test]
fn flexible_request_with_tagged_field_golden_bytes() {
    let req = start_request();
    assert_eq!(&req.to_bytes(0).expect("encodes")[..], START_REQUEST_V0);
    assert_eq!(
        StartMirrorTopicsRequest::from_bytes(Bytes::from_static(START_REQUEST_V0), 0),
        Ok(req)
    );
}

#[test]
fn request_frames_like_kafka_through_kafka_protocol_traits() {
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

    let header = RequestHeader::default()
        .with_request_api_key(StartMirrorTopicsRequest::API_KEY)
        .with_request_api_version(0)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("c")));
    let header_version = <StartMirrorTopicsRequest as HeaderVersion>::header_version(0);
    assert_eq!(header_version, 2);
    let mut frame = BytesMut::new();
    header
        .encode(&mut frame, header_version)
        .expect("header encodes");
    Encodable::encode(&start_request(), &mut frame, 0).expect("body encodes");

    let mut expected = vec![
        0x00, 95, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x01, b'c', 0x00,
    ];
    expected.extend_from_slice(START_REQUEST_V0);
    assert_eq!(&frame[..], &expected[..]);

    let mut wire = frame.freeze();
    let decoded_header = RequestHeader::decode(&mut wire, 2).expect("header decodes");
    assert_eq!(decoded_header.correlation_id, 7);
    let body = <StartMirrorTopicsRequest as Decodable>::decode(&mut wire, 0).expect("body decodes");
    assert_eq!(body, start_request());
    assert!(wire.is_empty());
}

#[test]
fn unknown_tagged_fields_survive_a_decode_and_encode() {
    let mut bytes = START_REQUEST_V0.to_vec();
    // Replace the tagged section: two fields, known tag 0 and unknown tag 9.
    let section = bytes.len() - 8;
    bytes.truncate(section);
    bytes.extend_from_slice(&[
        0x02, 0x00, 0x05, 0x02, 0x04, b'a', b'.', b'*', 0x09, 0x02, 0xbe, 0xef,
    ]);
    let decoded =
        StartMirrorTopicsRequest::from_bytes(Bytes::from(bytes.clone()), 0).expect("decodes");
    assert_eq!(decoded.include_patterns, ["a.*"]);
    assert_eq!(
        decoded.unknown_tagged_fields.get(&9).map(|b| &b[..]),
        Some(&[0xbe, 0xef][..])
    );
    assert_eq!(&decoded.to_bytes(0).expect("encodes")[..], &bytes[..]);
}

#[test]
fn versions_and_nulls_are_enforced() {
    assert_eq!(
        StartMirrorTopicsRequest::default().to_bytes(1),
        Err(CodecError::UnsupportedVersion {
            message: "StartMirrorTopicsRequest",
            version: 1,
            min: 0,
            max: 0
        })
    );
    // A null where MirrorName is not nullable.
    assert_eq!(
        DeleteMirrorRequest::from_bytes(Bytes::from_static(&[0x00, 0x00]), 0),
        Err(CodecError::NullNotAllowed {
            field: "MirrorName",
            version: 0
        })
    );
    assert_eq!(
        DeleteMirrorRequest::from_bytes(
            Bytes::from_static(&[
                0x02, b'x', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff
            ]),
            0
        ),
        Err(CodecError::TrailingBytes(1))
    );
}

#[test]
fn defaults_follow_the_schemas() {
    let p = read_mirror_states_response::Partition::default();
    assert_eq!((p.state, p.previous_state, p.retry_attempt), (16, 16, 0));
    assert_eq!(
        (p.leader_epoch, p.last_mirror_epoch, p.error_message),
        (-1, -1, None)
    );
    let m = describe_mirrors_response::DescribedMirror::default();
    assert_eq!(m.authorized_operations, i32::MIN);
    let d = describe_mirrors_response::DescribedPartition::default();
    assert_eq!((d.source_offset, d.destination_offset, d.lag), (-1, -1, -1));
}

#[test]
fn the_wire_doc_lists_every_api_and_mirror_error_code() {
    let doc = include_str!("../../../docs/wire.md");
    for key in MirrorApiKey::ALL {
        assert!(
            doc.contains(&format!("| {} | ", key.key()))
                && doc.contains(&format!("`{}`", key.name())),
            "docs/wire.md does not list API {} {}",
            key.key(),
            key.name()
        );
    }
    for info in crate::errors::all().into_iter().filter(|i| i.code >= 134) {
        assert!(
            doc.contains(&format!("| {} | {} |", info.code, info.name)),
            "docs/wire.md does not list error {} {}",
            info.code,
            info.name
        );
    }
}
