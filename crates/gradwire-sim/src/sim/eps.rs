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

    /// A pair not in use (its flow has not started, or is done with).
    pub fn vacant() -> Self {
        Self::new(0, 0)
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
    /// endpoint that has nothing to do. Returns whether the whole pair may go too (the
    /// sender's slot is off its NIC's ready list as well).
    fn retire(&mut self) -> bool {
        let [s, r] = &mut self.0;
        if s.endpoint.is_some() || s.in_flight != 0 || r.in_ready {
            return false;
        }
        match &r.endpoint {
            Some(e) if e.poll_timeout().is_none() => {
                if std::mem::size_of_val(&**e) != 0 {
                    r.endpoint = Some(Box::new(Retired));
                }
                !s.in_ready
            }
            _ => false,
        }
    }
}

/// The flows' endpoint pairs, found by flow; a pair exists from its flow's start until
/// the flow is done with (sender gone, receiver retired and off the ready lists, nothing
/// in the network), so a flow that has not started, or is over, costs 4 bytes here (its
/// entry in `slot_of`) instead of a 64-byte line.
///
/// Open pairs live in a slab as long as the most ever open at once; a freed pair's line is
/// the next one handed out, while it is still in cache.
pub(super) struct Pairs {
    /// Per flow: its pair's slab index, `NONE` when it has none.
    slot_of: Vec<u32>,
    slab: Vec<EndpointPair>,
    /// Slab indices free for reuse (most recently freed last).
    free: Vec<u32>,
    open: u64,
    /// Pairs of finished flows opened again by a stale timer of their retired receiver.
    pub reopened: u64,
}

/// No pair (in `slot_of`, and as a pooled packet's tag).
pub(super) const NONE: u32 = u32::MAX;

impl Pairs {
    pub fn new(flows: usize) -> Self {
        Pairs { slot_of: vec![NONE; flows], slab: Vec::new(), free: Vec::new(), open: 0, reopened: 0 }
    }

    #[inline]
    fn at(&self, i: u32) -> Option<&EndpointPair> {
        self.slab.get(i as usize)
    }

    #[inline]
    fn at_mut(&mut self, i: u32) -> Option<&mut EndpointPair> {
        self.slab.get_mut(i as usize)
    }

    /// Flow `flow`'s pair, if it is open.
    #[inline]
    pub fn get(&self, flow: u32) -> Option<&EndpointPair> {
        self.at(*self.slot_of.get(flow as usize)?)
    }

    #[inline]
    pub fn get_mut(&mut self, flow: u32) -> Option<&mut EndpointPair> {
        let i = *self.slot_of.get(flow as usize)?;
        self.at_mut(i)
    }

    /// Count a packet of `flow` into the network; returns its pair's slab index, the tag
    /// the packet carries until [`packet_gone`](Self::packet_gone) (`NONE`, and nothing
    /// counted, if the flow has no pair open). A counted packet keeps its pair open, so the
    /// index stays its flow's.
    #[inline]
    pub fn packet_sent(&mut self, flow: u32) -> u32 {
        let Some(&i) = self.slot_of.get(flow as usize) else { return NONE };
        match self.at_mut(i) {
            Some(pair) => {
                pair.packet_sent();
                i
            }
            None => NONE,
        }
    }

    /// Flow `flow`'s pair's slab index (`NONE` if it has none open).
    #[inline]
    pub fn index_of(&self, flow: u32) -> u32 {
        self.slot_of.get(flow as usize).copied().unwrap_or(NONE)
    }

    /// A packet tagged `tag` by [`packet_sent`](Self::packet_sent) left the network; true
    /// if it was its flow's last.
    #[inline]
    pub fn packet_gone(&mut self, tag: u32) -> bool {
        self.at_mut(tag).is_some_and(EndpointPair::packet_gone)
    }

    /// The pair a delivered packet of `flow`, tagged `tag`, is for: by its tag if it was
    /// counted, else by its flow.
    #[inline]
    pub fn pair_of(&mut self, tag: u32, flow: u32) -> Option<&mut EndpointPair> {
        if tag != NONE {
            self.at_mut(tag)
        } else {
            self.get_mut(flow)
        }
    }

    /// Flow `flow` starts: its pair, from `src` to `dst`, with both endpoints.
    pub fn open(
        &mut self,
        flow: u32,
        src: u32,
        dst: u32,
        sender: Box<dyn Endpoint>,
        receiver: Box<dyn Endpoint>,
    ) -> &mut EndpointPair {
        debug_assert_eq!(self.slot_of[flow as usize], NONE, "flow {flow} started twice");
        let i = self.free.pop().unwrap_or_else(|| {
            self.slab.push(EndpointPair::vacant());
            self.slab.len() as u32 - 1
        });
        self.slot_of[flow as usize] = i;
        self.open += 1;
        let pair = self.at_mut(i).expect("allocated");
        *pair = EndpointPair::new(src, dst);
        pair.0[0].endpoint = Some(sender);
        pair.0[1].endpoint = Some(receiver);
        pair
    }

    /// Endpoint `ep`'s slot, if its pair is open.
    #[inline]
    pub fn slot_mut(&mut self, ep: u32) -> Option<&mut EpSlot> {
        self.get_mut(ep / 2).map(|p| &mut p.0[(ep % 2) as usize])
    }

    /// Flow `flow`'s pair is open.
    #[inline]
    pub fn is_open(&self, flow: u32) -> bool {
        self.slot_of.get(flow as usize).is_some_and(|&i| i != NONE)
    }

    /// A stale timer or a drive reached the receiver of a started flow whose pair was
    /// freed: the pair comes back as it was left (sender gone, receiver [`Retired`], off
    /// the ready list; `src` and `dst` its hosts), so the event does exactly what it did
    /// before pairs were freed. It goes again once it is off the ready list.
    pub fn reopen_retired(&mut self, flow: u32, src: u32, dst: u32) {
        self.reopened += 1;
        self.open(flow, src, dst, Box::new(Retired), Box::new(Retired)).0[0].endpoint = None;
    }

    /// Retire flow `flow`'s receiver if nothing can reach it again, and free the pair once
    /// nothing refers to it (see [`EndpointPair::retire`]); true if the pair was freed.
    pub fn retire(&mut self, flow: u32) -> bool {
        let Some(&i) = self.slot_of.get(flow as usize) else { return false };
        let Some(pair) = self.at_mut(i) else { return false };
        if !pair.retire() {
            return false;
        }
        *pair = EndpointPair::vacant();
        self.slot_of[flow as usize] = NONE;
        self.free.push(i);
        self.open -= 1;
        true
    }

    /// Pairs open now.
    pub fn open_pairs(&self) -> u64 {
        self.open
    }

    /// Slab lines ever handed out (the most pairs open at once).
    pub fn slab_len(&self) -> u32 {
        self.slab.len() as u32
    }
}

/// What a retired receiver leaves behind: an endpoint with nothing to do, ever. A
/// zero-sized box allocates nothing. A parallel run's parts also put one where a flow's
/// other endpoint runs in another part (`parallel.rs`).
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

/// Bytes of an endpoint body worth prefetching: most of the largest, a DLCP sender (728
/// bytes, its per-packet fields spread over it); smaller endpoints (a TCP sender is 480
/// bytes) are prefetched whole.
const BODY_PREFETCH: usize = 640;

/// Start loading endpoint `ep`'s slot (its pair's cache line) into cache.
#[inline]
pub(super) fn prefetch_slot(eps: &Pairs, ep: u32) {
    if let Some(pair) = eps.get(ep / 2) {
        prefetch::line(pair as *const EndpointPair as *const u8);
    }
}

/// Start loading endpoint `ep`'s body into cache. Reads the slot (prefetch it first, a
/// step earlier) but not the body, so it never stalls on the miss it is hiding.
#[inline]
pub(super) fn prefetch_endpoint(eps: &Pairs, ep: u32) {
    let Some(pair) = eps.get(ep / 2) else { return };
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
pub(super) fn prefetch_delivery(eps: &Pairs, flow: u32, dst: u32) {
    let Some(pair) = eps.get(flow) else { return };
    let side = (pair.0[1].host == dst) as u32;
    prefetch_endpoint(eps, 2 * flow + side);
}
