//! `mirror.source.gap.policy`: what a mirror partition does when the source deleted offsets it
//! had not copied yet (retention or DeleteRecords moved the source's log start past the
//! partition's log end, and a fetch was answered OFFSET_OUT_OF_RANGE).
//!
//! `continue` (the default) is Kafka's follower rule: the partition truncates fully, restarts at
//! the source's log start and goes on; the offsets skipped are counted (per partition, in
//! DescribeMirrors and `kmirror_mirror_skipped_offsets_total`) and logged with their range.
//! `fail` fails the partition instead, changing nothing on the log, with the range in its
//! reason; changing the mirror's configs (`--alter`) retries it. The policy is read from the
//! mirror's configs at each gap, so a change applies to the next one.

use std::collections::BTreeMap;

/// The config key.
pub const GAP_POLICY: &str = "mirror.source.gap.policy";

/// What a partition does at a gap in the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GapPolicy {
    /// Restart at the source's log start, counting the offsets skipped.
    #[default]
    Continue,
    /// Fail the partition, changing nothing.
    Fail,
}

impl GapPolicy {
    /// The policy `value` names (`continue` or `fail`, any case).
    pub fn parse(value: &str) -> Result<GapPolicy, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "continue" => Ok(GapPolicy::Continue),
            "fail" => Ok(GapPolicy::Fail),
            _ => Err("must be continue or fail".into()),
        }
    }

    /// The policy of a mirror with `configs` (checked when they were set: a value that does
    /// not parse cannot be there, and would read as the default).
    pub fn of(configs: Option<&BTreeMap<String, String>>) -> GapPolicy {
        configs
            .and_then(|c| c.get(GAP_POLICY))
            .and_then(|v| GapPolicy::parse(v).ok())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_parses_and_refuses_anything_else() {
        assert_eq!(GapPolicy::parse("continue"), Ok(GapPolicy::Continue));
        assert_eq!(GapPolicy::parse(" FAIL "), Ok(GapPolicy::Fail));
        assert!(GapPolicy::parse("skip").is_err());
        let configs: BTreeMap<String, String> =
            [(GAP_POLICY.to_string(), "fail".to_string())].into();
        assert_eq!(GapPolicy::of(Some(&configs)), GapPolicy::Fail);
        assert_eq!(GapPolicy::of(None), GapPolicy::Continue);
    }
}
