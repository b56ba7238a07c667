//! Built with `--features trace`: TCP senders' events on stderr, one line each, to set a
//! run beside ns-3's (`validation/ns3/leafspine.cc`'s `LEAFSPINE_TRACE_*` print the same
//! lines) and find where two flows part. Times in ns, windows in bytes:
//!
//! - `GRADWIRE_TRACE_STATES=1`: `ST <t> <flow> <from> <to> <cwnd before>` for every
//!   congestion-state change of every flow (`CA_OPEN`, `CA_CWR`, `CA_RECOVERY`, `CA_LOSS`,
//!   ns-3's names; an ACK that ends CWR and starts the next cut prints `CA_CWR CA_OPEN` and
//!   `CA_OPEN CA_CWR`, as ns-3 does);
//! - `GRADWIRE_TRACE_DST=h`: `TX <t> <flow> <seq> <1 if a resend>` for every data segment
//!   sent to host `h`;
//! - the simulator adds `DROP <t> <flow> <kind> <seq> <port>` for every switch drop with
//!   `GRADWIRE_TRACE_DROPS=1`.
//!
//! `validation/trace_compare.py` reads two such traces. Without the feature every function
//! here is empty and the calls compile away.

use crate::time::Time;

#[cfg(feature = "trace")]
fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Whether `GRADWIRE_TRACE_STATES` is set.
#[inline(always)]
pub fn states_on() -> bool {
    #[cfg(feature = "trace")]
    {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ON.get_or_init(|| std::env::var_os("GRADWIRE_TRACE_STATES").is_some())
    }
    #[cfg(not(feature = "trace"))]
    false
}

/// Whether `GRADWIRE_TRACE_DROPS` is set.
#[inline(always)]
pub fn drops_on() -> bool {
    #[cfg(feature = "trace")]
    {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ON.get_or_init(|| std::env::var_os("GRADWIRE_TRACE_DROPS").is_some())
    }
    #[cfg(not(feature = "trace"))]
    false
}

/// Whether sends to host `dst` are traced (`GRADWIRE_TRACE_DST`).
#[inline(always)]
pub fn dst_on(dst: u32) -> bool {
    #[cfg(feature = "trace")]
    {
        static DST: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
        *DST.get_or_init(|| env_u64("GRADWIRE_TRACE_DST")) == Some(dst as u64)
    }
    #[cfg(not(feature = "trace"))]
    {
        let _ = dst;
        false
    }
}

/// A congestion-state change.
#[inline(always)]
pub fn state(now: Time, flow: u32, from: &str, to: &str, cwnd: u64) {
    if states_on() && from != to {
        eprintln!("ST {} {flow} {from} {to} {cwnd}", now / 1000);
    }
}

/// A data segment sent.
#[inline(always)]
pub fn send(now: Time, flow: u32, dst: u32, seq: u64, resend: bool) {
    if dst_on(dst) {
        eprintln!("TX {} {flow} {seq} {}", now / 1000, resend as u8);
    }
}
