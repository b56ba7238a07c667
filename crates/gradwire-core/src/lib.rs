#![warn(missing_docs)]
//! gradwire-core: every gradwire mechanism as a sans-IO state machine.
//!
//! Nothing in this crate owns a socket, a clock or a thread. A state machine is fed
//! events (`now`, a received [`Packet`], a fired timer) and answers with actions
//! (packets to send via `poll_transmit`, its next deadline via `poll_timeout`, and
//! application events via `poll_event`). The simulator (`gradwire-sim`), the real
//! socket runtime and the emulated testbed all drive the same code.

pub mod cc;
pub mod collective;
pub mod packet;
pub mod prefetch;
pub mod sched;
pub mod switch;
pub mod tensor;
#[cfg(test)]
pub(crate) mod testkit;
pub mod time;
pub mod transport;
pub mod wire;

pub use packet::{CtrlOp, Ecn, FlowId, HostId, Packet, PacketKind};
pub use time::Time;
