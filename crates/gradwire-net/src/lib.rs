//! gradwire-net: the real runtime.
//!
//! Runs the sans-IO endpoints of `gradwire-core` (every registered transport with a wire
//! code: DLCP, LTP) and its collective schedules over Linux sockets: data on UDP (batched:
//! GSO sends, GRO/recvmmsg receives), control on one TCP connection per peer pair. See
//! `docs/ARCHITECTURE.md` ("The runtime").
//!
//! Layers, bottom up:
//! - [`rendezvous`]: torchrun-style job formation (`MASTER_ADDR`, `MASTER_PORT`, `RANK`,
//!   `WORLD_SIZE`, a job token) into a [`rendezvous::Mesh`] of control connections.
//! - [`udp`]: batched datagram I/O; [`tx`]: outgoing batches and the send thread;
//!   [`control`]: framed TCP control links; [`descriptor`]: the call descriptors ranks
//!   check against each other.
//! - [`endpoint`]: one end of a transfer, a `Box<dyn Sender>` or `Box<dyn Receiver>` from
//!   the core's transport registry, and the runtime's knobs.
//! - [`job`]: one collective call at one rank (buffer, schedule progress, report).
//! - [`line_rate`]: the interface speed DLCP starts at (as the MSS comes from the MTU).
//! - [`inbound`]: what a datagram must pass before its bytes go anywhere.
//! - [`engine`]: the event loop thread; [`inject`]: loss/delay testing hooks.
//! - [`algorithms`]: which schedule a call runs; [`comm`]: the public [`Communicator`].

pub mod algorithms;
pub mod auth;
pub mod comm;
pub mod control;
pub mod descriptor;
pub mod endpoint;
pub mod engine;
pub mod error;
pub mod inbound;
pub mod inject;
pub mod job;
pub mod line_rate;
pub mod rendezvous;
mod tx;
pub mod udp;

pub use algorithms::{Algorithm, CallKind, CollectiveConfig};
pub use comm::{Communicator, Element, Gate, Pending};
pub use engine::{Counters, EngineConfig};
pub use error::NetError;
pub use job::{Bubble, Dtype, RawBuffer, Report};
pub use rendezvous::{rendezvous, Mesh, PeerInfo, RendezvousConfig};
