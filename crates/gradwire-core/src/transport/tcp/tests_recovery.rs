//! SACK recovery (RFC 6675), RACK-TLP (RFC 8985), delayed ACKs (RFC 5681 4.2) and CUBIC
//! in the sender, each against the SACK-less NewReno it replaces, over a scripted link.

use std::collections::HashSet;

use super::*;
use crate::packet::{Packet, PacketKind};
use crate::time::{Time, MS, US};
use crate::transport::{Endpoint, EndpointEvent};

const MSS: u64 = 1460;
/// One-way delay: a 100 us RTT, so RTOmin (10 ms) is 100 RTTs.
const DELAY: Time = 50 * US;
/// A full segment's serialization at 10 Gbit/s.
const SER: Time = 1_200_000;

/// What the scripted link does to a data packet: `None` drops it, else its extra delay.
type Script = Box<dyn FnMut(&Packet) -> Option<Time>>;

struct Run {
    /// When the receiver had every byte, and the sender knew.
    delivered_at: Time,
    done_at: Time,
    sender: TcpSender,
    /// (time, seq) of every data packet sent.
    sent: Vec<(Time, u64)>,
    acks: u64,
}

fn run(cfg: TcpConfig, size: u64, script: Script) -> Run {
    run_from(TcpSender::new(cfg, 7, 1, 2, size, 0), cfg, size, script)
}

fn run_from(mut s: TcpSender, cfg: TcpConfig, size: u64, mut script: Script) -> Run {
    let mut r = TcpReceiver::new(cfg, 7, 2, 1, size);
    let mut wire = super::tests::Wire::new();
    let (mut n, mut now, mut link_free) = (0u64, 0, 0);
    let mut out =
        Run { delivered_at: 0, done_at: 0, sender: TcpSender::new(cfg, 7, 1, 2, 0, 0), sent: vec![], acks: 0 };
    for _ in 0..100_000 {
        while let Some(p) = s.poll_transmit(now) {
            out.sent.push((now, p.seq));
            link_free = link_free.max(now) + SER;
            if let Some(extra) = script(&p) {
                n += 1;
                wire.insert((link_free + DELAY + extra, n), (true, p));
            }
        }
        while let Some(p) = r.poll_transmit(now) {
            out.acks += 1;
            n += 1;
            wire.insert((now + DELAY, n), (false, p));
        }
        if r.poll_event().is_some() {
            out.delivered_at = now;
        }
        if s.poll_event() == Some(EndpointEvent::SenderDone) {
            out.done_at = now;
        }
        if !super::tests::advance(&mut wire, &mut s, &mut r, &mut now) {
            break;
        }
    }
    out.sender = s;
    out
}

/// Drops the first transmission of each segment in `segs` (by index).
fn drop_first(segs: &[u64]) -> Script {
    let mut todo: HashSet<u64> = segs.iter().copied().collect();
    Box::new(move |p| if todo.remove(&(p.seq / MSS)) { None } else { Some(0) })
}

/// Drops the first two transmissions of segment `seg` (the original and its first resend).
fn drop_twice(seg: u64) -> Script {
    let mut lost = 0;
    Box::new(move |p| {
        if p.seq / MSS == seg && lost < 2 {
            lost += 1;
            None
        } else {
            Some(0)
        }
    })
}

fn sack() -> TcpConfig {
    TcpConfig { sack: true, ..TcpConfig::default() }
}

fn rack() -> TcpConfig {
    TcpConfig { sack: true, rack_tlp: true, ..TcpConfig::default() }
}

#[test]
fn sack_repairs_several_holes_in_one_round_trip_where_newreno_needs_one_each() {
    let size = 60 * MSS;
    let holes = [2, 4, 6, 8];
    let newreno = run(TcpConfig::default(), size, drop_first(&holes));
    // RFC 6675 deems a hole lost once 3 SACKed segments lie above it: 2 and 4 at the first
    // ACKs (SACKs of 5, 7, 9), 6 and 8 a round trip later; RACK all four at once (sent
    // before segment 9, delivered, with no reordering seen).
    let rtt = 2 * DELAY;
    for (cfg, rounds) in [(sack(), 2), (rack(), 1)] {
        let o = run(cfg, size, drop_first(&holes));
        let st = o.sender.stats();
        assert_eq!((st.retransmits, st.timeouts), (4, 0), "{cfg:?}");
        let resent: Vec<Time> =
            o.sent.iter().skip(10).filter(|(_, q)| holes.contains(&(q / MSS))).map(|t| t.0).collect();
        assert_eq!(resent.len(), 4);
        assert!(resent[3] - resent[0] <= rounds * rtt, "holes resent within {rounds} RTT: {resent:?}");
        assert!(o.done_at < newreno.done_at, "SACK {} vs NewReno {} ps", o.done_at, newreno.done_at);
    }
    // NewReno repairs one hole per partial ACK: each resend a round trip after the last.
    let resent: Vec<Time> =
        newreno.sent.iter().skip(10).filter(|(_, q)| holes.contains(&(q / MSS))).map(|t| t.0).collect();
    assert_eq!(resent.len(), 4);
    assert!(resent.windows(2).all(|w| w[1] - w[0] >= rtt), "{resent:?}");
}

#[test]
fn a_lost_retransmission_is_found_by_rack_without_an_rto() {
    // Segment 3 is lost, and so is its first retransmission.
    let o = run(rack(), 40 * MSS, drop_twice(3));
    assert_eq!(o.sender.stats().timeouts, 0, "RACK sees later segments delivered after the resend");
    assert_eq!(o.sender.stats().retransmits, 2);
    let o = run(sack(), 40 * MSS, drop_twice(3));
    assert_eq!(o.sender.stats().timeouts, 1, "without RACK only the RTO finds a lost retransmission");
}

#[test]
fn a_resend_faster_than_the_queued_first_window_advances_rack_when_min_rtt_starts_at_the_idle_path() {
    // An incast's first window: every original waits 100 us in a queue (RTT samples of
    // 200 us), segment 2 and the window's tail (8, 9) are dropped. The resend of 2 finds
    // the queue gone and is ACKed after 100 us. From the flow's own samples min_RTT is
    // 200 us, so that ACK looks like the original's (RFC 8985 6.2 step 2) and RACK stays
    // at segment 7: 8 and 9, sent after it, wait for the RTO (no probe in recovery). From
    // the path's idle round trip (100 us, what Linux's min_rtt holds from the handshake)
    // the resend's ACK advances RACK past 8 and 9, which are resent at once.
    let size = 10 * MSS;
    let queued = || -> Script {
        let mut first: HashSet<u64> = (0..10).collect();
        Box::new(move |p| match first.remove(&(p.seq / MSS)) {
            true if [2, 8, 9].contains(&(p.seq / MSS)) => None,
            true => Some(100 * US),
            false => Some(0),
        })
    };
    let samples = run(rack(), size, queued());
    assert_eq!((samples.sender.stats().retransmits, samples.sender.stats().timeouts), (3, 1));
    assert!(samples.done_at >= 10 * MS, "the RTO: {} ps", samples.done_at);
    let cfg = TcpConfig { rack_min_rtt_idle_path: true, ..rack() };
    let seeded = TcpSender::new(cfg, 7, 1, 2, size, 0).with_idle_rtt(Some(2 * DELAY));
    let idle = run_from(seeded, cfg, size, queued());
    assert_eq!((idle.sender.stats().retransmits, idle.sender.stats().timeouts), (3, 0), "{:?}", idle.sent);
    assert!(idle.done_at < MS, "two round trips after the first window: {} ps", idle.done_at);
}

/// Delays the first transmission of segment `a` and of segment `b` by `extra`.
fn reorder(a: u64, b: u64, extra: Time) -> Script {
    let mut todo: HashSet<u64> = [a, b].into();
    Box::new(move |p| Some(if todo.remove(&(p.seq / MSS)) { extra } else { 0 }))
}

#[test]
fn reordering_below_racks_window_is_not_resent_once_seen() {
    // Segments 5 and 40 each arrive 15 us late (at least 3 segments behind at this pace,
    // under a sixth of the RTT). A dupthresh sender resends both; RACK resends the first (before any
    // reordering, 3 SACKs mean loss, as RFC 8985 6.2 says), learns from the original's ACK
    // (faster than min_RTT after the resend) that it was reordering, and then waits a
    // quarter of min_RTT for the second.
    let size = 80 * MSS;
    let dupthresh = run(sack(), size, reorder(5, 40, 15 * US));
    let racked = run(rack(), size, reorder(5, 40, 15 * US));
    assert_eq!(dupthresh.sender.stats().retransmits, 2);
    assert_eq!(racked.sender.stats().retransmits, 1);
    assert_eq!(racked.sender.stats().timeouts, 0);
}

#[test]
fn a_tail_loss_is_repaired_by_a_probe_before_the_rto() {
    let size = 20 * MSS;
    let tail = [18, 19];
    let sacked = run(sack(), size, drop_first(&tail));
    assert_eq!(sacked.sender.stats().timeouts, 1, "no ACK comes back: only the RTO helps");
    assert!(sacked.done_at >= 10 * MS);
    let probed = run(rack(), size, drop_first(&tail));
    assert_eq!(probed.sender.stats().timeouts, 0, "{:?}", probed.sent);
    assert!(probed.done_at < 2 * MS, "TLP at 2 SRTT, then RACK: {} ps", probed.done_at);
}

#[test]
fn linux_times_the_probe_with_its_constants_and_sends_it_at_the_rto_rather_than_time_out() {
    // The same tail loss under Linux's timing: 2 SRTT plus TCP_TIMEOUT_MIN (8 ms) with
    // two segments out, so later than RFC 8985's 2 SRTT, but still a probe and no RTO.
    let cfg = TcpConfig { tlp_linux: true, rto_min: 200 * MS, rto_initial: 200 * MS, ..rack() };
    let size = 20 * MSS;
    let probed = run(cfg, size, drop_first(&[18, 19]));
    assert_eq!(probed.sender.stats().timeouts, 0, "{:?}", probed.sent);
    assert!(probed.done_at > 8 * MS && probed.done_at < 10 * MS, "2 SRTT + 8 ms: {} ps", probed.done_at);
    // One segment out: 2 SRTT + 200 ms would come after the RTO (restarted by the ACK,
    // RTOmin 200 ms), so the probe goes at the RTO's time, as a probe: no timeout counted.
    let mut s = TcpSender::new(cfg, 7, 1, 2, 2 * MSS, 0);
    while s.poll_transmit(0).is_some() {}
    let t = 100 * US;
    let mut a = Packet::ack(7, 2, 1, MSS, 40);
    a.rank = 0;
    s.handle_packet(t, &a);
    let due = s.poll_timeout().expect("a timer is armed");
    assert_eq!(due, t + 200 * MS, "the RTO, before 2 SRTT + 200 ms");
    s.handle_timeout(due);
    let probe = s.poll_transmit(due).expect("the probe");
    assert_eq!(probe.seq, MSS, "the last segment again");
    assert_eq!(s.stats().timeouts, 0, "a probe, not an RTO");
}

#[test]
fn a_window_cut_by_ecn_still_probes_its_tail_before_the_rto() {
    // RFC 8985 probes unless in loss recovery, and Linux arms the probe in CWR too: a DCTCP
    // sender whose window an ECN echo has just cut, and whose ACKs then stop, probes at
    // 2 SRTT instead of waiting for the 10 ms RTO.
    let cfg = TcpConfig { sack: true, rack_tlp: true, ..dctcp() };
    let mut s = TcpSender::new(cfg, 7, 1, 2, 100 * MSS, 0);
    let first: Vec<Packet> = std::iter::from_fn(|| s.poll_transmit(0)).collect();
    assert_eq!(first.len(), 10);
    let t = 100 * US;
    let mut a = Packet::ack(7, 2, 1, 2 * MSS, 40);
    a.rank = MSS;
    a.ece = true;
    s.handle_packet(t, &a);
    assert_eq!(s.cwnd_bytes(), 5 * MSS, "alpha starts at 1: the echo halves the window");
    while s.poll_transmit(t).is_some() {}
    let probe_at = s.poll_timeout().expect("a timer is armed");
    assert!(probe_at <= t + 2 * 100 * US + US, "a probe at 2 SRTT, not the RTO: {probe_at} ps");
    s.handle_timeout(probe_at);
    let probe = s.poll_transmit(probe_at).expect("the probe goes regardless of the window");
    assert_eq!((probe.kind, probe.seq), (PacketKind::Data, 10 * MSS), "new data first (RFC 8985 7.3)");
    assert_eq!(s.stats().timeouts, 0);
}

#[test]
fn delayed_acks_answer_every_second_segment_and_anything_out_of_order_at_once() {
    let cfg = TcpConfig { delayed_ack: DelayedAck { count: 2, timeout: 40 * MS, at_write_end: false }, ..dctcp() };
    let mut r = TcpReceiver::new(cfg, 7, 2, 1, 20 * MSS);
    let data = |i: u64, ce: bool| {
        let mut p = Packet::data(7, 1, 2, i * MSS, MSS as u32, 40);
        p.ecn.ce = ce;
        p
    };
    let acks = |r: &mut TcpReceiver| {
        std::iter::from_fn(|| r.poll_transmit(0)).map(|a| (a.seq / MSS, a.ece)).collect::<Vec<_>>()
    };
    for i in 0..4 {
        r.handle_packet(i, &data(i, false));
    }
    assert_eq!(acks(&mut r), [(2, false), (4, false)], "one ACK per two segments");
    r.handle_packet(5, &data(4, false));
    assert_eq!(acks(&mut r), []);
    assert_eq!(r.poll_timeout(), Some(5 + 40 * MS));
    r.handle_packet(6, &data(6, false));
    assert_eq!(acks(&mut r), [(5, false)], "out of order: at once, with the held one");
    r.handle_packet(7, &data(5, false));
    assert_eq!(acks(&mut r), [(7, false)], "filling the hole: at once");
    r.handle_packet(8, &data(7, true));
    r.handle_packet(9, &data(8, false));
    assert_eq!(acks(&mut r), [(8, true)], "a CE change releases what is held (RFC 8257 3.2)");
    assert!(r.poll_timeout().is_some());
    r.handle_timeout(9 + 40 * MS);
    assert_eq!(acks(&mut r), [(9, false)]);
}

#[test]
fn the_segment_that_ends_the_data_is_answered_at_once_where_linux_does() {
    // 2.5 segments: the third, short and odd, ends the write; Linux ACKs it when the
    // reader drains it, ns-3 holds it for the timeout
    let size = 2 * MSS + MSS / 2;
    for (at_write_end, expect) in [(true, vec![2 * MSS, size]), (false, vec![2 * MSS])] {
        let cfg = TcpConfig { delayed_ack: DelayedAck { count: 2, timeout: 40 * MS, at_write_end }, ..dctcp() };
        let mut r = TcpReceiver::new(cfg, 7, 2, 1, size);
        for i in 0..3 {
            let len = if i == 2 { MSS / 2 } else { MSS };
            r.handle_packet(i, &Packet::data(7, 1, 2, i * MSS, len as u32, 40));
        }
        let acks: Vec<u64> = std::iter::from_fn(|| r.poll_transmit(0)).map(|a| a.seq).collect();
        assert_eq!(acks, expect, "at_write_end = {at_write_end}");
        assert_eq!(r.poll_timeout().is_some(), !at_write_end, "nothing left held");
    }
}

fn dctcp() -> TcpConfig {
    TcpConfig { cc: CongestionControl::Dctcp { g: 1.0 / 16.0 }, ..TcpConfig::default() }
}

#[test]
fn cubic_cuts_to_seven_tenths_and_sends_plain_ect0_free_packets() {
    let cfg = TcpConfig { cc: CongestionControl::Cubic, ..sack() };
    let mut s = TcpSender::new(cfg, 7, 1, 2, 100 * MSS, 0);
    let first: Vec<Packet> = std::iter::from_fn(|| s.poll_transmit(0)).collect();
    assert_eq!(first.len(), 10);
    assert!(first.iter().all(|p| !p.ecn.ect), "CUBIC is loss-based: not ECN-capable");
    // Segment 0 lost: SACKs of 1, 2, 3 put the sender in recovery at 0.7 x cwnd.
    for i in 1..4 {
        let mut a = Packet::ack(7, 2, 1, 0, 40);
        a.rank = i * MSS;
        s.handle_packet(10, &a);
    }
    assert_eq!(s.ssthresh_bytes(), 7 * MSS);
    assert_eq!(s.cwnd_bytes(), 7 * MSS);
    let resend = s.poll_transmit(10).unwrap();
    assert_eq!((resend.seq, resend.kind), (0, PacketKind::Data));
}

#[test]
fn a_persistent_connection_hands_its_window_on_and_restarts_it_after_idle() {
    use crate::transport::{EndpointEvent, HostState};
    // host 1's state, which the driver hands to its senders
    let mut host = HostState::new();
    let cfg = TcpConfig { cc: CongestionControl::Cubic, ..rack() };
    // A first flow grows the window from 10 segments.
    let mut first = TcpSender::new(cfg, 7, 1, 2, 200 * MSS, 0).on_connection(None, 0);
    let mut r = TcpReceiver::new(cfg, 7, 2, 1, 200 * MSS);
    let mut now = 0;
    loop {
        match first.poll_event() {
            Some(EndpointEvent::HandOn) => first.hand_on(&mut host),
            Some(ev) => {
                assert_eq!(ev, EndpointEvent::SenderDone);
                break;
            }
            None => {}
        }
        let sent: Vec<Packet> = std::iter::from_fn(|| first.poll_transmit(now)).collect();
        now += 2 * DELAY;
        for p in &sent {
            r.handle_packet(now, p);
        }
        while let Some(a) = r.poll_transmit(now) {
            first.handle_packet(now, &a);
        }
    }
    let grown = first.cwnd_bytes();
    assert!(grown > 50 * MSS, "{grown}");
    assert!(host.has_tcp_connection(2) && !host.has_tcp_connection(3), "left for host 2 only");
    let conn = host.peer(2).and_then(|p| p.tcp);
    // The next flow of the pair starts with it, right away...
    let next = TcpSender::new(cfg, 8, 1, 2, 100 * MSS, now).on_connection(conn, now);
    assert_eq!(next.cwnd_bytes(), grown);
    assert!(next.rto() < 10 * MS + 1, "and with the RTT estimate, not the initial RTO");
    // ...but after 3 RTOs of idle it is halved three times, not below the initial window.
    let rto = next.rto();
    let later = TcpSender::new(cfg, 9, 1, 2, 100 * MSS, now + 3 * rto + 1).on_connection(conn, now + 3 * rto + 1);
    assert_eq!(later.cwnd_bytes(), (grown >> 3).max(10 * MSS));
    let much_later = TcpSender::new(cfg, 9, 1, 2, 100 * MSS, now + 1000 * rto).on_connection(conn, now + 1000 * rto);
    assert_eq!(much_later.cwnd_bytes(), 10 * MSS);
}

#[test]
fn recovery_sends_in_proportion_to_what_is_delivered() {
    // 20 segments out, the first lost: SACKs of the other 19 arrive one by one. The first
    // two each let a new segment out (pipe < cwnd), so recovery starts with 22 out and
    // ssthresh 11; PRR (RFC 6937) spreads what recovery may send over the SACKs, about one
    // per two, instead of a burst when the window is cut.
    let mut s = TcpSender::new(TcpConfig { init_cwnd_packets: 20, ..sack() }, 7, 1, 2, 100 * MSS, 0);
    let first: Vec<Packet> = std::iter::from_fn(|| s.poll_transmit(0)).collect();
    assert_eq!(first.len(), 20);
    let mut per_ack = Vec::new();
    for i in 1..20 {
        let mut a = Packet::ack(7, 2, 1, 0, 40);
        a.rank = i * MSS;
        s.handle_packet(10, &a);
        per_ack.push(std::iter::from_fn(|| s.poll_transmit(10)).count());
    }
    assert_eq!(s.ssthresh_bytes(), 11 * MSS);
    let in_recovery: usize = per_ack[2..].iter().sum();
    assert!((8..=11).contains(&in_recovery), "{per_ack:?}");
    assert!(per_ack.iter().all(|&n| n <= 2), "no burst: {per_ack:?}");
}

#[test]
fn slow_start_per_ack_grows_one_segment_for_an_ack_of_two() {
    // Ten segments out, ACKed two at a time (delayed ACKs): five ACKs of two segments.
    for (per_ack, grown) in [(false, 10), (true, 5)] {
        let cfg = TcpConfig { slow_start_per_ack: per_ack, ..sack() };
        let mut s = TcpSender::new(cfg, 7, 1, 2, 100 * MSS, 0);
        assert_eq!(std::iter::from_fn(|| s.poll_transmit(0)).count(), 10);
        for i in 1..=5 {
            s.handle_packet(10, &Packet::ack(7, 2, 1, 2 * i * MSS, 40));
        }
        assert_eq!(s.cwnd_bytes(), (10 + grown) * MSS, "per_ack = {per_ack}");
    }
}

#[test]
fn prr_adds_a_segment_only_on_an_ack_of_a_retransmission() {
    // 20 out, segments 0 and 1 lost: the SACKs of 2..20 start recovery and bring pipe
    // under ssthresh. A further SACK-less duplicate ACK sends nothing; the cumulative ACK
    // of the resent segment 0 (a safe ACK) may send what it delivered plus one.
    let cfg = TcpConfig { init_cwnd_packets: 20, ..sack() };
    let mut s = TcpSender::new(cfg, 7, 1, 2, 100 * MSS, 0);
    assert_eq!(std::iter::from_fn(|| s.poll_transmit(0)).count(), 20);
    let mut sent = Vec::new();
    for i in 2..20 {
        let mut a = Packet::ack(7, 2, 1, 0, 40);
        a.rank = i * MSS;
        s.handle_packet(10, &a);
        sent.extend(std::iter::from_fn(|| s.poll_transmit(10)).map(|p| p.seq / MSS));
    }
    assert!(s.in_recovery() && sent.contains(&0) && sent.contains(&1), "{sent:?}");
    let mut dup = Packet::ack(7, 2, 1, 0, 40);
    dup.rank = 19 * MSS;
    s.handle_packet(20, &dup);
    assert_eq!(s.poll_transmit(20), None, "nothing delivered, nothing sent");
    let mut a = Packet::ack(7, 2, 1, MSS, 40);
    a.rank = 0;
    s.handle_packet(30, &a);
    let after: Vec<u64> = std::iter::from_fn(|| s.poll_transmit(30)).map(|p| p.seq / MSS).collect();
    assert!(!after.is_empty() && after.len() <= 2, "delivered one, may send two: {after:?}");
}

#[test]
fn ns3s_partial_ack_resends_a_hole_not_yet_resent_but_not_one_in_flight() {
    // Segments 3 and 5 lost in a 40-segment flow: with `partial_ack_resend` nothing is
    // sent twice that was not lost (ns-3's DoRetransmit skips a head already resent).
    let cfg = TcpConfig { partial_ack_resend: true, ..sack() };
    let o = run(cfg, 40 * MSS, drop_first(&[3, 5]));
    assert_eq!((o.sender.stats().retransmits, o.sender.stats().timeouts), (2, 0));
    // Both retransmissions of 3 lost: only the RTO repairs it, as in ns-3.
    let mut lost = 0;
    let script: Script = Box::new(move |p: &Packet| {
        if p.seq / MSS == 3 && lost < 2 {
            lost += 1;
            None
        } else {
            Some(0)
        }
    });
    let o = run(cfg, 40 * MSS, script);
    assert_eq!(o.sender.stats().timeouts, 1);
    assert!(o.delivered_at > 0);
}

#[test]
fn linux_cuts_a_loss_from_cwnd_rfc_5681_from_the_flight_and_ns3_from_the_pipe() {
    // Segment 5 of the first window is lost. The ACKs of 0-4 grow cwnd from 10 to 15 in
    // slow start; the SACKs of 6 and 7 each let one more segment go beyond cwnd (the pipe
    // leaves SACKed segments out), and the third, of 8, deems 5 lost: 17 segments are in
    // flight then (5 to 21), 15 in the window.
    let size = 60 * MSS;
    let flight = run(rack(), size, drop_first(&[5]));
    let cwnd = run(TcpConfig { loss_cut: LossCut::Cwnd, ..rack() }, size, drop_first(&[5]));
    for o in [&flight, &cwnd] {
        assert_eq!((o.sender.stats().retransmits, o.sender.stats().timeouts), (1, 0));
    }
    assert_eq!(flight.sender.ssthresh_bytes(), 17 * MSS / 2, "RFC 5681 eq. 4: half the flight");
    assert_eq!(cwnd.sender.ssthresh_bytes(), 7 * MSS, "tcp_reno_ssthresh: half of cwnd, whole segments");
    // ns-3.37's TcpNewReno halves the pipe: 17 out, less 3 SACKed and 5 marked lost
    let pipe = run(TcpConfig { loss_cut: LossCut::Pipe, ..rack() }, size, drop_first(&[5]));
    assert_eq!(pipe.sender.ssthresh_bytes(), 13 * MSS / 2, "half of BytesInFlight()");
    assert!(cwnd.done_at > flight.done_at, "the smaller cut finishes later");
}

#[test]
fn a_timeout_in_recovery_keeps_the_recoverys_cut_as_linux_does() {
    // Segment 25 of a 30-segment flow is lost, then its resend too: the SACKs of 26-29
    // start recovery (ssthresh 17 of a 35-segment window) and PRR brings cwnd down to the
    // pipe; nothing is sent after the resend for RACK to time it by, and no probe goes in
    // recovery, so the RTO fires in a window already cut.
    let size = 30 * MSS;
    let linux = TcpConfig { loss_cut: LossCut::Cwnd, ..rack() };
    let once = run(linux, size, drop_first(&[25]));
    let o = run(linux, size, drop_twice(25));
    assert_eq!((o.sender.stats().timeouts, once.sender.stats().timeouts), (1, 0));
    assert_eq!(o.sender.ssthresh_bytes(), 17 * MSS, "the recovery's cut, kept");
    // RFC 5681 3.1 cuts again, from the flight at the timeout
    let rfc = run(rack(), size, drop_twice(25));
    assert_eq!(rfc.sender.stats().timeouts, 1);
    assert!(
        rfc.sender.ssthresh_bytes() < o.sender.ssthresh_bytes(),
        "{} vs {}",
        rfc.sender.ssthresh_bytes(),
        o.sender.ssthresh_bytes()
    );
}
