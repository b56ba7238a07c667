//! Writing: endpoints' packets, senders' through one NIC clock, into per-peer batches
//! (data) or onto control links; delayed (injected) datagrams.

use gradwire_core::time::serialization;

use super::*;

/// The host's NIC as the senders see it: one clock for all of them at the line rate.
/// Each sender paces itself at its own rate; without a shared clock two transfers to one
/// peer (a ring step starting while the previous one still sends) each pace at line rate
/// and offer twice what the link carries, and DLCP's rate control halves only when more
/// than half is lost (Δ = 2), so a bounded NIC queue drops the excess instead.
#[derive(Default)]
pub(super) struct Nic {
    /// When the data sent so far has left, at `rate_bps`.
    at: Time,
    rate_bps: u64,
    /// Senders, oldest transfer first: the order the NIC's share goes in.
    order: Vec<u32>,
}

impl Nic {
    /// When the NIC lets the next packet go in a turn sending up to `burst` ahead.
    pub(super) fn free_at(&self, burst: Time) -> Time {
        self.at.saturating_sub(burst)
    }
}

impl Engine {
    /// Every endpoint's packets that may leave now (paced senders run a burst ahead of
    /// their slots, see `TransportConfig::burst`), up to [`TX_BUDGET`] each; senders in
    /// transfer order until the [`Nic`]'s clock passes `now + burst`. True if an endpoint
    /// had more than its budget.
    pub(super) fn transmit(&mut self, now: Time) -> bool {
        let burst = self.cfg.transport.burst;
        let mut out = std::mem::take(&mut self.txq);
        let mut more = false;
        let nic = &mut self.nic;
        nic.rate_bps = self.cfg.transport.line_rate_bps.max(1);
        nic.at = nic.at.max(now.saturating_sub(self.cfg.transport.max_catch_up));
        nic.order.clear();
        nic.order.extend(self.slots.iter().filter(|(_, s)| !s.ep.is_receiver()).map(|(&f, _)| f));
        nic.order.sort_unstable();
        let limit = now + burst;
        for i in 0..nic.order.len() {
            let flow = nic.order[i];
            let Some(slot) = self.slots.get_mut(&flow) else { continue };
            let ep = slot.ep.endpoint();
            let mut n = 0;
            while n < TX_BUDGET && nic.at <= limit {
                let Some(p) = ep.poll_transmit(now) else { break };
                if p.kind == PacketKind::Data {
                    nic.at += serialization(p.wire_bytes, nic.rate_bps);
                }
                out.push((flow, p));
                n += 1;
            }
            more |= n == TX_BUDGET;
        }
        for (&flow, slot) in self.slots.iter_mut().filter(|(_, s)| s.ep.is_receiver()) {
            let ep = slot.ep.endpoint();
            let mut n = 0;
            while n < TX_BUDGET {
                let Some(p) = ep.poll_transmit(now) else { break };
                out.push((flow, p));
                n += 1;
            }
            more |= n == TX_BUDGET;
        }
        for (flow, p) in out.drain(..) {
            self.emit(flow, &p, now);
        }
        self.txq = out;
        // What was sent needs no turn of its own: a paced sender's next slot is its
        // deadline (`sleep_for`), and what the turn's events start makes it busy.
        more
    }

    pub(super) fn emit(&mut self, flow: u32, p: &Packet, now: Time) {
        let Some(slot) = self.slots.get(&flow) else { return };
        let (peer, transfer, call) = (slot.peer, slot.transfer, slot.call);
        let is_data = p.kind == PacketKind::Data;
        let header = Header {
            kind: p.kind,
            ect: p.ecn.ect,
            ce: p.ecn.ce,
            ece: p.ece,
            priority: p.priority.min(7),
            session: self.session,
            flow,
            payload_len: if is_data { p.len } else { 0 },
            seq: p.seq,
        };
        if matches!(p.kind, PacketKind::Ctrl(_) | PacketKind::CtrlAck(_)) {
            self.fence |= p.kind == PacketKind::Ctrl(CtrlOp::Stop);
            if let Some(l) = self.links[peer as usize].as_mut() {
                l.queue(&header);
            }
            return;
        }
        let mut head = [0u8; HEADER_LEN];
        header.encode(&mut head);
        let job = self.job.as_mut().filter(|j| j.call == call);
        let payload: &[u8] = match (is_data, job) {
            (false, _) => &[],
            (true, Some(job)) => {
                job.report.bytes_sent += p.len as u64;
                job.report.packets_sent += 1;
                job.payload(transfer, p.seq, p.len)
            }
            (true, None) => return, // the call is gone: nothing to send from
        };
        if self.inject.drop_now(peer) {
            return;
        }
        let tos = tos_byte(p.priority, p.ecn.ect);
        let delay = self.inject.get(peer).delay;
        let tag = self.cfg.auth.as_ref().map(|k| k.datagram_tag(self.rank, peer, &[&head, payload]));
        if !delay.is_zero() {
            let datagram = [&head[..], payload, tag.as_ref().map_or(&[][..], |t| &t[..])].concat();
            let release = now + delay.as_nanos() as Time * 1000;
            self.inject.held[peer as usize].push_back(Delayed { release, tos, datagram });
            return;
        }
        let len = HEADER_LEN + payload.len() + tag.map_or(0, |t| t.len());
        let payload = Payload(payload.as_ptr(), payload.len());
        let limit = self.udp.batch_limit(len);
        let i = match self.batches.iter().position(|b| b.peer == peer && b.tos == tos && !b.closed && len <= b.seg) {
            Some(i) => i,
            None => {
                // The key's closed batch leaves first, so datagrams keep their order.
                if let Some(i) = self.batches.iter().position(|b| b.peer == peer && b.tos == tos) {
                    let b = self.batches.swap_remove(i);
                    self.send_one(b);
                }
                let b = self.outbox.batch(peer, tos, len);
                self.batches.push(b);
                self.batches.len() - 1
            }
        };
        let b = &mut self.batches[i];
        b.heads.push(head);
        b.payloads.push(payload);
        if let Some(t) = tag {
            b.tails.push(t);
        }
        // GSO: every datagram but the last has the full segment size.
        b.closed = len < b.seg || b.count() >= limit;
    }

    pub(super) fn send_one(&mut self, b: Batch) {
        self.outbox.send(b);
    }

    pub(super) fn flush_batches(&mut self) {
        let mut batches = std::mem::take(&mut self.batches);
        for b in batches.drain(..) {
            self.send_one(b);
        }
        self.batches = batches;
    }

    pub(super) fn release_delayed(&mut self, now: Time) {
        for peer in 0..self.inject.held.len() {
            while self.inject.held[peer].front().is_some_and(|d| d.release <= now) {
                let d = self.inject.held[peer].pop_front().expect("front");
                self.outbox.send_owned(peer as u32, d.tos, &d.datagram);
            }
        }
    }

    pub(super) fn flush_links(&mut self) {
        if std::mem::take(&mut self.fence) {
            self.flush_batches();
            self.outbox.wait_idle();
        }
        let mut lost = Vec::new();
        for (peer, link) in self.links.iter_mut().enumerate() {
            if let Some(l) = link.as_mut() {
                if let Err(e) = l.flush() {
                    lost.push((peer as u32, e));
                }
            }
        }
        for (peer, e) in lost {
            self.peer_down(peer, e);
        }
    }
}
