use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::packet::{Packet, PacketKind};
use crate::testkit::XorShift;
use crate::time::{Time, MS, US};
use crate::transport::{Endpoint, EndpointEvent};

const MSS: u64 = 1460;
const FLOW: u32 = 7;

fn dctcp_cfg() -> TcpConfig {
    TcpConfig { cc: CongestionControl::Dctcp { g: 1.0 / 16.0 }, ..TcpConfig::default() }
}

fn sender(cfg: TcpConfig, size: u64) -> TcpSender {
    TcpSender::new(cfg, FLOW, 1, 2, size, 0)
}

fn receiver(cfg: TcpConfig, size: u64) -> TcpReceiver {
    TcpReceiver::new(cfg, FLOW, 2, 1, size)
}

fn ack(cum: u64, ece: bool) -> Packet {
    let mut p = Packet::ack(FLOW, 2, 1, cum, 40);
    p.ece = ece;
    p
}

fn end(p: &Packet) -> u64 {
    p.seq + p.len as u64
}

fn drain(e: &mut impl Endpoint, now: Time) -> Vec<Packet> {
    std::iter::from_fn(|| e.poll_transmit(now)).collect()
}

/// Deliver `p` to the receiver, feed its ACK(s) to the sender, return what the sender sends.
fn exchange(s: &mut TcpSender, r: &mut TcpReceiver, p: &Packet, now: Time) -> Vec<Packet> {
    r.handle_packet(now, p);
    while let Some(a) = r.poll_transmit(now) {
        s.handle_packet(now, &a);
    }
    drain(s, now)
}

#[test]
fn initial_window_and_packet_fields() {
    let mut s = sender(dctcp_cfg(), 10 * MSS + 100);
    let w = drain(&mut s, 5);
    assert_eq!(w.len(), 10);
    for (i, p) in w.iter().enumerate() {
        assert_eq!((p.kind, p.flow, p.src, p.dst), (PacketKind::Data, FLOW, 1, 2));
        assert_eq!((p.seq, p.len as u64, p.wire_bytes), (i as u64 * MSS, MSS, 1500));
        assert!(p.ecn.ect && !p.ecn.ce);
        assert_eq!(p.sent_at, 5);
    }
    assert_eq!(s.poll_timeout(), Some(5 + 10 * MS));
    // The short last segment goes out once the window opens.
    s.handle_packet(10, &ack(MSS, false));
    let tail = drain(&mut s, 10);
    assert_eq!(tail.len(), 1);
    assert_eq!((tail[0].seq, tail[0].len), (10 * MSS, 100));
    assert!(!sender(TcpConfig::default(), MSS).poll_transmit(0).unwrap().ecn.ect);
}

#[test]
fn newreno_fast_retransmit_partial_and_full_ack() {
    let cfg = TcpConfig::default();
    let (mut s, mut r) = (sender(cfg, 100 * MSS), receiver(cfg, 100 * MSS));
    let w = drain(&mut s, 0);
    assert_eq!(w.len(), 10);

    // Segments 0 and 1 arrive: slow start grows cwnd by one mss per ACK.
    let out: Vec<Packet> = w[..2].iter().flat_map(|p| exchange(&mut s, &mut r, p, 1)).collect();
    assert_eq!(s.cwnd_bytes(), 12 * MSS);
    assert_eq!(out.len(), 4); // segments 10..14, flight = 12 segments

    // Segment 2 is lost: 3 and 4 give two dupACKs, no reaction yet.
    for p in &w[3..5] {
        assert!(exchange(&mut s, &mut r, p, 2).is_empty());
    }
    assert!(!s.in_recovery());
    // Segment 5 is lost too; 6 gives the third dupACK: one fast retransmit of 2.
    let fr = exchange(&mut s, &mut r, &w[6], 3);
    assert_eq!(fr.iter().map(|p| p.seq).collect::<Vec<_>>(), vec![2 * MSS]);
    assert!(s.in_recovery());
    assert_eq!(s.ssthresh_bytes(), 6 * MSS); // flight 12 / 2
    assert_eq!(s.cwnd_bytes(), 9 * MSS); // ssthresh + 3
    assert_eq!(s.stats().retransmits, 1);

    // Seven more dupACKs inflate cwnd; only new data is sent, no second retransmit.
    let later: Vec<Packet> = w[7..].iter().chain(&out).copied().collect();
    let sent: Vec<Packet> = later.iter().flat_map(|p| exchange(&mut s, &mut r, p, 4)).collect();
    assert_eq!(s.cwnd_bytes(), 16 * MSS);
    assert!(sent.iter().all(|p| p.seq >= 14 * MSS));
    assert_eq!(sent.len(), 4); // flight 12 -> 16 as cwnd passed 13, 14, 15, 16
    assert_eq!(s.stats().retransmits, 1);

    // The retransmission of 2 arrives: partial ACK up to the next hole (5).
    let pa = exchange(&mut s, &mut r, &fr[0], 5);
    assert_eq!(pa[0].seq, 5 * MSS);
    assert_eq!(s.stats().retransmits, 2);
    assert_eq!(s.cwnd_bytes(), 14 * MSS); // 16 - 3 acked + 1
    assert!(s.in_recovery());

    // The retransmission of 5 fills the last hole below the recovery point.
    exchange(&mut s, &mut r, &pa[0], 6);
    assert!(!s.in_recovery());
    assert_eq!(s.cwnd_bytes(), s.ssthresh_bytes());
    assert_eq!(s.cwnd_bytes(), 6 * MSS);
    assert_eq!(s.stats().timeouts, 0);
}

#[test]
fn rto_fires_and_backs_off_exponentially_up_to_max() {
    let cfg = TcpConfig::default();
    let mut s = sender(cfg, 100 * MSS);
    assert_eq!(drain(&mut s, 0).len(), 10);
    assert_eq!(s.poll_timeout(), Some(cfg.rto_initial));

    // Early wakeups are ignored.
    s.handle_timeout(cfg.rto_initial - 1);
    assert_eq!(s.stats().timeouts, 0);
    assert!(s.poll_transmit(cfg.rto_initial - 1).is_none());

    let mut deadline = cfg.rto_initial;
    let intervals = [20, 40, 80, 160, 320, 640, 1000, 1000, 1000];
    for (i, next) in intervals.iter().enumerate() {
        s.handle_timeout(deadline);
        assert_eq!(s.stats().timeouts, i as u64 + 1);
        assert_eq!(s.cwnd_bytes(), MSS);
        // First RTO halves the flight; repeated ones keep it (RFC 5681 3.1).
        assert_eq!(s.ssthresh_bytes(), 5 * MSS);
        let rtx = drain(&mut s, deadline);
        assert_eq!(rtx.len(), 1);
        assert_eq!(rtx[0].seq, 0);
        assert_eq!(s.stats().retransmits, i as u64 + 1);
        assert_eq!(s.rto(), next * MS);
        deadline += next * MS;
        assert_eq!(s.poll_timeout(), Some(deadline));
    }
    assert_eq!(s.stats().packets_sent, 10 + intervals.len() as u64);
}

#[test]
fn dupacks_after_rto_do_not_trigger_fast_retransmit() {
    let mut s = sender(TcpConfig::default(), 100 * MSS);
    drain(&mut s, 0);
    s.handle_timeout(10 * MS);
    assert_eq!(drain(&mut s, 10 * MS).len(), 1);
    // Late dupACKs from the original flight must not start a second reduction.
    for _ in 0..5 {
        s.handle_packet(11 * MS, &ack(0, false));
    }
    assert!(!s.in_recovery());
    assert!(drain(&mut s, 11 * MS).is_empty());
    assert_eq!((s.cwnd_bytes(), s.stats().retransmits), (MSS, 1));
}

#[test]
fn rtt_estimate_karn_and_backoff_reset() {
    let cfg = TcpConfig { rto_min: US, ..TcpConfig::default() };
    let mut s = sender(cfg, 100 * MSS);
    drain(&mut s, 0);
    s.handle_packet(100 * US, &ack(MSS, false));
    // First sample: srtt = 100us, rttvar = 50us, rto = 300us.
    assert_eq!(s.srtt(), Some(100 * US));
    assert_eq!(s.rto(), 300 * US);
    assert_eq!(s.poll_timeout(), Some(400 * US));
    drain(&mut s, 100 * US);

    s.handle_timeout(400 * US);
    assert_eq!(s.rto(), 600 * US);
    assert_eq!(drain(&mut s, 400 * US)[0].seq, MSS);
    // ACK of the retransmitted segment: no sample (Karn), backoff stays.
    s.handle_packet(500 * US, &ack(2 * MSS, false));
    assert_eq!((s.srtt(), s.rto()), (Some(100 * US), 600 * US));
    assert_eq!(s.poll_timeout(), Some(1100 * US));
    // The receiver had everything else: jump over the go-back-N data.
    drain(&mut s, 500 * US);
    s.handle_packet(600 * US, &ack(12 * MSS, false));
    assert_eq!(s.rto(), 600 * US);
    let fresh = drain(&mut s, 600 * US);
    assert!(fresh[0].seq >= 12 * MSS);
    // A valid sample (200us) clears the backoff.
    s.handle_packet(800 * US, &ack(end(&fresh[0]), false));
    assert_eq!(s.srtt(), Some(112_500_000)); // 7/8 * 100us + 1/8 * 200us
    assert_eq!(s.rto(), 112_500_000 + 4 * 62_500_000); // rttvar = 3/4*50 + 1/4*100
}

/// Closed-loop ACK clock without loss; `ece()` decides the echo of each ACK. At most
/// `cap` packets per round keep slow start from exploding. Returns alpha after each round.
fn run_dctcp(s: &mut TcpSender, rounds: usize, cap: usize, mut ece: impl FnMut() -> bool) -> Vec<f64> {
    let mut t: Time = 0;
    let mut alphas = vec![];
    let mut next: Vec<Packet> = drain(s, t).into_iter().take(cap).collect();
    for _ in 0..rounds {
        t += 100 * US;
        for p in std::mem::take(&mut next) {
            s.handle_packet(t, &ack(end(&p), ece()));
            while next.len() < cap {
                match s.poll_transmit(t) {
                    Some(p) => next.push(p),
                    None => break,
                }
            }
        }
        alphas.push(s.dctcp_alpha().unwrap());
    }
    alphas
}

#[test]
fn dctcp_alpha_estimator_converges_per_window() {
    for f in [0.0, 0.25, 1.0] {
        let mut d = sender::Dctcp::new();
        // Windows of 16 ACKs of one segment each, a fraction f of them with ECE; the
        // next window is in flight while one is acknowledged.
        for w in 0..100u64 {
            for i in 0..16u64 {
                let ece = (i as f64) < 16.0 * f;
                d.on_ack(1.0 / 16.0, MSS, ece, (w * 16 + i + 1) * MSS, (w + 2) * 16 * MSS);
            }
        }
        assert!((d.alpha - f).abs() < 0.02, "f = {f}: alpha = {}", d.alpha);
    }
}

#[test]
fn dctcp_alpha_is_an_ewma_with_gain_g() {
    let mut d = sender::Dctcp::new();
    // ACK-clocked: ACK i arrives with 10 + i - 1 segments sent. The first window ends at
    // the initial 10 segments; unmarked, it gives alpha = (1 - g) * 1.
    let nxt = |i: u64| (9 + i) * MSS;
    for i in 1..=10 {
        d.on_ack(1.0 / 16.0, MSS, false, i * MSS, nxt(i));
        assert_eq!(d.alpha, if i < 10 { 1.0 } else { 15.0 / 16.0 });
    }
    // The second window ends at segment 19: 9 ACKs, 3 of them marked.
    for i in 11..=19 {
        d.on_ack(1.0 / 16.0, MSS, i % 3 == 0, i * MSS, nxt(i));
    }
    let want = 15.0 / 16.0 * 15.0 / 16.0 + 1.0 / 3.0 / 16.0;
    assert!((d.alpha - want).abs() < 1e-12, "{} != {want}", d.alpha);
}

#[test]
fn dctcp_alpha_converges_to_marking_fraction() {
    for f in [0.0, 0.25, 1.0] {
        let mut s = sender(dctcp_cfg(), 1 << 40);
        assert_eq!(s.dctcp_alpha(), Some(1.0));
        // Marks independent of the window make each window's expected fraction f; the
        // window cuts shrink cwnd to a few segments, so F per window is coarse and
        // alpha noisy: compare its mean once converged.
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let alphas = run_dctcp(&mut s, 3000, 16, || rng.chance(f));
        let tail = &alphas[1000..];
        let mean = tail.iter().sum::<f64>() / tail.len() as f64;
        assert!((mean - f).abs() < 0.02, "f = {f}: mean alpha = {mean}");
        if f == 0.0 || f == 1.0 {
            assert!((alphas.last().unwrap() - f).abs() < 0.02);
        }
        assert_eq!(s.stats().retransmits, 0);
    }
    assert_eq!(sender(TcpConfig::default(), 1).dctcp_alpha(), None);
}

#[test]
fn dctcp_cuts_once_per_window_by_alpha_over_two() {
    let mut s = sender(dctcp_cfg(), 1 << 40);
    let w = drain(&mut s, 0);
    // alpha = 1 initially: the first ECE halves cwnd, the rest of the window doesn't.
    for (i, p) in w.iter().enumerate() {
        s.handle_packet(10, &ack(end(p), true));
        assert_eq!(s.cwnd_bytes(), 5 * MSS, "after ACK {i}");
        assert_eq!(s.ssthresh_bytes(), 5 * MSS);
    }
    // Next window: one more cut on its first ECE.
    let w = drain(&mut s, 10);
    assert_eq!(w.len(), 5);
    for p in &w {
        s.handle_packet(20, &ack(end(p), true));
        assert_eq!(s.cwnd_bytes(), 5 * MSS / 2);
    }

    // With a smaller alpha the cut is proportionally smaller.
    let mut s = sender(dctcp_cfg(), 1 << 40);
    run_dctcp(&mut s, 20, 16, || false);
    let (alpha, cwnd) = (s.dctcp_alpha().unwrap(), s.cwnd_bytes());
    assert!(alpha < 0.5 && cwnd > 20 * MSS);
    let w = drain(&mut s, 1);
    s.handle_packet(MS, &ack(end(&w[0]), true));
    let cut = (cwnd as f64 * (1.0 - alpha / 2.0)) as u64;
    assert_eq!(s.cwnd_bytes(), cut);
    for p in &w[1..] {
        s.handle_packet(MS, &ack(end(p), true));
    }
    assert_eq!(s.cwnd_bytes(), cut);
}

#[test]
fn rfc3168_ecn_halves_once_per_window_and_newreno_ignores_ece() {
    let ecn = TcpConfig { cc: CongestionControl::NewRenoEcn, ..TcpConfig::default() };
    let mut s = sender(ecn, 1 << 40);
    // Grow past the initial window without marks: slow start, no DCTCP estimate.
    let w = drain(&mut s, 0);
    assert!(w.iter().all(|p| p.ecn.ect));
    for p in &w {
        s.handle_packet(10, &ack(end(p), false));
    }
    assert_eq!((s.cwnd_bytes(), s.dctcp_alpha()), (20 * MSS, None));
    // A window of marked ACKs: the first halves cwnd, the rest of that window doesn't.
    let w = drain(&mut s, 10);
    assert_eq!(w.len(), 20);
    for (i, p) in w.iter().enumerate() {
        s.handle_packet(20, &ack(end(p), true));
        assert_eq!((s.cwnd_bytes(), s.ssthresh_bytes()), (10 * MSS, 10 * MSS), "after ACK {i}");
    }
    // The next window's first ECE halves again (never below 2 MSS), whatever marked before.
    let w = drain(&mut s, 20);
    assert_eq!(w.len(), 10);
    s.handle_packet(30, &ack(end(&w[0]), true));
    assert_eq!(s.cwnd_bytes(), 5 * MSS);
    // Unmarked, the window grows again (congestion avoidance above ssthresh = 5 MSS).
    for p in &w[1..] {
        s.handle_packet(30, &ack(end(p), false));
    }
    let w = drain(&mut s, 30);
    for p in &w {
        s.handle_packet(40, &ack(end(p), false));
    }
    assert!(s.cwnd_bytes() > 5 * MSS);

    // Plain NewReno: data not ECN-capable, ECE changes nothing.
    let mut s = sender(TcpConfig::default(), 1 << 40);
    let w = drain(&mut s, 0);
    assert!(w.iter().all(|p| !p.ecn.ect));
    for p in &w {
        s.handle_packet(10, &ack(end(p), true));
    }
    assert_eq!((s.cwnd_bytes(), s.ssthresh_bytes()), (20 * MSS, u64::MAX));
}

#[test]
fn receiver_reassembles_and_delivers_once() {
    let cfg = TcpConfig::default();
    let mut r = receiver(cfg, 3 * MSS);
    let seg = |i: u64| Packet::data(FLOW, 1, 2, i * MSS, MSS as u32, 40);
    let mut ce = seg(2);
    ce.ecn = crate::packet::Ecn { ect: true, ce: true };
    r.handle_packet(0, &ce);
    r.handle_packet(0, &Packet::ack(FLOW, 1, 2, 3 * MSS, 40)); // wrong kind: ignored
    r.handle_packet(0, &Packet::data(FLOW + 1, 1, 2, 0, MSS as u32, 40)); // other flow
    r.handle_packet(0, &seg(0));
    r.handle_packet(0, &seg(0)); // duplicate: ACKed again, not counted
    assert_eq!(r.poll_event(), None);
    r.handle_packet(0, &seg(1));
    let acks = drain(&mut r, 9);
    let cum: Vec<(u64, bool)> = acks.iter().map(|a| (a.seq, a.ece)).collect();
    assert_eq!(cum, vec![(0, true), (MSS, false), (MSS, false), (3 * MSS, false)]);
    assert!(acks.iter().all(|a| a.kind == PacketKind::Ack && a.src == 2 && a.dst == 1));
    assert_eq!(acks[0].sent_at, 9);
    assert_eq!(r.poll_event(), Some(EndpointEvent::Delivered { bytes: 3 * MSS }));
    r.handle_packet(1, &seg(1));
    assert_eq!(r.poll_event(), None);
    assert_eq!(r.received_bytes(), 3 * MSS);
}

#[test]
fn sender_ignores_bogus_acks_and_zero_size_flows_finish() {
    let mut s = sender(TcpConfig::default(), 20 * MSS);
    drain(&mut s, 0);
    s.handle_packet(1, &ack(11 * MSS, false)); // beyond anything sent
    s.handle_packet(1, &Packet::data(FLOW, 2, 1, 0, 10, 40)); // not an ACK
    s.handle_packet(1, &ack(0, false)); // nothing new, not a dupACK
    let mut other = ack(5 * MSS, false);
    other.flow = FLOW + 1;
    s.handle_packet(1, &other);
    assert_eq!(s.cwnd_bytes(), 10 * MSS);
    s.handle_packet(1, &ack(3 * MSS, false));
    s.handle_packet(1, &ack(2 * MSS, false)); // stale
    assert_eq!(s.cwnd_bytes(), 13 * MSS);

    let mut s = sender(TcpConfig::default(), 0);
    let mut r = receiver(TcpConfig::default(), 0);
    assert!(s.poll_transmit(0).is_none() && s.poll_timeout().is_none());
    assert_eq!(s.poll_event(), Some(EndpointEvent::SenderDone));
    assert_eq!(s.poll_event(), None);
    assert_eq!(r.poll_event(), Some(EndpointEvent::Delivered { bytes: 0 }));
    assert_eq!(r.poll_event(), None);
}

struct Outcome {
    delivered: Vec<u64>,
    done: usize,
    received: u64,
    sender: TcpSender,
}

/// Sender and receiver joined by a link with `delay` plus up to `jitter` (which reorders)
/// and losses both ways; switches would set CE, here a coin does (`ce`, ECT packets only).
struct Pipe {
    rng: XorShift,
    loss: f64,
    ce: f64,
    jitter: Time,
    wire: Wire,
    sent: u64,
}

impl Pipe {
    const DELAY: Time = 5 * US;

    fn put(&mut self, now: Time, to_receiver: bool, mut p: Packet) {
        p.ecn.ce |= p.ecn.ect && self.rng.chance(self.ce);
        if self.rng.chance(self.loss) {
            return;
        }
        let jitter = if self.jitter > 0 { self.rng.next() % self.jitter } else { 0 };
        self.sent += 1;
        self.wire.insert((now + Self::DELAY + jitter, self.sent), (to_receiver, p));
    }
}

/// Packets in flight: (arrival, tie-break) -> (towards the receiver?, packet).
pub(super) type Wire = BTreeMap<(Time, u64), (bool, Packet)>;

/// Moves `now` to the next arrival or timer, delivers what is due and fires due timers;
/// false when nothing is left to happen.
pub(super) fn advance(wire: &mut Wire, s: &mut TcpSender, r: &mut TcpReceiver, now: &mut Time) -> bool {
    let next = [wire.first_key_value().map(|(k, _)| k.0), s.poll_timeout(), r.poll_timeout()];
    let Some(t) = next.into_iter().flatten().min() else { return false };
    *now = t;
    while wire.first_key_value().is_some_and(|(k, _)| k.0 <= t) {
        match wire.pop_first().expect("checked").1 {
            (true, p) => r.handle_packet(t, &p),
            (false, p) => s.handle_packet(t, &p),
        }
    }
    if s.poll_timeout().is_some_and(|d| d <= t) {
        s.handle_timeout(t);
    }
    if r.poll_timeout().is_some_and(|d| d <= t) {
        r.handle_timeout(t);
    }
    true
}

fn pipe(cfg: TcpConfig, size: u64, loss: f64, ce: f64, jitter: Time, seed: u64) -> Outcome {
    let mut net = Pipe { rng: XorShift(seed | 1), loss, ce, jitter, wire: BTreeMap::new(), sent: 0 };
    let (mut s, mut r) = (sender(cfg, size), receiver(cfg, size));
    let mut out = Outcome { delivered: vec![], done: 0, received: 0, sender: sender(cfg, 0) };
    let mut now = 0;
    for _ in 0..1_000_000 {
        while let Some(p) = s.poll_transmit(now) {
            net.put(now, true, p);
        }
        while let Some(p) = r.poll_transmit(now) {
            net.put(now, false, p);
        }
        while let Some(EndpointEvent::Delivered { bytes }) = r.poll_event() {
            out.delivered.push(bytes);
        }
        while let Some(e) = s.poll_event() {
            assert_eq!(e, EndpointEvent::SenderDone);
            out.done += 1;
        }
        if !advance(&mut net.wire, &mut s, &mut r, &mut now) {
            break;
        }
    }
    out.received = r.received_bytes();
    out.sender = s;
    out
}

#[test]
fn pipe_lossless_transfer_is_clean() {
    let o = pipe(TcpConfig::default(), 1_000_000, 0.0, 0.0, 0, 1);
    assert_eq!((o.delivered, o.done), (vec![1_000_000], 1));
    let st = o.sender.stats();
    assert_eq!((st.retransmits, st.timeouts), (0, 0));
    assert_eq!(st.packets_sent, 1_000_000u64.div_ceil(MSS));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn pipe_transfer_completes(
        size in 0u64..200_000,
        loss in 0.0f64..0.2,
        seed in any::<u64>(),
        cc in prop_oneof![
            Just(CongestionControl::NewReno),
            Just(CongestionControl::NewRenoEcn),
            Just(dctcp_cfg().cc),
            Just(CongestionControl::Cubic),
        ],
        jitter in prop_oneof![Just(0), 0..20 * US],
        recovery in 0u8..3,
        delack in any::<bool>(),
        ns3 in any::<bool>(),
    ) {
        let delayed_ack = if delack { DelayedAck { count: 2, timeout: 40 * US, at_write_end: false } } else { DelayedAck::OFF };
        let (sack, rack_tlp) = (recovery > 0, recovery > 1);
        let cfg = TcpConfig {
            cc,
            sack,
            rack_tlp,
            delayed_ack,
            // ns-3.37's behaviours (tests_ns3.rs)
            recovery_from_cwr: !ns3,
            loss_exit_above_recover: ns3,
            rto_reset_on_new_ack: ns3,
            cong_avoid_per_segment: ns3,
            cong_avoid_after_slow_start_ns3: ns3,
            ce_ack_lagged: ns3,
            dctcp_ssthresh_ns3: ns3,
            ecn_cut_prr: ns3,
            delack_first_at_once: ns3,
            ..TcpConfig::default()
        };
        let o = pipe(cfg, size, loss, 0.3, jitter, seed);
        prop_assert_eq!(o.delivered, vec![size]);
        prop_assert_eq!(o.done, 1);
        prop_assert!(o.sender.poll_timeout().is_none());
        // ns-3's DCTCP cut has no floor (dctcp_ssthresh_ns3): its window may end below a segment
        prop_assert!(o.sender.cwnd_bytes() >= MSS || ns3);
        let st = o.sender.stats();
        // Every segment goes out new exactly once; everything else is a retransmission.
        prop_assert_eq!(st.packets_sent, size.div_ceil(MSS) + st.retransmits);
        prop_assert_eq!(o.received, size);
    }
}

#[test]
fn a_sender_fits_440_bytes_and_a_receiver_152() {
    // a datacenter run keeps 10^6 or more of each live (10 000 hosts: most pushes at once);
    // mimalloc adds 8 bytes to a request, so these land in its 448- and 160-byte classes
    // (at 441 and 153 bytes, the 512- and 192-byte ones)
    assert!(std::mem::size_of::<TcpSender>() <= 440, "{}", std::mem::size_of::<TcpSender>());
    assert!(std::mem::size_of::<TcpReceiver>() <= 152, "{}", std::mem::size_of::<TcpReceiver>());
}

#[test]
fn hystart_ends_a_cubic_senders_slow_start_on_a_long_ack_train() {
    // 20 segments out at 0; their ACKs return one per segment from 10 ms, 0.4 ms apart.
    // The round's train passes (10 ms + 1 ms allowance) / 2 = 5.5 ms at the 15th ACK
    // (5.6 ms): ssthresh = the window before that ACK's growth, 20 + 14 segments.
    let run = |hystart: bool| {
        let cfg = TcpConfig { cc: CongestionControl::Cubic, init_cwnd_packets: 20, hystart, ..TcpConfig::default() };
        let mut s = sender(cfg, 1000 * MSS);
        assert_eq!(drain(&mut s, 0).len(), 20);
        let mut ssthresh = vec![];
        for i in 1..=20 {
            let now = 10 * MS + (i - 1) * 400 * US;
            s.handle_packet(now, &ack(i * MSS, false));
            drain(&mut s, now);
            ssthresh.push(s.ssthresh_bytes());
        }
        ssthresh
    };
    let with = run(true);
    assert_eq!(with.iter().position(|&t| t < u64::MAX), Some(14), "{with:?}");
    assert_eq!(with[14], 34 * MSS);
    assert!(run(false).iter().all(|&t| t == u64::MAX), "without HyStart, slow start runs on");
}
