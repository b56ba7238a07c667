use std::ops::Range;

use proptest::prelude::*;

use super::*;
use crate::packet::{CtrlOp, Packet, PacketKind};
use crate::testkit::{corrupting_loss, placing_pipe_in, random_loss, Link, LossFn, PipeOutcome, Tags, Transferred};
use crate::time::{serialization, Time, MS, US};
use crate::transport::{Endpoint, EndpointEvent, HostState};

const FLOW: u32 = 11;
const SRC: u32 = 1;
const DST: u32 = 2;
const DELAY: Time = 5 * US;
const RTT: Time = 2 * DELAY;

fn cfg(loss_bound: f64) -> DlcpConfig {
    DlcpConfig { loss_bound, line_rate_bps: 10_000_000_000, ctrl_rto: MS, ..DlcpConfig::default() }
}

type Outcome = Transferred<DlcpSender, DlcpReceiver>;

/// Run one transfer over a pipe with fixed one-way `DELAY` and the given losses.
/// Every data range the receiver hands out is written into a buffer of exactly `size`
/// bytes (slicing panics on any write outside the tensor).
fn run(cfg: DlcpConfig, size: u64, lose: LossFn, limit: Time) -> Outcome {
    let mut s = DlcpSender::new(cfg, FLOW, SRC, DST, size, 0);
    let mut r = DlcpReceiver::new(cfg, FLOW, DST, SRC, size);
    let tags = Tags::new(FLOW, SRC, DST, size, cfg.data_priority, cfg.ctrl_priority);
    let done = |_: &DlcpSender, r: &DlcpReceiver, o: &PipeOutcome| {
        o.sender_done_at.is_some() && r.is_closed() && r.poll_timeout().is_none()
    };
    let hosts = &mut Default::default();
    let ran =
        placing_pipe_in(hosts, &mut s, &mut r, Link::delay(DELAY), lose, limit, tags, DlcpReceiver::receive, done);
    Outcome::new(ran, s, r)
}

/// Checks every completed transfer must pass.
fn check_completed(o: &Outcome, size: u64, bound: f64) {
    assert!(o.delivered_at.is_some(), "never delivered");
    assert!(o.sender_done_at.is_some(), "sender never done");
    assert!(o.receiver.is_closed() && o.receiver_quiet, "receiver not closed and quiet");
    let at_finish = o.delivered_bytes.unwrap();
    assert_eq!(Some(at_finish), o.receiver.delivered_at_finish());
    assert!(at_finish as f64 >= (1.0 - bound) * size as f64 - 1e-6, "{at_finish} of {size} < 1 - {bound}");
    assert!(o.receiver.delivered_bytes() >= at_finish);
    assert_eq!(o.receiver.bubbles(), o.missing, "reported bubbles differ from what was really missing");
    let missing: u64 = o.missing.iter().map(|m| m.end - m.start).sum();
    assert_eq!(missing, size - o.receiver.delivered_bytes());
}

#[test]
fn lossless_p0_delivers_every_byte() {
    for size in [0u64, 1, 4, 1440, 1441, 100_000, 1_000_003] {
        let o = run(cfg(0.0), size, Box::new(|_, _| false), 100 * MS);
        check_completed(&o, size, 0.0);
        assert_eq!(o.delivered_bytes, Some(size));
        assert!(o.receiver.bubbles().is_empty());
        assert_eq!(o.sender.rounds(), 1, "one STOP, no resend round");
        assert_eq!(o.sender.stats().retransmits, 0);
        assert_eq!(o.receiver.early_discards(), 0);
        // Paced at line rate: the last packet leaves after the serialization of the rest.
        let pkts = size.div_ceil(1440);
        let pacing = pkts.saturating_sub(1) * serialization(1500, 10_000_000_000);
        assert!(o.delivered_at.unwrap() >= pacing + DELAY);
        assert!(o.delivered_at.unwrap() <= pacing + 2 * RTT, "size {size}: {:?}", o.delivered_at);
    }
}

#[test]
fn data_is_paced_and_tagged() {
    let c = DlcpConfig { data_priority: 3, importance: Importance::None, ..cfg(0.0) };
    let mut s = DlcpSender::new(c, FLOW, SRC, DST, 10 * 1440, 0);
    let start = s.poll_transmit(0).unwrap();
    assert_eq!((start.kind, start.seq, start.priority), (PacketKind::Ctrl(CtrlOp::Start), 10 * 1440, 0));
    let first = s.poll_transmit(0).unwrap();
    assert_eq!((first.kind, first.seq, first.len, first.wire_bytes), (PacketKind::Data, 0, 1440, 1500));
    assert!(!first.ecn.ect && first.priority == 3);
    assert_eq!(s.poll_transmit(0), None, "next data waits for its pacing slot");
    let gap = serialization(1500, 10_000_000_000);
    assert_eq!(s.poll_timeout(), Some(gap));
    assert_eq!(s.poll_transmit(gap - 1), None);
    assert_eq!(s.poll_transmit(gap).unwrap().seq, 1440);
    // Real-value importance overrides the configured source.
    s.set_importance_mask(vec![true, false, true]);
    assert!(s.poll_transmit(2 * gap).unwrap().ecn.ect);
    let all = DlcpSender::new(cfg(0.0), FLOW, SRC, DST, 1440, 0).poll_transmit(0);
    assert!(all.is_some());
}

#[test]
fn random_loss_with_bound_completes_with_exact_bubbles() {
    let size = 500_000;
    for (i, &loss) in [0.01, 0.05, 0.1, 0.2].iter().enumerate() {
        for &bound in &[0.01, 0.05, 0.1, 0.3] {
            let o = run(cfg(bound), size, random_loss(7 + i as u64, loss, loss), 1_000 * MS);
            check_completed(&o, size, bound);
        }
    }
}

#[test]
fn p0_with_loss_both_ways_delivers_everything() {
    for seed in 1..6 {
        let o = run(cfg(0.0), 300_000, random_loss(seed, 0.2, 0.2), 1_000 * MS);
        check_completed(&o, 300_000, 0.0);
        assert!(o.receiver.bubbles().is_empty());
        assert!(o.sender.stats().retransmits > 0);
    }
}

#[test]
fn lost_last_data_packet_costs_one_rtt_not_an_rto() {
    let size = 200_000;
    let base = run(cfg(0.0), size, Box::new(|_, _| false), 100 * MS).delivered_at.unwrap();
    let last = (size - 1) / 1440 * 1440;
    let mut dropped = false;
    let lose = Box::new(move |p: &mut Packet, _| {
        let hit = !dropped && p.kind == PacketKind::Data && p.seq == last;
        dropped |= hit;
        hit
    });
    let o = run(cfg(0.0), size, lose, 100 * MS);
    check_completed(&o, size, 0.0);
    assert_eq!(o.sender.stats().retransmits, 1);
    let t = o.delivered_at.unwrap();
    assert!(t <= base + 2 * RTT, "lossless {base} ps, last lost {t} ps");
    assert!(t < cfg(0.0).ctrl_rto, "no timeout involved");
}

#[test]
fn control_loss_is_survived() {
    // Lose the first copy of every control message and of every control ACK, both ways.
    let mut seen = std::collections::HashSet::new();
    let lose = Box::new(move |p: &mut Packet, _| p.kind != PacketKind::Data && seen.insert((p.kind, p.seq)));
    let size = 100_000;
    let o = run(cfg(0.0), size, lose, 100 * MS);
    check_completed(&o, size, 0.0);
    assert_eq!(o.delivered_bytes, Some(size));
    assert!(o.sender.ctrl_retransmits() > 0 && o.receiver.ctrl_retransmits() > 0);
    // START was lost: the zero-RTT data sent before it arrived was discarded and resent.
    assert!(o.receiver.early_discards() > 0);
    assert!(o.sender.stats().retransmits > 0);
}

#[test]
fn heavy_control_loss_still_completes() {
    for seed in 1..4 {
        let o = run(cfg(0.05), 200_000, random_loss(seed, 0.1, 0.5), 10_000 * MS);
        check_completed(&o, 200_000, 0.05);
    }
}

#[test]
fn strays_and_malformed_data_are_ignored() {
    let mut r = DlcpReceiver::new(cfg(0.0), FLOW, DST, SRC, 10_000);
    let start = Packet::ctrl(PacketKind::Ctrl(CtrlOp::Start), FLOW, SRC, DST, 10_000, 64);
    let data = |seq, len| Packet::data(FLOW, SRC, DST, seq, len, 60);
    assert_eq!(r.receive(0, &data(0, 1440)), None);
    assert_eq!(r.early_discards(), 1);
    // A START of another size is not ours: refused, not acknowledged.
    r.receive(0, &Packet { seq: 99, ..start });
    assert_eq!((r.rejected(), r.poll_transmit(0)), (1, None));
    r.receive(0, &start);
    assert_eq!(r.poll_transmit(0).unwrap().kind, PacketKind::CtrlAck(CtrlOp::Start));
    assert_eq!(r.receive(1, &data(0, 1440)), Some(0..1440));
    assert_eq!(r.receive(1, &data(0, 1440)), None, "duplicate");
    for (seq, len) in [(10, 1440), (1440, 100), (9_000, 2000), (u64::MAX - 5, 1440), (20_000, 1)] {
        assert_eq!(r.receive(2, &data(seq, len)), None);
    }
    assert_eq!(r.rejected(), 6);
    // Another flow, or the right flow from the wrong host, is not looked at.
    assert_eq!(r.receive(3, &Packet { flow: FLOW + 1, ..data(1440, 1440) }), None);
    assert_eq!(r.receive(3, &Packet { src: 9, ..data(1440, 1440) }), None);
    assert_eq!(r.delivered_bytes(), 1440);
}

#[test]
fn rate_control_halves_on_low_receive_rate_and_resets_on_retx() {
    let c = cfg(0.0);
    let line = c.line_rate_bps;
    let mut s = DlcpSender::new(c, FLOW, SRC, DST, 10_000_000, 0);
    let report = |bps| Packet::ctrl(PacketKind::Ctrl(CtrlOp::Rate), FLOW, DST, SRC, bps, 64);
    let mut t = 0;
    // Send one whole period at line rate while the receiver reports a tenth of it.
    while t < c.rate_period {
        while s.poll_transmit(t).is_some() {}
        if t > c.rate_period / 2 {
            s.handle_packet(t, &report(line / 10));
        }
        t = s.poll_timeout().unwrap();
        s.handle_timeout(t);
    }
    assert_eq!(s.rate_bps(), line / 2);
    assert_eq!(s.rate_control().phase(), crate::cc::RatePhase::CongestionAvoidance);
    // A healthy report in the next period: additive increase by 5% of line rate.
    let end = 2 * c.rate_period;
    while t < end {
        while s.poll_transmit(t).is_some() {}
        s.handle_packet(t, &report(line));
        t = s.poll_timeout().unwrap();
        s.handle_timeout(t);
    }
    assert_eq!(s.rate_bps(), line / 2 + line / 20);
    // Pacing follows the rate: the gap after the next data packet is 1500 B at that rate.
    while s.poll_transmit(t).is_some() {}
    let t = s.poll_timeout().unwrap();
    assert_eq!(s.poll_transmit(t).map(|p| p.kind), Some(PacketKind::Data));
    assert_eq!(s.poll_timeout().unwrap() - t, serialization(1500, line / 2 + line / 20));
    // A retransmission request (answering STOP 0, which this sender has not sent yet) is
    // ignored; rate resets only for a request the sender acts on.
    let retx = |arg| Packet::ctrl(PacketKind::Ctrl(CtrlOp::Retx), FLOW, DST, SRC, arg, 64);
    s.handle_packet(t, &retx(RetxReq { round: 0, last: true, first: 0, set: RetxSet::Run(1) }.pack()));
    assert_eq!((s.retx_ignored(), s.rate_bps()), (1, line / 2 + line / 20));
}

#[test]
fn rate_decisions_use_the_real_period_and_the_lower_of_two_send_rates() {
    let c = cfg(0.0);
    let line = c.line_rate_bps;
    let report = |bps| Packet::ctrl(PacketKind::Ctrl(CtrlOp::Rate), FLOW, DST, SRC, bps, 64);
    // A driver that wakes a whole period late has sent two periods' worth at line rate: its
    // send rate is the line rate, not twice it, and a report of 0.9 x line is no loss.
    let mut s = DlcpSender::new(c, FLOW, SRC, DST, 100_000_000, 0);
    let late = 2 * c.rate_period;
    let mut t = 0;
    while t < late {
        while s.poll_transmit(t).is_some() {}
        // the pacing slots only: the period's end is not handled until `late`
        t = (t + serialization(1500, line)).min(late);
    }
    while s.poll_transmit(t).is_some() {}
    s.handle_packet(t, &report(line * 9 / 10));
    s.handle_timeout(t);
    assert_eq!(s.rate_bps(), line, "a late period is not a faster one");
    // A sender idle for a period (its data held back, e.g. behind another transfer at the
    // NIC) that then sends at line rate is judged against the idle period too: a report of
    // that idle period does not halve it.
    let mut s = DlcpSender::new(c, FLOW, SRC, DST, 100_000_000, 0);
    let t1 = s.poll_timeout_unpaced().unwrap();
    s.handle_timeout(t1); // a period with nothing sent
    let mut t = t1;
    while t < t1 + c.rate_period {
        while s.poll_transmit(t).is_some() {}
        t = s.poll_timeout().unwrap();
        if t >= t1 + c.rate_period {
            s.handle_packet(t, &report(0));
        }
        s.handle_timeout(t);
    }
    assert_eq!(s.rate_bps(), line);
    // Loss at a steady rate still halves: another full period reported as a tenth.
    let end = t + c.rate_period;
    while t < end {
        while s.poll_transmit(t).is_some() {}
        s.handle_packet(t, &report(line / 10));
        t = s.poll_timeout().unwrap();
        s.handle_timeout(t);
    }
    assert_eq!(s.rate_bps(), line / 2);
}

/// Drops data beyond what a `bps` bottleneck with a `buffer`-byte queue can carry
/// (a fluid queue on send times; the delay stays fixed). Counts (sent, dropped).
fn bottleneck<'a>(bps: u64, buffer: u64, counts: &'a std::cell::Cell<(u64, u64)>) -> LossFn<'a> {
    let (mut backlog, mut last) = (0u64, 0 as Time);
    Box::new(move |p: &mut Packet, _| {
        if p.kind != PacketKind::Data {
            return false;
        }
        let drained = ((p.sent_at - last) as u128 * bps as u128 / 8 / crate::time::SEC as u128) as u64;
        backlog = backlog.saturating_sub(drained);
        last = p.sent_at;
        let drop = backlog + p.wire_bytes as u64 > buffer;
        if !drop {
            backlog += p.wire_bytes as u64;
        }
        let (n, d) = counts.get();
        counts.set((n + 1, d + drop as u64));
        drop
    })
}

#[test]
fn rate_control_backs_off_behind_a_bottleneck() {
    // Line rate 10 Gbit/s into a 2 Gbit/s bottleneck: at line rate 80% would be lost.
    let size = 5_000_000;
    let loss_ratio = |c: DlcpConfig| {
        let counts = std::cell::Cell::new((0, 0));
        let o = run(c, size, bottleneck(2_000_000_000, 30_000, &counts), 10_000 * MS);
        check_completed(&o, size, c.loss_bound);
        let (n, d) = counts.get();
        d as f64 / n as f64
    };
    let with_cc = loss_ratio(cfg(0.1));
    let without = loss_ratio(DlcpConfig { delta: 1e12, ..cfg(0.1) });
    assert!(without > 0.75, "no rate control: {without}");
    // Minimal rate control only halves once send > delta x receive, i.e. past 1 - 1/delta
    // = 50% loss: it prevents collapse, it does not aim for zero loss.
    assert!(with_cc < 0.55 && with_cc < without - 0.2, "with rate control {with_cc}, without {without}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn bound_holds_for_random_losses(
        seed: u64, size in 0u64..150_000, data_loss in 0.0f64..0.5, ctrl_loss in 0.0f64..0.3,
        bound in prop_oneof![Just(0.0), 0.0f64..0.5], mss in 100u32..1500,
    ) {
        let c = DlcpConfig { mss, ..cfg(bound) };
        // Some data is corrupted in flight, and must never be placed outside the tensor.
        let o = run(c, size, corrupting_loss(seed, data_loss, ctrl_loss, size), 100_000 * MS);
        check_completed(&o, size, bound);
        prop_assert!(o.receiver.delivered_fraction() >= 1.0 - bound - 1e-9);
    }
}

proptest! {
    /// A round's batch of RETX messages names exactly the missing segments, survives
    /// packing, flags only its last message, and needs at most one message per missing
    /// run (fewer when runs are short and close: bitmaps).
    #[test]
    fn retx_batch_encodes_exactly_the_missing_segments(
        gaps in proptest::collection::vec((0u64..60, 1u64..80), 0..40),
        round in 0u64..5000,
    ) {
        let mut runs: Vec<Range<u64>> = Vec::new();
        let mut at = 0;
        for (skip, len) in gaps {
            at += skip + if runs.is_empty() { 0 } else { 1 };
            runs.push(at..at + len);
            at += len;
        }
        let batch = RetxReq::batch(round, &runs);
        prop_assert!(batch.len() <= runs.len());
        prop_assert_eq!(batch.iter().filter(|r| r.last).count(), (!runs.is_empty()) as usize);
        prop_assert!(batch.last().is_none_or(|r| r.last));
        let mut got: Vec<u64> = Vec::new();
        for r in &batch {
            let u = RetxReq::unpack(r.pack());
            prop_assert_eq!(u, *r);
            prop_assert_eq!(u.round as u64, round % 1024);
            got.extend(u.runs().into_iter().flatten());
        }
        let want: Vec<u64> = runs.iter().cloned().flatten().collect();
        prop_assert_eq!(got, want);
    }
}

#[test]
fn next_stop_waits_for_the_whole_request_and_rate_resets_once_per_round() {
    let c = cfg(0.0); // 10 Gb/s: a 1500 B packet every 1.2 us
    let n = 1000u64; // segments
    let mut s = DlcpSender::new(c, FLOW, SRC, DST, n * 1440, 0);
    let mut t = 0;
    // round 0: everything goes out, then STOP(0)
    while s.rounds() == 0 {
        while s.poll_transmit(t).is_some() {}
        t = s.poll_timeout().unwrap();
        s.handle_timeout(t);
    }
    // START and STOP(0) arrived (else the control channel would repeat them)
    for (op, arg) in [(CtrlOp::Start, n * 1440), (CtrlOp::Stop, 0)] {
        s.handle_packet(t, &Packet::ctrl(PacketKind::CtrlAck(op), FLOW, DST, SRC, arg, 64));
    }
    let retx = |r: RetxReq| Packet::ctrl(PacketKind::Ctrl(CtrlOp::Retx), FLOW, DST, SRC, r.pack(), 64);
    let report = |bps| Packet::ctrl(PacketKind::Ctrl(CtrlOp::Rate), FLOW, DST, SRC, bps, 64);
    let batch = RetxReq::batch(0, &[0..600, 900..901, 905..907]);
    assert_eq!(batch.len(), 2, "a run for 0..600, one bitmap for 900 and 905..907");
    // The first message: resent at line rate; no STOP(1) before the flagged last one.
    s.handle_packet(t, &retx(batch[0]));
    assert_eq!(s.rate_bps(), c.line_rate_bps);
    let mut data = 0;
    // Two rate periods of sending while the receiver reports almost nothing: the first
    // decision after the reset is skipped, the second halves.
    let until = t + 2 * c.rate_period + 1;
    while t < until {
        s.handle_packet(t, &report(1));
        while let Some(p) = s.poll_transmit(t) {
            assert_ne!(p.kind, PacketKind::Ctrl(CtrlOp::Stop), "STOP before the request was complete");
            data += (p.kind == PacketKind::Data) as u32;
        }
        t = s.poll_timeout().unwrap().min(until);
        s.handle_timeout(t);
    }
    assert_eq!(s.rate_bps(), c.line_rate_bps / 2);
    // The run is all resent well within 2 ms; still no STOP: the request is not complete.
    let until = t + 2 * MS;
    while t < until {
        while let Some(p) = s.poll_transmit(t) {
            assert_ne!(p.kind, PacketKind::Ctrl(CtrlOp::Stop), "STOP before the request was complete");
            data += (p.kind == PacketKind::Data) as u32;
        }
        t = s.poll_timeout().unwrap().min(until);
        s.handle_timeout(t);
    }
    assert_eq!((data, s.rounds()), (600, 1));
    // The rest of the same request does not reset the rate again: once per round.
    let before = s.rate_bps();
    assert!(before <= c.line_rate_bps / 2);
    s.handle_packet(t, &retx(batch[1]));
    assert_eq!(s.rate_bps(), before);
    s.handle_packet(t, &retx(batch[1])); // a duplicate is ignored
    assert_eq!(s.retx_ignored(), 1);
    while s.rounds() < 2 {
        while let Some(p) = s.poll_transmit(t) {
            data += (p.kind == PacketKind::Data) as u32;
        }
        t = s.poll_timeout().unwrap();
        s.handle_timeout(t);
    }
    assert_eq!(data, 603, "the whole request, once; then STOP(1)");
}

/// After STOP the receiver asks for the first missing segments that meet the bound, not
/// for everything missing (unless `request_all_missing`).
#[test]
fn retx_request_covers_only_what_the_bound_needs() {
    for (all, want) in [(false, 50..90u64), (true, 50..100u64)] {
        let c = DlcpConfig { request_all_missing: all, ..cfg(0.1) };
        let seg = c.segmentation(FLOW, 100 * c.mss as u64);
        let mut r = DlcpReceiver::new(c, FLOW, DST, SRC, seg.total_bytes());
        let ctrl = |op, arg| Packet::ctrl(PacketKind::Ctrl(op), FLOW, SRC, DST, arg, 64);
        r.handle_packet(0, &ctrl(CtrlOp::Start, seg.total_bytes()));
        for g in seg.iter().take(50) {
            r.handle_packet(1, &Packet::data(FLOW, SRC, DST, g.offset, g.len, 60));
        }
        r.handle_packet(2, &ctrl(CtrlOp::Stop, 0));
        let mut asked: Vec<u64> = Vec::new();
        while let Some(p) = r.poll_transmit(3) {
            if p.kind == PacketKind::Ctrl(CtrlOp::Retx) {
                asked.extend(RetxReq::unpack(p.seq).runs().into_iter().flatten());
            }
        }
        assert_eq!(asked, want.collect::<Vec<_>>(), "request_all_missing = {all}");
    }
}

/// `poll_timeout_unpaced` is `poll_timeout` without the pacing slot: the control timeout
/// and the rate period, which a driver polling `poll_transmit` anyway must still wake for.
#[test]
fn unpaced_deadline_leaves_out_only_the_pacing_slot() {
    let c = cfg(0.0);
    let mut s = DlcpSender::new(c, FLOW, SRC, DST, 100 * c.mss as u64, 0);
    // START, then the first data packet: the next one may leave one packet time later
    let mut sent = 0;
    while let Some(p) = s.poll_transmit(0) {
        sent += 1;
        if p.kind == PacketKind::Data {
            break;
        }
    }
    assert_eq!(sent, 2);
    let slot = s.poll_timeout().unwrap();
    assert!(slot > 0 && slot < c.rate_period, "paced: {slot}");
    // START is pending until the receiver answers: its timeout, or the period, is next
    assert_eq!(s.poll_timeout_unpaced(), Some(c.ctrl_rto.min(c.rate_period)));
    // a receiver paces nothing
    let r = DlcpReceiver::new(c, FLOW, DST, SRC, 100 * c.mss as u64);
    assert_eq!(r.poll_timeout_unpaced(), r.poll_timeout());
}

/// A rate state reached at half line rate, as an earlier transfer would leave it.
fn halved(c: &DlcpConfig) -> crate::cc::MinimalRate {
    let mut cc = crate::cc::MinimalRate::new(c.line_rate_bps, c.delta, c.additive_increase_frac, 1);
    cc.on_period(c.line_rate_bps, c.line_rate_bps / 10);
    cc
}

/// The gap between a sender's 2nd and 3rd data packets, polled alone from `t0`: its pace.
fn data_gap(s: &mut DlcpSender, t0: Time) -> Time {
    let (mut data, mut t) = (Vec::new(), t0);
    while data.len() < 3 {
        while let Some(p) = s.poll_transmit(t) {
            if p.kind == PacketKind::Data {
                data.push(t);
            }
        }
        t = s.poll_timeout().unwrap();
    }
    data[2] - data[1]
}

#[test]
fn a_carried_rate_expires_once_the_pair_was_idle_longer_than_the_restart() {
    let c = cfg(0.0);
    let carried = super::CarriedRate { cc: halved(&c), last_active: 10 * MS };
    assert_eq!(carried.at(100 * MS, None), Some(halved(&c)), "without a restart: kept forever");
    assert_eq!(carried.at(11 * MS, Some(MS)), Some(halved(&c)), "idle exactly the restart: kept");
    assert_eq!(carried.at(11 * MS + 1, Some(MS)), None, "idle longer: a fresh start");
    assert!(DlcpConfig { rate_restart: Some(0), ..c }.validate().is_err());
}

#[test]
fn a_carried_rate_paces_the_first_round() {
    let c = cfg(0.0);
    let mut s = DlcpSender::with_rate(c, FLOW, SRC, DST, 100_000, 0, Some(halved(&c)));
    assert_eq!(s.rate_bps(), c.line_rate_bps / 2);
    assert_eq!(data_gap(&mut s, 0), serialization(1500, c.line_rate_bps / 2));
    // without a carried state: line rate
    let fresh = DlcpSender::with_rate(c, FLOW, SRC, DST, 100_000, 0, None);
    assert_eq!(fresh.rate_bps(), c.line_rate_bps);
}

/// As a driver does after feeding sender `i`: its `HandOn` goes to the sending host's
/// `host`, then every sender whose view of the host changed reads it again. Returns its
/// other events.
fn settle(host: &mut HostState, ss: &mut [DlcpSender], i: usize) -> Vec<EndpointEvent> {
    let mut events = Vec::new();
    while let Some(ev) = ss[i].poll_event() {
        match ev {
            EndpointEvent::HandOn => ss[i].hand_on(host),
            ev => events.push(ev),
        }
    }
    while let Some(flow) = host.take_stale() {
        if let Some(s) = ss.iter_mut().find(|s| s.flow() == flow) {
            s.hand_on(host);
        }
    }
    events
}

/// The DLCP senders with data that host state `host` counts toward DST.
fn counted(host: &HostState) -> usize {
    host.peer(DST).map_or(0, |p| p.dlcp_senders.flows().count())
}

/// The FINISH that ends sender `flow`'s data.
fn finish(flow: u32) -> Packet {
    Packet::ctrl(PacketKind::Ctrl(CtrlOp::Finish), flow, DST, SRC, 0, 64)
}

#[test]
fn senders_sharing_a_pair_rate_split_it_while_both_have_data() {
    let c = cfg(0.0);
    let mut host = HostState::new();
    let mut ss = vec![DlcpSender::new(c, FLOW, SRC, DST, 1_000_000, 0).sharing_rate(0)];
    settle(&mut host, &mut ss, 0);
    assert_eq!(counted(&host), 1);
    assert_eq!(data_gap(&mut ss[0], 0), serialization(1500, c.line_rate_bps), "alone: the whole rate");
    ss.push(DlcpSender::new(c, FLOW + 1, SRC, DST, 1_000_000, 0).sharing_rate(0));
    settle(&mut host, &mut ss, 1);
    assert_eq!(counted(&host), 2);
    assert_eq!(data_gap(&mut ss[1], 0), serialization(1500, c.line_rate_bps / 2), "two with data: half each");
    assert_eq!(ss[0].pacing_rate_bps(), c.line_rate_bps / 2, "the first one too");
    // a sender out of data (here: one segment, sent) leaves the count; so does a finished one
    ss.push(DlcpSender::new(c, FLOW + 2, SRC, DST, 1000, 0).sharing_rate(0));
    settle(&mut host, &mut ss, 2);
    assert_eq!(counted(&host), 3);
    while ss[2].poll_transmit(0).is_some() {}
    settle(&mut host, &mut ss, 2);
    assert_eq!(counted(&host), 2);
    ss[1].handle_packet(MS, &finish(FLOW + 1));
    settle(&mut host, &mut ss, 1);
    assert_eq!(counted(&host), 1);
    assert_eq!(ss[0].pacing_rate_bps(), c.line_rate_bps, "alone again");
    // another pair's count is its own
    let mut other = HostState::new();
    let mut elsewhere = vec![DlcpSender::new(c, FLOW + 3, SRC, DST + 1, 1_000_000, 0).sharing_rate(0)];
    settle(&mut host, &mut elsewhere, 0);
    settle(&mut other, &mut ss, 0);
    assert_eq!(counted(&host), 1);
    assert_eq!(data_gap(&mut elsewhere[0], 0), serialization(1500, c.line_rate_bps));
}

#[test]
fn split_by_priority_the_pairs_most_important_sender_paces_at_the_whole_rate() {
    // a sender splits the rate with the pair's senders at its data priority or above
    let sender = |flow, priority: u8| {
        let c = DlcpConfig { data_priority: priority, ..cfg(0.0) };
        DlcpSender::new(c, flow, SRC, DST, 1_000_000, 0).sharing_rate(priority)
    };
    let line = cfg(0.0).line_rate_bps;
    let mut host = HostState::new();
    let mut ss = vec![sender(FLOW, 6), sender(FLOW + 1, 6), sender(FLOW + 2, 2)];
    for i in 0..3 {
        settle(&mut host, &mut ss, i);
    }
    assert_eq!(data_gap(&mut ss[2], 0), serialization(1500, line), "nothing ahead: the whole rate");
    assert_eq!(data_gap(&mut ss[0], 0), serialization(1500, line / 3), "two at its priority, one ahead");
    ss[2].handle_packet(MS, &finish(FLOW + 2));
    settle(&mut host, &mut ss, 2);
    assert_eq!(ss[1].pacing_rate_bps(), line / 2);
}

/// Two transfers to the same peer share what the sending host keeps (the pair's rate
/// state, its senders with data); a transfer to another peer starts from its own.
#[test]
fn transfers_to_one_peer_share_host_state_and_another_peers_do_not() {
    use crate::transport::spec::{Build, Transfer};
    use crate::transport::Hosts;
    let c = DlcpConfig { rate_hint: RateHint::ReceiverShare, share_headroom: 1.0, ..cfg(0.0) };
    let b = DlcpBuild::new(c, RateState::PairShared);
    let line = c.line_rate_bps;
    let t = |flow, dst| Transfer {
        flow,
        src: SRC,
        dst,
        bytes: 10_000_000,
        loss_bound: 0.0,
        loss_tolerant: false,
        priority: 1,
        elem_bytes: 4,
        line_rate_bps: line,
        important_fraction: None,
        idle_rtt: None,
    };
    let mut hosts = Hosts::new();
    // a first transfer to DST is held to an eighth of the line by a report, and leaves
    // that rate state with its host
    let mut first = b.sender(&t(FLOW, DST), 0, hosts.host(SRC)).unwrap();
    let arg = share::RateReport { recv_bps: line, share_bps: Some(line / 8) }.pack(RateHint::ReceiverShare);
    first.handle_packet(US, &Packet::ctrl(PacketKind::Ctrl(CtrlOp::Rate), FLOW, DST, SRC, arg, 64));
    assert_eq!(first.poll_event(), Some(EndpointEvent::HandOn));
    first.hand_on(hosts.host(SRC));
    assert_eq!(hosts.host(SRC).dlcp_rate(DST).map(|c| c.cc.rate_bps()), Some(line / 8), "left for the pair");
    assert_eq!(hosts.host(SRC).dlcp_rate(DST + 1), None, "nothing for another peer");
    // the next transfer to DST starts from it and counts with the first; one to another
    // peer starts at line rate, alone
    let second = b.sender(&t(FLOW + 1, DST), 2 * US, hosts.host(SRC)).unwrap();
    let third = b.sender(&t(FLOW + 2, DST + 1), 2 * US, hosts.host(SRC)).unwrap();
    assert_eq!((second.pacing_rate_bps(), third.pacing_rate_bps()), (line / 8, line));
    for mut s in [second, third] {
        assert_eq!(s.poll_event(), Some(EndpointEvent::HandOn));
        s.hand_on(hosts.host(SRC));
    }
    let host = hosts.host(SRC);
    assert_eq!(host.take_stale(), Some(FLOW), "the first must see the pair's new count");
    let count = |p| host.peer(p).map_or(0, |p| p.dlcp_senders.flows().count());
    assert_eq!((count(DST), count(DST + 1)), (2, 1));
    // and another host keeps nothing of it
    assert!(hosts.get(DST).is_none());
}

#[test]
fn strictly_by_priority_the_pair_never_paces_above_its_rate_and_a_lower_sender_resumes_at_once() {
    let sender = |flow, priority: u8, bytes| {
        let c = DlcpConfig { data_priority: priority, ..cfg(0.0) };
        DlcpSender::new(c, flow, SRC, DST, bytes, 0).pacing_strictly()
    };
    let line = cfg(0.0).line_rate_bps;
    let mut alone = [sender(FLOW, 2, 1_000_000)];
    settle(&mut HostState::new(), &mut alone, 0);
    let min = alone[0].rate_control().min_rate_bps();
    assert_eq!(min, cfg(0.0).bps(1500), "one packet per rate period");
    assert_eq!(data_gap(&mut alone[0], 0), serialization(1500, line), "alone: the whole rate");

    // two back senders at priority 6 and a 100-packet front one at 2, polled together as a
    // NIC would whenever a slot comes (no NIC limit: each sends at its own pace)
    let mut ss = [sender(FLOW, 6, 1_000_000), sender(FLOW + 1, 6, 1_000_000), sender(FLOW + 2, 2, 144_000)];
    let mut host = HostState::new();
    for i in 0..3 {
        settle(&mut host, &mut ss, i);
    }
    let mut data: Vec<(Time, usize, u32)> = Vec::new();
    let mut woken = Vec::new();
    let mut t = 0;
    while t < 600 * US {
        // the senders with data queued: all three, then the two behind
        let counting = &ss[..if counted(&host) == 3 { 3 } else { 2 }];
        let paces: u64 = counting.iter().map(|s| s.pacing_rate_bps()).sum();
        assert!(paces <= line, "the pair's paces add up to at most its rate: {paces} at {t}");
        for i in 0..ss.len() {
            let s = &mut ss[i];
            if s.poll_timeout().is_some_and(|d| d <= t) {
                s.handle_timeout(t);
            }
            while let Some(p) = s.poll_transmit(t) {
                if p.kind == PacketKind::Data {
                    data.push((t, i, p.wire_bytes));
                }
            }
            woken.extend(settle(&mut host, &mut ss, i).into_iter().map(|ev| (t, i, ev)));
        }
        // a slot that moved into the past (the rate rose) is due now
        t = t.max(ss.iter().filter_map(|s| s.poll_timeout()).min().unwrap());
    }
    let times = |i| data.iter().filter(|d| d.1 == i).map(|d| d.0).collect::<Vec<_>>();
    let (back, front) = (times(0), times(2));
    assert_eq!(front.len(), 100);
    // the front sender paces at the rate less one minimal pace per sender behind it, they
    // at the minimal pace, so the pair at its rate
    assert_eq!(front[2] - front[1], serialization(1500, line - 2 * min));
    let done = *front.last().unwrap();
    // behind it: one packet at 0, the next slot at the minimal pace one period later
    assert!(done < cfg(0.0).rate_period);
    assert_eq!(back.iter().filter(|&&at| at < done).count(), 1);
    let bytes_until = |end: Time| data.iter().filter(|d| d.0 > 0 && d.0 <= end).map(|d| d.2 as u64).sum::<u64>();
    let allowed = |end: Time| (line as u128 * end as u128 / (8 * crate::time::SEC as u128)) as u64 + 3 * 1500;
    assert!(bytes_until(done) <= allowed(done), "{} > {}", bytes_until(done), allowed(done));
    // the front one ran out of data: it names the two behind it, and they split the whole
    // rate from their next slot at once, not one minimal slot later
    let wakes: Vec<_> = woken.iter().map(|&(at, i, ev)| (at, i, ev)).collect();
    assert_eq!(
        wakes,
        vec![(done, 2, EndpointEvent::Wake { flow: FLOW + 1 }), (done, 2, EndpointEvent::Wake { flow: FLOW })]
    );
    assert_eq!(back[1], done, "resumed as the front one ran out, not at its minimal slot");
    let after: Vec<_> = back.iter().filter(|&&at| at >= done).collect();
    assert_eq!(after[2] - after[1], serialization(1500, line / 2));
    assert!(after.len() > 100);
}

#[test]
fn a_start_rate_below_line_rate_paces_the_first_round_and_then_grows() {
    let c = DlcpConfig { start_rate_frac: 0.25, ..cfg(0.0) };
    let mut s = DlcpSender::new(c, FLOW, SRC, DST, 10_000_000, 0);
    let quarter = c.line_rate_bps / 4;
    assert_eq!(s.rate_bps(), quarter);
    assert_eq!(data_gap(&mut s, 0), serialization(1500, quarter));
    // in congestion avoidance: a period whose report shows no loss adds 5 % of line rate
    let report = Packet::ctrl(PacketKind::Ctrl(CtrlOp::Rate), FLOW, DST, SRC, quarter, 64);
    s.handle_packet(c.rate_period / 2, &report);
    s.handle_timeout(c.rate_period);
    assert_eq!(s.rate_bps(), quarter + c.line_rate_bps / 20);
    // the paper's start: line rate, where a loss-free period changes nothing
    assert_eq!(DlcpSender::new(cfg(0.0), FLOW, SRC, DST, 100_000, 0).rate_bps(), c.line_rate_bps);
    // a carried state wins over the start rate
    let carried = DlcpSender::with_rate(c, FLOW, SRC, DST, 100_000, 0, Some(halved(&c)));
    assert_eq!(carried.rate_bps(), c.line_rate_bps / 2);
    assert!(DlcpConfig { start_rate_frac: 0.0, ..cfg(0.0) }.validate().is_err());
    assert!(DlcpConfig { start_rate_frac: 1.5, ..cfg(0.0) }.validate().is_err());
}

#[test]
fn a_resend_round_restarts_at_line_rate_unless_configured_to_keep_the_rate() {
    for keep in [false, true] {
        let c = DlcpConfig { resend_at_line_rate: !keep, ..cfg(0.0) };
        // one segment: data, then STOP(0) right behind it
        let mut s = DlcpSender::with_rate(c, FLOW, SRC, DST, 1000, 0, Some(halved(&c)));
        while s.poll_transmit(0).is_some() {}
        assert_eq!(s.rounds(), 1);
        let retx = Packet::ctrl(
            PacketKind::Ctrl(CtrlOp::Retx),
            FLOW,
            DST,
            SRC,
            RetxReq { round: 0, last: true, first: 0, set: RetxSet::Run(1) }.pack(),
            64,
        );
        s.handle_packet(US, &retx);
        assert_eq!(s.retx_ignored(), 0);
        let want = if keep { c.line_rate_bps / 2 } else { c.line_rate_bps };
        assert_eq!(s.rate_bps(), want, "resend_at_line_rate = {}", !keep);
    }
}

#[test]
fn with_retx_quiet_a_stop_that_overtook_its_data_requests_nothing_that_arrives() {
    // Two segments; the first arrives, STOP overtakes the second on the network.
    let start = Packet::ctrl(PacketKind::Ctrl(CtrlOp::Start), FLOW, SRC, DST, 2880, 64);
    let stop = Packet::ctrl(PacketKind::Ctrl(CtrlOp::Stop), FLOW, SRC, DST, 0, 64);
    let data = |seq| Packet::data(FLOW, SRC, DST, seq, 1440, 60);
    let sent = |r: &mut DlcpReceiver, t| std::iter::from_fn(|| r.poll_transmit(t)).map(|p| p.kind).collect::<Vec<_>>();
    let retx = PacketKind::Ctrl(CtrlOp::Retx);
    for quiet in [0, 100 * US] {
        let mut r = DlcpReceiver::new(DlcpConfig { retx_quiet: quiet, ..cfg(0.0) }, FLOW, DST, SRC, 2880);
        r.receive(0, &start);
        r.receive(US, &data(0));
        r.receive(2 * US, &stop);
        let at_stop = sent(&mut r, 2 * US);
        if quiet == 0 {
            assert!(at_stop.contains(&retx), "requested at once: {at_stop:?}");
            continue;
        }
        assert!(!at_stop.contains(&retx), "waits for the data to go quiet: {at_stop:?}");
        assert_eq!(r.poll_timeout(), Some(2 * US + quiet));
        // the overtaken segment arrives within the quiet time: the bound is met, no request
        r.receive(50 * US, &data(1440));
        assert_eq!(r.poll_event(), Some(EndpointEvent::Delivered { bytes: 2880 }));
        r.handle_timeout(200 * US);
        assert!(!sent(&mut r, 200 * US).contains(&retx));
    }
    // a segment that really was lost is requested once the data has been quiet for `quiet`
    let quiet = 100 * US;
    let mut r = DlcpReceiver::new(DlcpConfig { retx_quiet: quiet, ..cfg(0.0) }, FLOW, DST, SRC, 4320);
    r.receive(0, &Packet { seq: 4320, ..start });
    r.receive(US, &data(0));
    r.receive(2 * US, &stop);
    r.receive(30 * US, &data(1440)); // still arriving: the wait starts again
    r.handle_timeout(2 * US + quiet);
    assert!(!sent(&mut r, 2 * US + quiet).contains(&retx));
    assert_eq!(r.poll_timeout(), Some(30 * US + quiet));
    r.handle_timeout(30 * US + quiet);
    assert!(sent(&mut r, 30 * US + quiet).contains(&retx));
}

#[test]
fn with_stop_behind_data_the_stop_rides_the_data_queue_after_the_round() {
    for behind in [false, true] {
        let c = DlcpConfig { data_priority: 4, stop_behind_data: behind, ..cfg(0.0) };
        let mut s = DlcpSender::new(c, FLOW, SRC, DST, 10 * 1440, 0);
        let mut sent = Vec::new();
        let mut t: Time = 0;
        while !sent.iter().any(|p: &Packet| p.kind == PacketKind::Ctrl(CtrlOp::Stop)) {
            assert!(t < MS, "no STOP within 1 ms");
            s.handle_timeout(t);
            sent.extend(std::iter::from_fn(|| s.poll_transmit(t)));
            t += 100;
        }
        let stop = sent.iter().position(|p| p.kind == PacketKind::Ctrl(CtrlOp::Stop)).unwrap();
        assert_eq!(sent[..stop].iter().filter(|p| p.kind == PacketKind::Data).count(), 10, "STOP after the round");
        let p = &sent[stop];
        if behind {
            assert_eq!((p.priority, p.ecn.ect), (4, true), "in the data queue, never selectively dropped");
        } else {
            assert_eq!(p.priority, c.ctrl_priority, "the paper's STOP rides the control queue");
        }
    }
}

/// The share a RATE packet carries under [`RateHint::ReceiverShare`].
fn reported_share(p: &Packet) -> Option<u64> {
    assert_eq!(p.kind, PacketKind::Ctrl(CtrlOp::Rate));
    share::RateReport::unpack(p.seq, RateHint::ReceiverShare).share_bps
}

#[test]
fn receivers_report_their_hosts_link_over_the_hosts_sending_into_it() {
    let c = DlcpConfig { rate_hint: RateHint::ReceiverShare, ..cfg(0.1) };
    // the receiving host's state, which its receivers share
    let mut host = HostState::new();
    for k in [1u32, 2, 5] {
        // k remote hosts, host 100 with two transfers: k + 1 receivers at host DST
        let mut rs: Vec<(u32, u32, DlcpReceiver)> = (0..=k)
            .map(|i| {
                let remote = 100 + i.min(k - 1);
                let mut r = DlcpReceiver::new(c, FLOW + i, DST, remote, 1_000_000).sharing_host_load();
                r.post(0);
                (FLOW + i, remote, r)
            })
            .collect();
        let t0 = 10 * MS * k as u64;
        // a receiver's first period starts with its first data: it reports from period 2
        for period in 1..=3u64 {
            let end = t0 + period * c.rate_period;
            for (flow, remote, r) in rs.iter_mut() {
                r.handle_packet(end - US, &Packet::data(*flow, *remote, DST, 1440 * period, 1440, 60));
            }
            for (_, _, r) in rs.iter_mut() {
                r.handle_timeout_with(end, &mut host);
                let shares: Vec<_> = std::iter::from_fn(|| r.poll_transmit(end)).map(|p| reported_share(&p)).collect();
                if period == 3 {
                    // every sender seen by then, each host once
                    assert_eq!(shares, vec![Some(c.line_rate_bps / k as u64)], "{k} sending hosts");
                }
            }
        }
    }
    // without the hint the report is the receive rate alone, as before
    let mut r = DlcpReceiver::new(cfg(0.1), FLOW, DST, SRC, 1_000_000).sharing_host_load();
    r.post(0);
    r.handle_packet(US, &Packet::data(FLOW, SRC, DST, 0, 1440, 60));
    r.handle_timeout_with(r.poll_timeout().unwrap(), &mut host);
    let p = r.poll_transmit(0).unwrap();
    assert_eq!(p.seq, 1500 * 8 * crate::time::SEC / cfg(0.1).rate_period, "bit/s, unpacked");
}

#[test]
fn with_a_receiver_share_the_sender_holds_its_rate_at_headroom_times_the_share() {
    let c = DlcpConfig { rate_hint: RateHint::ReceiverShare, share_headroom: 1.5, ..cfg(0.0) };
    let line = c.line_rate_bps;
    let rate_report = |recv_bps: u64, share_bps: u64| {
        let arg = share::RateReport { recv_bps, share_bps: Some(share_bps) }.pack(RateHint::ReceiverShare);
        Packet::ctrl(PacketKind::Ctrl(CtrlOp::Rate), FLOW, DST, SRC, arg, 64)
    };
    let mut s = DlcpSender::new(c, FLOW, SRC, DST, 10_000_000, 0);
    assert_eq!(s.rate_bps(), line, "no report yet: line rate");
    s.handle_packet(US, &rate_report(line, line / 8));
    let cap = line / 8 * 3 / 2;
    assert_eq!(s.rate_bps(), cap, "held at once");
    assert_eq!(data_gap(&mut s, 2 * US), serialization(1500, cap));
    // a loss-free period would add 5 % of line rate: capped all the same
    s.handle_packet(c.rate_period / 2, &rate_report(line, line / 8));
    s.handle_timeout(c.rate_period);
    assert_eq!(s.rate_bps(), cap);
    // fewer senders: the cap rises and the rate grows additively toward it
    s.handle_packet(c.rate_period + US, &rate_report(line, line / 2));
    s.handle_timeout(2 * c.rate_period);
    assert_eq!(s.rate_bps(), cap + line / 20);
    // a resend round at line rate starts at the cap, not above it
    let mut r = DlcpSender::new(c, FLOW, SRC, DST, 1000, 0);
    while r.poll_transmit(0).is_some() {}
    r.handle_packet(US, &rate_report(line, line / 4));
    let retx = RetxReq { round: 0, last: true, first: 0, set: RetxSet::Run(1) }.pack();
    r.handle_packet(2 * US, &Packet::ctrl(PacketKind::Ctrl(CtrlOp::Retx), FLOW, DST, SRC, retx, 64));
    assert_eq!(r.rate_bps(), line / 4 * 3 / 2);
    // without the hint the same argument is a receive rate: nothing caps
    let mut plain = DlcpSender::new(cfg(0.0), FLOW, SRC, DST, 10_000_000, 0);
    plain.handle_packet(US, &rate_report(line, line / 8));
    assert_eq!(plain.rate_bps(), line);
    assert!(DlcpConfig { share_headroom: 0.0, ..c }.validate().is_err());
    assert!(DlcpConfig { share_headroom: f64::NAN, ..c }.validate().is_err());
}

/// A receive posted long before its sender starts (a ring's later steps) reports nothing
/// while it waits: a zero report would halve the sender's first rate for a wait, not loss.
/// Its periods start with the sender's START or its first data, whichever comes first.
#[test]
fn a_posted_receiver_reports_its_rate_only_once_its_sender_has_begun() {
    let c = cfg(0.0);
    let rates = |r: &mut DlcpReceiver, now: Time| {
        r.handle_timeout(now);
        std::iter::from_fn(|| r.poll_transmit(now)).filter(|p| p.kind == PacketKind::Ctrl(CtrlOp::Rate)).count()
    };
    let data = |seq| Packet::data(FLOW, SRC, DST, seq, 1440, 60);
    let start = Packet::ctrl(PacketKind::Ctrl(CtrlOp::Start), FLOW, SRC, DST, 100_000, 0);
    for first in ["start", "data"] {
        let mut r = DlcpReceiver::new(c, FLOW, DST, SRC, 100_000);
        r.post(0);
        assert_eq!(r.poll_timeout(), None, "no period while nothing has come");
        assert_eq!(rates(&mut r, 10 * c.rate_period), 0);
        let t = 10 * c.rate_period + US;
        let begin = if first == "start" { start } else { data(0) };
        r.handle_packet(t, &begin);
        assert_eq!(r.poll_timeout(), Some(t + c.rate_period), "{first}");
        r.handle_packet(t + 2 * US, &data(1440));
        assert_eq!(rates(&mut r, t + c.rate_period), 1, "{first}");
    }
}
