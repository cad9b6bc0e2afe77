//! Topic patterns as the KIP's requests carry them (StartMirrorTopics' IncludePatterns and
//! ExcludePatterns, StopMirrorTopics' Patterns) and as a mirror's `topics.include` /
//! `topics.exclude` keep them: regular expressions (Rust `regex` syntax) matching whole names.
//!
//! A request's patterns are kept in those comma-separated configs for auto-discovery, so an
//! empty pattern or one holding a comma is refused. A cluster's internal topics (`__` names:
//! offsets, transactions, mirror states) are its own and never selected.

use super::refusal::MirrorError;
use kmirror_protocol::errors::ErrorCode;
use regex::Regex;

/// `pattern` as a regular expression that matches whole names only. It must parse on its
/// own first: wrapped unchecked, `x)|(.*` became `^(?:x)|(.*)$`, which matches every name.
pub fn whole_name(pattern: &str) -> Result<Regex, regex::Error> {
    Regex::new(pattern)?;
    Regex::new(&format!("^(?:{pattern})$"))
}

/// Whether `name` is one of a cluster's internal topics, which are never mirrored.
pub fn is_internal_topic(name: &str) -> bool {
    name.starts_with("__")
}

/// A request's patterns, compiled.
#[derive(Debug, Clone, Default)]
pub struct TopicPatterns(Vec<Regex>);

impl TopicPatterns {
    /// The patterns of a request, or INVALID_REQUEST naming the first that cannot be kept or
    /// does not compile.
    pub fn compile(patterns: &[String]) -> Result<TopicPatterns, MirrorError> {
        let invalid = |why: String| MirrorError::new(ErrorCode::INVALID_REQUEST, why);
        patterns
            .iter()
            .map(|p| {
                if p.trim().is_empty() || p.contains(',') {
                    return Err(invalid(format!(
                        "pattern {p:?}: a pattern is kept in a comma-separated list, so it may \
                         be neither empty nor hold a comma"
                    )));
                }
                whole_name(p)
                    .map_err(|e| invalid(format!("pattern {p:?} (Rust regex syntax): {e}")))
            })
            .collect::<Result<_, _>>()
            .map(TopicPatterns)
    }

    /// No pattern at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether one of the patterns matches the whole of `name`.
    pub fn matches(&self, name: &str) -> bool {
        self.0.iter().any(|r| r.is_match(name))
    }
}

/// The topics among `names` that `include` selects and `exclude` does not, internal topics
/// never, in the order given.
pub fn select(
    names: impl IntoIterator<Item = String>,
    include: &TopicPatterns,
    exclude: &TopicPatterns,
) -> Vec<String> {
    names
        .into_iter()
        .filter(|n| !is_internal_topic(n) && include.matches(n) && !exclude.matches(n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patterns(p: &[&str]) -> TopicPatterns {
        let owned: Vec<String> = p.iter().map(|s| s.to_string()).collect();
        TopicPatterns::compile(&owned).expect("valid patterns")
    }

    #[test]
    fn patterns_match_whole_names_and_never_internal_topics() {
        let names = [
            "orders",
            "orders-eu",
            "xorders",
            "__consumer_offsets",
            "__orders",
        ];
        let selected = select(
            names.iter().map(|s| s.to_string()),
            &patterns(&["orders.*", "__.*"]),
            &patterns(&[".*-eu"]),
        );
        assert_eq!(selected, ["orders"]);
    }

    #[test]
    fn a_pattern_that_cannot_be_kept_or_compiled_is_refused() {
        for bad in ["", " ", "a,b", "x{1,3}", "(unclosed", "x)|(.*"] {
            let refused = TopicPatterns::compile(&[bad.to_string()]);
            assert_eq!(
                refused.map(|_| ()).map_err(|e| e.code),
                Err(ErrorCode::INVALID_REQUEST),
                "{bad:?}"
            );
        }
    }
}
