//! Job formation, torchrun style. (Being written: see the net-rendezvous branch.)

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How to find the job. `from_env` reads `MASTER_ADDR`, `MASTER_PORT`, `RANK`,
/// `WORLD_SIZE` and `GRADWIRE_TOKEN`.
#[derive(Clone, Debug)]
pub struct RendezvousConfig {
    pub master_addr: String,
    pub master_port: u16,
    pub rank: u32,
    pub world_size: u32,
    /// Shared secret of the job; a process with another token is refused.
    pub token: String,
    /// Give up (with `NetError::Timeout`) if the job is not formed within this time.
    pub timeout: Duration,
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
}

/// Forms the job. (Implemented on the net-rendezvous branch.)
pub fn rendezvous(_cfg: &RendezvousConfig, _udp_addr: SocketAddr) -> Result<Mesh, crate::NetError> {
    Err(crate::NetError::Config("rendezvous is not implemented in this build yet".into()))
}
