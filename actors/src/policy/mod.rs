//! KIP-1279's request rules in pure code: what a mirror request may do, decided the same way
//! whichever host embeds the engine (docs/design.md §7).
//!
//! - [`refusal`]: [`MirrorError`], why a request or one of its topics was refused, and the one
//!   map from the partition state machine's rejections to KIP error codes;
//! - [`patterns`]: the one whole-name topic matcher of IncludePatterns, ExcludePatterns and
//!   StopMirrorTopics' Patterns;
//! - [`topic_changes`]: which pause, resume or stop a topic's `mirror.name` allows;
//! - [`guards`]: what a client may not do to a mirror topic (produce is the log's read-only
//!   flag; these are deletes, config changes and new partitions).
//!
//! Nothing here reads a clock, a log or the network: the engine's request handlers
//! (`engine::topic_requests`) and the host's guards call these with what they read.

pub mod guards;
pub mod patterns;
pub mod refusal;
pub mod topic_changes;

pub use refusal::MirrorError;
