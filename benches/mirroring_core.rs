//! Mirroring-core benchmarks (`scripts/bench.sh mirroring_core`).
//!
//! - transitions per second of one partition state machine, cycling through start, pause,
//!   resume, failover and restart with every completion fed back;
//! - replay of 1,000,000 `__mirror_state` records (decoded from their key and value bytes, as a
//!   loading shard reads them) into a coordinator shard.

use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use kmirror_actors::coordinator::Shard;
use kmirror_actors::partition::{Desired, Effect, Env, Input, Partition, RetryPolicy, transition};
use kmirror_protocol::messages::{
    LastMirrorEpochsKey, LastMirrorEpochsValue, MirrorPartitionStateKey, MirrorPartitionStateValue,
    last_mirror_epochs_value,
};
use kmirror_protocol::records::CoordinatorRecord;
use kmirror_protocol::state::MirrorState;
use std::hint::black_box;
use uuid::Uuid;

/// Feeds `input`, then completes every asynchronous effect successfully until none is left;
/// returns the number of transitions taken.
fn drive(p: &mut Partition, input: Input, env: &Env<'_>) -> u64 {
    let mut queue = vec![input];
    let mut transitions = 0;
    while let Some(input) = queue.pop() {
        let step = transition(p, &input, env);
        transitions += 1;
        *p = step.partition;
        for effect in step.effects {
            queue.push(match effect {
                Effect::LoadState { op } => Input::StateLoaded { op, stored: None },
                Effect::PersistState { op, .. } => Input::StatePersisted { op, result: Ok(()) },
                Effect::LookUpLme { op } => Input::LmeLookedUp { op, result: Ok(-1) },
                Effect::TruncateForLme { op, .. } => Input::Truncated { op, result: Ok(()) },
                Effect::AwaitIsr { op } => Input::IsrCaughtUp { op },
                Effect::DetachFetcher { op } => Input::FetcherDetached { op },
                Effect::BumpLeaderEpoch { op, .. } => Input::EpochBumped { op, result: Ok(50) },
                Effect::TruncateToLso { op } => Input::TruncatedToLso {
                    op,
                    result: Ok(Some(3)),
                },
                Effect::PersistLme { op, .. } => Input::LmePersisted { op, result: Ok(()) },
                Effect::AppendPidReset { op, .. } => Input::PidResetAppended { op, result: Ok(()) },
                Effect::ScheduleRetry { op, .. } => Input::TimerFired { op },
                Effect::AttachFetcher { .. }
                | Effect::RaiseFetcherEpoch { .. }
                | Effect::SetReadOnly(_) => continue,
            });
        }
    }
    transitions
}

fn state_machine(c: &mut Criterion) {
    let policy = RetryPolicy::default();
    let env = Env {
        random: 0.5,
        retry: &policy,
    };
    let cycle = |p: &mut Partition| {
        let mut n = drive(
            p,
            Input::BecameLeader {
                leader_epoch: 40,
                desired: Desired::Mirroring,
            },
            &env,
        );
        for i in 0..10 {
            n += drive(p, Input::BatchesAppended { source_epoch: i }, &env);
        }
        n += drive(p, Input::DesiredChanged(Desired::Paused), &env);
        n += drive(p, Input::DesiredChanged(Desired::Mirroring), &env);
        n += drive(p, Input::DesiredChanged(Desired::Stopped), &env);
        n += drive(p, Input::DesiredChanged(Desired::Mirroring), &env);
        n
    };
    let per_cycle = cycle(&mut Partition::default());
    let mut group = c.benchmark_group("partition_state_machine");
    group.throughput(Throughput::Elements(per_cycle));
    group.bench_function("start_pause_resume_stop_restart_cycle", |b| {
        b.iter(|| {
            let mut p = Partition::default();
            black_box(cycle(&mut p))
        })
    });
    group.finish();
}

const RECORDS: usize = 1_000_000;

/// 1M records as a shard's partition holds them: state changes of 10,000 mirror partitions and
/// an LME record every 100 records.
fn records() -> Vec<(Bytes, Option<Bytes>)> {
    let states = [
        MirrorState::Preparing,
        MirrorState::Mirroring,
        MirrorState::Paused,
        MirrorState::Stopping,
    ];
    (0..RECORDS)
        .map(|i| {
            let record = if i % 100 == 99 {
                CoordinatorRecord::LastMirrorEpochs {
                    key: LastMirrorEpochsKey {
                        mirror_name: "dr".into(),
                    },
                    value: Some(LastMirrorEpochsValue {
                        topics: vec![last_mirror_epochs_value::Topic {
                            name: format!("topic-{}", i % 10),
                            partitions: (0..10)
                                .map(|p| last_mirror_epochs_value::Partition {
                                    partition_index: p,
                                    last_mirror_epoch: i as i32,
                                    ..Default::default()
                                })
                                .collect(),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                }
            } else {
                CoordinatorRecord::MirrorPartitionState {
                    key: MirrorPartitionStateKey {
                        mirror_name: "dr".into(),
                        topic_id: Uuid::from_u128((i % 100) as u128),
                        partition: (i / 100 % 100) as i32,
                    },
                    value: Some(MirrorPartitionStateValue {
                        state: states[i % 4].wire_value(),
                        leader_epoch: (i / 10_000) as i32,
                        ..Default::default()
                    }),
                }
            };
            (
                record.key_bytes().expect("encodes"),
                record.value_bytes().expect("encodes"),
            )
        })
        .collect()
}

fn coordinator_replay(c: &mut Criterion) {
    let log = records();
    let mut group = c.benchmark_group("coordinator_replay");
    group
        .throughput(Throughput::Elements(RECORDS as u64))
        .sample_size(10);
    group.bench_function("decode_and_replay_1M_records", |b| {
        b.iter_batched(
            || Shard::new(0, 1),
            |mut shard| {
                for (key, value) in &log {
                    let record =
                        CoordinatorRecord::decode(key.clone(), value.clone()).expect("decodes");
                    shard.replay(&record);
                }
                shard.loaded();
                shard
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, state_machine, coordinator_replay);
criterion_main!(benches);
