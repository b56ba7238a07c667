//! TCP receiver: reassembly and cumulative ACKs, echoing CE as ECE, each naming the data
//! segment it answers (a one-block SACK); optionally delayed (RFC 5681 4.2).

use super::{CongestionControl, TcpConfig};
use crate::packet::{FlowId, HostId, Packet};
use crate::transport::acking::{AckExtra, AckingReceiver};

/// What a TCP ACK carries beside the cumulative ACK: the CE mark of the data packet it
/// answers as ECE (RFC 3168; one ACK a packet as DCTCP wants, or at once when the CE state
/// changes under delayed ACKs, RFC 8257 3.2), and in `rank` the first byte of that packet:
/// RFC 2018's first SACK block, the one holding the most recently received segment.
/// Segments start at multiples of the MSS, so the sender knows the block's end.
///
/// One block, not RFC 2018's three or four: an out-of-order segment is always answered at
/// once (delayed ACKs wait only in order), so every segment that arrives above a hole is
/// named by an ACK of its own and the sender's scoreboard misses only what a lost ACK
/// carried, which RACK recovers by time. It costs no field beyond pFabric's.
#[derive(Clone, Copy, Debug)]
pub struct EceEcho {
    ce: bool,
    seq: u64,
}

impl AckExtra for EceEcho {
    fn of(pkt: &Packet, _size: u64) -> Self {
        EceEcho { ce: pkt.ecn.ce, seq: pkt.seq }
    }

    fn stamp(self, ack: &mut Packet) {
        ack.ece = self.ce;
        ack.rank = self.seq;
    }

    fn urgent_after(self, held: Self) -> bool {
        self.ce != held.ce
    }

    fn unmarked(self) -> Self {
        EceEcho { ce: false, ..self }
    }

    fn cumulative_only(self) -> Self {
        // `rank` past any sequence sent: the sender reads no SACK block
        EceEcho { seq: u64::MAX, ..self }
    }
}

/// Receiving side of one TCP flow; reports `Delivered` once all `size` bytes are in.
pub type TcpReceiver = AckingReceiver<EceEcho>;

impl TcpReceiver {
    /// A receiver at `local` for flow `flow` of `size_bytes` bytes from `remote`; a
    /// zero-byte flow reports `Delivered` at once.
    pub fn new(cfg: TcpConfig, flow: FlowId, local: HostId, remote: HostId, size_bytes: u64) -> Self {
        let r = AckingReceiver::with(flow, local, remote, size_bytes, cfg.ack_bytes, cfg.priority, cfg.delayed_ack);
        let r = if cfg.delack_first_at_once { r.with_first_ack_at_once() } else { r };
        let r = if cfg.ce_seq_check { r.with_ce_seq_check() } else { r };
        // ns-3's CeState0to1/CeState1to0 are TcpDctcp's (TcpNewReno ignores the CE events)
        if cfg.ce_ack_lagged && matches!(cfg.cc, CongestionControl::Dctcp { .. }) {
            r.with_lagged_ce_acks()
        } else {
            r
        }
    }
}
