//! The line rate DLCP starts at ("equal to link bandwidth", dlcp.md §3.2.1; also LTP's
//! first bottleneck estimate), found as the MSS is: from the path the job's data takes.
//!
//! The interface is the one the kernel routes to a peer through (a connected UDP socket's
//! local address, matched against the interfaces' addresses); its speed is what the kernel
//! reports in `/sys/class/net/<if>/speed`. Loopback has no wire and no speed: there the
//! pacer only has to stay above what a core can copy (25–40 Gbit/s on the test machine),
//! and 25 Gbit/s held a 4-rank allreduce ~10 % below 100 Gbit/s (docs/performance.md).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};

/// Pacing rate on loopback, where there is no link.
pub const LOOPBACK_BPS: u64 = 100_000_000_000;
/// When the interface reports no speed (virtual devices, or none found).
pub const FALLBACK_BPS: u64 = 25_000_000_000;

/// Where a line rate came from, for the caller to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Loopback,
    /// The named interface's reported speed.
    Interface(String),
    /// Nothing usable found; [`FALLBACK_BPS`].
    Fallback,
}

/// The line rate toward `peer` (bit/s) and where it came from.
pub fn line_rate_to(peer: SocketAddr) -> (u64, Source) {
    let Some(local) = local_ip_toward(peer) else { return (FALLBACK_BPS, Source::Fallback) };
    if local.is_loopback() {
        return (LOOPBACK_BPS, Source::Loopback);
    }
    let Some(name) = interface_of(local) else { return (FALLBACK_BPS, Source::Fallback) };
    if name == "lo" {
        return (LOOPBACK_BPS, Source::Loopback);
    }
    match interface_speed_bps(&name) {
        Some(bps) => (bps, Source::Interface(name)),
        None => (FALLBACK_BPS, Source::Fallback),
    }
}

/// The local address the kernel would send from to reach `peer` (no packet is sent).
fn local_ip_toward(peer: SocketAddr) -> Option<IpAddr> {
    let any = match peer {
        SocketAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        SocketAddr::V6(_) => SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), 0),
    };
    let s = UdpSocket::bind(any).ok()?;
    s.connect(peer).ok()?;
    Some(s.local_addr().ok()?.ip())
}

fn interface_of(ip: IpAddr) -> Option<String> {
    nix::ifaddrs::getifaddrs().ok()?.find_map(|ifa| {
        let a = ifa.address?;
        let found = match ip {
            IpAddr::V4(v4) => a.as_sockaddr_in().is_some_and(|s| s.ip() == v4),
            IpAddr::V6(v6) => a.as_sockaddr_in6().is_some_and(|s| s.ip() == v6),
        };
        found.then_some(ifa.interface_name)
    })
}

/// The kernel's speed for `name` in bit/s; `None` when it reports none (-1, or no file).
fn interface_speed_bps(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/speed")).ok()?;
    let mbps: i64 = text.trim().parse().ok()?;
    (mbps > 0).then(|| mbps as u64 * 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_paces_at_the_loopback_rate() {
        let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(line_rate_to(peer), (LOOPBACK_BPS, Source::Loopback));
    }

    #[test]
    fn an_interface_without_a_speed_gives_none() {
        assert_eq!(interface_speed_bps("no-such-interface"), None);
    }

    #[test]
    fn the_loopback_address_belongs_to_lo() {
        assert_eq!(interface_of(IpAddr::V4(Ipv4Addr::LOCALHOST)).as_deref(), Some("lo"));
    }
}
