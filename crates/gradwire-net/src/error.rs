//! Every way the runtime can fail, with messages that say what to do.

use std::fmt;
use std::io;
use std::time::Duration;

#[derive(Debug)]
pub enum NetError {
    /// A setting is missing or wrong (environment variable, argument).
    Config(String),
    /// Rank 0 (or a peer) refused this process: the message says who refused it and why
    /// (token, world size, rank, segment size).
    Refused(String),
    /// Nothing happened for `waited`: a peer died or stalls. `what` names the step and peer.
    Timeout {
        what: String,
        waited: Duration,
    },
    /// A peer closed its control connection mid-job.
    PeerLost {
        rank: u32,
        detail: String,
    },
    /// Two ranks made different calls: `field` differs, `values` on (`ranks.0`, `ranks.1`).
    CallMismatch {
        call: u64,
        ranks: (u32, u32),
        field: String,
        values: (String, String),
    },
    /// A peer broke the protocol (bad frame on the control connection).
    Protocol(String),
    Io {
        context: String,
        source: io::Error,
    },
}

impl NetError {
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        NetError::Io { context: context.into(), source }
    }
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetError::Config(m) => write!(f, "configuration error: {m}"),
            // The message already says who refused what ("rank 0 at … refused this process: …").
            NetError::Refused(m) => write!(f, "{m}"),
            NetError::Timeout { what, waited } => write!(f, "timed out after {:.1} s: {what}", waited.as_secs_f64()),
            NetError::PeerLost { rank, detail } => write!(f, "lost rank {rank}: {detail}"),
            NetError::CallMismatch { call, ranks: (a, b), field, values: (va, vb) } => write!(
                f,
                "ranks {a} and {b} made different collective calls (call {call} of the job): the {field} is {va} on rank {a} but {vb} on rank {b}; every rank must make the same calls in the same order"
            ),
            NetError::Protocol(m) => write!(f, "protocol error: {m}"),
            NetError::Io { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl std::error::Error for NetError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NetError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
