//! What a call is, as the ranks check it against each other before they trust its data.
//!
//! Every rank sends its descriptor of each call to every peer on the control link when it
//! starts the call; a call completes only once every live peer's descriptor for it has
//! arrived and equals this rank's, and any difference fails the call on every rank with
//! [`crate::NetError::CallMismatch`] naming the ranks and the field. Without it, ranks
//! that made different calls (sizes, algorithms, dtypes, ops) exchanged data that fit
//! neither: hung, or returned different garbage on each rank.
//!
//! Frame (64 bytes, big endian), beside the 32-byte control headers on the same link:
//! ```text
//!  0 magic "GC" (2)  2 version (1)  3 op (1)  4 algorithm (1)  5 dtype (1)
//!  6 transport (1)   7 reserved, 0 (1)
//!  8 session (8)    16 call number (8)   24 elements (8)   32 loss bound, f64 bits (8)
//! 40 root (4)       44 reserved, 0 (4)   48 schedule fingerprint (8)   56 reserved, 0 (8)
//! ```

use std::fmt;
use std::hash::{Hash, Hasher};

use gradwire_core::collective::Schedule;

use crate::algorithms::{Algorithm, CallKind};
use crate::endpoint::TransportKind;

pub const DESC_MAGIC: [u8; 2] = *b"GC";
pub const DESC_VERSION: u8 = 1;
pub const DESC_LEN: usize = 64;

/// One call as this rank made it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CallDesc {
    pub session: u64,
    /// Calls this rank started before this one (never wraps).
    pub call: u64,
    /// 0 custom schedule, 1 allreduce, 2 broadcast, 3 ps push, 4 ps pull.
    pub op: u8,
    /// 0 none, 1 ring, 2 tree, 3 rat, 4 ps.
    pub algorithm: u8,
    /// 4 or 8 (bytes per element).
    pub dtype: u8,
    /// The transport's wire code ([`gradwire_core::transport::TransportSpec::wire_code`]).
    pub transport: u8,
    pub elements: u64,
    pub loss_bound: f64,
    pub root: u32,
    /// A hash of the schedule (every transfer's ranks, range, op, bound, priority and
    /// dependencies): catches differing layout knobs (tree arity, pipeline chunks,
    /// topology, PS servers) that the named fields do not.
    pub schedule: u64,
}

/// Why a frame is not a descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DescError {
    BadMagic,
    UnsupportedVersion(u8),
    BadField(&'static str),
}

impl fmt::Display for DescError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DescError::BadMagic => write!(f, "not a call descriptor (bad magic)"),
            DescError::UnsupportedVersion(v) => {
                write!(f, "call descriptor version {v} (this build speaks {DESC_VERSION})")
            }
            DescError::BadField(name) => write!(f, "call descriptor has an invalid {name}"),
        }
    }
}

const OPS: [&str; 5] = ["a custom schedule", "allreduce", "broadcast", "ps push", "ps pull"];
const ALGORITHMS: [&str; 5] = ["-", "ring", "tree", "rat", "ps"];
/// The runtime transport whose wire code is `code`.
fn transport_named(code: u8) -> Option<&'static str> {
    TransportKind::all().into_iter().find(|k| k.spec().wire_code() == Some(code)).map(|k| k.name())
}

impl CallDesc {
    pub fn new(
        session: u64,
        kind: Option<CallKind>,
        schedule: &Schedule,
        elem_bytes: u32,
        transport: TransportKind,
    ) -> Self {
        let (op, algorithm, loss_bound, root) = match kind {
            None => (0, 0, 0.0, 0),
            Some(CallKind::Allreduce { algorithm, loss_bound }) => (1, algorithm_code(algorithm), loss_bound, 0),
            Some(CallKind::Broadcast { root }) => (2, 0, 0.0, root),
            Some(CallKind::PsPush { loss_bound }) => (3, 4, loss_bound, 0),
            Some(CallKind::PsPull { loss_bound }) => (4, 4, loss_bound, 0),
        };
        CallDesc {
            session,
            call: 0,
            op,
            algorithm,
            dtype: elem_bytes as u8,
            // the runtime runs only the transports with a wire code
            transport: transport.spec().wire_code().unwrap_or(u8::MAX),
            elements: schedule.bytes / elem_bytes as u64,
            loss_bound,
            root,
            schedule: fingerprint(schedule),
        }
    }

    pub fn encode(&self, out: &mut [u8; DESC_LEN]) {
        *out = [0; DESC_LEN];
        out[0..2].copy_from_slice(&DESC_MAGIC);
        out[2] = DESC_VERSION;
        (out[3], out[4], out[5], out[6]) = (self.op, self.algorithm, self.dtype, self.transport);
        out[8..16].copy_from_slice(&self.session.to_be_bytes());
        out[16..24].copy_from_slice(&self.call.to_be_bytes());
        out[24..32].copy_from_slice(&self.elements.to_be_bytes());
        out[32..40].copy_from_slice(&self.loss_bound.to_bits().to_be_bytes());
        out[40..44].copy_from_slice(&self.root.to_be_bytes());
        out[48..56].copy_from_slice(&self.schedule.to_be_bytes());
    }

    /// Checks every field: a frame from an unauthenticated TCP peer.
    pub fn decode(b: &[u8; DESC_LEN]) -> Result<Self, DescError> {
        if b[0..2] != DESC_MAGIC {
            return Err(DescError::BadMagic);
        }
        if b[2] != DESC_VERSION {
            return Err(DescError::UnsupportedVersion(b[2]));
        }
        if b[7] != 0 || b[44..48] != [0; 4] || b[56..64] != [0; 8] {
            return Err(DescError::BadField("reserved bytes"));
        }
        let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let d = CallDesc {
            op: b[3],
            algorithm: b[4],
            dtype: b[5],
            transport: b[6],
            session: u64_at(8),
            call: u64_at(16),
            elements: u64_at(24),
            loss_bound: f64::from_bits(u64_at(32)),
            root: u32::from_be_bytes(b[40..44].try_into().expect("4 bytes")),
            schedule: u64_at(48),
        };
        if d.op as usize >= OPS.len() {
            return Err(DescError::BadField("op"));
        }
        if d.algorithm as usize >= ALGORITHMS.len() {
            return Err(DescError::BadField("algorithm"));
        }
        if !matches!(d.dtype, 4 | 8) {
            return Err(DescError::BadField("dtype"));
        }
        if transport_named(d.transport).is_none() {
            return Err(DescError::BadField("transport"));
        }
        if !(0.0..=1.0).contains(&d.loss_bound) {
            return Err(DescError::BadField("loss bound"));
        }
        Ok(d)
    }

    /// The first field in which `self` and `other` differ: (name, self's value, other's).
    pub fn difference(&self, other: &CallDesc) -> Option<(&'static str, String, String)> {
        let dtype = |d: u8| if d == 4 { "float32" } else { "float64" };
        let transport = |t: u8| transport_named(t).unwrap_or("?").to_string();
        let fields: [(&'static str, String, String); 8] = [
            ("operation", OPS[self.op as usize].into(), OPS[other.op as usize].into()),
            ("algorithm", ALGORITHMS[self.algorithm as usize].into(), ALGORITHMS[other.algorithm as usize].into()),
            ("dtype", dtype(self.dtype).into(), dtype(other.dtype).into()),
            ("element count", self.elements.to_string(), other.elements.to_string()),
            ("root", self.root.to_string(), other.root.to_string()),
            ("loss bound", self.loss_bound.to_string(), other.loss_bound.to_string()),
            ("transport", transport(self.transport), transport(other.transport)),
            (
                "schedule (tree_arity, pipeline_chunks, topology, ps_servers or mss differ)",
                format!("{:#018x}", self.schedule),
                format!("{:#018x}", other.schedule),
            ),
        ];
        fields.into_iter().find(|(_, a, b)| a != b)
    }
}

fn algorithm_code(a: Algorithm) -> u8 {
    match a {
        Algorithm::Ring => 1,
        Algorithm::Tree => 2,
        Algorithm::Rat => 3,
        Algorithm::Ps => 4,
    }
}

/// FNV-1a over the schedule's shape: stable across processes and builds (unlike
/// `DefaultHasher`, whose algorithm may change between Rust releases).
fn fingerprint(s: &Schedule) -> u64 {
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for &b in bytes {
                self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    (s.world, s.bytes, s.elem_bytes, s.transfers.len()).hash(&mut h);
    for t in &s.transfers {
        (t.src, t.dst, t.range.start, t.range.end, t.op, t.priority, t.loss_bound.to_bits(), &t.after).hash(&mut h);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc() -> CallDesc {
        CallDesc {
            session: 7,
            call: 3,
            op: 1,
            algorithm: 1,
            dtype: 4,
            transport: 0,
            elements: 1000,
            loss_bound: 0.01,
            root: 0,
            schedule: 42,
        }
    }

    #[test]
    fn a_descriptor_round_trips_and_bad_frames_are_refused() {
        let mut b = [0u8; DESC_LEN];
        desc().encode(&mut b);
        assert_eq!(CallDesc::decode(&b), Ok(desc()));
        let mut bad = b;
        bad[0] = b'X';
        assert_eq!(CallDesc::decode(&bad), Err(DescError::BadMagic));
        let mut bad = b;
        bad[5] = 3;
        assert_eq!(CallDesc::decode(&bad), Err(DescError::BadField("dtype")));
        let mut bad = b;
        bad[32..40].copy_from_slice(&f64::NAN.to_bits().to_be_bytes());
        assert_eq!(CallDesc::decode(&bad), Err(DescError::BadField("loss bound")));
    }

    #[test]
    fn the_difference_names_the_first_field_that_differs() {
        let a = desc();
        assert_eq!(a.difference(&a), None);
        let b = CallDesc { elements: 1001, ..a };
        assert_eq!(a.difference(&b), Some(("element count", "1000".into(), "1001".into())));
        let c = CallDesc { dtype: 8, elements: 500, ..a };
        assert_eq!(a.difference(&c).map(|d| d.0), Some("dtype"));
    }
}
