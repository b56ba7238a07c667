//! TCP sender: NewReno (RFC 5681 / 6582) with RFC 6298 RTO, optionally RFC 3168 ECN or
//! DCTCP (RFC 8257).

use std::collections::VecDeque;

use super::rtt::RttEstimator;
use super::{CongestionControl, TcpConfig};
use crate::packet::{FlowId, HostId, Packet, PacketKind};
use crate::time::Time;
use crate::transport::{Endpoint, EndpointEvent, EndpointStats};

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

/// Per-segment transmit record, for Karn's rule and RTT samples.
#[derive(Clone, Copy, Debug, Default)]
struct SegInfo {
    sent_at: Time,
    retransmitted: bool,
}

/// DCTCP's congestion estimate (RFC 8257 section 3.3).
#[derive(Clone, Copy, Debug)]
pub(super) struct Dctcp {
    g: f64,
    pub(super) alpha: f64,
    acked: u64,
    marked: u64,
    /// Observation window ends when `snd_una` reaches this; set on the first ACK (ns-3).
    window_end: Option<u64>,
}

impl Dctcp {
    pub(super) fn new(g: f64) -> Self {
        Dctcp { g, alpha: 1.0, acked: 0, marked: 0, window_end: None }
    }

    /// Account `acked` newly acknowledged bytes; update alpha once per window.
    pub(super) fn on_ack(&mut self, acked: u64, ece: bool, snd_una: u64, snd_nxt: u64) {
        self.acked += acked;
        if ece {
            self.marked += acked;
        }
        let end = *self.window_end.get_or_insert(snd_nxt);
        if snd_una >= end {
            let f = if self.acked > 0 { self.marked as f64 / self.acked as f64 } else { 0.0 };
            self.alpha = (1.0 - self.g) * self.alpha + self.g * f;
            self.acked = 0;
            self.marked = 0;
            self.window_end = Some(snd_nxt);
        }
    }
}

/// Sending side of one flow of `size` bytes; done when every byte is acknowledged.
pub struct TcpSender {
    cfg: TcpConfig,
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
    /// Segment to send regardless of cwnd (fast retransmit, partial ACK).
    forced_retx: Option<u64>,

    /// Records for segments `seg_base..`, i.e. from `snd_una`'s segment on.
    segs: VecDeque<SegInfo>,
    seg_base: u64,
    rtt: RttEstimator,
    rto_deadline: Option<Time>,

    dctcp: Option<Dctcp>,
    stats: EndpointStats,
    finished: bool,
    done_pending: bool,
}

impl TcpSender {
    /// A flow starting at `now`: the next `poll_transmit` releases the initial window.
    pub fn new(cfg: TcpConfig, flow: FlowId, src: HostId, dst: HostId, size_bytes: u64, _now: Time) -> Self {
        let mss = cfg.mss.max(1) as u64;
        let dctcp = match cfg.cc {
            CongestionControl::NewReno | CongestionControl::NewRenoEcn => None,
            CongestionControl::Dctcp { g } => Some(Dctcp::new(g)),
        };
        let empty = size_bytes == 0;
        TcpSender {
            cfg,
            flow,
            src,
            dst,
            size: size_bytes,
            snd_una: 0,
            snd_nxt: 0,
            high_tx: 0,
            cwnd: cfg.init_cwnd_packets.max(1) as u64 * mss,
            ssthresh: u64::MAX,
            dupacks: 0,
            phase: Phase::Open,
            partial_acked: 0,
            forced_retx: None,
            segs: VecDeque::new(),
            seg_base: 0,
            rtt: RttEstimator::new(&cfg),
            rto_deadline: None,
            dctcp,
            stats: EndpointStats::default(),
            finished: empty,
            done_pending: empty,
        }
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

    /// Loss response shared by fast retransmit and RTO (RFC 5681 eq. 4).
    fn loss_ssthresh(&self) -> u64 {
        (self.flight() / 2).max(2 * self.mss())
    }

    fn record_send(&mut self, now: Time, seq: u64, retransmission: bool) {
        let idx = seq / self.mss();
        let Some(off) = idx.checked_sub(self.seg_base) else { return };
        let off = off as usize;
        if self.segs.len() <= off {
            self.segs.resize(off + 1, SegInfo::default());
        }
        let s = &mut self.segs[off];
        s.sent_at = now;
        s.retransmitted |= retransmission;
    }

    /// RTT sample for an ACK advancing `snd_una` to `ack`, or `None` when it covers a
    /// retransmitted segment (Karn). Timed from the newest segment it acknowledges.
    fn rtt_sample(&self, now: Time, ack: u64) -> Option<Time> {
        let first = (self.snd_una / self.mss()).checked_sub(self.seg_base)? as usize;
        let last = ((ack - 1) / self.mss()).checked_sub(self.seg_base)? as usize;
        let end = (last + 1).min(self.segs.len());
        if first >= end {
            return None;
        }
        let mut newest = None;
        for s in self.segs.range(first..end) {
            if s.retransmitted {
                return None;
            }
            newest = Some(s.sent_at);
        }
        newest.map(|t| now.saturating_sub(t))
    }

    /// Forget records of segments entirely below `ack`.
    fn release_segs(&mut self, ack: u64) {
        let upto = ack / self.mss();
        while self.seg_base < upto && self.segs.pop_front().is_some() {
            self.seg_base += 1;
        }
        self.seg_base = self.seg_base.max(upto);
    }

    /// Whole segments acknowledged by `bytes`, carrying remainders across ACKs (ns-3).
    fn segments_acked(&mut self, bytes: u64) -> u64 {
        let total = self.partial_acked + bytes;
        self.partial_acked = total % self.mss();
        total / self.mss()
    }

    /// ns-3 `TcpNewReno::IncreaseWindow`: slow start capped at ssthresh, the remaining
    /// segments go to congestion avoidance (at most one increment per ACK).
    fn increase_window(&mut self, mut segs: u64) {
        let mss = self.mss();
        if segs == 0 {
            return;
        }
        if self.cwnd < self.ssthresh {
            let grown = self.cwnd.saturating_add(segs.saturating_mul(mss)).min(self.ssthresh);
            segs = segs.saturating_sub((grown - self.cwnd) / mss);
            self.cwnd = grown;
        }
        if self.cwnd >= self.ssthresh && segs > 0 {
            self.cwnd += (mss * mss / self.cwnd).max(1);
        }
    }

    fn on_dupack(&mut self) {
        match self.phase {
            Phase::Loss { .. } => {}
            Phase::Recovery { .. } => self.cwnd += self.mss(),
            Phase::Open | Phase::Cwr { .. } => {
                self.dupacks = self.dupacks.saturating_add(1);
                if self.dupacks == self.cfg.dupack_threshold {
                    self.enter_recovery();
                }
            }
        }
    }

    /// Fast retransmit (RFC 5681 3.2 steps 2-4, RFC 6582 recover point).
    fn enter_recovery(&mut self) {
        self.ssthresh = self.loss_ssthresh();
        self.cwnd = self.ssthresh + self.dupacks as u64 * self.mss();
        self.phase = Phase::Recovery { recover: self.high_tx };
        self.forced_retx = Some(self.snd_una);
    }

    /// The share of cwnd an ECE takes away, twice over: DCTCP's alpha (cut by alpha/2),
    /// 1 for RFC 3168 (halve), `None` when ECE is not answered (NewReno).
    fn ecn_cut_alpha(&self) -> Option<f64> {
        match self.cfg.cc {
            CongestionControl::NewReno => None,
            CongestionControl::NewRenoEcn => Some(1.0),
            CongestionControl::Dctcp { .. } => self.dctcp.map(|d| d.alpha),
        }
    }

    /// ECN window cut (DCTCP by alpha/2, RFC 3168 by half): once per window of data.
    fn enter_cwr(&mut self, alpha: f64) {
        let cut = (self.cwnd as f64 * (1.0 - alpha / 2.0)) as u64;
        self.ssthresh = cut.max(2 * self.mss());
        self.cwnd = self.ssthresh;
        self.phase = Phase::Cwr { recover: self.high_tx };
    }

    fn on_new_ack(&mut self, now: Time, ack: u64, ece: bool) {
        let acked = ack - self.snd_una;
        if let Some(r) = self.rtt_sample(now, ack) {
            self.rtt.sample(r);
        }
        self.snd_una = ack;
        // A cumulative ACK may jump over data resent after an RTO.
        self.snd_nxt = self.snd_nxt.max(ack);
        self.release_segs(ack);
        let segs = self.segments_acked(acked);

        // Same order as ns-3 ReceivedAck: leave CWR, react to ECE, then ProcessAck.
        if let Phase::Cwr { recover } = self.phase {
            if ack > recover {
                self.phase = Phase::Open;
            }
        }
        if ece && self.phase == Phase::Open {
            if let Some(alpha) = self.ecn_cut_alpha() {
                self.enter_cwr(alpha);
            }
        }
        let (una, nxt) = (self.snd_una, self.snd_nxt);
        if let Some(d) = &mut self.dctcp {
            d.on_ack(acked, ece, una, nxt);
        }
        self.process_new_ack(ack, acked, segs);

        if self.snd_una >= self.size {
            self.finish();
        } else if self.snd_una >= self.high_tx {
            self.rto_deadline = None;
        } else {
            self.rto_deadline = Some(now.saturating_add(self.rtt.rto()));
        }
    }

    /// Window update for an ACK of new data, by congestion state.
    fn process_new_ack(&mut self, ack: u64, acked: u64, segs: u64) {
        match self.phase {
            Phase::Open => {
                self.dupacks = 0;
                self.increase_window(segs);
            }
            Phase::Cwr { .. } => self.dupacks = 0,
            Phase::Recovery { recover } if ack >= recover => {
                // Full ACK: deflate to ssthresh and leave recovery (RFC 6582 3.2 step 3).
                self.cwnd = self.ssthresh;
                self.phase = Phase::Open;
                self.dupacks = 0;
            }
            Phase::Recovery { .. } => {
                // Partial ACK: the next hole is lost too; deflate by the newly acked
                // amount, add back one segment (RFC 6582 3.2 step 3).
                self.forced_retx = Some(self.snd_una);
                let back = if acked >= self.mss() { self.mss() } else { 0 };
                self.cwnd = (self.cwnd.saturating_sub(acked) + back).max(self.mss());
            }
            Phase::Loss { recover } => {
                self.dupacks = 0;
                self.increase_window(segs);
                if ack >= recover {
                    self.phase = Phase::Open;
                }
            }
        }
    }

    /// Retransmission timeout (RFC 6298 5.4-5.6, RFC 5681 3.1).
    fn on_rto(&mut self, now: Time) {
        self.stats.timeouts += 1;
        // A repeated timeout of an already timer-retransmitted head keeps ssthresh
        // (RFC 5681 3.1; ns-3 checks IsHeadRetransmitted in CA_LOSS).
        if !matches!(self.phase, Phase::Loss { .. }) {
            self.ssthresh = self.loss_ssthresh();
        }
        self.cwnd = self.mss();
        self.phase = Phase::Loss { recover: self.high_tx };
        self.snd_nxt = self.snd_una;
        self.dupacks = 0;
        self.forced_retx = None;
        self.rtt.backoff();
        self.rto_deadline = Some(now.saturating_add(self.rtt.rto()));
    }

    fn finish(&mut self) {
        self.finished = true;
        self.done_pending = true;
        self.rto_deadline = None;
        self.forced_retx = None;
    }

    fn next_seq(&mut self) -> Option<u64> {
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
        if ack > self.snd_una {
            self.on_new_ack(now, ack, pkt.ece);
        } else if self.snd_una < self.high_tx {
            self.on_dupack();
        }
    }

    fn handle_timeout(&mut self, now: Time) {
        match self.rto_deadline {
            Some(deadline) if now >= deadline && !self.finished => self.on_rto(now),
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
        if seq == self.snd_nxt {
            self.snd_nxt += len;
        }
        self.high_tx = self.high_tx.max(seq + len);
        self.record_send(now, seq, retransmission);
        self.stats.count_data(retransmission);
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now.saturating_add(self.rtt.rto()));
        }
        Some(self.data_packet(now, seq, len))
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.rto_deadline
    }

    fn poll_event(&mut self) -> Option<EndpointEvent> {
        std::mem::take(&mut self.done_pending).then_some(EndpointEvent::SenderDone)
    }

    fn stats(&self) -> EndpointStats {
        self.stats
    }
}
