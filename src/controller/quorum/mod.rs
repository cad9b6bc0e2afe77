//! The metadata quorum's storage for openraft (issue 21): the durable raft log and vote
//! ([`log_store`]) and the state machine with its durable snapshot ([`state_machine`]), both
//! generic over the raft type config.
//!
//! The Controller does not run the quorum yet: until it does, `LogStore::open` and
//! `StateMachine::open` are called by tests only, and allow dead code for that.

mod atomic_file;
mod log_store;
mod state_machine;
#[cfg(test)]
mod test_support;
