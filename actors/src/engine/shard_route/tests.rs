//! Remote shards over TCP: an in-memory destination whose `__mirror_state` shards another
//! broker leads, reached by the engine's ReadMirrorStates and WriteMirrorStates at that
//! broker's address.

use crate::engine::EngineRuntime;
use crate::engine::describe::DescribeMirror;
use crate::engine::state_log::MIRROR_STATE_TOPIC;
use crate::host::Host;
use crate::memory::{MemoryCluster, MemoryNetwork};
use bytes::Bytes;
use kmirror_protocol::codec::{
    CodecError, WireFormat, read_int16, read_int32, read_nullable_string, read_tagged_fields,
    write_int16, write_int32, write_unsigned_varint,
};
use kmirror_protocol::messages::{
    ReadMirrorStatesRequest, ReadMirrorStatesResponse, WriteMirrorStatesRequest,
    WriteMirrorStatesResponse, read_mirror_states_response, write_mirror_states_response,
};
use kmirror_protocol::state::MirrorState;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const API_VERSIONS: i16 = 18;
const READ_MIRROR_STATES: i16 = 100;
const WRITE_MIRROR_STATES: i16 = 101;

/// A broker that leads `__mirror_state` shards, listening on a free local port: it has no
/// record of any partition and takes every write, which is all a partition needs to load and
/// run. Answers until the test ends.
async fn coordinator() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("listens");
    let address = listener.local_addr().expect("address").to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream));
        }
    });
    address
}

/// A coordinator that closes each connection once it answered one mirror state request, as
/// a broker that restarted between two requests.
async fn coordinator_closing_each_connection() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("listens");
    let address = listener.local_addr().expect("address").to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_for(stream, 1));
        }
    });
    address
}

/// One connection's requests, answered in order until it closes.
async fn serve(stream: TcpStream) {
    serve_for(stream, usize::MAX).await;
}

/// One connection's requests, answered in order until it closes or `requests` mirror state
/// requests (ApiVersions aside) were answered.
async fn serve_for(mut stream: TcpStream, mut requests: usize) {
    while requests > 0
        && let Ok(size) = stream.read_i32().await
    {
        let mut request = vec![0; usize::try_from(size).unwrap_or(0)];
        if stream.read_exact(&mut request).await.is_err() {
            return;
        }
        if request.get(..2) != Some(&API_VERSIONS.to_be_bytes()[..]) {
            requests -= 1;
        }
        let answer = answer(Bytes::from(request)).expect("a request the coordinator serves");
        let size = i32::try_from(answer.len()).expect("small").to_be_bytes();
        if stream
            .write_all(&[&size[..], &answer].concat())
            .await
            .is_err()
        {
            return;
        }
    }
}

/// The response to one request (header v2), without its size.
fn answer(mut request: Bytes) -> Result<Vec<u8>, CodecError> {
    let api_key = read_int16(&mut request)?;
    let version = read_int16(&mut request)?;
    let correlation_id = read_int32(&mut request)?;
    read_nullable_string(&mut request, false)?;
    read_tagged_fields(&mut request, |_, _| Ok(()))?;
    let mut out = Vec::new();
    write_int32(&mut out, correlation_id);
    match api_key {
        // Response header v0, body v3: the two mirror state APIs at version 0.
        API_VERSIONS => {
            write_int16(&mut out, 0);
            write_unsigned_varint(&mut out, 3);
            for key in [READ_MIRROR_STATES, WRITE_MIRROR_STATES] {
                write_int16(&mut out, key);
                write_int16(&mut out, 0);
                write_int16(&mut out, 0);
                write_unsigned_varint(&mut out, 0);
            }
            write_int32(&mut out, 0);
            write_unsigned_varint(&mut out, 0);
        }
        READ_MIRROR_STATES => {
            let asked = ReadMirrorStatesRequest::from_bytes(request, version)?;
            write_unsigned_varint(&mut out, 0);
            let topics = asked
                .topics
                .into_iter()
                .map(|t| read_mirror_states_response::Topic {
                    topic_id: t.topic_id,
                    name: t.name,
                    partitions: t
                        .partitions
                        .into_iter()
                        .map(|p| read_mirror_states_response::Partition {
                            partition_index: p.partition_index,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                });
            let response = ReadMirrorStatesResponse {
                topics: topics.collect(),
                ..Default::default()
            };
            response.write(&mut out, version)?;
        }
        WRITE_MIRROR_STATES => {
            let asked = WriteMirrorStatesRequest::from_bytes(request, version)?;
            write_unsigned_varint(&mut out, 0);
            let topics = asked
                .topics
                .into_iter()
                .map(|t| write_mirror_states_response::Topic {
                    topic_id: t.topic_id,
                    name: t.name,
                    partitions: t
                        .partitions
                        .into_iter()
                        .map(|p| write_mirror_states_response::Partition {
                            partition_index: p.partition_index,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                });
            let response = WriteMirrorStatesResponse {
                topics: topics.collect(),
                ..Default::default()
            };
            response.write(&mut out, version)?;
        }
        other => panic!("the coordinator serves no API {other}"),
    }
    Ok(out)
}

/// The states DescribeMirrors shows for topic `t` of mirror `m`, with its log end here.
async fn described(engine: &EngineRuntime, destination: &MemoryCluster) -> (Vec<MirrorState>, i64) {
    let topics = engine
        .engine()
        .ask(DescribeMirror("m".into(), Default::default()))
        .await
        .unwrap_or_default();
    let states = topics
        .into_iter()
        .flat_map(|t| t.partitions)
        .map(|p| p.snapshot.state)
        .collect();
    (states, destination.log_end("t", 0))
}

/// Waits (15 s at most) until [`described`] shows `want`.
async fn until(engine: &EngineRuntime, destination: &MemoryCluster, want: (Vec<MirrorState>, i64)) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let now = described(engine, destination).await;
        if now == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "(states, log end) {now:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Engine review finding 5: a broker that leads the `__mirror_state` shards comes back at
/// another address (a broker-only node joining again, docs/cluster.md "Roles"); the partitions
/// whose records live there follow it and load, instead of reading from the old address for
/// ever. Failed before the fix: the routes kept the address they were built with, and the
/// partition stayed loading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_shard_is_reached_where_its_broker_moved() {
    let network = MemoryNetwork::default();
    let (source, destination) = (network.cluster("src"), network.cluster("dst"));
    source.create_plain_topic("t", 1).expect("source topic");
    source.produce("t", 0, 5).expect("produced");
    let id = source.topic("t").expect("source topic").topic_id;
    // Every shard is led by broker 2, at first at an address nothing listens on (it is down).
    destination
        .create_topic(MIRROR_STATE_TOPIC, 4, BTreeMap::new(), None)
        .await
        .expect("state topic");
    for shard in 0..4 {
        destination.move_leader(MIRROR_STATE_TOPIC, shard, 2);
    }
    let gone = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .to_string();
    destination.set_node_address(2, &gone);
    destination.create_mirror(
        "m",
        BTreeMap::from([
            ("bootstrap.servers".to_string(), source.address()),
            ("mirror.source.cluster.id".to_string(), "src".to_string()),
        ]),
    );
    destination
        .create_topic(
            "t",
            1,
            BTreeMap::from([("mirror.name".to_string(), "m".to_string())]),
            Some(id),
        )
        .await
        .expect("mirror topic");
    let engine = EngineRuntime::start(destination.clone()).expect("engine");
    until(&engine, &destination, (vec![MirrorState::Unknown], 0)).await;
    // Its loads are retried every second: a few of them failed at the old address.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = described(&engine, &destination).await;
    assert_eq!(before, (vec![MirrorState::Unknown], 0), "its shard is down");
    destination.set_node_address(2, &coordinator().await);
    until(&engine, &destination, (vec![MirrorState::Mirroring], 5)).await;
    engine.stop();
}

/// Review MEDIUM: a shard's broker that closed the connection (it restarted) is connected to
/// again for the next request, which succeeds; before, the cached dead connection was used and
/// the request failed (the partition's load waited a backoff for nothing).
#[tokio::test]
async fn a_connection_its_broker_closed_is_not_used_again() {
    use crate::coordinator::PartitionKey;
    use crate::engine::shard_route::{RemoteShard, Route, ShardRoute};
    use std::sync::Arc;
    let route: ShardRoute<MemoryCluster> = ShardRoute::new(Route::Remote(Arc::new(
        RemoteShard::new(coordinator_closing_each_connection().await),
    )));
    let key = PartitionKey {
        mirror: "m".into(),
        topic_id: uuid::Uuid::from_u128(7),
        partition: 0,
    };
    for request in 1..=3 {
        let read = route.read_state(key.clone(), "t").await;
        assert!(
            matches!(read, Ok(Ok(ref r)) if r.stored.is_none()),
            "request {request}: {read:?}"
        );
        // The coordinator's close reaches this side.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The same at the client: a request sent on a connection its broker closed fails at once
/// ("connection closed"), so the caller connects again; before, it was written to the dead
/// socket and waited its whole request timeout (the long cluster nemesis saw a failback's
/// LastMirroredEpochs and Metadata wait 30 s each on a restarted broker's old connection).
#[tokio::test]
async fn a_request_on_a_connection_its_broker_closed_fails_at_once() {
    use kmirror_protocol::client::connection::Connection;
    use kmirror_protocol::client::{ClientConfig, ClientError};
    let address = coordinator_closing_each_connection().await;
    let mut config = ClientConfig::plaintext(&address);
    config.request_timeout = Duration::from_secs(5);
    let connection = Connection::connect(&address, &config, None)
        .await
        .expect("connected");
    let request = ReadMirrorStatesRequest::default();
    connection
        .send("ReadMirrorStates", &request, 0)
        .await
        .expect("the first request is answered");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    let second = connection.send("ReadMirrorStates", &request, 0).await;
    assert!(
        matches!(second, Err(ClientError::Connection { .. })),
        "{second:?} after {:?}",
        started.elapsed()
    );
}
