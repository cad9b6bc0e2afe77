//! Failback: a stopped topic started again prepares anew, read-only before its PREPARING record
//! is even written.

use super::*;

#[test]
fn restart_after_stop_prepares_again() {
    let mut h = Harness::new();
    h.start_mirroring();
    failover(&mut h, true);
    h.send(Input::DesiredChanged(Desired::Mirroring));
    h.persist_ok(MirrorState::Preparing);
    let op = h.op_of(|e| matches!(e, Effect::LookUpLme { .. }));
    h.send(Input::LmeLookedUp { op, result: Ok(30) });
    let op = h.op_of(|e| matches!(e, Effect::TruncateForLme { lme: 30, .. }));
    h.send(Input::Truncated { op, result: Ok(()) });
    let op = h.op_of(|e| matches!(e, Effect::AwaitIsr { .. }));
    h.send(Input::IsrCaughtUp { op });
    h.persist_ok(MirrorState::Mirroring);
    assert_eq!(h.p.phase(), &Phase::Mirroring { bump: None });
}

/// Engine review finding 2: a restart of a stopped topic makes it read-only before PREPARING's
/// record is even issued, and a write that fails (the shard away) leaves it read-only: it must
/// not take produce that PREPARING then cuts. Failed before the fix: SetReadOnly(true) came only
/// with the durable PREPARING.
#[test]
fn a_restart_is_read_only_before_its_record_is_written() {
    let mut h = Harness::new();
    stopped(&mut h);
    let step = h.send(Input::DesiredChanged(Desired::Mirroring));
    let read_only = step
        .effects
        .iter()
        .position(|e| *e == Effect::SetReadOnly(true))
        .expect("read-only at once");
    let persist = step
        .effects
        .iter()
        .position(|e| matches!(e, Effect::PersistState { .. }))
        .expect("PREPARING written");
    assert!(read_only < persist, "{:?}", step.effects);
    let op = h.op_of(|e| matches!(e, Effect::PersistState { .. }));
    let step = h.send(Input::StatePersisted {
        op,
        result: Err(Cause::retryable(
            "the coordinator at b3: connection refused",
        )),
    });
    assert!(
        !step.effects.contains(&Effect::SetReadOnly(false)),
        "{:?}",
        step.effects
    );
    assert!(matches!(h.p.phase(), Phase::Failed { .. }));
}
