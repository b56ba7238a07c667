//! TCP receiver: reassembly and one cumulative ACK per data packet.

use crate::transport::received::ReceivedBytes;
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
    size: u64,
    /// What has arrived; its in-order point is the cumulative ACK.
    received: ReceivedBytes,
    acks: VecDeque<PendingAck>,
    complete: bool,
    delivered_pending: bool,
}

impl TcpReceiver {
    /// A receiver at `local` for flow `flow` of `size_bytes` bytes from `remote`; a
    /// zero-byte flow reports `Delivered` at once.
    pub fn new(cfg: TcpConfig, flow: FlowId, local: HostId, remote: HostId, size_bytes: u64) -> Self {
        let empty = size_bytes == 0;
        TcpReceiver {
            cfg,
            flow,
            local,
            remote,
            size: size_bytes,
            received: ReceivedBytes::default(),
            acks: VecDeque::new(),
            // A zero-byte flow is complete before anything arrives.
            complete: empty,
            delivered_pending: empty,
        }
    }

    /// Bytes received in order so far.
    pub fn received_bytes(&self) -> u64 {
        self.received.in_order()
    }
}

impl Endpoint for TcpReceiver {
    fn handle_packet(&mut self, _now: Time, pkt: &Packet) {
        if pkt.flow != self.flow || pkt.kind != PacketKind::Data {
            return;
        }
        // Clip to the flow: bytes beyond `size` or below the in-order point carry nothing new.
        let start = pkt.seq.max(self.received.in_order());
        let end = pkt.seq.saturating_add(pkt.len as u64).min(self.size);
        if start < end {
            self.received.insert(start, end);
        }
        // Duplicates are ACKed too: that is what drives the sender's dupACK count.
        self.acks.push_back(PendingAck { cum_ack: self.received.in_order(), ece: pkt.ecn.ce });
        if !self.complete && self.received.in_order() == self.size {
            self.complete = true;
            self.delivered_pending = true;
        }
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
