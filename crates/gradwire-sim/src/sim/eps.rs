//! Where the simulator keeps a flow's two endpoints and its per-endpoint driver state.
//!
//! Everything a host touches per packet for one flow sits in one cache line: both boxed
//! endpoints, their armed timers, hosts, NIC classes and ready flags. (Separate arrays per
//! field cost one cache miss each per packet.)

use gradwire_core::time::Time;
use gradwire_core::transport::Endpoint;

/// Driver state of one endpoint.
pub(super) struct EpSlot {
    pub endpoint: Option<Box<dyn Endpoint>>,
    /// The deadline a `Timer` event is scheduled for, `Time::MAX` if none.
    pub timer_at: Time,
    pub host: u32,
    /// NIC scheduling class (0 = served first).
    pub class: u8,
    /// Queued in its host's ready list.
    pub in_ready: bool,
}

/// Endpoint `2f` is flow f's sender (`side` 0), `2f + 1` its receiver (`side` 1).
#[repr(align(64))]
pub(super) struct EndpointPair(pub [EpSlot; 2]);

impl EndpointPair {
    pub fn new(src: u32, dst: u32) -> Self {
        let slot = |host| EpSlot { endpoint: None, timer_at: Time::MAX, host, class: 0, in_ready: false };
        EndpointPair([slot(src), slot(dst)])
    }
}

/// Endpoint `ep`'s slot in `eps`.
#[inline]
pub(super) fn slot_mut(eps: &mut [EndpointPair], ep: u32) -> &mut EpSlot {
    &mut eps[(ep / 2) as usize].0[(ep % 2) as usize]
}
