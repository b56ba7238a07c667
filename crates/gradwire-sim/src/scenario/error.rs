//! The one error type of scenario loading: a dotted key and what is wrong with it.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    /// Dotted key, e.g. `topology.spines`; empty for file-level errors.
    pub key: String,
    pub message: String,
}

impl ScenarioError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ScenarioError { key: key.into(), message: message.into() }
    }
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "`{}`: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ScenarioError {}

/// serde names Rust types ("expected u32"); a scenario's author thinks in numbers.
pub(crate) fn plain_type_names(message: &str) -> String {
    const NAMES: [(&str, &str); 12] = [
        ("u8", "a non-negative integer"),
        ("u16", "a non-negative integer"),
        ("u32", "a non-negative integer"),
        ("u64", "a non-negative integer"),
        ("usize", "a non-negative integer"),
        ("i8", "an integer"),
        ("i16", "an integer"),
        ("i32", "an integer"),
        ("i64", "an integer"),
        ("isize", "an integer"),
        ("f32", "a number"),
        ("f64", "a number"),
    ];
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("expected ") {
        let (head, tail) = rest.split_at(at + "expected ".len());
        out.push_str(head);
        let word_len = tail.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(tail.len());
        let word = &tail[..word_len];
        match NAMES.iter().find(|(rust, _)| *rust == word) {
            Some((_, plain)) => out.push_str(plain),
            None => out.push_str(word),
        }
        rest = &tail[word_len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::plain_type_names;

    #[test]
    fn rust_type_names_become_plain_words() {
        assert_eq!(
            plain_type_names("invalid value: integer `-3`, expected u32"),
            "invalid value: integer `-3`, expected a non-negative integer"
        );
        assert_eq!(
            plain_type_names("invalid type: string \"x\", expected f64"),
            "invalid type: string \"x\", expected a number"
        );
        // a name inside a longer word is left alone
        assert_eq!(plain_type_names("expected u320"), "expected u320");
        assert_eq!(
            plain_type_names("unknown field `x`, expected one of `a`"),
            "unknown field `x`, expected one of `a`"
        );
    }
}
