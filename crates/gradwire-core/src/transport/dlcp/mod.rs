//! DLCP: bounded-loss tolerant transfer of one tensor (DLCP §3.2.1, §4.1).
//!
//! Data is unreliable and paced; control is reliable (retransmitted every `ctrl_rto`
//! until acknowledged) and travels in the reserved top-priority queue. One transfer:
//!
//! ```text
//! sender                                      receiver
//! START(size) + data at once (zero RTT) ───▶  data before START is discarded (counted)
//! data ... (paced at the rate-control rate) ▶ bound checked on every data packet
//!                            ◀──────────────  RATE(bit/s) every period (unreliable)
//! STOP(round) when out of data ───────────▶   bound not met: one RETX per missing run
//!                            ◀──────────────  RETX(round, first segment, count) ...
//! resend at line rate, then STOP(round + 1)   (repeat until the bound is met)
//!                            ◀──────────────  FINISH(delivered bytes); `Delivered` event
//! CONFIRM ─────────────────────────────────▶  closed: later data is ignored
//! CONFIRM acknowledged: `SenderDone`
//! ```
//!
//! The bound is met when at most `floor(loss_bound * size)` bytes are missing, so
//! `loss_bound = 0` is a fully reliable transfer. DLCP's looser bound on push than on
//! pull (§3.2.1) is just a different `loss_bound` in the config of each transfer.
//!
//! Packets: the tensor id is the flow id; data `seq`/`len` are the segment's byte offset
//! and length ([`crate::tensor::Segmentation`], elements never split); control messages
//! are [`PacketKind::Ctrl`](crate::PacketKind) with one `u64` argument in `seq`, and each
//! reliable one is acknowledged by a `CtrlAck` of the same op and argument. RETX packs
//! `round:16 | first segment:32 | count:16`; the sender acts only on requests answering
//! its latest STOP, so a stale or duplicated request never causes a resend, and a range
//! the sender missed is simply requested again after the next STOP.

mod receiver;
mod sender;
#[cfg(test)]
mod tests;

pub use receiver::DlcpReceiver;
pub use sender::DlcpSender;

use crate::tensor::{synthetic_important, Segmentation, TensorId};
use crate::time::{Time, MS, SEC, US};

/// How the sender decides which data packets are important (ECN-capable, `ect`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Importance {
    All,
    None,
    /// Simulation without gradient values: each segment is important with probability
    /// `fraction`, from a seeded hash of (seed, tensor, segment). 0.5 mimics the
    /// median-threshold rule. Real values: [`DlcpSender::set_importance_mask`].
    Fraction { fraction: f64, seed: u64 },
}

impl Importance {
    fn of(&self, tensor: TensorId, index: u64) -> bool {
        match *self {
            Importance::All => true,
            Importance::None => false,
            Importance::Fraction { fraction, seed } => synthetic_important(seed, tensor, index, fraction),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DlcpConfig {
    /// Payload bytes per data packet; segments hold the most whole elements that fit.
    pub mss: u32,
    /// Size of one gradient element (4 for f32): never split across packets.
    pub elem_bytes: u32,
    /// Header bytes added to each data packet on the wire (IP + UDP + gradwire).
    pub header_bytes: u32,
    /// Wire size of a control packet.
    pub ctrl_bytes: u32,
    /// Share of the tensor that may be missing at completion, in `[0, 1]`.
    pub loss_bound: f64,
    pub line_rate_bps: u64,
    /// Rate-control period: receive-rate reports and rate decisions.
    pub rate_period: Time,
    /// Halve when send rate > `delta` x receive rate.
    pub delta: f64,
    /// Additive increase per period, as a share of line rate.
    pub additive_increase_frac: f64,
    /// Queue of control messages (0: the reserved top priority).
    pub ctrl_priority: u8,
    /// Queue of data packets; see [`crate::tensor::layer_queue`] (1..=7).
    pub data_priority: u8,
    pub importance: Importance,
    /// Retransmission timeout of an unacknowledged control message.
    pub ctrl_rto: Time,
}

impl Default for DlcpConfig {
    fn default() -> Self {
        DlcpConfig {
            mss: 1440,
            elem_bytes: 4,
            header_bytes: 60,
            ctrl_bytes: 64,
            loss_bound: 0.0,
            line_rate_bps: 100_000_000_000,
            rate_period: 200 * US,
            delta: 2.0,
            additive_increase_frac: 0.05,
            ctrl_priority: 0,
            data_priority: 1,
            importance: Importance::All,
            ctrl_rto: MS,
        }
    }
}

impl DlcpConfig {
    /// Errors a scenario loader should report; the endpoints clamp instead of failing.
    pub fn validate(&self) -> Result<(), String> {
        if self.elem_bytes == 0 || self.elem_bytes > self.mss {
            return Err(format!("elem_bytes {} must be in 1..=mss ({})", self.elem_bytes, self.mss));
        }
        if !(0.0..=1.0).contains(&self.loss_bound) {
            return Err(format!("loss_bound {} is outside [0, 1]", self.loss_bound));
        }
        if self.line_rate_bps == 0 || self.rate_period == 0 || self.ctrl_rto == 0 {
            return Err("line_rate_bps, rate_period and ctrl_rto must be positive".into());
        }
        if self.ctrl_priority > 7 || self.data_priority > 7 {
            return Err("priorities must be in 0..=7".into());
        }
        Ok(())
    }

    fn segmentation(&self, tensor: TensorId, size: u64) -> Segmentation {
        let mss = self.mss.max(1);
        Segmentation::new(tensor, size, self.elem_bytes.clamp(1, mss), mss)
            .expect("a tensor of more than 2^32 segments")
    }

    /// Bytes that may be missing when the transfer completes.
    fn allowed_missing(&self, size: u64) -> u64 {
        let p = if self.loss_bound.is_nan() { 0.0 } else { self.loss_bound.clamp(0.0, 1.0) };
        ((p * size as f64).floor() as u64).min(size)
    }

    /// Bytes per `rate_period` as bit/s.
    fn bps(&self, bytes: u64) -> u64 {
        (bytes as u128 * 8 * SEC as u128 / self.rate_period.max(1) as u128).min(u64::MAX as u128) as u64
    }
}

/// RETX argument: a run of segments answering STOP(`round`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RetxReq {
    round: u16,
    first: u32,
    count: u16,
}

impl RetxReq {
    fn pack(self) -> u64 {
        (self.round as u64) << 48 | (self.first as u64) << 16 | self.count as u64
    }

    fn unpack(arg: u64) -> Self {
        RetxReq { round: (arg >> 48) as u16, first: (arg >> 16) as u32, count: arg as u16 }
    }
}
