//! TCP receiver: reassembly and one cumulative ACK per data packet, echoing CE as ECE.

use super::TcpConfig;
use crate::packet::{FlowId, HostId, Packet};
use crate::transport::acking::{AckExtra, AckingReceiver};

/// TCP's ACK echoes the CE mark of the data packet it answers as ECE (RFC 3168, one ACK a
/// packet as DCTCP wants). Duplicates are ACKed too: that drives the sender's dupACKs.
#[derive(Clone, Copy, Debug)]
pub struct EceEcho(bool);

impl AckExtra for EceEcho {
    fn of(pkt: &Packet, _size: u64) -> Self {
        EceEcho(pkt.ecn.ce)
    }

    fn stamp(self, ack: &mut Packet) {
        ack.ece = self.0;
    }
}

/// Receiving side of one TCP flow; reports `Delivered` once all `size` bytes are in.
pub type TcpReceiver = AckingReceiver<EceEcho>;

impl TcpReceiver {
    /// A receiver at `local` for flow `flow` of `size_bytes` bytes from `remote`; a
    /// zero-byte flow reports `Delivered` at once.
    pub fn new(cfg: TcpConfig, flow: FlowId, local: HostId, remote: HostId, size_bytes: u64) -> Self {
        AckingReceiver::with(flow, local, remote, size_bytes, cfg.ack_bytes, cfg.priority)
    }
}
