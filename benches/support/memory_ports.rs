//! Mirror partition ports that answer from memory (state store, epoch bump, LSO truncation,
//! PID reset): benchmarks of the engine's own cost, without a log or a network.

use actix::Recipient;
use kmirror_actors::actor::{FetcherProgress, PartitionPorts, PortFuture};
use kmirror_actors::partition::{Cause, StoredState};
use std::cell::RefCell;
use std::rc::Rc;

/// One partition's ports.
#[derive(Clone, Default)]
pub(crate) struct MemoryPorts {
    stored: Rc<RefCell<Option<StoredState>>>,
    epoch: Rc<RefCell<i32>>,
}

fn ready<T: 'static>(value: T) -> PortFuture<T> {
    Box::pin(std::future::ready(value))
}

impl PartitionPorts for MemoryPorts {
    fn load_state(&self) -> PortFuture<Result<Option<StoredState>, Cause>> {
        ready(Ok(self.stored.borrow().clone()))
    }
    fn persist_state(&self, stored: StoredState) -> PortFuture<Result<(), Cause>> {
        *self.stored.borrow_mut() = Some(stored);
        ready(Ok(()))
    }
    fn look_up_lme(&self) -> PortFuture<Result<i32, Cause>> {
        ready(Ok(-1))
    }
    fn truncate_for_lme(&self, _: i32) -> PortFuture<Result<(), Cause>> {
        ready(Ok(()))
    }
    fn await_isr(&self) -> PortFuture<()> {
        ready(())
    }
    fn attach_fetcher(&self, _: Recipient<FetcherProgress>, _: i32) {}
    fn raise_fetcher_epoch(&self, _: i32) {}
    fn detach_fetcher(&self) -> PortFuture<()> {
        ready(())
    }
    fn bump_leader_epoch(&self, min: Option<i32>) -> PortFuture<Result<i32, Cause>> {
        let mut epoch = self.epoch.borrow_mut();
        *epoch = (*epoch + 1).max(min.unwrap_or(0) + 1);
        ready(Ok(*epoch))
    }
    fn truncate_to_lso(&self) -> PortFuture<Result<Option<i32>, Cause>> {
        ready(Ok(Some(0)))
    }
    fn persist_lme(&self, _: Option<i32>) -> PortFuture<Result<(), Cause>> {
        ready(Ok(()))
    }
    fn append_pid_reset(&self, _: i32) -> PortFuture<Result<(), Cause>> {
        ready(Ok(()))
    }
    fn set_read_only(&self, _: bool) {}
}
