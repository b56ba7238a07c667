//! ns-3.37's TCP behaviours that Linux and the RFCs do differently, each a [`TcpConfig`]
//! option off by default (`baseline = "ns3"` turns them on): no fast recovery from CWR
//! (`recovery_from_cwr`), the ACK that ends RTO recovery counting only what lies above the
//! recovery point (`loss_exit_above_recover`), every new ACK clearing the RTO's backoff
//! (`rto_reset_on_new_ack`), and DCTCP's congestion avoidance counting segments, not ACKs
//! (`cong_avoid_per_segment`).

use super::*;
use crate::packet::Packet;
use crate::time::{MS, US};
use crate::transport::Endpoint;

const MSS: u64 = 1460;
const FLOW: u32 = 7;

fn dctcp(sack: bool, recovery_from_cwr: bool) -> TcpConfig {
    TcpConfig { cc: CongestionControl::Dctcp { g: 1.0 / 16.0 }, sack, recovery_from_cwr, ..TcpConfig::default() }
}

/// An ACK of everything below `cum`, echoing `ece`, naming (SACK block) the segment at
/// `sacked` if any.
fn ack(cum: u64, ece: bool, sacked: Option<u64>) -> Packet {
    let mut p = Packet::ack(FLOW, 2, 1, cum, 40);
    p.ece = ece;
    p.rank = sacked.unwrap_or(cum.saturating_sub(MSS));
    p
}

fn drain(s: &mut TcpSender, now: Time) -> Vec<Packet> {
    std::iter::from_fn(|| s.poll_transmit(now)).collect()
}

/// A DCTCP sender with its initial window (segments 0-9) out: segment 0's ACK echoes CE
/// (CWR, cwnd 5), segment 1 is lost, and the ACKs of segments 2-4 come back as duplicates
/// (with SACK, naming each). Returns the sender and what it sent on those ACKs.
fn cwr_then_three_dupacks(cfg: TcpConfig) -> (TcpSender, Vec<Packet>) {
    let mut s = TcpSender::new(cfg, FLOW, 1, 2, 100 * MSS, 0);
    assert_eq!(drain(&mut s, 0).len(), 10);
    s.handle_packet(100 * US, &ack(MSS, true, None));
    assert_eq!(s.cwnd_bytes(), 5 * MSS, "alpha = 1: the ECN cut halves cwnd");
    assert!(drain(&mut s, 100 * US).is_empty(), "9 segments out, cwnd 5");
    let mut sent = vec![];
    for seg in 2..5 {
        s.handle_packet(101 * US, &ack(MSS, false, cfg.sack.then_some(seg * MSS)));
        sent.extend(drain(&mut s, 101 * US));
    }
    (s, sent)
}

#[test]
fn three_dupacks_in_cwr_start_fast_recovery_unless_ns3s_rule_is_asked_for() {
    for sack in [false, true] {
        // RFC 5681 / 6675 and Linux: the loss is resent at once.
        let (s, sent) = cwr_then_three_dupacks(dctcp(sack, true));
        assert!(s.in_recovery(), "sack {sack}");
        assert_eq!(sent.first().map(|p| p.seq), Some(MSS), "sack {sack}: the hole resent");
        assert_eq!(s.stats().retransmits, 1);

        // ns-3.37: the duplicate ACKs are counted in CA_CWR, but no recovery starts there.
        let (mut s, sent) = cwr_then_three_dupacks(dctcp(sack, false));
        assert!(!s.in_recovery(), "sack {sack}");
        assert!(sent.is_empty(), "sack {sack}: nothing resent while the flight fills cwnd: {sent:?}");
        // More duplicates change nothing: the hole waits for the RTO.
        for seg in 5..10 {
            s.handle_packet(102 * US, &ack(MSS, false, sack.then_some(seg * MSS)));
        }
        assert!(!s.in_recovery() && s.stats().retransmits == 0, "sack {sack}");
        assert_eq!(s.poll_timeout(), Some(10 * MS + 100 * US), "sack {sack}: the RTO armed by the last new ACK");
        s.handle_timeout(10 * MS + 100 * US);
        let rtx = drain(&mut s, 10 * MS + 100 * US);
        assert_eq!((s.stats().timeouts, rtx[0].seq), (1, MSS), "sack {sack}");
    }
}

#[test]
fn from_the_open_state_ns3s_rule_changes_nothing() {
    // No ECE: the three duplicates find the sender open, and it recovers either way.
    for recovery_from_cwr in [true, false] {
        let mut s = TcpSender::new(dctcp(false, recovery_from_cwr), FLOW, 1, 2, 100 * MSS, 0);
        drain(&mut s, 0);
        s.handle_packet(100 * US, &ack(MSS, false, None));
        drain(&mut s, 100 * US);
        for _ in 0..3 {
            s.handle_packet(101 * US, &ack(MSS, false, None));
        }
        assert!(s.in_recovery());
        assert_eq!(drain(&mut s, 101 * US)[0].seq, MSS);
    }
}

#[test]
fn the_ack_ending_rto_recovery_counts_only_what_lies_above_the_recovery_point_in_ns3() {
    // One segment out and lost to the RTO: ssthresh 2 MSS, cwnd 1, the segment resent.
    for (above_recover, cwnd_after, sent_after) in [(false, 2 * MSS, 2), (true, MSS, 1)] {
        let cfg = TcpConfig { init_cwnd_packets: 1, loss_exit_above_recover: above_recover, ..TcpConfig::default() };
        let mut s = TcpSender::new(cfg, FLOW, 1, 2, 100 * MSS, 0);
        assert_eq!(drain(&mut s, 0).len(), 1);
        s.handle_timeout(10 * MS);
        assert_eq!((s.cwnd_bytes(), s.ssthresh_bytes()), (MSS, 2 * MSS));
        assert_eq!(drain(&mut s, 10 * MS)[0].seq, 0);
        // The resend's ACK reaches the recovery point (the highest byte sent, MSS): RFC
        // 5681's slow start (Linux) grows cwnd by the segment it acknowledges, ns-3.37 by
        // the none above the recovery point, and the next segment goes alone.
        s.handle_packet(10 * MS + 100 * US, &ack(MSS, false, None));
        assert_eq!(s.cwnd_bytes(), cwnd_after, "above_recover {above_recover}");
        assert_eq!(drain(&mut s, 10 * MS + 100 * US).len(), sent_after);
    }
    // A partial ACK in CA_LOSS still grows the window by all it acknowledges, in ns-3 too.
    let cfg = TcpConfig { loss_exit_above_recover: true, ..TcpConfig::default() };
    let mut s = TcpSender::new(cfg, FLOW, 1, 2, 100 * MSS, 0);
    drain(&mut s, 0);
    s.handle_timeout(10 * MS);
    drain(&mut s, 10 * MS);
    s.handle_packet(10 * MS + 100 * US, &ack(MSS, false, None));
    assert_eq!(s.cwnd_bytes(), 2 * MSS, "slow start below the recovery point (10 segments)");
}

#[test]
fn ns3s_new_ack_clears_the_rto_backoff_without_an_rtt_sample() {
    for (reset, rto_after) in [(false, 600 * US), (true, 300 * US)] {
        let cfg = TcpConfig { rto_min: US, rto_reset_on_new_ack: reset, ..TcpConfig::default() };
        let mut s = TcpSender::new(cfg, FLOW, 1, 2, 100 * MSS, 0);
        drain(&mut s, 0);
        s.handle_packet(100 * US, &ack(MSS, false, None));
        assert_eq!(s.rto(), 300 * US, "srtt 100 us, rttvar 50 us");
        drain(&mut s, 100 * US);
        s.handle_timeout(400 * US);
        assert_eq!(s.rto(), 600 * US, "backed off");
        drain(&mut s, 400 * US);
        // The ACK of the resent segment gives no sample (Karn): RFC 6298 keeps the
        // backoff, ns-3.37's NewAck recomputes the RTO from the estimate.
        s.handle_packet(500 * US, &ack(2 * MSS, false, None));
        assert_eq!((s.srtt(), s.rto()), (Some(100 * US), rto_after), "reset {reset}");
        assert_eq!(s.poll_timeout(), Some(500 * US + rto_after));
    }
    // Before any sample: back to the initial RTO.
    for (reset, rto_after) in [(false, 20 * MS), (true, 10 * MS)] {
        let cfg = TcpConfig { rto_reset_on_new_ack: reset, ..TcpConfig::default() };
        let mut s = TcpSender::new(cfg, FLOW, 1, 2, 100 * MSS, 0);
        drain(&mut s, 0);
        s.handle_timeout(10 * MS);
        drain(&mut s, 10 * MS);
        s.handle_packet(11 * MS, &ack(MSS, false, None));
        assert_eq!((s.srtt(), s.rto()), (None, rto_after), "reset {reset}");
    }
}

/// A lossless flow of `segs` segments that starts with one segment in flight, against a
/// receiver that ACKs every second segment or after 200 ms (ns-3's `DelAckTimeout`), with
/// a 10 ms RTOmin: (RTOs, time until the sender is done).
fn lone_segment_run(cfg: TcpConfig, segs: u64) -> (u64, Time) {
    let cfg = TcpConfig {
        init_cwnd_packets: 1,
        delayed_ack: DelayedAck { count: 2, timeout: 200 * MS, at_write_end: false },
        rto_min: 10 * MS,
        rto_initial: 10 * MS,
        ..cfg
    };
    let size = segs * MSS;
    let (mut s, mut r) = (TcpSender::new(cfg, FLOW, 1, 2, size, 0), TcpReceiver::new(cfg, FLOW, 2, 1, size));
    let mut wire = super::tests::Wire::new();
    let (mut n, mut now, mut done) = (0u64, 0, 0);
    for _ in 0..100_000 {
        while let Some(p) = s.poll_transmit(now) {
            n += 1;
            wire.insert((now + 50 * US, n), (true, p));
        }
        while let Some(p) = r.poll_transmit(now) {
            n += 1;
            wire.insert((now + 50 * US, n), (false, p));
        }
        if s.poll_event().is_some() {
            done = now;
        }
        if !super::tests::advance(&mut wire, &mut s, &mut r, &mut now) {
            break;
        }
    }
    (s.stats().timeouts, done)
}

#[test]
fn ns3s_one_segment_rto_trap_costs_an_rto_per_segment() {
    let segs = 8;
    // RFC / Linux: the first RTO (the lone first segment waits for the ACK timer) grows
    // cwnd to 2, and from then on the ACKs come every second segment; the odd last segment
    // waits for the timer again.
    let (rtos, done) = lone_segment_run(TcpConfig::default(), segs);
    assert_eq!(rtos, 2, "done at {done}");
    assert!(done < 50 * MS, "{done}");
    // ns-3.37: each resend's ACK ends CA_LOSS with cwnd still one segment, the next
    // segment goes alone and waits for the ACK timer behind a 10 ms RTO that NewAck keeps
    // from backing off: one RTO per segment, each 10 ms.
    let ns3 = TcpConfig { loss_exit_above_recover: true, rto_reset_on_new_ack: true, ..TcpConfig::default() };
    let (rtos, done) = lone_segment_run(ns3, segs);
    assert_eq!(rtos, segs, "done at {done}");
    assert!(done >= segs * 10 * MS && done < segs * 11 * MS, "{done}");
    // Either behaviour alone: with the backoff kept, the RTO outgrows the ACK timer after
    // a few doublings; with cwnd grown on exit, two segments go out and are ACKed at once.
    for (above, reset) in [(true, false), (false, true)] {
        let cfg = TcpConfig { loss_exit_above_recover: above, rto_reset_on_new_ack: reset, ..TcpConfig::default() };
        let (rtos, _) = lone_segment_run(cfg, segs);
        assert!(rtos < segs, "above {above} reset {reset}: {rtos}");
    }
}

/// A DCTCP sender (alpha 1) whose first ACK, of two segments, echoes CE: cwnd and
/// ssthresh 5 segments, CWR until an ACK above segment 10. Then `acks` more ACKs of two
/// segments each (delayed ACKs), none echoing CE, the window refilled before each: the
/// window in segments after each ACK.
fn grow_after_ecn_cut(cong_avoid_per_segment: bool, acks: u64) -> Vec<f64> {
    let cfg = TcpConfig {
        cong_avoid_per_segment,
        cong_avoid_after_slow_start_ns3: cong_avoid_per_segment,
        ..dctcp(true, false)
    };
    let mut s = TcpSender::new(cfg, FLOW, 1, 2, 10_000 * MSS, 0);
    assert_eq!(drain(&mut s, 0).len(), 10);
    s.handle_packet(100 * US, &ack(2 * MSS, true, None));
    assert_eq!((s.cwnd_bytes(), s.ssthresh_bytes()), (5 * MSS, 5 * MSS));
    let mut cwnd = vec![];
    for i in 0..acks {
        let now = 101 * US + i * US;
        drain(&mut s, now);
        s.handle_packet(now, &ack((4 + 2 * i) * MSS, false, None));
        cwnd.push(s.cwnd_bytes() as f64 / MSS as f64);
    }
    cwnd
}

#[test]
fn dctcp_in_ns3_grows_a_segment_per_window_acknowledged_not_per_window_of_acks() {
    // ns-3.37's TcpDctcp is a TcpLinuxReno: `CongestionAvoidance` adds `segmentsAcked` to
    // m_cWndCnt and a segment once it reaches cwnd (5). The first ACK above the CWR point
    // (segment 12, the 5th) grows it: 2 segments counted, then 4, then 6 = a window + 1.
    let ns3 = grow_after_ecn_cut(true, 7);
    assert_eq!(ns3, [5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 6.0]);
    // RFC 5681 eq. 3 per ACK (TcpNewReno, gradwire's default): MSS * MSS / cwnd an ACK,
    // whatever it covers, so 1460 / 5 = 292 bytes for the same ACK of 2 segments.
    let rfc = grow_after_ecn_cut(false, 5);
    assert_eq!(rfc[4] * MSS as f64, (5 * MSS + MSS / 5) as f64);
    // Over 200 segments acknowledged in pairs: one segment per window acknowledged, so
    // cwnd² grows by twice the segments acknowledged, against half of that per ACK
    // (twice the growth per round trip).
    let (ns3, rfc) = (grow_after_ecn_cut(true, 100), grow_after_ecn_cut(false, 100));
    let (ns3, rfc) = (ns3[99] * ns3[99] - 25.0, rfc[99] * rfc[99] - 25.0);
    assert!(ns3 >= 1.8 * rfc && ns3 <= 2.2 * rfc, "cwnd² grown {ns3} against {rfc}");
}

/// A delayed-ACK DCTCP receiver (every 2 segments or 200 ms) with `cfg`'s ns-3 options.
fn delack_receiver(cfg: TcpConfig) -> TcpReceiver {
    let cfg = TcpConfig { delayed_ack: DelayedAck { count: 2, timeout: 200 * MS, at_write_end: false }, ..cfg };
    TcpReceiver::new(cfg, FLOW, 2, 1, 100 * MSS)
}

/// Segment `i`, CE-marked or not.
fn seg(i: u64, ce: bool) -> Packet {
    let mut p = Packet::data(FLOW, 1, 2, i * MSS, MSS as u32, 40);
    p.ecn.ect = true;
    p.ecn.ce = ce;
    p
}

/// The ACKs queued: (cumulative ACK in segments, ECE, the SACK block names a segment).
fn acks(r: &mut TcpReceiver) -> Vec<(u64, bool, bool)> {
    std::iter::from_fn(|| r.poll_transmit(0)).map(|a| (a.seq / MSS, a.ece, a.rank != u64::MAX)).collect()
}

#[test]
fn ns3s_receiver_answers_the_first_segment_at_once() {
    // ns-3.37's ProcessSynRcvd: m_delAckCount = m_delAckMaxCount, "Always respond to first
    // data packet to speed up the connection"; the pairs start from the second.
    for (first, want) in [(false, vec![(2, false, true)]), (true, vec![(1, false, true), (3, false, true)])] {
        let mut r = delack_receiver(TcpConfig { delack_first_at_once: first, ..dctcp(true, false) });
        for i in 0..3 {
            r.handle_packet(i * US, &seg(i, false));
        }
        assert_eq!(acks(&mut r), want, "first_at_once {first}");
    }
}

#[test]
fn ns3s_dctcp_receiver_answers_a_ce_change_for_what_came_before_the_previous_segment() {
    // Segments 0-1 marked (ACK 2 with ECE), 2 marked and held, 3 unmarked: the CE state
    // changes with an ACK held.
    let run = |lagged: bool| {
        let mut r = delack_receiver(TcpConfig { ce_ack_lagged: lagged, ..dctcp(true, false) });
        let mut out = vec![];
        for (i, ce) in [(0, true), (1, true), (2, true), (3, false)] {
            r.handle_packet(i * US, &seg(i, ce));
            out.push(acks(&mut r));
        }
        let due = r.poll_timeout().expect("a segment held");
        r.handle_timeout(due);
        out.push(acks(&mut r));
        out
    };
    // gradwire's default: the held ACK goes at once, for segment 2, with its ECE; 3 waits.
    assert_eq!(run(false), [vec![], vec![(2, true, true)], vec![], vec![(3, true, true)], vec![(4, false, true)]]);
    // ns-3.37 (TcpDctcp::CeState1to0): the ACK is for m_priorRcvNxt, read before segment
    // 2 was added, so it repeats ACK 2 (with ECE, no SACK block) and cancels the delayed
    // ACK: segments 2 and 3 both wait for the 200 ms timer.
    assert_eq!(run(true), [vec![], vec![(2, true, true)], vec![], vec![(2, true, false)], vec![(4, false, true)]]);

    // Nothing held (the last ACK completed a pair): no ACK at the change, in ns-3 either
    // (m_delayedAckReserved is false).
    let mut r = delack_receiver(TcpConfig { ce_ack_lagged: true, ..dctcp(true, false) });
    for (i, ce) in [(0, false), (1, false), (2, true)] {
        r.handle_packet(i * US, &seg(i, ce));
    }
    assert_eq!(acks(&mut r), [(2, false, true)]);
    // The timer fired last (m_delayedAckReserved stays set): a change sends a duplicate.
    r.handle_timeout(r.poll_timeout().unwrap());
    assert_eq!(acks(&mut r), [(3, true, true)]);
    r.handle_packet(300 * MS, &seg(3, false));
    assert_eq!(acks(&mut r), [(2, true, false)], "m_priorRcvNxt: before segment 2");
}

#[test]
fn ns3s_receiver_counts_a_ce_mark_only_above_the_last_one_it_counted() {
    // Segments 0, 2, 3 arrive marked, then 1 fills the hole, marked (a resend, or a segment
    // sprayed behind the later ones); every packet is answered at once.
    let run = |check: bool| {
        let cfg = TcpConfig { ce_seq_check: check, ..dctcp(true, false) };
        let mut r = TcpReceiver::new(cfg, FLOW, 2, 1, 100 * MSS);
        let mut out = vec![];
        for i in [0, 2, 3, 1, 4] {
            r.handle_packet(i * US, &seg(i, true));
            out.extend(acks(&mut r).into_iter().map(|(cum, ece, _)| (cum, ece)));
        }
        out
    };
    // RFC 3168, Linux: every mark is echoed.
    assert_eq!(run(false), [(1, true), (1, true), (1, true), (4, true), (5, true)]);
    // ns-3.37's ForwardUp (m_ecnCESeq < seq): segment 1 is below 3, the last mark that
    // counted, so the ACK that fills the hole carries no ECE; 4 is above and counts.
    assert_eq!(run(true), [(1, true), (1, true), (1, true), (4, false), (5, true)]);
}

#[test]
fn ns3s_dctcp_ssthresh_has_no_floor_and_cuts_losses_by_alpha_too() {
    // An ECN cut from 2 segments with alpha 1: Linux keeps 2 segments, ns-3 halves.
    for (ns3, ssthresh) in [(false, 2 * MSS), (true, MSS)] {
        let cfg = TcpConfig { init_cwnd_packets: 2, dctcp_ssthresh_ns3: ns3, ..dctcp(true, false) };
        let mut s = TcpSender::new(cfg, FLOW, 1, 2, 100 * MSS, 0);
        drain(&mut s, 0);
        s.handle_packet(100 * US, &ack(MSS, true, None));
        assert_eq!(s.ssthresh_bytes(), ssthresh, "ns3 {ns3}");
    }
    // An RTO with 3 segments out, cwnd 20 and alpha 15/16 (one unmarked window): RFC 8257
    // 3.5 halves the flight (at least 2 segments), ns-3's GetSsThresh cuts cwnd by alpha/2.
    for (ns3, ssthresh) in [(false, 2 * MSS), (true, (20 * MSS) * 17 / 32)] {
        let cfg = TcpConfig { dctcp_ssthresh_ns3: ns3, ..dctcp(true, false) };
        let mut s = TcpSender::new(cfg, FLOW, 1, 2, 13 * MSS, 0);
        drain(&mut s, 0);
        s.handle_packet(100 * US, &ack(10 * MSS, false, None));
        assert_eq!(drain(&mut s, 100 * US).len(), 3);
        assert_eq!((s.cwnd_bytes(), s.dctcp_alpha()), (20 * MSS, Some(15.0 / 16.0)));
        s.handle_timeout(s.poll_timeout().unwrap());
        assert_eq!(s.ssthresh_bytes(), ssthresh, "ns3 {ns3}");
    }
}

#[test]
fn below_one_segment_ns3s_window_waits_for_the_rto_it_keeps_armed() {
    // cwnd 1 segment, alpha 1, the segment's ACK echoes CE: ns-3's cut leaves 730 bytes,
    // which sends nothing; NewAck keeps the timer while data is unsent, and the RTO sends
    // one segment.
    let cfg = TcpConfig { init_cwnd_packets: 1, dctcp_ssthresh_ns3: true, ..dctcp(true, false) };
    let mut s = TcpSender::new(cfg, FLOW, 1, 2, 10 * MSS, 0);
    assert_eq!(drain(&mut s, 0).len(), 1);
    s.handle_packet(100 * US, &ack(MSS, true, None));
    assert_eq!(s.cwnd_bytes(), MSS / 2);
    assert!(drain(&mut s, 100 * US).is_empty());
    let at = 100 * US + s.rto();
    assert_eq!(s.poll_timeout(), Some(at));
    s.handle_timeout(at);
    assert_eq!(drain(&mut s, at).iter().map(|p| p.seq).collect::<Vec<_>>(), [MSS]);
    assert_eq!(s.stats().timeouts, 1);
}

/// A DCTCP sender with PRR-paced ECN cuts (`ecn_cut_prr`) and SACK, 15 segments out, whose
/// first ACK (of two segments) echoes CE: in CWR.
fn cwr_with_prr() -> TcpSender {
    let cfg = TcpConfig { init_cwnd_packets: 15, ecn_cut_prr: true, ..dctcp(true, false) };
    let mut s = TcpSender::new(cfg, FLOW, 1, 2, 100 * MSS, 0);
    assert_eq!(drain(&mut s, 0).len(), 15);
    s.handle_packet(100 * US, &ack(2 * MSS, true, None));
    s
}

#[test]
fn ns3s_ecn_cut_with_prr_follows_do_recovery() {
    // 15 segments out, the ACK of the first two echoes CE (alpha 1): ssthresh 10 950 B,
    // RecoverFS 18 980 B. ns-3.37 calls DoRecovery in EnterCwr and again in ProcessAck's
    // CA_CWR branch, each with the ACK's 2 920 B: cwnd = 18 980 + ceil(5 840 · 10 950 /
    // 18 980) = 22 350 B (these are ns-3's numbers, traced: incast-small, seed 1, flow 0).
    let mut s = cwr_with_prr();
    assert_eq!((s.cwnd_bytes(), s.ssthresh_bytes()), (22_350, 10_950));
    assert_eq!(drain(&mut s, 100 * US).len(), 2, "3 370 B of room");
    // The next ACK of two: ceil(8 760 · 10 950 / 18 980) − 2 920 out = 2 134 B.
    s.handle_packet(110 * US, &ack(4 * MSS, true, None));
    assert_eq!(s.cwnd_bytes(), 21_114);
    // Cut at once (gradwire's default): cwnd = ssthresh.
    let cfg = TcpConfig { init_cwnd_packets: 15, ..dctcp(true, false) };
    let mut s = TcpSender::new(cfg, FLOW, 1, 2, 100 * MSS, 0);
    drain(&mut s, 0);
    s.handle_packet(100 * US, &ack(2 * MSS, true, None));
    assert_eq!(s.cwnd_bytes(), 10_950);
    assert!(drain(&mut s, 100 * US).is_empty());
    // ns-3 leaves CWR with cwnd = ssthresh on the first ACK above the recovery point.
    let mut s = cwr_with_prr();
    let mut una = 2 * MSS;
    for i in 0..20 {
        drain(&mut s, (101 + i) * US);
        una += 2 * MSS;
        s.handle_packet((101 + i) * US, &ack(una, false, None));
        if una > 15 * MSS {
            break;
        }
    }
    assert_eq!(s.cwnd_bytes(), 10_950 + MSS * MSS / 10_950, "CWR over: ssthresh, then one ACK of growth");
}

#[test]
fn ns3s_linux_reno_grows_on_leaving_loss_with_a_count_left_over() {
    // DCTCP (alpha 1) in ns-3's TcpSocketBase: an ECN cut to 2 segments, congestion
    // avoidance to 3 with one segment counted (m_cWndCnt 1), then an RTO, whose resend's
    // ACK ends CA_LOSS with no segment above the recovery point, and a second RTO the same
    // way: ssthresh is now below one segment, so the ACK that ends CA_LOSS goes to
    // `TcpLinuxReno::CongestionAvoidance` with 0 segments, whose first step (count >= w = 1)
    // still adds a segment: out of the one-segment trap. Counting per ACK, it stays.
    let run = |per_segment: bool| {
        let cfg = TcpConfig {
            init_cwnd_packets: 4,
            cong_avoid_per_segment: per_segment,
            cong_avoid_after_slow_start_ns3: per_segment,
            dctcp_ssthresh_ns3: true,
            loss_exit_above_recover: true,
            ..dctcp(true, false)
        };
        let mut s = TcpSender::new(cfg, FLOW, 1, 2, 100 * MSS, 0);
        // an ACK of everything below segment `cum`, 100 us after `now`, and what it lets go
        fn step(s: &mut TcpSender, now: &mut Time, cum: u64, ece: bool) {
            *now += 100 * US;
            s.handle_packet(*now, &ack(cum * MSS, ece, None));
            drain(s, *now);
        }
        let mut now = 0;
        assert_eq!(drain(&mut s, 0).len(), 4);
        step(&mut s, &mut now, 2, true);
        assert_eq!(s.cwnd_bytes(), 2 * MSS, "ECN cut, alpha 1");
        step(&mut s, &mut now, 4, false);
        step(&mut s, &mut now, 6, false);
        step(&mut s, &mut now, 7, false);
        let cwnd = s.cwnd_bytes();
        for _ in 0..2 {
            now = s.poll_timeout().unwrap();
            s.handle_timeout(now);
            drain(&mut s, now);
            // the receiver holds everything sent: the resend's ACK covers it all
            let sent = s.stats().packets_sent - s.stats().retransmits;
            step(&mut s, &mut now, sent, false);
        }
        (cwnd, s.ssthresh_bytes(), s.cwnd_bytes())
    };
    let (cwnd, ssthresh, after) = run(true);
    assert_eq!(cwnd, 3 * MSS, "grown once in congestion avoidance");
    assert!(ssthresh < MSS, "{ssthresh}");
    assert_eq!(after, 2 * MSS, "the count left over grows cwnd on leaving CA_LOSS");
    let (_, _, after) = run(false);
    assert_eq!(after, MSS, "per ACK: nothing to count, the trap holds");
}

#[test]
fn ns3s_prr_in_cwr_never_takes_cwnd_below_the_flight() {
    // CWR with PRR-paced cuts; segment 2 lost, SACKs of 3-8 shrink the pipe and let new
    // data go (ns-3 counts those sends in `m_prrOut` in CA_CWR too), so `out` runs ahead of
    // PRR's proportional share. On the next cumulative ACK ns-3's `DoRecovery` sends
    // nothing (`max(sendCount, 0)` once anything was sent): cwnd = bytes in flight, not
    // below them, which would stall the flow until its RTO.
    let mut s = cwr_with_prr();
    let mut high = 15 + drain(&mut s, 100 * US).len() as u64;
    let mut out_since_cut = high - 15;
    for seg in 3..9 {
        s.handle_packet(101 * US, &ack(2 * MSS, false, Some(seg * MSS)));
        for p in drain(&mut s, 101 * US) {
            out_since_cut += 1;
            high = high.max(p.seq / MSS + 1);
        }
    }
    let share = ((2 * MSS + 2 * MSS + 7 * MSS) * 10_950).div_ceil(15 * MSS);
    assert!(out_since_cut * MSS > share, "out {out_since_cut} segments, share {share} B: ahead");
    s.handle_packet(102 * US, &ack(9 * MSS, false, None));
    assert_eq!(s.cwnd_bytes(), (high - 9) * MSS, "cwnd = the flight");
    assert!(drain(&mut s, 102 * US).is_empty());
}
