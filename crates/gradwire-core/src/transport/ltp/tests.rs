use proptest::prelude::*;

use super::*;
use crate::packet::{CtrlOp, Packet, PacketKind};
use crate::testkit::{corrupting_loss, no_loss, placing_pipe_in, random_loss, Link, LossFn, Tags, Transferred};
use crate::time::{serialization, Time, MS, US};
use crate::transport::{Endpoint, HostState};

const FLOW: u32 = 21;
const SRC: u32 = 1;
const DST: u32 = 2;
const DELAY: Time = 5 * US;
const RATE: u64 = 10_000_000_000;

/// Initial estimates that match the default pipe, so the LT threshold is realistic.
fn cfg(loss_bound: f64) -> LtpConfig {
    LtpConfig { loss_bound, initial_rtprop: 2 * DELAY, initial_btlbw_bps: RATE, ..LtpConfig::default() }
}

const PIPE: Link = Link { bps: RATE, delay: DELAY };

type Outcome = Transferred<LtpSender, LtpReceiver>;

/// Run one transfer over `pipe`. Every data range the receiver hands out is written into
/// a buffer of exactly `size` bytes (slicing panics on any write outside the tensor).
fn run_with(s: LtpSender, r: LtpReceiver, size: u64, link: Link, lose: LossFn, limit: Time) -> Outcome {
    run_between(&mut Default::default(), s, r, size, link, lose, limit)
}

/// [`run_with`] between hosts whose states are `hosts` (sending, receiving).
fn run_between(
    hosts: &mut [HostState; 2],
    mut s: LtpSender,
    mut r: LtpReceiver,
    size: u64,
    link: Link,
    lose: LossFn,
    limit: Time,
) -> Outcome {
    let cfg = r.config().clone();
    let tags = Tags::new(FLOW, SRC, DST, size, cfg.data_priority, cfg.ctrl_priority);
    let receive = LtpReceiver::receive;
    let ran = placing_pipe_in(hosts, &mut s, &mut r, link, lose, limit, tags, receive, |_, _, _| false);
    Outcome::new(ran, s, r)
}

fn run(cfg: LtpConfig, size: u64, lose: LossFn, limit: Time) -> Outcome {
    let s = LtpSender::new(cfg.clone(), FLOW, SRC, DST, size, 0);
    let r = LtpReceiver::new(cfg, FLOW, DST, SRC, size);
    run_with(s, r, size, PIPE, lose, limit)
}

/// Checks every finished transfer must pass, whatever the losses.
fn check_finished(o: &Outcome, size: u64, bound: f64) {
    let r = &o.receiver;
    assert!(o.delivered_at.is_some(), "never delivered");
    assert!(o.sender_done_at.is_some(), "sender never done");
    assert!(r.is_closed() && o.receiver_quiet, "receiver not closed and quiet");
    assert_eq!(o.delivered_at, r.closed_at());
    assert_eq!(o.delivered_bytes, Some(r.delivered_bytes()), "nothing placed after the close");
    assert_eq!(r.bubbles(), o.missing, "reported bubbles differ from what was really missing");
    let missing: u64 = o.missing.iter().map(|m| m.end - m.start).sum();
    assert_eq!(missing, size - r.delivered_bytes());
    let seg = *r.reassembly().segmentation();
    for i in (0..seg.count()).filter(|&i| r.is_critical(i)) {
        assert!(r.reassembly().has(i), "critical segment {i} missing");
    }
    if r.bound_met() {
        assert!(r.delivered_bytes() as f64 >= (1.0 - bound) * size as f64 - 1e-6);
    }
    if !r.closed_early() {
        assert!(r.bound_met() && o.missing.is_empty());
    }
}

#[test]
fn lossless_transfer_delivers_everything() {
    for size in [0u64, 1, 4, 1440, 1441, 100_000, 1_000_003] {
        let o = run(cfg(0.1), size, no_loss(), 100 * MS);
        check_finished(&o, size, 0.1);
        let r = &o.receiver;
        assert_eq!(o.delivered_bytes, Some(size));
        assert!(!r.closed_early() && r.bound_met() && r.bubbles().is_empty());
        assert_eq!((o.sender.stats().retransmits, o.sender.lost()), (0, 0));
        if size > 0 {
            // The complete transfer is the link's new LT threshold.
            let took = r.closed_at().unwrap() - r.started_at().unwrap();
            assert_eq!(r.lt_state().shortest_complete(), Some((size, took)));
            // Paced near the link rate: not much slower than serialization + one RTT.
            let wire = size + size.div_ceil(1440) * 60;
            let ideal = (wire as u128 * 8 * crate::time::SEC as u128 / RATE as u128) as Time;
            assert!(o.delivered_at.unwrap() <= 2 * ideal + 10 * DELAY, "size {size}: {:?} vs {ideal}", o.delivered_at);
        }
    }
}

#[test]
fn initial_lt_threshold_and_deadline_follow_the_formula() {
    let c = LtpConfig { initial_rtprop: 20 * US, initial_btlbw_bps: 1_000_000_000, lt_c: 30 * MS, ..cfg(0.1) };
    let size = 1440 * 100;
    let r = LtpReceiver::new(c, FLOW, DST, SRC, size);
    // 1.5 RTprop + (payload + headers) / BtlBw
    let expect = 30 * US + serialization(100 * 1500, 1_000_000_000);
    assert_eq!(r.lt_threshold(), expect);
    assert_eq!(r.deadline(), expect + 30 * MS);
}

#[test]
fn random_loss_closes_between_lt_threshold_and_deadline() {
    let size = 1_000_000;
    let bound = 0.1;
    let mut early = 0;
    for seed in 1..9 {
        let o = run(cfg(bound), size, random_loss(seed, 0.05, 0.05), 1_000 * MS);
        check_finished(&o, size, bound);
        let r = &o.receiver;
        let elapsed = r.closed_at().unwrap() - r.started_at().unwrap();
        if r.closed_early() {
            early += 1;
            assert!(elapsed >= r.lt_threshold(), "seed {seed}: closed at {elapsed} before LT {}", r.lt_threshold());
            assert!(elapsed <= r.deadline(), "seed {seed}: closed at {elapsed} after the deadline {}", r.deadline());
            assert!(r.bound_met(), "the bound is easy to meet before the deadline here");
            assert!(r.delivered_fraction() < 1.0);
        }
    }
    // Tail losses need an RTO (1 ms) to be found, far beyond LT: most runs close early.
    assert!(early >= 6, "only {early} of 8 closed early");
}

#[test]
fn deadline_close_reports_bound_not_met_but_keeps_criticals() {
    // Half the data is lost and the bound is 1%: it cannot be met before a short deadline.
    let c = LtpConfig { lt_c: 200 * US, critical: Critical::Ends(2), ..cfg(0.01) };
    let size = 500_000;
    for seed in 1..5 {
        let o = run(c.clone(), size, random_loss(seed, 0.5, 0.0), 1_000 * MS);
        check_finished(&o, size, 0.01);
        let r = &o.receiver;
        assert!(r.closed_early() && !r.bound_met(), "seed {seed}");
        assert!(r.delivered_fraction() < 0.99);
        let elapsed = r.closed_at().unwrap() - r.started_at().unwrap();
        assert!(elapsed >= r.deadline(), "seed {seed}: {elapsed} < deadline {}", r.deadline());
        // Only missing criticals may hold the close past the deadline.
        assert_eq!(r.critical_missing(), 0);
        // The sender was told to stop and acknowledged it.
        assert!(o.sender.is_done());
    }
}

#[test]
fn critical_segments_are_never_missing() {
    let critical = Critical::Fraction { fraction: 0.2, seed: 5 };
    for (seed, loss) in [(1u64, 0.2), (2, 0.4), (3, 0.6), (4, 0.3)] {
        let c = LtpConfig { lt_c: 100 * US, critical: critical.clone(), ..cfg(0.3) };
        let o = run(c, 300_000, random_loss(seed, loss, loss / 2.0), 10_000 * MS);
        check_finished(&o, 300_000, 0.3); // asserts every critical segment is in
        assert!(o.receiver.closed_early(), "loss {loss}: expected an early close");
        let crit = (0..o.receiver.reassembly().segmentation().count()).filter(|&i| o.receiver.is_critical(i)).count();
        assert!(crit > 20, "the fraction selects a fair share ({crit})");
    }
}

#[test]
fn reliable_mode_delivers_everything_despite_loss() {
    for seed in 1..5 {
        let c = LtpConfig { loss_tolerant: false, lt_c: 0, ..cfg(0.5) };
        let o = run(c, 300_000, random_loss(seed, 0.2, 0.2), 10_000 * MS);
        check_finished(&o, 300_000, 0.5);
        assert!(!o.receiver.closed_early() && o.missing.is_empty());
        assert_eq!(o.delivered_bytes, Some(300_000));
        assert!(o.sender.stats().retransmits > 0);
    }
}

#[test]
fn bubbles_are_exactly_the_lost_segments() {
    // Lose every copy of segments 3, 4 and 9 (a 2-segment run and a single one).
    let c = LtpConfig { critical: Critical::None, ..cfg(0.2) };
    let seg_bytes = 1440u64;
    let size = 20 * seg_bytes - 100; // the last segment is short
    let lost = [3 * seg_bytes, 4 * seg_bytes, 9 * seg_bytes];
    let o = run(c, size, Box::new(move |p, _| p.kind == PacketKind::Data && lost.contains(&p.seq)), 1_000 * MS);
    check_finished(&o, size, 0.2);
    assert!(o.receiver.closed_early() && o.receiver.bound_met());
    assert_eq!(o.receiver.bubbles(), vec![3 * seg_bytes..5 * seg_bytes, 9 * seg_bytes..10 * seg_bytes]);
    // Boundaries are whole f32 elements: no float is split.
    assert!(o.receiver.bubbles().iter().all(|b| b.start % 4 == 0 && b.end % 4 == 0));
}

/// A sender with a window far larger than the test's packets, sending 12 segments.
fn manual_sender(critical: Critical) -> (LtpSender, Vec<Packet>) {
    let cc = crate::cc::BdpConfig { initial_cwnd_bytes: 1 << 20, ..Default::default() };
    let c = LtpConfig { critical, initial_rtprop: 100 * US, cc, ..cfg(0.0) };
    let mut s = LtpSender::new(c, FLOW, SRC, DST, 12 * 1440, 0);
    let mut sent = Vec::new();
    let mut t = 0;
    while sent.len() < 10 {
        match s.poll_transmit(t) {
            Some(p) => sent.push(p),
            None => t = s.poll_timeout().unwrap(),
        }
    }
    (s, sent)
}

fn ack_of(seg: u64) -> Packet {
    Packet::ack(FLOW, DST, SRC, seg * 1440, 64)
}

#[test]
fn three_later_acks_mark_exactly_the_lost_packet() {
    let (mut s, sent) = manual_sender(Critical::None);
    assert_eq!(sent.iter().map(|p| p.seq / 1440).collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
    let t = 50 * US;
    for seg in [0, 1, 3, 4] {
        s.handle_packet(t, &ack_of(seg));
    }
    assert_eq!(s.lost(), 0, "only two packets sent after segment 2 are ACKed");
    s.handle_packet(t, &ack_of(5));
    assert_eq!(s.lost(), 1);
    assert_eq!(s.retransmission_queue(), vec![2], "exactly segment 2; 6..9 are still in flight");
    s.handle_packet(t, &ack_of(5)); // a duplicate ACK changes nothing
    s.handle_packet(t, &ack_of(7)); // 6 has 7 later, not yet 3
    assert_eq!(s.lost(), 1);
    // Normal retransmissions wait in RQ until NQ (segments 10, 11) is sent.
    let mut order = Vec::new();
    let mut t = t;
    while order.len() < 3 {
        match s.poll_transmit(t) {
            Some(p) => order.push(p.seq / 1440),
            None => t = s.poll_timeout().unwrap(),
        }
    }
    assert_eq!(order, vec![10, 11, 2]);
    assert_eq!(s.stats().retransmits, 1);
}

#[test]
fn lost_critical_packet_goes_back_to_cq_ahead_of_normal_data() {
    let (mut s, _) = manual_sender(Critical::Segments(Arc::from([2u64])));
    // Segment 2 is critical: it went first, before the normal segments 0, 1, 3...
    for seg in [0, 1, 3] {
        s.handle_packet(50 * US, &ack_of(seg));
    }
    assert_eq!(s.lost(), 1);
    let mut t = 50 * US;
    let p = loop {
        match s.poll_transmit(t) {
            Some(p) => break p,
            None => t = s.poll_timeout().unwrap(),
        }
    };
    assert_eq!(p.seq / 1440, 2, "CQ is served before NQ (segment 10)");
}

#[test]
fn a_tail_loss_is_found_by_the_rto() {
    // Lose the first copy of the last segment: no later packet exists to reveal it.
    let size = 50 * 1440;
    let last = 49 * 1440;
    let mut dropped = false;
    let lose = Box::new(move |p: &mut Packet, _| {
        let hit = !dropped && p.kind == PacketKind::Data && p.seq == last;
        dropped |= hit;
        hit
    });
    let o = run(LtpConfig { loss_tolerant: false, ..cfg(0.0) }, size, lose, 100 * MS);
    check_finished(&o, size, 0.0);
    assert_eq!(o.delivered_bytes, Some(size));
    assert_eq!((o.sender.stats().retransmits, o.sender.stats().timeouts), (1, 1));
    let t = o.delivered_at.unwrap();
    assert!(t >= cfg(0.0).min_rto && t < 2 * cfg(0.0).min_rto, "one RTO: {t}");
}

#[test]
fn bdp_estimator_converges_to_the_pipe() {
    let pipe = Link { bps: 1_000_000_000, delay: 50 * US };
    let c = LtpConfig { initial_rtprop: 10 * US, initial_btlbw_bps: 100_000_000_000, loss_tolerant: false, ..cfg(0.0) };
    let size = 2000 * 1440; // full segments only: every RTT sample has the same serialization
    let s = LtpSender::new(c.clone(), FLOW, SRC, DST, size, 0);
    let r = LtpReceiver::new(c, FLOW, DST, SRC, size);
    let o = run_with(s, r, size, pipe, no_loss(), 1_000 * MS);
    check_finished(&o, size, 0.0);
    let cc = o.sender.congestion_control();
    let bw = cc.btlbw_bps() as f64 / pipe.bps as f64;
    assert!((0.95..=1.01).contains(&bw), "BtlBw {} vs pipe {}", cc.btlbw_bps(), pipe.bps);
    // Minimum RTT: data serialization + ACK serialization + both delays.
    let base = 2 * pipe.delay + serialization(1500, pipe.bps) + serialization(64, pipe.bps);
    assert!(
        cc.rtprop() >= base && cc.rtprop() <= base + serialization(1500, pipe.bps),
        "RTprop {} vs {base}",
        cc.rtprop()
    );
    assert_eq!(cc.phase(), crate::cc::BdpPhase::ProbeBw);
    // Queueing stays bounded by the BDP window: the whole transfer is near line rate.
    let ideal = serialization(1500, pipe.bps) * size.div_ceil(1440);
    assert!(o.delivered_at.unwrap() < ideal * 115 / 100, "{:?} vs {ideal}", o.delivered_at);
    // The receiver learned the measured path for its LT threshold.
    let lt = o.receiver.lt_state();
    assert!(lt.path_measured());
    assert!(lt.rtprop().abs_diff(cc.rtprop()) <= US && lt.btlbw_bps().abs_diff(cc.btlbw_bps()) < cc.btlbw_bps() / 10);
}

#[test]
fn lt_state_carries_across_transfers() {
    let size = 200_000;
    let c = cfg(0.1);
    let first = run(c.clone(), size, no_loss(), 100 * MS);
    let lt = first.receiver.lt_state().clone();
    let took = first.receiver.closed_at().unwrap() - first.receiver.started_at().unwrap();
    assert_eq!(lt.shortest_complete(), Some((size, took)));
    // The next transfer on the link uses the shortest complete transfer as its threshold.
    let mut r = LtpReceiver::with_lt_state(c.clone(), FLOW, DST, SRC, size, lt.clone());
    assert_eq!(r.lt_threshold(), took);
    assert_eq!(r.deadline(), took + c.lt_c);
    // A receiver with many links takes the deadline from the largest LT.
    r.set_group_max_lt(took * 3);
    assert_eq!(r.deadline(), 3 * took + c.lt_c);
    // A slower complete transfer does not raise the threshold; another size uses the formula.
    let mut lt2 = lt.clone();
    lt2.record_complete(size, took * 2);
    assert_eq!(lt2.threshold(size, 0), took);
    let other = LtpReceiver::with_lt_state(c.clone(), FLOW, DST, SRC, size * 2, lt.clone());
    assert_ne!(other.lt_threshold(), took);
    // A new epoch starts over from the formula.
    lt2.new_epoch();
    assert_eq!(lt2.shortest_complete(), None);
    // The second transfer itself, started warm on the sender side too, is lossless.
    let s = LtpSender::with_path(c.clone(), FLOW, SRC, DST, size, 0, first.sender.path());
    let r = LtpReceiver::with_lt_state(c, FLOW, DST, SRC, size, lt);
    let second = run_with(s, r, size, PIPE, no_loss(), 100 * MS);
    check_finished(&second, size, 0.1);
    assert_eq!(second.delivered_bytes, Some(size));
}

#[test]
fn strays_and_malformed_packets_are_ignored() {
    let mut r = LtpReceiver::new(cfg(0.0), FLOW, DST, SRC, 10_000);
    let data = |seq, len| Packet::data(FLOW, SRC, DST, seq, len, 60);
    assert_eq!(r.receive(0, &data(0, 1440)), Some(0..1440));
    assert_eq!(r.poll_transmit(0).map(|a| (a.kind, a.seq)), Some((PacketKind::Ack, 0)));
    assert_eq!(r.receive(1, &data(0, 1440)), None, "duplicate");
    assert_eq!(r.poll_transmit(1).map(|a| a.seq), Some(0), "a duplicate is ACKed again");
    for (seq, len) in [(10, 1440), (1440, 100), (9_000, 2000), (u64::MAX - 5, 1440), (20_000, 1)] {
        assert_eq!(r.receive(2, &data(seq, len)), None);
    }
    assert_eq!(r.rejected(), 5);
    assert_eq!(r.poll_transmit(2), None, "malformed data is not ACKed");
    assert_eq!(r.receive(3, &Packet { flow: FLOW + 1, ..data(1440, 1440) }), None);
    assert_eq!(r.receive(3, &Packet { src: 9, ..data(1440, 1440) }), None);
    assert_eq!(r.delivered_bytes(), 1440);
    // The sender ignores ACKs that do not name one of its segments.
    let mut s = LtpSender::new(cfg(0.0), FLOW, SRC, DST, 10_000, 0);
    while s.poll_transmit(0).is_some() {}
    for seq in [7, 10_000, u64::MAX] {
        s.handle_packet(1, &Packet::ack(FLOW, DST, SRC, seq, 64));
    }
    assert_eq!(s.acked_segments(), 0);
    s.handle_packet(1, &Packet::ctrl(PacketKind::Ctrl(CtrlOp::Stop), FLOW + 1, DST, SRC, 0, 64));
    assert!(!s.is_done() && s.poll_transmit(1).is_none_or(|p| p.kind == PacketKind::Data));
}

#[test]
fn path_packing_round_trips_and_never_yields_zero() {
    let p = PathModel { rtprop: 12_345 * crate::time::NS, btlbw_bps: 25_000_000_000 };
    assert_eq!(unpack_path(pack_path(p)), p);
    let z = unpack_path(0);
    assert!(z.rtprop > 0 && z.btlbw_bps > 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]
    #[test]
    fn bound_and_tensor_limits_hold_for_random_losses(
        seed: u64, size in 0u64..120_000, data_loss in 0.0f64..0.6, other_loss in 0.0f64..0.3,
        bound in prop_oneof![Just(0.0), 0.0f64..0.5], mss in 100u32..1500, loss_tolerant: bool,
        lt_c_us in 0u64..2_000, critical_frac in 0.0f64..0.3,
    ) {
        let c = LtpConfig {
            mss, loss_tolerant, lt_c: lt_c_us * US,
            critical: Critical::Fraction { fraction: critical_frac, seed },
            ..cfg(bound)
        };
        // Some data is corrupted in flight, and must never be placed outside the tensor.
        let o = run(c, size, corrupting_loss(seed, data_loss, other_loss, size), 100_000 * MS);
        check_finished(&o, size, bound);
        let r = &o.receiver;
        if r.bound_met() {
            prop_assert!(r.delivered_fraction() >= 1.0 - bound - 1e-9);
        }
        if !loss_tolerant {
            prop_assert!(o.missing.is_empty());
        }
    }
}

/// A 10 ms RTT path at 1 Gbit/s, `min_rto` 1 ms: the RTO's floor bounds its variance term
/// (`srtt + max(4 rttvar, min_rto)`), so the queue Startup builds never fires it. With the
/// floor on the whole RTO, `rttvar` decays toward 0 on the steady path and a packet
/// queued a little longer than the last ones timed out (spuriously: nothing is lost).
#[test]
fn a_steady_rtt_far_above_min_rto_never_times_out() {
    let pipe = Link { bps: 1_000_000_000, delay: 5 * MS };
    let c = LtpConfig { initial_rtprop: 10 * MS, initial_btlbw_bps: pipe.bps, loss_tolerant: false, ..cfg(0.0) };
    let size = 1_250_000;
    let s = LtpSender::new(c.clone(), FLOW, SRC, DST, size, 0);
    let r = LtpReceiver::new(c, FLOW, DST, SRC, size);
    let o = run_with(s, r, size, pipe, no_loss(), 2_000 * MS);
    check_finished(&o, size, 0.0);
    assert_eq!(o.delivered_bytes, Some(size));
    let st = o.sender.stats();
    assert_eq!((st.timeouts, st.retransmits, o.sender.lost()), (0, 0, 0));
}

/// With `leaving_path`, a finished sender leaves its measured path model, and a sender
/// started from it skips Startup. At 10 ms RTT the first 1.25 MB transfer spends ~7 round
/// trips growing its window from 10 packets and, never filling the pipe, measures about
/// half its rate; each warm transfer after it opens with the probing phase (gain 1.25), so
/// the chain climbs to the pipe's rate and then takes one serialization plus one RTT.
#[test]
fn transfers_started_from_the_last_ones_path_skip_startup_and_reach_the_pipe() {
    let pipe = Link { bps: 1_000_000_000, delay: 5 * MS };
    let c = LtpConfig { initial_rtprop: 10 * MS, initial_btlbw_bps: pipe.bps, loss_tolerant: false, ..cfg(0.0) };
    let size = 1_250_000;
    // the sending and the receiving host's states
    let mut hosts: [HostState; 2] = Default::default();
    let mut took = vec![];
    for i in 0..8 {
        let s = match hosts[0].ltp_path(DST) {
            Some(path) => LtpSender::with_path(c.clone(), FLOW, SRC, DST, size, 0, path),
            None => LtpSender::new(c.clone(), FLOW, SRC, DST, size, 0),
        };
        assert_eq!(s.congestion_control().phase() == crate::cc::BdpPhase::ProbeBw, i > 0);
        let (s, r) = (s.leaving_path(), LtpReceiver::new(c.clone(), FLOW, DST, SRC, size));
        let o = run_between(&mut hosts, s, r, size, pipe, no_loss(), 2_000 * MS);
        check_finished(&o, size, 0.0);
        let path = hosts[0].ltp_path(DST).expect("a measured path is left");
        assert_eq!(hosts[0].ltp_path(SRC), None, "for its peer only");
        assert_eq!(path, o.sender.path());
        assert!(path.rtprop >= 10 * MS && path.btlbw_bps <= pipe.bps, "{path:?}");
        assert_eq!(o.sender.stats().timeouts, 0);
        took.push(o.delivered_at.unwrap());
    }
    let wire = serialization(1500, pipe.bps) * size.div_ceil(1440);
    let last = *took.last().unwrap();
    assert!(last < (wire + 10 * MS) * 115 / 100, "warm: {took:?} vs serialization {wire} + one RTT");
    assert!(took[0] > 3 * last, "Startup: {took:?}");
}

/// The builder's per-link carry for a driver that does not know the path's RTT (the
/// runtime, `LtpCarry::rtt`): a link's first transfer starts from a 10 µs guess, and its
/// RTO (1 ms floor) fires before the first ACK of a 10 ms path; the next transfer starts
/// from the measured RTprop and times out no more. With `LtpCarry::path` it also skips
/// Startup.
#[test]
fn the_builder_starts_a_links_next_transfer_from_the_last_ones_measurements() {
    use crate::transport::ltp::spec::{LtpBuild, LtpCarry};
    use crate::transport::spec::{Build, Transfer};
    let pipe = Link { bps: 1_000_000_000, delay: 5 * MS };
    let size = 1_250_000;
    let t = Transfer {
        flow: FLOW,
        src: SRC,
        dst: DST,
        bytes: size,
        loss_bound: 0.0,
        loss_tolerant: false,
        priority: 1,
        elem_bytes: 4,
        line_rate_bps: pipe.bps,
        important_fraction: None,
        idle_rtt: None,
    };
    for carry in [LtpCarry { rtt: true, ..LtpCarry::default() }, LtpCarry { path: true, ..LtpCarry::default() }] {
        let ltp = LtpConfig { initial_rtprop: 10 * US, ..LtpConfig::default() };
        let b = LtpBuild::new(ltp.clone(), carry);
        let mut hosts: [HostState; 2] = Default::default();
        let mut runs = vec![];
        for _ in 0..2 {
            let (mut s, mut r) = (b.sender(&t, 0, &mut hosts[0]).unwrap(), b.receiver(&t, &mut hosts[1]).unwrap());
            let tags = Tags::new(FLOW, SRC, DST, size, ltp.data_priority, ltp.ctrl_priority);
            let (o, missing) = placing_pipe_in(
                &mut hosts,
                &mut s,
                &mut r,
                pipe,
                no_loss(),
                2_000 * MS,
                tags,
                |r, t, p| r.receive(t, p),
                |_, _, _| false,
            );
            assert!(missing.is_empty(), "{carry:?}");
            runs.push((o.delivered.unwrap().0, s.stats().timeouts));
        }
        let [(t1, rto1), (t2, rto2)] = runs[..] else { unreachable!() };
        assert!(rto1 > 0 && rto2 == 0, "{carry:?}: RTOs {rto1} then {rto2}");
        if carry.path {
            assert!(t1 > 2 * t2, "{carry:?}: Startup {t1} vs warm {t2}");
        }
    }
}
