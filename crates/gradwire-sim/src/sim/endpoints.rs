//! Flows and their endpoints: starting flows, feeding transports, the host NIC pull
//! scheduler, barriers.

use super::*;

impl Simulation {

    pub(super) fn start_flow(&mut self, f: u32) {
        let spec = &self.workload.flows[f as usize];
        self.flows[f as usize].started = Some(self.now);
        let nic = self.fabric.node_ports[spec.src as usize][0];
        let rate = self.fabric.ports[nic as usize].bits_per_sec;
        let (sender, receiver) = self.factory.make(f, spec, rate, self.now);
        // receivers send ACKs and control: they go first
        self.ep_class[2 * f as usize] = self.factory.data_class(spec).min(self.scenario.switch.queues - 1);
        self.endpoints[2 * f as usize] = Some(sender);
        self.endpoints[2 * f as usize + 1] = Some(receiver);
        self.drive(2 * f);
        self.drive(2 * f + 1);
    }

    pub(super) fn start_batch(&mut self) {
        while let Some(&(t, f)) = self.starts.get(self.next_start) {
            if t > self.now {
                self.events.push(t, Target::Starts);
                break;
            }
            self.next_start += 1;
            self.start_flow(f);
        }
    }

    pub(super) fn timer(&mut self, ep: u32) {
        if self.timer_at[ep as usize] == self.now {
            self.timer_at[ep as usize] = Time::MAX;
        }
        let Some(e) = self.endpoints[ep as usize].as_mut() else { return };
        if e.poll_timeout().is_some_and(|t| t <= self.now) {
            e.handle_timeout(self.now);
        }
        self.drive(ep);
    }

    /// After an endpoint was fed: settle its events and timer, and offer it to its host's
    /// NIC, which pulls packets one at a time when the link is free (see `pull_nic`).
    pub(super) fn drive(&mut self, ep: u32) {
        if self.endpoints[ep as usize].is_none() {
            return;
        }
        let host = self.host_of(ep);
        if !self.in_ready[ep as usize] {
            self.in_ready[ep as usize] = true;
            let class = self.ep_class[ep as usize] as usize;
            self.ready[host as usize][class].push_back(ep);
            self.ready_count[host as usize] += 1;
        }
        self.settle(ep);
        self.pull_nic(host);
    }

    /// Drain an endpoint's events and re-arm its timer.
    pub(super) fn settle(&mut self, ep: u32) {
        let now = self.now;
        let Some(e) = self.endpoints[ep as usize].as_mut() else { return };
        let mut delivered = false;
        let mut sender_done = false;
        while let Some(ev) = e.poll_event() {
            match ev {
                EndpointEvent::Delivered { .. } => delivered = true,
                EndpointEvent::SenderDone => sender_done = true,
            }
        }
        let deadline = e.poll_timeout();
        let stats = e.stats();
        // A due deadline of an endpoint waiting for the NIC is served when the NIC polls it
        // (`pull_nic` runs due timeouts first); arming it again now would spin in place.
        let waiting = self.in_ready[ep as usize];
        if let Some(t) = deadline.filter(|&t| t > now || !waiting) {
            if t < self.timer_at[ep as usize] {
                self.timer_at[ep as usize] = t;
                self.events.push(t.max(now), Target::Timer(ep));
            }
        }
        let flow = ep / 2;
        if ep % 2 == 0 {
            self.flows[flow as usize].stats = stats;
        }
        if delivered {
            self.finish_flow(flow);
        }
        if sender_done {
            // keep the receiver: a late retransmission still gets its ACK
            self.endpoints[ep as usize] = None;
        }
    }

    pub(super) fn host_of(&self, ep: u32) -> u32 {
        let spec = &self.workload.flows[(ep / 2) as usize];
        if ep % 2 == 0 {
            spec.src
        } else {
            spec.dst
        }
    }

    /// The host NIC as a scheduler, like a qdisc with per-flow queues and socket
    /// backpressure: when the link is free it asks ready endpoints, highest class first and
    /// round-robin within a class, for one packet. A host therefore never sends faster than
    /// its line rate however many flows pace themselves at line rate, and nothing piles up.
    pub(super) fn pull_nic(&mut self, host: u32) {
        let port = self.fabric.node_ports[host as usize][0];
        let pr = &mut self.fabric.ports[port as usize];
        if !pr.up || pr.wake_pending || !pr.queue.is_empty() {
            return;
        }
        if self.now < pr.busy_until {
            pr.wake_pending = true;
            self.events.push(pr.busy_until, Target::TxDone(port));
            return;
        }
        let now = self.now;
        for class in 0..self.ready[host as usize].len() {
            while let Some(ep) = self.ready[host as usize][class].pop_front() {
                let packet = self.endpoints[ep as usize].as_mut().and_then(|e| {
                    if e.poll_timeout().is_some_and(|t| t <= now) {
                        e.handle_timeout(now);
                    }
                    e.poll_transmit(now)
                });
                match packet {
                    Some(p) => {
                        // it may have more: back of its class
                        self.ready[host as usize][class].push_back(ep);
                        self.send_from_host(p);
                        self.settle(ep);
                        return;
                    }
                    None => {
                        self.in_ready[ep as usize] = false;
                        self.ready_count[host as usize] -= 1;
                        self.settle(ep);
                    }
                }
            }
        }
    }

    pub(super) fn finish_flow(&mut self, f: u32) {
        let st = &mut self.flows[f as usize];
        if st.finished.is_some() {
            return;
        }
        st.finished = Some(self.now);
        self.flows_done += 1;
        for i in 0..self.workload.flows[f as usize].feeds.len() {
            let b = self.workload.flows[f as usize].feeds[i] as usize;
            self.barrier_left[b] -= 1;
            if self.barrier_left[b] == 0 {
                for j in 0..self.workload.barriers[b].releases.len() {
                    let g = self.workload.barriers[b].releases[j];
                    let spec = &self.workload.flows[g as usize];
                    let at = spec.start.max(self.now + spec.gate_delay);
                    self.events.push(at, Target::FlowStart(g));
                }
            }
        }
    }
}
