//! Commands the system sends its partition actors for a metadata change (a new desired state,
//! a higher leader epoch), run without waiting: the metadata is the truth, and the actor's
//! state machine decides what the command means for it, so a refusal is only logged.

use crate::partition::Rejection;

/// Runs a command sent to a partition actor, logging a refusal (the metadata is the truth; the
/// actor's state machine decides what the command means for it).
pub(super) fn log_rejection(
    command: impl std::future::Future<Output = Result<Result<(), Rejection>, actix::MailboxError>>
    + 'static,
) {
    actix::spawn(async move {
        match command.await {
            Ok(Ok(())) => {}
            Ok(Err(rejection)) => tracing::warn!(%rejection, "a metadata change was refused"),
            Err(e) => tracing::warn!(error = %e, "a partition actor is gone"),
        }
    });
}
