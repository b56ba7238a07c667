//! `host.nic = "flow_queues"`: per-flow queues without backpressure, served round robin,
//! one packet per turn (the `RoundRobinQueueDisc` of `validation/ns3/leafspine.cc`; Linux's
//! `fq` without TCP small queues). An endpoint hands over everything its window and pacing
//! allow as soon as it is fed, into its own queue, so what it sends later (a resend) waits
//! behind what it handed over before; `round_robin` instead asks an endpoint for its next
//! packet when its turn comes. Packets are counted into the network when handed over, so
//! their RTT includes the NIC queue, as in ns-3.

use super::*;
use std::collections::{HashMap, VecDeque};

/// The hosts' per-flow queues: an endpoint's packets in the order it handed them over, and
/// per host the round of endpoints with packets (a queue that empties leaves the round, one
/// that fills again joins its back).
#[derive(Default)]
pub(super) struct FlowQueues {
    queued: HashMap<u32, VecDeque<Hdr>>,
    rounds: HashMap<u32, VecDeque<u32>>,
}

impl FlowQueues {
    fn push(&mut self, host: u32, ep: u32, h: Hdr) {
        let q = self.queued.entry(ep).or_default();
        if q.is_empty() {
            self.rounds.entry(host).or_default().push_back(ep);
        }
        q.push_back(h);
    }

    /// Whether `host`'s NIC has a packet waiting.
    pub(super) fn any(&self, host: u32) -> bool {
        self.rounds.get(&host).is_some_and(|r| !r.is_empty())
    }

    /// The next packet of `host`'s round: the front flow's head, the flow to the back.
    fn pop(&mut self, host: u32) -> Option<Hdr> {
        let round = self.rounds.get_mut(&host)?;
        let ep = round.pop_front()?;
        let q = self.queued.get_mut(&ep).expect("a flow in the round has packets");
        let h = q.pop_front().expect("a flow in the round has packets");
        if q.is_empty() {
            self.queued.remove(&ep);
        } else {
            round.push_back(ep);
        }
        Some(h)
    }
}

impl Simulation {
    /// Settle `ep` after it was fed: hand what it sends now to its own queue at its host's
    /// NIC, arm its timer (pacing included: the NIC does not ask it), start the NIC.
    pub(super) fn drive_flow_queued(&mut self, ep: u32) {
        self.hand_on_first(ep);
        let Some(host) = self.eps.slot_mut(ep).map(|sl| sl.host) else { return };
        while let Some(p) = self.next_handed(ep) {
            let (id, p) = self.enter_network(p);
            self.flow_queues.as_mut().expect("flow_queues mode").push(host, ep, Hdr::of(id, &p));
        }
        self.settle(ep);
        self.pull_nic(host);
    }

    /// The NIC's link is free: send the next packet of the host's round.
    pub(super) fn pull_flow_queue(&mut self, host: u32) {
        if let Some(h) = self.flow_queues.as_mut().expect("flow_queues mode").pop(host) {
            self.forward(host, h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FlowQueues;
    use crate::fabric::Hdr;
    use crate::sim::fifo_nic::tests::{fcts, run};

    fn hdr(id: u32) -> Hdr {
        Hdr { id, flow: 0, dst: 0, wire_bytes: 1500, priority: 0, ect: false, rank: 0 }
    }

    #[test]
    fn a_round_takes_one_packet_per_flow_in_hand_over_order_and_a_refilled_flow_joins_its_back() {
        let mut q = FlowQueues::default();
        // endpoint 4 hands over 1, 2, 3 (the last a resend, behind its own packets), then 6 hands over 10
        for (ep, id) in [(4, 1), (4, 2), (4, 3), (6, 10)] {
            q.push(0, ep, hdr(id));
        }
        q.push(1, 8, hdr(20)); // another host's round is its own
        let order: Vec<u32> = std::iter::from_fn(|| q.pop(0)).map(|h| h.id).collect();
        assert_eq!(order, [1, 10, 2, 3]);
        q.push(0, 6, hdr(11));
        q.push(0, 4, hdr(5));
        let order: Vec<u32> = std::iter::from_fn(|| q.pop(0)).map(|h| h.id).collect();
        assert_eq!(order, [11, 5], "emptied flows joined again in the order they refilled");
        assert_eq!(q.pop(1).map(|h| h.id), Some(20));
        assert!(q.pop(1).is_none() && q.queued.is_empty());
    }

    #[test]
    fn flow_queues_interleave_the_windows_a_fifo_sends_one_after_another() {
        let fifo = fcts(&run("[host]\nnic = \"fifo\"\n"));
        let window = fifo[1] - fifo[0];
        let fq = fcts(&run("[host]\nnic = \"flow_queues\"\n"));
        let spread = fq.iter().max().unwrap() - fq.iter().min().unwrap();
        assert!(spread < window / 2, "the round ends the three within half a window: {fq:?}, fifo {fifo:?}");
        assert_eq!(fq, fcts(&run("")), "lossless, handing over early or on request sends the same");
    }
}
