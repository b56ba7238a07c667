//! TCP sender: NewReno (RFC 5681 / 6582) with RFC 6298 RTO, optionally RFC 3168 ECN,
//! DCTCP (RFC 8257) or CUBIC (RFC 9438); with `sack`, RFC 6675 loss recovery, and with
//! `rack_tlp`, RFC 8985's time-based loss detection and tail loss probes.

use super::cubic::{AckSample, Cubic};
use super::rtt::RttEstimator;
use super::scoreboard::Scoreboard;
use super::trace;
use super::{CongestionControl, LossCut, TcpConfig, LINUX_TCP_RTO_MIN, LINUX_TCP_TIMEOUT_MIN};
use crate::packet::{FlowId, HostId, Packet, PacketKind};
use crate::time::Time;
use crate::transport::host::Handing;
use crate::transport::opt::Opt;
use crate::transport::{Endpoint, EndpointEvent, EndpointStats, HostState};
use std::sync::Arc;

/// Congestion state, named after ns-3's `TcpCongState_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// CA_OPEN / CA_DISORDER: normal growth, counting dupACKs.
    Open,
    /// CA_CWR: an ECN echo cut the window; no growth and no further ECN cut until an ACK
    /// beyond `recover` (one reduction per window of data).
    Cwr { recover: u64 },
    /// CA_RECOVERY: NewReno fast recovery until `recover` is acknowledged.
    Recovery { recover: u64 },
    /// CA_LOSS: after an RTO, go-back-N in slow start until `recover` is acknowledged;
    /// dupACKs are ignored (they may come from our own spurious retransmissions).
    Loss { recover: u64 },
}

impl Phase {
    /// ns-3's name, for [`trace`].
    fn name(self) -> &'static str {
        match self {
            Phase::Open => "CA_OPEN",
            Phase::Cwr { .. } => "CA_CWR",
            Phase::Recovery { .. } => "CA_RECOVERY",
            Phase::Loss { .. } => "CA_LOSS",
        }
    }
}

/// RACK's state (RFC 8985 6.1): the most recently sent segment known delivered, and what
/// reordering has been seen.
#[derive(Clone, Copy, Debug, Default)]
struct Rack {
    /// Send time of the most recently sent segment delivered (ACKed or SACKed).
    xmit_ts: Time,
    /// The RTT that segment measured.
    rtt: Time,
    /// That segment's index (ties in send time go by sequence).
    seg: u64,
    /// Smallest RTT seen.
    min_rtt: Opt,
    /// Highest segment delivered + 1 (reordering: a lower one delivered later, never resent).
    fack: u64,
    /// Reordering has been seen: wait a quarter of min_RTT before deeming a segment lost.
    reord: bool,
    /// When segments not deemed lost yet will be, at the latest (the reorder timer).
    timer: Opt,
}

impl Rack {
    /// Segment `idx`, last sent at `sent_at`, is delivered (RFC 8985 6.2 steps 1-3).
    fn delivered(&mut self, now: Time, idx: u64, sent_at: Time, retransmitted: bool) {
        let rtt = now.saturating_sub(sent_at);
        // An ACK of a resent segment faster than min_RTT answers the original: the resend
        // was spurious, so the network reorders (what RFC 8985 learns from a DSACK).
        if retransmitted && self.min_rtt.get().is_some_and(|m| rtt < m) {
            self.reord = true;
            return;
        }
        self.min_rtt = Some(self.min_rtt.get().map_or(rtt, |m| m.min(rtt))).into();
        if sent_at > self.xmit_ts || (sent_at == self.xmit_ts && idx >= self.seg) {
            self.xmit_ts = sent_at;
            self.rtt = rtt;
            self.seg = idx;
        }
        if idx + 1 < self.fack && !retransmitted {
            self.reord = true;
        }
        self.fack = self.fack.max(idx + 1);
    }

    /// Whether the delivered segment RACK tracks was sent after segment `idx` (sent at
    /// `sent_at`): later, or at the same instant with a higher sequence (RFC 8985 6.2).
    fn sent_after(&self, sent_at: Time, idx: u64) -> bool {
        self.xmit_ts > sent_at || (self.xmit_ts == sent_at && self.seg > idx)
    }
}

/// Proportional rate reduction (RFC 6937), SACK recovery's send budget: what recovery
/// has seen delivered and has sent, against the flight it started with.
#[derive(Clone, Copy, Debug, Default)]
struct Prr {
    delivered: u64,
    out: u64,
    recover_fs: u64,
    /// `DoRecovery` calls in CWR this ACK owes, made once its SACK block is read (ns-3 reads
    /// the options first): entering CWR and the ACK's own call
    cwr_calls: u64,
}

/// What a persistent connection keeps between the flows it carries ([`TcpSender::on_connection`]).
#[derive(Clone, Copy, Debug)]
pub struct TcpConnState {
    cwnd: u64,
    ssthresh: u64,
    rtt: RttEstimator,
    cubic: Option<Cubic>,
    dctcp_alpha: Option<f64>,
    /// RACK's minimum RTT (Linux keeps `tcp_min_rtt` per socket).
    min_rtt: Option<Time>,
    /// When the connection last sent data (Linux's `lsndtime`).
    last_sent: Time,
}

/// DCTCP's congestion estimate (RFC 8257 section 3.3).
#[derive(Clone, Copy, Debug)]
pub(super) struct Dctcp {
    pub(super) alpha: f64,
    acked: u64,
    marked: u64,
    /// Observation window ends when `snd_una` reaches this; set on the first ACK (ns-3).
    window_end: Opt,
}

impl Dctcp {
    pub(super) fn new() -> Self {
        Dctcp { alpha: 1.0, acked: 0, marked: 0, window_end: Opt::NONE }
    }

    /// Account `acked` newly acknowledged bytes; update alpha, with gain `g` (the
    /// configuration's, not kept per sender), once per window.
    pub(super) fn on_ack(&mut self, g: f64, acked: u64, ece: bool, snd_una: u64, snd_nxt: u64) {
        self.acked += acked;
        if ece {
            self.marked += acked;
        }
        let end = self.window_end.get().unwrap_or(snd_nxt);
        self.window_end = Some(end).into();
        if snd_una >= end {
            let f = if self.acked > 0 { self.marked as f64 / self.acked as f64 } else { 0.0 };
            self.alpha = (1.0 - g) * self.alpha + g * f;
            self.acked = 0;
            self.marked = 0;
            self.window_end = Some(snd_nxt).into();
        }
    }
}

/// Sending side of one flow of `size` bytes; done when every byte is acknowledged.
pub struct TcpSender {
    /// Shared by the senders a [`Builder`](crate::transport::Builder) makes: a datacenter
    /// run has millions of senders, 10^5 or more of them live at once.
    cfg: Arc<TcpConfig>,
    flow: FlowId,
    src: HostId,
    dst: HostId,
    size: u64,

    snd_una: u64,
    snd_nxt: u64,
    /// Highest byte ever sent + 1; below it a transmission is a retransmission.
    high_tx: u64,
    cwnd: u64,
    ssthresh: u64,
    dupacks: u32,
    phase: Phase,
    /// Acked bytes not yet worth a whole segment (ns-3 `m_bytesAckedNotProcessed`).
    partial_acked: u64,
    /// With `cong_avoid_per_segment`: segments acknowledged in congestion avoidance since
    /// the window last grew (Linux's `snd_cwnd_cnt`, ns-3's `TcpLinuxReno::m_cWndCnt`).
    cwnd_cnt: u32,
    /// Segment to send regardless of cwnd (fast retransmit, partial ACK).
    forced_retx: Opt,
    /// One new segment may go regardless of cwnd (`partial_ack_resend` with no hole to fill).
    forced_new: bool,

    /// Records for segments from `snd_una`'s on; with SACK, the scoreboard.
    board: Scoreboard,
    rtt: RttEstimator,
    rto_deadline: Opt,
    rack: Rack,
    /// When the tail loss probe fires (RACK-TLP, armed instead of the RTO while open).
    tlp_deadline: Opt,
    /// A probe is due now (new data, or the last segment again), ignoring cwnd.
    tlp_due: bool,
    /// A probe went out and no ACK has advanced since (one probe at a time).
    tlp_sent: bool,
    prr: Prr,

    dctcp: Option<Dctcp>,
    /// Boxed: only CUBIC senders have it, and the sender stays within 440 bytes.
    cubic: Option<Box<Cubic>>,
    stats: EndpointStats,
    finished: bool,
    done_pending: bool,
    /// This flow rides its pair's persistent connection: it started from the connection's
    /// state and leaves its own there when done ([`Endpoint::hand_on`]).
    connection: bool,
    /// Done on a persistent connection, its state not yet handed on.
    handing: Handing,
    last_sent: Time,
}

impl TcpSender {
    /// A flow starting at `now`: the next `poll_transmit` releases the initial window.
    pub fn new(cfg: TcpConfig, flow: FlowId, src: HostId, dst: HostId, size_bytes: u64, now: Time) -> Self {
        Self::with_config(Arc::new(cfg), flow, src, dst, size_bytes, now)
    }

    /// [`new`](Self::new) with a configuration shared with other senders.
    pub fn with_config(
        cfg: Arc<TcpConfig>,
        flow: FlowId,
        src: HostId,
        dst: HostId,
        size_bytes: u64,
        now: Time,
    ) -> Self {
        let mss = cfg.mss.max(1) as u64;
        let dctcp = match cfg.cc {
            CongestionControl::Dctcp { .. } => Some(Dctcp::new()),
            _ => None,
        };
        let cubic =
            (cfg.cc == CongestionControl::Cubic).then(|| Box::new(Cubic::new(now, cfg.hystart, cfg.cubic_linux)));
        let empty = size_bytes == 0;
        let (cwnd, rtt) = (cfg.init_cwnd_packets.max(1) as u64 * mss, RttEstimator::new(&cfg));
        TcpSender {
            cfg,
            flow,
            src,
            dst,
            size: size_bytes,
            snd_una: 0,
            snd_nxt: 0,
            high_tx: 0,
            cwnd,
            ssthresh: u64::MAX,
            dupacks: 0,
            phase: Phase::Open,
            partial_acked: 0,
            cwnd_cnt: 0,
            forced_retx: Opt::NONE,
            forced_new: false,
            board: Scoreboard::default(),
            rtt,
            rto_deadline: Opt::NONE,
            rack: Rack::default(),
            tlp_deadline: Opt::NONE,
            tlp_due: false,
            tlp_sent: false,
            prr: Prr::default(),
            dctcp,
            cubic,
            stats: EndpointStats::default(),
            finished: empty,
            done_pending: empty,
            connection: false,
            handing: Handing::Idle,
            last_sent: 0,
        }
    }

    /// RACK's minimum RTT starts at `idle_rtt`, the round trip of the flow's path with empty
    /// queues (`None`: from the flow's own samples), as a Linux connection's windowed
    /// minimum (`tcp_min_rtt`) holds from its handshake or earlier traffic on an idle
    /// network. Without it a flow whose first samples met a full queue takes the faster ACK
    /// of a resend as the original's (RFC 8985 6.2 step 2) and RACK stops advancing: the
    /// segments sent after the last one delivered wait for the RTO.
    pub fn with_idle_rtt(mut self, idle_rtt: Option<Time>) -> Self {
        if idle_rtt.is_some() {
            self.rack.min_rtt = idle_rtt.into();
        }
        self
    }

    /// This flow rides its host pair's persistent connection, whose state `conn` the pair's
    /// last flow left (`None`: this is its first): it starts with that connection's window,
    /// RTT and congestion state instead of a fresh one, and leaves its own when done
    /// ([`EndpointEvent::HandOn`]). After more than an RTO without sending,
    /// the window restarts as Linux's `tcp_cwnd_restart` does (`tcp_slow_start_after_idle`,
    /// RFC 2861): halved per RTO idle, not below the initial window, ssthresh kept at 3/4
    /// of the old window at least.
    pub fn on_connection(mut self, conn: Option<TcpConnState>, now: Time) -> Self {
        if let Some(st) = conn {
            self.rtt = st.rtt.settled();
            self.ssthresh = st.ssthresh;
            self.cubic = st.cubic.map(Box::new);
            if let (Some(d), Some(a)) = (&mut self.dctcp, st.dctcp_alpha) {
                d.alpha = a;
            }
            self.rack.min_rtt = [self.rack.min_rtt.get(), st.min_rtt].into_iter().flatten().min().into();
            let (initial, rto) = (self.cwnd, self.rtt.rto().max(1));
            let mut cwnd = st.cwnd;
            let idle = now.saturating_sub(st.last_sent);
            if idle > rto {
                self.ssthresh = self.ssthresh.max(cwnd / 2 + cwnd / 4);
                let restart = initial.min(cwnd);
                let mut left = idle;
                while left > rto && cwnd > restart {
                    cwnd >>= 1;
                    left -= rto;
                }
                cwnd = cwnd.max(restart);
                if let Some(c) = &mut self.cubic {
                    c.restart_epoch();
                }
            }
            self.cwnd = cwnd;
        }
        self.connection = true;
        self
    }

    /// Congestion window: bytes that may be in flight (`snd_nxt - snd_una`), inflated
    /// by one MSS per duplicate ACK during fast recovery.
    pub fn cwnd_bytes(&self) -> u64 {
        self.cwnd
    }

    /// Slow-start threshold; `u64::MAX` until the first loss or ECN cut.
    pub fn ssthresh_bytes(&self) -> u64 {
        self.ssthresh
    }

    /// DCTCP's estimate of the marked share, in `[0, 1]`; `None` under NewReno.
    pub fn dctcp_alpha(&self) -> Option<f64> {
        self.dctcp.map(|d| d.alpha)
    }

    /// Current retransmission timeout, backoff included.
    pub fn rto(&self) -> Time {
        self.rtt.rto()
    }

    #[cfg(test)]
    pub(super) fn srtt(&self) -> Option<Time> {
        self.rtt.srtt()
    }

    #[cfg(test)]
    pub(super) fn in_recovery(&self) -> bool {
        matches!(self.phase, Phase::Recovery { .. })
    }

    /// Enter congestion state `to`, traced with the window before the change.
    fn set_phase(&mut self, now: Time, to: Phase) {
        trace::state(now, self.flow, self.phase.name(), to.name(), self.cwnd);
        self.phase = to;
    }

    fn mss(&self) -> u64 {
        self.cfg.mss.max(1) as u64
    }

    fn flight(&self) -> u64 {
        self.snd_nxt - self.snd_una
    }

    /// Length of the segment starting at `seq`. Segments stay aligned to multiples of
    /// mss so a retransmission always covers exactly one original segment.
    fn seg_len(&self, seq: u64) -> u64 {
        let boundary = (seq / self.mss() + 1) * self.mss();
        boundary.min(self.size) - seq
    }

    /// ns-3 sends while the available window holds the next segment.
    fn can_send_new(&self) -> bool {
        self.snd_nxt < self.size && self.flight() + self.seg_len(self.snd_nxt) <= self.cwnd
    }

    /// Loss response shared by fast retransmit and RTO: RFC 5681 eq. 4, or CUBIC's
    /// `beta * cwnd` (RFC 9438 4.6).
    fn loss_ssthresh(&mut self) -> u64 {
        let mss = self.mss();
        if let (true, Some(d)) = (self.cfg.dctcp_ssthresh_ns3, self.dctcp) {
            // ns-3.37's `TcpDctcp::GetSsThresh`, on losses too
            return (self.cwnd as f64 * (1.0 - d.alpha / 2.0)) as u64;
        }
        let cut = match &mut self.cubic {
            Some(c) => (c.on_congestion(self.cwnd as f64 / mss as f64) * mss as f64) as u64,
            None => match self.cfg.loss_cut {
                LossCut::Cwnd => self.cwnd / mss / 2 * mss,
                LossCut::Pipe if self.cfg.sack => self.board.pipe(self.outstanding_segs()) * mss / 2,
                LossCut::Flight | LossCut::Pipe => self.flight() / 2,
            },
        };
        cut.max(2 * mss)
    }

    /// CUBIC's `pkts_acked` with this ACK's RTT sample: HyStart may end slow start here,
    /// before the ACK grows the window (Linux's order in `tcp_ack`).
    fn hystart_on_ack(&mut self, now: Time, rtt: Time) {
        if self.cubic.as_ref().is_none_or(|c| c.hystart.is_none()) {
            return;
        }
        let mss = self.mss();
        let a = AckSample {
            now,
            rtt,
            snd_una: self.snd_una,
            snd_nxt: self.high_tx,
            cwnd: self.cwnd / mss,
            packets_out: (self.high_tx - self.snd_una).div_ceil(mss),
            mss,
            srtt: self.rtt.srtt(),
            below_half_ssthresh: self.cwnd < self.ssthresh / 2,
        };
        let in_slow_start = self.cwnd < self.ssthresh;
        let Some(c) = self.cubic.as_deref_mut() else { return };
        if c.discards_delay_at(now) {
            return;
        }
        if c.hystart.as_mut().is_some_and(|h| h.on_ack(a, in_slow_start)) {
            self.ssthresh = self.cwnd;
        }
    }

    fn record_send(&mut self, now: Time, seq: u64, retransmission: bool) {
        let idx = seq / self.mss();
        self.board.on_send(idx, now, retransmission);
    }

    /// RTT sample for an ACK advancing `snd_una` to `ack`, or `None` when it covers a
    /// retransmitted segment (Karn). Timed from the newest segment it acknowledges.
    fn rtt_sample(&self, now: Time, ack: u64) -> Option<Time> {
        let first = self.snd_una / self.mss();
        let last = (ack - 1) / self.mss();
        let mut newest = None;
        for s in self.board.range(first, last + 1) {
            if s.retransmitted {
                return None;
            }
            newest = Some(s.sent_at);
        }
        newest.map(|t| now.saturating_sub(t))
    }

    /// Forget records of segments entirely below `ack`.
    fn release_segs(&mut self, ack: u64) {
        self.board.release(ack / self.mss());
    }

    /// Whole segments acknowledged by `bytes`, carrying remainders across ACKs (ns-3).
    fn segments_acked(&mut self, bytes: u64) -> u64 {
        let total = self.partial_acked + bytes;
        self.partial_acked = total % self.mss();
        total / self.mss()
    }

    /// ns-3 `TcpNewReno::IncreaseWindow`: slow start, then the remaining segments go to
    /// congestion avoidance (at most one increment per ACK). Slow start grows by every
    /// segment acknowledged up to ssthresh (Linux's `tcp_slow_start`, ns-3's
    /// `TcpLinuxReno`), or with `slow_start_per_ack` by one segment per ACK (ns-3's
    /// `TcpNewReno::SlowStart`).
    fn increase_window(&mut self, now: Time, mut segs: u64) {
        let mss = self.mss();
        if segs == 0 {
            if self.cfg.cong_avoid_per_segment && self.cubic.is_none() && self.cwnd >= self.ssthresh {
                // `TcpLinuxReno::CongestionAvoidance` runs for an ACK of no whole segment
                // too (ns-3 leaving CA_LOSS at the recovery point): its first step grows
                // cwnd if the count has reached it
                self.cong_avoid_ai(0);
            }
            return;
        }
        if self.cwnd < self.ssthresh && self.cfg.slow_start_per_ack {
            self.cwnd += mss;
            segs -= 1;
        } else if self.cwnd < self.ssthresh {
            let grown = self.cwnd.saturating_add(segs.saturating_mul(mss)).min(self.ssthresh);
            segs = segs.saturating_sub((grown - self.cwnd) / mss);
            self.cwnd = grown;
            if self.cfg.cong_avoid_after_slow_start_ns3 {
                // ns-3.37's `TcpLinuxReno::IncreaseWindow`: slow start or congestion
                // avoidance, never both on one ACK
                return;
            }
        }
        if self.cwnd >= self.ssthresh && segs > 0 {
            match (&mut self.cubic, self.rtt.srtt()) {
                (Some(c), Some(srtt)) => {
                    let w = c.on_ack(now, self.cwnd as f64 / mss as f64, segs as f64, srtt);
                    self.cwnd = ((w * mss as f64) as u64).max(self.cwnd);
                }
                _ if self.cfg.cong_avoid_per_segment => self.cong_avoid_ai(segs),
                _ => self.cwnd += (mss * mss / self.cwnd).max(1),
            }
        }
    }

    /// Congestion avoidance counting `segs` acknowledged segments: one segment more once a
    /// window's worth has been acknowledged, as ns-3.37's `TcpLinuxReno::CongestionAvoidance`
    /// (Linux's `tcp_cong_avoid_ai`), its order of steps and its `w` taken before the first
    /// increment included.
    fn cong_avoid_ai(&mut self, segs: u64) {
        let mss = self.mss();
        let w = (self.cwnd / mss).max(1);
        let mut cnt = self.cwnd_cnt as u64;
        if cnt >= w {
            cnt = 0;
            self.cwnd += mss;
        }
        cnt += segs;
        if cnt >= w {
            let delta = cnt / w;
            cnt -= delta * w;
            self.cwnd += delta * mss;
        }
        self.cwnd_cnt = cnt.min(u32::MAX as u64) as u32;
    }

    fn on_dupack(&mut self, now: Time) {
        match self.phase {
            Phase::Loss { .. } => {}
            Phase::Recovery { .. } => self.cwnd += self.mss(),
            Phase::Open | Phase::Cwr { .. } => {
                self.dupacks = self.dupacks.saturating_add(1);
                if self.dupacks == self.cfg.dupack_threshold && self.may_enter_recovery() {
                    self.enter_recovery(now);
                }
            }
        }
    }

    /// Whether loss detected now starts fast recovery: in the open state, and in CWR
    /// unless `recovery_from_cwr` is off (ns-3.37's `TcpSocketBase::DupAck`).
    fn may_enter_recovery(&self) -> bool {
        match self.phase {
            Phase::Open => true,
            Phase::Cwr { .. } => self.cfg.recovery_from_cwr,
            Phase::Recovery { .. } | Phase::Loss { .. } => false,
        }
    }

    /// Fast retransmit (RFC 5681 3.2 steps 2-4, RFC 6582 recover point).
    fn enter_recovery(&mut self, now: Time) {
        self.set_phase(now, Phase::Recovery { recover: self.high_tx });
        self.ssthresh = self.loss_ssthresh();
        self.cwnd = self.ssthresh + self.dupacks as u64 * self.mss();
        self.forced_retx = Some(self.snd_una).into();
    }

    /// The share of cwnd an ECE takes away, twice over: DCTCP's alpha (cut by alpha/2),
    /// 1 for RFC 3168 (halve), `None` when ECE is not answered (NewReno).
    fn ecn_cut_alpha(&self) -> Option<f64> {
        match self.cfg.cc {
            CongestionControl::NewReno | CongestionControl::Cubic => None,
            CongestionControl::NewRenoEcn => Some(1.0),
            CongestionControl::Dctcp { .. } => self.dctcp.map(|d| d.alpha),
        }
    }

    /// ECN window cut (DCTCP by alpha/2, RFC 3168 by half): once per window of data.
    fn enter_cwr(&mut self, now: Time, alpha: f64, delivered: u64) {
        let cut = (self.cwnd as f64 * (1.0 - alpha / 2.0)) as u64;
        let dctcp_ns3 = self.cfg.dctcp_ssthresh_ns3 && self.dctcp.is_some();
        self.ssthresh = if dctcp_ns3 { cut } else { cut.max(2 * self.mss()) };
        self.set_phase(now, Phase::Cwr { recover: self.high_tx });
        if self.cfg.ecn_cut_prr {
            // ns-3.37's `EnterCwr`: `TcpPrrRecovery::EnterRecovery` with the unacknowledged
            // data as the flight recovery starts from, then `DoRecovery` for this ACK
            self.prr = Prr { delivered: 0, out: 0, recover_fs: (self.high_tx - self.snd_una).max(1), cwr_calls: 0 };
            self.prr_cwr_call(delivered);
        } else {
            self.cwnd = self.ssthresh;
        }
    }

    /// A `DoRecovery` call in CWR for an ACK that `delivered` bytes; with SACK it waits until
    /// the ACK's SACK block is read, as ns-3 reads the options before any of it.
    fn prr_cwr_call(&mut self, delivered: u64) {
        if self.cfg.sack {
            self.prr.cwr_calls += 1;
        } else {
            self.prr_cwr(delivered);
        }
    }

    /// ns-3.37's `TcpPrrRecovery::DoRecovery` in `CA_CWR` (SSRB; no retransmission is
    /// acknowledged there): cwnd = flight + send count, the count `ceil(delivered ·
    /// ssthresh / RecoverFS) − out` while the flight exceeds ssthresh, else what this ACK
    /// `delivered` up to ssthresh, never negative, and at least a segment while nothing was
    /// sent.
    fn prr_cwr(&mut self, delivered: u64) {
        let mss = self.mss();
        self.prr.delivered += delivered;
        let inflight = if self.cfg.sack { self.board.pipe(self.outstanding_segs()) * mss } else { self.flight() };
        let p = self.prr;
        let send = if inflight > self.ssthresh {
            (p.delivered as u128 * self.ssthresh as u128).div_ceil(p.recover_fs as u128) as i128 - p.out as i128
        } else {
            (delivered as i128).min(self.ssthresh as i128 - inflight as i128)
        };
        // `max(sendCount, prrOut > 0 ? 0 : segmentSize)`: never below what is in flight
        let send = send.max(if p.out == 0 { mss as i128 } else { 0 });
        self.cwnd = (inflight as i128 + send) as u64;
    }

    fn on_new_ack(&mut self, now: Time, ack: u64, ece: bool) {
        let acked = ack - self.snd_una;
        let sample = self.rtt_sample(now, ack);
        if let Some(r) = sample {
            self.rtt.sample(r);
        }
        if self.cfg.rto_reset_on_new_ack {
            // ns-3.37's `NewAck`: m_rto from the estimate, whatever the backoff
            self.rtt.reset_backoff(self.cfg.rto_initial);
        }
        if self.cfg.rack_tlp {
            let mss = self.mss();
            let (first, end) = (self.snd_una / mss, ack.div_ceil(mss));
            for (i, seg) in self.board.range(first, end).enumerate() {
                if !seg.sacked {
                    self.rack.delivered(now, first + i as u64, seg.sent_at, seg.retransmitted);
                }
            }
            self.tlp_sent = false;
        }
        self.snd_una = ack;
        // A cumulative ACK may jump over data resent after an RTO.
        self.snd_nxt = self.snd_nxt.max(ack);
        if let Some(r) = sample {
            self.hystart_on_ack(now, r);
        }
        self.release_segs(ack);
        let segs = self.segments_acked(acked);

        // Same order as ns-3 ReceivedAck: leave CWR, react to ECE, then ProcessAck.
        if let Phase::Cwr { recover } = self.phase {
            if ack > recover {
                self.set_phase(now, Phase::Open);
                if self.cfg.ecn_cut_prr {
                    self.cwnd = self.ssthresh;
                }
            }
        }
        if ece && self.phase == Phase::Open {
            if let Some(alpha) = self.ecn_cut_alpha() {
                self.enter_cwr(now, alpha, acked);
            }
        }
        let (una, nxt) = (self.snd_una, self.snd_nxt);
        if let (Some(d), CongestionControl::Dctcp { g }) = (&mut self.dctcp, self.cfg.cc) {
            d.on_ack(g, acked, ece, una, nxt);
        }
        self.process_new_ack(now, ack, acked, segs);

        // ns-3's `NewAck` keeps the timer while data is unsent; it matters only to a window
        // below one segment (`dctcp_ssthresh_ns3`), which sends nothing until it fires
        let unsent_timer = self.cfg.dctcp_ssthresh_ns3 && self.cwnd < self.mss();
        if self.snd_una >= self.size {
            self.finish();
        } else if self.snd_una >= self.high_tx && !unsent_timer {
            self.rto_deadline = Opt::NONE;
        } else {
            self.rto_deadline = Some(now.saturating_add(self.rtt.rto())).into();
        }
    }

    /// Window update for an ACK of new data, by congestion state.
    fn process_new_ack(&mut self, now: Time, ack: u64, acked: u64, segs: u64) {
        match self.phase {
            Phase::Open => {
                self.dupacks = 0;
                self.increase_window(now, segs);
            }
            Phase::Cwr { .. } => {
                self.dupacks = 0;
                if self.cfg.ecn_cut_prr && segs >= 1 {
                    self.prr_cwr_call(acked);
                }
            }
            Phase::Recovery { recover } if ack >= recover => {
                // Full ACK: deflate to ssthresh and leave recovery (RFC 6582 3.2 step 3).
                self.set_phase(now, Phase::Open);
                self.cwnd = self.ssthresh;
                self.dupacks = 0;
            }
            // With SACK the scoreboard says what to resend (RFC 6675), and ns-3 sends one
            // more segment on a partial ACK (`partial_ack_resend`).
            Phase::Recovery { .. } if self.cfg.sack => {
                if self.cfg.partial_ack_resend {
                    self.partial_ack_retransmit();
                }
            }
            Phase::Recovery { .. } => {
                // Partial ACK: the next hole is lost too; deflate by the newly acked
                // amount, add back one segment (RFC 6582 3.2 step 3).
                self.forced_retx = Some(self.snd_una).into();
                let back = if acked >= self.mss() { self.mss() } else { 0 };
                self.cwnd = (self.cwnd.saturating_sub(acked) + back).max(self.mss());
            }
            Phase::Loss { recover } => {
                self.dupacks = 0;
                // ns-3.37 counts, on the ACK that ends CA_LOSS, only the segments above
                // the recovery point (`ProcessAck`: `(ackNumber - m_recover) / segmentSize`)
                let segs = if ack >= recover && self.cfg.loss_exit_above_recover {
                    (ack - recover) / self.mss()
                } else {
                    segs
                };
                self.increase_window(now, segs);
                if ack >= recover {
                    self.set_phase(now, Phase::Open);
                }
            }
        }
    }

    /// ns-3.37's `TcpSocketBase::ProcessAck` on a partial ACK in SACK recovery: unless
    /// the new head has been retransmitted already (`IsRetransmittedDataAcked`),
    /// `DoRetransmit` sends, whatever cwnd says, the first segment deemed lost and never
    /// retransmitted (`NextSeg` rule 1), else new data (rule 2), else the head again.
    fn partial_ack_retransmit(&mut self) {
        let mss = self.mss();
        let head = self.snd_una / mss;
        if self.board.get(head).is_none_or(|s| s.sacked || s.retransmitted) {
            return;
        }
        let end = self.high_tx.div_ceil(mss);
        let lost = self.board.range(head, end).position(|s| s.lost && !s.retransmitted && !s.sacked);
        if let Some(off) = lost {
            self.forced_retx = Some((head + off as u64) * mss).into();
        } else if self.snd_nxt < self.size {
            self.forced_new = true;
        } else {
            self.board.mark_lost(head);
            self.forced_retx = Some(head * mss).into();
        }
    }

    /// Retransmission timeout (RFC 6298 5.4-5.6, RFC 5681 3.1).
    fn on_rto(&mut self, now: Time) {
        self.stats.timeouts += 1;
        // A repeated timeout of an already timer-retransmitted head keeps ssthresh
        // (RFC 5681 3.1; ns-3 checks IsHeadRetransmitted in CA_LOSS); cutting as Linux does,
        // so does a timeout in a window already cut, by recovery or ECN (`tcp_enter_loss`:
        // "Reduce ssthresh if it has not yet been made inside this window").
        let cut_made = match self.phase {
            Phase::Loss { .. } => true,
            Phase::Cwr { recover } | Phase::Recovery { recover } => {
                self.cfg.loss_cut == LossCut::Cwnd && recover > self.snd_una
            }
            Phase::Open => false,
        };
        if !cut_made {
            self.ssthresh = self.loss_ssthresh();
        }
        if let Some(c) = &mut self.cubic {
            c.on_timeout(now, self.high_tx);
        }
        self.set_phase(now, Phase::Loss { recover: self.high_tx });
        self.cwnd = self.mss();
        if self.cfg.sack {
            // Resend what the receiver does not hold, in slow start (RFC 6675 5.1; Linux
            // keeps SACK information across the timeout).
            self.board.mark_all_lost();
            self.tlp_deadline = Opt::NONE;
            self.tlp_due = false;
            self.rack.timer = Opt::NONE;
        } else {
            self.snd_nxt = self.snd_una;
        }
        self.dupacks = 0;
        self.forced_retx = Opt::NONE;
        self.forced_new = false;
        self.rtt.backoff();
        self.rto_deadline = Some(now.saturating_add(self.rtt.rto())).into();
    }

    /// The connection's state as this flow leaves it.
    fn connection_state(&self) -> TcpConnState {
        TcpConnState {
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            rtt: self.rtt,
            cubic: self.cubic.as_deref().copied(),
            dctcp_alpha: self.dctcp.map(|d| d.alpha),
            min_rtt: self.rack.min_rtt.get(),
            last_sent: self.last_sent,
        }
    }

    fn finish(&mut self) {
        // a finished sender changes no more state: `hand_on` reads it as it is now
        if self.connection {
            self.handing.due();
        }
        self.finished = true;
        self.done_pending = true;
        self.rto_deadline = Opt::NONE;
        self.forced_retx = Opt::NONE;
        self.forced_new = false;
        self.tlp_deadline = Opt::NONE;
        self.rack.timer = Opt::NONE;
    }

    /// Segments sent and not cumulatively acknowledged.
    fn outstanding_segs(&self) -> u64 {
        self.snd_nxt.div_ceil(self.mss()).saturating_sub(self.board.base())
    }

    /// With SACK: the next segment to send while `pipe` leaves room in cwnd (RFC 6675
    /// NextSeg: lost segments first, then new data), or the tail loss probe, which cwnd
    /// does not hold back.
    fn next_seq_sack(&mut self) -> Option<u64> {
        let mss = self.mss();
        if std::mem::take(&mut self.tlp_due) {
            // New data if there is any, else the last segment again (RFC 8985 7.3).
            if self.snd_nxt < self.size {
                return Some(self.snd_nxt);
            }
            let last = (self.high_tx - 1) / mss;
            if self.board.get(last).is_some_and(|s| !s.sacked) && last * mss >= self.snd_una {
                return Some(last * mss);
            }
        }
        if let Some(seq) = self.forced_retx.take() {
            if seq >= self.snd_una && seq < self.high_tx && self.board.get(seq / mss).is_some_and(|s| s.lost) {
                return Some(seq);
            }
        }
        if std::mem::take(&mut self.forced_new) && self.snd_nxt < self.size {
            return Some(self.snd_nxt);
        }
        let pipe = self.board.pipe(self.outstanding_segs()) * mss;
        if let Some(idx) = self.board.next_lost() {
            let seq = idx * mss;
            if pipe + self.seg_len(seq) <= self.cwnd && seq >= self.snd_una && seq < self.high_tx {
                return Some(seq);
            }
            return None;
        }
        (self.snd_nxt < self.size && pipe + self.seg_len(self.snd_nxt) <= self.cwnd).then_some(self.snd_nxt)
    }

    /// With SACK, after an ACK or the reorder timer: deem segments lost (by RACK, or by
    /// `dupack_threshold` SACKs above them) and start recovery if any is.
    fn detect_losses(&mut self, now: Time) {
        if self.cfg.rack_tlp {
            self.rack_detect(now);
        } else {
            self.board.mark_lost_below_sacks(self.cfg.dupack_threshold);
        }
        if self.board.lost() > 0 && self.may_enter_recovery() {
            // RFC 6675 5 (3): ssthresh to half the flight, cwnd or pipe (`LossCut`; CUBIC:
            // beta x cwnd); PRR takes cwnd there in proportion to what is delivered (RFC
            // 6937), as Linux and ns-3 do, instead of at once: all the holes resent in one
            // burst into the port that just dropped them would be lost again.
            self.ssthresh = self.loss_ssthresh();
            let recover_fs = if self.cfg.loss_cut == LossCut::Cwnd { self.cwnd } else { self.flight() };
            self.prr = Prr { delivered: 0, out: 0, recover_fs: recover_fs.max(1), cwr_calls: 0 };
            self.set_phase(now, Phase::Recovery { recover: self.high_tx });
            self.dupacks = 0;
            self.tlp_deadline = Opt::NONE;
            // (4.3): the first segment deemed lost goes at once, whatever pipe says.
            self.forced_retx = self.board.next_lost().map(|i| i * self.mss()).into();
        }
    }

    /// PRR's window for the next sends (RFC 6937 section 3): while the network holds more
    /// than ssthresh, send in proportion to what is delivered; below it, catch up towards
    /// ssthresh by at most what was delivered, plus one segment (PRR-SSRB) only on a `safe`
    /// ACK, one that cumulatively acknowledges a retransmission and reveals no new loss
    /// (Linux 4.x `tcp_cwnd_reduction`: `FLAG_RETRANS_DATA_ACKED` without
    /// `FLAG_LOST_RETRANS`; ns-3.37 `TcpPrrRecovery::DoRecovery`: `m_isRetransDataAcked`;
    /// RFC 6937bis's SafeACK). Any other ACK sends no more than it delivered, so a
    /// recovery whose retransmissions are lost again does not keep adding a segment per ACK
    /// into the port that dropped them.
    fn prr_update(&mut self, delivered: u64, safe: bool) {
        let mss = self.mss();
        self.prr.delivered += delivered;
        let pipe = self.board.pipe(self.outstanding_segs()) * mss;
        let p = self.prr;
        let sndcnt = if pipe > self.ssthresh {
            (p.delivered as u128 * self.ssthresh as u128).div_ceil(p.recover_fs as u128) as i128 - p.out as i128
        } else {
            let limit = if safe {
                (p.delivered as i128 - p.out as i128).max(delivered as i128) + mss as i128
            } else {
                delivered as i128
            };
            (self.ssthresh as i128 - pipe as i128).min(limit)
        };
        self.cwnd = pipe + sndcnt.max(0) as u64;
    }

    /// RACK's loss detection (RFC 8985 6.2 step 5): a segment sent before the most recent
    /// delivered one is lost once `rtt + reo_wnd` has passed since it was sent; the
    /// earliest that has not yet is when the reorder timer fires.
    fn rack_detect(&mut self, now: Time) {
        // Nothing delivered out of order and no resend: every segment outstanding was
        // sent after the ones delivered.
        if self.board.sacked() == 0 && self.phase == Phase::Open {
            self.rack.timer = Opt::NONE;
            return;
        }
        let in_recovery = matches!(self.phase, Phase::Recovery { .. } | Phase::Loss { .. });
        let reo_wnd = if !self.rack.reord && (in_recovery || self.board.sacked() >= self.cfg.dupack_threshold as u64) {
            0
        } else {
            let quarter = self.rack.min_rtt.get().unwrap_or(0) / 4;
            self.rtt.srtt().map_or(quarter, |s| quarter.min(s))
        };
        let mut timer: Option<Time> = None;
        let (base, end) = (self.board.base(), self.board.base() + self.outstanding_segs());
        for i in base..end {
            let Some(&seg) = self.board.get(i) else { break };
            if seg.sacked || (seg.lost && !seg.retx_out) || !self.rack.sent_after(seg.sent_at, i) {
                continue;
            }
            let due = seg.sent_at.saturating_add(self.rack.rtt).saturating_add(reo_wnd);
            if now >= due {
                self.board.mark_lost(i);
            } else {
                timer = Some(timer.map_or(due, |t| t.min(due)));
            }
        }
        self.rack.timer = timer.into();
    }

    /// Arms the tail loss probe (RFC 8985 7.2): while not in loss recovery (open, or in
    /// an ECN window cut: Linux's `tcp_schedule_loss_probe` allows `TCP_CA_Open` and
    /// `TCP_CA_CWR`) with data outstanding and no probe out, two smoothed RTTs after now
    /// (plus the peer's delayed-ACK timeout when a single segment is out), unless the RTO
    /// would fire first; with `tlp_linux` as Linux times it (see [`TcpConfig::tlp_linux`]).
    fn arm_tlp(&mut self, now: Time) {
        self.tlp_deadline = Opt::NONE;
        let not_recovering = matches!(self.phase, Phase::Open | Phase::Cwr { .. });
        if !self.cfg.rack_tlp || self.finished || !not_recovering || self.tlp_sent {
            return;
        }
        let (Some(srtt), true) = (self.rtt.srtt(), self.snd_una < self.high_tx) else { return };
        if self.cfg.tlp_linux {
            let one = self.outstanding_segs() == 1;
            let extra = if one { LINUX_TCP_RTO_MIN } else { LINUX_TCP_TIMEOUT_MIN };
            let at = now.saturating_add(srtt.saturating_mul(2)).saturating_add(extra);
            self.tlp_deadline = Some(self.rto_deadline.get().map_or(at, |rto| at.min(rto))).into();
            return;
        }
        let mut pto = srtt.saturating_mul(2);
        if self.outstanding_segs() == 1 && self.cfg.delayed_ack.count > 1 {
            pto = pto.saturating_add(self.cfg.delayed_ack.timeout);
        }
        let at = now.saturating_add(pto);
        if self.rto_deadline.get().is_none_or(|rto| at < rto) {
            self.tlp_deadline = Some(at).into();
        }
    }

    fn next_seq(&mut self) -> Option<u64> {
        if self.cfg.sack {
            return self.next_seq_sack();
        }
        if let Some(seq) = self.forced_retx.take() {
            if seq >= self.snd_una && seq < self.high_tx {
                return Some(seq);
            }
        }
        self.can_send_new().then_some(self.snd_nxt)
    }

    fn data_packet(&self, now: Time, seq: u64, len: u64) -> Packet {
        let mut p = Packet::data(self.flow, self.src, self.dst, seq, len as u32, self.cfg.header_bytes);
        p.priority = self.cfg.priority;
        p.ecn.ect = self.cfg.cc.ecn_capable();
        p.sent_at = now;
        p
    }
}

impl Endpoint for TcpSender {
    fn handle_packet(&mut self, now: Time, pkt: &Packet) {
        if self.finished || pkt.flow != self.flow || pkt.kind != PacketKind::Ack {
            return;
        }
        let ack = pkt.seq;
        // Stale ACKs and ACKs of data never sent are ignored (RFC 793, ns-3).
        if ack < self.snd_una || ack > self.high_tx {
            return;
        }
        if !self.cfg.sack {
            if ack > self.snd_una {
                self.on_new_ack(now, ack, pkt.ece);
            } else if self.snd_una < self.high_tx {
                self.on_dupack(now);
            }
            return;
        }
        let mss = self.mss();
        let (una0, sacked0) = (self.snd_una, self.board.sacked());
        // PRR's safe ACK (below): it acknowledges a retransmission cumulatively.
        let retx_acked =
            ack > self.snd_una && self.board.range(una0 / mss, ack / mss).any(|s| s.retransmitted && !s.sacked);
        if ack > self.snd_una {
            self.on_new_ack(now, ack, pkt.ece);
        }
        // The segment this ACK answers (its SACK block), if above the cumulative ACK.
        if !self.finished && pkt.rank >= self.snd_una && pkt.rank < self.high_tx && pkt.rank.is_multiple_of(mss) {
            let idx = pkt.rank / mss;
            if let Some(seg) = self.board.sack(idx) {
                if self.cfg.rack_tlp {
                    self.rack.delivered(now, idx, seg.sent_at, seg.retransmitted);
                }
            }
        }
        if !self.finished {
            let marks0 = self.board.marks();
            self.detect_losses(now);
            // RFC 6937's DeliveredData: newly acknowledged plus newly SACKed bytes (a
            // SACKed segment now cumulatively acknowledged counts once).
            let delivered = ((self.snd_una - una0) as i64 + (self.board.sacked() as i64 - sacked0 as i64) * mss as i64)
                .max(0) as u64;
            if matches!(self.phase, Phase::Recovery { .. }) {
                let safe = retx_acked && self.board.marks() == marks0;
                self.prr_update(delivered, safe);
            }
            let calls = std::mem::take(&mut self.prr.cwr_calls);
            if calls > 0 && matches!(self.phase, Phase::Cwr { .. }) {
                self.prr.delivered += delivered * (calls - 1);
                self.prr_cwr(delivered);
            }
            self.arm_tlp(now);
        }
    }

    fn handle_timeout(&mut self, now: Time) {
        if self.finished {
            return;
        }
        if self.rack.timer.get().is_some_and(|t| now >= t) {
            self.rack.timer = Opt::NONE;
            self.detect_losses(now);
        }
        if self.tlp_deadline.get().is_some_and(|t| now >= t) {
            self.tlp_deadline = Opt::NONE;
            self.tlp_due = true;
            self.tlp_sent = true;
            self.rto_deadline = Some(now.saturating_add(self.rtt.rto())).into();
        }
        match self.rto_deadline.get() {
            Some(deadline) if now >= deadline => self.on_rto(now),
            _ => {}
        }
    }

    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        if self.finished {
            return None;
        }
        let seq = self.next_seq()?;
        let len = self.seg_len(seq);
        let retransmission = seq < self.high_tx;
        trace::send(now, self.flow, self.dst, seq, retransmission);
        if seq == self.snd_nxt {
            self.snd_nxt += len;
        }
        self.high_tx = self.high_tx.max(seq + len);
        self.record_send(now, seq, retransmission);
        self.last_sent = now;
        if (self.cfg.sack && matches!(self.phase, Phase::Recovery { .. }))
            || (self.cfg.ecn_cut_prr && matches!(self.phase, Phase::Cwr { .. }))
        {
            self.prr.out += len;
        }
        self.stats.count_data(retransmission);
        if self.rto_deadline.get().is_none() {
            self.rto_deadline = Some(now.saturating_add(self.rtt.rto())).into();
        }
        if self.cfg.rack_tlp && self.tlp_deadline.get().is_none() {
            self.arm_tlp(now);
        }
        Some(self.data_packet(now, seq, len))
    }

    fn poll_timeout(&self) -> Option<Time> {
        [self.rto_deadline, self.tlp_deadline, self.rack.timer].into_iter().filter_map(Opt::get).min()
    }

    fn poll_event(&mut self) -> Option<EndpointEvent> {
        self.handing.sender_event(&mut self.done_pending)
    }

    fn hand_on(&mut self, host: &mut HostState) {
        if self.handing.take() {
            host.peer_mut(self.dst).tcp = Some(self.connection_state());
        }
    }

    fn stats(&self) -> EndpointStats {
        self.stats
    }
}
