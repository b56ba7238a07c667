use super::*;
use crate::packet::{Packet, PacketKind};
use crate::testkit::{acked_pipe, no_loss, random_loss};
use crate::time::{Time, MS, US};
use crate::transport::{Endpoint, EndpointEvent};

const MSS: u64 = 1460;
const FLOW: u32 = 5;
const DELAY: Time = 6 * US;

fn cfg() -> PFabricConfig {
    PFabricConfig::default()
}

fn sender(size: u64) -> PFabricSender {
    PFabricSender::new(cfg(), FLOW, 1, 2, size, 0)
}

fn receiver(size: u64) -> PFabricReceiver {
    PFabricReceiver::new(cfg(), FLOW, 2, 1, size)
}

fn drain(e: &mut impl Endpoint, now: Time) -> Vec<Packet> {
    std::iter::from_fn(|| e.poll_transmit(now)).collect()
}

fn ack(cum: u64, sack: u64) -> Packet {
    let mut p = Packet::ack(FLOW, 2, 1, cum, 40);
    p.rank = sack;
    p
}

#[test]
fn config_for_link_is_one_bdp_and_three_rtts() {
    let c = PFabricConfig::default();
    assert_eq!(c.init_window_bytes, 10 * MSS); // 10G x 12us = 15000 B = 10 packets of 1500
    assert_eq!(c.rto, 36 * US);
    let c = PFabricConfig::for_link(100_000_000_000, 10 * US);
    assert_eq!(c.init_window_bytes, 84 * MSS); // 125000 B / 1500 rounded up
    assert_eq!(c.rto, 30 * US);
    assert_eq!(c.probe_after_timeouts, 5);
}

#[test]
fn initial_window_is_one_bdp_stamped_with_the_flow_size() {
    let size = 30 * MSS + 100;
    let mut s = sender(size);
    let w = drain(&mut s, 7);
    assert_eq!(w.len(), 10);
    for (i, p) in w.iter().enumerate() {
        assert_eq!((p.kind, p.flow, p.src, p.dst), (PacketKind::Data, FLOW, 1, 2));
        assert_eq!((p.seq, p.len as u64, p.wire_bytes), (i as u64 * MSS, MSS, 1500));
        assert_eq!(p.rank, size, "nothing acknowledged yet");
        assert_eq!(p.switch_rank(), size);
        assert!(!p.ecn.ect);
        assert_eq!(p.sent_at, 7);
    }
    assert_eq!(s.poll_timeout(), Some(7 + 36 * US));
    // a selective ACK frees one slot and lowers the rank by that segment
    s.handle_packet(10, &ack(0, 4 * MSS));
    let next = drain(&mut s, 10);
    assert_eq!(next.len(), 1);
    assert_eq!((next[0].seq, next[0].rank), (10 * MSS, size - MSS));
    // the cumulative ACK covering the sacked segment does not count it twice
    s.handle_packet(11, &ack(5 * MSS, 0));
    assert_eq!(s.remaining_bytes(), size - 5 * MSS);
    assert_eq!(s.inflight_bytes(), 6 * MSS); // segments 5..=10
}

#[test]
fn receiver_acks_every_packet_with_cumulative_and_selective_ack() {
    let mut r = receiver(3 * MSS);
    let data = |seq: u64, len: u64| {
        let mut p = Packet::data(FLOW, 1, 2, seq, len as u32, 40);
        p.rank = 99;
        p
    };
    r.handle_packet(0, &data(MSS, MSS));
    r.handle_packet(0, &data(0, MSS));
    r.handle_packet(0, &data(0, MSS)); // duplicate
    r.handle_packet(0, &data(MSS, 0)); // probe
    let acks = drain(&mut r, 1);
    let got: Vec<(u64, u64)> = acks.iter().map(|a| (a.seq, a.rank)).collect();
    assert_eq!(got, vec![(0, MSS), (2 * MSS, 0), (2 * MSS, 0), (2 * MSS, u64::MAX)]);
    assert!(acks.iter().all(|a| a.kind == PacketKind::Ack && a.wire_bytes == 40 && a.switch_rank() == 0));
    assert!(acks.iter().all(|a| (a.src, a.dst, a.sent_at) == (2, 1, 1)));
    assert_eq!(r.poll_event(), None);
    r.handle_packet(2, &data(2 * MSS, MSS));
    assert_eq!(r.poll_event(), Some(EndpointEvent::Delivered { bytes: 3 * MSS }));
    assert_eq!(r.poll_event(), None);
    // strays are ignored
    r.handle_packet(3, &Packet { flow: FLOW + 1, ..data(0, MSS) });
    assert_eq!(drain(&mut r, 3).len(), 1);
}

#[test]
fn timeout_resends_only_unacknowledged_segments_in_slow_start() {
    let size = 40 * MSS;
    let mut s = sender(size);
    assert_eq!(drain(&mut s, 0).len(), 10);
    // segments 1 and 3 arrive; 0, 2, 4.. are lost
    s.handle_packet(1, &ack(0, MSS));
    s.handle_packet(1, &ack(0, 3 * MSS));
    assert_eq!(drain(&mut s, 1).len(), 2); // 10 and 11 fill the freed window
    assert_eq!(s.cwnd_bytes(), 10 * MSS); // congestion avoidance: < one window acked
    let rto = cfg().rto;
    s.handle_timeout(rto - 1); // early wakeup
    assert_eq!(s.stats().timeouts, 0);
    s.handle_timeout(rto);
    assert_eq!(s.stats().timeouts, 1);
    assert_eq!((s.cwnd_bytes(), s.ssthresh_bytes()), (MSS, 5 * MSS));
    assert_eq!(s.poll_timeout(), Some(2 * rto));
    let r1 = drain(&mut s, rto);
    assert_eq!(r1.iter().map(|p| (p.seq, p.rank)).collect::<Vec<_>>(), vec![(0, size - 2 * MSS)]);
    // its ACK: slow start to 2 segments, skipping the sacked segment 3
    s.handle_packet(rto + 1, &ack(2 * MSS, 0));
    assert_eq!(s.cwnd_bytes(), 2 * MSS);
    let r2 = drain(&mut s, rto + 1);
    assert_eq!(r2.iter().map(|p| p.seq).collect::<Vec<_>>(), vec![2 * MSS, 4 * MSS]);
    assert!(r2.iter().all(|p| p.rank == size - 3 * MSS));
    assert_eq!(s.stats().retransmits, 3);
    assert_eq!(s.poll_timeout(), Some(rto + 1 + rto), "re-armed by the advancing ACK");
}

#[test]
fn probe_mode_after_consecutive_timeouts_and_resume_on_ack() {
    let size = 20 * MSS;
    let mut s = sender(size);
    drain(&mut s, 0);
    let rto = cfg().rto;
    let mut t = 0;
    for i in 1..=4 {
        t = s.poll_timeout().unwrap();
        s.handle_timeout(t);
        let rtx = drain(&mut s, t);
        assert_eq!(rtx.iter().map(|p| (p.seq, p.len as u64)).collect::<Vec<_>>(), vec![(0, MSS)], "timeout {i}");
        assert!(!s.in_probe_mode());
    }
    // the fifth consecutive timeout: probe mode, a header-only probe per timeout
    for i in 5..=8 {
        t = s.poll_timeout().unwrap();
        assert_eq!(t, i * rto);
        s.handle_timeout(t);
        assert!(s.in_probe_mode());
        let probe = drain(&mut s, t);
        assert_eq!(probe.len(), 1, "timeout {i}");
        assert_eq!((probe[0].seq, probe[0].len, probe[0].wire_bytes, probe[0].rank), (0, 0, 40, size));
    }
    assert_eq!(s.stats().timeouts, 8);
    // any ACK ends probe mode: slow start from one segment
    s.handle_packet(t + 1, &ack(0, u64::MAX));
    assert!(!s.in_probe_mode());
    let resumed = drain(&mut s, t + 1);
    assert_eq!(resumed.iter().map(|p| (p.seq, p.len as u64)).collect::<Vec<_>>(), vec![(0, MSS)]);
    s.handle_packet(t + 2, &ack(MSS, 0));
    assert_eq!(drain(&mut s, t + 2).len(), 2);
    // progress resets the count: the next timeout is not a probe
    t = s.poll_timeout().unwrap();
    s.handle_timeout(t);
    assert!(!s.in_probe_mode());
    assert_eq!(drain(&mut s, t)[0].len as u64, MSS);
}

fn check_ranks(sent: &[Packet], size: u64) {
    let mut last = u64::MAX;
    for p in sent {
        assert!(p.rank <= last, "rank went up: {} after {last}", p.rank);
        assert!(p.rank <= size && p.rank >= p.len as u64, "rank {} for {p:?}", p.rank);
        last = p.rank;
    }
}

#[test]
fn lossless_transfer_stamps_decreasing_ranks() {
    let size = 200 * MSS + 7;
    let (mut s, mut r) = (sender(size), receiver(size));
    let o = acked_pipe(&mut s, &mut r, DELAY, no_loss(), 10 * MS);
    assert_eq!(o.delivered.map(|d| d.1), Some(size));
    assert!(o.sender_done_at.is_some());
    assert_eq!(o.sent.len(), 201);
    assert_eq!((s.stats().retransmits, s.stats().timeouts), (0, 0));
    check_ranks(&o.sent, size);
    assert_eq!(o.sent[0].rank, size);
    assert!(o.sent.last().unwrap().rank < size / 10, "ranks shrink as the flow progresses");
    // no slow start: +1 segment per window of ACKs, 10 -> 22 segments after 10+11+..+21 =
    // 186 ACKs (the next step needs 22 more), so 13 round trips
    assert_eq!(s.cwnd_bytes(), 22 * MSS);
    let rtt = 2 * DELAY;
    let done = o.delivered.unwrap().0;
    assert!(done > 12 * rtt && done <= 14 * rtt, "{done}");
}

#[test]
fn lossy_transfer_completes_for_many_seeds() {
    let size = 300 * MSS + 123;
    for seed in 1..=20u64 {
        let (mut s, mut r) = (sender(size), receiver(size));
        let o = acked_pipe(&mut s, &mut r, DELAY, random_loss(seed * 7919, 0.1, 0.1), 500 * MS);
        assert_eq!(o.delivered.map(|d| d.1), Some(size), "seed {seed}");
        assert!(o.sender_done_at.is_some(), "seed {seed}");
        assert_eq!(r.received_bytes(), size);
        check_ranks(&o.sent, size);
        let st = s.stats();
        assert!(st.retransmits > 0 && st.timeouts > 0, "seed {seed}: {st:?}");
        assert_eq!(st.packets_sent as usize, o.sent.len());
        // selective ACKs: far fewer resends than go-back-N over a 10+ packet window
        assert!(st.retransmits < 200, "seed {seed}: {st:?}");
    }
}

#[test]
fn outage_goes_to_probe_mode_and_recovers() {
    let size = 100 * MSS;
    let rto = cfg().rto;
    // everything sent in [20us, 20us + 12 rto) is lost, both ways
    let (from, to) = (20 * US, 20 * US + 12 * rto);
    let (mut s, mut r) = (sender(size), receiver(size));
    let o = acked_pipe(&mut s, &mut r, DELAY, Box::new(move |p, _| (from..to).contains(&p.sent_at)), 100 * MS);
    assert_eq!(o.delivered.map(|d| d.1), Some(size));
    assert!(o.sender_done_at.is_some());
    let probes = o.sent.iter().filter(|p| p.len == 0).count();
    assert!(probes >= 5, "{probes} probes");
    assert!(o.sent.iter().filter(|p| p.len == 0).all(|p| p.wire_bytes == 40));
    assert!(!s.in_probe_mode());
    check_ranks(&o.sent, size);
}

#[test]
fn empty_flow_is_done_at_once() {
    let (mut s, mut r) = (sender(0), receiver(0));
    assert_eq!(s.poll_transmit(0), None);
    assert_eq!(s.poll_event(), Some(EndpointEvent::SenderDone));
    assert_eq!(r.poll_event(), Some(EndpointEvent::Delivered { bytes: 0 }));
    assert_eq!(s.poll_timeout(), None);
}
