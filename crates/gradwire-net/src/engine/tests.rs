//! The engine in-process: exact rings, in-place receives, late calls.

use gradwire_core::collective::{ring, CollectiveOptions, Op, Transfer};

use super::*;
use crate::Communicator;

fn local_job(n: u32) -> Vec<Communicator> {
    local_job_with(n, EngineConfig::default().transport.mss)
}

fn local_job_with(n: u32, mss: u32) -> Vec<Communicator> {
    local_job_cfg(n, mss, false)
}

fn local_job_cfg(n: u32, mss: u32, send_thread: bool) -> Vec<Communicator> {
    let mut cfg = EngineConfig { peer_timeout: Duration::from_secs(10), send_thread, ..EngineConfig::default() };
    cfg.transport.mss = mss;
    Communicator::local_job(n, |_| cfg.clone(), crate::CollectiveConfig::default()).unwrap()
}

fn data(rank: u32, n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 * 0.37 + rank as f32 * 1.3).sin() * 10.0).round() / 4.0).collect()
}

#[test]
fn ring_allreduce_is_exact_with_direct_all_gather_receives() {
    ring_allreduce_is_exact(EngineConfig::default().transport.mss);
}

#[test]
fn ring_allreduce_is_exact_with_large_segments_read_in_place() {
    let comms = ring_allreduce_is_exact(65_000);
    // The all-gather's segments went straight into place.
    assert!(
        comms.iter().all(|c| c.counters().received_in_place > 0),
        "{:?}",
        comms.iter().map(|c| c.counters()).collect::<Vec<_>>()
    );
}

#[test]
fn ring_allreduce_is_exact_with_a_send_thread() {
    for mss in [1440, 65_000] {
        let comms = ring_allreduce_is_exact_cfg(mss, true);
        assert!(comms.iter().all(|c| c.counters().datagrams_sent > 0 && c.counters().send_drops == 0));
    }
}

fn ring_allreduce_is_exact(mss: u32) -> Vec<Communicator> {
    ring_allreduce_is_exact_cfg(mss, false)
}

fn ring_allreduce_is_exact_cfg(mss: u32, send_thread: bool) -> Vec<Communicator> {
    let mut last = Vec::new();
    for n in [2u32, 3, 4] {
        let elems = 300_001;
        let comms = local_job_cfg(n, mss, send_thread);
        let sched = Arc::new(ring(n, elems as u64 * 4, 4, &CollectiveOptions::default()));
        let out = Communicator::on_each(&comms, |r, c| {
            let mut x = data(r, elems);
            c.run(sched.clone(), &mut x).unwrap();
            x
        });
        let all: Vec<Vec<f32>> = (0..n).map(|r| data(r, elems)).collect();
        let want: Vec<f32> = (0..elems).map(|i| all.iter().map(|d| d[i]).sum()).collect();
        for (r, x) in out.iter().enumerate() {
            assert!(x == &want, "{n} ranks: rank {r} differs from the sum");
        }
        last = comms;
    }
    last
}

#[test]
fn data_of_a_call_posted_late_is_kept_not_resent() {
    // Rank 1 posts its receive 300 ms after rank 0 has sent everything: 4 MiB wait in
    // the kernel's buffer, unread, and go straight into place.
    let comms = late_copy(local_job(2), 1 << 20);
    assert_eq!(comms[1].counters().early, 0, "nothing was read before the call");
    assert_eq!(comms[1].counters().stale, 0);
}

#[test]
fn data_of_a_call_posted_late_overflows_from_the_socket_into_the_early_store() {
    // A 1 MiB socket buffer: the 4 MiB are read into the early store as they come.
    let mut cfg =
        EngineConfig { peer_timeout: Duration::from_secs(10), socket_buffer_bytes: 1 << 20, ..EngineConfig::default() };
    cfg.transport.line_rate_bps = 300_000_000; // slow enough for the idle engine to keep up, even on a loaded machine
    let comms =
        late_copy(Communicator::local_job(2, |_| cfg.clone(), crate::CollectiveConfig::default()).unwrap(), 1 << 20);
    assert!(comms[1].counters().early > 0, "the data was kept in the early store");
}

/// Rank 0 copies `elems` floats to rank 1, which posts its receive 300 ms late; the
/// copy is exact and nothing is resent.
fn late_copy(comms: Vec<Communicator>, elems: usize) -> Vec<Communicator> {
    let t = Transfer {
        src: 0,
        dst: 1,
        range: 0..elems as u64 * 4,
        op: Op::Copy,
        after: vec![],
        loss_bound: 0.0,
        priority: 1,
    };
    let sched = Arc::new(Schedule {
        name: "copy".into(),
        world: 2,
        bytes: elems as u64 * 4,
        elem_bytes: 4,
        transfers: vec![t],
    });
    let src = data(0, elems);
    let (sent, got) = std::thread::scope(|s| {
        let a = s.spawn(|| {
            let mut x = src.clone();
            comms[0].run(sched.clone(), &mut x).unwrap()
        });
        let b = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            let mut x = vec![0f32; elems];
            comms[1].run(sched.clone(), &mut x).unwrap();
            x
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(got == src);
    assert_eq!(sent.retransmits, 0, "early data was kept, not resent");
    comms
}

#[test]
fn a_gated_call_waits_for_its_gate_and_the_calls_behind_it_too() {
    let comms = local_job(2);
    let n = 100_000;
    let kind = CallKind::Allreduce { algorithm: crate::Algorithm::Ring, loss_bound: 0.0 };
    let out = Communicator::on_each(&comms, |r, c| {
        let mut a = vec![0.0f32; n];
        let mut b = data(r, n);
        if r == 0 {
            // Submitted on an empty buffer, filled while the gate is closed: the call
            // must sum what is there when the gate opens.
            let ra = RawBuffer::from_slice(&mut a);
            let rb = RawBuffer::from_slice(&mut b);
            // SAFETY: both buffers outlive the waits below, and are written only before
            // the gate opens (the engine touches neither before then).
            let (first, gate) = unsafe { c.submit_kind_gated(kind, ra, Dtype::F32) }.unwrap();
            let second = unsafe { c.submit_kind(kind, rb, Dtype::F32) }.unwrap();
            std::thread::sleep(Duration::from_millis(300));
            assert!(first.wait_timeout(Duration::ZERO).is_none(), "a closed gate's call ran");
            assert!(second.wait_timeout(Duration::ZERO).is_none(), "a call overtook a gated one");
            unsafe { std::ptr::copy_nonoverlapping(data(r, n).as_ptr(), ra.ptr as *mut f32, n) };
            gate.open();
            first.wait().unwrap();
            second.wait().unwrap();
        } else {
            a.copy_from_slice(&data(r, n));
            c.allreduce(&mut a, crate::Algorithm::Ring, 0.0).unwrap();
            c.allreduce(&mut b, crate::Algorithm::Ring, 0.0).unwrap();
        }
        (a, b)
    });
    let sum: Vec<f32> = data(0, n).iter().zip(data(1, n)).map(|(x, y)| x + y).collect();
    for (a, b) in out {
        assert_eq!(a, sum);
        assert_eq!(b, sum);
    }
}

#[test]
fn a_dropped_gate_opens() {
    let comms = local_job(2);
    let kind = CallKind::Broadcast { root: 0 };
    let out = Communicator::on_each(&comms, |r, c| {
        let mut a = vec![r as f32 + 1.0; 1000];
        let raw = RawBuffer::from_slice(&mut a);
        // SAFETY: `a` outlives the wait.
        let (p, gate) = unsafe { c.submit_kind_gated(kind, raw, Dtype::F32) }.unwrap();
        drop(gate);
        p.wait().unwrap();
        a
    });
    assert!(out.iter().all(|a| a.iter().all(|&x| x == 1.0)));
}
