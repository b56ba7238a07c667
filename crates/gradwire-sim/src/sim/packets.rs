//! Packets through the fabric: host to port, port to wire, wire to the next node.

use super::eps::{prefetch_delivery, prefetch_slot};
use super::*;

impl Simulation {
    pub(super) fn send_from_host(&mut self, p: Packet) {
        let (id, p) = self.enter_network(p);
        self.forward(p.src, Hdr::of(id, &p));
    }

    /// A packet an endpoint sent, stamped, counted and pooled: its id in the fabric.
    #[inline]
    pub(super) fn enter_network(&mut self, mut p: Packet) -> (PktId, Packet) {
        p.sent_at = self.now;
        self.counts.sent += 1;
        let tag = self.flow_packet_sent(p.flow);
        let id = self.fabric.packets.alloc(p, tag);
        if self.pcn.is_some() {
            self.pcn_on_send(id, p.flow);
        }
        (id, p)
    }

    /// Count a packet of `flow` into the network (see [`EndpointPair::retire`]); returns
    /// the tag it carries in the pool: its flow's pair, which stays put while the packet
    /// is counted (`Pairs::NONE` if the flow has none open: a PCN control packet before
    /// the flow starts, counted neither in nor out).
    #[inline]
    pub(super) fn flow_packet_sent(&mut self, flow: u32) -> u32 {
        self.eps.packet_sent(flow)
    }

    /// Count a packet that carried `tag` out of the network; true if it was its flow's last.
    #[inline]
    pub(super) fn flow_packet_gone(&mut self, tag: u32) -> bool {
        self.eps.packet_gone(tag)
    }

    /// The flow's receiver, if nothing can reach it any more, is freed, and its pair too
    /// once nothing refers to it.
    pub(super) fn retire_receiver(&mut self, flow: u32) {
        if self.eps.retire(flow) && self.part.is_some() {
            self.pair_freed(flow);
        }
    }

    /// Pick the egress port at `node` toward the packet's destination and queue it there.
    pub(super) fn forward(&mut self, node: NodeId, h: Hdr) {
        let (dst, flow) = (h.dst, h.flow);
        let pick = match self.scenario.routing.mode {
            RoutingMode::Ecmp => Pick::Ecmp { seed: self.scenario.seed },
            RoutingMode::Spray => Pick::Spray,
        };
        match self.routes.pick(node, dst, flow, pick, &mut self.rng) {
            Some(port) => self.enqueue(port, h),
            None => self.drop(h.id, h.flow, DropReason::NoRoute),
        }
    }

    pub(super) fn enqueue(&mut self, port: PortId, mut h: Hdr) {
        if let Some(w) = &self.fabric.weights {
            h.wire_bytes = w.at_port(port, h.dst, h.flow, h.wire_bytes);
        }
        if self.pcn.is_some() {
            self.pcn_at_port(port, h.id);
        }
        let pr = &mut self.fabric.ports[port as usize];
        if !pr.up {
            pr.queue.count_drop(DropReason::LinkDown);
            return self.drop(h.id, h.flow, DropReason::LinkDown);
        }
        let pool = &mut self.fabric.pools[pr.pool as usize];
        let admit = pr.queue.enqueue(h, &h, pool);
        while let Some(victim) = self.fabric.ports[port as usize].queue.pop_evicted() {
            self.drop(victim.id, victim.flow, DropReason::Evicted);
        }
        let pr = &mut self.fabric.ports[port as usize];
        match admit {
            Admit::Dropped(reason) => {
                if gradwire_core::transport::tcp::trace::drops_on() {
                    self.trace_drop(port, h.id);
                }
                self.drop(h.id, h.flow, reason)
            }
            Admit::Queued { marked } => {
                if marked {
                    self.fabric.packets.get_mut(h.id).ecn.ce = true;
                }
                if !pr.wake_pending {
                    if self.now >= pr.busy_until {
                        self.start_tx(port);
                    } else {
                        pr.wake_pending = true;
                        self.events.push(pr.busy_until, Target::TxDone(port));
                    }
                }
            }
        }
    }

    /// Serialize the next packet. It goes onto the wire at once with its arrival time
    /// (the link is FIFO), so an idle port costs no event when serialization ends: a
    /// `TxDone` wake-up is scheduled only while packets are waiting.
    pub(super) fn start_tx(&mut self, port: PortId) {
        if self.fabric.ports[port as usize].paused > 0 {
            return;
        }
        let Some((_, sent)) = self.fabric.transmit(port, self.now) else { return };
        if self.part.as_ref().is_some_and(|p| p.is_cut(port)) {
            self.export(port);
        } else if sent.first {
            self.events.push(sent.arrives, Target::Arrive(port));
        }
        let pr = &mut self.fabric.ports[port as usize];
        // a host NIC whose endpoints have packets waiting wants the link back too; the
        // port's own queue is asked first
        let waiting = !pr.queue.is_empty()
            || self.ready.any(pr.from)
            || self.flow_queues.as_ref().is_some_and(|q| q.any(pr.from));
        if waiting {
            pr.wake_pending = true;
            self.events.push(sent.done, Target::TxDone(port));
        }
    }

    pub(super) fn tx_done(&mut self, port: PortId) {
        let pr = &mut self.fabric.ports[port as usize];
        pr.wake_pending = false;
        if !pr.up || pr.paused > 0 {
            return;
        }
        if !pr.queue.is_empty() {
            self.start_tx(port);
        } else if self.topo.nodes[pr.from as usize].kind == NodeKind::Host {
            let host = pr.from;
            self.pull_nic(host);
        }
    }

    pub(super) fn arrive(&mut self, port: PortId) {
        // a wire emptied by a failure leaves a stale event behind
        let Some((h, next)) = self.fabric.arrive(port, self.now) else { return };
        let pr = &self.fabric.ports[port as usize];
        if let Some(next) = next {
            self.events.push(next, Target::Arrive(port));
            // the next arrival reads the entry after that one for its own successor
            if let Some(later) = pr.wire.get(1) {
                gradwire_core::prefetch::line(later as *const _ as *const u8);
            }
        }
        let to = pr.to;
        if self.topo.nodes[to as usize].kind == NodeKind::Host {
            // The packets behind this one reach the same host next: load their pooled
            // bodies, flow slots and endpoints while the rest of the network runs.
            if let Some(&(_, n)) = pr.wire.front() {
                self.fabric.packets.prefetch(n.id);
                prefetch_delivery(&self.eps, n.flow, n.dst);
            }
            if let Some(&(_, n)) = pr.wire.get(1) {
                prefetch_slot(&self.eps, 2 * n.flow);
            }
        } else if let Some(&(_, n)) = pr.wire.front() {
            // the next packet is routed at the same switch: load its next-hop entry
            self.routes.prefetch(to, n.dst);
        }
        let loss = self.scenario.topology.link_loss_rate;
        if loss > 0.0 && self.rng.gen::<f64>() < loss {
            self.fabric.ports[port as usize].queue.count_drop(DropReason::RandomLoss);
            return self.drop(h.id, h.flow, DropReason::RandomLoss);
        }
        match self.topo.nodes[to as usize].kind {
            NodeKind::Switch => self.forward(to, h),
            NodeKind::Host => self.receive(to, h.id),
        }
    }

    pub(super) fn receive(&mut self, host: NodeId, id: PktId) {
        let (p, tag) = self.fabric.packets.release(id);
        self.counts.delivered += 1;
        let last = self.flow_packet_gone(tag);
        if !(self.pcn.is_some() && self.pcn_receive(host, id, &p)) {
            self.hand_to_endpoint(host, &p, tag);
        }
        if last {
            self.retire_receiver(p.flow);
        }
    }

    fn hand_to_endpoint(&mut self, host: NodeId, p: &Packet, tag: u32) {
        // direction, not packet kind, picks the endpoint: control packets flow both ways
        let Some(pair) = self.eps.pair_of(tag, p.flow) else {
            self.strays += 1;
            return;
        };
        let side = (host == pair.0[1].host) as usize;
        match &mut pair.0[side].endpoint {
            Some(e) if p.dst == host => e.handle_packet(self.now, p),
            _ => {
                self.strays += 1;
                return;
            }
        }
        self.drive(2 * p.flow + side as u32);
    }

    /// `DROP <t ns> <flow> <kind> <seq> <port>` on stderr (`--features trace`).
    #[cold]
    fn trace_drop(&self, port: PortId, id: PktId) {
        let p = self.fabric.packets.get(id);
        let name = &self.fabric.ports[port as usize].name;
        eprintln!("DROP {} {} {:?} {} {name}", self.now / 1000, p.flow, p.kind, p.seq);
    }

    pub(super) fn drop(&mut self, id: PktId, flow: u32, reason: DropReason) {
        // A drop does not read the packet, whose line is cold: without PCN every packet
        // was counted into its flow's open pair, so the flow's index gives its tag. (PCN
        // sends control packets for flows not started, which carry no pair.)
        let tag = if self.pcn.is_some() { self.fabric.packets.tag(id) } else { self.eps.index_of(flow) };
        self.fabric.packets.release(id);
        self.counts.dropped += 1;
        self.drops_by_reason[reason as usize] += 1;
        if self.flow_packet_gone(tag) {
            self.retire_receiver(flow);
        }
    }
}
