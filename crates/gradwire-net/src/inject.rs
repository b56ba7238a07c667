//! Testing hooks: loss and delay on the datagrams this rank sends to a peer.
//!
//! The kernel here has no netem, so impairment is injected in the runtime itself, just
//! before the socket. Off by default. Control (TCP) is never impaired: it stands for the
//! reliable channel.

use std::collections::VecDeque;
use std::time::Duration;

use gradwire_core::time::Time;
use rand::Rng;
use rand_xoshiro::rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Impairment {
    /// Probability that a datagram to the peer is dropped, `[0, 1]`.
    pub loss: f64,
    /// Extra one-way delay of every datagram to the peer.
    pub delay: Duration,
}

impl Impairment {
    pub fn is_none(&self) -> bool {
        self.loss <= 0.0 && self.delay.is_zero()
    }
}

/// A datagram held back by an injected delay.
pub struct Delayed {
    pub release: Time,
    pub tos: u8,
    pub datagram: Vec<u8>,
}

pub struct Injector {
    per_peer: Vec<Impairment>,
    rng: Xoshiro256PlusPlus,
    /// Per peer, FIFO (one delay per peer keeps release times in order).
    pub held: Vec<VecDeque<Delayed>>,
    pub dropped: u64,
}

impl Injector {
    pub fn new(per_peer: Vec<Impairment>, seed: u64) -> Self {
        let n = per_peer.len();
        Injector {
            per_peer,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            held: (0..n).map(|_| VecDeque::new()).collect(),
            dropped: 0,
        }
    }

    pub fn get(&self, peer: u32) -> Impairment {
        self.per_peer.get(peer as usize).copied().unwrap_or_default()
    }

    /// Whether this datagram to `peer` is lost.
    pub fn drop_now(&mut self, peer: u32) -> bool {
        let p = self.get(peer).loss;
        if p > 0.0 && self.rng.gen::<f64>() < p {
            self.dropped += 1;
            return true;
        }
        false
    }

    pub fn next_release(&self) -> Option<Time> {
        self.held.iter().filter_map(|q| q.front().map(|d| d.release)).min()
    }
}
