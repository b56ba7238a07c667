//! DLCP sender: zero-RTT start, paced unreliable data, resend rounds on request.

use std::collections::HashSet;

use super::runs::RunQueue;
use super::share::RateReport;
use super::strict::PairView;
use super::{DlcpConfig, RetxReq};
use crate::cc::MinimalRate;
use crate::packet::{CtrlOp, FlowId, HostId, Packet, PacketKind};
use crate::tensor::Segmentation;
use crate::time::Time;
use crate::transport::ctrl::CtrlChannel;
use crate::transport::host::Handing;
use crate::transport::pacer::Pacer;
use crate::transport::shared::kind_from_peer;
use crate::transport::{Endpoint, EndpointEvent, EndpointStats, HostState};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Sending rounds of data until FINISH.
    Sending,
    /// FINISH received; CONFIRM not yet acknowledged.
    Confirming,
    Done,
}

/// Sending side of one DLCP transfer.
///
/// Sends START and the first round of data at once, paced at the rate-control rate
/// ([`MinimalRate`], one decision per `rate_period`); then resends whatever each RETX
/// batch answering its latest STOP names, until FINISH; then confirms and reports
/// `SenderDone` once CONFIRM is acknowledged. Control packets always go before data.
pub struct DlcpSender {
    cfg: DlcpConfig,
    flow: FlowId,
    src: HostId,
    dst: HostId,
    seg: Segmentation,
    state: State,
    ctrl: CtrlChannel,
    cc: MinimalRate,

    /// Segment runs still to send in the current round.
    queue: RunQueue,
    /// RETX arguments accepted since the last STOP (duplicates are acked, not resent).
    accepted: HashSet<u64>,
    /// The last RETX of the batch answering the latest STOP has arrived: once the queue
    /// is empty, the next STOP may go.
    batch_complete: bool,
    /// STOPs sent so far; the next STOP carries this number.
    round: u64,
    /// When the next data packet may leave.
    pacer: Pacer,
    importance_mask: Option<Vec<bool>>,

    /// When the current rate period began: the last decision (or the start).
    period_start: Time,
    period_end: Time,
    sent_in_period: u64,
    /// Send rate of the previous period (None before the first decision).
    prev_send_bps: Option<u64>,
    /// Latest receive rate reported during the current period.
    report: Option<u64>,
    /// `share_headroom` times the receiving host's latest fair share
    /// ([`super::RateHint::ReceiverShare`]): the rate control stays at or below it
    /// (`u64::MAX`: none reported).
    share_bps: u64,
    /// A resend round started this period: no rate decision at its end.
    skip_decision: bool,

    /// With [`DlcpSender::leaving_rate`]: the host pair's rate state is left with the
    /// sending host after every rate decision, for the pair's next transfer.
    carry_rate: bool,
    /// What of the rate state is still to hand on to the host.
    rate_left: RateLeft,
    /// How this sender splits its rate with the host pair's other senders with data.
    pair: Pair,
    /// The pair's senders with data as this sender last saw them ([`Endpoint::hand_on`]).
    view: PairView,
    /// Flows of the pair to wake ([`EndpointEvent::Wake`]): they may pace faster since
    /// this one stopped sending.
    wake: Vec<FlowId>,
    /// Has data queued, so counts among the pair's senders with data.
    counted: bool,
    /// Is counted in the host's record of the pair's senders.
    in_pair: bool,
    handing: Handing,
    stats: EndpointStats,
    retx_ignored: u64,
    done_pending: bool,
}

/// What of a sender's rate state its host has not been handed yet. Small (the sender is
/// touched per packet): a new state is the rate control as it is at the hand-on, which a
/// driver calls before it feeds the sender again (nothing between changes it).
#[derive(Clone, Copy, Debug, Default)]
enum RateLeft {
    #[default]
    Nothing,
    /// A new state (a rate decision) at this time.
    State(Time),
    /// Only that the pair was sending at this time.
    Active(Time),
}

/// How a sender splits the host pair's rate with the pair's other senders with data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pair {
    /// It does not: it paces at its own rate.
    Alone,
    /// Evenly with those counted at `priority` or above ([`DlcpSender::sharing_rate`]).
    Shared { priority: u8 },
    /// By strict priority ([`DlcpSender::pacing_strictly`]).
    Strict,
}

/// A host pair's rate-control state as its last transfer left it
/// (`dlcp_rate_state` other than `tensor` ([`super::RateState`])), and when that pair last sent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CarriedRate {
    /// The rate control's state.
    pub cc: MinimalRate,
    /// The last time a transfer of the pair was sending (a rate decision or report, its
    /// finish; with [`DlcpConfig::rate_restart`], every rate period while it sends).
    pub last_active: Time,
}

impl CarriedRate {
    /// The state a transfer starting at `now` takes: none (a fresh start, as dlcp.md
    /// starts every tensor) once the pair has been idle for longer than `restart`.
    pub fn at(&self, now: Time, restart: Option<Time>) -> Option<MinimalRate> {
        match restart {
            Some(idle) if now.saturating_sub(self.last_active) > idle => None,
            _ => Some(self.cc),
        }
    }
}

impl DlcpSender {
    /// A transfer of `size_bytes` bytes of tensor `flow` from `src` to `dst` starting at
    /// `now`, with rate control starting at line rate. An empty tensor sends no data.
    pub fn new(cfg: DlcpConfig, flow: FlowId, src: HostId, dst: HostId, size_bytes: u64, now: Time) -> Self {
        Self::with_rate(cfg, flow, src, dst, size_bytes, now, None)
    }

    /// A sender whose rate control starts from `rate` (the state an earlier transfer
    /// between the same hosts reached: a deviation, dlcp.md keeps rate state per tensor)
    /// rather than at line rate; `None` is [`DlcpSender::new`].
    pub fn with_rate(
        cfg: DlcpConfig,
        flow: FlowId,
        src: HostId,
        dst: HostId,
        size_bytes: u64,
        now: Time,
        rate: Option<MinimalRate>,
    ) -> Self {
        let seg = cfg.segmentation(flow, size_bytes);
        let min_rate = cfg.bps((cfg.mss + cfg.header_bytes) as u64); // one packet per period
        let mut s = DlcpSender {
            cfg,
            flow,
            src,
            dst,
            seg,
            state: State::Sending,
            ctrl: CtrlChannel::new(flow, src, dst, cfg.ctrl_bytes, cfg.ctrl_priority, cfg.ctrl_rto),
            cc: rate.unwrap_or_else(|| {
                let cc = MinimalRate::new(cfg.line_rate_bps, cfg.delta, cfg.additive_increase_frac, min_rate);
                if cfg.start_rate_frac < 1.0 {
                    cc.starting_at((cfg.line_rate_bps as f64 * cfg.start_rate_frac) as u64)
                } else {
                    cc
                }
            }),
            queue: RunQueue::default(),
            accepted: HashSet::new(),
            batch_complete: false,
            round: 0,
            pacer: Pacer::new(cfg.pacing, now),
            importance_mask: None,
            period_start: now,
            period_end: now.saturating_add(cfg.rate_period.max(1)),
            sent_in_period: 0,
            prev_send_bps: None,
            report: None,
            share_bps: u64::MAX,
            skip_decision: false,
            carry_rate: false,
            rate_left: RateLeft::Nothing,
            pair: Pair::Alone,
            view: PairView::default(),
            wake: Vec::new(),
            counted: false,
            in_pair: false,
            handing: Handing::Idle,
            stats: EndpointStats::default(),
            retx_ignored: 0,
            done_pending: false,
        };
        // Rendezvous and data leave together: START is simply first in line.
        s.ctrl.send(now, CtrlOp::Start, size_bytes);
        if seg.count() > 0 {
            s.queue.push_back(0..seg.count());
        } else {
            s.send_stop(now);
        }
        s
    }

    /// Leaves the rate state with the sending host after every rate decision
    /// ([`EndpointEvent::HandOn`]), for the next transfer between the same hosts to start
    /// from (a deviation: dlcp.md keeps rate state per tensor; see
    /// [`DlcpSender::with_rate`]).
    pub fn leaving_rate(mut self) -> Self {
        self.carry_rate = true;
        self
    }

    /// Splits the rate with the host pair's other senders that have data to send, each
    /// pacing at its rate divided by their count (this one counted while its queue is not
    /// empty): all of them (`priority` 0 for every sender: a deviation, see
    /// [`super::RateState::PairShared`]), or, with each sender's data priority, those at
    /// its priority or above and not those below, so the pair's most important tensor
    /// paces at its whole rate and the host NIC's strict priority orders the rest (a
    /// deviation; see [`super::RateState::PairPriority`]). The count is the sending host's
    /// ([`HostState`]), through [`Endpoint::hand_on`]. A sender dropped while it has data
    /// stays counted there (a driver drops one after `SenderDone`, as the simulator does).
    pub fn sharing_rate(mut self, priority: u8) -> Self {
        self.pair = Pair::Shared { priority };
        self.update_sending();
        self
    }

    /// Paces at a strict-priority part of the host pair's rate, never more than the rate
    /// over the pair: the pair's senders with data and their priorities are the sending
    /// host's ([`HostState`], through [`Endpoint::hand_on`]); the ones at the highest
    /// priority present split the rate less a minimal pace (one packet per period) for
    /// each one below them, which paces at that minimal pace (a deviation; see
    /// [`super::RateState::PairStrict`]). The slot of the next packet follows the pace when
    /// asked ([`Pacer::on_sent_following`]), so a sender whose turn comes need not wait out
    /// a slot taken at the minimal pace; and whenever this one stops sending it names the
    /// pair's others in [`EndpointEvent::Wake`].
    pub fn pacing_strictly(mut self) -> Self {
        self.pair = Pair::Strict;
        self.update_sending();
        self
    }

    /// Keeps this sender counted among the pair's senders with data exactly while it has
    /// data queued; the host learns of a change at the next [`Endpoint::hand_on`].
    #[inline]
    fn update_sending(&mut self) {
        let now = self.state == State::Sending && !self.queue.is_empty();
        if now == self.counted || self.pair == Pair::Alone {
            return;
        }
        self.counted = now;
        self.handing.due();
    }

    /// Whether it splits its rate by strict priority.
    #[inline]
    fn strict(&self) -> bool {
        self.pair == Pair::Strict
    }

    /// May the next data packet leave at `now`.
    fn may_send(&self, now: Time) -> bool {
        match self.strict() {
            false => self.pacer.may_send(now),
            true => self.pacer.may_send_at(now, self.pacing_rate_bps()),
        }
    }

    /// When the next data packet's slot starts.
    fn next_slot(&self) -> Time {
        match self.strict() {
            false => self.pacer.next_transmit(),
            true => self.pacer.next_transmit_at(self.pacing_rate_bps()),
        }
    }

    /// The rate this sender paces at: its rate control's, or its share of it.
    #[inline]
    pub(super) fn pacing_rate_bps(&self) -> u64 {
        match self.pair {
            Pair::Alone => self.cc.rate_bps().max(1),
            Pair::Shared { .. } => (self.cc.rate_bps() / self.view.sharing() as u64).max(1),
            Pair::Strict => self.view.pace(self.cfg.data_priority, self.cc.rate_bps(), self.cc.min_rate_bps()),
        }
    }

    /// Importance per segment from real gradients ([`crate::tensor::importance_mask`]);
    /// overrides `cfg.importance`. Segments beyond the mask are not important.
    pub fn set_importance_mask(&mut self, mask: Vec<bool>) {
        self.importance_mask = Some(mask);
    }

    /// The transfer this sender sends.
    pub fn flow(&self) -> FlowId {
        self.flow
    }

    /// How the tensor is cut into data packets (the receiver uses the same cut).
    pub fn segmentation(&self) -> &Segmentation {
        &self.seg
    }

    /// Current pacing rate in bit/s, counting wire bytes (headers included).
    pub fn rate_bps(&self) -> u64 {
        self.cc.rate_bps()
    }

    /// The rate-control state; a copy seeds [`DlcpSender::with_rate`] for the next
    /// transfer between the same hosts.
    pub fn rate_control(&self) -> &MinimalRate {
        &self.cc
    }

    /// STOPs sent: 1 for a transfer that needed no resend round.
    pub fn rounds(&self) -> u64 {
        self.round
    }

    /// Control messages (START, STOP, CONFIRM) sent again because no `CtrlAck` came
    /// within `ctrl_rto`.
    pub fn ctrl_retransmits(&self) -> u64 {
        self.ctrl.retransmits
    }

    /// RETX requests acknowledged but not acted on (stale round, duplicate, malformed).
    pub fn retx_ignored(&self) -> u64 {
        self.retx_ignored
    }

    /// FINISH arrived: the receiver has what it needs; only the closing handshake is left.
    pub fn finish_received(&self) -> bool {
        self.state != State::Sending
    }

    /// CONFIRM was acknowledged: the transfer is over and nothing more will be sent.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    fn send_stop(&mut self, now: Time) {
        self.ctrl.send(now, CtrlOp::Stop, self.round);
        self.round += 1;
        self.accepted.clear();
        self.batch_complete = false;
    }

    fn on_retx(&mut self, arg: u64) {
        let req = RetxReq::unpack(arg);
        let runs = req.runs();
        // Only requests answering the latest STOP count: an older round's requests were
        // superseded by the receiver's view at that STOP.
        let latest = self.round.checked_sub(1).map(RetxReq::round_of);
        let valid = self.state == State::Sending
            && latest == Some(req.round)
            && !runs.is_empty()
            && runs.iter().all(|r| r.end <= self.seg.count());
        if !valid || self.accepted.contains(&arg) {
            self.retx_ignored += 1;
            return;
        }
        if self.accepted.is_empty() {
            // The round's retransmission request: back to "line rate start" once per
            // round (Figure 7). Reports in flight describe the idle gap before this round;
            // judging the new line-rate burst by them would halve it at once: skip one.
            if self.cfg.resend_at_line_rate {
                self.cc.on_retransmit_request();
                self.cc.cap(self.share_bps);
                self.report = None;
                self.skip_decision = true;
            }
        }
        self.accepted.insert(arg);
        self.queue.extend(runs);
        self.batch_complete |= req.last;
        self.update_sending();
    }

    fn on_rate_report(&mut self, now: Time, arg: u64) {
        let r = RateReport::unpack(arg, self.cfg.rate_hint);
        self.report = Some(r.recv_bps);
        if let Some(share) = r.share_bps {
            // The share is a limit, not a measurement to judge: it holds at once.
            self.share_bps = (share as f64 * self.cfg.share_headroom).min(u64::MAX as f64) as u64;
            let before = self.cc;
            self.cc.cap(self.share_bps);
            if self.cc != before {
                self.store_rate(now);
            }
        }
    }

    /// Leaves the rate state for the host pair's next transfer ([`Self::leaving_rate`]).
    fn store_rate(&mut self, now: Time) {
        if self.carry_rate {
            self.rate_left = RateLeft::State(now);
            self.handing.due();
        }
    }

    /// With [`DlcpConfig::rate_restart`]: the pair was sending at `now` (the carried state
    /// itself is left as the last change made it).
    fn touch_rate(&mut self, now: Time) {
        if !self.carry_rate || self.cfg.rate_restart.is_none() {
            return;
        }
        self.rate_left = match self.rate_left {
            RateLeft::State(at) => RateLeft::State(at.max(now)),
            RateLeft::Active(at) => RateLeft::Active(at.max(now)),
            RateLeft::Nothing => RateLeft::Active(now),
        };
        self.handing.due();
    }

    fn on_finish(&mut self, now: Time) {
        if self.state != State::Sending {
            return;
        }
        self.state = State::Confirming;
        self.queue.clear();
        self.update_sending();
        self.touch_rate(now);
        self.ctrl.cancel(CtrlOp::Start);
        self.ctrl.cancel(CtrlOp::Stop);
        self.ctrl.send(now, CtrlOp::Confirm, 0);
    }

    /// Rate decision at the end of each period, on the latest report if one came. The send
    /// rate is over the time the period really lasted: a driver that wakes late (a busy or
    /// preempted thread) has sent that much longer's worth.
    fn on_period(&mut self, now: Time) {
        let period_bps = self.cfg.bps_over(self.sent_in_period, now.saturating_sub(self.period_start));
        self.period_start = now;
        // The report describes the receiver's own period, which ends one control-path delay
        // or more before this one (up to a period earlier, as periods are not aligned): judged
        // against this period's rate alone, a sender speeding up (its first data after
        // sharing a NIC, a ramp) reads as loss. Against the lower of its last two rates, a
        // steady sender is judged as before and only loss at that rate halves it.
        let send_bps = self.prev_send_bps.map_or(period_bps, |p| p.min(period_bps));
        self.prev_send_bps = Some(period_bps);
        if let Some(recv_bps) = self.report.take().filter(|_| !self.skip_decision) {
            self.cc.on_period(send_bps, recv_bps);
            if self.share_bps != u64::MAX {
                self.cc.cap(self.share_bps);
            }
        }
        self.skip_decision = false;
        self.sent_in_period = 0;
        self.period_end = self.period_end.saturating_add(self.cfg.rate_period.max(1));
        if self.period_end <= now {
            self.period_end = now.saturating_add(self.cfg.rate_period.max(1));
        }
    }

    fn next_data(&mut self, now: Time) -> Option<Packet> {
        if self.state != State::Sending || !self.may_send(now) {
            return None;
        }
        let index = self.queue.pop_index()?;
        let g = self.seg.segment(index)?;
        let mut p = Packet::data(self.flow, self.src, self.dst, g.offset, g.len, self.cfg.header_bytes);
        p.priority = self.cfg.data_priority;
        p.ecn.ect = match &self.importance_mask {
            Some(m) => m.get(index as usize).copied().unwrap_or(false),
            None => self.cfg.importance.of(self.flow, index),
        };
        p.sent_at = now;
        let rate = self.pacing_rate_bps();
        match self.strict() {
            false => self.pacer.on_sent(now, p.wire_bytes, rate),
            true => self.pacer.on_sent_following(now, p.wire_bytes, rate),
        }
        self.sent_in_period += p.wire_bytes as u64;
        if self.round > 0 {
            self.stats.retransmits += 1;
        }
        self.update_sending();
        if self.queue.is_empty() && (self.round == 0 || self.batch_complete) {
            // Out of data: tell the receiver right behind the last packet. In a resend
            // round, only once the whole request has arrived.
            self.send_stop(now);
        }
        Some(p)
    }
}

impl Endpoint for DlcpSender {
    fn handle_packet(&mut self, now: Time, pkt: &Packet) {
        let Some(kind) = kind_from_peer(pkt, self.flow, self.dst, self.src) else { return };
        match kind {
            PacketKind::CtrlAck(op) => {
                if self.ctrl.on_ack(op, pkt.seq) && op == CtrlOp::Confirm && self.state == State::Confirming {
                    self.state = State::Done;
                    self.done_pending = true;
                }
            }
            PacketKind::Ctrl(op) => {
                // Anything from the receiver proves START arrived.
                self.ctrl.cancel(CtrlOp::Start);
                match op {
                    CtrlOp::Rate => self.on_rate_report(now, pkt.seq),
                    CtrlOp::Retx => {
                        self.ctrl.ack(op, pkt.seq);
                        self.on_retx(pkt.seq);
                    }
                    CtrlOp::Finish => {
                        self.ctrl.ack(op, pkt.seq);
                        self.on_finish(now);
                    }
                    CtrlOp::Start | CtrlOp::Stop | CtrlOp::Confirm => {}
                }
            }
            PacketKind::Data | PacketKind::Ack => {}
        }
    }

    fn handle_timeout(&mut self, now: Time) {
        if self.state == State::Done {
            return;
        }
        if self.ctrl.on_timeout(now) {
            self.stats.timeouts += 1;
        }
        if now >= self.period_end {
            let before = self.cc;
            self.on_period(now);
            if self.cc != before {
                self.store_rate(now);
            } else {
                self.touch_rate(now);
            }
        }
    }

    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        let mut p = self.ctrl.poll_transmit(now).or_else(|| self.next_data(now))?;
        if self.cfg.stop_behind_data && p.kind == PacketKind::Ctrl(CtrlOp::Stop) {
            p.priority = self.cfg.data_priority;
            p.ecn.ect = true;
        }
        self.stats.packets_sent += 1;
        Some(p)
    }

    fn poll_timeout(&self) -> Option<Time> {
        if self.state == State::Done {
            return None;
        }
        let slot = (self.state == State::Sending && !self.queue.is_empty()).then_some(self.next_slot());
        [self.ctrl.deadline(), slot, Some(self.period_end)].into_iter().flatten().min()
    }

    fn poll_timeout_unpaced(&self) -> Option<Time> {
        if self.state == State::Done {
            return None;
        }
        [self.ctrl.deadline(), Some(self.period_end)].into_iter().flatten().min()
    }

    fn poll_event(&mut self) -> Option<EndpointEvent> {
        // the host first: the pair's next transfer may start on SenderDone, and leaving
        // the pair names the flows to wake
        if self.handing.announce() {
            return Some(EndpointEvent::HandOn);
        }
        if std::mem::take(&mut self.done_pending) {
            return Some(EndpointEvent::SenderDone);
        }
        self.wake.pop().map(|flow| EndpointEvent::Wake { flow })
    }

    fn hand_on(&mut self, host: &mut HostState) {
        let due = self.handing.take();
        if !due && self.pair == Pair::Alone {
            return;
        }
        let peer = host.peer_mut(self.dst);
        match std::mem::take(&mut self.rate_left) {
            RateLeft::State(at) => peer.dlcp_rate = Some(CarriedRate { cc: self.cc, last_active: at }),
            RateLeft::Active(at) => {
                if let Some(c) = &mut peer.dlcp_rate {
                    c.last_active = c.last_active.max(at);
                }
            }
            RateLeft::Nothing => {}
        }
        let priority = match self.pair {
            Pair::Alone => return,
            Pair::Shared { priority } => priority,
            Pair::Strict => self.cfg.data_priority,
        };
        let senders = &mut peer.dlcp_senders;
        let changed = self.counted != self.in_pair;
        if changed {
            if self.counted {
                senders.join(self.flow, priority);
            } else {
                senders.leave(self.flow);
                if self.strict() {
                    self.wake.extend(senders.flows());
                }
            }
            self.in_pair = self.counted;
        }
        self.view = senders.view(priority);
        if changed {
            // the others pace by the new count from their next packet on
            host.mark_pair_stale(self.dst, self.flow);
        }
    }

    fn stats(&self) -> EndpointStats {
        self.stats
    }
}
