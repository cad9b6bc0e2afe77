//! The storage engine through its public API: model-based property tests and crash tests with
//! a real child process killed by SIGKILL.

mod crash;
mod model;
