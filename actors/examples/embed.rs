//! Embedding the engine, start to finish: two clusters in memory, "east" (the source) and
//! "west" (the destination), each a broker-shaped host ([`MemoryCluster`], in
//! `src/memory/cluster.rs`: its `impl Host` is everything a broker provides to the engine).
//! West runs the engine, mirrors east's `orders` topic byte for byte, shows it read-only, and
//! fails over (stop): the topic becomes west's own and takes writes.
//!
//! Run it with `cargo run -p kmirror-actors --example embed`.

use kmirror_actors::MirrorState;
use kmirror_actors::engine::describe::DescribeMirror;
use kmirror_actors::engine::system::LoadMirror;
use kmirror_actors::engine::topics::{ChangeTopic, StartTopic};
use kmirror_actors::engine::{Engine, EngineRuntime};
use kmirror_actors::host::Host;
use kmirror_actors::memory::{MemoryCluster, MemoryNetwork};
use kmirror_actors::partition::Desired;
use kmirror_actors::policy::MirrorError;
use std::collections::BTreeMap;
use std::time::Duration;

/// Asks the engine, again while `__mirror_state` is being created.
async fn ask<M>(engine: &Engine, request: M) -> Result<M::Answer, MirrorError>
where
    M: kmirror_actors::engine::EngineRequest + Clone,
{
    loop {
        match engine.ask(request.clone()).await {
            Err(e) if e.code == kmirror_protocol::errors::ErrorCode::COORDINATOR_NOT_AVAILABLE => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            answer => return answer,
        }
    }
}

/// The states DescribeMirrors shows for `topic`'s partitions on this broker.
async fn states(engine: &Engine, mirror: &str, topic: &str) -> Vec<MirrorState> {
    let described = ask(
        engine,
        DescribeMirror(mirror.to_string(), Default::default()),
    )
    .await
    .unwrap_or_default();
    described
        .into_iter()
        .filter(|t| t.topic == topic)
        .flat_map(|t| t.partitions.into_iter().map(|p| p.snapshot.state))
        .collect()
}

/// Waits until every partition of `topic` shows `state`.
async fn until(engine: &Engine, mirror: &str, topic: &str, state: MirrorState) {
    loop {
        let now = states(engine, mirror, topic).await;
        if !now.is_empty() && now.iter().all(|s| *s == state) {
            println!("  {topic}: every partition {state}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until west's copy of `topic` holds exactly east's bytes.
async fn until_identical(east: &MemoryCluster, west: &MemoryCluster, topic: &str, partitions: i32) {
    loop {
        let same = (0..partitions).all(|p| {
            let source = east.log_bytes(topic, p);
            !source.is_empty() && source == west.log_bytes(topic, p)
        });
        if same {
            let ends: Vec<i64> = (0..partitions).map(|p| west.log_end(topic, p)).collect();
            println!("  {topic}: west holds east's bytes exactly, log ends {ends:?}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let network = MemoryNetwork::default();
    let east = network.cluster("east");
    let west = network.cluster("west");

    println!("east: topic orders, 3 partitions, 40 batches");
    east.create_plain_topic("orders", 3)?;
    for round in 0..40 {
        east.produce("orders", round % 3, 1 + (round as usize) % 7)?;
    }

    println!("west: the engine starts over west's host");
    let runtime = EngineRuntime::start(west.clone())?;
    let engine = runtime.engine().clone();

    println!(
        "west: CreateMirror dr (source {}), StartMirrorTopics orders",
        east.address()
    );
    west.create_mirror(
        "dr",
        BTreeMap::from([
            ("bootstrap.servers".to_string(), east.address()),
            ("mirror.source.cluster.id".to_string(), east.cluster_id()),
        ]),
    );
    ask(&engine, LoadMirror("dr".into())).await?;
    ask(
        &engine,
        StartTopic {
            mirror: "dr".into(),
            topic: "orders".into(),
            confirmed: Default::default(),
        },
    )
    .await?;
    until(&engine, "dr", "orders", MirrorState::Mirroring).await;
    until_identical(&east, &west, "orders", 3).await;

    println!("east: 9 more batches while mirroring");
    for round in 0..9 {
        east.produce("orders", round % 3, 2)?;
    }
    until_identical(&east, &west, "orders", 3).await;
    match west.produce("orders", 0, 1) {
        Err(refused) => println!("west: a producer is refused: {refused}"),
        Ok(()) => return Err("a mirror topic took a write".into()),
    }

    println!("east becomes unreachable; west fails over (StopMirrorTopics orders)");
    network.set_reachable(&east.address(), false);
    ask(
        &engine,
        ChangeTopic {
            mirror: "dr".into(),
            topic: "orders".into(),
            desired: Desired::Stopped,
            cut_timestamp_ms: None,
        },
    )
    .await?;
    until(&engine, "dr", "orders", MirrorState::Stopped).await;
    west.produce("orders", 0, 3)?;
    println!(
        "west: orders takes writes now; partition 0 ends at {} (east's ended at {})",
        west.log_end("orders", 0),
        east.log_end("orders", 0)
    );
    runtime.stop();
    Ok(())
}
