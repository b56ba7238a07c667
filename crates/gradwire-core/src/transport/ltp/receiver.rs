//! LTP receiver: places segments by offset, ACKs each one, and decides when to close
//! (Early Close with the LT threshold and the deadline, §III-B).

use std::collections::VecDeque;
use std::ops::Range;

use super::{unpack_path, LtThreshold, LtpConfig};
use crate::packet::{CtrlOp, FlowId, HostId, Packet, PacketKind};
use crate::tensor::{Placed, Reassembly};
use crate::time::Time;
use crate::transport::ctrl::CtrlChannel;
use crate::transport::host::Handing;
use crate::transport::shared::kind_from_peer;
use crate::transport::{Endpoint, EndpointEvent, EndpointStats, HostState};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing of the transfer has arrived yet: the clock has not started.
    Idle,
    Open,
    /// Closed early: STOP sent, CONFIRM not yet received.
    Stopping,
    /// Closed: nothing more will be placed.
    Closed,
}

/// How a closed transfer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Close {
    at: Time,
    delivered: u64,
    early: bool,
    bound_met: bool,
}

/// The receiving end of one LTP transfer (an [`Endpoint`]): places each segment by its
/// offset, ACKs every data packet, and closes by the Early Close rule, emitting
/// [`EndpointEvent::Delivered`] once.
pub struct LtpReceiver {
    cfg: LtpConfig,
    flow: FlowId,
    local: HostId,
    remote: HostId,
    reasm: Reassembly,
    critical: Vec<bool>,
    critical_missing: u64,
    /// Bytes that must be in for the loss bound (`size - floor(p·size)`).
    needed: u64,
    wire_bytes: u64,
    lt: LtThreshold,
    group_max_lt: Time,
    state: State,
    start: Option<Time>,
    close: Option<Close>,
    ctrl: CtrlChannel,
    acks: VecDeque<Packet>,
    /// The Early Close rule has been evaluated at this time: thresholds up to it are done.
    checked_until: Time,
    late_discards: u64,
    /// With [`LtpReceiver::leaving_lt`]: the link's LT state is left with the receiving
    /// host when the transfer is delivered, for the link's next transfer.
    carry_lt: bool,
    handing: Handing,
    stats: EndpointStats,
    event: Option<EndpointEvent>,
}

impl LtpReceiver {
    /// A receiver at `local` of `size_bytes` on `flow` from `remote`, with a fresh LT
    /// state from the configured initial path model. A tensor of 0 bytes is closed at
    /// once.
    pub fn new(cfg: LtpConfig, flow: FlowId, local: HostId, remote: HostId, size_bytes: u64) -> Self {
        let lt = LtThreshold::from_config(&cfg);
        Self::with_lt_state(cfg, flow, local, remote, size_bytes, lt)
    }

    /// Start from the LT state of earlier transfers on this link ([`Self::lt_state`]).
    pub fn with_lt_state(
        cfg: LtpConfig,
        flow: FlowId,
        local: HostId,
        remote: HostId,
        size_bytes: u64,
        lt: LtThreshold,
    ) -> Self {
        let seg = cfg.segmentation(flow, size_bytes);
        let critical = cfg.critical.mask(&seg);
        let critical_missing = critical.iter().filter(|&&c| c).count() as u64;
        let mut r = LtpReceiver {
            needed: size_bytes - cfg.allowed_missing(size_bytes),
            wire_bytes: cfg.wire_bytes(&seg),
            ctrl: CtrlChannel::new(flow, local, remote, cfg.ctrl_bytes, cfg.ctrl_priority, cfg.ctrl_rto),
            reasm: Reassembly::new(seg),
            critical,
            critical_missing,
            lt,
            group_max_lt: 0,
            state: State::Idle,
            start: None,
            close: None,
            acks: VecDeque::new(),
            checked_until: 0,
            late_discards: 0,
            carry_lt: false,
            handing: Handing::Idle,
            stats: EndpointStats::default(),
            event: None,
            flow,
            local,
            remote,
            cfg,
        };
        if size_bytes == 0 {
            r.close_now(0, false);
        }
        r
    }

    /// Leaves the LT state with the receiving host once the transfer is delivered
    /// ([`EndpointEvent::HandOn`]), for the next transfer on the link to start from
    /// ([`LtpReceiver::with_lt_state`]).
    pub fn leaving_lt(mut self) -> Self {
        self.carry_lt = true;
        self
    }

    /// The configuration this receiver was built with.
    pub fn config(&self) -> &LtpConfig {
        &self.cfg
    }

    /// The link's LT state, updated by this transfer (path model reports, and the
    /// duration if it completed in full): pass it to the next transfer on the link.
    pub fn lt_state(&self) -> &LtThreshold {
        &self.lt
    }

    /// A receiver of many links applies one deadline to all: `max(LT of every link) + C`.
    /// Give it that maximum (before the transfer starts); the deadline uses the larger of
    /// it and this link's own LT.
    pub fn set_group_max_lt(&mut self, max_lt: Time) {
        self.group_max_lt = max_lt;
    }

    /// This transfer's LT threshold (moves while path reports arrive, until closed).
    pub fn lt_threshold(&self) -> Time {
        self.lt.threshold(self.reasm.segmentation().total_bytes(), self.wire_bytes)
    }

    /// Deadline relative to the transfer's start: `max(LT, group max LT) + C`.
    pub fn deadline(&self) -> Time {
        self.lt_threshold().max(self.group_max_lt).saturating_add(self.cfg.lt_c)
    }

    /// When the first packet of the transfer arrived (the Early Close clock's zero).
    pub fn started_at(&self) -> Option<Time> {
        self.start
    }

    /// When the transfer closed (complete or early), if it has.
    pub fn closed_at(&self) -> Option<Time> {
        self.close.map(|c| c.at)
    }

    /// Closed (complete or early): `Delivered` is reported, and no more data is placed.
    pub fn is_closed(&self) -> bool {
        self.close.is_some()
    }

    /// Closed before everything arrived (between LT and the deadline, or at the deadline).
    pub fn closed_early(&self) -> bool {
        self.close.is_some_and(|c| c.early)
    }

    /// Closed with at least `1 - loss_bound` of the bytes (always true for a complete
    /// transfer); false while open, and false after a deadline close short of the bound.
    pub fn bound_met(&self) -> bool {
        self.close.is_some_and(|c| c.bound_met)
    }

    /// Bytes placed: at close, the `Delivered` event's count; nothing is placed after.
    pub fn delivered_bytes(&self) -> u64 {
        self.reasm.received_bytes()
    }

    /// Share of the tensor's bytes placed, in `[0, 1]` (1 for an empty tensor).
    pub fn delivered_fraction(&self) -> f64 {
        self.reasm.delivered_fraction()
    }

    /// The exact byte ranges missing (whole segments, so whole elements): the bubbles the
    /// application fills with zeros. Final once closed.
    pub fn bubbles(&self) -> Vec<Range<u64>> {
        self.reasm.bubbles()
    }

    /// Data arriving now may be placed (the transfer has not closed).
    pub fn accepts_data(&self) -> bool {
        self.close.is_none()
    }

    /// Which segments are held, for inspection.
    pub fn reassembly(&self) -> &Reassembly {
        &self.reasm
    }

    /// Segment `index` is critical (false past the end).
    pub fn is_critical(&self, index: u64) -> bool {
        self.critical.get(index as usize).copied().unwrap_or(false)
    }

    /// Critical segments not yet received.
    pub fn critical_missing(&self) -> u64 {
        self.critical_missing
    }

    /// Data packets that were not one of the tensor's segments.
    pub fn rejected(&self) -> u64 {
        self.reasm.rejected()
    }

    /// Data for segments not held that arrived after the close.
    pub fn late_discards(&self) -> u64 {
        self.late_discards
    }

    /// Control messages (STOP) sent again after their timeout.
    pub fn ctrl_retransmits(&self) -> u64 {
        self.ctrl.retransmits
    }

    /// Handle a packet and, for data, say which byte range the application should copy
    /// from its payload into the tensor buffer (`None`: discard the payload). The range
    /// always lies inside the tensor and is returned at most once per segment.
    pub fn receive(&mut self, now: Time, pkt: &Packet) -> Option<Range<u64>> {
        match kind_from_peer(pkt, self.flow, self.remote, self.local)? {
            PacketKind::Data => return self.on_data(now, pkt),
            PacketKind::Ctrl(CtrlOp::Rate) if self.close.is_none() => {
                let p = unpack_path(pkt.seq);
                self.lt.update_path(p.rtprop, p.btlbw_bps);
                // The threshold moved: it may have passed already.
                self.check_close(now);
            }
            PacketKind::Ctrl(CtrlOp::Confirm) => {
                self.ctrl.ack(CtrlOp::Confirm, pkt.seq);
                if self.state == State::Stopping {
                    self.state = State::Closed;
                    self.ctrl.cancel(CtrlOp::Stop);
                }
            }
            PacketKind::CtrlAck(op) => {
                self.ctrl.on_ack(op, pkt.seq);
            }
            _ => {}
        }
        None
    }

    fn ack(&mut self, now: Time, offset: u64) {
        let mut a = Packet::ack(self.flow, self.local, self.remote, offset, self.cfg.ack_bytes);
        a.priority = self.cfg.ctrl_priority;
        a.sent_at = now;
        self.acks.push_back(a);
    }

    fn on_data(&mut self, now: Time, pkt: &Packet) -> Option<Range<u64>> {
        if self.close.is_some() {
            // Keep ACKing what we hold: after a complete close the sender may still lack
            // some ACKs. Anything new is not placed, so it is not ACKed either.
            let held = self.reasm.segmentation().locate(pkt.seq, pkt.len).is_ok_and(|i| self.reasm.has(i));
            if held {
                self.ack(now, pkt.seq);
            } else {
                self.late_discards += 1;
            }
            return None;
        }
        if self.state == State::Idle {
            self.state = State::Open;
            self.start = Some(now);
        }
        let placed = self.reasm.insert(pkt.seq, pkt.len).ok()?;
        self.ack(now, pkt.seq);
        let Placed::New(index) = placed else { return None };
        if self.critical[index as usize] {
            self.critical_missing -= 1;
        }
        self.check_close(now);
        Some(pkt.seq..pkt.seq + pkt.len as u64)
    }

    /// The Early Close rule, checked on every new segment and at the LT / deadline times.
    fn check_close(&mut self, now: Time) {
        if self.state != State::Open {
            return;
        }
        self.checked_until = self.checked_until.max(now);
        let elapsed = now - self.start.unwrap_or(now);
        if self.reasm.is_complete() {
            self.lt.record_complete(self.reasm.segmentation().total_bytes(), elapsed);
            return self.close_now(now, false);
        }
        if !self.cfg.loss_tolerant || self.critical_missing > 0 {
            return;
        }
        let enough = self.reasm.received_bytes() >= self.needed;
        if (elapsed >= self.lt_threshold() && enough) || elapsed >= self.deadline() {
            self.close_now(now, true);
        }
    }

    fn close_now(&mut self, now: Time, early: bool) {
        let delivered = self.reasm.received_bytes();
        let bound_met = delivered >= self.needed;
        self.close = Some(Close { at: now, delivered, early, bound_met });
        self.event = Some(EndpointEvent::Delivered { bytes: delivered });
        if early {
            self.state = State::Stopping;
            self.ctrl.send(now, CtrlOp::Stop, delivered);
        } else {
            // Complete: the sender learns it from the ACKs; no handshake to wait for.
            self.state = State::Closed;
        }
    }

    /// Next instant the Early Close rule could change its answer without new data.
    fn close_timer(&self) -> Option<Time> {
        if self.state != State::Open || !self.cfg.loss_tolerant {
            return None;
        }
        let start = self.start?;
        let (lt, deadline) = (start.saturating_add(self.lt_threshold()), start.saturating_add(self.deadline()));
        [lt, deadline].into_iter().find(|&t| t > self.checked_until)
    }
}

impl Endpoint for LtpReceiver {
    fn handle_packet(&mut self, now: Time, pkt: &Packet) {
        self.receive(now, pkt);
    }

    fn handle_timeout(&mut self, now: Time) {
        if self.ctrl.on_timeout(now) {
            self.stats.timeouts += 1;
        }
        self.check_close(now);
    }

    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        let p = self.ctrl.poll_transmit(now).or_else(|| self.acks.pop_front())?;
        self.stats.packets_sent += 1;
        Some(p)
    }

    fn poll_timeout(&self) -> Option<Time> {
        [self.ctrl.deadline(), self.close_timer()].into_iter().flatten().min()
    }

    fn poll_event(&mut self) -> Option<EndpointEvent> {
        // the LT state goes to the host as the transfer is delivered, just before it
        if self.carry_lt && matches!(self.event, Some(EndpointEvent::Delivered { .. })) {
            self.handing.due();
            self.carry_lt = false;
        }
        if self.handing.announce() {
            return Some(EndpointEvent::HandOn);
        }
        self.event.take()
    }

    fn hand_on(&mut self, host: &mut HostState) {
        if self.handing.take() {
            host.peer_mut(self.remote).ltp_lt.insert(self.reasm.segmentation().total_bytes(), self.lt.clone());
        }
    }

    fn stats(&self) -> EndpointStats {
        EndpointStats { retransmits: self.ctrl.retransmits, ..self.stats }
    }
}
