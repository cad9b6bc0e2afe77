//! Deterministic simulation of mirroring between two clusters, A and B, from one seed.
//!
//! Each cluster has a partition log (real record batches), a controller holding the partition's
//! leader epoch, and a `__mirror_state` coordinator shard rebuilt by replaying its records. One
//! cluster is written to; the other mirrors it through the pure partition state machine, whose
//! effects this driver executes against the in-memory host. Each step picks at random: produce
//! (plain or transactional, commit or abort), a source leader change, an unclean election that
//! cuts the source's tail, the completion of any pending effect (so completions interleave in
//! every order), a fetch round, a destination leader change or restart (state rebuilt by replay),
//! coordinator write failures, an unreachable source, pause and resume, failover (stop), and
//! failback (the old source starts mirroring from the new one).
//!
//! Invariants checked after every step:
//! - DLE >= SLE while mirroring: no mirrored batch carries an epoch above the destination's;
//! - after a fetch, the destination log equals the source log over the mirrored range (bytes);
//! - after PREPARING's truncation, no batch has an epoch above the LME;
//! - what a partition held when it reached STOPPED stays in its log while it is writable;
//! - the state in the coordinator shard equals the state the partition last persisted.
//!
//! A final quiet phase (no faults) must bring the mirror back in line with its source.
//! `SIM_SEEDS=<n>` sets how many seeds run (default 2,000); `SIM_SEED=<n>` replays one.

use kmirror_actors::coordinator::{PartitionKey, Shard, StateWrite};
use kmirror_actors::engine::gap_policy::GapPolicy;
use kmirror_actors::epoch;
use kmirror_actors::host::{self, FetchProgress, FetchResponse, MirrorLog};
use kmirror_actors::memory::{MemoryController, MemoryCoordinatorLog, MemoryLog, MemorySource};
use kmirror_actors::partition::{
    Cause, Desired, Effect, Env, Input, Outcome, Partition, Phase, RetryPolicy, StoredState,
    transition,
};
use kmirror_protocol::batch::RecordBatch;
use kmirror_protocol::state::MirrorState;
use uuid::Uuid;

const TOPIC: &str = "orders";
const STEPS: usize = 250;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// PREPARING's truncation for an LME (docs/design.md §3), as the engine's partition ports do
/// it: the alignment the engine decides, the source's log start asked only for a full
/// truncation.
fn align_for_lme(log: &mut MemoryLog, source: &MemorySource<'_>, lme: i32) -> Result<(), Cause> {
    match epoch::alignment_for_lme(lme, &log.epoch_history(), log.log_end_offset()) {
        epoch::Alignment::TruncateFully => {
            Ok(log.truncate_fully_and_start_at(source.log_start_offset()?)?)
        }
        epoch::Alignment::TruncateTo(offset) => Ok(log.truncate_to(offset)?),
        epoch::Alignment::KeepAll => Ok(()),
    }
}

/// One fetch round of a mirror fetcher for one partition, as the engine's fetcher runs it: the
/// fetch it plans, the source's answer, the answer applied (the source's log start asked where
/// a truncation needs it).
fn fetch_round(
    log: &mut MemoryLog,
    source: &MemorySource<'_>,
    destination_leader_epoch: i32,
    max_bytes: usize,
) -> Result<FetchProgress, Cause> {
    let request = host::next_fetch(log, max_bytes);
    let response = source.fetch(&request)?;
    let source_start = match response {
        FetchResponse::Diverging { epoch, .. } if epoch < 0 => Some(source.log_start_offset()?),
        _ => None,
    };
    host::apply_fetch(
        log,
        source_start,
        &request,
        response,
        destination_leader_epoch,
        GapPolicy::Continue,
    )
}

enum Pending {
    Remote(Effect),
    Done(Input),
}

/// A cluster's mirror of the other one.
struct Mirror {
    name: String,
    partition: Partition,
    /// Work issued and not yet completed: remote effects run when their completion is
    /// delivered; local log effects already ran (a partition's log operations run in issue
    /// order) and only their completion waits.
    pending: Vec<Pending>,
    /// The destination leader epoch the running fetcher was told (attached with, raised by
    /// the partition), `None` while it does not run: it holds back batches above it.
    fetcher: Option<i32>,
    read_only: bool,
    /// The LME PREPARING truncated for, checked when the truncation completes.
    lme: Option<i32>,
}

impl Mirror {
    /// A fresh incarnation: nothing in flight, read-only until told otherwise.
    fn new(name: String) -> Mirror {
        Mirror {
            name,
            partition: Partition::default(),
            pending: Vec::new(),
            fetcher: None,
            read_only: true,
            lme: None,
        }
    }
}

struct Cluster {
    id: String,
    log: MemoryLog,
    controller: MemoryController,
    coordinator: MemoryCoordinatorLog,
    shard: Shard,
    mirror: Option<Mirror>,
    /// What the log held when its mirror reached STOPPED, while it stays writable.
    stopped_prefix: Option<Vec<RecordBatch>>,
}

impl Cluster {
    fn new(id: &str) -> Cluster {
        let mut shard = Shard::new(0, 1);
        shard.loaded();
        Cluster {
            id: id.into(),
            log: MemoryLog::default(),
            controller: MemoryController { leader_epoch: 0 },
            coordinator: MemoryCoordinatorLog::default(),
            shard,
            mirror: None,
            stopped_prefix: None,
        }
    }

    fn key(&self, mirror: &str) -> PartitionKey {
        PartitionKey {
            mirror: mirror.into(),
            topic_id: Uuid::from_u128(0x5eed),
            partition: 0,
        }
    }

    fn write_state(
        &mut self,
        mirror: &str,
        stored: &StoredState,
        lme: Option<i32>,
    ) -> Result<(), Cause> {
        let write = StateWrite {
            topic: TOPIC.into(),
            topic_id: Uuid::from_u128(0x5eed),
            partition: 0,
            stored: stored.clone(),
            lme,
        };
        let (records, codes) = self.shard.write(mirror, &[write]);
        if let Some(code) = codes.into_iter().find(|c| !c.is_ok()) {
            return Err(Cause::retryable(format!("coordinator answered {code}")));
        }
        self.coordinator.append(&records)?;
        for r in &records {
            self.shard.replay(r);
        }
        Ok(())
    }
}

struct Sim {
    rng: Rng,
    clusters: [Cluster; 2],
    policy: RetryPolicy,
    source_unreachable: bool,
    step: usize,
    /// `SIM_TRACE=1` prints every input and fetch.
    trace: bool,
}

/// The mirror cluster and its source, borrowed apart.
fn split(clusters: &mut [Cluster; 2], m: usize) -> (&mut Cluster, &Cluster) {
    let (a, b) = clusters.split_at_mut(1);
    if m == 0 {
        (&mut a[0], &b[0])
    } else {
        (&mut b[0], &a[0])
    }
}

fn source_of<'a>(source: &'a Cluster, asking: &str, unreachable: bool) -> MemorySource<'a> {
    let mut s = MemorySource {
        cluster_id: source.id.clone(),
        log: Some(&source.log),
        ..MemorySource::default()
    };
    if let Some(lme) = source
        .shard
        .last_mirrored_epoch(&format!("from-{asking}"), TOPIC, 0)
    {
        s.lmes.insert(asking.to_string(), lme);
    }
    if unreachable {
        s.unreachable = Some("source broker unreachable".into());
    }
    s
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut a = Cluster::new("A");
        a.controller.leader_epoch = 1;
        let mut sim = Sim {
            rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
            clusters: [a, Cluster::new("B")],
            policy: RetryPolicy::default(),
            source_unreachable: false,
            step: 0,
            trace: std::env::var("SIM_TRACE").is_ok(),
        };
        sim.start_mirror(1, Desired::Mirroring);
        sim
    }

    fn mirror_index(&self) -> Option<usize> {
        (0..2).find(|i| self.clusters[*i].mirror.is_some())
    }

    fn start_mirror(&mut self, m: usize, desired: Desired) {
        let name = format!("from-{}", self.clusters[1 - m].id);
        let c = &mut self.clusters[m];
        c.stopped_prefix = None;
        c.controller.leader_epoch += 1;
        c.mirror = Some(Mirror::new(name));
        let epoch = c.controller.leader_epoch;
        self.input(
            m,
            Input::BecameLeader {
                leader_epoch: epoch,
                desired,
            },
        );
    }

    /// Feeds an input to cluster `m`'s partition; runs immediate effects, queues the others.
    fn input(&mut self, m: usize, input: Input) -> Outcome {
        let Some(mirror) = self.clusters[m].mirror.as_mut() else {
            return Outcome::Stale;
        };
        let env = Env {
            random: self.rng.unit(),
            retry: &self.policy,
        };
        let step = transition(&mirror.partition, &input, &env);
        if self.trace {
            eprintln!(
                "[{}] {} <- {input:?} => {:?} {:?} {:?}",
                self.step,
                self.clusters[m].id,
                step.outcome,
                step.partition.phase(),
                step.effects
            );
        }
        let Some(mirror) = self.clusters[m].mirror.as_mut() else {
            return Outcome::Stale;
        };
        mirror.partition = step.partition;
        for effect in step.effects {
            let local = self.run_local(m, effect);
            if let Some(mirror) = self.clusters[m].mirror.as_mut() {
                match local {
                    Ok(Some(done)) => mirror.pending.push(Pending::Done(done)),
                    Ok(None) => {}
                    Err(remote) => mirror.pending.push(Pending::Remote(remote)),
                }
            }
        }
        step.outcome
    }

    /// Runs an effect that only touches this cluster's log or fetcher, at once; returns its
    /// completion (if any), or the effect back when it is remote.
    fn run_local(&mut self, m: usize, effect: Effect) -> Result<Option<Input>, Effect> {
        let unreachable = self.source_unreachable;
        let (c, source) = split(&mut self.clusters, m);
        let src = source_of(source, &c.id, unreachable);
        let Some(mirror) = c.mirror.as_mut() else {
            return Ok(None);
        };
        Ok(Some(match effect {
            Effect::AttachFetcher { leader_epoch } => {
                mirror.fetcher = Some(leader_epoch);
                return Ok(None);
            }
            Effect::RaiseFetcherEpoch { leader_epoch } => {
                mirror.fetcher = mirror.fetcher.map(|told| told.max(leader_epoch));
                return Ok(None);
            }
            Effect::SetReadOnly(flag) => {
                mirror.read_only = flag;
                return Ok(None);
            }
            Effect::DetachFetcher { op } => {
                mirror.fetcher = None;
                Input::FetcherDetached { op }
            }
            Effect::AwaitIsr { op } => Input::IsrCaughtUp { op },
            Effect::TruncateForLme { op, lme } => {
                mirror.lme = Some(lme);
                let result = align_for_lme(&mut c.log, &src, lme);
                if result.is_ok() && lme >= 0 {
                    let above: Vec<i32> = c
                        .log
                        .batches()
                        .iter()
                        .map(RecordBatch::partition_leader_epoch)
                        .filter(|e| *e > lme)
                        .collect();
                    assert!(
                        above.is_empty(),
                        "after PREPARING, epochs {above:?} exceed the LME {lme}"
                    );
                }
                Input::Truncated { op, result }
            }
            Effect::TruncateToLso { op } => Input::TruncatedToLso {
                op,
                result: host::truncate_to_lso(&mut c.log, &c.id, None).map(|(lme, _)| lme),
            },
            Effect::AppendPidReset { op, leader_epoch } => Input::PidResetAppended {
                op,
                result: c
                    .log
                    .append_pid_reset(leader_epoch, &src.cluster_id)
                    .map_err(Cause::from),
            },
            remote => return Err(remote),
        }))
    }

    /// Delivers pending item `i` of cluster `m`: a remote effect runs now, then its completion
    /// is fed to the partition.
    fn complete(&mut self, m: usize, i: usize) {
        let unreachable = self.source_unreachable;
        let Some(mirror) = self.clusters[m].mirror.as_mut() else {
            return;
        };
        let effect = match mirror.pending.remove(i) {
            Pending::Done(input) => {
                self.input(m, input);
                return;
            }
            Pending::Remote(effect) => effect,
        };
        let name = mirror.name.clone();
        let (c, source) = split(&mut self.clusters, m);
        let src = source_of(source, &c.id, unreachable);
        let input = match effect {
            Effect::LoadState { op } => Input::StateLoaded {
                op,
                stored: c.shard.state_of(&c.key(&name)).cloned(),
            },
            Effect::PersistState { op, stored } => Input::StatePersisted {
                op,
                result: c.write_state(&name, &stored, None),
            },
            Effect::LookUpLme { op } => Input::LmeLookedUp {
                op,
                result: src.last_mirrored_epoch(&c.id),
            },
            Effect::BumpLeaderEpoch {
                op,
                min_leader_epoch,
            } => {
                let min = min_leader_epoch
                    .unwrap_or_else(|| c.log.epoch_history().last().map_or(-1, |(e, _)| *e));
                Input::EpochBumped {
                    op,
                    result: c.controller.bump_leader_epoch(min),
                }
            }
            Effect::PersistLme { op, lme } => {
                let stored = c.shard.state_of(&c.key(&name)).cloned();
                let result = match stored {
                    Some(s) => c.write_state(&name, &s, lme),
                    None => Err(Cause::retryable("no state to attach the LME to")),
                };
                Input::LmePersisted { op, result }
            }
            Effect::ScheduleRetry { op, .. } => Input::TimerFired { op },
            local => panic!("{local:?} runs when issued"),
        };
        self.input(m, input);
    }

    /// One fetch round of cluster `m`'s mirror, if its fetcher runs.
    fn fetch(&mut self, m: usize) {
        let unreachable = self.source_unreachable;
        let (c, source) = split(&mut self.clusters, m);
        let Some(mirror) = c.mirror.as_ref() else {
            return;
        };
        let Some(dle) = mirror.fetcher else {
            return;
        };
        if !matches!(mirror.partition.phase(), Phase::Mirroring { .. }) {
            return;
        }
        let src = source_of(source, &c.id, unreachable);
        let before = c.log.log_end_offset();
        let progress = fetch_round(&mut c.log, &src, dle, 600);
        if self.trace {
            eprintln!(
                "[{}] {} fetch at {before} (dle {dle}, epochs {:?}) from {} (end {}, lso {}, epochs {:?}): {progress:?}",
                self.step,
                c.id,
                c.log.epoch_history(),
                source.id,
                source.log.log_end_offset(),
                source.log.last_stable_offset(),
                source.log.epoch_history()
            );
        }
        let input = match progress {
            Ok(FetchProgress::Appended { source_epoch }) => {
                let n = c.log.batches().len();
                let differs =
                    (0..n).find(|i| source.log.batches().get(*i) != c.log.batches().get(*i));
                assert!(
                    differs.is_none(),
                    "after a fetch the destination differs from the source at batch {differs:?}: {:?} vs {:?}",
                    differs.and_then(|i| c.log.batches().get(i)),
                    differs.and_then(|i| source.log.batches().get(i))
                );
                Input::BatchesAppended { source_epoch }
            }
            Ok(FetchProgress::HeldBack { source_epoch }) => Input::SourceEpochSeen { source_epoch },
            Ok(FetchProgress::Idle | FetchProgress::Truncated { .. }) => return,
            Err(e) => Input::FetchFailed(e),
        };
        self.input(m, input);
    }

    fn produce(&mut self, w: usize) {
        let c = &mut self.clusters[w];
        let epoch = c.controller.leader_epoch;
        let open = c.log.open_transactions();
        let pid = self.rng.below(3) as i64;
        match self.rng.below(10) {
            0..=5 => c.log.produce(1 + self.rng.below(4), epoch, -1, false),
            6 | 7 => c.log.produce(1 + self.rng.below(3), epoch, pid, true),
            _ if open.contains_key(&pid) => c.log.append_marker(pid, self.rng.chance(50), epoch),
            _ => c.log.produce(1, epoch, -1, false),
        }
    }

    fn step(&mut self) {
        self.step += 1;
        let m = self.mirror_index();
        let writable: Vec<usize> = (0..2)
            .filter(|i| self.clusters[*i].mirror.is_none() || self.mirror_is_stopped(*i))
            .collect();
        match self.rng.below(100) {
            0..=24 => {
                if let Some(&w) = writable.get(self.rng.below(writable.len())) {
                    self.produce(w);
                }
            }
            25..=54 => {
                if let Some(m) = m {
                    let n = self.clusters[m]
                        .mirror
                        .as_ref()
                        .map_or(0, |x| x.pending.len());
                    if n > 0 {
                        let i = self.rng.below(n);
                        self.complete(m, i);
                    }
                }
            }
            55..=74 => {
                if let Some(m) = m {
                    self.fetch(m);
                }
            }
            75..=77 => {
                if let Some(&w) = writable.get(self.rng.below(writable.len())) {
                    self.clusters[w].controller.leader_epoch += 1;
                }
            }
            78 => {
                // Unclean election on a writable cluster: its tail is lost and the epoch moves.
                if let Some(&w) = writable.first() {
                    let c = &mut self.clusters[w];
                    let end = c.log.log_end_offset();
                    let cut = end - self.rng.below(6) as i64;
                    if c.stopped_prefix.is_none() {
                        let _ = c.log.truncate_to(cut.max(c.log.log_start_offset()));
                        c.controller.leader_epoch += 1;
                    }
                }
            }
            79..=80 => {
                if let Some(m) = m {
                    let c = &mut self.clusters[m];
                    c.controller.leader_epoch += 1;
                    let epoch = c.controller.leader_epoch;
                    let desired = c
                        .mirror
                        .as_ref()
                        .map_or(Desired::Mirroring, |x| x.partition.desired());
                    if let Some(x) = c.mirror.as_mut() {
                        // The old leadership's in-flight work dies with it.
                        x.pending.clear();
                    }
                    self.input(
                        m,
                        Input::BecameLeader {
                            leader_epoch: epoch,
                            desired,
                        },
                    );
                }
            }
            81 => {
                if let Some(m) = m {
                    self.restart(m);
                }
            }
            82..=85 => {
                let failing = self.rng.chance(20);
                self.clusters
                    .iter_mut()
                    .for_each(|c| c.coordinator.failing = failing);
            }
            86 => self.source_unreachable = self.rng.chance(30),
            87..=89 => {
                // Pause and resume while mirroring; a restart after failover is the failback event.
                if let Some(m) = m
                    && self.clusters[m].stopped_prefix.is_none()
                {
                    let d = if self.rng.chance(50) {
                        Desired::Paused
                    } else {
                        Desired::Mirroring
                    };
                    self.input(m, Input::DesiredChanged(d));
                }
            }
            90..=92 => {
                if let Some(m) = m {
                    self.input(m, Input::DesiredChanged(Desired::Stopped));
                }
            }
            _ => {
                // Failback: the old source starts mirroring from the stopped, now writable, one.
                if let Some(m) = m
                    && self.mirror_is_stopped(m)
                {
                    self.clusters[1 - m].mirror = None;
                    self.clusters[m].mirror = None;
                    self.start_mirror(1 - m, Desired::Mirroring);
                }
            }
        }
        self.record_stop();
        self.check();
    }

    fn mirror_is_stopped(&self, i: usize) -> bool {
        self.clusters[i]
            .mirror
            .as_ref()
            .is_some_and(|x| x.partition.phase() == &Phase::Stopped)
    }

    fn restart(&mut self, m: usize) {
        let c = &mut self.clusters[m];
        let mut shard = Shard::new(0, 1);
        for r in &c.coordinator.records {
            shard.replay(r);
        }
        shard.loaded();
        assert_eq!(shard, c.shard, "a replay rebuilds the same shard");
        c.shard = shard;
        let Some(old) = c.mirror.take() else { return };
        let desired = old.partition.desired();
        c.mirror = Some(Mirror::new(old.name));
        let epoch = c.controller.leader_epoch;
        self.input(
            m,
            Input::BecameLeader {
                leader_epoch: epoch,
                desired,
            },
        );
    }

    fn record_stop(&mut self) {
        for i in 0..2 {
            if self.mirror_is_stopped(i) && self.clusters[i].stopped_prefix.is_none() {
                let c = &mut self.clusters[i];
                c.stopped_prefix = Some(c.log.batches().to_vec());
            }
        }
    }

    fn check(&self) {
        for c in &self.clusters {
            if let Some(prefix) = &c.stopped_prefix {
                assert!(
                    c.log.batches().len() >= prefix.len()
                        && c.log.batches()[..prefix.len()] == prefix[..],
                    "cluster {} lost data it held when STOPPED",
                    c.id
                );
            }
            let Some(mirror) = &c.mirror else { continue };
            if matches!(mirror.partition.phase(), Phase::Mirroring { .. }) {
                let dle = c.controller.leader_epoch;
                let max = c
                    .log
                    .batches()
                    .iter()
                    .map(RecordBatch::partition_leader_epoch)
                    .max()
                    .unwrap_or(-1);
                assert!(
                    max <= dle,
                    "cluster {}: DLE {dle} below a mirrored epoch {max}",
                    c.id
                );
            }
            if !matches!(mirror.partition.phase(), Phase::Loading(_)) {
                let stored = c
                    .shard
                    .state_of(&c.key(&mirror.name))
                    .map_or(MirrorState::Unknown, |s| s.state);
                assert_eq!(
                    stored,
                    mirror.partition.persisted(),
                    "cluster {}: shard and partition disagree",
                    c.id
                );
            }
            if mirror.partition.phase() == &Phase::Stopped {
                assert!(!mirror.read_only, "a STOPPED partition is writable");
            }
        }
    }

    /// Faults off; deliver everything until the mirror catches up.
    fn quiesce(&mut self) {
        self.source_unreachable = false;
        self.clusters
            .iter_mut()
            .for_each(|c| c.coordinator.failing = false);
        let Some(m) = self.mirror_index() else { return };
        for _ in 0..2000 {
            let n = self.clusters[m]
                .mirror
                .as_ref()
                .map_or(0, |x| x.pending.len());
            if n > 0 {
                self.complete(m, 0);
            } else {
                self.fetch(m);
            }
            self.record_stop();
            self.check();
        }
        let c = &self.clusters[m];
        let mirror = c.mirror.as_ref().expect("still a mirror");
        let source = &self.clusters[1 - m];
        match mirror.partition.phase() {
            Phase::Mirroring { .. } => {
                // Caught up to the source's LSO, holding exactly the source's batches. (It may
                // hold more than the LSO: an unclean election can cut a transaction marker the
                // mirror already read past, moving the source's LSO back.)
                let lso = source.log.last_stable_offset();
                let n = c.log.batches().len();
                assert!(
                    source.log.batches().len() >= n
                        && source.log.batches()[..n] == c.log.batches()[..],
                    "after quiescing, the mirror is not a prefix of the source"
                );
                assert!(
                    c.log.log_end_offset() >= lso,
                    "after quiescing, the mirror lags the source's LSO {lso}"
                );
            }
            Phase::Paused | Phase::Stopped => {}
            // Stopped before any state was recorded: an ordinary writable topic.
            Phase::Unknown if mirror.partition.desired() == Desired::Stopped => {
                assert!(!mirror.read_only)
            }
            Phase::Failed { failure, .. } => assert!(
                failure.retry_attempt < 0 || failure.retry_attempt > self.policy.max_attempts,
                "a retryable failure was left waiting: {failure:?}"
            ),
            other => panic!("the mirror is stuck in {other:?} with nothing pending"),
        }
    }
}

fn run(seed: u64) {
    let mut sim = Sim::new(seed);
    for _ in 0..STEPS {
        sim.step();
    }
    sim.quiesce();
}

#[test]
fn mirroring_survives_random_faults_and_interleavings() {
    if let Ok(seed) = std::env::var("SIM_SEED") {
        run(seed.parse().expect("SIM_SEED is a number"));
        return;
    }
    let seeds: u64 = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    for seed in 0..seeds {
        let outcome = std::panic::catch_unwind(|| run(seed));
        if let Err(e) = outcome {
            let message = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!(
                "seed {seed} failed: {message}\nreplay with SIM_SEED={seed} cargo test -p kmirror-actors --test simulation"
            );
        }
    }
}

/// Issue 17 item 11: an answer to a fetch planned before the log changed (truncated while the
/// fetch was in flight) is stale and changes nothing: no hole, no truncation of what is not
/// there.
#[test]
fn a_stale_fetch_answer_changes_nothing() {
    let mut source = MemoryLog::default();
    for _ in 0..6 {
        source.produce(3, 1, -1, false);
    }
    let memory = MemorySource {
        cluster_id: "a".into(),
        log: Some(&source),
        lmes: Default::default(),
        unreachable: None,
    };
    let mut destination = MemoryLog::default();
    for _ in 0..2 {
        // One batch a round.
        fetch_round(&mut destination, &memory, 10, 1).expect("a round");
    }
    assert_eq!(destination.log_end_offset(), 6);
    let planned = host::next_fetch(&destination, 1 << 20);
    let answer = memory.fetch(&planned).expect("answered");
    // Meanwhile the log is cut back (a PREPARING or STOPPING truncation).
    destination.truncate_to(3).expect("truncated");
    let before = destination.bytes();
    let progress = host::apply_fetch(
        &mut destination,
        Some(0),
        &planned,
        answer,
        10,
        GapPolicy::Continue,
    )
    .expect("applied");
    assert_eq!(progress, FetchProgress::Idle);
    assert_eq!(
        destination.bytes(),
        before,
        "a stale answer left the log as it was"
    );
    assert_eq!(destination.log_end_offset(), 3);
}

/// DLE >= SLE: the source leader epoch in an answer counts, not only its batches' epochs. An
/// idle answer whose SLE comes within the threshold asks for a bump at SLE + 10; batches of an
/// older epoch report the SLE.
#[test]
fn the_source_leader_epoch_drives_the_epoch_bump() {
    let mut source = MemoryLog::default();
    for _ in 0..3 {
        source.produce(2, 1, -1, false);
    }
    let answer = |records: bytes::Bytes, source_leader_epoch| FetchResponse::Records {
        records,
        high_watermark: 3,
        source_leader_epoch: Some(source_leader_epoch),
    };
    let mut destination = MemoryLog::default();
    let planned = host::next_fetch(&destination, 1 << 20);
    let progress = host::apply_fetch(
        &mut destination,
        Some(0),
        &planned,
        answer(bytes::Bytes::from(source.bytes()), 8),
        10,
        GapPolicy::Continue,
    )
    .expect("applied");
    assert_eq!(progress, FetchProgress::Appended { source_epoch: 8 });
    let planned = host::next_fetch(&destination, 1 << 20);
    let idle = |sle| {
        host::apply_fetch(
            &mut destination.clone(),
            Some(0),
            &planned,
            answer(bytes::Bytes::new(), sle),
            10,
            GapPolicy::Continue,
        )
        .expect("applied")
    };
    assert_eq!(
        idle(5),
        FetchProgress::Idle,
        "far below the destination's 10"
    );
    assert_eq!(idle(7), FetchProgress::HeldBack { source_epoch: 7 });
    assert_eq!(epoch::bump_for(7, 10), Some(17));
}

/// `mirror.source.gap.policy=fail`: a partition whose next offsets the source deleted before
/// they were copied fails with the range, its log as it was; `continue` counts them and goes on
/// from the source's log start.
#[test]
fn a_gap_in_the_source_fails_the_partition_or_is_counted() {
    let mut source = MemoryLog::default();
    for _ in 0..4 {
        source.produce(3, 1, -1, false);
    }
    let mut destination = MemoryLog::default();
    let round = |destination: &mut MemoryLog, source: &MemoryLog, policy| {
        let memory = MemorySource {
            cluster_id: "a".into(),
            log: Some(source),
            lmes: Default::default(),
            unreachable: None,
        };
        let request = host::next_fetch(destination, 3 * 60);
        let response = memory.fetch(&request)?;
        host::apply_fetch(destination, None, &request, response, 10, policy)
    };
    round(&mut destination, &source, GapPolicy::Continue).expect("the first batch");
    assert_eq!(destination.log_end_offset(), 3);
    let before = destination.bytes();
    source.delete_records(9);
    let failed = round(&mut destination, &source, GapPolicy::Fail).expect_err("a gap");
    assert!(!failed.retryable, "{failed:?}");
    assert!(
        failed.message.contains("offsets 3 to 8"),
        "{}",
        failed.message
    );
    assert_eq!(destination.bytes(), before, "nothing changed");
    let counted = round(&mut destination, &source, GapPolicy::Continue).expect("counted");
    assert_eq!(
        counted,
        FetchProgress::Truncated {
            records: 3,
            skipped: Some((3, 9))
        }
    );
    assert_eq!(destination.log_start_offset(), 9);
}

/// Engine review finding 4: a source whose log start was moved inside a batch (DeleteRecords)
/// answers a fetch from that start with the whole batch, beginning below it. The mirror, out of
/// range, restarts its empty log there and appends the batch, as Kafka's followers do. Failed
/// before the fix: the batch overlapping the log end was refused and the partition failed for
/// good.
#[test]
fn a_source_log_start_inside_a_batch_is_mirrored() {
    let mut source = MemoryLog::default();
    for _ in 0..4 {
        source.produce(3, 1, -1, false);
    }
    source.delete_records(4);
    let memory = MemorySource {
        cluster_id: "a".into(),
        log: Some(&source),
        lmes: Default::default(),
        unreachable: None,
    };
    // Behind the source's log start: out of range, restarted there.
    let mut destination = MemoryLog::default();
    let progress = fetch_round(&mut destination, &memory, 10, 1 << 20).expect("out of range");
    // The offsets the source deleted before they were copied are counted.
    assert_eq!(
        progress,
        FetchProgress::Truncated {
            records: 0,
            skipped: Some((0, 4))
        }
    );
    assert_eq!(destination.log_start_offset(), 4);
    let progress = fetch_round(&mut destination, &memory, 10, 1 << 20).expect("appended");
    assert!(
        matches!(progress, FetchProgress::Appended { .. }),
        "{progress:?}"
    );
    assert_eq!(destination.log_start_offset(), 3);
    assert_eq!(destination.log_end_offset(), 12);
    assert_eq!(
        destination.bytes(),
        source.bytes(),
        "the batches are the source's, byte for byte"
    );
}

/// What a restart counts and what a broker opens writable (docs/failover.md): the records
/// written from the first barrier on, over two failovers; a stopped topic's partition opens
/// writable only when its log holds a barrier (engine review finding 12), a mirrored one never.
#[test]
fn local_writes_count_from_the_first_barrier() {
    let mut log = MemoryLog::default();
    for _ in 0..3 {
        log.produce(4, 2, -1, false);
    }
    let here = "dst";
    assert_eq!(host::local_records(&log).expect("read"), 0);
    assert_eq!(host::first_barrier(&log).expect("read"), None);
    assert!(host::opens_read_only(Some("m.removed"), &log, here).expect("read"));
    assert!(host::opens_read_only(Some("m"), &log, here).expect("read"));
    assert!(!host::opens_read_only(None, &log, here).expect("read"));

    log.append_pid_reset(12, "src").expect("barrier");
    assert_eq!(host::first_barrier(&log).expect("read"), Some(12));
    assert_eq!(
        host::own_failover_barrier(&log, here).expect("read"),
        Some(12)
    );
    assert!(!host::opens_read_only(Some("m.removed"), &log, here).expect("read"));
    assert!(host::opens_read_only(Some("m.paused"), &log, here).expect("read"));
    // A barrier mirrored back in a failback fences this cluster's own producers: not a
    // failover of this cluster's.
    assert_eq!(host::own_failover_barrier(&log, "src").expect("read"), None);
    assert!(host::opens_read_only(Some("m.removed"), &log, "src").expect("read"));
    log.produce(5, 12, 7, false);
    log.produce(5, 12, 7, false);
    assert_eq!(host::local_records(&log).expect("read"), 10);
    // A restart that failed before its cut, then a second stop: its barrier does not hide the
    // first failover's writes.
    log.append_pid_reset(13, "src").expect("second barrier");
    log.produce(2, 13, 7, false);
    assert_eq!(host::local_records(&log).expect("read"), 12);
    // A cut inside the local writes removes only those after it; one below them all.
    assert_eq!(host::local_records_from(&log, 18).expect("read"), 7);
    assert_eq!(host::local_records_from(&log, 0).expect("read"), 12);
}

/// Found by the failover nemesis (seed 1796286075203145862, a SIGKILL in STOPPING): a broker
/// killed after its stop's barrier but before STOPPED was recorded opens the partition writable
/// (the barrier proves the failover's data final) and takes writes; STOPPING then runs again.
/// It must neither cut those writes (an open local transaction before them would hold the LSO
/// back) nor append a second barrier after them, and it records the LME from before the
/// barrier. Failed before the fix: a second barrier followed the writes, so they sat "before
/// STOPPED" in the log.
#[test]
fn stopping_again_after_its_barrier_keeps_the_writes_since() {
    let mut log = MemoryLog::default();
    for _ in 0..3 {
        log.produce(4, 2, -1, false);
    }
    log.append_pid_reset(12, "src").expect("barrier");
    // A local transaction left open, then acknowledged writes.
    log.produce(2, 12, 7, true);
    log.produce(5, 12, 8, false);
    let before = log.bytes();
    let (lme, removed) = host::truncate_to_lso(&mut log, "dst", None).expect("stopping again");
    assert_eq!((lme, removed), (Some(2), 0));
    assert_eq!(log.bytes(), before, "nothing cut");
    assert!(
        host::own_failover_barrier(&log, "dst")
            .expect("read")
            .is_some(),
        "so no second barrier is appended"
    );
}

/// Issue 35 (named invariants): an answer whose batch would lower the log's leader epoch is
/// refused as `EpochNeverLowers` and leaves the log as it was; a batch whose CRC does not check
/// is refused too, but as corrupt input, not as a broken invariant (the metric counts only the
/// first).
#[test]
fn a_broken_invariant_is_named_and_corrupt_input_is_not() {
    use kmirror_actors::invariant::Invariant;
    use kmirror_protocol::testing::BatchSpec;
    let mut source = MemoryLog::default();
    source.produce(3, 5, -1, false);
    let mut destination = MemoryLog::default();
    let planned = host::next_fetch(&destination, 1 << 20);
    let answer = |records: bytes::Bytes| FetchResponse::Records {
        records,
        high_watermark: 6,
        source_leader_epoch: Some(5),
    };
    host::apply_fetch(
        &mut destination,
        Some(0),
        &planned,
        answer(bytes::Bytes::from(source.bytes())),
        10,
        GapPolicy::Continue,
    )
    .expect("applied");
    let before = destination.bytes();
    let lower = BatchSpec {
        base_offset: 3,
        partition_leader_epoch: 4,
        records: 3,
        ..BatchSpec::default()
    }
    .build();
    let planned = host::next_fetch(&destination, 1 << 20);
    let refused = host::apply_fetch(
        &mut destination,
        Some(0),
        &planned,
        answer(lower.clone()),
        10,
        GapPolicy::Continue,
    )
    .expect_err("an epoch below the log's is refused");
    assert_eq!(
        refused.broken,
        Some(Invariant::EpochNeverLowers),
        "{refused:?}"
    );
    assert!(!refused.retryable);
    assert_eq!(
        destination.bytes(),
        before,
        "nothing of the answer was appended"
    );
    let mut corrupt = BatchSpec {
        base_offset: 3,
        partition_leader_epoch: 5,
        records: 3,
        ..BatchSpec::default()
    }
    .build()
    .to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    let refused = host::apply_fetch(
        &mut destination,
        Some(0),
        &planned,
        answer(bytes::Bytes::from(corrupt)),
        10,
        GapPolicy::Continue,
    )
    .expect_err("a corrupt batch is refused");
    assert_eq!(
        refused.broken, None,
        "corrupt input is no broken invariant: {refused:?}"
    );
    assert_eq!(destination.bytes(), before);
}
