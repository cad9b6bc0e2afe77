//! How long a Stop of many mirror partitions takes to reach STOPPED in the engine itself
//! (`scripts/bench.sh stop_partitions`): `STOP_BENCH_PARTITIONS` (default 1,000) supervised
//! MirrorPartition actors on one actix system, brought to MIRRORING, then all told to stop at
//! once; the clock runs from the first ChangeDesired(Stopped) until every actor reports STOPPED.
//!
//! The ports answer from memory (state store, epoch bump, LSO truncation, PID reset) so the
//! figure is the engine's own cost (actor messages, the state machine, the KIP's step order), not
//! a log's or a network's.

mod support;

use actix::{Actor, Supervisor};
use kmirror_actors::actor::{BecomeLeader, ChangeDesired, DescribePartition, MirrorPartition};
use kmirror_actors::partition::{Desired, RetryPolicy};
use kmirror_protocol::state::MirrorState;
use std::time::{Duration, Instant};
use support::memory_ports::MemoryPorts;

fn main() {
    let count: usize = std::env::var("STOP_BENCH_PARTITIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let system = actix::System::new();
    let (to_mirroring, to_stopped) = system.block_on(async move {
        let started = Instant::now();
        let actors: Vec<_> = (0..count)
            .map(|_| {
                Supervisor::start(|_| {
                    MirrorPartition::new(
                        MemoryPorts::default(),
                        RetryPolicy::default(),
                        Box::new(|| 0.5),
                    )
                })
            })
            .collect();
        for actor in &actors {
            let _ = actor
                .send(BecomeLeader {
                    leader_epoch: 0,
                    desired: Desired::Mirroring,
                })
                .await;
        }
        wait_all(&actors, MirrorState::Mirroring).await;
        let to_mirroring = started.elapsed();
        let stopping = Instant::now();
        for actor in &actors {
            let _ = actor.send(ChangeDesired(Desired::Stopped)).await;
        }
        wait_all(&actors, MirrorState::Stopped).await;
        (to_mirroring, stopping.elapsed())
    });
    println!("stop_partitions: {count} mirror partition actors, in-memory ports");
    println!(
        "leadership to MIRRORING for all: {:.1} ms",
        to_mirroring.as_secs_f64() * 1e3
    );
    println!(
        "Stop to STOPPED for all:         {:.1} ms ({:.1} us per partition)",
        to_stopped.as_secs_f64() * 1e3,
        to_stopped.as_secs_f64() * 1e6 / count as f64
    );
}

async fn wait_all<A>(actors: &[actix::Addr<A>], state: MirrorState)
where
    A: Actor<Context = actix::Context<A>> + actix::Handler<DescribePartition>,
{
    loop {
        let mut all = true;
        for actor in actors {
            match actor.send(DescribePartition).await {
                Ok(s) if s.state == state => {}
                _ => {
                    all = false;
                    break;
                }
            }
        }
        if all {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
