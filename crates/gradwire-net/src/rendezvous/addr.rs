//! Address exchange: the address a rank advertises to its peers, and the segment size the
//! path MTU allows.
//!
//! # Segment size
//! Sender and receiver of a transfer must cut it into the same segments, so the job agrees
//! on one payload size per datagram (the mss) here. Given explicitly, every rank must give
//! the same value (a rank that differs is refused). Otherwise rank 0 takes it from the
//! path MTU, like TCP's MSS: the smallest MTU of the routes between rank 0 and the others
//! (the kernel's `IP_MTU` of each rendezvous connection, both ends), less the IP, UDP and
//! gradwire headers. On one host that is loopback's 64 KiB; across a fabric with
//! 1500-byte frames it is the usual 1440.

use std::net::{IpAddr, SocketAddr, TcpStream};

use super::*;

/// The kernel's path MTU for a connected socket (IPv4 `IP_MTU`); 1500 when it cannot say.
pub(super) fn path_mtu(s: &TcpStream) -> u32 {
    use nix::sys::socket::{getsockopt, sockopt};
    match s.peer_addr() {
        Ok(SocketAddr::V4(_)) => getsockopt(s, sockopt::IpMtu).ok().filter(|&m| m > 0).map_or(1500, |m| m as u32),
        _ => 1500,
    }
}

/// The payload that fills a `mtu`-byte packet: less the IP header (20 or 40 bytes), UDP's
/// 8 and gradwire's; within [`MIN_MSS`]..=[`MAX_MSS`].
pub fn mss_for_mtu(mtu: u32, ip: IpAddr) -> u32 {
    let ip_header = if ip.is_ipv4() { 20 } else { 40 };
    mtu.saturating_sub(ip_header + 8 + gradwire_core::wire::HEADER_LEN as u32).clamp(MIN_MSS, MAX_MSS)
}

pub(super) fn with_ip(addr: SocketAddr, ip: IpAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        SocketAddr::new(ip, addr.port())
    } else {
        addr
    }
}
