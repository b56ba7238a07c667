//! pFabric sender: rank = bytes not yet acknowledged, BDP window, fixed timeout, probe mode.

use std::collections::VecDeque;

use super::PFabricConfig;
use crate::packet::{FlowId, HostId, Packet, PacketKind};
use crate::time::Time;
use crate::transport::{Endpoint, EndpointEvent, EndpointStats};

/// What the sender knows of one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seg {
    /// Never sent, or given up for lost by a timeout: to be sent.
    Pending,
    /// Sent and counted in flight.
    Outstanding,
    /// Acknowledged (selectively, above the cumulative ACK).
    Acked,
}

/// Sending side of one flow of `size` bytes; done when every byte is acknowledged.
pub struct PFabricSender {
    cfg: PFabricConfig,
    flow: FlowId,
    src: HostId,
    dst: HostId,
    size: u64,

    /// Cumulative ACK (a segment boundary or `size`).
    snd_una: u64,
    /// Segment states from `snd_una`'s segment on.
    segs: VecDeque<Seg>,
    /// Bytes of `Acked` segments in `segs` (selectively acknowledged).
    sacked: u64,
    /// Next segment index the transmit cursor looks at.
    cursor: u64,
    /// Bytes below this have been sent at least once.
    high_tx: u64,
    /// Payload bytes of `Outstanding` segments.
    inflight: u64,

    cwnd: u64,
    ssthresh: u64,
    /// Acked bytes toward the next additive increase.
    ai_acked: u64,

    consecutive_timeouts: u32,
    probing: bool,
    probe_due: bool,
    rto_deadline: Option<Time>,

    stats: EndpointStats,
    finished: bool,
    done_pending: bool,
}

impl PFabricSender {
    /// A flow starting at `now`: the next `poll_transmit`s release one BDP at line rate.
    pub fn new(cfg: PFabricConfig, flow: FlowId, src: HostId, dst: HostId, size_bytes: u64, _now: Time) -> Self {
        let mss = cfg.mss.max(1) as u64;
        let init = cfg.init_window_bytes.max(mss).min(cfg.max_window_bytes.max(mss));
        let empty = size_bytes == 0;
        PFabricSender {
            cfg,
            flow,
            src,
            dst,
            size: size_bytes,
            snd_una: 0,
            segs: VecDeque::new(),
            sacked: 0,
            cursor: 0,
            high_tx: 0,
            inflight: 0,
            cwnd: init,
            ssthresh: init,
            ai_acked: 0,
            consecutive_timeouts: 0,
            probing: false,
            probe_due: false,
            rto_deadline: None,
            stats: EndpointStats::default(),
            finished: empty,
            done_pending: empty,
        }
    }

    /// Congestion window in payload bytes: at least one MSS, and at most `max_window_bytes`
    /// unless that is below one MSS.
    pub fn cwnd_bytes(&self) -> u64 {
        self.cwnd
    }

    /// Slow-start threshold in payload bytes: below it the window grows by one MSS per
    /// acknowledged segment, at or above it by one MSS per window.
    pub fn ssthresh_bytes(&self) -> u64 {
        self.ssthresh
    }

    /// Bytes not yet acknowledged: the rank the next data packet carries.
    pub fn remaining_bytes(&self) -> u64 {
        self.size - self.snd_una - self.sacked
    }

    /// After `probe_after_timeouts` consecutive timeouts: only a header-only probe goes out,
    /// once per timeout, until an ACK returns.
    pub fn in_probe_mode(&self) -> bool {
        self.probing
    }

    /// Payload bytes sent and neither acknowledged nor given up for lost by a timeout.
    pub fn inflight_bytes(&self) -> u64 {
        self.inflight
    }

    fn mss(&self) -> u64 {
        self.cfg.mss.max(1) as u64
    }

    fn base(&self) -> u64 {
        self.snd_una / self.mss()
    }

    fn seg_start(&self, idx: u64) -> u64 {
        idx * self.mss()
    }

    fn seg_len(&self, idx: u64) -> u64 {
        let start = self.seg_start(idx);
        (start + self.mss()).min(self.size) - start
    }

    fn nsegs(&self) -> u64 {
        self.size.div_ceil(self.mss())
    }

    fn state(&self, idx: u64) -> Seg {
        self.segs.get((idx - self.base()) as usize).copied().unwrap_or(Seg::Pending)
    }

    fn set_state(&mut self, idx: u64, s: Seg) {
        let off = (idx - self.base()) as usize;
        if self.segs.len() <= off {
            self.segs.resize(off + 1, Seg::Pending);
        }
        self.segs[off] = s;
    }

    /// One acknowledged segment: slow start below ssthresh, else one MSS per window.
    fn grow(&mut self, bytes: u64) {
        if self.cwnd < self.ssthresh {
            self.cwnd += self.mss();
        } else {
            self.ai_acked += bytes;
            if self.ai_acked >= self.cwnd {
                self.ai_acked -= self.cwnd;
                self.cwnd += self.mss();
            }
        }
        self.cwnd = self.cwnd.min(self.cfg.max_window_bytes.max(self.mss()));
    }

    /// Mark segment `idx` acknowledged; returns its length if that is news.
    fn ack_segment(&mut self, idx: u64) -> Option<u64> {
        let len = self.seg_len(idx);
        match self.state(idx) {
            Seg::Acked => return None,
            Seg::Outstanding => self.inflight -= len,
            Seg::Pending => {}
        }
        self.set_state(idx, Seg::Acked);
        Some(len)
    }

    /// Cumulative ACK `cum` (clipped to a segment boundary) and selective ACK `sack`.
    fn on_ack(&mut self, now: Time, cum: u64, sack: u64) {
        let mut progress = false;
        let end = if cum >= self.size { self.nsegs() } else { cum / self.mss() };
        if end > self.base() {
            for idx in self.base()..end {
                let was_sacked = self.state(idx) == Seg::Acked;
                if let Some(len) = self.ack_segment(idx) {
                    self.grow(len);
                    progress = true;
                } else if was_sacked {
                    self.sacked -= self.seg_len(idx);
                }
            }
            let new_una = if end >= self.nsegs() { self.size } else { self.seg_start(end) };
            let drop = (end - self.base()) as usize;
            self.segs.drain(..drop.min(self.segs.len()));
            self.snd_una = new_una;
            self.cursor = self.cursor.max(end);
            self.consecutive_timeouts = 0;
            self.rto_deadline = Some(now.saturating_add(self.cfg.rto));
        }
        if sack >= self.snd_una && sack < self.high_tx && sack.is_multiple_of(self.mss()) {
            if let Some(len) = self.ack_segment(sack / self.mss()) {
                self.sacked += len;
                self.grow(len);
                progress = true;
            }
        }
        if progress {
            self.consecutive_timeouts = 0;
        }
        if self.snd_una >= self.size {
            self.finished = true;
            self.done_pending = true;
            self.rto_deadline = None;
        }
    }

    /// Fixed timeout: presume everything in flight lost and restart in slow start,
    /// or after enough consecutive timeouts, probe.
    fn on_timeout(&mut self, now: Time) {
        self.stats.timeouts += 1;
        self.consecutive_timeouts = self.consecutive_timeouts.saturating_add(1);
        self.rto_deadline = Some(now.saturating_add(self.cfg.rto));
        if self.probing {
            self.probe_due = true;
            return;
        }
        self.ssthresh = (self.cwnd / 2).max(2 * self.mss());
        self.cwnd = self.mss();
        self.ai_acked = 0;
        for s in self.segs.iter_mut() {
            if *s == Seg::Outstanding {
                *s = Seg::Pending;
            }
        }
        self.inflight = 0;
        self.cursor = self.base();
        if self.consecutive_timeouts >= self.cfg.probe_after_timeouts.max(1) {
            self.probing = true;
            self.probe_due = true;
        }
    }

    fn packet(&self, now: Time, seq: u64, len: u64) -> Packet {
        let mut p = Packet::data(self.flow, self.src, self.dst, seq, len as u32, self.cfg.header_bytes);
        p.priority = self.cfg.priority;
        p.rank = self.remaining_bytes();
        p.sent_at = now;
        p
    }

    /// Next segment to send under the window, moving the cursor past the others.
    fn next_segment(&mut self) -> Option<u64> {
        let n = self.nsegs();
        while self.cursor < n && self.state(self.cursor) != Seg::Pending {
            self.cursor += 1;
        }
        (self.cursor < n && self.inflight + self.seg_len(self.cursor) <= self.cwnd).then_some(self.cursor)
    }
}

impl Endpoint for PFabricSender {
    fn handle_packet(&mut self, now: Time, pkt: &Packet) {
        if self.finished || pkt.flow != self.flow || pkt.kind != PacketKind::Ack {
            return;
        }
        // An ACK of data never sent is bogus; a stale cumulative ACK may still carry news.
        if pkt.seq > self.high_tx {
            return;
        }
        if self.probing {
            // The path works again: resume in slow start from one segment.
            self.probing = false;
            self.probe_due = false;
            self.consecutive_timeouts = 0;
            self.rto_deadline = Some(now.saturating_add(self.cfg.rto));
        }
        self.on_ack(now, pkt.seq, pkt.rank);
    }

    fn handle_timeout(&mut self, now: Time) {
        match self.rto_deadline {
            Some(deadline) if now >= deadline && !self.finished => self.on_timeout(now),
            _ => {}
        }
    }

    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        if self.finished {
            return None;
        }
        if self.probing {
            if !self.probe_due {
                return None;
            }
            self.probe_due = false;
            self.stats.packets_sent += 1;
            return Some(self.packet(now, self.snd_una, 0));
        }
        let idx = self.next_segment()?;
        let (seq, len) = (self.seg_start(idx), self.seg_len(idx));
        let retransmission = seq < self.high_tx;
        self.set_state(idx, Seg::Outstanding);
        self.inflight += len;
        self.cursor = idx + 1;
        self.high_tx = self.high_tx.max(seq + len);
        self.stats.count_data(retransmission);
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now.saturating_add(self.cfg.rto));
        }
        Some(self.packet(now, seq, len))
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
