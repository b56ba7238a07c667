//! pFabric receiver: one ACK per data packet, cumulative ACK + the packet it answers.

use crate::transport::received::ReceivedBytes;
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
    size: u64,
    /// What has arrived; its in-order point is the cumulative ACK.
    received: ReceivedBytes,
    /// ACKs waiting for `poll_transmit`: (cumulative ACK, selective ACK).
    acks: VecDeque<(u64, u64)>,
    complete: bool,
    delivered_pending: bool,
}

impl PFabricReceiver {
    /// A receiver for a flow of `size_bytes` from `remote` to `local`. A flow of 0 bytes is
    /// complete at once: the first `poll_event` reports `Delivered`.
    pub fn new(cfg: PFabricConfig, flow: FlowId, local: HostId, remote: HostId, size_bytes: u64) -> Self {
        let empty = size_bytes == 0;
        PFabricReceiver {
            cfg,
            flow,
            local,
            remote,
            size: size_bytes,
            received: ReceivedBytes::default(),
            acks: VecDeque::new(),
            complete: empty,
            delivered_pending: empty,
        }
    }

    /// Bytes received in order so far.
    pub fn received_bytes(&self) -> u64 {
        self.received.in_order()
    }
}

impl Endpoint for PFabricReceiver {
    fn handle_packet(&mut self, _now: Time, pkt: &Packet) {
        if pkt.flow != self.flow || pkt.kind != PacketKind::Data {
            return;
        }
        let start = pkt.seq.max(self.received.in_order());
        let end = pkt.seq.saturating_add(pkt.len as u64).min(self.size);
        if start < end {
            self.received.insert(start, end);
        }
        // Every data packet is answered, duplicates and probes too; a probe (no payload,
        // or nothing inside the flow) selectively acknowledges nothing.
        let sack = if pkt.len > 0 && pkt.seq < self.size { pkt.seq } else { u64::MAX };
        self.acks.push_back((self.received.in_order(), sack));
        if !self.complete && self.received.in_order() == self.size {
            self.complete = true;
            self.delivered_pending = true;
        }
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
        if !self.delivered_pending {
            return None;
        }
        self.delivered_pending = false;
        Some(EndpointEvent::Delivered { bytes: self.size })
    }

    fn stats(&self) -> EndpointStats {
        EndpointStats::default()
    }
}
