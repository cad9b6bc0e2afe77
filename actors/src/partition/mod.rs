//! A mirror partition: the state machine of docs/design.md §2-5, as pure code ([`transition`]), and
//! the data it works on ([`state`]). The actor that runs it arrives with the engine issue; the
//! deterministic simulation in the crate's `tests/simulation` drives it with a fake host.

pub mod state;
pub mod transition;

pub use state::{
    Cause, Desired, Effect, Failure, Input, OpId, Phase, Rejection, StoredState, Target,
};
pub use transition::{Env, Outcome, Partition, RetryPolicy, Step, transition};

#[cfg(test)]
mod tests;
