//! kmirror-actors: the KIP-1279 mirroring engine a broker embeds.
//!
//! Today this crate holds the engine's vocabulary only; the partition state machine, the
//! `__mirror_state` coordinator and the actors arrive with their issues ("Mirroring core", "The
//! mirroring engine as actors"), following `ARCHITECTURE.md`.

pub use kmirror_protocol::state::MirrorState;
