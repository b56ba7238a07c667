//! TCP NewReno (optionally with RFC 3168 ECN) and DCTCP (simulator baselines) as sans-IO endpoints.
//!
//! The model follows ns-3.37's `TcpSocketBase` + `TcpNewReno` / `TcpDctcp` closely
//! enough to cross-validate flow completion times, restricted to what a datacenter
//! simulation needs: no handshake (optional, in front: [`handshake`]), no FIN, no receive
//! window. Sequence numbers are plain `u64` byte offsets starting at 0.
//!
//! * [`TcpSender`]: congestion control (slow start, congestion avoidance, NewReno
//!   fast retransmit / fast recovery, RTO with backoff, DCTCP or RFC 3168 ECN reaction,
//!   or CUBIC ([`cubic`])); with `sack`, SACK-based loss recovery (RFC 6675) over a
//!   per-segment scoreboard ([`scoreboard`]); with `rack_tlp`, RACK-TLP time-based loss
//!   detection and tail loss probes (RFC 8985).
//! * [`TcpReceiver`]: cumulative ACKs echoing CE as ECE and naming the segment they answer
//!   (a one-block SACK), one per data packet or delayed (RFC 5681 4.2).
//!
//! With `sack`, `rack_tlp` and delayed ACKs off the sender is the SACK-less NewReno below,
//! packet for packet.
//!
//! Where ns-3 and the RFCs disagree we follow the RFCs (configure ns-3 to match for
//! cross-validation: `DelAckCount=1`, `Sack=false`, `LimitedTransmit=false`,
//! `Timestamp=false`, `RecoveryType=TcpClassicRecovery`):
//! * loss response of DCTCP is NewReno's (RFC 8257 3.5), and its ECN cut keeps two
//!   segments (Linux); ns-3's `TcpDctcp::GetSsThresh` cuts by alpha/2 on loss too, with
//!   no floor (`dctcp_ssthresh_ns3`);
//! * a DCTCP sender in CWR still enters fast recovery on 3 dupACKs (ns-3 only does so
//!   from CA_OPEN/CA_DISORDER and would wait for the RTO; `recovery_from_cwr = false`
//!   models ns-3);
//! * the ACK that ends RTO recovery grows cwnd by all it acknowledges (ns-3 counts only
//!   what lies above the recovery point: `loss_exit_above_recover`), and only a valid RTT
//!   sample clears the RTO's backoff (ns-3 clears it on every new ACK:
//!   `rto_reset_on_new_ack`);
//! * congestion avoidance adds `mss * mss / cwnd` per ACK, as ns-3's `TcpNewReno`; ns-3's
//!   `TcpDctcp` is a `TcpLinuxReno`, which counts the segments acknowledged, as Linux does
//!   (`cong_avoid_per_segment`): with delayed ACKs it grows twice as fast;
//! * the CWR cut is applied at once (ns-3 with PRR reaches the same cwnd gradually:
//!   `ecn_cut_prr`);
//! * with delayed ACKs the first segment waits like any other (ns-3 answers it at once:
//!   `delack_first_at_once`), and a change of CE state releases the held ACK for all
//!   before the changing segment (ns-3's DCTCP receiver acknowledges only up to the
//!   segment before, and restarts the delay: `ce_ack_lagged`);
//! * a full ACK sets cwnd = ssthresh without the extra congestion-avoidance step ns-3
//!   takes on the same ACK; RTT samples follow Karn's rule (ns-3 uses timestamps).

pub mod cubic;
pub mod handshake;
mod receiver;
mod rtt;
pub mod scoreboard;
mod sender;
pub mod spec;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_ns3;
#[cfg(test)]
mod tests_recovery;
pub mod trace;

pub use receiver::{EceEcho, TcpReceiver};
pub use sender::{TcpConnState, TcpSender};
pub use spec::{Dctcp, NewReno};

use crate::time::{Time, MS};
pub use crate::transport::acking::DelayedAck;

/// What a loss's window cut starts from (`transport.tcp_loss_cut`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LossCut {
    /// RFC 5681 eq. 4 and RFC 6937: ssthresh half the flight, `snd_nxt - snd_una`, and
    /// PRR's RecoverFS the flight; a timeout cuts again, unless it repeats one (3.1).
    Flight,
    /// Linux (`tcp_init_cwnd_reduction`, `tcp_enter_loss`): ssthresh from the congestion
    /// window (Reno's `tcp_reno_ssthresh` and DCTCP's `dctcp_react_to_loss`: `cwnd / 2` in
    /// whole segments, at least 2) and PRR's RecoverFS the window before the cut
    /// (`prior_cwnd`); a timeout in a window already cut, by recovery or an ECN cut, keeps
    /// that cut ("Reduce ssthresh if it has not yet been made inside this window"). With
    /// SACK the flight is larger than the window when SACKs let segments go beyond cwnd
    /// before the loss was declared (the pipe leaves SACKed segments out).
    Cwnd,
    /// ns-3.37's `TcpNewReno` with SACK: ssthresh half of `BytesInFlight()`, RFC 6675's
    /// pipe (sent, less SACKed and lost, plus resent), taken after the lost segments are
    /// marked on entering recovery and before on a timeout (`inFlightBeforeRto`); RecoverFS
    /// the flight (`UnAckDataCount`). Without SACK it is the flight.
    Pipe,
}

/// The sender's congestion control algorithm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CongestionControl {
    /// Loss-based NewReno (RFC 5681 / 6582); data packets are not ECN-capable.
    NewReno,
    /// DCTCP (RFC 8257): data packets are ECN-capable, and at most once per window of
    /// data an ACK echoing CE cuts cwnd by `alpha / 2`, alpha being the EWMA (gain `g`,
    /// 1/16 in the paper) of the share of acked bytes that were marked, starting at 1.
    /// Loss is handled as in NewReno.
    Dctcp {
        /// EWMA gain in `(0, 1]`: the weight of the latest window's marked share.
        g: f64,
    },
    /// NewReno with RFC 3168 ECN (classic ECN TCP, as Linux runs Reno with `tcp_ecn`):
    /// data packets are ECN-capable, and at most once per window of data an ACK echoing
    /// CE halves cwnd (ssthresh = cwnd / 2, at least 2 MSS). Loss is handled as in NewReno.
    NewRenoEcn,
    /// CUBIC (RFC 9438, Linux's default): the window grows as a cubic function of the time
    /// since the last reduction, and a loss cuts it to `beta` times its size.
    Cubic,
}

impl CongestionControl {
    /// Whether data packets are sent ECN-capable (ECT), i.e. may be CE-marked.
    pub fn ecn_capable(&self) -> bool {
        matches!(self, CongestionControl::Dctcp { .. } | CongestionControl::NewRenoEcn)
    }
}

/// Linux's `TCP_RTO_MIN` (`HZ / 5`): what `tcp_schedule_loss_probe` adds to the probe
/// timeout when one segment is out, whatever the route's `rto_min`.
pub const LINUX_TCP_RTO_MIN: Time = 200 * crate::time::MS;
/// Linux's `TCP_TIMEOUT_MIN`, 2 jiffies, at `HZ = 250` (Debian's kernels and the
/// emulator's machine): added to the probe timeout otherwise.
pub const LINUX_TCP_TIMEOUT_MIN: Time = 8 * crate::time::MS;

/// Parameters of one TCP flow, given to both its sender and its receiver. Times are in
/// ps ([`Time`]), sizes in bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TcpConfig {
    /// Payload bytes per data segment (0 is treated as 1); segments start at multiples
    /// of it, so a retransmission covers exactly one original segment.
    pub mss: u32,
    /// IP + TCP header bytes added to each data segment on the wire.
    pub header_bytes: u32,
    /// Wire size of a pure ACK.
    pub ack_bytes: u32,
    /// Initial congestion window in segments, at least 1 (default 10, as RFC 6928).
    pub init_cwnd_packets: u32,
    /// Lower clamp of the RTO computed from RTT samples (RFC 6298 rule 2.4).
    pub rto_min: Time,
    /// Upper clamp of the RTO, exponential backoff included.
    pub rto_max: Time,
    /// RTO before the first RTT sample.
    pub rto_initial: Time,
    /// Duplicate ACKs that trigger fast retransmit and fast recovery (RFC 5681: 3).
    pub dupack_threshold: u32,
    /// Congestion control: NewReno, or DCTCP with its ECN reaction.
    pub cc: CongestionControl,
    /// Priority queue the flow's packets use (0 = highest).
    pub priority: u8,
    /// SACK-based loss recovery (RFC 2018 / 6675) instead of NewReno's.
    pub sack: bool,
    /// RACK-TLP (RFC 8985): losses detected by time as well as by SACKs above them, and a
    /// tail loss probe before the RTO. Needs `sack`.
    pub rack_tlp: bool,
    /// With `rack_tlp`: the probe timeout as Linux's `tcp_schedule_loss_probe` computes it,
    /// 2 SRTT plus [`LINUX_TCP_RTO_MIN`] with one segment out or [`LINUX_TCP_TIMEOUT_MIN`]
    /// otherwise, and the probe sent at the RTO's time when that comes first; `false`:
    /// RFC 8985's, 2 SRTT plus the delayed-ACK timeout with one segment out, and no probe
    /// when the RTO comes first.
    pub tlp_linux: bool,
    /// With `rack_tlp`: RACK's minimum RTT starts at the path's idle round trip where the
    /// driver knows it ([`TcpSender::with_idle_rtt`]), as a Linux connection's windowed
    /// minimum holds from its handshake; `false`: from the flow's own samples only.
    pub rack_min_rtt_idle_path: bool,
    /// The receiver's delayed ACKs ([`DelayedAck::OFF`]: one ACK per packet).
    pub delayed_ack: DelayedAck,
    /// With `sack`: every partial ACK in recovery also resends the first unacknowledged
    /// segment (RFC 6582's rule, which ns-3's TcpSocketBase applies with SACK too; Linux
    /// does not). It repairs a lost retransmission one round trip after the last
    /// partial ACK instead of at the RTO, at the price of resending some that were not lost.
    pub partial_ack_resend: bool,
    /// Slow start grows the window by one segment per ACK, however many segments the ACK
    /// covers (RFC 5681 3.1 without RFC 3465's byte counting; ns-3's
    /// `TcpNewReno::SlowStart`), instead of by every segment acknowledged (Linux's
    /// `tcp_slow_start`). With delayed ACKs every 2 segments the window grows 1.5x per round
    /// trip instead of 2x.
    pub slow_start_per_ack: bool,
    /// Congestion avoidance counts the segments acknowledged and adds one segment once a
    /// window's worth has been (Linux's `tcp_cong_avoid_ai`; ns-3.37's
    /// `TcpLinuxReno::CongestionAvoidance`, which `TcpDctcp` inherits), instead of adding
    /// `mss * mss / cwnd` per ACK however many segments it covers (RFC 5681 eq. 3; ns-3's
    /// `TcpNewReno`). With delayed ACKs every 2 segments the window grows one segment per
    /// round trip instead of half of one. As Linux's `tcp_cong_avoid_ai` and ns-3 run it
    /// for an ACK of no whole segment too (ns-3: leaving `CA_LOSS` at the recovery point),
    /// the count's first check can grow the window then.
    pub cong_avoid_per_segment: bool,
    /// With `cong_avoid_per_segment`, an ACK in slow start grows the window only up to
    /// ssthresh and nothing it acknowledges above goes to congestion avoidance (ns-3.37's
    /// `TcpLinuxReno::IncreaseWindow`); Linux's `tcp_reno_cong_avoid` passes what
    /// `tcp_slow_start` leaves over on to `tcp_cong_avoid_ai`.
    pub cong_avoid_after_slow_start_ns3: bool,
    /// With delayed ACKs, the receiver answers a change of CE state as ns-3.37's `TcpDctcp`
    /// (`CeState0to1`/`CeState1to0`): if the last ACK event held a packet or was the timer
    /// (`m_delayedAckReserved`), an ACK with the old state's ECE for what came before the
    /// *previous* packet (`m_priorRcvNxt`, read before the packet is added), which cancels
    /// the delayed ACK and its count, so the held packet waits again. `false`: the held
    /// ACK goes at once and acknowledges everything before the packet that changed the
    /// state (RFC 8257 3.2; Linux also answers that packet at once).
    pub ce_ack_lagged: bool,
    /// DCTCP cuts ssthresh to `(1 - alpha / 2) * cwnd` with no lower bound on every
    /// reduction, ECN, fast recovery and RTO alike, as ns-3.37's `TcpDctcp::GetSsThresh`
    /// (which `EnterCwr`, `EnterRecovery` and `ReTxTimeout` call), instead of keeping two
    /// segments on an ECN cut (Linux's `dctcp_ssthresh`) and halving the flight on a loss
    /// (RFC 8257 3.5). A window below one segment sends nothing; as ns-3's `NewAck` keeps
    /// the retransmission timer while unsent data remains (`m_txBuffer->Size()`), the RTO
    /// then fires and sends one.
    pub dctcp_ssthresh_ns3: bool,
    /// An ECN cut lowers ssthresh at once but brings cwnd down to it by PRR over the
    /// round trip, as ns-3.37's `EnterCwr` with `TcpPrrRecovery` (its default): on entry
    /// and on every ACK of new data in `CA_CWR`, `DoRecovery` sets cwnd to the flight plus
    /// PRR's send count (in proportion to what was delivered while the flight is above
    /// ssthresh, else up to what the ACK delivered, at least one segment until one was
    /// sent), and the ACK that ends CWR sets cwnd to ssthresh. `false`: cwnd = ssthresh at
    /// once.
    pub ecn_cut_prr: bool,
    /// With delayed ACKs, the receiver answers the first data packet at once, as ns-3.37's
    /// `TcpSocketBase::ProcessSynRcvd` arranges ("Always respond to first data packet to
    /// speed up the connection"); the count starts from the second.
    pub delack_first_at_once: bool,
    /// The receiver counts a CE mark only on a segment above the last one it counted, as
    /// ns-3.37's `TcpSocketBase::ForwardUp` (`m_ecnCESeq < seq`); any other marked segment
    /// (a resend, one reordered behind a later marked one) counts as unmarked, and
    /// `TcpDctcp` takes it as `CA_EVENT_ECN_NO_CE`. RFC 3168 and Linux count every mark.
    pub ce_seq_check: bool,
    /// Duplicate ACKs (or, with `sack`, segments deemed lost) start fast recovery in CWR,
    /// the round trip after an ECN cut, as in the open state (RFC 5681, RFC 6675; Linux's
    /// `tcp_fastretrans_alert`). `false`: ns-3.37's `TcpSocketBase::DupAck`, which counts
    /// them in `CA_CWR` but enters recovery only from `CA_OPEN`/`CA_DISORDER`, so a loss
    /// within a window of an ECN cut waits for the RTO (with `sack`, segments deemed lost
    /// are still resent while the window has room, as ns-3's `NextSeg` does in any state).
    pub recovery_from_cwr: bool,
    /// The ACK that ends loss recovery after an RTO (it reaches the recovery point) grows
    /// the window only by the segments above the recovery point, as ns-3.37's
    /// `TcpSocketBase::ProcessAck` does in `CA_LOSS`, instead of by every segment it
    /// acknowledges (RFC 5681 slow start, Linux). After an RTO with one segment out, the
    /// resend's ACK leaves cwnd at one segment.
    pub loss_exit_above_recover: bool,
    /// Every ACK of new data recomputes the RTO from the RTT estimate, dropping the
    /// exponential backoff, as ns-3.37's `TcpSocketBase::NewAck` does, instead of only a
    /// valid RTT sample (RFC 6298 5.7, Karn; Linux's `tcp_ack_update_rtt`). Before the
    /// first sample it goes back to `rto_initial` (ns-3's connections have a sample from
    /// their handshake by then; gradwire's `rto_initial` stands in for the RTO it gives).
    pub rto_reset_on_new_ack: bool,
    /// What a loss's window cut starts from ([`LossCut`]).
    pub loss_cut: LossCut,
    /// With CUBIC: Linux's HyStart ends slow start early ([`cubic::HyStart`]).
    pub hystart: bool,
    /// With CUBIC: grow as Linux's `tcp_cubic.c` does where it departs from RFC 9438
    /// ([`cubic::Cubic::new`]).
    pub cubic_linux: bool,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            mss: 1460,
            header_bytes: 40,
            ack_bytes: 40,
            init_cwnd_packets: 10,
            rto_min: 10 * MS,
            rto_max: 1000 * MS,
            rto_initial: 10 * MS,
            dupack_threshold: 3,
            cc: CongestionControl::NewReno,
            priority: 0,
            sack: false,
            rack_tlp: false,
            tlp_linux: false,
            rack_min_rtt_idle_path: false,
            delayed_ack: DelayedAck::OFF,
            partial_ack_resend: false,
            slow_start_per_ack: false,
            cong_avoid_per_segment: false,
            cong_avoid_after_slow_start_ns3: false,
            ce_ack_lagged: false,
            dctcp_ssthresh_ns3: false,
            ecn_cut_prr: false,
            delack_first_at_once: false,
            ce_seq_check: false,
            recovery_from_cwr: true,
            loss_exit_above_recover: false,
            rto_reset_on_new_ack: false,
            loss_cut: LossCut::Flight,
            hystart: false,
            cubic_linux: false,
        }
    }
}
