//! A call's lifecycle at this rank: posting its receives, starting the sends its
//! schedule makes ready, finishing transfers, completing or failing the call.

use super::*;

impl Engine {
    pub(super) fn start_next_call(&mut self) -> bool {
        // A gated call starts once its gate opens (the opener wakes the engine); calls
        // behind it wait, so the order every rank issued them in stays the order they run.
        if self.queue.front().and_then(|r| r.gate.as_ref()).is_some_and(|g| !g.load(Ordering::Acquire)) {
            return false;
        }
        let Some(req) = self.queue.pop_front() else { return false };
        let call = self.next_call;
        self.next_call = self.next_call.wrapping_add(1) & CALL_MASK;
        // Tell every peer what this call is, first: they check it against theirs.
        let mut desc = CallDesc::new(self.session, req.kind, &req.schedule, req.dtype.size(), self.cfg.transport.kind);
        desc.call = self.calls_started;
        self.calls_started += 1;
        for link in self.links.iter_mut().flatten() {
            link.queue_desc(&desc);
        }
        if let Some(why) = &self.broken {
            let _ = req
                .reply
                .send(Err(NetError::Protocol(format!("the communicator is unusable after an earlier failure: {why}"))));
            return true;
        }
        let s = req.schedule.clone();
        // A partner of this rank that is already gone cannot finish its part of this call
        // (each side of a transfer waits for the other); a rank we never talk to may have
        // finished the call and exited already, so it does not count.
        let me = self.rank;
        let partner = |r: u32| s.transfers.iter().any(|t| (t.src == me && t.dst == r) || (t.src == r && t.dst == me));
        if let Some(r) = (0..s.world).find(|&r| partner(r) && self.down[r as usize].is_some()) {
            let detail = self.down[r as usize].clone().unwrap_or_default();
            let _ = req.reply.send(Err(NetError::PeerLost { rank: r, detail }));
            return true;
        }
        let mut job = Job::new(call, s.clone(), self.rank, req.buf, req.dtype, req.reply);
        job.desc = Some(desc);
        job.unverified = (0..s.world).filter(|&r| r != me && self.links[r as usize].is_some()).collect();
        let now = self.now();
        if self.tracer.on() {
            eprintln!(
                "t={:.3}ms rank {} starts call {call} ('{}'), {} early datagrams kept unix={:.6}",
                now as f64 / 1e9,
                self.rank,
                s.name,
                self.early.len(),
                super::trace::unix_now()
            );
        }
        for t in s.receives_of(self.rank) {
            job.post_receive(t);
            let spec = self.spec(&s, call, t, job.dtype);
            let mut receiver =
                self.transports.receiver(&spec, &mut self.host).expect("the runtime's transports place payload");
            receiver.post(now);
            let ep = Ep::Recv(receiver);
            self.slots.insert(spec.flow, Slot { ep, call, transfer: t, peer: spec.src, finished: false });
        }
        self.job = Some(job);
        // Peers that started this call first: their descriptors are queued.
        for peer in 0..self.peer_descs.len() {
            while let Some(d) = self.peer_descs[peer].front().copied().filter(|d| d.call <= desc.call) {
                self.peer_descs[peer].pop_front();
                if d.call == desc.call {
                    self.verify(peer as u32, d);
                }
            }
        }
        if self.job.is_none() {
            return true; // failed: a mismatch
        }
        // Data that arrived before this call was posted (kept, or left in the socket: see
        // `should_read`), then its control (a STOP must find the data its round sent
        // already placed).
        self.replay_early(call, now);
        if let Some((queued, _)) = self.udp.receive_queue().filter(|&(b, _)| b > 0) {
            self.receive_datagrams(queued);
        }
        let stash = std::mem::take(&mut self.stash);
        for (from, h) in stash {
            if call_of(h.flow) == call {
                self.dispatch(from, &h, Incoming::Bytes(&[]), now);
            } else if is_future(call_of(h.flow), self.next_call) {
                self.stash.push((from, h));
            }
        }
        self.start_ready_sends(now);
        self.maybe_complete();
        true
    }

    /// Transfer `t` of the call as the core's transfer: lossy only within its bound, data
    /// in queues 1..=7 (0 is control's).
    pub(super) fn spec(&self, s: &Schedule, call: u16, t: TransferId, dtype: Dtype) -> Transfer {
        let tr = &s.transfers[t as usize];
        Transfer {
            flow: flow_id(call, t),
            src: tr.src,
            dst: tr.dst,
            bytes: tr.bytes(),
            loss_bound: tr.loss_bound,
            loss_tolerant: tr.loss_bound > 0.0,
            priority: tr.priority.clamp(1, 7),
            elem_bytes: dtype.size(),
            line_rate_bps: self.cfg.transport.line_rate_bps,
            important_fraction: None,
            idle_rtt: None,
        }
    }

    pub(super) fn start_ready_sends(&mut self, now: Time) {
        let Some(job) = self.job.as_mut() else { return };
        let mut started = Vec::new();
        while let Some(t) = job.exec.poll_ready() {
            started.push(t);
        }
        for t in started {
            let job = self.job.as_ref().expect("job");
            let spec = self.spec(&job.schedule, job.call, t, job.dtype);
            // Importance from the real gradient values (DLCP §3.2.2), only when loss is allowed.
            let mss = self.cfg.transport.mss as usize;
            let importance = (spec.loss_bound > 0.0)
                .then(|| job.send_f32(t).map(|g| importance_mask(g, (mss / 4).max(1))))
                .flatten();
            let mut sender =
                self.transports.sender(&spec, now, &mut self.host).expect("the runtime's transports place payload");
            if let Some(mask) = importance {
                sender.set_importance_mask(mask);
            }
            if self.tracer.on() {
                let tr = &job.schedule.transfers[t as usize];
                eprintln!(
                    "t={:.3}ms rank {} call {} starts transfer {t} ({} -> {}, {} B) unix={:.6}",
                    self.epoch.elapsed().as_secs_f64() * 1e3,
                    self.rank,
                    job.call,
                    tr.src,
                    tr.dst,
                    tr.bytes(),
                    super::trace::unix_now()
                );
            }
            let (ep, call) = (Ep::Send(sender), job.call);
            self.slots.insert(spec.flow, Slot { ep, call, transfer: t, peer: spec.dst, finished: false });
            self.job.as_mut().expect("job").report.transfers_sent += 1;
        }
    }

    /// Reports transfer `t` of the current call finished at this rank.
    pub(super) fn finish_transfer(&mut self, flow: u32) {
        let Some(slot) = self.slots.get_mut(&flow) else { return };
        if slot.finished {
            return;
        }
        let Some(job) = self.job.as_mut().filter(|j| j.call == slot.call) else { return };
        slot.finished = true;
        let t = slot.transfer;
        if slot.ep.is_receiver() {
            let bubbles = slot.ep.bubbles();
            job.apply(t, &bubbles);
            if slot.ep.needs_close_notice() {
                // No closing handshake for a complete transfer (LTP): say so on the
                // reliable link, or a sender that lost the last ACKs resends forever.
                if let Some(l) = self.links[slot.peer as usize].as_mut() {
                    l.queue_received(self.session, flow);
                }
            }
        }
        let stats = slot.ep.stats();
        if !slot.ep.is_receiver() {
            job.report.retransmits += stats.retransmits;
        }
        let _ = job.exec.finished(&job.schedule, t);
        if self.tracer.on() {
            let tr = &job.schedule.transfers[t as usize];
            let at = self.epoch.elapsed().as_secs_f64() * 1e3;
            eprintln!(
                "t={at:.3}ms rank {} call {} finished transfer {t} ({} -> {}, {} B, {}) unix={:.6} packets {} retransmits {} timeouts {}",
                self.rank,
                job.call,
                tr.src,
                tr.dst,
                tr.bytes(),
                if slot.ep.is_receiver() { "received" } else { "sent" },
                super::trace::unix_now(),
                stats.packets_sent,
                stats.retransmits,
                stats.timeouts
            );
        }
        let now = self.now();
        self.start_ready_sends(now);
        self.maybe_complete();
    }

    /// The receiver of an LTP transfer this rank sends has all it will take: the send is
    /// over (whatever ACKs were lost), and the endpoint has nothing left to say.
    pub(super) fn on_received(&mut self, peer: u32, session: u64, flow: u32) {
        if session != self.session {
            self.local.foreign_session += 1;
            return;
        }
        match self.slots.get(&flow) {
            Some(s) if s.peer == peer && !s.ep.is_receiver() => {
                self.finish_transfer(flow);
                self.slots.remove(&flow);
            }
            _ => self.local.stale += 1,
        }
    }

    /// A peer's descriptor arrived: check it now if it is for the current call, keep it
    /// if it is for a later one.
    pub(super) fn on_descriptor(&mut self, peer: u32, d: CallDesc) {
        if d.session != self.session {
            self.local.foreign_session += 1;
            return;
        }
        let current = self.job.as_ref().and_then(|j| j.desc).map_or(self.calls_started, |c| c.call);
        if d.call == current && self.job.is_some() {
            self.verify(peer, d);
        } else if d.call >= current {
            let q = &mut self.peer_descs[peer as usize];
            if q.len() >= STASH_LIMIT {
                self.local.malformed += 1; // a peer this far ahead is flooding, not calling
                return;
            }
            q.push_back(d);
        } else {
            self.local.stale += 1;
        }
    }

    /// Checks `peer`'s descriptor against the current call's; a difference fails the call.
    pub(super) fn verify(&mut self, peer: u32, theirs: CallDesc) {
        let Some(job) = self.job.as_mut() else { return };
        let Some(mine) = job.desc else { return };
        job.progressed = true;
        if let Some((field, a, b)) = mine.difference(&theirs) {
            let err = NetError::CallMismatch {
                call: mine.call,
                ranks: (self.rank, peer),
                field: field.to_string(),
                values: (a, b),
            };
            self.fail_call(err);
            return;
        }
        job.unverified.retain(|&r| r != peer);
        self.maybe_complete();
    }

    pub(super) fn maybe_complete(&mut self) {
        // Complete once this rank's transfers are done and every live peer has confirmed
        // the call is the same on its side.
        if !self.job.as_ref().is_some_and(|j| j.exec.is_complete() && j.unverified.is_empty()) {
            return;
        }
        // The batches in flight point into the call's buffer, which the reply gives back.
        self.outbox.wait_idle();
        let mut job = self.job.take().expect("job");
        let report = job.finish_report();
        if self.tracer.on() {
            eprintln!("t={:.3}ms rank {} call {} complete", self.now() as f64 / 1e9, self.rank, job.call);
        }
        let _ = job.reply.send(Ok(report));
    }

    pub(super) fn fail_call(&mut self, err: NetError) {
        if let Some(job) = self.job.take() {
            self.outbox.wait_idle(); // as in `maybe_complete`
            self.broken = Some(err.to_string());
            let call = job.call;
            self.slots.retain(|_, s| s.call != call);
            let _ = job.reply.send(Err(err));
        }
    }

    pub(super) fn fail_all(&mut self, err: NetError) {
        let msg = err.to_string();
        self.fail_call(err);
        for req in self.queue.drain(..) {
            let _ = req.reply.send(Err(NetError::Protocol(msg.clone())));
        }
    }

    pub(super) fn check_stall(&mut self) {
        let Some(job) = self.job.as_mut() else { return };
        // Packets mark progress; the clock is read once per turn, not once per packet.
        if std::mem::take(&mut job.progressed) {
            job.last_progress = Instant::now();
        }
        let waited = job.last_progress.elapsed();
        if waited < self.cfg.peer_timeout {
            return;
        }
        let call = job.call;
        let mut peers: Vec<u32> =
            self.slots.values().filter(|s| s.call == call && !s.finished).map(|s| s.peer).collect();
        peers.sort_unstable();
        peers.dedup();
        let what = if peers.is_empty() && !job.unverified.is_empty() {
            format!(
                "rank {} finished its part of collective '{}' (call {}) but ranks {:?} never started it (a rank skipped a call?)",
                self.rank, job.schedule.name, call, job.unverified
            )
        } else {
            format!(
                "rank {} got nothing for collective '{}' (call {}) from its peers; transfers with ranks {:?} are unfinished (dead or stalled peer?)",
                self.rank, job.schedule.name, call, peers
            )
        };
        self.fail_call(NetError::Timeout { what, waited });
    }
}
