//! `host.nic = "fifo"`: the NIC as one drop-tail queue. An endpoint hands over every packet
//! its window and pacing allow as soon as it is fed (no backpressure from the link, as in
//! ns-3 without a socket-level limit), they leave in that order, and what does not fit in
//! `host.nic_queue_bytes` is dropped there as `host_nic`. Senders then learn of NIC
//! queueing through their RTT and of NIC overflow as loss, as they would in ns-3.

use super::*;

impl Simulation {
    /// Settle `ep` after it was fed: drain what it sends now into its host's NIC queue,
    /// then arm its timer (pacing included: no NIC will ask it for its next packet).
    pub(super) fn drive_fifo(&mut self, ep: u32) {
        self.hand_on_first(ep);
        while let Some(p) = self.next_handed(ep) {
            self.send_to_fifo_nic(p);
        }
        self.settle(ep);
    }

    /// Before an endpoint that hands its packets over (no NIC asks it) is polled, and before
    /// `settle` drains its events: what it has for its host (a DLCP sender that now has data
    /// joins its pair's count) goes there first, and its pair's other senders see the
    /// change, as they would before any packet of it leaves.
    pub(super) fn hand_on_first(&mut self, ep: u32) {
        let handed = self.eps.slot_mut(ep).and_then(|sl| {
            let host = sl.host;
            sl.endpoint.as_mut().map(|e| e.hand_on(self.hosts.host(host))).map(|()| host)
        });
        if let Some(host) = handed {
            self.refresh_stale(host);
        }
    }

    /// The next packet such an endpoint sends now, if any.
    pub(super) fn next_handed(&mut self, ep: u32) -> Option<Packet> {
        let now = self.now;
        self.eps.slot_mut(ep).and_then(|sl| sl.endpoint.as_mut()).and_then(|e| e.poll_transmit(now))
    }

    fn send_to_fifo_nic(&mut self, p: Packet) {
        let (id, p) = self.enter_network(p);
        let nic = self.fabric.node_ports[p.src as usize][0] as usize;
        let pool = &self.fabric.pools[self.fabric.ports[nic].pool as usize];
        if pool.used_bytes + u64::from(p.wire_bytes) > pool.capacity_bytes {
            self.fabric.ports[nic].queue.count_drop(DropReason::HostNic);
            return self.drop(id, p.flow, DropReason::HostNic);
        }
        self.forward(p.src, Hdr::of(id, &p));
    }
}

#[cfg(test)]
pub(super) mod tests {
    use crate::scenario::load;
    use crate::sim::Simulation;

    pub(in crate::sim) fn run(extra: &str) -> Simulation {
        // three senders on host 0 to hosts 1..3, started in the order 3, 1, 2 (the FIFO
        // serves them in the order they handed their windows over)
        let text = format!(
            "seed = 1\nstop_ms = 1000\n[topology]\nleaves = 1\nspines = 1\nhosts_per_leaf = 4\n\
             [transport]\nkind = \"dctcp\"\ninit_cwnd_packets = 10\n\
             [workload]\nkind = \"flows\"\n\
             flows = [{{src = 0, dst = 3, bytes = 14600, start_us = 0.0}}, \
             {{src = 0, dst = 1, bytes = 14600, start_us = 0.001}}, \
             {{src = 0, dst = 2, bytes = 14600, start_us = 0.002}}]\n{extra}"
        );
        let s = &load(&text, &[]).unwrap()[0].scenario;
        let mut sim = Simulation::new(s).unwrap();
        sim.run();
        assert!(sim.conservation().holds(), "{:?}", sim.conservation());
        sim
    }

    pub(in crate::sim) fn fcts(sim: &Simulation) -> Vec<u64> {
        sim.flow_states().map(|f| f.finished().unwrap() - f.started().unwrap()).collect()
    }

    #[test]
    fn a_fifo_nic_sends_whole_windows_in_the_order_they_came() {
        // Each flow is one 10-packet window: a FIFO NIC finishes flow 0 before flow 1
        // begins, so the FCTs grow by one window each; round robin interleaves the three.
        let fifo = fcts(&run("[host]\nnic = \"fifo\"\n"));
        assert!(fifo[0] < fifo[1] && fifo[1] < fifo[2], "{fifo:?}");
        let window = fifo[1] - fifo[0];
        assert!(fifo[2] - fifo[1] + 1000 >= window && fifo[2] - fifo[1] <= window + 1000, "{fifo:?}");
        let rr = fcts(&run(""));
        let spread = rr.iter().max().unwrap() - rr.iter().min().unwrap();
        assert!(spread < window / 2, "round robin ends the three within half a window: {rr:?}");
    }

    #[test]
    fn a_full_fifo_nic_drops_and_counts_it() {
        // room for 4 packets: 30 packets handed over at once lose most of the windows
        let sim = run("[host]\nnic = \"fifo\"\nnic_queue_bytes = 6160\n");
        let host_nic = gradwire_core::switch::DropReason::HostNic as usize;
        assert!(sim.drops_by_reason[host_nic] > 0);
        assert_eq!(sim.drops_by_reason.iter().sum::<u64>(), sim.drops_by_reason[host_nic]);
        assert_eq!(sim.port_counters("host0->leaf0").unwrap().dropped[host_nic], sim.drops_by_reason[host_nic]);
        assert!(sim.flow_states().all(|f| f.finished().is_some()), "TCP recovers what the NIC dropped");
    }
}
