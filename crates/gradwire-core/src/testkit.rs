//! The endpoint tests' harness: a seeded generator, loss models, and a pipe that runs one
//! transfer between a sender and a receiver (a link each way: FIFO serialization, then a
//! fixed delay).

use std::collections::BTreeMap;
use std::ops::Range;

use crate::packet::{Packet, PacketKind};
use crate::time::{serialization, Time};
use crate::transport::{Endpoint, EndpointEvent, HostState};

/// Tiny deterministic generator (xorshift64) for loss patterns and test data.
pub(crate) struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, (self.next() % (i as u64 + 1)) as usize);
        }
    }
}

/// Decides whether a packet is lost (and may corrupt it); the flag is "to the receiver".
pub(crate) type LossFn<'a> = Box<dyn FnMut(&mut Packet, bool) -> bool + 'a>;

pub(crate) fn no_loss<'a>() -> LossFn<'a> {
    Box::new(|_, _| false)
}

/// Independent random loss, `data` for data packets and `other` for ACKs and control.
pub(crate) fn random_loss<'a>(seed: u64, data: f64, other: f64) -> LossFn<'a> {
    let mut rng = XorShift(seed | 1);
    Box::new(move |p, _| rng.unit() < if p.kind == PacketKind::Data { data } else { other })
}

/// [`random_loss`], with 5 % of data packets corrupted first: random offsets and lengths,
/// mostly near or past the end of a `size`-byte tensor, which must never be placed
/// outside it.
pub(crate) fn corrupting_loss<'a>(seed: u64, data: f64, other: f64, size: u64) -> LossFn<'a> {
    let mut rng = XorShift(seed ^ 0x5eed);
    let mut lose = random_loss(seed, data, other);
    Box::new(move |p, to_rx| {
        if p.kind == PacketKind::Data && rng.unit() < 0.05 {
            p.seq = (rng.unit() * (size + 3000) as f64) as u64;
            p.len = (rng.unit() * 3000.0) as u32;
        }
        lose(p, to_rx)
    })
}

/// A link each way: FIFO serialization at `bps` (0: none), then a fixed `delay`. A
/// packet the loss function takes still used its serialization time (loss on the wire,
/// not congestion).
#[derive(Clone, Copy)]
pub(crate) struct Link {
    pub bps: u64,
    pub delay: Time,
}

impl Link {
    /// No serialization, a fixed one-way `delay`.
    pub const fn delay(delay: Time) -> Link {
        Link { bps: 0, delay }
    }
}

/// What one transfer over a [`Link`] did.
pub(crate) struct PipeOutcome {
    /// When and with how many bytes the receiver said `Delivered`.
    pub delivered: Option<(Time, u64)>,
    pub sender_done_at: Option<Time>,
    /// Every packet the sender emitted, in order, lost or not.
    pub sent: Vec<Packet>,
    /// Packets the receiver emitted.
    pub acks_sent: u64,
}

/// Runs one transfer from `s` to `r` over `link`, until `done` says so, nothing is left
/// to happen, or past `limit`. `check` sees every packet as it is sent (the flag: from
/// the sender); `deliver` hands a packet that arrived to the receiver. The sender is
/// polled only until it says `SenderDone`. `hosts` are the sending and the receiving
/// host's states, which each end's `HandOn` goes to.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pipe<S: Endpoint, R: Endpoint>(
    hosts: &mut [HostState; 2],
    s: &mut S,
    r: &mut R,
    link: Link,
    mut lose: LossFn,
    limit: Time,
    mut check: impl FnMut(&Packet, bool),
    mut deliver: impl FnMut(&mut R, Time, &Packet),
    done: impl Fn(&S, &R, &PipeOutcome) -> bool,
) -> PipeOutcome {
    // (arrival, tie-break) -> (towards the receiver?, packet)
    let mut wire: BTreeMap<(Time, u64), (bool, Packet)> = BTreeMap::new();
    let mut busy = [0 as Time; 2];
    let mut n = 0u64;
    let mut put = |wire: &mut BTreeMap<_, _>, mut p: Packet, to_rx: bool, t: Time| {
        let d = to_rx as usize;
        busy[d] = busy[d].max(t) + if link.bps > 0 { serialization(p.wire_bytes, link.bps) } else { 0 };
        if !lose(&mut p, to_rx) {
            n += 1;
            wire.insert((busy[d] + link.delay, n), (to_rx, p));
        }
    };
    let mut out = PipeOutcome { delivered: None, sender_done_at: None, sent: Vec::new(), acks_sent: 0 };
    let mut t: Time = 0;
    loop {
        if out.sender_done_at.is_none() {
            while let Some(p) = s.poll_transmit(t) {
                assert_eq!(p.sent_at, t);
                check(&p, true);
                out.sent.push(p);
                put(&mut wire, p, true, t);
            }
            while let Some(ev) = s.poll_event() {
                if ev == EndpointEvent::HandOn {
                    s.hand_on(&mut hosts[0]);
                    continue;
                }
                assert_eq!(ev, EndpointEvent::SenderDone);
                assert!(out.sender_done_at.is_none(), "SenderDone twice");
                out.sender_done_at = Some(t);
            }
        }
        while let Some(p) = r.poll_transmit(t) {
            check(&p, false);
            out.acks_sent += 1;
            put(&mut wire, p, false, t);
        }
        while let Some(ev) = r.poll_event() {
            if ev == EndpointEvent::HandOn {
                r.hand_on(&mut hosts[1]);
                continue;
            }
            let EndpointEvent::Delivered { bytes } = ev else { panic!("{ev:?}") };
            assert!(out.delivered.is_none(), "Delivered twice");
            out.delivered = Some((t, bytes));
        }
        let s_timer = if out.sender_done_at.is_none() { s.poll_timeout() } else { None };
        let next = [wire.keys().next().map(|k| k.0), s_timer, r.poll_timeout()].into_iter().flatten().min();
        let Some(next) = next else { break };
        if next > limit || (wire.is_empty() && done(s, r, &out)) {
            break;
        }
        assert!(next >= t, "time went backwards");
        t = next;
        while let Some(entry) = wire.first_entry().filter(|e| e.key().0 <= t) {
            let (to_receiver, p) = entry.remove();
            if to_receiver {
                deliver(r, t, &p);
            } else if out.sender_done_at.is_none() {
                s.handle_packet(t, &p);
            }
        }
        if s_timer.is_some_and(|d| d <= t) {
            s.handle_timeout_with(t, &mut hosts[0]);
        }
        if r.poll_timeout().is_some_and(|d| d <= t) {
            r.handle_timeout_with(t, &mut hosts[1]);
        }
    }
    out
}

/// [`pipe`] for a transport whose receiver only sends ACKs and whose endpoints are done
/// when the sender said `SenderDone` and the receiver `Delivered` (TCP, PIAS, pFabric):
/// a fixed one-way `delay`, no serialization.
pub(crate) fn acked_pipe<S: Endpoint, R: Endpoint>(
    s: &mut S,
    r: &mut R,
    delay: Time,
    lose: LossFn,
    limit: Time,
) -> PipeOutcome {
    let check = |p: &Packet, from_sender: bool| assert!(from_sender || p.kind == PacketKind::Ack, "{p:?}");
    let deliver = |r: &mut R, t: Time, p: &Packet| r.handle_packet(t, p);
    let done = |_: &S, _: &R, o: &PipeOutcome| o.sender_done_at.is_some() && o.delivered.is_some();
    pipe(&mut Default::default(), s, r, Link::delay(delay), lose, limit, check, deliver, done)
}

/// [`pipe`] for DLCP and LTP between hosts whose states are `hosts` (sending, receiving):
/// every packet is checked against `tags`, `receive` hands an arriving packet to the
/// receiver and returns the range it placed, and each range is placed once ([`Placed`]).
/// Returns the outcome and the byte ranges never placed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn placing_pipe_in<S: Endpoint, R: Endpoint>(
    hosts: &mut [HostState; 2],
    s: &mut S,
    r: &mut R,
    link: Link,
    lose: LossFn,
    limit: Time,
    tags: Tags,
    receive: impl Fn(&mut R, Time, &Packet) -> Option<Range<u64>>,
    done: impl Fn(&S, &R, &PipeOutcome) -> bool,
) -> (PipeOutcome, Vec<Range<u64>>) {
    let mut placed = Placed::new(tags.size);
    let deliver = |r: &mut R, t: Time, p: &Packet| {
        if let Some(range) = receive(r, t, p) {
            placed.place(range);
        }
    };
    let o = pipe(hosts, s, r, link, lose, limit, |p, from_sender| tags.check(p, from_sender), deliver, done);
    (o, placed.unwritten())
}

/// A DLCP or LTP transfer run to its end by [`placing_pipe_in`]: when and with how many
/// bytes the receiver said `Delivered`, what it never placed, and both ends as they ended.
pub(crate) struct Transferred<S, R> {
    pub delivered_at: Option<Time>,
    pub delivered_bytes: Option<u64>,
    pub sender_done_at: Option<Time>,
    /// Complement of the byte ranges the receiver told the application to copy.
    pub missing: Vec<Range<u64>>,
    /// The receiver has no timer left.
    pub receiver_quiet: bool,
    pub sender: S,
    pub receiver: R,
}

impl<S, R: Endpoint> Transferred<S, R> {
    /// What [`placing_pipe_in`] returned for `sender` and `receiver`.
    pub fn new((o, missing): (PipeOutcome, Vec<Range<u64>>), sender: S, receiver: R) -> Self {
        Transferred {
            delivered_at: o.delivered.map(|d| d.0),
            delivered_bytes: o.delivered.map(|d| d.1),
            sender_done_at: o.sender_done_at,
            missing,
            receiver_quiet: receiver.poll_timeout().is_none(),
            sender,
            receiver,
        }
    }
}

/// What a receiver handed out of a `size`-byte tensor: every range inside it, and no byte
/// twice.
pub(crate) struct Placed(Vec<bool>);

impl Placed {
    pub fn new(size: u64) -> Placed {
        Placed(vec![false; size as usize])
    }

    pub fn place(&mut self, range: Range<u64>) {
        let (a, b) = (range.start as usize, range.end as usize);
        assert!(b <= self.0.len() && a < b, "range outside the tensor");
        assert!(self.0[a..b].iter().all(|w| !w), "range handed out twice");
        self.0[a..b].fill(true);
    }

    /// The byte ranges never handed out, in order.
    pub fn unwritten(&self) -> Vec<Range<u64>> {
        let mut missing: Vec<Range<u64>> = Vec::new();
        for (i, w) in self.0.iter().enumerate() {
            let i = i as u64;
            if !w {
                match missing.last_mut() {
                    Some(m) if m.end == i => m.end = i + 1,
                    _ => missing.push(i..i + 1),
                }
            }
        }
        missing
    }
}

/// How a DLCP or LTP transfer's packets must look: the sender's go `src -> dst` inside
/// the tensor, data on `data_priority` and control on `ctrl_priority`; the receiver
/// sends no data, only control back on `ctrl_priority`.
pub(crate) struct Tags {
    pub flow: u32,
    pub src: u32,
    pub dst: u32,
    pub size: u64,
    pub data_priority: u8,
    pub ctrl_priority: u8,
}

impl Tags {
    pub fn new(flow: u32, src: u32, dst: u32, size: u64, data_priority: u8, ctrl_priority: u8) -> Tags {
        Tags { flow, src, dst, size, data_priority, ctrl_priority }
    }

    pub fn check(&self, p: &Packet, from_sender: bool) {
        if !from_sender {
            assert!((p.src, p.dst) == (self.dst, self.src) && p.kind != PacketKind::Data);
            return assert_eq!(p.priority, self.ctrl_priority);
        }
        assert!(p.flow == self.flow && (p.src, p.dst) == (self.src, self.dst));
        if p.kind == PacketKind::Data {
            assert!(p.seq + p.len as u64 <= self.size, "sender sent outside the tensor");
            assert_eq!(p.priority, self.data_priority);
        } else {
            assert_eq!(p.priority, self.ctrl_priority);
        }
    }
}
