//! The receiving side of the cumulative-ACK transports (TCP, pFabric): reassemble the flow
//! and answer every data packet, duplicates included, with one ACK.

use std::collections::VecDeque;

use crate::packet::{FlowId, HostId, Packet, PacketKind};
use crate::time::Time;
use crate::transport::received::Reassembly;
use crate::transport::{Endpoint, EndpointEvent, EndpointStats};

/// What a transport's ACK carries beside the cumulative ACK.
pub trait AckExtra: Copy + Send {
    /// What the ACK of data packet `pkt` of a flow of `size` bytes carries.
    fn of(pkt: &Packet, size: u64) -> Self;
    /// Writes it into the ACK.
    fn stamp(self, ack: &mut Packet);
}

/// Receiving side of one flow; reports `Delivered` once all `size` bytes are in. `A` is
/// what the transport's ACKs carry beside the cumulative ACK.
pub struct AckingReceiver<A> {
    flow: FlowId,
    local: HostId,
    remote: HostId,
    ack_bytes: u32,
    priority: u8,
    /// What has arrived; its in-order point is the cumulative ACK.
    flow_bytes: Reassembly,
    /// ACKs waiting for `poll_transmit`: (cumulative ACK, what else they carry).
    acks: VecDeque<(u64, A)>,
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
    ) -> Self {
        let flow_bytes = Reassembly::new(size_bytes);
        AckingReceiver { flow, local, remote, ack_bytes, priority, flow_bytes, acks: VecDeque::new() }
    }

    /// Bytes received in order so far.
    pub fn received_bytes(&self) -> u64 {
        self.flow_bytes.in_order()
    }
}

impl<A: AckExtra> Endpoint for AckingReceiver<A> {
    fn handle_packet(&mut self, _now: Time, pkt: &Packet) {
        if pkt.flow != self.flow || pkt.kind != PacketKind::Data {
            return;
        }
        self.flow_bytes.accept(pkt.seq, pkt.len as u64);
        self.acks.push_back((self.flow_bytes.in_order(), A::of(pkt, self.flow_bytes.size())));
    }

    fn handle_timeout(&mut self, _now: Time) {}

    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        let (cum, extra) = self.acks.pop_front()?;
        let mut p = Packet::ack(self.flow, self.local, self.remote, cum, self.ack_bytes);
        p.priority = self.priority;
        extra.stamp(&mut p);
        p.sent_at = now;
        Some(p)
    }

    fn poll_timeout(&self) -> Option<Time> {
        None
    }

    fn poll_event(&mut self) -> Option<EndpointEvent> {
        self.flow_bytes.poll_event()
    }

    fn stats(&self) -> EndpointStats {
        EndpointStats::default()
    }
}
