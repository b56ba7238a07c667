//! The reliable control channel of the loss-tolerant transports (DLCP and LTP endpoints).
//!
//! A reliable message is retransmitted every `rto` until a `CtrlAck` with the same op and
//! argument arrives (or the endpoint cancels it because it became moot). Messages are
//! idempotent, so duplicates only cost an ACK. No backoff: control traffic is a handful of
//! small packets in its own queue, and the paper finds it is rarely dropped.

use std::collections::{HashMap, VecDeque};

use crate::packet::{CtrlOp, FlowId, HostId, Packet, PacketKind};
use crate::time::Time;

#[derive(Clone, Copy, Debug)]
struct Pending {
    op: CtrlOp,
    arg: u64,
    deadline: Time,
    /// Matches `live[(op, arg)]` while this entry is the message's current one.
    gen: u64,
}

/// One endpoint's side of the control channel: a FIFO of control packets to send, and
/// the retransmission schedule of the unacknowledged ones. The owning endpoint merges
/// `poll_transmit` and `deadline` into its own.
pub(super) struct CtrlChannel {
    flow: FlowId,
    local: HostId,
    remote: HostId,
    wire_bytes: u32,
    priority: u8,
    rto: Time,
    tx: VecDeque<Packet>,
    /// Retransmission schedule by deadline (all share one rto). Entries of acknowledged or
    /// cancelled messages stay behind and are skipped: a receiver can have thousands of
    /// RETX requests pending, and removing from the middle made every ACK O(n).
    pending: VecDeque<Pending>,
    /// Unacknowledged messages and the generation of their live schedule entry.
    live: HashMap<(CtrlOp, u64), u64>,
    next_gen: u64,
    /// Control packets handed out (messages, their retransmissions and `CtrlAck`s).
    pub(super) sent: u64,
    /// Reliable messages sent again because their timeout passed.
    pub(super) retransmits: u64,
}

impl CtrlChannel {
    /// Control packets from `local` to `remote` on `flow`, each `wire_bytes` on the wire
    /// in queue `priority`, retransmitted every `rto` ps (at least 1).
    pub(super) fn new(flow: FlowId, local: HostId, remote: HostId, wire_bytes: u32, priority: u8, rto: Time) -> Self {
        CtrlChannel {
            flow,
            local,
            remote,
            wire_bytes,
            priority,
            rto: rto.max(1),
            tx: VecDeque::new(),
            pending: VecDeque::new(),
            live: HashMap::new(),
            next_gen: 0,
            sent: 0,
            retransmits: 0,
        }
    }

    fn queue(&mut self, kind: PacketKind, arg: u64) {
        let mut p = Packet::ctrl(kind, self.flow, self.local, self.remote, arg, self.wire_bytes);
        p.priority = self.priority;
        self.tx.push_back(p);
    }

    /// Send `op(arg)` until acknowledged; a message already pending is not doubled.
    pub(super) fn send(&mut self, now: Time, op: CtrlOp, arg: u64) {
        if self.live.contains_key(&(op, arg)) {
            return;
        }
        self.queue(PacketKind::Ctrl(op), arg);
        let gen = self.next_gen;
        self.next_gen += 1;
        self.live.insert((op, arg), gen);
        self.pending.push_back(Pending { op, arg, deadline: now.saturating_add(self.rto), gen });
    }

    fn is_live(&self, p: &Pending) -> bool {
        self.live.get(&(p.op, p.arg)) == Some(&p.gen)
    }

    /// Keep a live entry at the front, so `deadline` is exact.
    fn skip_dead(&mut self) {
        while let Some(p) = self.pending.front() {
            if self.is_live(p) {
                break;
            }
            self.pending.pop_front();
        }
    }

    /// Send once, no acknowledgement expected.
    pub(super) fn send_unreliable(&mut self, op: CtrlOp, arg: u64) {
        self.queue(PacketKind::Ctrl(op), arg);
    }

    /// Acknowledge the peer's `op(arg)` (queue a `CtrlAck`). Sent for every copy that
    /// arrives, so a lost acknowledgement is repaired by the peer's next retransmission.
    pub(super) fn ack(&mut self, op: CtrlOp, arg: u64) {
        self.queue(PacketKind::CtrlAck(op), arg);
    }

    /// The peer acknowledged `op(arg)`; true if it was pending.
    pub(super) fn on_ack(&mut self, op: CtrlOp, arg: u64) -> bool {
        let was = self.live.remove(&(op, arg)).is_some();
        self.skip_dead();
        was
    }

    /// Stop retransmitting every pending `op` message.
    pub(super) fn cancel(&mut self, op: CtrlOp) {
        self.live.retain(|&(o, _), _| o != op);
        self.skip_dead();
    }

    /// Retransmit everything whose deadline passed; returns whether any did.
    pub(super) fn on_timeout(&mut self, now: Time) -> bool {
        let mut fired = false;
        while let Some(p) = self.pending.front().copied().filter(|p| p.deadline <= now) {
            self.pending.pop_front();
            if !self.is_live(&p) {
                continue;
            }
            self.queue(PacketKind::Ctrl(p.op), p.arg);
            self.pending.push_back(Pending { deadline: now.saturating_add(self.rto), ..p });
            self.retransmits += 1;
            fired = true;
        }
        self.skip_dead();
        fired
    }

    /// When the oldest unacknowledged message is due for retransmission; `None` when
    /// every reliable message is acknowledged or cancelled.
    pub(super) fn deadline(&self) -> Option<Time> {
        self.pending.front().map(|p| p.deadline)
    }

    /// The next queued control packet, stamped with `now` (control is never paced).
    pub(super) fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        let mut p = self.tx.pop_front()?;
        p.sent_at = now;
        self.sent += 1;
        Some(p)
    }
}

/// The key of the reliable control channel, read by the transports that run one.
pub(crate) static KEYS: crate::transport::spec::KeySet = crate::transport::spec::KeySet {
    name: "ctrl",
    keys: &[crate::transport::spec::Key::new(
        "ctrl_rto_us",
        crate::transport::spec::KeyType::F64,
        crate::transport::spec::Value::Float(1000.0),
        ["float > 0, µs", "`1000.0`", "Retransmission timeout of control messages."],
    )],
    check: |cfg| crate::transport::spec::check_positive_number("ctrl_rto_us", cfg.values.f64("ctrl_rto_us")),
};
