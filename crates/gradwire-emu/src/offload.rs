//! Segmentation offload on the TUN devices (IFF_VNET_HDR): the hosts' kernels hand the
//! switch TCP super-packets of up to 64 KB (TSO) and UDP ones (USO: a `UDP_SEGMENT` send,
//! the gradwire runtime's) and take merged ones back (as GRO would build them), so a
//! syscall and a pass through each kernel's stack carry many packets. The switch still
//! queues, marks, drops and shapes every 1500-byte packet on its own: [`split_tso`] and
//! [`split_uso`] cut a super-packet into the packets the kernel would have sent, and
//! [`Coalescer`] merges only packets that arrive back to back, in order, with identical
//! headers (ECN bits included), exactly what GRO would merge.
//!
//! Checksums: the kernels leave TCP/UDP checksums partial (`NEEDS_CSUM`) and the switch
//! passes the flag on, as a virtio NIC does; the receiving kernel trusts it.

use std::io::IoSlice;

pub const VNET_HDR_LEN: usize = 10;
pub const F_NEEDS_CSUM: u8 = 1;
pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_UDP_L4: u8 = 5;
/// Most datagrams in one merged UDP super-packet (the kernel's `UDP_MAX_SEGMENTS` is 64
/// on older kernels, 128 on newer).
const MAX_UDP_SEGMENTS: usize = 64;
/// Set with a TCP type when the super-packet carries CWR (TUN_F_TSO_ECN).
pub const GSO_ECN: u8 = 0x80;
/// Largest super-packet the merger builds (IPv4 total length is 16 bits).
const MAX_MERGED: usize = 65_000;

/// `struct virtio_net_hdr` (little-endian on x86 and with TUNSETVNETLE unset).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    pub fn parse(b: &[u8]) -> VnetHdr {
        let u = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        VnetHdr { flags: b[0], gso_type: b[1], hdr_len: u(2), gso_size: u(4), csum_start: u(6), csum_offset: u(8) }
    }

    pub fn write(&self, b: &mut [u8]) {
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
    }
}

fn set_ip_len_and_checksum(ip: &mut [u8], total: usize) {
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip[10..12].copy_from_slice(&[0, 0]);
    let ihl = (ip[0] & 0x0f) as usize * 4;
    let c = crate::ipv4::header_checksum(&ip[..ihl]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
}

/// Header lengths of an IPv4/TCP packet: (IP header, IP + TCP headers).
fn tcp_headers(pkt: &[u8]) -> Option<(usize, usize)> {
    if pkt.len() < 20 || pkt[0] >> 4 != 4 || pkt[9] != 6 {
        return None;
    }
    let ihl = (pkt[0] & 0x0f) as usize * 4;
    let doff = (*pkt.get(ihl + 12)? >> 4) as usize * 4;
    (ihl >= 20 && doff >= 20 && ihl + doff <= pkt.len()).then_some((ihl, ihl + doff))
}

/// The IP header length of an unfragmented IPv4/UDP packet.
fn udp_ihl(pkt: &[u8]) -> Option<usize> {
    if pkt.len() < 28 || pkt[0] >> 4 != 4 || pkt[9] != 17 || u16::from_be_bytes([pkt[6], pkt[7]]) & 0x3fff != 0 {
        return None;
    }
    let ihl = (pkt[0] & 0x0f) as usize * 4;
    (ihl >= 20 && ihl + 8 <= pkt.len()).then_some(ihl)
}

/// A partial UDP checksum (the pseudo-header's sum, which covers the UDP length) moved from
/// UDP length `old` to `new`, in one's complement as the kernel's `__udp_gso_segment` does.
fn adjust_partial_csum(check: u16, old: u16, new: u16) -> u16 {
    let add = |a: u16, b: u16| {
        let s = a as u32 + b as u32;
        ((s & 0xffff) + (s >> 16)) as u16
    };
    add(add(check, !old), new)
}

/// Set a UDP packet's length field (and its partial checksum with it).
fn set_udp_len(pkt: &mut [u8], ihl: usize, len: usize) {
    let old = u16::from_be_bytes([pkt[ihl + 4], pkt[ihl + 5]]);
    let check = u16::from_be_bytes([pkt[ihl + 6], pkt[ihl + 7]]);
    let new = len as u16;
    pkt[ihl + 4..ihl + 6].copy_from_slice(&new.to_be_bytes());
    pkt[ihl + 6..ihl + 8].copy_from_slice(&adjust_partial_csum(check, old, new).to_be_bytes());
}

/// Cut `pkt`, whose headers are its first `hl` bytes, into packets of `gso_size` payload
/// bytes (the last one shorter): each gets the headers, the next IP id, its IP length and
/// header checksum, then `fix(packet, index, count)` for the transport header, and goes to
/// `emit` with its checksum still partial.
fn split(
    pkt: &[u8],
    hl: usize,
    gso_size: usize,
    scratch: &mut Vec<u8>,
    mut fix: impl FnMut(&mut Vec<u8>, usize, usize),
    mut emit: impl FnMut(&[u8]),
) {
    let payload = &pkt[hl..];
    let id0 = u16::from_be_bytes([pkt[4], pkt[5]]);
    let n = payload.len().div_ceil(gso_size).max(1);
    for (i, chunk) in payload.chunks(gso_size).enumerate() {
        scratch.clear();
        scratch.extend_from_slice(&pkt[..hl]);
        scratch.extend_from_slice(chunk);
        let total = scratch.len();
        scratch[4..6].copy_from_slice(&id0.wrapping_add(i as u16).to_be_bytes());
        set_ip_len_and_checksum(scratch, total);
        fix(scratch, i, n);
        emit(scratch);
    }
}

/// Cut a UDP super-packet (partial checksum) into datagrams of `gso_size` payload bytes,
/// the last one shorter; `emit(datagram)` gets each, its checksum still partial. Returns
/// false (and emits nothing) if `pkt` is not unfragmented IPv4/UDP.
pub fn split_uso(pkt: &[u8], gso_size: usize, scratch: &mut Vec<u8>, emit: impl FnMut(&[u8])) -> bool {
    let Some(ihl) = udp_ihl(pkt) else {
        return false;
    };
    if gso_size == 0 {
        return false;
    }
    split(
        pkt,
        ihl + 8,
        gso_size,
        scratch,
        |d, _, _| {
            let udp_len = d.len() - ihl;
            set_udp_len(d, ihl, udp_len)
        },
        emit,
    );
    true
}

/// Cut a TCP super-packet into `gso_size` segments; `emit(segment)` gets each one with the
/// checksum still partial. Returns false (and emits nothing) if `pkt` is not IPv4/TCP.
pub fn split_tso(pkt: &[u8], gso_size: usize, scratch: &mut Vec<u8>, emit: impl FnMut(&[u8])) -> bool {
    let Some((ihl, hl)) = tcp_headers(pkt) else {
        return false;
    };
    if gso_size == 0 {
        return false;
    }
    let seq0 = u32::from_be_bytes([pkt[ihl + 4], pkt[ihl + 5], pkt[ihl + 6], pkt[ihl + 7]]);
    let flags = pkt[ihl + 13];
    let fix = |seg: &mut Vec<u8>, i: usize, n: usize| {
        let seq = seq0.wrapping_add((i * gso_size) as u32);
        seg[ihl + 4..ihl + 8].copy_from_slice(&seq.to_be_bytes());
        // FIN and PSH belong to the last segment, CWR to the first
        let mut f = flags;
        if i + 1 < n {
            f &= !(0x01 | 0x08);
        }
        if i > 0 {
            f &= !0x80;
        }
        seg[ihl + 13] = f;
    };
    split(pkt, hl, gso_size, scratch, fix, emit);
    true
}

/// The partial-checksum header a segment of an offloaded packet is written with.
pub fn partial_csum_hdr(pkt: &[u8]) -> VnetHdr {
    let ihl = (pkt[0] & 0x0f) as usize * 4;
    let offset = match pkt[9] {
        6 => 16,
        17 => 6,
        _ => return VnetHdr::default(),
    };
    VnetHdr { flags: F_NEEDS_CSUM, csum_start: ihl as u16, csum_offset: offset, ..VnetHdr::default() }
}

/// Packets delivered to one host in one pass of the event loop, merged where GRO would.
#[derive(Default)]
pub struct Coalescer {
    /// Copies of the packets, back to back; `(start, len, vnet header)` each.
    arena: Vec<u8>,
    pkts: Vec<(usize, usize, VnetHdr)>,
    merged_header: Vec<u8>,
}

impl Coalescer {
    pub fn push(&mut self, vnet: VnetHdr, pkt: &[u8]) {
        self.pkts.push((self.arena.len(), pkt.len(), vnet));
        self.arena.extend_from_slice(pkt);
    }

    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }

    /// Hand every packet or merged run to `write` as (virtio-net header, IP packet parts);
    /// returns how many packets went out. Empties the coalescer.
    pub fn flush(&mut self, mut write: impl FnMut(&[IoSlice<'_>])) -> u64 {
        let mut i = 0;
        let mut vh = [0u8; VNET_HDR_LEN];
        let count = self.pkts.len() as u64;
        while i < self.pkts.len() {
            let j = self.run_end(i);
            let (start, len, vnet) = self.pkts[i];
            let first = &self.arena[start..start + len];
            if j == i + 1 {
                vnet.write(&mut vh);
                write(&[IoSlice::new(&vh), IoSlice::new(first)]);
            } else {
                let (ihl, hl, gso_type, csum_offset) = match udp_ihl(first) {
                    Some(ihl) => (ihl, ihl + 8, GSO_UDP_L4, 6),
                    None => {
                        let (ihl, hl) = tcp_headers(first).expect("runs are TCP or UDP");
                        // no GSO_ECN: that flag is about CWR, which never starts a merged run
                        (ihl, hl, GSO_TCPV4, 16)
                    }
                };
                let total: usize = hl + self.pkts[i..j].iter().map(|&(_, l, _)| l - hl).sum::<usize>();
                self.merged_header.clear();
                self.merged_header.extend_from_slice(&first[..hl]);
                set_ip_len_and_checksum(&mut self.merged_header, total);
                if gso_type == GSO_UDP_L4 {
                    set_udp_len(&mut self.merged_header, ihl, total - ihl);
                } else {
                    // the merged packet carries the last segment's PSH/FIN, as GRO's does
                    let (ls, _, _) = self.pkts[j - 1];
                    self.merged_header[ihl + 13] |= self.arena[ls + ihl + 13] & 0x09;
                }
                let h = VnetHdr {
                    flags: F_NEEDS_CSUM,
                    gso_type,
                    hdr_len: hl as u16,
                    gso_size: (len - hl) as u16,
                    csum_start: ihl as u16,
                    csum_offset,
                };
                h.write(&mut vh);
                let mut iov = Vec::with_capacity(2 + j - i);
                iov.push(IoSlice::new(&vh));
                iov.push(IoSlice::new(&self.merged_header));
                for &(s, l, _) in &self.pkts[i..j] {
                    iov.push(IoSlice::new(&self.arena[s + hl..s + l]));
                }
                write(&iov);
            }
            i = j;
        }
        self.arena.clear();
        self.pkts.clear();
        count
    }

    /// End of the mergeable run starting at `i`: the same flow, in sequence, identical
    /// headers but for IP id/length/checksum and TCP sequence/PSH/checksum, equal sizes
    /// except the last, no SYN/FIN/RST/URG/CWR.
    fn run_end(&self, i: usize) -> usize {
        let (s0, l0, v0) = self.pkts[i];
        let first = &self.arena[s0..s0 + l0];
        if let Some(ihl) = udp_ihl(first) {
            return self.udp_run_end(i, ihl, v0);
        }
        let Some((ihl, hl)) = tcp_headers(first) else {
            return i + 1;
        };
        let seg = l0 - hl;
        if seg == 0 || first[ihl + 13] & !(0x10 | 0x08) != 0 || first[ihl + 13] & 0x08 != 0 {
            return i + 1;
        }
        let seq_of = |p: &[u8]| u32::from_be_bytes([p[ihl + 4], p[ihl + 5], p[ihl + 6], p[ihl + 7]]);
        let mut next_seq = seq_of(first).wrapping_add(seg as u32);
        let mut total = l0;
        let mut j = i + 1;
        while j < self.pkts.len() {
            let (s, l, _) = self.pkts[j];
            let p = &self.arena[s..s + l];
            if tcp_headers(p) != Some((ihl, hl)) || l - hl > seg || l == hl || total + (l - hl) > MAX_MERGED {
                break;
            }
            let same = p[..2] == first[..2]
                && p[6..10] == first[6..10]
                && p[12..20] == first[12..20]
                && p[ihl..ihl + 4] == first[ihl..ihl + 4]
                && p[ihl + 8..ihl + 13] == first[ihl + 8..ihl + 13]
                && p[ihl + 14..ihl + 16] == first[ihl + 14..ihl + 16]
                && p[ihl + 18..hl] == first[ihl + 18..hl];
            let flags_ok = p[ihl + 13] & !(0x10 | 0x08) == 0;
            if !same || !flags_ok || seq_of(p) != next_seq {
                break;
            }
            next_seq = next_seq.wrapping_add((l - hl) as u32);
            total += l - hl;
            j += 1;
            // a short segment or a PSH ends the run
            if l - hl < seg || p[ihl + 13] & 0x08 != 0 {
                break;
            }
        }
        j
    }
}

impl Coalescer {
    /// End of the mergeable UDP run starting at `i` (what UDP GRO merges): the same flow,
    /// identical headers but for IP id/length/checksum and UDP length/checksum, partial
    /// checksums, equal payload sizes except a shorter last one, at most
    /// [`MAX_UDP_SEGMENTS`].
    fn udp_run_end(&self, i: usize, ihl: usize, v0: VnetHdr) -> usize {
        let (s0, l0, _) = self.pkts[i];
        let first = &self.arena[s0..s0 + l0];
        let hl = ihl + 8;
        let seg = l0 - hl;
        if seg == 0 || v0.flags & F_NEEDS_CSUM == 0 {
            return i + 1;
        }
        let mut total = l0;
        let mut j = i + 1;
        while j < self.pkts.len() && j - i < MAX_UDP_SEGMENTS {
            let (s, l, v) = self.pkts[j];
            let p = &self.arena[s..s + l];
            if udp_ihl(p) != Some(ihl) || l - hl > seg || l == hl || total + (l - hl) > MAX_MERGED {
                break;
            }
            let same = p[..2] == first[..2]
                && p[6..10] == first[6..10]
                && p[12..ihl + 4] == first[12..ihl + 4]
                && v.flags & F_NEEDS_CSUM != 0;
            if !same {
                break;
            }
            total += l - hl;
            j += 1;
            if l - hl < seg {
                break;
            }
        }
        j
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `len` bytes of IPv4 (TTL 64, protocol `proto`) from 10.77.0.1 port 40000 to
    /// 10.77.0.2 port 5001; the caller fills in the rest and the lengths and checksums.
    fn ipv4_ports(len: usize, tos: u8, proto: u8) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[1] = tos;
        p[8] = 64;
        p[9] = proto;
        p[12..16].copy_from_slice(&[10, 77, 0, 1]);
        p[16..20].copy_from_slice(&[10, 77, 0, 2]);
        p[20..22].copy_from_slice(&40000u16.to_be_bytes());
        p[22..24].copy_from_slice(&5001u16.to_be_bytes());
        p
    }

    fn tcp_super(payload: usize, tos: u8, flags: u8) -> Vec<u8> {
        let mut p = ipv4_ports(20 + 32 + payload, tos, 6);
        p[24..28].copy_from_slice(&1000u32.to_be_bytes());
        p[32] = 8 << 4; // 32-byte TCP header (timestamps)
        p[33] = flags;
        p[34..36].copy_from_slice(&502u16.to_be_bytes());
        for (i, b) in p[52..].iter_mut().enumerate() {
            *b = i as u8;
        }
        let total = p.len();
        set_ip_len_and_checksum(&mut p, total);
        p
    }

    fn split(p: &[u8], mss: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        assert!(split_tso(p, mss, &mut Vec::new(), |s| out.push(s.to_vec())));
        out
    }

    #[test]
    fn split_makes_valid_packets_with_consecutive_sequence_numbers() {
        let sup = tcp_super(10_000, 0b10, 0x18); // ACK|PSH
        let segs = split(&sup, 1448);
        assert_eq!(segs.len(), 7);
        let mut seq = 1000u32;
        for (i, s) in segs.iter().enumerate() {
            let info = crate::ipv4::parse(s).unwrap();
            assert_eq!(info.total_len as usize, s.len());
            assert_eq!(crate::ipv4::header_checksum(&s[..20]), 0);
            assert_eq!(u32::from_be_bytes([s[24], s[25], s[26], s[27]]), seq);
            seq += (s.len() - 52) as u32;
            assert_eq!(s[33] & 0x08 != 0, i == 6, "PSH only on the last");
        }
        let joined: Vec<u8> = segs.iter().flat_map(|s| s[52..].to_vec()).collect();
        assert_eq!(joined, sup[52..].to_vec());
    }

    #[test]
    fn coalescer_rebuilds_the_super_packet_and_stops_at_differences() {
        let sup = tcp_super(10_000, 0b10, 0x18);
        let mut segs = split(&sup, 1448);
        // mark one segment CE: GRO would not merge across it
        segs[3][1] |= 0b11;
        let mut c = Coalescer::default();
        for s in &segs {
            c.push(partial_csum_hdr(s), s);
        }
        let mut writes: Vec<(VnetHdr, Vec<u8>)> = Vec::new();
        let n = c.flush(|iov| {
            let v = VnetHdr::parse(&iov[0]);
            writes.push((v, iov[1..].iter().flat_map(|s| s.to_vec()).collect()));
        });
        assert_eq!(n, 7);
        // [0,1,2] merged, [3] alone (CE), [4,5,6] merged
        assert_eq!(writes.len(), 3);
        assert_eq!(writes[0].0.gso_type, GSO_TCPV4);
        assert_eq!(writes[0].0.gso_size, 1448);
        assert_eq!(writes[1].0.gso_type, GSO_NONE);
        let (v, last) = &writes[2];
        assert_eq!(v.gso_type, GSO_TCPV4);
        assert_eq!(crate::ipv4::parse(last).unwrap().total_len as usize, last.len());
        assert_eq!(crate::ipv4::header_checksum(&last[..20]), 0);
        assert_eq!(last[33] & 0x08, 0x08, "the run's PSH survives");
        let payload: Vec<u8> = [&writes[0].1[52..], &writes[1].1[52..], &writes[2].1[52..]].concat();
        assert_eq!(payload, sup[52..].to_vec());
        assert!(c.is_empty());
    }

    fn udp_super(payload: usize, tos: u8) -> Vec<u8> {
        let mut p = ipv4_ports(28 + payload, tos, 17);
        p[6] = 0x40; // DF
        for (i, b) in p[28..].iter_mut().enumerate() {
            *b = (i * 7) as u8;
        }
        let total = p.len();
        set_ip_len_and_checksum(&mut p, total);
        p[24..26].copy_from_slice(&((total - 20) as u16).to_be_bytes());
        let check = partial_udp_csum(&p);
        p[26..28].copy_from_slice(&check.to_be_bytes());
        p
    }

    /// The partial checksum the kernel leaves in a UDP header: the pseudo-header's sum.
    fn partial_udp_csum(p: &[u8]) -> u16 {
        let words = [&p[12..20], &[0, 17][..], &p[24..26]].concat();
        let mut s: u32 = words.chunks(2).map(|w| u16::from_be_bytes([w[0], w[1]]) as u32).sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn uso_split_and_merge_round_trip_with_partial_checksums() {
        let sup = udp_super(3 * 1440 + 500, 0b10);
        let mut segs = Vec::new();
        assert!(split_uso(&sup, 1440, &mut Vec::new(), |s| segs.push(s.to_vec())));
        assert_eq!(segs.iter().map(|s| s.len() - 28).collect::<Vec<_>>(), vec![1440, 1440, 1440, 500]);
        for s in &segs {
            assert_eq!(crate::ipv4::parse(s).unwrap().total_len as usize, s.len());
            assert_eq!(crate::ipv4::header_checksum(&s[..20]), 0);
            assert_eq!(u16::from_be_bytes([s[24], s[25]]) as usize, s.len() - 20);
            assert_eq!(u16::from_be_bytes([s[26], s[27]]), partial_udp_csum(s), "partial checksum of the new length");
        }
        // a TCP super-packet's splitter refuses it, and the reverse
        assert!(!split_tso(&sup, 1440, &mut Vec::new(), |_| {}));
        assert!(!split_uso(&tcp_super(3000, 0, 0x10), 1440, &mut Vec::new(), |_| {}));
        // CE on the third datagram: [0, 1] merge, [2] alone, [3] alone (a run of one)
        segs[2][1] |= 0b11;
        let mut c = Coalescer::default();
        for s in &segs {
            c.push(partial_csum_hdr(s), s);
        }
        let mut writes: Vec<(VnetHdr, Vec<u8>)> = Vec::new();
        assert_eq!(
            c.flush(|iov| writes.push((VnetHdr::parse(&iov[0]), iov[1..].iter().flat_map(|s| s.to_vec()).collect()))),
            4
        );
        assert_eq!(writes.len(), 3);
        let (v, merged) = &writes[0];
        assert_eq!((v.gso_type, v.gso_size, v.hdr_len, v.csum_offset), (GSO_UDP_L4, 1440, 28, 6));
        assert_eq!(merged.len(), 28 + 2 * 1440);
        assert_eq!(crate::ipv4::header_checksum(&merged[..20]), 0);
        assert_eq!(u16::from_be_bytes([merged[24], merged[25]]) as usize, merged.len() - 20);
        assert_eq!(u16::from_be_bytes([merged[26], merged[27]]), partial_udp_csum(merged));
        let payload: Vec<u8> = writes.iter().flat_map(|w| w.1[28..].to_vec()).collect();
        assert_eq!(payload, sup[28..].to_vec());
        // unmerged: all four, in order, with the whole super-packet's payload
        let mut c = Coalescer::default();
        segs[2][1] = sup[1];
        for s in &segs {
            c.push(partial_csum_hdr(s), s);
        }
        let mut one = Vec::new();
        c.flush(|iov| one.push(iov[1..].iter().flat_map(|s| s.to_vec()).collect::<Vec<u8>>()));
        assert_eq!(one.len(), 1, "equal sizes and a shorter last one make one super-packet");
        assert_eq!(one[0], sup);
    }

    #[test]
    fn out_of_order_or_other_flows_are_not_merged() {
        let segs = split(&tcp_super(4344, 0, 0x10), 1448);
        let mut c = Coalescer::default();
        for i in [0, 2, 1] {
            c.push(partial_csum_hdr(&segs[i]), &segs[i]);
        }
        let mut writes = 0;
        c.flush(|_| writes += 1);
        assert_eq!(writes, 3);
    }
}
