//! How a `kmirror mirrors` action fails ([`Failure`]: refused by the broker, bad usage, a cluster
//! out of reach, each with its exit code 1, 2, 3) and how what it prints echoes names: a
//! mirror's or a topic's, also inside the broker's messages, is cut to [`NAME_SHOWN`] characters,
//! saying how long it was. Shared by every command of the CLI, so a leaf.

use kmirror_protocol::errors::ErrorCode;
use std::process::ExitCode;

/// Why an action did not complete.
#[derive(Debug)]
pub(crate) enum Failure {
    Refused(String),
    Usage(String),
    Unreachable(String),
}

/// How many characters of a name are echoed.
const NAME_SHOWN: usize = 64;

/// Characters echoed escaped (`\u{1b}`), so an operator's input cannot drive the terminal or
/// reorder what it shows: control characters, and the invisible and bidirectional formatting
/// ones.
fn escaped_when_echoed(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}'
        )
}

/// `name` as echoed: its first [`NAME_SHOWN`] characters and its length when it is longer,
/// some characters escaped ([`escaped_when_echoed`]).
pub(crate) fn shown(name: &str) -> String {
    let escaped = |text: &str| -> String {
        text.chars()
            .map(|c| {
                if escaped_when_echoed(c) {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect()
    };
    match first_chars(name, NAME_SHOWN) {
        Some(start) => format!("{}… ({} characters)", escaped(start), name.chars().count()),
        None => escaped(name),
    }
}

/// The first `most` characters of `text`, when it has more.
fn first_chars(text: &str, most: usize) -> Option<&str> {
    text.char_indices().nth(most).map(|(cut, _)| &text[..cut])
}

/// `text` with every run of name characters (a topic's or a mirror's: `[A-Za-z0-9._-]`)
/// longer than [`NAME_SHOWN`] cut as [`shown`] does, and what [`shown`] escapes escaped but
/// line breaks, for messages that may echo a name given by the operator (a broker's, a regular
/// expression's parse error).
pub(crate) fn with_names_shown(text: &str) -> String {
    let is_name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    let mut out = String::with_capacity(text.len().min(4096));
    let mut run = String::new();
    for c in text.chars() {
        if is_name(c) {
            run.push(c);
        } else {
            out.push_str(&shown(&run));
            run.clear();
            if escaped_when_echoed(c) && c != '\n' {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
    }
    out.push_str(&shown(&run));
    out
}

impl Failure {
    /// What went wrong, for the operator.
    pub(crate) fn message(&self) -> &str {
        match self {
            Failure::Refused(m) | Failure::Usage(m) | Failure::Unreachable(m) => m,
        }
    }

    /// Prints what went wrong and gives the exit code of its kind (1, 2, 3).
    pub(crate) fn exit(self) -> ExitCode {
        let (code, message) = match self {
            Failure::Refused(m) => (1, m),
            Failure::Usage(m) => (2, m),
            Failure::Unreachable(m) => (3, m),
        };
        eprintln!("kmirror mirrors: {}", capped(&with_names_shown(&message)));
        ExitCode::from(code)
    }
}

/// The most characters of one message printed: a broker's message may quote a whole
/// pattern list given by the operator.
const MESSAGE_SHOWN: usize = 2_000;

/// `message`, cut after [`MESSAGE_SHOWN`] characters, saying how long it was.
fn capped(message: &str) -> String {
    match first_chars(message, MESSAGE_SHOWN) {
        Some(start) => format!(
            "{start}… (cut: {} characters in all)",
            message.chars().count()
        ),
        None => message.to_string(),
    }
}

/// A broker's refusal: the code's name and number, the broker's message (or the table's
/// when it sent none) and, for KIP-1279's codes, what to do.
pub(crate) fn refused(code: i16, message: Option<String>) -> Failure {
    Failure::Refused(explained(code, message))
}

/// `NAME (code): message` for one error code, then what to do on a line of its own.
pub(crate) fn explained(code: i16, message: Option<String>) -> String {
    let error = ErrorCode(code);
    let name = error.name();
    let message = message
        .filter(|m| !m.trim().is_empty())
        .or_else(|| error.info().map(|i| i.message.to_string()));
    let mut text = match message {
        Some(m) => format!("{name} ({code}): {}", with_names_shown(&m)),
        None => format!("{name} ({code})"),
    };
    if let Some(action) = error.action() {
        text.push_str(&format!("\n  what to do: {action}"));
    }
    text
}
