//! LTP sender: CQ/NQ/RQ queues, out-of-order ACKs, 3-later-ACK loss detection, BDP
//! congestion control with pacing.

use std::collections::{BTreeMap, VecDeque};

use super::{pack_path, LtpConfig, PathModel};
use crate::cc::{BdpCc, BdpPhase, SendState};
use crate::packet::{CtrlOp, FlowId, HostId, Packet, PacketKind};
use crate::tensor::Segmentation;
use crate::time::Time;
use crate::transport::ctrl::CtrlChannel;
use crate::transport::host::Handing;
use crate::transport::pacer::Pacer;
use crate::transport::shared::kind_from_peer;
use crate::transport::{Endpoint, EndpointEvent, EndpointStats, HostState};

/// How many later-sent packets must be ACKed before an unACKed one is declared lost.
pub const REORDER_THRESHOLD: usize = 3;
/// The data RTO doubles on each timeout without progress, up to 2^this.
const MAX_BACKOFF: u32 = 6;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Sending,
    /// STOP received; CONFIRM not yet acknowledged.
    Confirming,
    Done,
}

/// One transmission still in flight, keyed by its send order number.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    seg: u64,
    wire: u32,
    /// The segment was sent before (a retransmission): ACKs may answer the earlier copy.
    retx: bool,
    rs: SendState,
}

/// The sending end of one LTP transfer (an [`Endpoint`]): sends every segment of a
/// tensor of `size_bytes`, retransmits losses until each is acknowledged or the receiver
/// sends STOP, then emits [`EndpointEvent::SenderDone`].
pub struct LtpSender {
    cfg: LtpConfig,
    flow: FlowId,
    src: HostId,
    dst: HostId,
    seg: Segmentation,
    critical: Vec<bool>,
    state: State,
    ctrl: CtrlChannel,
    cc: BdpCc,

    /// Critical queue: critical segments, first sends and retransmissions (served first).
    cq: VecDeque<u64>,
    /// Normal queue: normal segments, sent once.
    nq: VecDeque<u64>,
    /// Retransmission queue: normal segments declared lost; served when CQ and NQ are empty.
    rq: VecDeque<u64>,

    acked: Vec<bool>,
    n_acked: u64,
    /// Transmissions per segment (0: never sent).
    sends: Vec<u32>,
    /// Send-order number of the segment's transmission in flight, if one is.
    in_flight_tx: Vec<Option<u64>>,
    /// In flight by send order: the oldest first.
    in_flight: BTreeMap<u64, InFlight>,
    in_flight_bytes: u64,
    next_tx: u64,
    /// Send-order numbers of the (up to 3) latest-sent packets ACKed, descending.
    latest_acked: [Option<u64>; REORDER_THRESHOLD],

    pacer: Pacer,
    srtt: Time,
    rttvar: Time,
    min_rtt: Option<Time>,
    backoff: u32,
    next_report_round: u64,

    stats: EndpointStats,
    lost: u64,
    spurious: u64,
    done_pending: bool,
    /// With [`LtpSender::leaving_path`]: the path model to leave with the sending host
    /// when done, if it was measured.
    carry_path: bool,
    left_path: Option<PathModel>,
    handing: Handing,
}

impl LtpSender {
    /// A sender of `size_bytes` on `flow` from `src` to `dst`, starting at `now` with the
    /// configured initial path model (BDP congestion control begins in Startup). A
    /// tensor of 0 bytes is done at once.
    pub fn new(cfg: LtpConfig, flow: FlowId, src: HostId, dst: HostId, size_bytes: u64, now: Time) -> Self {
        let cc = BdpCc::new(cfg.cc, cfg.initial_rtprop, cfg.initial_btlbw_bps);
        Self::build(cfg, flow, src, dst, size_bytes, now, cc)
    }

    /// Start warm from a path model measured by an earlier transfer on the same link
    /// ([`Self::path`]): no Startup phase.
    pub fn with_path(
        cfg: LtpConfig,
        flow: FlowId,
        src: HostId,
        dst: HostId,
        size_bytes: u64,
        now: Time,
        path: PathModel,
    ) -> Self {
        let cc = BdpCc::warm(cfg.cc, path.rtprop, path.btlbw_bps, now);
        // The RTO starts from the measured RTprop too, not from the configured guess.
        let cfg = LtpConfig { initial_rtprop: path.rtprop, ..cfg };
        Self::build(cfg, flow, src, dst, size_bytes, now, cc)
    }

    /// Leave the path model with the sending host when done (if it was measured:
    /// [`EndpointEvent::HandOn`]), for the next transfer on the link to start from
    /// ([`Self::with_path`]).
    pub fn leaving_path(mut self) -> Self {
        self.carry_path = true;
        self
    }

    fn build(cfg: LtpConfig, flow: FlowId, src: HostId, dst: HostId, size: u64, now: Time, cc: BdpCc) -> Self {
        let seg = cfg.segmentation(flow, size);
        let critical = cfg.critical.mask(&seg);
        let n = seg.count() as usize;
        let (cq, nq) = (0..seg.count()).partition(|&i| critical[i as usize]);
        let ctrl = CtrlChannel::new(flow, src, dst, cfg.ctrl_bytes, cfg.ctrl_priority, cfg.ctrl_rto);
        let srtt = cfg.initial_rtprop.max(1);
        let mut s = LtpSender {
            flow,
            src,
            dst,
            seg,
            critical,
            state: State::Sending,
            ctrl,
            cc,
            cq,
            nq,
            rq: VecDeque::new(),
            acked: vec![false; n],
            n_acked: 0,
            sends: vec![0; n],
            in_flight_tx: vec![None; n],
            in_flight: BTreeMap::new(),
            in_flight_bytes: 0,
            next_tx: 0,
            latest_acked: [None; REORDER_THRESHOLD],
            pacer: Pacer::new(cfg.pacing, now),
            srtt,
            rttvar: srtt / 2,
            min_rtt: None,
            backoff: 0,
            next_report_round: 0,
            stats: EndpointStats::default(),
            lost: 0,
            spurious: 0,
            done_pending: false,
            carry_path: false,
            left_path: None,
            handing: Handing::Idle,
            cfg,
        };
        if n == 0 {
            s.finish();
        }
        s
    }

    /// How the tensor is cut into segments (one per data packet).
    pub fn segmentation(&self) -> &Segmentation {
        &self.seg
    }

    /// The BDP congestion controller (phase, cwnd, pacing rate), for inspection.
    pub fn congestion_control(&self) -> &BdpCc {
        &self.cc
    }

    /// The current path model, to start the next transfer on this link warm.
    pub fn path(&self) -> PathModel {
        PathModel { rtprop: self.cc.rtprop(), btlbw_bps: self.cc.btlbw_bps() }
    }

    /// Segment `index` is critical (false past the end).
    pub fn is_critical(&self, index: u64) -> bool {
        self.critical.get(index as usize).copied().unwrap_or(false)
    }

    /// Transmissions declared lost (3 later ACKs or RTO).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// ACKs that arrived for a transmission already declared lost.
    pub fn spurious_losses(&self) -> u64 {
        self.spurious
    }

    /// Segments waiting for retransmission: critical ones (in CQ) and normal ones (RQ).
    pub fn retransmission_queue(&self) -> Vec<u64> {
        let retx = self.cq.iter().filter(|&&i| self.sends[i as usize] > 0);
        retx.chain(self.rq.iter()).copied().filter(|&i| !self.acked[i as usize]).collect()
    }

    /// Distinct segments acknowledged so far.
    pub fn acked_segments(&self) -> u64 {
        self.n_acked
    }

    /// Wire bytes (headers included) sent and neither acknowledged nor declared lost:
    /// what the congestion window limits.
    pub fn in_flight_bytes(&self) -> u64 {
        self.in_flight_bytes
    }

    /// Control messages (CONFIRM) sent again after their timeout.
    pub fn ctrl_retransmits(&self) -> u64 {
        self.ctrl.retransmits
    }

    /// STOP arrived or everything is acknowledged: the receiver has what it needs.
    pub fn stop_received(&self) -> bool {
        self.state != State::Sending
    }

    /// Finished: everything acknowledged, or STOP received and CONFIRM acknowledged.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// `srtt + max(4 rttvar, min_rto)`, doubled per backoff. The floor bounds the variance
    /// term, as Linux's `rto_min` does (RFC 6298's clock-granularity term), not the whole
    /// RTO: a floor on the RTO itself lets a path whose RTT is steady near `min_rto` time
    /// out on every packet that queues behind a burst.
    fn rto(&self) -> Time {
        let base = self.srtt.saturating_add((4 * self.rttvar).max(self.cfg.min_rto));
        base.saturating_mul(1 << self.backoff)
    }

    /// When the oldest packet in flight times out, while sending.
    fn rto_deadline(&self) -> Option<Time> {
        let sending = self.state == State::Sending;
        self.in_flight.values().next().filter(|_| sending).map(|f| f.rs.sent_at.saturating_add(self.rto()))
    }

    fn finish(&mut self) {
        if self.carry_path && self.cc.measured() {
            self.left_path = Some(self.path());
            self.handing.due();
        }
        self.state = State::Done;
        self.done_pending = true;
        self.in_flight.clear();
        self.in_flight_bytes = 0;
    }

    fn on_rtt(&mut self, rtt: Time) {
        // RFC 6298 smoothing; it only sets the RTO. The path model uses the min filter.
        let err = self.srtt.abs_diff(rtt);
        self.rttvar = (3 * self.rttvar + err) / 4;
        self.srtt = (7 * self.srtt + rtt) / 8;
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
    }

    fn on_ack(&mut self, now: Time, offset: u64) {
        // Never trust the network: the offset must start one of our segments.
        let sb = self.seg.seg_bytes() as u64;
        if offset >= self.seg.total_bytes() || !offset.is_multiple_of(sb) {
            return;
        }
        let index = offset / sb;
        if self.acked[index as usize] {
            return; // duplicate ACK
        }
        self.acked[index as usize] = true;
        self.n_acked += 1;
        let bytes = self.seg.segment(index).map_or(0, |g| g.len as u64 + self.cfg.header_bytes as u64);
        let Some(tx) = self.in_flight_tx[index as usize].take() else {
            // Declared lost already: the "lost" copy made it after all.
            self.spurious += 1;
            self.cc.on_ack(now, bytes, None, None, self.in_flight_bytes);
            return self.check_all_acked();
        };
        let f = self.in_flight.remove(&tx).expect("in_flight_tx and in_flight agree");
        self.in_flight_bytes -= f.wire as u64;
        // An ACK of a retransmitted segment faster than the path's minimum RTT answers
        // an earlier copy: it proves delivery but says nothing about order or timing.
        let elapsed = now.saturating_sub(f.rs.sent_at);
        if f.retx && self.min_rtt.is_some_and(|m| elapsed < m) {
            self.spurious += 1;
            self.cc.on_ack(now, bytes, None, None, self.in_flight_bytes);
            return self.check_all_acked();
        }
        let rtt = (!f.retx).then_some(elapsed); // Karn: time only single transmissions
        if let Some(r) = rtt {
            self.on_rtt(r);
        }
        self.backoff = 0;
        self.cc.on_ack(now, bytes, Some(f.rs), rtt, self.in_flight_bytes);
        self.detect_losses(tx);
        // The RTO may have shrunk with this RTT sample: expire by the new one now, so the
        // timer never points into the past.
        self.on_rto(now, false);
        self.report_path();
        self.check_all_acked();
    }

    /// Packet `tx` was ACKed: everything sent before the 3rd-latest-sent ACKed packet has
    /// 3 later-sent packets ACKed, and is lost.
    fn detect_losses(&mut self, tx: u64) {
        let la = &mut self.latest_acked;
        if let Some(pos) = la.iter().position(|a| a.is_none_or(|a| tx > a)) {
            la[pos..].rotate_right(1);
            la[pos] = Some(tx);
        }
        let Some(third) = la[REORDER_THRESHOLD - 1] else { return };
        let newer = self.in_flight.split_off(&third);
        let lost = std::mem::replace(&mut self.in_flight, newer);
        for f in lost.into_values() {
            self.declare_lost(f);
        }
    }

    fn declare_lost(&mut self, f: InFlight) {
        self.in_flight_tx[f.seg as usize] = None;
        self.in_flight_bytes -= f.wire as u64;
        self.lost += 1;
        if self.critical[f.seg as usize] {
            self.cq.push_back(f.seg);
        } else {
            self.rq.push_back(f.seg);
        }
    }

    /// Tail losses: nothing later gets ACKed, so only time reveals them.
    ///
    /// `timer`: called because the RTO timer fired. Then the oldest packet went a whole
    /// RTO without three later-sent packets being ACKed: the ACK clock is dead and
    /// everything in flight is declared lost (as TCP does on an RTO), not only the
    /// packets older than one RTO. Expiring only those would free one packet per
    /// (doubling) RTO after a burst loss, while the rest of a window of lost packets keeps
    /// `in_flight_bytes` above cwnd and the sender can send nothing at all: in a 32-to-1
    /// incast, senders would sit blocked until the receiver's deadline (30 ms).
    fn on_rto(&mut self, now: Time, timer: bool) {
        let rto = self.rto();
        let oldest_expired = self.in_flight.values().next().is_some_and(|f| f.rs.sent_at.saturating_add(rto) <= now);
        if !oldest_expired {
            return;
        }
        let expired: Vec<u64> = self
            .in_flight
            .iter()
            .take_while(|(_, f)| timer || f.rs.sent_at.saturating_add(rto) <= now)
            .map(|(&tx, _)| tx)
            .collect();
        for tx in expired {
            let f = self.in_flight.remove(&tx).expect("listed above");
            self.declare_lost(f);
        }
        self.stats.timeouts += 1;
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
    }

    /// Once per round trip, outside Startup (whose estimates are still climbing), tell
    /// the receiver the path model its LT threshold is computed from.
    fn report_path(&mut self) {
        if !self.cc.measured() || self.cc.phase() == BdpPhase::Startup || self.cc.round() < self.next_report_round {
            return;
        }
        self.next_report_round = self.cc.round() + 1;
        self.ctrl.send_unreliable(CtrlOp::Rate, pack_path(self.path()));
    }

    fn check_all_acked(&mut self) {
        if self.n_acked == self.seg.count() && self.state == State::Sending {
            self.finish();
        }
    }

    fn on_stop(&mut self, now: Time) {
        if self.state != State::Sending {
            return;
        }
        self.state = State::Confirming;
        self.cq.clear();
        self.nq.clear();
        self.rq.clear();
        self.in_flight.clear();
        self.in_flight_bytes = 0;
        self.ctrl.send(now, CtrlOp::Confirm, 0);
    }

    /// Next segment by the service order CQ, NQ, RQ; skips segments ACKed meanwhile.
    fn pop_next(&mut self) -> Option<u64> {
        for q in [&mut self.cq, &mut self.nq, &mut self.rq] {
            while let Some(i) = q.pop_front() {
                if !self.acked[i as usize] && self.in_flight_tx[i as usize].is_none() {
                    return Some(i);
                }
            }
        }
        None
    }

    fn has_queued(&self) -> bool {
        !(self.cq.is_empty() && self.nq.is_empty() && self.rq.is_empty())
    }

    fn next_wire(&self) -> u64 {
        self.seg.seg_bytes() as u64 + self.cfg.header_bytes as u64
    }

    fn cwnd_allows(&self) -> bool {
        self.in_flight_bytes == 0 || self.in_flight_bytes + self.next_wire() <= self.cc.cwnd_bytes()
    }

    fn next_data(&mut self, now: Time) -> Option<Packet> {
        if self.state != State::Sending || !self.pacer.may_send(now) || !self.cwnd_allows() {
            return None;
        }
        let index = self.pop_next()?;
        let g = self.seg.segment(index)?;
        let mut p = Packet::data(self.flow, self.src, self.dst, g.offset, g.len, self.cfg.header_bytes);
        p.priority = self.cfg.data_priority;
        p.sent_at = now;
        let retx = self.sends[index as usize] > 0;
        self.sends[index as usize] += 1;
        if retx {
            self.stats.retransmits += 1;
        }
        let rs = self.cc.on_send(now, self.in_flight_bytes);
        let tx = self.next_tx;
        self.next_tx += 1;
        self.in_flight.insert(tx, InFlight { seg: index, wire: p.wire_bytes, retx, rs });
        self.in_flight_tx[index as usize] = Some(tx);
        self.in_flight_bytes += p.wire_bytes as u64;
        self.pacer.on_sent(now, p.wire_bytes, self.cc.pacing_bps());
        if !self.has_queued() {
            self.cc.on_app_limited(self.in_flight_bytes);
        }
        Some(p)
    }
}

impl Endpoint for LtpSender {
    fn handle_packet(&mut self, now: Time, pkt: &Packet) {
        let Some(kind) = kind_from_peer(pkt, self.flow, self.dst, self.src) else { return };
        match kind {
            PacketKind::Ack if self.state == State::Sending => self.on_ack(now, pkt.seq),
            PacketKind::Ctrl(CtrlOp::Stop) => {
                self.ctrl.ack(CtrlOp::Stop, pkt.seq);
                self.on_stop(now);
            }
            PacketKind::CtrlAck(op)
                if self.ctrl.on_ack(op, pkt.seq) && op == CtrlOp::Confirm && self.state == State::Confirming =>
            {
                self.finish();
            }
            _ => {}
        }
    }

    fn handle_timeout(&mut self, now: Time) {
        if self.state == State::Done {
            return;
        }
        if self.ctrl.on_timeout(now) {
            self.stats.timeouts += 1;
        }
        if self.state == State::Sending {
            self.on_rto(now, true);
        }
    }

    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        let p = self.ctrl.poll_transmit(now).or_else(|| self.next_data(now))?;
        self.stats.packets_sent += 1;
        Some(p)
    }

    fn poll_timeout(&self) -> Option<Time> {
        if self.state == State::Done {
            return None;
        }
        let sending = self.state == State::Sending;
        // Blocked by cwnd: the next ACK (or the RTO) wakes the sender, not the clock.
        let slot = (sending && self.has_queued() && self.cwnd_allows()).then_some(self.pacer.next_transmit());
        [self.ctrl.deadline(), slot, self.rto_deadline()].into_iter().flatten().min()
    }

    fn poll_timeout_unpaced(&self) -> Option<Time> {
        if self.state == State::Done {
            return None;
        }
        [self.ctrl.deadline(), self.rto_deadline()].into_iter().flatten().min()
    }

    fn poll_event(&mut self) -> Option<EndpointEvent> {
        self.handing.sender_event(&mut self.done_pending)
    }

    fn hand_on(&mut self, host: &mut HostState) {
        if self.handing.take() {
            host.peer_mut(self.dst).ltp_path = self.left_path;
        }
    }

    fn stats(&self) -> EndpointStats {
        self.stats
    }
}
