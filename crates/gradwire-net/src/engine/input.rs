//! Reading: datagrams (in place where they can go, else through the receive buffers),
//! control frames, and dispatching both to the endpoints.

use super::*;
use crate::inbound::{authenticate, direct_header, Rejected, DIRECT_MIN};

/// What [`Engine::receive_direct`] did with the next datagram.
pub(super) enum Direct {
    /// Nothing is waiting.
    Empty,
    /// Read into place; its length.
    Landed(usize),
    /// Left for the usual read; `large`: at least `DIRECT_MIN` of payload.
    Declined { large: bool },
}

/// A datagram's payload as [`Engine::dispatch`] gets it.
#[derive(Clone, Copy)]
pub(super) enum Incoming<'a> {
    /// In the receive buffer, to be placed.
    Bytes(&'a [u8]),
    /// Already read into its place ([`Engine::receive_direct`]); this many bytes.
    Landed(u32),
}

impl Engine {
    /// Reads and handles datagrams until the socket is empty or about `max_bytes` have
    /// been read; true if it stopped at `max_bytes` (more may be waiting).
    pub(super) fn receive_datagrams(&mut self, max_bytes: usize) -> bool {
        let now = self.now();
        let (mut count, mut bytes) = (0usize, 0usize);
        // The receive buffers are borrowed while the datagrams are handled, which needs
        // `&mut self`: move them out for the read.
        let mut bufs = std::mem::take(&mut self.rbufs);
        // An authenticated job checks every tag before a byte is placed: no direct reads.
        let direct = self.cfg.transport.mss as usize >= DIRECT_MIN && self.cfg.auth.is_none();
        while bytes < max_bytes {
            // A batched read would also take the large datagrams behind this one, which
            // could have gone straight into place: after a large one, read one at a time.
            let mut batch = usize::MAX;
            if direct {
                match self.receive_direct(now) {
                    Direct::Empty => break,
                    Direct::Landed(n) => {
                        count += 1;
                        bytes += n;
                        continue;
                    }
                    Direct::Declined { large } => batch = if large { 1 } else { usize::MAX },
                }
            }
            match self.udp.recv(&mut bufs, batch) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    self.fail_all(NetError::io("receiving datagrams", e));
                    break;
                }
            }
            for (d, ce, source) in bufs.datagrams_from() {
                count += 1;
                bytes += d.len();
                let from = self.peer_ranks.get(&source).copied();
                self.on_datagram(d, ce, from, now);
            }
        }
        self.rbufs = bufs;
        self.local.datagrams_received += count as u64;
        let more = bytes >= max_bytes;
        self.wait.after_read(now, count, more);
        more
    }

    /// Reads the next datagram straight into the caller's buffer when it is a large data
    /// segment of a direct `Copy` receive that its endpoint wants (a whole, new segment):
    /// the payload is copied once, by the kernel, as TCP's would be. Never in an
    /// authenticated job ([`direct_header`]): there a payload is placed only after its tag
    /// has been checked.
    ///
    /// This thread is the socket's only reader, so the datagram read is the one peeked.
    /// Should the read still fail, the segment's place holds garbage but the endpoint has
    /// not taken it: a resend overwrites it, or it is zeroed as a bubble.
    pub(super) fn receive_direct(&mut self, now: Time) -> Direct {
        let mut head = [0u8; HEADER_LEN];
        let (total, source) = match self.udp.peek(&mut head) {
            Ok(Some(got)) => got,
            Ok(None) => return Direct::Empty,
            Err(_) => return Direct::Declined { large: false }, // the read reports it
        };
        let declined = Direct::Declined { large: total >= HEADER_LEN + DIRECT_MIN };
        let Some(h) = direct_header(&head, total, self.session, self.cfg.auth.is_some()) else { return declined };
        let Some(slot) = self.slots.get(&h.flow) else { return declined };
        let (from, call, transfer) = (slot.peer, slot.call, slot.transfer);
        if source.and_then(|a| self.peer_ranks.get(&a).copied()) != Some(from) {
            return declined; // not from the peer: the usual read counts it
        }
        if !slot.ep.wants(h.seq, h.payload_len) {
            return declined;
        }
        let Some(job) = self.job.as_mut().filter(|j| j.call == call) else { return declined };
        let Some(dst) = job.direct_dst(transfer, h.seq..h.seq + h.payload_len as u64) else { return declined };
        match self.udp.recv_into(&mut head, dst, &mut []) {
            Ok((n, ce)) if n == total => {
                let mut h = h;
                h.ce |= ce;
                self.dispatch(from, &h, Incoming::Landed(h.payload_len), now);
                self.local.received_in_place += 1;
                Direct::Landed(n)
            }
            _ => {
                self.local.malformed += 1;
                declined
            }
        }
    }

    /// A datagram from the address rank `from` registered at rendezvous (`None`: from an
    /// address no peer registered).
    pub(super) fn on_datagram(&mut self, d: &[u8], ce: bool, from: Option<u32>, now: Time) {
        match authenticate(d, self.cfg.auth.as_ref(), from, self.rank) {
            Ok(body) => self.on_verified(body, ce, from, now),
            Err(Rejected::Malformed) => self.local.malformed += 1,
            Err(Rejected::WrongSource) => self.local.wrong_source += 1,
            Err(Rejected::AuthFailure) => self.local.auth_failures += 1,
        }
    }

    /// As [`Self::on_datagram`], once the tag (if any) is checked and stripped.
    fn on_verified(&mut self, d: &[u8], ce: bool, from: Option<u32>, now: Time) {
        let (h, payload) = match Header::decode(d) {
            Ok(x) => x,
            Err(_) => {
                self.local.malformed += 1;
                return;
            }
        };
        if h.session != self.session {
            self.local.foreign_session += 1;
            return;
        }
        let Some(from) = from else {
            self.local.wrong_source += 1;
            return;
        };
        let mut h = h;
        h.ce |= ce;
        let Some(peer) = self.slots.get(&h.flow).map(|s| s.peer) else {
            self.classify_unknown(h.flow);
            // Data of a call this rank has not posted yet (the peer started first): keep
            // it, up to `early_buffer_bytes`, rather than make the sender resend it.
            if is_future(call_of(h.flow), self.next_call) {
                self.early.keep(d, ce, from);
            }
            return;
        };
        if peer != from {
            // Another rank of the job, but not this flow's peer.
            self.local.wrong_source += 1;
            return;
        }
        self.dispatch(from, &h, Incoming::Bytes(payload), now);
    }

    /// Feeds the kept early datagrams of the call just posted to it; keeps later calls'.
    pub(super) fn replay_early(&mut self, call: u16, now: Time) {
        let Some(kept) = self.early.take() else { return };
        for (d, ce, from) in kept.iter() {
            let Ok((h, _)) = Header::decode(d) else { continue };
            let c = call_of(h.flow);
            if c == call {
                self.on_verified(d, ce, Some(from), now);
            } else if is_future(c, self.next_call) {
                self.early.keep(d, ce, from);
            }
        }
        self.early.recycle(kept);
    }

    pub(super) fn classify_unknown(&mut self, flow: u32) {
        if is_future(call_of(flow), self.next_call) {
            self.local.early += 1;
        } else {
            self.local.stale += 1;
        }
    }

    pub(super) fn read_control(&mut self) {
        let mut frames = std::mem::take(&mut self.frames);
        let mut descs = std::mem::take(&mut self.descs_in);
        let mut lost = Vec::new();
        let mut read = Vec::new();
        for (peer, link) in self.links.iter_mut().enumerate() {
            let Some(l) = link.as_mut() else { continue };
            // Only a link epoll reported (read to the end each time: edge-triggered).
            if !std::mem::take(&mut self.link_ready[peer]) {
                continue;
            }
            let before = frames.len();
            read.clear();
            if let Err(e) = l.read_frames(&mut frames, &mut read) {
                lost.push((peer as u32, e));
            }
            descs.extend(read.iter().map(|&f| (peer as u32, f)));
            // Tag the frames with their link.
            for f in &mut frames[before..] {
                f.payload_len = peer as u32; // reuse: control frames carry no payload
            }
        }
        for (peer, f) in descs.drain(..) {
            match f {
                LinkFrame::Call(d) => self.on_descriptor(peer, d),
                LinkFrame::Received { session, flow } => self.on_received(peer, session, flow),
            }
        }
        self.descs_in = descs;
        if !frames.is_empty() && self.should_read() {
            // A STOP must not overtake data already queued in the UDP socket: drain it
            // first, all of it (a STOP handled with data still queued would request that
            // data again). The socket cannot hold more than its buffer (which the kernel
            // doubles for bookkeeping), so reading that much empties what was queued,
            // without chasing a sender that keeps sending (which would stall this loop,
            // its calls and its timers). Between calls the socket is drained when the
            // next call is posted, before its stashed control (`start_next_call`).
            self.receive_datagrams((2 * self.cfg.socket_buffer_bytes).max(RECV_TURN_BYTES));
        }
        let now = self.now();
        for mut h in frames.drain(..) {
            let from = h.payload_len;
            h.payload_len = 0;
            if h.session != self.session {
                self.local.foreign_session += 1;
                continue;
            }
            match self.slots.get(&h.flow) {
                Some(s) if s.peer == from => self.dispatch(from, &h, Incoming::Bytes(&[]), now),
                Some(_) => self.local.stale += 1,
                None if is_future(call_of(h.flow), self.next_call) && self.stash.len() < STASH_LIMIT => {
                    self.stash.push((from, h))
                }
                None => self.classify_unknown(h.flow),
            }
        }
        self.frames = frames;
        for (peer, e) in lost {
            self.peer_down(peer, e);
        }
    }

    pub(super) fn peer_down(&mut self, peer: u32, why: LinkDown) {
        if let Some(mut l) = self.links[peer as usize].take() {
            let _ = self.poll.registry().deregister(l.mio());
        }
        let detail = why.to_string();
        self.down[peer as usize] = Some(detail.clone());
        // Lingering endpoints of finished calls have nobody left to talk to.
        self.slots.retain(|_, s| s.peer != peer || !s.finished);
        // Only a call that still needs this peer directly fails now; a wait on it through
        // others ends with the stall timeout.
        let rank = self.rank;
        let involved = self.job.as_ref().is_some_and(|j| {
            j.schedule.transfers.iter().enumerate().any(|(i, t)| {
                ((t.src == rank && t.dst == peer) || (t.src == peer && t.dst == rank))
                    && !j.exec.is_finished(i as TransferId)
            })
        });
        if involved {
            self.fail_call(NetError::PeerLost { rank: peer, detail });
        } else if let Some(job) = self.job.as_mut() {
            // Its descriptor can no longer come; what it sent before closing was read.
            job.unverified.retain(|&r| r != peer);
            self.maybe_complete();
        }
    }

    /// Feeds a packet to its endpoint (the slot exists for `h.flow`).
    pub(super) fn dispatch(&mut self, from: u32, h: &Header, payload: Incoming<'_>, now: Time) {
        let len = match payload {
            Incoming::Bytes(b) => b.len() as u32,
            Incoming::Landed(n) => n,
        };
        let rank = self.rank;
        let Some(slot) = self.slots.get_mut(&h.flow) else { return };
        let pkt = Packet {
            kind: h.kind,
            flow: h.flow,
            src: from,
            dst: rank,
            seq: h.seq,
            len,
            wire_bytes: len + HEADER_LEN as u32 + 28,
            priority: h.priority,
            ecn: Ecn { ect: h.ect, ce: h.ce },
            ece: h.ece,
            sent_at: now,
            rank: 0,
        };
        let call = slot.call;
        let placed = slot.ep.receive(now, &pkt);
        // Progress is what the endpoint took: new data, or a control message or ACK. Data
        // it rejects (a duplicate, a mismatched call's out-of-range segment) is not, or a
        // peer resending it forever would keep the stall timer from ever firing.
        let accepted = placed.is_some() || h.kind != PacketKind::Data;
        let transfer = slot.transfer;
        // The receiver declared the bound met (DLCP FINISH, LTP STOP): for this rank's
        // call the send is over, even if the closing handshake is still running.
        let sender_released = slot.ep.released();
        if let Some(job) = self.job.as_mut().filter(|j| j.call == call) {
            job.progressed |= accepted;
            match (placed, payload) {
                (Some(r), Incoming::Bytes(payload)) => {
                    let off = (r.start - h.seq) as usize;
                    let end = (r.end - h.seq) as usize;
                    if end <= payload.len() {
                        job.place(transfer, r, &payload[off..end]);
                    }
                }
                (Some(r), Incoming::Landed(_)) => job.landed(r),
                (None, _) => {}
            }
        }
        if sender_released {
            self.finish_transfer(h.flow);
        }
    }
}
