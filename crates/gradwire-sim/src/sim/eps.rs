//! Where the simulator keeps a flow's two endpoints and its per-endpoint driver state.
//!
//! Everything a host touches per packet for one flow sits in one cache line: both boxed
//! endpoints, their armed timers, hosts, NIC classes and ready flags, and the count of
//! the flow's packets in the network. (Separate arrays per field cost one cache miss each
//! per packet.)
//!
//! A receiver outlives its sender (a late retransmission still gets its ACK), but once
//! the sender is gone, none of the flow's packets is in the network and the receiver is
//! idle, nothing can reach it again: it is then [`retire`](EndpointPair::retire)d, its
//! state freed for a [`Retired`] stand-in that behaves exactly as the idle receiver would.

use gradwire_core::packet::Packet;
use gradwire_core::time::Time;
use gradwire_core::transport::{Endpoint, EndpointEvent, EndpointStats};

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
    /// Slot 0 only: the flow's packets in the network, either way (the padding's two bytes;
    /// stuck at `u16::MAX` once reached, which keeps the receiver for good).
    in_flight: u16,
}

/// Endpoint `2f` is flow f's sender (`side` 0), `2f + 1` its receiver (`side` 1).
#[repr(align(64))]
pub(super) struct EndpointPair(pub [EpSlot; 2]);

const _: () = assert!(std::mem::size_of::<EndpointPair>() == 64);

impl EndpointPair {
    pub fn new(src: u32, dst: u32) -> Self {
        let slot = |host| EpSlot { endpoint: None, timer_at: Time::MAX, host, class: 0, in_ready: false, in_flight: 0 };
        EndpointPair([slot(src), slot(dst)])
    }

    /// A packet of the flow entered the network.
    #[inline]
    pub fn packet_sent(&mut self) {
        let n = &mut self.0[0].in_flight;
        *n = n.saturating_add(1);
    }

    /// A packet of the flow left the network (delivered or dropped); true when it was the
    /// last one.
    #[inline]
    pub fn packet_gone(&mut self) -> bool {
        let n = &mut self.0[0].in_flight;
        if *n == u16::MAX {
            return false;
        }
        debug_assert!(*n > 0, "a packet left that was never counted in");
        *n -= 1;
        *n == 0
    }

    /// Free the receiver's state if nothing can reach it again: its sender is gone, none of
    /// the flow's packets is in the network, and it is idle (nothing queued for the NIC,
    /// no deadline). By `Endpoint`'s contract such an endpoint never sends, times out or
    /// reports anything unless a packet arrives, so the [`Retired`] stand-in, which does
    /// the same, leaves the run unchanged: a stale timer event or a wake still finds an
    /// endpoint that has nothing to do. Returns whether it retired one.
    pub fn retire(&mut self) -> bool {
        let [s, r] = &mut self.0;
        if s.endpoint.is_some() || s.in_flight != 0 || r.in_ready {
            return false;
        }
        match &r.endpoint {
            Some(e) if std::mem::size_of_val(&**e) != 0 && e.poll_timeout().is_none() => {
                r.endpoint = Some(Box::new(Retired));
                true
            }
            _ => false,
        }
    }
}

/// What a retired receiver leaves behind: an endpoint with nothing to do, ever. A
/// zero-sized box allocates nothing.
pub(super) struct Retired;

impl Endpoint for Retired {
    fn handle_packet(&mut self, _: Time, _: &Packet) {
        debug_assert!(false, "a retired receiver got a packet: one was in the network uncounted");
    }
    fn handle_timeout(&mut self, _: Time) {}
    fn poll_transmit(&mut self, _: Time) -> Option<Packet> {
        None
    }
    fn poll_timeout(&self) -> Option<Time> {
        None
    }
    fn poll_event(&mut self) -> Option<EndpointEvent> {
        None
    }
    fn stats(&self) -> EndpointStats {
        EndpointStats::default()
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
