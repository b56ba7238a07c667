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
