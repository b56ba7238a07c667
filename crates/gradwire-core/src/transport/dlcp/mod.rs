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
//! STOP(round) when out of data ───────────▶   bound not met: one request for everything
//!                            ◀──────────────  missing, as a batch RETX(round, runs or
//!                                             bitmaps), the last one flagged
//! resend at line rate (one reset per round);
//! STOP(round + 1) once the batch's last RETX   (repeat until the bound is met)
//! is in and the resend queue is empty
//!                            ◀──────────────  FINISH(delivered bytes); `Delivered` event
//! CONFIRM ─────────────────────────────────▶  closed: later data is ignored
//! CONFIRM acknowledged: `SenderDone`
//! ```
//!
//! With [`RateHint::ReceiverShare`] (a deviation) a RATE also carries the receiving host's
//! fair share, and the sender holds its rate at or below `share_headroom` times it.
//!
//! The bound is met when at most `floor(loss_bound * size)` bytes are missing, so
//! `loss_bound = 0` is a fully reliable transfer. DLCP's looser bound on push than on
//! pull (§3.2.1) is just a different `loss_bound` in the config of each transfer.
//!
//! Packets: the tensor id is the flow id; data `seq`/`len` are the segment's byte offset
//! and length ([`crate::tensor::Segmentation`], elements never split); control messages
//! are [`PacketKind::Ctrl`](crate::PacketKind) with one `u64` argument in `seq`, and each
//! reliable one is acknowledged by a `CtrlAck` of the same op and argument. A RETX names a
//! run of missing segments or a bitmap of the next 28 (see `RetxReq`); the sender acts
//! only on requests answering its latest STOP, so a stale or duplicated request never
//! causes a resend, and a range the sender missed is simply requested again after the
//! next STOP. If the flagged last RETX of a batch is lost, the control channel repeats it
//! and the next STOP waits for it (one `ctrl_rto`), so a lost message never ends a round
//! early with most of the batch unsent.

mod receiver;
mod runs;
mod sender;
mod share;
pub mod spec;
mod strict;
#[cfg(test)]
mod tests;

pub use receiver::DlcpReceiver;
pub use sender::{CarriedRate, DlcpSender};
pub use share::{HostLoad, RateHint};
pub use spec::{Dlcp, DlcpBuild, RateState};
pub use strict::PairSenders;

use crate::tensor::{synthetic_important, Segmentation, TensorId};
use crate::time::{Time, MS, SEC, US};
use crate::transport::error::ConfigError;
use crate::transport::pacer::Pacing;
use crate::transport::shared::{self, check_loss_bound, check_positive, check_priorities, check_segments};

/// How the sender decides which data packets are important (ECN-capable, `ect`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Importance {
    /// Every data packet is ECN-capable: above a queue's ECN threshold a port with
    /// selective dropping CE-marks it and keeps it.
    All,
    /// No data packet is ECN-capable: above the threshold such a port drops it.
    None,
    /// Simulation without gradient values: each segment is important with probability
    /// `fraction`, from a seeded hash of (seed, tensor, segment). 0.5 mimics the
    /// median-threshold rule. Real values: [`DlcpSender::set_importance_mask`].
    Fraction {
        /// Probability in `[0, 1]` that a segment is important.
        fraction: f64,
        /// Seed of the hash; equal seeds give equal choices across runs.
        seed: u64,
    },
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

/// Parameters of one DLCP transfer, given to both its sender and its receiver. The two
/// must agree on `mss` and `elem_bytes`: the receiver places data by the same
/// segmentation and rejects segments it does not know. `loss_bound` is the receiver's.
///
/// Times are in ps ([`Time`]), rates in bit/s, sizes in bytes. [`Self::validate`] lists
/// what a loader should refuse; the endpoints clamp out-of-range values instead.
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
    /// Sender NIC rate in bit/s: the pacing rate at the start (and at the start of each
    /// resend round with `resend_at_line_rate`) and the base of `additive_increase_frac`.
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
    /// Which data packets are ECN-capable, i.e. kept rather than dropped by a switch's
    /// selective dropping; [`DlcpSender::set_importance_mask`] overrides it.
    pub importance: Importance,
    /// Retransmission timeout of an unacknowledged control message.
    pub ctrl_rto: Time,
    /// After STOP, request every missing segment (the default), or, when false, only the
    /// first missing segments whose bytes meet the bound. Measured on the Fig. 14 runs at
    /// 16 workers the latter resends ~4 % fewer packets, costs the same simulator time, and
    /// moves mean FCT by -3 % (ResNet50) / +10 % (InceptionV3): kept as an option only.
    pub request_all_missing: bool,
    /// A retransmission request puts the rate back to line rate (§3.2.1, "change the
    /// state to line rate start"; the default). False: the resend round keeps the rate
    /// the rate control had reached (a deviation).
    pub resend_at_line_rate: bool,
    /// After a STOP, wait until no data has arrived for this long before requesting what is
    /// missing (0, the default: request at once, as §3.2.1 reads). STOP travels on the top
    /// control queue and overtakes the transfer's own data still queued behind it in the
    /// network; requesting at once then asks for data that is about to arrive, and its
    /// duplicate comes back too (a deviation, off by default).
    pub retx_quiet: Time,
    /// Send STOP in the transfer's own data queue (ECN-capable, so a selective drop spares
    /// it) instead of the control queue: it then leaves every switch port behind the data
    /// queued before it rather than overtaking it (a deviation, off by default). Sprayed
    /// packets on other paths can still arrive after it.
    pub stop_behind_data: bool,
    /// Rate a transfer without a carried rate state starts at, as a share of line rate,
    /// in `(0, 1]` (1, the default: line rate, as §3.2.1). Below 1 the transfer starts in
    /// congestion avoidance and grows additively (a deviation, e.g. the fair share of an
    /// N-to-1 incast, 1/N, so a tensor does not send line rate × period before its first
    /// feedback).
    pub start_rate_frac: f64,
    /// With a rate state carried across a host pair's transfers
    /// ([`RateState`] other than `Tensor`): a pair that has sent nothing for longer than this
    /// starts its next transfer fresh, at the start rate, as dlcp.md starts every tensor,
    /// instead of at a rate learned before it went idle (a deviation; RFC 5681 §4.1
    /// restarts a TCP connection's window after an idle retransmission timeout the same
    /// way). `None`, the default: the state never expires.
    pub rate_restart: Option<Time>,
    /// What a receive-rate report carries besides the rate ([`RateHint::None`], the
    /// default, as dlcp.md). [`RateHint::ReceiverShare`] (a deviation): also the receiving
    /// host's fair share, at or below which the sender holds its rate; the host's
    /// receivers share a [`HostLoad`] ([`DlcpReceiver::sharing_host_load`]).
    pub rate_hint: RateHint,
    /// With [`RateHint::ReceiverShare`]: the sender's cap is this many times the reported
    /// share (> 0).
    pub share_headroom: f64,
    /// How far the sender's pacer may run ahead of its slots and catch up behind them
    /// (none in the simulator; a software host sends in bursts).
    pub pacing: Pacing,
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
            request_all_missing: true,
            resend_at_line_rate: true,
            retx_quiet: 0,
            stop_behind_data: false,
            start_rate_frac: 1.0,
            rate_restart: None,
            rate_hint: RateHint::None,
            share_headroom: 1.5,
            pacing: Pacing::default(),
        }
    }
}

impl DlcpConfig {
    /// The first parameter a loader should refuse (the endpoints clamp instead of failing).
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_segments(self.mss, self.elem_bytes)?;
        check_loss_bound("loss_bound", self.loss_bound)?;
        if self.line_rate_bps == 0 {
            return Err(ConfigError::new("line_rate_bps", "must be positive (got 0)"));
        }
        check_positive("rate_period", self.rate_period)?;
        if self.rate_restart == Some(0) {
            return Err(ConfigError::new("rate_restart", "must be positive"));
        }
        check_positive("ctrl_rto", self.ctrl_rto)?;
        if !(self.delta.is_finite() && self.delta > 0.0) {
            return Err(ConfigError::new("delta", format!("must be positive (got {})", self.delta)));
        }
        if !(0.0..=1.0).contains(&self.additive_increase_frac) {
            return Err(ConfigError::new(
                "additive_increase_frac",
                format!("must be in [0, 1] (got {})", self.additive_increase_frac),
            ));
        }
        if !(self.start_rate_frac > 0.0 && self.start_rate_frac <= 1.0) {
            return Err(ConfigError::new(
                "start_rate_frac",
                format!("must be in (0, 1] (got {})", self.start_rate_frac),
            ));
        }
        if !(self.share_headroom.is_finite() && self.share_headroom > 0.0) {
            return Err(ConfigError::new(
                "share_headroom",
                format!("must be a positive number (got {})", self.share_headroom),
            ));
        }
        if let Importance::Fraction { fraction, .. } = self.importance {
            if !(0.0..=1.0).contains(&fraction) {
                return Err(ConfigError::new("importance", format!("fraction must be in [0, 1] (got {fraction})")));
            }
        }
        check_priorities(self.ctrl_priority, self.data_priority)?;
        Ok(())
    }

    fn segmentation(&self, tensor: TensorId, size: u64) -> Segmentation {
        shared::segmentation(tensor, size, self.mss, self.elem_bytes)
    }

    /// Bytes that may be missing when the transfer completes.
    fn allowed_missing(&self, size: u64) -> u64 {
        shared::allowed_missing(self.loss_bound, size)
    }

    /// Bytes per `rate_period` as bit/s.
    fn bps(&self, bytes: u64) -> u64 {
        self.bps_over(bytes, self.rate_period)
    }

    /// Bytes over `elapsed` as bit/s.
    fn bps_over(&self, bytes: u64, elapsed: Time) -> u64 {
        (bytes as u128 * 8 * SEC as u128 / elapsed.max(1) as u128).min(u64::MAX as u128) as u64
    }
}

/// Segment indices a RETX can address: `first` has 24 bits (2^24 segments, 24 GB at an
/// MSS of 1440). Larger tensors still travel in the first round; their segments beyond
/// this index cannot be requested again.
pub const RETX_MAX_SEGMENTS: u64 = 1 << 24;
/// Segments one bitmap request covers.
pub const RETX_BITMAP_BITS: u32 = 28;

/// What a RETX asks for, starting at segment `first`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RetxSet {
    /// `count` consecutive segments (1..2^28).
    Run(u32),
    /// Bit i set: segment `first + i` is missing (bit 0 is always set).
    Bitmap(u32),
}

/// RETX argument: some missing segments, answering STOP(`round`). A round's request is a
/// batch of these (the paper's one "retransmission request for the missing gradients",
/// cut into control messages); `last` marks the batch's final message, and the sender
/// sends its next STOP only after that one has arrived and the resend queue is empty.
///
/// Packed as `round:10 | last:1 | bitmap:1 | first:24 | payload:28` (payload: the run's
/// count or the bitmap). Rounds are compared modulo 2^10.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RetxReq {
    round: u16,
    last: bool,
    first: u32,
    set: RetxSet,
}

impl RetxReq {
    const ROUND_MASK: u64 = (1 << 10) - 1;
    const PAYLOAD_MASK: u64 = (1 << RETX_BITMAP_BITS) - 1;

    fn pack(self) -> u64 {
        let (bitmap, payload) = match self.set {
            RetxSet::Run(n) => (0, n as u64),
            RetxSet::Bitmap(b) => (1, b as u64),
        };
        (self.round as u64 & Self::ROUND_MASK) << 54
            | (self.last as u64) << 53
            | bitmap << 52
            | (self.first as u64 & (RETX_MAX_SEGMENTS - 1)) << 28
            | payload & Self::PAYLOAD_MASK
    }

    fn unpack(arg: u64) -> Self {
        let payload = (arg & Self::PAYLOAD_MASK) as u32;
        RetxReq {
            round: (arg >> 54) as u16,
            last: arg >> 53 & 1 == 1,
            first: ((arg >> 28) & (RETX_MAX_SEGMENTS - 1)) as u32,
            set: if arg >> 52 & 1 == 1 { RetxSet::Bitmap(payload) } else { RetxSet::Run(payload) },
        }
    }

    /// Round number as carried (10 bits).
    fn round_of(round: u64) -> u16 {
        (round & Self::ROUND_MASK) as u16
    }

    /// The requested segments as runs.
    fn runs(&self) -> Vec<std::ops::Range<u64>> {
        let first = self.first as u64;
        match self.set {
            RetxSet::Run(n) => vec![first..first + n as u64],
            RetxSet::Bitmap(b) => {
                let mut out: Vec<std::ops::Range<u64>> = Vec::new();
                for i in 0..RETX_BITMAP_BITS as u64 {
                    if b >> i & 1 == 1 {
                        match out.last_mut() {
                            Some(r) if r.end == first + i => r.end += 1,
                            _ => out.push(first + i..first + i + 1),
                        }
                    }
                }
                out
            }
        }
    }

    /// Encode the missing `runs` (sorted, disjoint) as a batch for `round`: a run of at
    /// least [`RETX_BITMAP_BITS`] segments as one run message, anything sparser as
    /// bitmaps of the next [`RETX_BITMAP_BITS`] segments. The last message is flagged.
    #[inline]
    fn batch(round: u64, runs: &[std::ops::Range<u64>]) -> Vec<RetxReq> {
        let round = Self::round_of(round);
        let bits = RETX_BITMAP_BITS as u64;
        let runs: Vec<_> = runs
            .iter()
            .map(|r| r.start.min(RETX_MAX_SEGMENTS)..r.end.min(RETX_MAX_SEGMENTS))
            .filter(|r| !r.is_empty())
            .collect();
        let mut out = Vec::new();
        let (mut i, mut at) = (0usize, runs.first().map_or(0, |r| r.start));
        while i < runs.len() {
            let r = &runs[i];
            at = at.max(r.start);
            if at >= r.end {
                i += 1;
                continue;
            }
            if r.end - at >= bits {
                let n = (r.end - at).min(Self::PAYLOAD_MASK);
                out.push(RetxReq { round, last: false, first: at as u32, set: RetxSet::Run(n as u32) });
                at += n;
                continue;
            }
            // a bitmap over [at, at + bits): every missing segment in that window
            let (base, end) = (at, at + bits);
            let mut mask = 0u32;
            let mut j = i;
            while j < runs.len() && runs[j].start < end {
                let (s, e) = (runs[j].start.max(base), runs[j].end.min(end));
                for k in s..e {
                    mask |= 1 << (k - base);
                }
                if runs[j].end > end {
                    break;
                }
                j += 1;
            }
            out.push(RetxReq { round, last: false, first: base as u32, set: RetxSet::Bitmap(mask) });
            i = j;
            at = end;
        }
        if let Some(l) = out.last_mut() {
            l.last = true;
        }
        out
    }
}
