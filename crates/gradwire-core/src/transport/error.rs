//! The one error a transport's configuration gives, apart from everything that reads it
//! (so a transport's own module can check its settings without depending on the registry).

use std::fmt;

/// A setting a loader should refuse: which key (a [`Key`](super::Key)'s name, or a
/// [`Common`](super::Common) field such as `base_rtt`) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The key or field.
    pub field: String,
    /// What is wrong, with the value given.
    pub message: String,
}

impl ConfigError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError { field: field.into(), message: message.into() }
    }

    /// The same error under another name (a typed config's field as its key).
    pub fn renamed(self, field: impl Into<String>) -> ConfigError {
        ConfigError { field: field.into(), message: self.message }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field, self.message)
    }
}

impl std::error::Error for ConfigError {}
