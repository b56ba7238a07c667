//! Job formation, torchrun style.
//!
//! Every process of a job knows `MASTER_ADDR`, `MASTER_PORT`, its `RANK`, the
//! `WORLD_SIZE` and the job token (`GRADWIRE_TOKEN`). Rank 0 listens on
//! `MASTER_ADDR:MASTER_PORT`; every other rank connects to it (retrying until the
//! timeout, so rank 0 may start last) and says Hello. Rank 0 checks each Hello (protocol
//! version, token, world size, rank range, duplicates) and refuses a wrong process with a
//! reason that tells it what to fix, while it keeps waiting for the right one. When all
//! ranks are in, rank 0 picks a random non-zero session id and sends everyone a Welcome
//! with the session and the peer table. The ranks then build a full mesh of TCP control
//! connections (one per pair; pairs with rank 0 reuse the rendezvous connection, for the
//! others the higher rank connects to the lower rank's listener and proves session and
//! rank), report Ready to rank 0, and return when rank 0 says Go.
//!
//! Every step has the configured timeout as its deadline (steps that wait for another
//! rank's verdict get a short grace, 0.25 s + 5%, so that the rank that knows the reason
//! reports it first); a step that does not finish gives [`NetError::Timeout`] naming what
//! it waited for, and a rank that fails after the Welcome tells rank 0, which passes the
//! reason on to the others, so no rank hangs.
//!
//! Addresses: a rank advertises the local address of its connection to rank 0 (for its
//! control listener, and for its UDP socket when that is bound to `0.0.0.0` / `::`), so
//! the addresses are reachable by the peers even across network namespaces.
//!
//!
//! Files: `frame.rs` (the frames and their byte layout), `stream.rs` (frame I/O under
//! deadlines), `addr.rs` (advertised addresses, segment size from the path MTU),
//! `master.rs` (rank 0), `joiner.rs` (ranks 1..n), `mesh.rs` (the control mesh),
//! `config.rs` (how to find the job).
//!
//! # Segment size
//! Sender and receiver of a transfer must cut it into the same segments, so the job agrees
//! on one payload size per datagram (the mss) here. Given explicitly, every rank must give
//! the same value (a rank that differs is refused). Otherwise rank 0 takes it from the
//! path MTU, like TCP's MSS: the smallest MTU of the routes between rank 0 and the others
//! (the kernel's `IP_MTU` of each rendezvous connection, both ends), less the IP, UDP and
//! gradwire headers. On one host that is loopback's 64 KiB; across a fabric with
//! 1500-byte frames it is the usual 1440.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::NetError;

mod addr;
mod config;
mod frame;
mod joiner;
mod master;
mod mesh;
mod stream;
#[cfg(test)]
mod tests;

pub use addr::mss_for_mtu;
pub use config::RendezvousConfig;
pub use frame::fuzz_decode_frame;

/// `GRADWIRE_RENDEZVOUS_TIMEOUT` when it is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Version of the rendezvous frames; a process speaking another version is refused.
pub const PROTOCOL_VERSION: u16 = 3;

/// The segment size when nothing says otherwise (a 1500-byte IPv4 packet, or a
/// single-rank job, which sends nothing).
pub const DEFAULT_MSS: u32 = 1440;
/// The largest payload whose datagram (payload + gradwire header) fits UDP's 65507 bytes.
pub const MAX_MSS: u32 = 65_472;
/// The smallest accepted segment.
pub const MIN_MSS: u32 = 64;
/// Largest frame accepted from a peer of the job (the Welcome of the largest world fits).
pub const MAX_FRAME: usize = 1 << 20;
/// Largest frame accepted from a connection that has not proven anything yet.
pub(super) const MAX_HELLO_FRAME: usize = 8 << 10;
/// Longest job token.
pub const MAX_TOKEN_LEN: usize = 1024;
/// Largest `WORLD_SIZE`.
pub const MAX_WORLD_SIZE: u32 = 16384;
pub(super) const MAGIC: [u8; 8] = *b"GWRENDZV";
/// How long an unproven connection may take to send its hello.
pub(super) const HELLO_READ_LIMIT: Duration = Duration::from_secs(5);
/// Connections whose hello rank 0 reads at once (a thread each); more wait in the
/// listen backlog, so silent connections cost at most this many threads for
/// `HELLO_READ_LIMIT` each.
pub(super) const MAX_HELLO_READERS: usize = 64;

/// Extra time for a step whose outcome another rank decides under its own deadline
/// (a joiner waiting for rank 0's verdict, rank 0 waiting for the joiners' mesh), so
/// that the rank that knows the reason reports it before the waiting one gives up.
fn grace(timeout: Duration) -> Duration {
    Duration::from_millis(250) + timeout / 20
}

/// A peer as the mesh knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    pub rank: u32,
    /// Where the peer receives UDP data.
    pub udp_addr: SocketAddr,
}

/// A formed job: every rank's data address and one TCP control stream per peer.
#[derive(Debug)]
pub struct Mesh {
    pub rank: u32,
    pub world_size: u32,
    /// Random per job, chosen by rank 0; stamped on every datagram.
    pub session: u64,
    /// Indexed by rank (this rank's own entry included).
    pub peers: Vec<PeerInfo>,
    /// Indexed by rank; `None` at this rank's own index. Blocking streams, `TCP_NODELAY`.
    pub control: Vec<Option<TcpStream>>,
    /// The job's segment size (payload bytes per datagram), the same on every rank.
    pub mss: u32,
}

/// Form the job: returns when every rank is connected to every other rank.
///
/// `udp_addr` is where this rank receives UDP data; if its IP is unspecified
/// (`0.0.0.0` / `::`) the rank advertises the local IP of its connection to rank 0 with
/// that port instead. Each step (reaching rank 0, being admitted, connecting the mesh,
/// the final barrier; for rank 0: all ranks joining) may take `cfg.timeout`.
pub fn rendezvous(cfg: &RendezvousConfig, udp_addr: SocketAddr) -> Result<Mesh, NetError> {
    cfg.validate()?;
    let start = Instant::now();
    if cfg.rank == 0 {
        master::form(cfg, udp_addr, start)
    } else {
        joiner::join(cfg, udp_addr, start)
    }
}

pub(super) fn ranks_text(ranks: &[u32]) -> String {
    let shown: Vec<String> = ranks.iter().take(16).map(u32::to_string).collect();
    let more = if ranks.len() > 16 { format!(" (and {} more)", ranks.len() - 16) } else { String::new() };
    let word = if ranks.len() == 1 { "rank" } else { "ranks" };
    format!("{word} {}{more}", shown.join(", "))
}
