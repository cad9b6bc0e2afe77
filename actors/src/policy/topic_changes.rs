//! Which pause, resume or stop a topic allows, read from its `mirror.name` (docs/design.md §2:
//! `<mirror>` mirroring, `<mirror>.paused`, `<mirror>.removed` stopped).
//!
//! A pause of a paused topic is MIRROR_TOPIC_ALREADY_PAUSED, a resume of one that is not paused
//! MIRROR_TOPIC_NOT_PAUSED, a pause or resume of a stopped one MIRROR_TOPIC_BEING_STOPPED; a stop
//! is always allowed (stopping again finishes a stop). Whether the topic is in the mirror at all
//! is the engine's to answer (TOPIC_NOT_IN_CLUSTER_MIRROR).

use super::refusal::MirrorError;
use crate::metadata::mirror_of;
use crate::partition::Desired;
use kmirror_protocol::errors::ErrorCode;

/// Refuses asking `desired` of a topic of `mirror` whose `mirror.name` is `value`.
pub fn change_refused(value: Option<&str>, mirror: &str, desired: Desired) -> Option<MirrorError> {
    let asked = value
        .and_then(mirror_of)
        .filter(|(m, _)| *m == mirror)
        .map(|(_, d)| d);
    let paused = asked == Some(Desired::Paused);
    let stopped = asked == Some(Desired::Stopped);
    let code = match desired {
        Desired::Paused | Desired::Mirroring if stopped => ErrorCode::MIRROR_TOPIC_BEING_STOPPED,
        Desired::Paused if paused => ErrorCode::MIRROR_TOPIC_ALREADY_PAUSED,
        Desired::Mirroring if !paused => ErrorCode::MIRROR_TOPIC_NOT_PAUSED,
        _ => return None,
    };
    let message = code.info().map_or("", |i| i.message);
    Some(MirrorError::new(code, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_resume_and_stop_follow_the_mirror_name() {
        let code = |value: &str, desired| change_refused(Some(value), "m", desired).map(|e| e.code);
        assert_eq!(code("m", Desired::Paused), None);
        assert_eq!(
            code("m.paused", Desired::Paused),
            Some(ErrorCode::MIRROR_TOPIC_ALREADY_PAUSED)
        );
        assert_eq!(
            code("m", Desired::Mirroring),
            Some(ErrorCode::MIRROR_TOPIC_NOT_PAUSED)
        );
        assert_eq!(code("m.paused", Desired::Mirroring), None);
        assert_eq!(
            code("m.removed", Desired::Paused),
            Some(ErrorCode::MIRROR_TOPIC_BEING_STOPPED)
        );
        assert_eq!(
            code("m.removed", Desired::Mirroring),
            Some(ErrorCode::MIRROR_TOPIC_BEING_STOPPED)
        );
        assert_eq!(code("m.removed", Desired::Stopped), None);
        assert_eq!(code("m.paused", Desired::Stopped), None);
    }
}
