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
        }
    }
}
