//! The gradwire datagram header: versioned, fixed layout, checked decode.
//!
//! Used by the socket runtime; the simulator passes [`crate::Packet`] structs and never
//! serializes. Decoding never trusts a length from the network: every field is checked
//! against the datagram actually received, and a bad datagram is an error, never a panic.
//!
//! Layout (big endian, 32 bytes):
//! ```text
//!  0  magic "GW" (2)   2 version (1)   3 kind (1)
//!  4  flags (1)        5 priority (1)  6 reserved, must be 0 (2)
//!  8  session id (8)
//! 16  flow id (4)     20 payload length (4)
//! 24  sequence / offset (8)
//! 32  payload
//! ```

use crate::packet::{CtrlOp, FlowId, PacketKind};

/// First two bytes of every gradwire datagram.
pub const MAGIC: [u8; 2] = *b"GW";
/// Header layout version this build encodes and accepts (no other is decoded).
pub const VERSION: u8 = 1;
/// Header size in bytes; the payload starts right after it.
pub const HEADER_LEN: usize = 32;

const FLAG_ECT: u8 = 1 << 0;
const FLAG_CE: u8 = 1 << 1;
const FLAG_ECE: u8 = 1 << 2;
const KNOWN_FLAGS: u8 = FLAG_ECT | FLAG_CE | FLAG_ECE;

/// The decoded header of one datagram: the fields of a [`crate::Packet`] that travel
/// on the wire. The receiver takes the hosts from the socket addresses and the sizes
/// from the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Packet kind, as [`crate::Packet::kind`].
    pub kind: PacketKind,
    /// ECN-capable transport flag, as [`crate::Ecn::ect`].
    pub ect: bool,
    /// Congestion-experienced flag, as [`crate::Ecn::ce`].
    pub ce: bool,
    /// ECN-echo on an ACK, as [`crate::Packet::ece`].
    pub ece: bool,
    /// Priority queue, 0..=7 (0 served first); decoding rejects larger values.
    pub priority: u8,
    /// Random per job: datagrams of another job are rejected by the runtime.
    pub session: u64,
    /// Flow (transfer) id, as [`crate::Packet::flow`].
    pub flow: FlowId,
    /// Payload bytes after the header; must equal what the datagram holds.
    pub payload_len: u32,
    /// Byte offset, cumulative ACK or control argument, as [`crate::Packet::seq`].
    pub seq: u64,
}

/// Why a datagram was rejected. Each is a property of the bytes received, so a driver
/// counts and drops the datagram; none is fatal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Fewer than [`HEADER_LEN`] bytes arrived.
    TooShort {
        /// Datagram size in bytes.
        got: usize,
    },
    /// The first two bytes are not [`MAGIC`]: not a gradwire datagram.
    BadMagic,
    /// A header version other than [`VERSION`] (a peer running another build).
    UnsupportedVersion(u8),
    /// A kind code that names no [`PacketKind`].
    UnknownKind(u8),
    /// Flag bits other than ECT, CE and ECE are set (the offending flags byte).
    UnknownFlags(u8),
    /// A priority above 7.
    BadPriority(u8),
    /// The two reserved bytes are not zero.
    NonZeroReserved,
    /// The header claims more (or fewer) payload bytes than the datagram holds.
    LengthMismatch {
        /// `payload_len` from the header.
        claimed: u32,
        /// Payload bytes actually present after the header.
        actual: usize,
    },
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::TooShort { got } => {
                write!(f, "datagram of {got} bytes is shorter than the {HEADER_LEN}-byte header")
            }
            WireError::BadMagic => write!(f, "not a gradwire datagram (bad magic)"),
            WireError::UnsupportedVersion(v) => {
                write!(f, "unsupported header version {v} (this build speaks {VERSION})")
            }
            WireError::UnknownKind(k) => write!(f, "unknown packet kind {k}"),
            WireError::UnknownFlags(fl) => write!(f, "unknown flag bits {fl:#04x}"),
            WireError::BadPriority(p) => write!(f, "priority {p} is out of range 0..=7"),
            WireError::NonZeroReserved => write!(f, "reserved header bytes are not zero"),
            WireError::LengthMismatch { claimed, actual } => {
                write!(f, "header claims {claimed} payload bytes but {actual} arrived")
            }
        }
    }
}

impl std::error::Error for WireError {}

const CTRL_BASE: u8 = 0x10;
const CTRL_ACK_BASE: u8 = 0x20;

fn op_code(op: CtrlOp) -> u8 {
    match op {
        CtrlOp::Start => 0,
        CtrlOp::Stop => 1,
        CtrlOp::Retx => 2,
        CtrlOp::Finish => 3,
        CtrlOp::Confirm => 4,
        CtrlOp::Rate => 5,
    }
}

/// Kind codes: 1 data, 2 ack, 0x10 + op control, 0x20 + op control ack.
fn kind_code(kind: PacketKind) -> u8 {
    match kind {
        PacketKind::Data => 1,
        PacketKind::Ack => 2,
        PacketKind::Ctrl(op) => CTRL_BASE + op_code(op),
        PacketKind::CtrlAck(op) => CTRL_ACK_BASE + op_code(op),
    }
}

fn kind_from_code(code: u8) -> Option<PacketKind> {
    let op = |base: u8| CtrlOp::ALL.get(code.checked_sub(base)? as usize).copied();
    match code {
        1 => Some(PacketKind::Data),
        2 => Some(PacketKind::Ack),
        _ => op(CTRL_BASE).map(PacketKind::Ctrl).or_else(|| op(CTRL_ACK_BASE).map(PacketKind::CtrlAck)),
    }
}

impl Header {
    /// Write the header into `out` in the layout above (reserved bytes zeroed). Encoding
    /// does not validate: a `priority` above 7 is written as is and rejected by the peer.
    pub fn encode(&self, out: &mut [u8; HEADER_LEN]) {
        out[0..2].copy_from_slice(&MAGIC);
        out[2] = VERSION;
        out[3] = kind_code(self.kind);
        out[4] = (self.ect as u8 * FLAG_ECT) | (self.ce as u8 * FLAG_CE) | (self.ece as u8 * FLAG_ECE);
        out[5] = self.priority;
        out[6..8].copy_from_slice(&[0, 0]);
        out[8..16].copy_from_slice(&self.session.to_be_bytes());
        out[16..20].copy_from_slice(&self.flow.to_be_bytes());
        out[20..24].copy_from_slice(&self.payload_len.to_be_bytes());
        out[24..32].copy_from_slice(&self.seq.to_be_bytes());
    }

    /// Decode a whole datagram into its header and payload.
    pub fn decode(datagram: &[u8]) -> Result<(Header, &[u8]), WireError> {
        let Some((h, payload)) = datagram.split_first_chunk::<HEADER_LEN>() else {
            return Err(WireError::TooShort { got: datagram.len() });
        };
        let header = Header::decode_header(h)?;
        if header.payload_len as usize != payload.len() {
            return Err(WireError::LengthMismatch { claimed: header.payload_len, actual: payload.len() });
        }
        Ok((header, payload))
    }

    /// The header alone, every check but the payload length's (for a receiver that reads
    /// the header before it decides where the payload goes).
    pub fn decode_header(h: &[u8; HEADER_LEN]) -> Result<Header, WireError> {
        if h[0..2] != MAGIC {
            return Err(WireError::BadMagic);
        }
        if h[2] != VERSION {
            return Err(WireError::UnsupportedVersion(h[2]));
        }
        let kind = kind_from_code(h[3]).ok_or(WireError::UnknownKind(h[3]))?;
        let flags = h[4];
        if flags & !KNOWN_FLAGS != 0 {
            return Err(WireError::UnknownFlags(flags));
        }
        if h[5] > 7 {
            return Err(WireError::BadPriority(h[5]));
        }
        if h[6] != 0 || h[7] != 0 {
            return Err(WireError::NonZeroReserved);
        }
        let be32 = |r: std::ops::Range<usize>| u32::from_be_bytes(h[r].try_into().expect("4 bytes"));
        let be64 = |r: std::ops::Range<usize>| u64::from_be_bytes(h[r].try_into().expect("8 bytes"));
        Ok(Header {
            kind,
            ect: flags & FLAG_ECT != 0,
            ce: flags & FLAG_CE != 0,
            ece: flags & FLAG_ECE != 0,
            priority: h[5],
            session: be64(8..16),
            flow: be32(16..20),
            payload_len: be32(20..24),
            seq: be64(24..32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Header {
        Header {
            kind: PacketKind::Data,
            ect: true,
            ce: false,
            ece: true,
            priority: 3,
            session: 0xDEAD_BEEF_0123_4567,
            flow: 42,
            payload_len: 5,
            seq: 1 << 40,
        }
    }

    /// A datagram: `h` encoded, then `payload`.
    fn datagram(h: &Header, payload: &[u8]) -> Vec<u8> {
        let mut buf = [0u8; HEADER_LEN];
        h.encode(&mut buf);
        let mut dgram = buf.to_vec();
        dgram.extend_from_slice(payload);
        dgram
    }

    #[test]
    fn round_trip() {
        let dgram = datagram(&sample(), b"hello");
        let (h, p) = Header::decode(&dgram).unwrap();
        assert_eq!(h, sample());
        assert_eq!(p, b"hello");
    }

    #[test]
    fn rejects_lies_about_length() {
        let dgram = datagram(&sample(), b"hi");
        assert_eq!(Header::decode(&dgram), Err(WireError::LengthMismatch { claimed: 5, actual: 2 }));
        assert_eq!(Header::decode(&dgram[..10]), Err(WireError::TooShort { got: 10 }));
    }

    #[test]
    fn every_kind_round_trips_and_unknown_codes_are_rejected() {
        let ops = CtrlOp::ALL.iter();
        let kinds: Vec<PacketKind> = [PacketKind::Data, PacketKind::Ack]
            .into_iter()
            .chain(ops.clone().map(|&o| PacketKind::Ctrl(o)))
            .chain(ops.map(|&o| PacketKind::CtrlAck(o)))
            .collect();
        let mut codes = std::collections::HashSet::new();
        for kind in kinds {
            assert!(codes.insert(kind_code(kind)), "{kind:?} shares a code");
            let h = Header { kind, payload_len: 0, ..sample() };
            let mut buf = [0u8; HEADER_LEN];
            h.encode(&mut buf);
            assert_eq!(Header::decode(&buf), Ok((h, &[][..])));
        }
        for code in (0..=255u8).filter(|c| !codes.contains(c)) {
            let mut buf = [0u8; HEADER_LEN];
            Header { payload_len: 0, ..sample() }.encode(&mut buf);
            buf[3] = code;
            assert_eq!(Header::decode(&buf), Err(WireError::UnknownKind(code)));
        }
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = Header::decode(&bytes);
        }

        #[test]
        fn decode_inverts_encode(seq: u64, flow: u32, session: u64, prio in 0u8..8, ect: bool, ce: bool, ece: bool,
                                 payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let h = Header { kind: PacketKind::Ack, ect, ce, ece, priority: prio, session, flow,
                             payload_len: payload.len() as u32, seq };
            let d = datagram(&h, &payload);
            let (got, p) = Header::decode(&d).unwrap();
            prop_assert_eq!(got, h);
            prop_assert_eq!(p, &payload[..]);
        }
    }
}
