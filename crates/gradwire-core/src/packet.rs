//! The in-memory packet every world passes between state machines.
//!
//! This is a plain `Copy` struct, never serialized bytes: the simulator keeps these in a
//! pool, the socket runtime encodes them with [`crate::wire`] only at the socket.

use crate::time::Time;

/// Index of a host (end-point) in a topology or a job.
pub type HostId = u32;
/// Identifier of a transfer (a flow), unique within a run.
pub type FlowId = u32;

/// What a packet carries; decides how `seq` and `len` are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// Payload bytes `[seq, seq + len)` of a flow.
    Data,
    /// Acknowledgement; `seq` is the cumulative ACK (next byte expected), except for LTP,
    /// whose ACK names one segment by its offset (see [`Packet::seq`]).
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
    /// Every op, in wire-code order (see [`crate::wire`]).
    pub const ALL: [CtrlOp; 6] =
        [CtrlOp::Start, CtrlOp::Stop, CtrlOp::Retx, CtrlOp::Finish, CtrlOp::Confirm, CtrlOp::Rate];
}

/// ECN bits as carried in the IP header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ecn {
    /// ECN-capable transport (ECT). DLCP uses it to mean "important: mark, don't drop".
    pub ect: bool,
    /// Congestion experienced, set by a switch.
    pub ce: bool,
}

/// One packet in flight between two endpoints, through zero or more switch ports.
///
/// Byte counts are `u32` per packet and `u64` per stream; times are [`Time`] (ps). The
/// payload itself is never carried: a data packet names the byte range `[seq, seq + len)`
/// of its flow, and a driver that moves real bytes keeps them beside the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet {
    /// What the packet carries; decides how `seq` and `len` are read.
    pub kind: PacketKind,
    /// The transfer the packet belongs to; endpoints ignore packets of other flows.
    pub flow: FlowId,
    /// Sending host; endpoints check it is their peer.
    pub src: HostId,
    /// Destination host; switches route on it.
    pub dst: HostId,
    /// A byte offset in the flow, or a control argument. Data: first payload byte. Ack:
    /// the cumulative ACK (next byte expected) for TCP-like transports, the offset of the
    /// one acknowledged segment for LTP. Ctrl/CtrlAck: the op's argument ([`CtrlOp`]).
    pub seq: u64,
    /// Payload bytes; 0 for ACKs and control packets.
    pub len: u32,
    /// Bytes on the wire, headers included; what links serialize and buffers hold.
    pub wire_bytes: u32,
    /// Switch queue: 0 is served first (strict priority); 0..=7. A port with fewer
    /// queues clamps it to its lowest-priority queue.
    pub priority: u8,
    /// ECN bits: set ECT at the sender, CE by a switch on the way.
    pub ecn: Ecn,
    /// ECN-echo on an ACK: the acknowledged data packet arrived with CE.
    pub ece: bool,
    /// When the packet was emitted, in ps, for diagnostics and traces only: no endpoint
    /// reads it from a received packet (transports keep their own RTT state). Stamped by
    /// the endpoint or the driver; 0 if neither did.
    pub sent_at: Time,
    /// pFabric (0 for every other transport). Data: the packet's rank, the flow's bytes not
    /// yet acknowledged when it was sent; a pFabric port serves the smallest rank first.
    /// Ack: the first byte of the data packet this ACK answers (a one-block selective ACK;
    /// `u64::MAX` when it answers a header-only probe).
    /// A pFabric port ranks every non-data packet 0; see [`Packet::switch_rank`].
    pub rank: u64,
}

impl Packet {
    /// A data packet of payload bytes `[seq, seq + len)`, `header` bytes of headers on
    /// the wire on top (so `wire_bytes = len + header`). Priority 0, no ECN, rank 0:
    /// the transport sets those it uses.
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

    /// An ACK carrying `cum_ack` in `seq` (what it acknowledges depends on the transport,
    /// see [`Packet::seq`]), `len` 0, `wire_bytes` on the wire. Priority 0, no ECN/ECE.
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
