//! The few IPv4 header fields the switch reads and writes.
//!
//! The emulator carries whatever the kernels in the namespaces send; it reads the DSCP
//! (queue), the ECN field (ECT: may be marked instead of queued unmarked), the addresses
//! (route) and the transport ports (ECMP hash), and sets CE with an incremental checksum
//! update (RFC 1624).

/// Fields of one IPv4 packet that switching needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Info {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub tos: u8,
    pub proto: u8,
    /// Total length from the header (bytes on the wire, as the simulator counts them).
    pub total_len: u16,
    /// Source and destination transport ports (0 for other protocols or fragments).
    pub ports: (u16, u16),
}

impl Ipv4Info {
    /// Switch queue from the DSCP class selector: gradwire's runtime sends queue `q` as
    /// CS(7 - q) (`gradwire-net`'s `tos_byte`), so CS7 (control) is queue 0 and DSCP 0
    /// (kernel TCP, Gloo) is queue 7, the lowest.
    pub fn priority(&self) -> u8 {
        7 - (self.tos >> 5)
    }

    /// ECN-capable transport: ECT(0), ECT(1), or CE already set.
    pub fn ect(&self) -> bool {
        self.tos & 0b11 != 0
    }

    /// Per-flow hash for ECMP (FNV-1a over the 5-tuple).
    pub fn flow_hash(&self) -> u32 {
        let mut h: u32 = 0x811c_9dc5;
        let mut eat = |b: u8| h = (h ^ b as u32).wrapping_mul(0x0100_0193);
        self.src.iter().chain(&self.dst).for_each(|&b| eat(b));
        eat(self.proto);
        self.ports.0.to_be_bytes().iter().chain(&self.ports.1.to_be_bytes()).for_each(|&b| eat(b));
        h
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Not IPv4 (IPv6, or garbage).
    NotIpv4,
    /// Header length or total length inconsistent with the bytes read.
    Malformed,
}

pub fn parse(pkt: &[u8]) -> Result<Ipv4Info, ParseError> {
    if pkt.is_empty() || pkt[0] >> 4 != 4 {
        return Err(ParseError::NotIpv4);
    }
    let ihl = (pkt[0] & 0x0f) as usize * 4;
    if ihl < 20 || pkt.len() < ihl {
        return Err(ParseError::Malformed);
    }
    let total_len = u16::from_be_bytes([pkt[2], pkt[3]]);
    if (total_len as usize) < ihl || total_len as usize > pkt.len() {
        return Err(ParseError::Malformed);
    }
    let proto = pkt[9];
    let frag_offset = u16::from_be_bytes([pkt[6], pkt[7]]) & 0x1fff;
    let ports = if matches!(proto, 6 | 17) && frag_offset == 0 && pkt.len() >= ihl + 4 {
        (u16::from_be_bytes([pkt[ihl], pkt[ihl + 1]]), u16::from_be_bytes([pkt[ihl + 2], pkt[ihl + 3]]))
    } else {
        (0, 0)
    };
    Ok(Ipv4Info {
        src: [pkt[12], pkt[13], pkt[14], pkt[15]],
        dst: [pkt[16], pkt[17], pkt[18], pkt[19]],
        tos: pkt[1],
        proto,
        total_len,
        ports,
    })
}

/// Set the ECN field to CE (0b11) and patch the header checksum incrementally.
pub fn mark_ce(pkt: &mut [u8]) {
    let old = u16::from_be_bytes([pkt[0], pkt[1]]);
    pkt[1] |= 0b11;
    let new = u16::from_be_bytes([pkt[0], pkt[1]]);
    // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m')
    let hc = u16::from_be_bytes([pkt[10], pkt[11]]);
    let mut sum = (!hc) as u32 + (!old) as u32 + new as u32;
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let hc = !(sum as u16);
    pkt[10..12].copy_from_slice(&hc.to_be_bytes());
}

/// The IPv4 header checksum over `header` (the checksum field included: 0 when valid).
pub fn header_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header.chunks(2).map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32).sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
pub(crate) fn test_packet(src: [u8; 4], dst: [u8; 4], tos: u8, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[1] = tos;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    p[20..22].copy_from_slice(&5000u16.to_be_bytes());
    p[22..24].copy_from_slice(&6000u16.to_be_bytes());
    let c = header_checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fields_and_maps_dscp_to_queue() {
        // gradwire's tos_byte(priority 2, ect) = CS5 | ECT(0)
        let tos = ((7 - 2) << 3) << 2 | 0b10;
        let p = test_packet([10, 0, 0, 1], [10, 0, 0, 2], tos, 100);
        let info = parse(&p).unwrap();
        assert_eq!((info.priority(), info.ect(), info.total_len, info.ports), (2, true, 100, (5000, 6000)));
        assert_eq!(parse(&test_packet([1; 4], [2; 4], 0, 40)).unwrap().priority(), 7);
    }

    #[test]
    fn rejects_non_ipv4_and_bad_lengths() {
        assert_eq!(parse(&[0x60; 40]), Err(ParseError::NotIpv4));
        assert_eq!(parse(&[]), Err(ParseError::NotIpv4));
        let mut p = test_packet([1; 4], [2; 4], 0, 60);
        p[2..4].copy_from_slice(&200u16.to_be_bytes());
        assert_eq!(parse(&p), Err(ParseError::Malformed));
        assert_eq!(parse(&p[..10]), Err(ParseError::Malformed));
    }

    #[test]
    fn ce_mark_keeps_the_checksum_valid() {
        for tos in [0b10u8, 0b01, 0xb8 | 0b10, 0xfe] {
            let mut p = test_packet([10, 1, 2, 3], [10, 1, 2, 4], tos, 1500);
            assert_eq!(header_checksum(&p[..20]), 0);
            mark_ce(&mut p);
            assert_eq!(p[1] & 0b11, 0b11);
            assert_eq!(p[1] >> 2, tos >> 2, "DSCP unchanged");
            assert_eq!(header_checksum(&p[..20]), 0, "tos {tos:#x}");
        }
    }
}
