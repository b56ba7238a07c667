//! pFabric receiver: one ACK per data packet, cumulative ACK + the packet it answers.

use crate::transport::received::Reassembly;
use std::collections::VecDeque;

use super::PFabricConfig;
use crate::packet::{FlowId, HostId, Packet, PacketKind};
use crate::time::Time;
use crate::transport::{Endpoint, EndpointEvent, EndpointStats};

/// Receiving side of one flow; reports `Delivered` once all `size` bytes are in.
pub struct PFabricReceiver {
    cfg: PFabricConfig,
    flow: FlowId,
    local: HostId,
    remote: HostId,
    /// What has arrived; its in-order point is the cumulative ACK.
    flow_bytes: Reassembly,
    /// ACKs waiting for `poll_transmit`: (cumulative ACK, selective ACK).
    acks: VecDeque<(u64, u64)>,
}

impl PFabricReceiver {
    /// A receiver for a flow of `size_bytes` from `remote` to `local`. A flow of 0 bytes is
    /// complete at once: the first `poll_event` reports `Delivered`.
    pub fn new(cfg: PFabricConfig, flow: FlowId, local: HostId, remote: HostId, size_bytes: u64) -> Self {
        PFabricReceiver { cfg, flow, local, remote, flow_bytes: Reassembly::new(size_bytes), acks: VecDeque::new() }
    }

    /// Bytes received in order so far.
    pub fn received_bytes(&self) -> u64 {
        self.flow_bytes.in_order()
    }
}

impl Endpoint for PFabricReceiver {
    fn handle_packet(&mut self, _now: Time, pkt: &Packet) {
        if pkt.flow != self.flow || pkt.kind != PacketKind::Data {
            return;
        }
        self.flow_bytes.accept(pkt.seq, pkt.len as u64);
        // Every data packet is answered, duplicates and probes too; a probe (no payload,
        // or nothing inside the flow) selectively acknowledges nothing.
        let sack = if pkt.len > 0 && pkt.seq < self.flow_bytes.size() { pkt.seq } else { u64::MAX };
        self.acks.push_back((self.flow_bytes.in_order(), sack));
    }

    fn handle_timeout(&mut self, _now: Time) {}

    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        let (cum, sack) = self.acks.pop_front()?;
        let mut p = Packet::ack(self.flow, self.local, self.remote, cum, self.cfg.ack_bytes);
        p.priority = self.cfg.priority;
        p.rank = sack;
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
