//! pFabric receiver: one ACK per data packet, cumulative ACK + the packet it answers.

use super::PFabricConfig;
use crate::packet::{FlowId, HostId, Packet};
use crate::transport::acking::{AckExtra, AckingReceiver, DelayedAck};

/// pFabric's ACK names, in `rank`, the data packet it answers: every data packet is
/// answered, duplicates and probes too; a probe (no payload, or nothing inside the flow)
/// selectively acknowledges nothing (`u64::MAX`).
#[derive(Clone, Copy, Debug)]
pub struct Sack(u64);

impl AckExtra for Sack {
    fn of(pkt: &Packet, size: u64) -> Self {
        Sack(if pkt.len > 0 && pkt.seq < size { pkt.seq } else { u64::MAX })
    }

    fn stamp(self, ack: &mut Packet) {
        ack.rank = self.0;
    }
}

/// Receiving side of one pFabric flow; reports `Delivered` once all `size` bytes are in.
pub type PFabricReceiver = AckingReceiver<Sack>;

impl PFabricReceiver {
    /// A receiver for a flow of `size_bytes` from `remote` to `local`. A flow of 0 bytes is
    /// complete at once: the first `poll_event` reports `Delivered`.
    pub fn new(cfg: PFabricConfig, flow: FlowId, local: HostId, remote: HostId, size_bytes: u64) -> Self {
        AckingReceiver::with(flow, local, remote, size_bytes, cfg.ack_bytes, cfg.priority, DelayedAck::OFF)
    }
}
