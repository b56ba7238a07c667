//! DLCP receiver: places segments by address, checks the loss bound on every data
//! packet, requests what is missing after each STOP, finishes at `1 - loss_bound`.

use std::ops::Range;

use super::share::{HostLoad, RateHint, RateReport};
use super::{DlcpConfig, RetxReq};
use crate::packet::{CtrlOp, FlowId, HostId, Packet, PacketKind};
use crate::tensor::{Placed, Reassembly};
use crate::time::Time;
use crate::transport::ctrl::CtrlChannel;
use crate::transport::host::Handing;
use crate::transport::shared::kind_from_peer;
use crate::transport::{Endpoint, EndpointEvent, EndpointStats, HostState};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// No START yet: data is discarded (the buffer is not ours to write yet).
    Waiting,
    /// Bound not met yet.
    Receiving,
    /// FINISH sent; still placing in-flight data until CONFIRM.
    Finishing,
    /// CONFIRM received: nothing more will be placed.
    Closed,
}

/// Receiving side of one DLCP transfer of a tensor of known size.
///
/// Accepts data only between a START of the expected size and CONFIRM, reports the
/// receive rate every `rate_period` until the bound is met, answers each new STOP with
/// one batch of RETX requests, and raises `Delivered` (with FINISH to the sender) as soon
/// as at most `floor(loss_bound * size)` bytes are missing. Only packets of its flow from
/// `remote` to `local` are considered.
pub struct DlcpReceiver {
    cfg: DlcpConfig,
    flow: FlowId,
    local: HostId,
    remote: HostId,
    reasm: Reassembly,
    allowed_missing: u64,
    state: State,
    ctrl: CtrlChannel,
    /// Highest STOP round handled.
    last_stop: Option<u64>,
    /// With `retx_quiet`: the STOP round whose request waits for the data to go quiet, and
    /// when it goes out unless more data arrives first.
    quiet_retx: Option<(u64, Time)>,
    delivered_at_finish: Option<u64>,
    period_end: Time,
    recv_in_period: u64,
    /// With [`RateHint::ReceiverShare`]: its own record of the hosts sending here, used
    /// unless it shares its host's ([`Self::sharing_host_load`]). Boxed: the receiver is
    /// touched per packet and stays small.
    own_load: Option<Box<HostLoad>>,
    /// Reports into its host's record (in [`HostState`]) instead of its own.
    shares_host_load: bool,
    /// The bound was met at this time (`Time::MAX`: not yet), with data in the period or
    /// not: the host's record still has to count its sender then ([`Endpoint::hand_on`]).
    load_note_at: Time,
    load_note_active: bool,
    handing: Handing,
    early_discards: u64,
    late_discards: u64,
    bad_starts: u64,
    stats: EndpointStats,
    event: Option<EndpointEvent>,
}

impl DlcpReceiver {
    /// A receiver at `local` for the tensor `flow` of `size_bytes` bytes sent by `remote`;
    /// it discards data until that sender's START arrives.
    pub fn new(cfg: DlcpConfig, flow: FlowId, local: HostId, remote: HostId, size_bytes: u64) -> Self {
        DlcpReceiver {
            cfg,
            flow,
            local,
            remote,
            reasm: Reassembly::new(cfg.segmentation(flow, size_bytes)),
            allowed_missing: cfg.allowed_missing(size_bytes),
            state: State::Waiting,
            ctrl: CtrlChannel::new(flow, local, remote, cfg.ctrl_bytes, cfg.ctrl_priority, cfg.ctrl_rto),
            last_stop: None,
            quiet_retx: None,
            delivered_at_finish: None,
            period_end: Time::MAX,
            recv_in_period: 0,
            // alone unless it shares its host's record
            own_load: (cfg.rate_hint == RateHint::ReceiverShare).then(|| Box::new(HostLoad::new(cfg.line_rate_bps))),
            shares_host_load: false,
            load_note_at: Time::MAX,
            load_note_active: false,
            handing: Handing::Idle,
            early_discards: 0,
            late_discards: 0,
            bad_starts: 0,
            stats: EndpointStats::default(),
            event: None,
        }
    }

    /// With [`RateHint::ReceiverShare`]: counts its sender in the receiving host's record
    /// ([`HostLoad`] in its [`HostState`]), shared by all its DLCP receivers, and reports
    /// the host's fair share from it: the driver passes the host's state to
    /// [`Endpoint::handle_timeout_with`] and [`Endpoint::hand_on`] (plain `handle_timeout`
    /// reports from the receiver's own record).
    pub fn sharing_host_load(mut self) -> Self {
        self.shares_host_load = self.cfg.rate_hint == RateHint::ReceiverShare;
        self
    }

    /// The RATE argument for a period that received at `recv_bps`; `host` is the receiving
    /// host's state, if the driver gave it.
    fn rate_report(&mut self, now: Time, recv_bps: u64, host: Option<&mut HostState>) -> u64 {
        let (remote, active, period, link) =
            (self.remote, self.recv_in_period > 0, self.cfg.rate_period, self.cfg.line_rate_bps);
        let load = match host {
            Some(h) if self.shares_host_load => h.load_mut(link),
            _ => match &mut self.own_load {
                Some(own) => own,
                None => return recv_bps,
            },
        };
        let share = load.report(remote, active, now, period);
        RateReport { recv_bps, share_bps: Some(share) }.pack(self.cfg.rate_hint)
    }

    /// Bytes received so far (in-flight data after FINISH included).
    pub fn delivered_bytes(&self) -> u64 {
        self.reasm.received_bytes()
    }

    /// Bytes delivered when the bound was met (the `Delivered` event's count).
    pub fn delivered_at_finish(&self) -> Option<u64> {
        self.delivered_at_finish
    }

    /// Share of the tensor's bytes received so far, in `[0, 1]` (1 for an empty tensor).
    pub fn delivered_fraction(&self) -> f64 {
        self.reasm.delivered_fraction()
    }

    /// The exact byte ranges still missing: the bubbles the application fills with zeros.
    /// Final once the transfer is closed ([`Self::is_closed`]).
    pub fn bubbles(&self) -> Vec<Range<u64>> {
        self.reasm.bubbles()
    }

    /// Data arriving now may be placed (started, not closed).
    pub fn accepts_data(&self) -> bool {
        matches!(self.state, State::Receiving | State::Finishing)
    }

    /// Which segments have arrived, by the tensor's segmentation.
    pub fn reassembly(&self) -> &Reassembly {
        &self.reasm
    }

    /// The driver posted this receiver before any data can arrive (both ends run one
    /// schedule): it takes the START it knows will come, so data is accepted at once. The
    /// acknowledgement of this local START is dropped; the sender's own is acknowledged
    /// when it arrives. (Data before START is discarded only for transfers a receiver has
    /// never heard of.)
    pub fn post(&mut self, now: Time) {
        let size = self.reasm.segmentation().total_bytes();
        let mut start = Packet::ctrl(PacketKind::Ctrl(CtrlOp::Start), self.flow, self.remote, self.local, size, 0);
        start.sent_at = now;
        self.handle_packet(now, &start);
        while self.poll_transmit(now).is_some() {}
        // A posted receive may wait long for its sender (a ring's later steps): a rate
        // period now would report nothing received, and the sender's first decision would
        // halve its rate for a wait that was not loss. Its periods start with the sender's
        // START or first data, whichever comes first.
        if self.state == State::Receiving {
            self.period_end = Time::MAX;
        }
    }

    /// Open the first rate period if none is open yet (a posted receive's sender has begun).
    fn start_period(&mut self, now: Time) {
        if self.state == State::Receiving && self.period_end == Time::MAX {
            self.period_end = now.saturating_add(self.cfg.rate_period.max(1));
        }
    }

    /// CONFIRM arrived: the bubbles are final and later data is discarded.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// Data that arrived before START (zero-RTT data the receiver could not accept).
    pub fn early_discards(&self) -> u64 {
        self.early_discards
    }

    /// Data that arrived after CONFIRM.
    pub fn late_discards(&self) -> u64 {
        self.late_discards
    }

    /// Data packets that were not one of the tensor's segments, plus STARTs of another size.
    pub fn rejected(&self) -> u64 {
        self.reasm.rejected() + self.bad_starts
    }

    /// Control messages (FINISH, RETX) sent again because no `CtrlAck` came within
    /// `ctrl_rto`.
    pub fn ctrl_retransmits(&self) -> u64 {
        self.ctrl.retransmits
    }

    /// Handle a packet and, for data, say which byte range the application should copy
    /// from its payload into the tensor buffer (`None`: discard the payload). The range
    /// always lies inside the tensor and is returned at most once per segment.
    pub fn receive(&mut self, now: Time, pkt: &Packet) -> Option<Range<u64>> {
        match kind_from_peer(pkt, self.flow, self.remote, self.local)? {
            PacketKind::Data => return self.on_data(now, pkt),
            PacketKind::Ctrl(op) => self.on_ctrl(now, op, pkt.seq),
            PacketKind::CtrlAck(op) => {
                self.ctrl.on_ack(op, pkt.seq);
            }
            PacketKind::Ack => {}
        }
        None
    }

    fn on_data(&mut self, now: Time, pkt: &Packet) -> Option<Range<u64>> {
        match self.state {
            State::Waiting => {
                self.early_discards += 1;
                return None;
            }
            State::Closed => {
                self.late_discards += 1;
                return None;
            }
            State::Receiving | State::Finishing => {}
        }
        let placed = self.reasm.insert(pkt.seq, pkt.len).ok()?;
        self.recv_in_period += pkt.wire_bytes as u64;
        self.start_period(now);
        if let Some((_, at)) = &mut self.quiet_retx {
            *at = now.saturating_add(self.cfg.retx_quiet);
        }
        self.check_bound(now);
        match placed {
            Placed::New(_) => Some(pkt.seq..pkt.seq + pkt.len as u64),
            Placed::Duplicate(_) => None,
        }
    }

    fn on_ctrl(&mut self, now: Time, op: CtrlOp, arg: u64) {
        match op {
            CtrlOp::Start => {
                if arg != self.reasm.segmentation().total_bytes() {
                    // Not the transfer we prepared a buffer for: refuse, don't ack.
                    self.bad_starts += 1;
                    return;
                }
                self.ctrl.ack(op, arg);
                if self.state == State::Waiting {
                    self.state = State::Receiving;
                    self.period_end = now.saturating_add(self.cfg.rate_period.max(1));
                    self.check_bound(now);
                } else {
                    self.start_period(now);
                }
            }
            CtrlOp::Stop => {
                // A STOP before START is left unacknowledged: the sender will repeat both.
                if self.state == State::Waiting {
                    return;
                }
                self.ctrl.ack(op, arg);
                if self.state == State::Receiving && self.last_stop.is_none_or(|r| arg > r) {
                    self.last_stop = Some(arg);
                    if self.cfg.retx_quiet == 0 {
                        self.request_missing(now, arg);
                    } else {
                        self.quiet_retx = Some((arg, now.saturating_add(self.cfg.retx_quiet)));
                    }
                }
            }
            CtrlOp::Confirm => {
                self.ctrl.ack(op, arg);
                if self.state == State::Finishing {
                    self.state = State::Closed;
                    self.ctrl.cancel(CtrlOp::Finish);
                }
            }
            CtrlOp::Retx | CtrlOp::Finish | CtrlOp::Rate => {}
        }
    }

    /// After STOP(round): one request for every missing segment, as a batch of RETX
    /// messages (runs or bitmaps, the last one flagged), replacing older requests.
    fn request_missing(&mut self, now: Time, round: u64) {
        self.ctrl.cancel(CtrlOp::Retx);
        let runs = self.reasm.missing_runs();
        let runs = if self.cfg.request_all_missing { runs } else { self.needed_runs(runs) };
        for req in RetxReq::batch(round, &runs) {
            self.ctrl.send(now, CtrlOp::Retx, req.pack());
        }
    }

    /// With `request_all_missing = false`: the first missing segments (in offset order)
    /// whose bytes, once in, meet the bound — one reading of §3.2.1 ("the bound set here is
    /// just a guarantee that at least the amount of data will be received").
    fn needed_runs(&self, runs: Vec<Range<u64>>) -> Vec<Range<u64>> {
        let seg = self.reasm.segmentation();
        let mut need = self.reasm.missing_bytes().saturating_sub(self.allowed_missing);
        let mut out = Vec::new();
        for r in runs {
            if need == 0 {
                break;
            }
            let bytes = |a: u64, b: u64| match (seg.segment(a), seg.segment(b - 1)) {
                (Some(s), Some(e)) => e.end() - s.offset,
                _ => 0,
            };
            let all = bytes(r.start, r.end);
            if all <= need {
                need -= all;
                out.push(r);
                continue;
            }
            // part of this run: whole segments until `need` is covered
            let per = seg.seg_bytes().max(1) as u64;
            let mut end = (r.start + need.div_ceil(per)).min(r.end);
            while end < r.end && bytes(r.start, end) < need {
                end += 1;
            }
            out.push(r.start..end);
            need = 0;
        }
        out
    }

    fn check_bound(&mut self, now: Time) {
        if self.state != State::Receiving || self.reasm.missing_bytes() > self.allowed_missing {
            return;
        }
        // its last data still counts its sender in
        let active = self.recv_in_period > 0;
        if self.shares_host_load {
            (self.load_note_at, self.load_note_active) = (now, active);
            self.handing.due();
        } else if let Some(load) = &mut self.own_load {
            load.report(self.remote, active, now, self.cfg.rate_period);
        }
        let delivered = self.reasm.received_bytes();
        self.state = State::Finishing;
        self.delivered_at_finish = Some(delivered);
        self.event = Some(EndpointEvent::Delivered { bytes: delivered });
        self.period_end = Time::MAX;
        self.ctrl.cancel(CtrlOp::Retx);
        self.ctrl.send(now, CtrlOp::Finish, delivered);
    }
}

impl Endpoint for DlcpReceiver {
    fn handle_packet(&mut self, now: Time, pkt: &Packet) {
        self.receive(now, pkt);
    }

    fn handle_timeout(&mut self, now: Time) {
        self.on_timeout(now, None)
    }

    fn handle_timeout_with(&mut self, now: Time, host: &mut HostState) {
        self.on_timeout(now, Some(host))
    }

    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        let p = self.ctrl.poll_transmit(now)?;
        self.stats.packets_sent += 1;
        Some(p)
    }

    fn poll_timeout(&self) -> Option<Time> {
        let receiving = self.state == State::Receiving;
        let report = receiving.then_some(self.period_end).filter(|&t| t != Time::MAX);
        let quiet = self.quiet_retx.filter(|_| receiving).map(|(_, at)| at);
        [self.ctrl.deadline(), report, quiet].into_iter().flatten().min()
    }

    fn poll_event(&mut self) -> Option<EndpointEvent> {
        // the host's record first, as the bound is met
        if self.handing.announce() {
            return Some(EndpointEvent::HandOn);
        }
        self.event.take()
    }

    fn hand_on(&mut self, host: &mut HostState) {
        if !self.handing.take() {
            return;
        }
        let at = std::mem::replace(&mut self.load_note_at, Time::MAX);
        if at != Time::MAX {
            let active = self.load_note_active;
            host.load_mut(self.cfg.line_rate_bps).report(self.remote, active, at, self.cfg.rate_period);
        }
    }

    fn stats(&self) -> EndpointStats {
        EndpointStats { retransmits: self.ctrl.retransmits, ..self.stats }
    }
}

impl DlcpReceiver {
    /// [`Endpoint::handle_timeout`], with the receiving host's state if the driver gave it.
    fn on_timeout(&mut self, now: Time, host: Option<&mut HostState>) {
        if self.ctrl.on_timeout(now) {
            self.stats.timeouts += 1;
        }
        if let Some((round, at)) = self.quiet_retx {
            if self.state != State::Receiving {
                self.quiet_retx = None;
            } else if now >= at {
                self.quiet_retx = None;
                self.request_missing(now, round);
            }
        }
        if self.state == State::Receiving && now >= self.period_end {
            // Unreliable: a lost report only delays one rate decision. The rate is over the
            // time the period really lasted (a late wake received that much more).
            let elapsed = self.cfg.rate_period.max(1) + (now - self.period_end);
            let report = self.rate_report(now, self.cfg.bps_over(self.recv_in_period, elapsed), host);
            self.ctrl.send_unreliable(CtrlOp::Rate, report);
            self.recv_in_period = 0;
            self.period_end = now.saturating_add(self.cfg.rate_period.max(1));
        }
    }
}
