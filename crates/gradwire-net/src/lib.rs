//! gradwire-net: the real runtime.
//!
//! Runs the sans-IO endpoints of `gradwire-core` (DLCP, LTP) and its collective schedules
//! over Linux sockets: data on UDP (batched: GSO sends, GRO/recvmmsg receives), control on
//! one TCP connection per peer pair. See `docs/ARCHITECTURE.md` ("net").
//!
//! Layers, bottom up:
//! - [`rendezvous`]: torchrun-style job formation (`MASTER_ADDR`, `MASTER_PORT`, `RANK`,
//!   `WORLD_SIZE`, a job token) into a [`rendezvous::Mesh`] of control connections.

pub mod error;
pub mod rendezvous;

pub use error::NetError;
pub use rendezvous::{rendezvous, Mesh, PeerInfo, RendezvousConfig};
