//! TCP receiver: reassembly and one cumulative ACK per data packet.

use crate::transport::received::Reassembly;
use std::collections::VecDeque;

use super::TcpConfig;
use crate::packet::{FlowId, HostId, Packet, PacketKind};
use crate::time::Time;
use crate::transport::{Endpoint, EndpointEvent, EndpointStats};

/// An ACK waiting for `poll_transmit`.
#[derive(Clone, Copy, Debug)]
struct PendingAck {
    cum_ack: u64,
    ece: bool,
}

/// Receiving side of one flow; reports `Delivered` once all `size` bytes are in.
pub struct TcpReceiver {
    cfg: TcpConfig,
    flow: FlowId,
    local: HostId,
    remote: HostId,
    /// What has arrived; its in-order point is the cumulative ACK.
    flow_bytes: Reassembly,
    acks: VecDeque<PendingAck>,
}

impl TcpReceiver {
    /// A receiver at `local` for flow `flow` of `size_bytes` bytes from `remote`; a
    /// zero-byte flow reports `Delivered` at once.
    pub fn new(cfg: TcpConfig, flow: FlowId, local: HostId, remote: HostId, size_bytes: u64) -> Self {
        TcpReceiver { cfg, flow, local, remote, flow_bytes: Reassembly::new(size_bytes), acks: VecDeque::new() }
    }

    /// Bytes received in order so far.
    pub fn received_bytes(&self) -> u64 {
        self.flow_bytes.in_order()
    }
}

impl Endpoint for TcpReceiver {
    fn handle_packet(&mut self, _now: Time, pkt: &Packet) {
        if pkt.flow != self.flow || pkt.kind != PacketKind::Data {
            return;
        }
        self.flow_bytes.accept(pkt.seq, pkt.len as u64);
        // Duplicates are ACKed too: that is what drives the sender's dupACK count.
        self.acks.push_back(PendingAck { cum_ack: self.flow_bytes.in_order(), ece: pkt.ecn.ce });
    }

    fn handle_timeout(&mut self, _now: Time) {}

    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        let a = self.acks.pop_front()?;
        let mut p = Packet::ack(self.flow, self.local, self.remote, a.cum_ack, self.cfg.ack_bytes);
        p.priority = self.cfg.priority;
        p.ece = a.ece;
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
