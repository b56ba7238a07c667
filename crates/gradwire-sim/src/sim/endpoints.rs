//! Flows and their endpoints: starting flows, feeding transports, the host NIC pull
//! scheduler, barriers.

use super::eps::{prefetch_endpoint, prefetch_slot};
use super::*;
use gradwire_core::transport::{Endpoint, Hosts};

impl Simulation {
    pub(super) fn start_flow(&mut self, f: u32) {
        if self.pcn.is_some() && self.pcn_gate(f) {
            return;
        }
        self.launch_flow(f);
    }

    pub(super) fn launch_flow(&mut self, f: u32) {
        let spec = &self.workload.flows[f as usize];
        self.flows.get_or_alloc(f, FlowState::default).set_started(Some(self.now));
        let nic = self.fabric.node_ports[spec.src as usize][0];
        let rate = self.fabric.ports[nic as usize].bits_per_sec;
        let (sender, mut receiver) = self.factory.make(f, spec, rate, self.now, &mut self.hosts);
        // a receiver in another part is made there, at the flow's first packet
        let receiver_here = self.part.as_ref().is_none_or(|p| p.owns(spec.dst));
        if !receiver_here {
            receiver = parallel::receiver_elsewhere();
        }
        // receivers send ACKs and control: they go first
        let class = self.factory.data_class(spec).min(self.scenario.switch.queues - 1);
        let pair = self.eps.open(f, spec.src, spec.dst, sender, receiver);
        pair.0[0].class = class;
        self.drive(2 * f);
        if receiver_here {
            self.drive(2 * f + 1);
        }
    }

    pub(super) fn start_batch(&mut self) {
        while let Some(&f) = self.starts.get(self.next_start) {
            let t = self.workload.flows[f as usize].start;
            if t > self.now {
                self.events.push(t, Target::Starts);
                break;
            }
            self.next_start += 1;
            self.start_flow(f);
        }
    }

    pub(super) fn timer(&mut self, ep: u32) {
        self.reopen_if_retired(ep);
        let Some(sl) = self.eps.slot_mut(ep) else { return };
        if sl.timer_at == self.now {
            sl.timer_at = Time::MAX;
        }
        let Some(e) = sl.endpoint.as_mut() else { return };
        if e.poll_timeout().is_some_and(|t| t <= self.now) {
            self.late_timeouts += late(&**e, self.now);
            e.handle_timeout_with(self.now, self.hosts.host(sl.host));
        }
        self.drive(ep);
    }

    /// After an endpoint was fed: settle its events and timer, and offer it to its host's
    /// NIC, which pulls packets one at a time when the link is free (see `pull_nic`).
    pub(super) fn drive(&mut self, ep: u32) {
        self.reopen_if_retired(ep);
        let Some(sl) = self.eps.slot_mut(ep) else { return };
        if self.fifo_nic {
            return self.drive_fifo(ep);
        }
        if self.flow_queues.is_some() {
            return self.drive_flow_queued(ep);
        }
        if sl.endpoint.is_none() {
            return;
        }
        let host = sl.host;
        if !sl.in_ready {
            sl.in_ready = true;
            self.ready.push_back(host, sl.class, ep);
        }
        self.settle(ep);
        self.pull_nic(host);
    }

    /// Drain an endpoint's events and re-arm its timer.
    pub(super) fn settle(&mut self, ep: u32) {
        let now = self.now;
        let Some(sl) = self.eps.slot_mut(ep) else { return };
        let Some(e) = sl.endpoint.as_mut() else {
            // a finished sender popped off the ready list: the pair may go now
            return self.retire_receiver(ep / 2);
        };
        let mut delivered = false;
        let mut sender_done = false;
        let mut woken = false;
        let mut handed = false;
        while let Some(ev) = e.poll_event() {
            match ev {
                EndpointEvent::Delivered { .. } => delivered = true,
                EndpointEvent::SenderDone => sender_done = true,
                EndpointEvent::Wake { flow } => {
                    self.woken.push(flow);
                    woken = true;
                }
                EndpointEvent::HandOn => {
                    hand_on(&mut **e, &mut self.hosts, sl.host);
                    handed = true;
                }
            }
        }
        // An endpoint waiting for the NIC is asked for a packet whenever the NIC is free,
        // so its pacing slot needs no wake-up (a no-op event per paced packet, most of
        // DLCP's timers). And a due deadline of it is served when the NIC polls it
        // (`pull_nic` runs due timeouts first); arming it again now would spin in place.
        let deadline = if sl.in_ready { e.poll_timeout_unpaced() } else { e.poll_timeout() };
        if let Some(t) = deadline.filter(|&t| t > now || !sl.in_ready) {
            if t < sl.timer_at {
                sl.timer_at = t;
                self.events.push(t.max(now), Target::Timer(ep));
            }
        }
        let (flow, host) = (ep / 2, sl.host);
        if sender_done {
            // keep the receiver: a late retransmission still gets its ACK. The sender's
            // counters are final now; while it lives, `flow_stats` asks it.
            self.flows.get_or_alloc(flow, FlowState::default).set_stats(e.stats());
            if let Some(sl) = self.eps.slot_mut(ep) {
                sl.endpoint = None;
            }
        }
        if handed {
            self.refresh_stale(host);
        }
        if delivered {
            self.finish_flow(flow);
        }
        if woken {
            self.wake_senders();
        }
        if self.eps.get(flow).is_some_and(|p| p.0[0].endpoint.is_none()) {
            self.retire_receiver(flow);
        }
    }

    /// The flows whose view of `host`'s shared state an endpoint just changed (a DLCP
    /// pair's count of senders with data) read it again, before any of them is asked for
    /// a packet.
    pub(super) fn refresh_stale(&mut self, host: u32) {
        let state = self.hosts.host(host);
        while let Some(flow) = state.take_stale() {
            if let Some(e) = self.eps.get_mut(flow).and_then(|p| p.0[0].endpoint.as_mut()) {
                e.hand_on(state);
            }
        }
    }

    /// Senders that may pace faster now (`EndpointEvent::Wake`): one waiting for its slot
    /// off the ready list is asked again now, by a timer due now (not at once: `settle`
    /// runs inside the NIC's pull loop).
    fn wake_senders(&mut self) {
        let now = self.now;
        for i in 0..self.woken.len() {
            let ep = 2 * self.woken[i];
            let Some(pair) = self.eps.get_mut(ep / 2) else { continue };
            let sl = &mut pair.0[0];
            if sl.endpoint.is_some() && !sl.in_ready && sl.timer_at > now {
                sl.timer_at = now;
                self.events.push(now, Target::Timer(ep));
            }
        }
        self.woken.clear();
    }

    /// Flow f's sender counters: the live sender's, or those it closed with.
    pub fn flow_stats(&self, f: u32) -> EndpointStats {
        match self.eps.get(f).and_then(|p| p.0[0].endpoint.as_ref()) {
            Some(e) => e.stats(),
            None => self.flow_state(f).stats(),
        }
    }

    /// The host NIC as a scheduler, like a qdisc with per-flow queues and socket
    /// backpressure: when the link is free it asks ready endpoints, highest class first and
    /// round-robin within a class, for one packet. A host therefore never sends faster than
    /// its line rate however many flows pace themselves at line rate, and nothing piles up.
    pub(super) fn pull_nic(&mut self, host: u32) {
        let port = self.fabric.node_ports[host as usize][0];
        let pr = &mut self.fabric.ports[port as usize];
        if !pr.up || pr.paused > 0 || pr.wake_pending || !pr.queue.is_empty() {
            return;
        }
        if self.now < pr.busy_until {
            pr.wake_pending = true;
            self.events.push(pr.busy_until, Target::TxDone(port));
            return;
        }
        if self.flow_queues.is_some() {
            return self.pull_flow_queue(host);
        }
        let now = self.now;
        while let Some(class) = self.ready.first_class(host) {
            let ep = self.ready.pop_front(host, class).expect("a non-empty class");
            if self.holds_sender(host, ep) {
                self.hold_sender(host, class, ep);
                continue;
            }
            let sl = self.eps.slot_mut(ep).expect("a ready endpoint's pair is open");
            let late_timeouts = &mut self.late_timeouts;
            let hosts = &mut self.hosts;
            let packet = sl.endpoint.as_mut().and_then(|e| {
                if e.poll_timeout().is_some_and(|t| t <= now) {
                    *late_timeouts += late(&**e, now);
                    e.handle_timeout_with(now, hosts.host(host));
                }
                e.poll_transmit(now)
            });
            match packet {
                Some(p) => {
                    // it may have more: back of its class
                    self.ready.push_back(host, class, ep);
                    // The next pulls on this host serve the flows at the front: start
                    // loading them now (one NIC slot of simulated time, hundreds of
                    // events, before they are needed). Output is unchanged.
                    if let Some(next) = self.ready.get(host, class, 0) {
                        prefetch_endpoint(&self.eps, next);
                    }
                    if let Some(after) = self.ready.get(host, class, 1) {
                        prefetch_slot(&self.eps, after);
                    }
                    self.send_from_host(p);
                    self.settle(ep);
                    return;
                }
                None => {
                    sl.in_ready = false;
                    self.settle(ep);
                }
            }
        }
    }

    pub(super) fn finish_flow(&mut self, f: u32) {
        let src = self.workload.flows[f as usize].src;
        match self.part.as_mut().filter(|p| !p.owns(src)) {
            // a sender elsewhere: its part keeps the flow's record
            Some(part) => {
                if !part.finish_remote(f, self.now) {
                    return;
                }
            }
            None => {
                let st = self.flows.get_or_alloc(f, FlowState::default);
                if st.finished().is_some() {
                    return;
                }
                st.set_finished(Some(self.now));
            }
        }
        self.flows_done += 1;
        for i in 0..self.workload.feeds(f).len() {
            let b = self.workload.feeds(f)[i] as usize;
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

impl Simulation {
    /// Before a timer or a drive of endpoint `ep` of a started flow: if it is a receiver
    /// whose pair was freed, the pair comes back with it retired (see
    /// [`super::eps::Pairs::reopen_retired`]).
    #[inline]
    fn reopen_if_retired(&mut self, ep: u32) {
        if ep % 2 == 1 && !self.eps.is_open(ep / 2) {
            self.reopen_retired(ep / 2);
        }
    }

    #[cold]
    #[inline(never)]
    fn reopen_retired(&mut self, flow: u32) {
        let spec = &self.workload.flows[flow as usize];
        debug_assert!(
            self.flow_state(flow).started().is_some() || self.part.as_ref().is_some_and(|p| p.opened(flow)),
            "flow {flow} has not started"
        );
        self.eps.reopen_retired(flow, spec.src, spec.dst);
    }
}

/// `e`'s hand-on to its host's state. Out of line: most events are not hand-ons, and
/// `settle` runs after every packet.
#[cold]
#[inline(never)]
fn hand_on(e: &mut dyn Endpoint, hosts: &mut Hosts, host: u32) {
    e.hand_on(hosts.host(host))
}

/// 1 if `e` has a deadline other than pacing that passed before `now`.
#[inline]
fn late(e: &dyn Endpoint, now: Time) -> u64 {
    e.poll_timeout_unpaced().is_some_and(|t| t < now) as u64
}
