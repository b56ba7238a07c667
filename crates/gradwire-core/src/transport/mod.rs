//! Transport endpoints as sans-IO state machines (quinn-proto style).
//!
//! The driver (simulator host, socket runtime) owns time and I/O. It calls
//! `handle_packet` / `handle_timeout` with `now`, then drains `poll_transmit` (packets the
//! endpoint wants on the wire right now), `poll_event` (what the application learns) and
//! re-arms its timer from `poll_timeout`. An endpoint never reads a clock.

mod ctrl;
mod received;
pub mod dlcp;
pub mod ltp;
pub mod pfabric;
pub mod pias;
pub mod tcp;

use crate::packet::Packet;
use crate::time::Time;

/// What an endpoint tells the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointEvent {
    /// Receiver side: the transfer is complete (every byte, or the loss bound met).
    Delivered { bytes: u64 },
    /// Sender side: everything is acknowledged; the endpoint has nothing left to do.
    SenderDone,
}

/// Counters every endpoint keeps; they end up in `flows.csv`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndpointStats {
    pub packets_sent: u64,
    pub retransmits: u64,
    pub timeouts: u64,
}

pub trait Endpoint {
    /// A packet of this endpoint's flow arrived.
    fn handle_packet(&mut self, now: Time, pkt: &Packet);
    /// The deadline last returned by `poll_timeout` has passed (or, spuriously, not yet:
    /// an endpoint must tolerate being woken early and re-check its own deadline).
    fn handle_timeout(&mut self, now: Time);
    /// Next packet to put on the wire now, if any.
    fn poll_transmit(&mut self, now: Time) -> Option<Packet>;
    /// Earliest time the endpoint wants `handle_timeout`; `None` when no timer is armed.
    fn poll_timeout(&self) -> Option<Time>;
    /// `poll_timeout` without the pacing slot (when the next packet may leave): the
    /// earliest time `handle_timeout` has work. A driver that keeps asking
    /// `poll_transmit` anyway (the simulator's NIC, for an endpoint in its ready list)
    /// need not wake up for pacing alone.
    fn poll_timeout_unpaced(&self) -> Option<Time> {
        self.poll_timeout()
    }
    /// Next application event, if any.
    fn poll_event(&mut self) -> Option<EndpointEvent>;
    fn stats(&self) -> EndpointStats;
}
