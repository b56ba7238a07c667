//! The two ends of a transfer that carries a tensor (DLCP, LTP), as a driver sees them:
//! what a receiver places where, what it still misses, when either end is done. A driver
//! holding `Box<dyn Sender>` / `Box<dyn Receiver>` (from [`super::Builder`]) names no
//! concrete transport; each transport implements them in its own module. Both are `Send`, so a driver may run them on its own thread.

use std::ops::Range;

use super::Endpoint;
use crate::packet::Packet;
use crate::time::Time;

/// The sending end of a transfer whose receiver places payload.
pub trait Sender: Endpoint + Send {
    /// The receiver has declared the transfer complete (its bound met): the application's
    /// send is over, though a closing handshake may still run.
    fn released(&self) -> bool;
    /// Nothing is left to exchange with the peer: the endpoint can be dropped.
    fn is_closed(&self) -> bool;
    /// Which segments are important, from the real gradient values
    /// ([`crate::tensor::importance_mask`]); transports without the notion ignore it.
    fn set_importance_mask(&mut self, _mask: Vec<bool>) {}
    /// The rate the pacer sends at now, bit/s (for traces).
    fn pacing_rate_bps(&self) -> u64;
}

/// The receiving end of a transfer: it tells the driver where each payload goes.
pub trait Receiver: Endpoint + Send {
    /// Handles a packet like [`Endpoint::handle_packet`] and, for data, names the byte
    /// range of the transfer its payload fills (`None`: discard the payload). A range is
    /// named at most once and always lies inside the transfer.
    fn receive(&mut self, now: Time, pkt: &Packet) -> Option<Range<u64>>;
    /// A data segment at `offset` of `len` bytes would be placed now (a whole, new segment
    /// while data is accepted): a driver may read it straight into place.
    fn wants(&self, offset: u64, len: u32) -> bool;
    /// The ranges that never arrived (bubbles, zeros for the application); final once
    /// the transfer is delivered.
    fn bubbles(&self) -> Vec<Range<u64>>;
    /// Nothing is left to exchange with the peer: the endpoint can be dropped.
    fn is_closed(&self) -> bool;
    /// The transport ends a complete transfer without a closing handshake (LTP): unless
    /// the driver tells the sender on a reliable path, a sender that lost the last ACKs
    /// resends until its own timeout.
    fn needs_close_notice(&self) -> bool {
        false
    }
    /// The driver knows the transfer is coming (both ends run one schedule) and posted the
    /// receiver before any of its data can arrive: accept data at once.
    fn post(&mut self, _now: Time) {}
}

/// A receiver over the core's [`crate::tensor::Reassembly`]: the transport's own methods
/// answer, plus `extra` items.
macro_rules! reassembling_receiver {
    ($ty:ty { $($extra:tt)* }) => {
        impl Receiver for $ty {
            fn receive(&mut self, now: Time, pkt: &Packet) -> Option<Range<u64>> {
                <$ty>::receive(self, now, pkt)
            }

            fn wants(&self, offset: u64, len: u32) -> bool {
                self.accepts_data() && self.reassembly().wants(offset, len)
            }

            fn bubbles(&self) -> Vec<Range<u64>> {
                <$ty>::bubbles(self)
            }

            fn is_closed(&self) -> bool {
                <$ty>::is_closed(self)
            }

            $($extra)*
        }
    };
}

pub(crate) use reassembling_receiver;
