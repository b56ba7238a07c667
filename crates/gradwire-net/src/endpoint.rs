//! The runtime's transport settings, as the core's [`RuntimeKnobs`], and its endpoints:
//! the core's [`Builder`] makes them from the registry (each transport's module says how
//! it runs here), so the runtime names no concrete transport.
//!
//! Ranks are the endpoints' host ids; a transfer's flow id names (call, transfer) on the
//! wire. A receiver is posted before any of its data can arrive (every rank knows the
//! schedule): [`Receiver::post`].

use std::ops::Range;

use gradwire_core::packet::Packet;
use gradwire_core::time::{Time, MS, US};
use gradwire_core::transport::{
    Builder, ConfigError, Endpoint, EndpointEvent, EndpointStats, Pacing, Receiver, RuntimeKnobs, Sender,
};
use gradwire_core::wire::HEADER_LEN;

/// Which transport carries the transfers: the core's registered kinds, of which the
/// runtime runs those with a wire code ([`runtime_transports`]).
pub use gradwire_core::transport::Kind as TransportKind;

/// The transports the runtime runs: those whose module says how (a wire code in the call
/// descriptors and a runtime builder).
pub fn runtime_transports() -> Vec<TransportKind> {
    TransportKind::all().into_iter().filter(|k| k.spec().wire_code().is_some()).collect()
}

/// The transport called `name`, if the runtime runs it.
pub fn parse_transport(name: &str) -> Result<TransportKind, String> {
    let kind: TransportKind = name.parse()?;
    if kind.spec().wire_code().is_some() {
        Ok(kind)
    } else {
        let names: Vec<String> = runtime_transports().iter().map(|k| format!("{:?}", k.name())).collect();
        Err(format!("transport {name:?} is a simulator baseline: the runtime runs {}", names.join(" or ")))
    }
}

#[derive(Clone, Debug)]
pub struct TransportConfig {
    pub kind: TransportKind,
    /// Payload bytes per datagram. The datagram is this plus the 32-byte gradwire header;
    /// 1440 makes 1500-byte IP packets, 8940 makes 9000-byte (jumbo) ones.
    pub mss: u32,
    /// DLCP: the sender's start and maximum rate. LTP: the initial bottleneck estimate.
    /// 0 asks `Communicator::init` for the speed of the interface toward the peers.
    pub line_rate_bps: u64,
    /// A paced sender may send this far ahead of its slots, so sends leave in GSO-sized
    /// bursts ([`Pacing::burst`]).
    pub burst: Time,
    /// DLCP: the rate-control period (receive-rate reports and rate decisions). The
    /// simulator's 200 µs is shorter than the scheduling gaps of a loaded host (a thread
    /// off the CPU for a few ms would read as a receive rate of zero and halve the rate),
    /// so the runtime judges over longer periods.
    pub rate_period: Time,
    /// DLCP: after a gap between the event loop's turns (a busy turn, a preempted thread),
    /// the sender may send up to this much of the gap's worth at once
    /// ([`Pacing::catch_up`]), so the loop's gaps do not set the rate.
    pub max_catch_up: Time,
    /// DLCP: after a STOP, a receiver requests what is missing only once its data has been
    /// quiet this long (0: at once). A STOP on the control link can overtake data still
    /// queued in the network (a NIC queue, a switch), and requesting it then sends it twice.
    pub retx_quiet: Time,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            kind: TransportKind::named("dlcp"),
            mss: 1440,
            line_rate_bps: 25_000_000_000,
            burst: 20 * US,
            max_catch_up: MS,
            rate_period: 2 * MS,
            retx_quiet: 0,
        }
    }
}

/// Control travels on TCP, so a control retransmission only matters for a message that
/// arrived before its transfer was posted; one per 50 ms is plenty.
const CTRL_RTO: Time = 50 * MS;
/// IP + UDP + gradwire header bytes of a datagram, for the transports' rate arithmetic.
const HEADER_BYTES: u32 = 28 + HEADER_LEN as u32;

impl TransportConfig {
    /// The core's runtime settings; each transfer adds its loss bound, priority, element
    /// size and the line rate.
    pub fn knobs(&self) -> RuntimeKnobs {
        RuntimeKnobs {
            mss: self.mss,
            header_bytes: HEADER_BYTES,
            line_rate_bps: self.line_rate_bps,
            pacing: Pacing { burst: self.burst, catch_up: self.max_catch_up },
            rate_period: self.rate_period,
            retx_quiet: self.retx_quiet,
            ctrl_rto: CTRL_RTO,
        }
    }

    /// The builder of this transport's endpoints.
    pub fn builder(&self) -> Result<Builder, ConfigError> {
        Builder::for_runtime(self.kind, &self.knobs())
    }
}

/// One end of a transfer at this rank.
pub enum Ep {
    Send(Box<dyn Sender>),
    Recv(Box<dyn Receiver>),
}

impl Ep {
    pub fn endpoint(&mut self) -> &mut dyn Endpoint {
        match self {
            Ep::Send(e) => e.as_mut(),
            Ep::Recv(e) => e.as_mut(),
        }
    }

    pub fn is_receiver(&self) -> bool {
        matches!(self, Ep::Recv(_))
    }

    /// Receivers: the byte range of the payload to place ([`Receiver::receive`]).
    pub fn receive(&mut self, now: Time, pkt: &Packet) -> Option<Range<u64>> {
        match self {
            Ep::Recv(r) => r.receive(now, pkt),
            Ep::Send(s) => {
                s.handle_packet(now, pkt);
                None
            }
        }
    }

    /// Receivers: a data segment at `offset` of `len` bytes would be placed.
    pub fn wants(&self, offset: u64, len: u32) -> bool {
        matches!(self, Ep::Recv(r) if r.wants(offset, len))
    }

    /// Receivers: ranges that never arrived (bubbles), in transfer offsets.
    pub fn bubbles(&self) -> Vec<Range<u64>> {
        match self {
            Ep::Recv(r) => r.bubbles(),
            Ep::Send(_) => Vec::new(),
        }
    }

    /// Receivers whose transport has no closing handshake for a complete transfer: the
    /// sender must be told on the reliable link.
    pub fn needs_close_notice(&self) -> bool {
        matches!(self, Ep::Recv(r) if r.needs_close_notice())
    }

    /// Senders: the receiver declared its bound met; the send is over for the call.
    pub fn released(&self) -> bool {
        matches!(self, Ep::Send(s) if s.released())
    }

    /// Senders: the pacing rate, bit/s (0 for a receiver), for traces.
    pub fn pacing_rate_bps(&self) -> u64 {
        match self {
            Ep::Send(s) => s.pacing_rate_bps(),
            Ep::Recv(_) => 0,
        }
    }

    /// Nothing left to exchange with the peer: the endpoint can be dropped.
    pub fn is_closed(&self) -> bool {
        match self {
            Ep::Send(s) => s.is_closed(),
            Ep::Recv(r) => r.is_closed(),
        }
    }

    pub fn stats(&self) -> EndpointStats {
        match self {
            Ep::Send(s) => s.stats(),
            Ep::Recv(r) => r.stats(),
        }
    }

    pub fn poll_timeout(&self) -> Option<Time> {
        match self {
            Ep::Send(s) => s.poll_timeout(),
            Ep::Recv(r) => r.poll_timeout(),
        }
    }

    pub fn poll_event(&mut self) -> Option<EndpointEvent> {
        self.endpoint().poll_event()
    }
}
