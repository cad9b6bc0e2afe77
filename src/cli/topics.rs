//! The topics of a mirror as the commands change them: which topics `--topics` names
//! ([`TopicSelection`]), what to do with them ([`TopicChange`]) and the topic RPC that does it
//! ([`change_topics`]), shared by `--start`/`--stop`/`--pause`/`--resume` and `--failover`.

use super::failure::{Failure, refused, shown};
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    ListMirrorsRequest, PauseMirrorTopicsRequest, ResumeMirrorTopicsRequest,
    StartMirrorTopicsRequest, StopMirrorTopicsRequest, pause_mirror_topics_request,
    resume_mirror_topics_request, start_mirror_topics_request, stop_mirror_topics_request,
};

/// Which topics `--topics` names: a comma-separated list of names, or a regular expression
/// (any value that is not a list of valid topic names) matched against whole names: the
/// source's topics for `--start` (the broker resolves it), the mirror's for the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TopicSelection {
    Names(Vec<String>),
    Pattern(String),
}

/// What the tool says when `--topics` names nothing.
pub(crate) const EMPTY_TOPICS: &str =
    "--topics is empty: give topic names (a,b) or a regular expression ('orders-.*')";

impl TopicSelection {
    /// Reads `--topics`' values (already split at commas). The pieces are trimmed and empty
    /// ones dropped before telling names from a pattern, so `a, b` and `a,,b` are the names
    /// `a` and `b` (once each), not a pattern that matches nothing; a pattern is the pieces
    /// that are not empty, as given, and must be a regular expression. A usage error's
    /// message when they name nothing (`--topics ''`, `--topics ,`) or the pattern does not
    /// parse.
    pub(crate) fn parse(values: Vec<String>) -> Result<TopicSelection, String> {
        let mut seen = std::collections::HashSet::new();
        let names: Vec<String> = values
            .iter()
            .map(|v| v.trim())
            .filter(|v| !v.is_empty() && seen.insert(*v))
            .map(str::to_string)
            .collect();
        if names.is_empty() {
            return Err(EMPTY_TOPICS.to_string());
        }
        if names
            .iter()
            .all(|n| kmirror::controller::valid_topic_name(n))
        {
            return Ok(TopicSelection::Names(names));
        }
        let pieces: Vec<&str> = values
            .iter()
            .map(String::as_str)
            .filter(|v| !v.trim().is_empty())
            .collect();
        // Trimmed as the mirror's pattern lists are, so a start's kept pattern is the one given.
        let pattern = pieces.join(",").trim().to_string();
        whole_names(&pattern)?;
        Ok(TopicSelection::Pattern(pattern))
    }
}

/// `pattern` compiled to match whole names, or why it is no regular expression, without
/// echoing it whole (the regex crate's message quotes it whole, with a caret line under it).
fn whole_names(pattern: &str) -> Result<regex::Regex, String> {
    kmirror_actors::policy::patterns::whole_name(pattern).map_err(|e| {
        let problem = match &e {
            regex::Error::Syntax(text) => text
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("error: "))
                .unwrap_or("it does not parse")
                .to_string(),
            regex::Error::CompiledTooBig(limit) => {
                format!("it compiles to more than {limit} bytes")
            }
            _ => "it does not parse".to_string(),
        };
        format!(
            "--topics \"{}\" is not a regular expression: {problem}",
            shown(pattern)
        )
    })
}

/// Which topic names a selection takes, to filter what a describe shows.
#[derive(Debug)]
pub(crate) enum TopicFilter {
    Names(Vec<String>),
    Pattern {
        pattern: String,
        regex: regex::Regex,
    },
}

impl TopicFilter {
    /// The filter of `selection` (whose pattern [`TopicSelection::parse`] checked).
    pub(crate) fn new(selection: TopicSelection) -> Result<TopicFilter, Failure> {
        match selection {
            TopicSelection::Names(names) => Ok(TopicFilter::Names(names)),
            TopicSelection::Pattern(pattern) => TopicFilter::pattern(pattern),
        }
    }

    /// The filter of the regular expression `pattern` over whole names; one that does not
    /// parse is a usage error naming what is wrong.
    pub(crate) fn pattern(pattern: String) -> Result<TopicFilter, Failure> {
        let regex = whole_names(&pattern).map_err(Failure::Usage)?;
        Ok(TopicFilter::Pattern { pattern, regex })
    }

    /// Whether it takes the topic `name`.
    pub(crate) fn takes(&self, name: &str) -> bool {
        match self {
            TopicFilter::Names(names) => names.iter().any(|n| n == name),
            TopicFilter::Pattern { regex, .. } => regex.is_match(name),
        }
    }
}

/// What to do with topics.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TopicChange {
    /// Start; restarting stopped topics discards this many records written since their
    /// failover (-1: none; the broker refuses and names the count when there are some).
    Start {
        discard_local_records: i64,
    },
    /// Stop; a consistent stop cuts each partition before its first batch newer than
    /// `cut_timestamp_ms` (-1: none, the last stable offset alone).
    Stop {
        cut_timestamp_ms: i64,
    },
    Pause,
    Resume,
}

/// The topics of `mirror` whose whole name `pattern` matches (ListMirrors).
pub(crate) async fn mirror_topics_matching(
    connection: &Connection,
    mirror: &str,
    pattern: &str,
) -> Result<Vec<String>, Failure> {
    let filter = TopicFilter::pattern(pattern.to_string())?;
    let request = ListMirrorsRequest {
        include_topic_names: true,
        ..Default::default()
    };
    let (_, answer) = connection
        .send("ListMirrors", &request, 0)
        .await
        .map_err(|e| Failure::Unreachable(e.to_string()))?;
    let Some(listed) = answer.mirrors.into_iter().find(|m| m.mirror_name == mirror) else {
        return Err(refused(
            ErrorCode::UNKNOWN_CLUSTER_MIRROR.0,
            Some(format!("no mirror {mirror}")),
        ));
    };
    let names: Vec<String> = listed
        .topic_names
        .into_iter()
        .filter(|t| filter.takes(t))
        .collect();
    if names.is_empty() {
        return Err(Failure::Usage(format!(
            "no topic of mirror {} matches \"{}\" (a regular expression over whole names \
             of the mirror's topics; --list --json shows them)",
            shown(mirror),
            shown(pattern)
        )));
    }
    Ok(names)
}

/// The broker's answer to a topic change: top-level code and message, then per topic.
type TopicResults = (i16, Option<String>, Vec<(String, i16, Option<String>)>);

/// Sends one topic RPC (each has its own generated types, of one shape) and reads its answer.
macro_rules! topic_rpc {
    (
        $connection:expr,
        $api:literal,
        $request:ident,
        $module:ident,
        $mirror:expr,
        $topics:expr
        $(, $field:ident = $value:expr)*
    ) => {{
        let request = $request {
            mirror_name: $mirror,
            $($field: $value,)*
            topics: $topics
                .into_iter()
                .map(|topic_name| $module::TopicMetadata {
                    topic_name,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let (_, a) = $connection.send($api, &request, 0).await?;
        let per = a
            .topics
            .into_iter()
            .map(|t| (t.name, t.error_code, t.error_message));
        (a.error_code, a.error_message, per.collect())
    }};
}

/// `pattern`, to take out of auto-discovery with a stop, unless it holds a comma: such a pattern
/// cannot have been kept, and the broker refuses it.
pub(crate) fn kept_pattern(pattern: String) -> Vec<String> {
    if pattern.contains(',') {
        Vec::new()
    } else {
        vec![pattern]
    }
}

/// Sends the topic RPC of `change` for `topics`; `patterns` are a start's IncludePatterns or a
/// stop's Patterns (the broker keeps them for auto-discovery, docs/wire.md), unused otherwise.
pub(crate) async fn change_topics(
    connection: &Connection,
    change: TopicChange,
    mirror: String,
    topics: Vec<String>,
    patterns: Vec<String>,
) -> Result<TopicResults, kmirror_protocol::client::ClientError> {
    Ok(match change {
        TopicChange::Start {
            discard_local_records,
        } => topic_rpc!(
            connection,
            "StartMirrorTopics",
            StartMirrorTopicsRequest,
            start_mirror_topics_request,
            mirror,
            topics,
            include_patterns = patterns,
            discard_local_records = discard_local_records
        ),
        TopicChange::Stop { cut_timestamp_ms } => topic_rpc!(
            connection,
            "StopMirrorTopics",
            StopMirrorTopicsRequest,
            stop_mirror_topics_request,
            mirror,
            topics,
            patterns = patterns,
            cut_timestamp_ms = cut_timestamp_ms
        ),
        TopicChange::Pause => topic_rpc!(
            connection,
            "PauseMirrorTopics",
            PauseMirrorTopicsRequest,
            pause_mirror_topics_request,
            mirror,
            topics
        ),
        TopicChange::Resume => topic_rpc!(
            connection,
            "ResumeMirrorTopics",
            ResumeMirrorTopicsRequest,
            resume_mirror_topics_request,
            mirror,
            topics
        ),
    })
}
