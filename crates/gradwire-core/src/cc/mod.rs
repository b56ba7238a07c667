//! Congestion controllers, as pure state machines driven by their transport.

mod bdp;
mod minimal;

pub use bdp::{BdpCc, BdpConfig, BdpPhase, SendState, HIGH_GAIN, PROBE_BW_GAINS};
pub use minimal::{MinimalRate, RatePhase};
