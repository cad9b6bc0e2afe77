//! The metadata quorum's storage for openraft (issue 21): the durable raft log and vote
//! ([`log_store`]) and the state machine with its durable snapshot ([`state_machine`]), both
//! generic over the raft type config.

// The Controller does not run the quorum yet: until it does, these are used by their tests only.
#[allow(dead_code)]
mod atomic_file;
#[allow(dead_code)]
mod log_store;
#[allow(dead_code)]
mod state_machine;
#[cfg(test)]
mod test_support;
