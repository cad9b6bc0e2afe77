//! The commands of `kmirror` that talk to clusters, beside `main.rs` (which parses the command
//! line and runs the broker):
//!
//! - [`mirrors`]: `kmirror mirrors`, an action per flag, run against a cluster;
//! - [`failover`]: its `--failover`, the stop once caught up, and [`failover_plan`], its
//!   `--dry-run` and `--consistent`;
//! - [`verify`]: its `--verify`, the mirror compared with the source;
//! - [`quickstart`]: `kmirror quickstart`, mirroring and failover between two local brokers;
//! - what they share, imported by each and importing none of them: [`topics`] (the topic
//!   RPCs), [`describe`] (a mirror's partitions across every broker), [`failure`] (how an
//!   action fails and echoes names) and [`mirror_table`] (the mirror table).

mod describe;
pub(crate) mod failover;
mod failover_plan;
mod failure;
mod mirror_table;
pub(crate) mod mirrors;
pub(crate) mod quickstart;
pub(crate) mod topics;
pub(crate) mod verify;
