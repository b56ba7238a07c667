//! Where the simulator keeps a flow's two endpoints and its per-endpoint driver state.
//!
//! Everything a host touches per packet for one flow sits in one cache line: both boxed
//! endpoints, their armed timers, hosts, NIC classes and ready flags. (Separate arrays per
//! field cost one cache miss each per packet.)

use gradwire_core::time::Time;
use gradwire_core::transport::Endpoint;

use gradwire_core::prefetch;

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

/// Bytes of an endpoint body worth prefetching: the whole of the largest, a DLCP sender
/// (536 bytes, 9 cache lines), whose per-packet fields are spread over all of it; smaller
/// endpoints (a TCP sender is 352 bytes) are prefetched whole.
const BODY_PREFETCH: usize = 640;

/// Start loading endpoint `ep`'s slot (its pair's cache line) into cache.
#[inline]
pub(super) fn prefetch_slot(eps: &[EndpointPair], ep: u32) {
    if let Some(pair) = eps.get((ep / 2) as usize) {
        prefetch::line(pair as *const EndpointPair as *const u8);
    }
}

/// Start loading endpoint `ep`'s body into cache. Reads the slot (prefetch it first, a
/// step earlier) but not the body, so it never stalls on the miss it is hiding.
#[inline]
pub(super) fn prefetch_endpoint(eps: &[EndpointPair], ep: u32) {
    let Some(pair) = eps.get((ep / 2) as usize) else { return };
    if let Some(e) = &pair.0[(ep % 2) as usize].endpoint {
        let base = &**e as *const dyn Endpoint as *const u8;
        let len = std::mem::size_of_val(&**e).min(BODY_PREFETCH);
        for off in (0..len).step_by(64) {
            prefetch::line(base.wrapping_add(off));
        }
    }
}

/// Start loading what delivering a packet of `flow` to host `dst` touches: the endpoint
/// of that side (reads the pair's line, which `prefetch_slot` loaded a packet earlier).
#[inline]
pub(super) fn prefetch_delivery(eps: &[EndpointPair], flow: u32, dst: u32) {
    let Some(pair) = eps.get(flow as usize) else { return };
    let side = (pair.0[1].host == dst) as u32;
    prefetch_endpoint(eps, 2 * flow + side);
}

/// Endpoint `ep`'s slot in `eps`.
#[inline]
pub(super) fn slot_mut(eps: &mut [EndpointPair], ep: u32) -> &mut EpSlot {
    &mut eps[(ep / 2) as usize].0[(ep % 2) as usize]
}
