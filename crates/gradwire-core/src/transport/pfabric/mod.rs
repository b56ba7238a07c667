//! pFabric (Alizadeh et al., "pFabric: Minimal Near-Optimal Datacenter Transport",
//! SIGCOMM'13) end hosts as sans-IO endpoints; the switch half is
//! [`crate::switch::PFabricPort`].
//!
//! pFabric moves scheduling into the fabric: every data packet carries a *rank*, here the
//! flow's bytes not yet acknowledged when the packet is sent (`Packet::rank`), and switches
//! serve the smallest rank first and drop the largest. The end host keeps only a minimal
//! rate control (paper §4.2), implemented by [`PFabricSender`]:
//!
//! * flows start at line rate: the initial window is one BDP ([`PFabricConfig::for_link`]);
//!   there is no slow start at the beginning (ssthresh starts at the initial window, so the
//!   window grows by one MSS per window of ACKs);
//! * per-packet ACKs carry the cumulative ACK and the packet they answer (one-block SACK);
//!   acknowledged packets are never resent; there is no fast retransmit and no reaction to
//!   dupACKs or reordering (pFabric sprays packets per packet);
//! * loss is detected only by a short fixed timeout (about 3× the base RTT, no backoff):
//!   ssthresh = cwnd / 2, cwnd = 1 MSS, everything not acknowledged is resent from the
//!   cumulative ACK on (acknowledged packets skipped), in slow start up to ssthresh;
//! * after `probe_after_timeouts` consecutive timeouts (5 in the paper) the flow enters
//!   probe mode: it sends only a header-only probe (`len` 0 at the cumulative ACK, where the
//!   paper uses a 1-byte payload) once per timeout, and resumes in slow start from 1 MSS when
//!   any ACK comes back.
//!
//! [`PFabricReceiver`] ACKs every data packet (probes included) with `seq` = cumulative ACK
//! and `rank` = the first byte of the packet answered (`u64::MAX` for a probe). ACKs rank 0
//! at a pFabric port ([`crate::Packet::switch_rank`]): they are tiny and losing them only
//! costs timeouts. Neither side uses ECN.
//!
//! Segments are aligned to multiples of `mss`, as in [`crate::transport::tcp`].

mod receiver;
mod sender;
pub mod spec;
#[cfg(test)]
mod tests;

pub use receiver::{PFabricReceiver, Sack};
pub use sender::PFabricSender;
pub use spec::PFabric;

use crate::time::{Time, SEC, US};

/// End-host settings shared by a flow's [`PFabricSender`] and [`PFabricReceiver`]; see
/// [`PFabricConfig::for_link`] for values derived from the fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PFabricConfig {
    /// Payload bytes per data segment; segments start at multiples of it.
    pub mss: u32,
    /// Header bytes added to each data segment on the wire.
    pub header_bytes: u32,
    /// Wire size of an ACK.
    pub ack_bytes: u32,
    /// Initial window in payload bytes: one BDP, i.e. line rate from the first packet.
    pub init_window_bytes: u64,
    /// Cap on the window (`u64::MAX`: none).
    pub max_window_bytes: u64,
    /// Fixed retransmission timeout, no backoff (the paper: about 3× the fabric RTT).
    pub rto: Time,
    /// Consecutive timeouts that switch the flow to probe mode (5 in the paper).
    pub probe_after_timeouts: u32,
    /// Queue for strict-priority ports on the path (a pFabric port ignores it); ACKs too.
    pub priority: u8,
}

impl PFabricConfig {
    /// Defaults for a fabric of `bits_per_sec` links and base round trip `base_rtt`:
    /// initial window = BDP rounded up to whole 1500-byte packets, RTO = 3 × `base_rtt`.
    pub fn for_link(bits_per_sec: u64, base_rtt: Time) -> Self {
        let (mss, header_bytes) = (1460u32, 40u32);
        let bdp = (bits_per_sec as u128 * base_rtt as u128).div_ceil(8 * SEC as u128) as u64;
        let packets = bdp.div_ceil((mss + header_bytes) as u64).max(1);
        PFabricConfig {
            mss,
            header_bytes,
            ack_bytes: 40,
            init_window_bytes: packets * mss as u64,
            max_window_bytes: u64::MAX,
            rto: 3 * base_rtt,
            probe_after_timeouts: 5,
            priority: 0,
        }
    }
}

impl Default for PFabricConfig {
    /// 10 Gbit/s, 12 µs base RTT: a 10-packet initial window and a 36 µs RTO.
    fn default() -> Self {
        PFabricConfig::for_link(10_000_000_000, 12 * US)
    }
}
