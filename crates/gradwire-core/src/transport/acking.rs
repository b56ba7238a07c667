//! The receiving side of the cumulative-ACK transports (TCP, pFabric): reassemble the flow
//! and answer every data packet, duplicates included, with one ACK, or (TCP's delayed ACKs,
//! RFC 5681 4.2) every `count`th in-order packet, at the latest after `timeout`.

use std::collections::VecDeque;

use crate::packet::{FlowId, HostId, Packet, PacketKind};
use crate::time::Time;
use crate::transport::opt::Opt;
use crate::transport::received::Reassembly;
use crate::transport::{Endpoint, EndpointEvent, EndpointStats};

/// What a transport's ACK carries beside the cumulative ACK.
pub trait AckExtra: Copy + Send {
    /// What the ACK of data packet `pkt` of a flow of `size` bytes carries.
    fn of(pkt: &Packet, size: u64) -> Self;
    /// Writes it into the ACK.
    fn stamp(self, ack: &mut Packet);
    /// Whether an ACK carrying `self` may not wait behind one carrying `held` (DCTCP: the
    /// CE state changed, RFC 8257 3.2). Only asked with delayed ACKs on.
    fn urgent_after(self, _held: Self) -> bool {
        false
    }
    /// The same as for a packet without a CE mark (only TCP's ACKs echo one).
    fn unmarked(self) -> Self {
        self
    }
    /// The same with nothing beside the cumulative ACK that says which data arrived (no
    /// selective ACK): an ACK that acknowledges nothing new.
    fn cumulative_only(self) -> Self {
        self
    }
}

/// Delayed ACKs (RFC 5681 4.2): an in-order packet that leaves no hole is answered with
/// the `count`th such packet, or `timeout` after the first unanswered one; anything else
/// (out of order, filling a hole, a duplicate) at once. `count` 1: every packet at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DelayedAck {
    /// Packets one ACK may answer (1: no delay).
    pub count: u32,
    /// The longest an ACK waits.
    pub timeout: Time,
    /// The packet that completes the flow's data is answered at once, as Linux answers
    /// the end of an application write once the reader has drained it (the segment's PSH
    /// sets `ICSK_ACK_PUSHED` in `tcp_measure_rcv_mss`, and `__tcp_cleanup_rbuf` ACKs; for
    /// a full-size segment since 6.6, commit 4720852ed9af). `false`: it waits like any
    /// other, as in ns-3, so an odd last segment waits for the timeout and a sender whose
    /// RTO is shorter times out once, spuriously.
    pub at_write_end: bool,
}

impl DelayedAck {
    /// One ACK per data packet, at once.
    pub const OFF: DelayedAck = DelayedAck { count: 1, timeout: 0, at_write_end: false };
}

/// Receiving side of one flow; reports `Delivered` once all `size` bytes are in. `A` is
/// what the transport's ACKs carry beside the cumulative ACK.
pub struct AckingReceiver<A> {
    flow: FlowId,
    local: HostId,
    remote: HostId,
    /// An ACK's wire size: a frame's, at most 65 535 bytes (the simulator refuses more,
    /// and a UDP datagram holds less), in 16 bits so the receiver fits 152 bytes.
    ack_bytes: u16,
    priority: u8,
    /// What has arrived; its in-order point is the cumulative ACK.
    flow_bytes: Reassembly,
    /// ACKs waiting for `poll_transmit`: (cumulative ACK, what else they carry).
    acks: VecDeque<(u64, A)>,
    delack: DelayedAck,
    /// In-order packets not answered yet, the extra of the last one, and when the ACK is
    /// due at the latest.
    held: Option<Held<A>>,
    /// ns-3.37's DCTCP receiver ([`with_lagged_ce_acks`](AckingReceiver::with_lagged_ce_acks));
    /// boxed: most receivers have none.
    lagged: Option<Box<Lagged<A>>>,
    /// The first data packet is answered at once ([`with_first_ack_at_once`](AckingReceiver::with_first_ack_at_once)); cleared by it.
    first_at_once: bool,
    /// With [`with_ce_seq_check`](AckingReceiver::with_ce_seq_check): the lowest
    /// sequence number whose CE mark counts (one above the last that counted).
    ce_from: Opt,
}

/// ns-3.37's `TcpDctcp` receiver state: `m_priorRcvNxt`, the CE state of the last packet
/// (`m_ceState`), and `m_delayedAckReserved`.
#[derive(Clone, Copy, Debug)]
struct Lagged<A> {
    /// The cumulative ACK before the last data packet was added.
    prior: u64,
    /// The last data packet's extra (`None` before the first).
    last: Option<A>,
    /// The last ACK event was not one the count or a hole made (`CA_EVENT_DELAYED_ACK`
    /// came last: a packet was held, or the timer fired).
    reserved: bool,
}

#[derive(Clone, Copy, Debug)]
struct Held<A> {
    packets: u32,
    extra: A,
    due: Time,
}

impl<A: AckExtra> AckingReceiver<A> {
    /// A receiver at `local` for flow `flow` of `size_bytes` bytes from `remote`, sending
    /// `ack_bytes`-byte ACKs in switch queue `priority`; a zero-byte flow reports
    /// `Delivered` at once.
    pub(crate) fn with(
        flow: FlowId,
        local: HostId,
        remote: HostId,
        size_bytes: u64,
        ack_bytes: u32,
        priority: u8,
        delack: DelayedAck,
    ) -> Self {
        let flow_bytes = Reassembly::new(size_bytes);
        AckingReceiver {
            flow,
            local,
            remote,
            ack_bytes: u16::try_from(ack_bytes).unwrap_or(u16::MAX),
            priority,
            flow_bytes,
            acks: VecDeque::new(),
            delack,
            held: None,
            lagged: None,
            first_at_once: false,
            ce_from: Opt::NONE,
        }
    }

    /// The first data packet is answered at once, as ns-3.37's `TcpSocketBase` does once a
    /// connection is established (`ProcessSynRcvd`: `m_delAckCount = m_delAckMaxCount`,
    /// "Always respond to first data packet to speed up the connection"); the delayed ACKs
    /// count from the second.
    pub(crate) fn with_first_ack_at_once(mut self) -> Self {
        self.first_at_once = true;
        self
    }

    /// A change of CE state answered as ns-3.37's `TcpDctcp` does (`CeState0to1`,
    /// `CeState1to0`), instead of releasing the held ACK: when the last ACK event was a
    /// held packet or the timer (`m_delayedAckReserved`, which the timer sets too), an ACK
    /// goes at once with the old state's ECE, acknowledging only what came before the
    /// previous packet (`m_priorRcvNxt` is read in `ForwardUp`, before the packet is added,
    /// so it lags a packet) and naming no segment; being an ACK it cancels the delayed ACK
    /// and its count (`SendEmptyPacket`), so the held packet waits again, with the one
    /// that changed the state, for the next or the timer. With two segments in flight
    /// both wait for the timer.
    pub(crate) fn with_lagged_ce_acks(mut self) -> Self {
        self.lagged = Some(Box::new(Lagged { prior: 0, last: None, reserved: false }));
        self
    }

    /// A CE mark counts only on a packet above the last one whose mark counted, as
    /// ns-3.37's `TcpSocketBase::ForwardUp` (`m_ecnCESeq < seq`); other marked packets are
    /// answered as unmarked.
    pub(crate) fn with_ce_seq_check(mut self) -> Self {
        self.ce_from = Some(0).into();
        self
    }

    /// Queue the held ACK, if any.
    fn release(&mut self) {
        if let Some(h) = self.held.take() {
            self.acks.push_back((self.flow_bytes.in_order(), h.extra));
        }
    }

    fn set_reserved(&mut self, reserved: bool) {
        if let Some(lag) = &mut self.lagged {
            lag.reserved = reserved;
        }
    }

    /// Bytes received in order so far.
    pub fn received_bytes(&self) -> u64 {
        self.flow_bytes.in_order()
    }
}

impl<A: AckExtra> Endpoint for AckingReceiver<A> {
    fn handle_packet(&mut self, now: Time, pkt: &Packet) {
        if pkt.flow != self.flow || pkt.kind != PacketKind::Data {
            return;
        }
        let before = self.flow_bytes.in_order();
        let filled_gap = self.flow_bytes.has_gaps();
        self.flow_bytes.accept(pkt.seq, pkt.len as u64);
        let mut extra = A::of(pkt, self.flow_bytes.size());
        if let Some(from) = self.ce_from.get() {
            if pkt.ecn.ce && pkt.seq >= from {
                self.ce_from = Some(pkt.seq + 1).into();
            } else if pkt.ecn.ce {
                extra = extra.unmarked();
            }
        }
        if self.delack.count <= 1 {
            self.acks.push_back((self.flow_bytes.in_order(), extra));
            return;
        }
        let in_order = pkt.seq == before && self.flow_bytes.in_order() > before;
        // ns-3 zeroes the count with any ACK sent: only the very first packet is answered
        // for being first
        let first = std::mem::take(&mut self.first_at_once);
        if let Some(lag) = &mut self.lagged {
            if let Some(last) = lag.last {
                if extra.urgent_after(last) && lag.reserved {
                    self.acks.push_back((lag.prior, last.cumulative_only()));
                    self.held = None;
                }
            }
            lag.prior = before;
            lag.last = Some(extra);
        } else if let Some(h) = self.held {
            if extra.urgent_after(h.extra) {
                // The held ACK answers what came before the change, at once.
                let cum = before;
                self.held = None;
                self.acks.push_back((cum, h.extra));
            }
        }
        if !in_order || filled_gap || self.flow_bytes.has_gaps() {
            self.held = None;
            self.acks.push_back((self.flow_bytes.in_order(), extra));
            self.set_reserved(false);
            return;
        }
        let h = self.held.get_or_insert(Held { packets: 0, extra, due: now.saturating_add(self.delack.timeout) });
        h.packets += 1;
        h.extra = extra;
        let write_end = self.delack.at_write_end && self.flow_bytes.in_order() == self.flow_bytes.size();
        let release = h.packets >= self.delack.count || write_end || first;
        if release {
            self.release();
        }
        self.set_reserved(!release);
    }

    fn handle_timeout(&mut self, now: Time) {
        if self.held.is_some_and(|h| now >= h.due) {
            self.release();
            // ns-3's DelAckTimeout raises CA_EVENT_DELAYED_ACK too
            self.set_reserved(true);
        }
    }

    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        let (cum, extra) = self.acks.pop_front()?;
        let mut p = Packet::ack(self.flow, self.local, self.remote, cum, self.ack_bytes.into());
        p.priority = self.priority;
        extra.stamp(&mut p);
        p.sent_at = now;
        Some(p)
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.held.map(|h| h.due)
    }

    fn poll_event(&mut self) -> Option<EndpointEvent> {
        self.flow_bytes.poll_event()
    }

    fn stats(&self) -> EndpointStats {
        EndpointStats::default()
    }
}
