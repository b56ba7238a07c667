//! The in-memory packet every world passes between state machines.
//!
//! This is a plain `Copy` struct, never serialized bytes: the simulator keeps these in a
//! pool, the socket runtime encodes them with [`crate::wire`] only at the socket.

use crate::time::Time;

/// Index of a host (end-point) in a topology or a job.
pub type HostId = u32;
/// Identifier of a transfer (a flow), unique within a run.
pub type FlowId = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// Payload bytes `[seq, seq + len)` of a flow.
    Data,
    /// Acknowledgement; `seq` is the cumulative ACK (next byte expected).
    Ack,
    /// A control message (DLCP); its one argument is in `seq`, `len` is 0.
    Ctrl(CtrlOp),
    /// Acknowledges the control message with the same op and `seq`.
    CtrlAck(CtrlOp),
}

/// Control messages of DLCP's reliable signal channel (DLCP §3.2.1, §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtrlOp {
    /// Sender -> receiver rendezvous; `seq` = transfer size in bytes.
    Start,
    /// Sender -> receiver: round `seq` of data is all sent.
    Stop,
    /// Receiver -> sender: resend a run of segments (packed, see `transport::dlcp`).
    Retx,
    /// Receiver -> sender: the loss bound is met; `seq` = bytes delivered.
    Finish,
    /// Sender -> receiver: FINISH seen, no more data will be sent.
    Confirm,
    /// Receiver -> sender, unreliable: measured receive rate, `seq` in bit/s.
    Rate,
}

impl CtrlOp {
    pub const ALL: [CtrlOp; 6] = [CtrlOp::Start, CtrlOp::Stop, CtrlOp::Retx, CtrlOp::Finish, CtrlOp::Confirm, CtrlOp::Rate];
}

/// ECN bits as carried in the IP header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ecn {
    /// ECN-capable transport (ECT). DLCP uses it to mean "important: mark, don't drop".
    pub ect: bool,
    /// Congestion experienced, set by a switch.
    pub ce: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet {
    pub kind: PacketKind,
    pub flow: FlowId,
    pub src: HostId,
    pub dst: HostId,
    /// Data: first payload byte. Ack: cumulative ack.
    pub seq: u64,
    /// Payload bytes (0 for a pure ACK).
    pub len: u32,
    /// Bytes on the wire, headers included; what links serialize and buffers hold.
    pub wire_bytes: u32,
    /// Switch queue: 0 is served first (strict priority); 0..=7.
    pub priority: u8,
    pub ecn: Ecn,
    /// ECN-echo on an ACK: the acknowledged data packet arrived with CE.
    pub ece: bool,
    /// When the sender emitted it (diagnostics; transports keep their own RTT state).
    pub sent_at: Time,
    /// pFabric (0 for every other transport). Data: the packet's rank, the flow's bytes not
    /// yet acknowledged when it was sent; a pFabric port serves the smallest rank first.
    /// Ack: the first byte of the data packet this ACK answers (a one-block selective ACK;
    /// `u64::MAX` when it answers a header-only probe).
    /// A pFabric port ranks every non-data packet 0; see [`Packet::switch_rank`].
    pub rank: u64,
}

impl Packet {
    pub fn data(flow: FlowId, src: HostId, dst: HostId, seq: u64, len: u32, header: u32) -> Self {
        Packet {
            kind: PacketKind::Data,
            flow,
            src,
            dst,
            seq,
            len,
            wire_bytes: len + header,
            priority: 0,
            ecn: Ecn::default(),
            ece: false,
            sent_at: 0,
            rank: 0,
        }
    }

    /// A control message (`PacketKind::Ctrl` or `CtrlAck`) carrying `arg` in `seq`.
    pub fn ctrl(kind: PacketKind, flow: FlowId, src: HostId, dst: HostId, arg: u64, wire_bytes: u32) -> Self {
        Packet { kind, seq: arg, ..Packet::ack(flow, src, dst, 0, wire_bytes) }
    }

    /// The rank a pFabric port schedules this packet by: the stamped rank for data, 0
    /// (most urgent) for ACKs and control packets.
    pub fn switch_rank(&self) -> u64 {
        if self.kind == PacketKind::Data {
            self.rank
        } else {
            0
        }
    }

    pub fn ack(flow: FlowId, src: HostId, dst: HostId, cum_ack: u64, wire_bytes: u32) -> Self {
        Packet {
            kind: PacketKind::Ack,
            flow,
            src,
            dst,
            seq: cum_ack,
            len: 0,
            wire_bytes,
            priority: 0,
            ecn: Ecn::default(),
            ece: false,
            sent_at: 0,
            rank: 0,
        }
    }
}
