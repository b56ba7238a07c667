//! LTP: loss-tolerant transfer of one tensor (LTP §III–IV).
//!
//! ```text
//! sender                                          receiver
//! data, out of order, CQ → NQ → RQ ─────────────▶ placed by offset (bitmap)
//!   paced at pacing_gain·BtlBw, cwnd = gain·BDP ◀─ one ACK per data packet, naming it
//! lost = 3 later-sent packets ACKed (or RTO)        closes when:
//!   critical → CQ again, normal → RQ                  everything is in (no STOP needed), or
//! RATE(path model) once per round ──────────────▶     LT passed ∧ ≥ 1−p in ∧ criticals in, or
//!                                                     deadline passed ∧ criticals in
//!                          ◀───────────────────── STOP(delivered bytes), reliable, early close
//! CONFIRM, reliable ────────────────────────────▶ closed: later data ignored
//! CONFIRM acknowledged (or everything ACKed): `SenderDone`
//! ```
//!
//! **Packets.** The tensor id is the flow id. Data `seq`/`len` are the segment's byte
//! offset and length ([`Segmentation`]: boundaries on element boundaries, so a lost packet
//! never splits a float). An ACK (`PacketKind::Ack`) names one segment by its offset in
//! `seq`: it is *not* cumulative. Control uses the reliable channel of DLCP (same
//! retransmit-until-`CtrlAck` rule; the code is shared, see `ctrl`). LTP reuses existing
//! ops with its own directions: STOP goes receiver → sender ("closed; stop sending",
//! argument = bytes delivered), CONFIRM sender → receiver, and RATE (unreliable) goes
//! sender → receiver carrying the sender's path model (the paper puts RTprop and BtlBw in
//! every header; here it is one small packet per round trip, see [`pack_path`]).
//!
//! **Reliability.** Every segment is sent once from CQ (critical) or NQ (normal); one
//! declared lost goes back to CQ (critical) or to RQ (normal), and RQ is served only when
//! CQ and NQ are empty (§IV-B). The sender keeps retransmitting until everything is
//! acknowledged or the receiver says STOP, so it needs no knowledge of the thresholds:
//! the receiver alone decides when enough is enough (Early Close, §III-B).
//!
//! **Early Close** (receiver): the clock starts at the transfer's first packet. Before
//! the LT threshold it waits for everything; between LT and the deadline it closes as soon
//! as `1 - loss_bound` of the bytes and all critical segments are in; at the deadline it
//! closes with what it has, except that critical segments are always awaited (the design
//! rule "critical data is always delivered" wins over the paper's hard deadline).
//! `bound_met()` tells whether the closed transfer had at least `1 - loss_bound`.
//! With `loss_tolerant = false` (broadcast, §III-B2) there is no Early Close at all.
//!
//! **LT state** ([`LtThreshold`]) lives with the receiver, per peer link, as in the
//! paper: `LtpReceiver::with_lt_state(..., lt)` starts a transfer from it and
//! `receiver.lt_state()` hands back the updated state for the next transfer on the link.
//! A receiver with many links (a PS) sets the deadline of all of them from the largest
//! threshold: [`LtpReceiver::set_group_max_lt`]. The sender side can carry its path model
//! similarly: `LtpSender::with_path(..., sender.path())` skips Startup.

mod receiver;
mod sender;
pub mod spec;
#[cfg(test)]
mod tests;

use std::sync::Arc;

pub use receiver::LtpReceiver;
pub use sender::LtpSender;
pub use spec::{Ltp, LtpBuild};

use crate::cc::BdpConfig;
use crate::tensor::{synthetic_important, Segmentation, TensorId};
use crate::time::{Time, MS, SEC, US};
use crate::transport::error::ConfigError;
use crate::transport::pacer::Pacing;
use crate::transport::shared::{self, check_loss_bound, check_positive, check_priorities, check_segments};

/// Which segments are critical: always delivered, and retransmitted ahead of normal data.
#[derive(Clone, Debug, PartialEq)]
pub enum Critical {
    /// No segment is critical: any may be given up at an Early Close.
    None,
    /// The first `n` segments (the tensor's metadata travels in the first one).
    First(u64),
    /// The first `n` and the last `n` segments ("several bytes on the first and last part
    /// of the matrix bitstream", §III-E).
    Ends(u64),
    /// Each segment with probability `fraction`, from a seeded hash of
    /// (seed, tensor, segment): both ends compute the same set.
    Fraction {
        /// Probability that a segment is critical, in `[0, 1]`.
        fraction: f64,
        /// Seed of the hash; sender and receiver must use the same one.
        seed: u64,
    },
    /// An explicit list of segment indices (indices past the end are ignored).
    Segments(Arc<[u64]>),
}

impl Critical {
    /// The critical flag of every segment of `seg`.
    fn mask(&self, seg: &Segmentation) -> Vec<bool> {
        let n = seg.count();
        let mut m = vec![false; n as usize];
        match self {
            Critical::None => {}
            Critical::First(k) => m.iter_mut().take(*k as usize).for_each(|c| *c = true),
            Critical::Ends(k) => {
                let k = (*k).min(n) as usize;
                m[..k].fill(true);
                m[n as usize - k..].fill(true);
            }
            Critical::Fraction { fraction, seed } => {
                for (i, c) in m.iter_mut().enumerate() {
                    *c = synthetic_important(*seed, seg.tensor(), i as u64, *fraction);
                }
            }
            Critical::Segments(list) => {
                for &i in list.iter().filter(|&&i| i < n) {
                    m[i as usize] = true;
                }
            }
        }
        m
    }
}

/// Parameters of one LTP transfer. Sender and receiver must be built from the same
/// configuration: both derive the segmentation and the critical set from it.
#[derive(Clone, Debug, PartialEq)]
pub struct LtpConfig {
    /// Payload bytes per data packet; segments hold the most whole elements that fit.
    pub mss: u32,
    /// Size of one gradient element in bytes (4 for f32): never split across packets.
    pub elem_bytes: u32,
    /// Header bytes added to each data packet on the wire (IP + UDP + gradwire).
    pub header_bytes: u32,
    /// Wire size of an ACK, bytes.
    pub ack_bytes: u32,
    /// Wire size of a control packet (STOP, CONFIRM, RATE and their ACKs), bytes.
    pub ctrl_bytes: u32,
    /// Share of the tensor that may be missing at an Early Close, in `[0, 1]`.
    pub loss_bound: f64,
    /// Deadline = max(LT threshold) + `lt_c`, ps (30 ms in a DC, 100 ms in a WAN).
    pub lt_c: Time,
    /// RTprop assumed until measured (congestion control and LT threshold), ps.
    pub initial_rtprop: Time,
    /// BtlBw assumed until measured, bit/s.
    pub initial_btlbw_bps: u64,
    /// Which segments must always be delivered.
    pub critical: Critical,
    /// Queue of data packets (0..=7).
    pub data_priority: u8,
    /// Queue of ACKs and control messages (0: the reserved top priority). ACKs go here
    /// too, so queued data never delays the ACK clock that RTprop is measured by.
    pub ctrl_priority: u8,
    /// false: fully reliable (broadcast); no Early Close.
    pub loss_tolerant: bool,
    /// Retransmission timeout of an unacknowledged control message, ps (fixed, no backoff).
    pub ctrl_rto: Time,
    /// Floor of the data retransmission timeout, ps (tail losses that no later ACK
    /// reveals).
    pub min_rto: Time,
    /// The sender's BDP congestion control (gains, probing). ltp.md's window by default,
    /// `2 × BtlBw × RTprop`, without BBR's allowance for ACK aggregation (the socket
    /// runtime turns that on: a software host's ACKs come in bursts).
    pub cc: BdpConfig,
    /// How far the sender's pacer may run ahead of its slots and catch up behind them
    /// (none in the simulator; a software host sends in bursts).
    pub pacing: Pacing,
}

impl Default for LtpConfig {
    fn default() -> Self {
        LtpConfig {
            mss: 1440,
            elem_bytes: 4,
            header_bytes: 60,
            ack_bytes: 64,
            ctrl_bytes: 64,
            loss_bound: 0.05,
            lt_c: 30 * MS,
            initial_rtprop: 10 * US,
            initial_btlbw_bps: 100_000_000_000,
            critical: Critical::First(1),
            data_priority: 1,
            ctrl_priority: 0,
            loss_tolerant: true,
            ctrl_rto: MS,
            min_rto: MS,
            cc: BdpConfig { ack_aggregation: false, ..BdpConfig::default() },
            pacing: Pacing::default(),
        }
    }
}

impl LtpConfig {
    /// The first parameter a loader should refuse (the endpoints clamp instead of failing).
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_segments(self.mss, self.elem_bytes)?;
        check_loss_bound("loss_bound", self.loss_bound)?;
        if let Critical::Fraction { fraction, .. } = self.critical {
            if !(0.0..=1.0).contains(&fraction) {
                return Err(ConfigError::new("critical", format!("fraction must be in [0, 1] (got {fraction})")));
            }
        }
        if self.initial_btlbw_bps == 0 {
            return Err(ConfigError::new("initial_btlbw_bps", "must be positive (got 0)"));
        }
        check_positive("initial_rtprop", self.initial_rtprop)?;
        check_positive("lt_c", self.lt_c)?;
        check_positive("ctrl_rto", self.ctrl_rto)?;
        check_positive("min_rto", self.min_rto)?;
        check_priorities(self.ctrl_priority, self.data_priority)?;
        Ok(())
    }

    /// Bytes that may be missing at an Early Close.
    fn allowed_missing(&self, size: u64) -> u64 {
        shared::allowed_missing(self.loss_bound, size)
    }

    fn segmentation(&self, tensor: TensorId, size: u64) -> Segmentation {
        shared::segmentation(tensor, size, self.mss, self.elem_bytes)
    }

    /// Bytes the whole transfer puts on the wire once (payload + per-packet headers).
    fn wire_bytes(&self, seg: &Segmentation) -> u64 {
        seg.total_bytes() + seg.count() * self.header_bytes as u64
    }
}

/// Early Close's LT threshold of one peer link (§III-B1), carried across transfers.
///
/// Until a transfer of the same size has completed in full, the threshold is
/// `1.5·RTprop + wire_bytes/BtlBw` from the latest path model (configured initial
/// estimates until the sender reports measured ones); afterwards it is the shortest
/// complete transfer seen. A transfer of another size starts over from the formula: a
/// duration measured for one size says little about another. [`Self::new_epoch`] forgets
/// the shortest transfer (the paper re-initialises at the first batch of each epoch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LtThreshold {
    rtprop: Time,
    btlbw_bps: u64,
    path_measured: bool,
    /// (size in bytes, shortest complete transfer of that size).
    shortest: Option<(u64, Time)>,
}

impl LtThreshold {
    /// A link with no measurement yet: the formula from these estimates (RTprop in ps,
    /// BtlBw in bit/s, raised to at least 1).
    pub fn new(initial_rtprop: Time, initial_btlbw_bps: u64) -> Self {
        LtThreshold {
            rtprop: initial_rtprop,
            btlbw_bps: initial_btlbw_bps.max(1),
            path_measured: false,
            shortest: None,
        }
    }

    /// [`Self::new`] from the configured initial RTprop and BtlBw.
    pub fn from_config(cfg: &LtpConfig) -> Self {
        Self::new(cfg.initial_rtprop, cfg.initial_btlbw_bps)
    }

    /// `1.5·RTprop + wire_bytes / BtlBw`.
    pub fn initial(&self, wire_bytes: u64) -> Time {
        let send = (wire_bytes as u128 * 8 * SEC as u128).div_ceil(self.btlbw_bps as u128);
        (self.rtprop as u128 * 3 / 2 + send).min(Time::MAX as u128) as Time
    }

    /// The threshold for a transfer of `size` bytes, `wire_bytes` on the wire.
    pub fn threshold(&self, size: u64, wire_bytes: u64) -> Time {
        match self.shortest {
            Some((s, d)) if s == size => d,
            _ => self.initial(wire_bytes),
        }
    }

    /// The sender's measured path model arrived.
    pub fn update_path(&mut self, rtprop: Time, btlbw_bps: u64) {
        self.rtprop = rtprop.max(1);
        self.btlbw_bps = btlbw_bps.max(1);
        self.path_measured = true;
    }

    /// A transfer of `size` bytes completed in full in `duration`.
    pub fn record_complete(&mut self, size: u64, duration: Time) {
        self.shortest = match self.shortest {
            Some((s, d)) if s == size => Some((s, d.min(duration))),
            _ => Some((size, duration)),
        };
    }

    /// Forget the shortest complete transfer: the next threshold comes from the formula.
    /// The path model is kept.
    pub fn new_epoch(&mut self) {
        self.shortest = None;
    }

    /// Round-trip propagation time the formula uses, ps.
    pub fn rtprop(&self) -> Time {
        self.rtprop
    }

    /// Bottleneck bandwidth the formula uses, bit/s (at least 1).
    pub fn btlbw_bps(&self) -> u64 {
        self.btlbw_bps
    }

    /// The path model came from the sender's measurements (a RATE report), not from the
    /// configured initial estimates.
    pub fn path_measured(&self) -> bool {
        self.path_measured
    }

    /// (size, duration) of the shortest complete transfer seen, if any.
    pub fn shortest_complete(&self) -> Option<(u64, Time)> {
        self.shortest
    }
}

/// The sender's path model (RTprop, BtlBw), e.g. to start the next transfer warm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathModel {
    /// Round-trip propagation time (minimum RTT), ps.
    pub rtprop: Time,
    /// Bottleneck bandwidth, bit/s.
    pub btlbw_bps: u64,
}

/// RATE argument (sender → receiver): RTprop in ns (32 bits, saturating, at least 1) and
/// BtlBw in kbit/s (32 bits, saturating, at least 1).
pub fn pack_path(p: PathModel) -> u64 {
    let ns = (p.rtprop / crate::time::NS).clamp(1, u32::MAX as u64);
    let kbps = (p.btlbw_bps / 1000).clamp(1, u32::MAX as u64);
    ns << 32 | kbps
}

/// Inverse of [`pack_path`] (never zero, whatever arrives).
pub fn unpack_path(arg: u64) -> PathModel {
    let ns = (arg >> 32).max(1);
    let kbps = (arg & u32::MAX as u64).max(1);
    PathModel { rtprop: ns * crate::time::NS, btlbw_bps: kbps * 1000 }
}
