//! Transport endpoints as sans-IO state machines (quinn-proto style).
//!
//! The driver (simulator host, socket runtime) owns time and I/O. It calls
//! `handle_packet` / `handle_timeout` with `now`, then drains `poll_transmit` (packets the
//! endpoint wants on the wire right now), `poll_event` (what the application learns) and
//! re-arms its timer from `poll_timeout`. An endpoint never reads a clock.

mod acking;
mod ctrl;
pub mod dlcp;
mod error;
pub(crate) mod host;
pub mod ltp;
mod opt;
mod pacer;
pub mod pfabric;
pub mod pias;
mod received;
pub mod registry;
mod roles;
mod shared;
pub mod spec;
pub mod tcp;

pub use acking::{AckExtra, AckingReceiver};
pub use host::{HostState, Hosts};
pub use pacer::{Pacer, Pacing};
pub use roles::{Receiver, Sender};
pub use shared::check_loss_bound;
pub use spec::{
    AsAny, Build, Builder, Common, Config, ConfigError, Info, Key, KeySet, KeyType, Kind, Pair, RuntimeKnobs, Transfer,
    TransportSpec, Value, Values,
};

use crate::packet::{FlowId, Packet};
use crate::time::Time;

/// What an endpoint tells the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointEvent {
    /// Receiver side: the transfer is complete (every byte, or the loss bound met).
    Delivered {
        /// Payload bytes the receiver holds at completion (less than the transfer size
        /// only after a loss-tolerant early close).
        bytes: u64,
    },
    /// Sender side: everything is acknowledged; the endpoint has nothing left to do.
    SenderDone,
    /// Sender side: the sender of `flow`, another transfer that shares a rate with this
    /// one (DLCP's `pair_strict` deviation), may pace faster now, so its next packet may
    /// be due before the deadline it last reported: a driver that waits for that deadline
    /// should ask it again now. A driver that asks every endpoint each turn may ignore it.
    Wake {
        /// The transfer whose sender to ask.
        flow: FlowId,
    },
    /// The endpoint has something for its host (state for the next transfer, a change in
    /// what the host's transfers share): the driver calls [`Endpoint::hand_on`] with the
    /// endpoint's host's [`HostState`] now, before it feeds any other endpoint. A driver
    /// that keeps no host state may ignore it (nothing is carried).
    HandOn,
}

/// Counters every endpoint keeps; they end up in `flows.csv`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Packets handed out by [`Endpoint::poll_transmit`], of every kind (data, ACKs,
    /// control messages and their retransmissions).
    pub packets_sent: u64,
    /// Data packets sent again after being declared lost (a subset of `packets_sent`).
    pub retransmits: u64,
    /// Retransmission timers that fired (data RTO or an unacknowledged control message).
    pub timeouts: u64,
}

impl EndpointStats {
    /// Counts a data packet handed out, and whether it is a retransmission.
    pub fn count_data(&mut self, retransmission: bool) {
        self.packets_sent += 1;
        self.retransmits += u64::from(retransmission);
    }
}

/// One end of one flow: a sender or a receiver, as a sans-IO state machine.
///
/// The driver owns the clock and the wire; the endpoint owns protocol state only. Every
/// method that takes `now` is given the driver's current time in picoseconds ([`Time`]),
/// and `now` must never decrease from one call to the next on the same endpoint:
/// endpoints measure RTTs and deadlines as differences of the `now`s they were given.
///
/// A driver's loop, after creating the endpoint and after every `handle_*` call:
///
/// 1. call [`poll_transmit`](Self::poll_transmit) until it returns `None`, putting each
///    packet on the wire (a driver that serializes at line rate may instead ask for one
///    packet each time its link is free, and keep asking until `None`);
/// 2. drain [`poll_event`](Self::poll_event), calling [`hand_on`](Self::hand_on) with the
///    endpoint's host's [`HostState`] on [`EndpointEvent::HandOn`] (what a host's
///    transfers share lives there, not in the endpoints: see [`HostState`]);
/// 3. (re-)arm one timer at [`poll_timeout`](Self::poll_timeout), replacing the previous
///    one, and call [`handle_timeout`](Self::handle_timeout) when it fires.
///
/// Waking an endpoint early is harmless: `handle_timeout` re-checks every deadline
/// against `now` and does nothing for those not yet due, so a driver may coalesce timers
/// or wake on any event. Waking it late only delays what it would have done.
///
/// # Example
///
/// A minimal driver: one LTP transfer over a lossless wire with a fixed one-way delay,
/// on a virtual clock that jumps from event to event.
///
/// ```
/// use gradwire_core::time::{Time, US};
/// use gradwire_core::transport::ltp::{LtpConfig, LtpReceiver, LtpSender};
/// use gradwire_core::transport::{Endpoint, EndpointEvent};
/// use gradwire_core::Packet;
///
/// const DELAY: Time = 5 * US;
/// let (flow, a, b, size) = (7, 0, 1, 256 * 1024);
/// let mut now: Time = 0;
/// let mut tx = LtpSender::new(LtpConfig::default(), flow, a, b, size, now);
/// let mut rx = LtpReceiver::new(LtpConfig::default(), flow, b, a, size);
/// // Packets on the wire: (arrival time, packet), both directions.
/// let mut wire: Vec<(Time, Packet)> = Vec::new();
/// let (mut delivered, mut sender_done) = (None, false);
/// while !sender_done {
///     // Hand over what has arrived by `now`.
///     let (arrived, in_flight): (Vec<_>, Vec<_>) = wire.drain(..).partition(|&(at, _)| at <= now);
///     wire = in_flight;
///     for (_, p) in arrived {
///         if p.dst == b { rx.handle_packet(now, &p) } else { tx.handle_packet(now, &p) }
///     }
///     // Wake both: early for at least one of them, which they tolerate.
///     tx.handle_timeout(now);
///     rx.handle_timeout(now);
///     for ep in [&mut tx as &mut dyn Endpoint, &mut rx] {
///         while let Some(p) = ep.poll_transmit(now) {
///             wire.push((now + DELAY, p));
///         }
///         while let Some(ev) = ep.poll_event() {
///             match ev {
///                 EndpointEvent::Delivered { bytes } => delivered = Some(bytes),
///                 EndpointEvent::SenderDone => sender_done = true,
///                 // this loop asks both ends every turn anyway
///                 EndpointEvent::Wake { .. } => {}
///                 // it keeps no host state: nothing is carried to a next transfer
///                 EndpointEvent::HandOn => {}
///             }
///         }
///     }
///     // Sleep until the next arrival or deadline (a pacing slot or a timer).
///     let timers = [tx.poll_timeout(), rx.poll_timeout()].into_iter().flatten();
///     let arrivals = wire.iter().map(|&(at, _)| at);
///     match timers.chain(arrivals).min() {
///         Some(t) => now = now.max(t),
///         None => break,
///     }
/// }
/// // LTP may close early (Early Close) once `1 - loss_bound` of the bytes are in.
/// let delivered = delivered.expect("the receiver closed");
/// assert!(sender_done && rx.bound_met());
/// assert!(delivered >= size - size / 20 && delivered <= size);
/// ```
/// `Send`, so a driver may move its endpoints to another thread (the Python module steps
/// a simulation with the GIL released).
pub trait Endpoint: Send {
    /// A packet addressed to this endpoint's flow arrived at `now`.
    ///
    /// Packets of another flow or from the wrong peer, duplicates and stale ones are
    /// ignored (some endpoints count them): the driver may deliver whatever the wire gave.
    /// Replies (ACKs, control acknowledgements) are queued for `poll_transmit`.
    fn handle_packet(&mut self, now: Time, pkt: &Packet);
    /// The deadline last returned by `poll_timeout` has passed (or, spuriously, not yet:
    /// an endpoint must tolerate being woken early and re-check its own deadline).
    /// Fires what is due (retransmission timers, rate periods, Early Close checks);
    /// packets it makes ready are drained with `poll_transmit`. A pacing slot needs no
    /// call here: once it has passed, `poll_transmit` sends.
    fn handle_timeout(&mut self, now: Time);
    /// The next packet to put on the wire at `now`, if one may leave now.
    ///
    /// `None` means nothing may be sent at `now`: the endpoint is idle, blocked by its
    /// congestion window (an ACK will unblock it), or waiting for its next pacing slot
    /// (reported by `poll_timeout`). Each packet returned is counted as sent at `now`
    /// (RTT samples and timers start from it); a driver that drops it instead causes a
    /// loss the protocol recovers from like any other.
    fn poll_transmit(&mut self, now: Time) -> Option<Packet>;
    /// Earliest time (ps) the endpoint wants `handle_timeout`, pacing slot included;
    /// `None` when no timer is armed (it waits for a packet, or it is done). The value
    /// may be in the past: the driver should then call `handle_timeout` at once.
    /// Re-read it after every call that changes state.
    fn poll_timeout(&self) -> Option<Time>;
    /// `poll_timeout` without the pacing slot (when the next packet may leave): the
    /// earliest time `handle_timeout` has work. A driver that keeps asking
    /// `poll_transmit` anyway (the simulator's NIC, for an endpoint in its ready list)
    /// need not wake up for pacing alone.
    fn poll_timeout_unpaced(&self) -> Option<Time> {
        self.poll_timeout()
    }
    /// Next application event, if any. Each event is returned once.
    fn poll_event(&mut self) -> Option<EndpointEvent>;
    /// [`handle_timeout`](Self::handle_timeout) for a driver that keeps its host's
    /// [`HostState`]: the endpoints whose timeout reads and writes what the host's
    /// transfers share (a DLCP receiver's fair share) use it; the others need not.
    fn handle_timeout_with(&mut self, now: Time, _host: &mut HostState) {
        self.handle_timeout(now)
    }
    /// After [`EndpointEvent::HandOn`], or for a flow [`HostState::take_stale`] names: the
    /// endpoint leaves what it has for its host in `host` and reads what it follows of it.
    /// Allowed at any time: it hands on whatever is due, if anything.
    fn hand_on(&mut self, _host: &mut HostState) {}
    /// Counters so far. A sender's are final once it reports
    /// [`EndpointEvent::SenderDone`]; a receiver keeps counting the ACKs and control
    /// messages it still sends after [`EndpointEvent::Delivered`].
    fn stats(&self) -> EndpointStats;
}

/// The `Endpoint` methods a wrapper leaves to the endpoint in its field `inner`: timers,
/// events and counters. A wrapper that only changes what goes on the wire (PIAS's
/// priorities, a handshake's SYN-ACKs) writes `handle_packet` and `poll_transmit` itself
/// and forwards the rest with this.
macro_rules! forward_to_inner {
    () => {
        fn handle_timeout(&mut self, now: $crate::time::Time) {
            self.inner.handle_timeout(now)
        }

        fn poll_timeout(&self) -> Option<$crate::time::Time> {
            self.inner.poll_timeout()
        }

        fn poll_timeout_unpaced(&self) -> Option<$crate::time::Time> {
            self.inner.poll_timeout_unpaced()
        }

        fn poll_event(&mut self) -> Option<$crate::transport::EndpointEvent> {
            self.inner.poll_event()
        }

        fn handle_timeout_with(&mut self, now: $crate::time::Time, host: &mut $crate::transport::HostState) {
            self.inner.handle_timeout_with(now, host)
        }

        fn hand_on(&mut self, host: &mut $crate::transport::HostState) {
            self.inner.hand_on(host)
        }

        fn stats(&self) -> $crate::transport::EndpointStats {
            self.inner.stats()
        }
    };
}
pub(crate) use forward_to_inner;

/// A boxed endpoint is an endpoint, so wrappers such as [`tcp::handshake`]'s can sit in
/// front of whatever a driver built.
impl<E: Endpoint + ?Sized> Endpoint for Box<E> {
    fn handle_packet(&mut self, now: Time, pkt: &Packet) {
        (**self).handle_packet(now, pkt)
    }
    fn handle_timeout(&mut self, now: Time) {
        (**self).handle_timeout(now)
    }
    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        (**self).poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<Time> {
        (**self).poll_timeout()
    }
    fn poll_timeout_unpaced(&self) -> Option<Time> {
        (**self).poll_timeout_unpaced()
    }
    fn poll_event(&mut self) -> Option<EndpointEvent> {
        (**self).poll_event()
    }
    fn handle_timeout_with(&mut self, now: Time, host: &mut HostState) {
        (**self).handle_timeout_with(now, host)
    }
    fn hand_on(&mut self, host: &mut HostState) {
        (**self).hand_on(host)
    }
    fn stats(&self) -> EndpointStats {
        (**self).stats()
    }
}
