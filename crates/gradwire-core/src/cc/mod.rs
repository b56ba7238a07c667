//! Congestion controllers, as pure state machines driven by their transport.

mod minimal;

pub use minimal::{MinimalRate, RatePhase};
