//! Node pauses and paused links: a paused sender sends nothing for exactly its pause,
//! draws are a function of the seed, and nothing is lost.

mod common;

use gradwire_sim::output::flows_csv;
use gradwire_sim::{load, Simulation};

/// The two 100G racks with a 1 ms RTOmin.
fn net() -> String {
    format!("{}[transport]\nrto_min_us = 1000.0\n", common::TWO_RACKS)
}

/// One 10 MB flow from host 0 to host 1 (same rack): about 0.85 ms at 100G.
const ONE_FLOW: &str = "[workload]\nkind = \"flows\"\nflows = [{ src = 0, dst = 1, bytes = 10000000 }]\n";

fn build(extra: &str, overrides: &[&str]) -> Simulation {
    common::build(&format!("{}{extra}", net()), overrides)
}

/// Run one event at a time; the simulated times (ns) at which `port` started sending a packet.
fn departures(sim: &mut Simulation, port: &str) -> Vec<u64> {
    let mut times = Vec::new();
    let mut last = 0;
    loop {
        let done = sim.step(1);
        let n = sim.port_counters(port).expect("port exists").dequeued;
        if n != last {
            assert_eq!(n, last + 1, "one dequeue per event");
            times.push(sim.progress().now_ns);
            last = n;
        }
        if done {
            return times;
        }
    }
}

const PAUSE_HOST0: &str = "[pauses]\nhosts = 1\namong = [0]\nstart_us = 100.0\nperiod_us = 200.0\nduration_us = 50.0\n";

#[test]
fn a_paused_sender_sends_nothing_for_exactly_its_pause() {
    for hold in ["data", "all"] {
        let mut free = build(ONE_FLOW, &[]);
        let base = departures(&mut free, "host0->leaf0");
        let mut sim = build(&format!("{ONE_FLOW}{PAUSE_HOST0}"), &[&format!("pauses.hold=\"{hold}\"")]);
        let sent = departures(&mut sim, "host0->leaf0");
        let windows: Vec<(u64, u64)> = sim
            .pause_log()
            .iter()
            .map(|(t, set)| {
                assert_eq!(set, &vec![0]);
                (*t, t + 50_000)
            })
            .collect();
        assert!(windows.len() >= 4, "{hold}: the flow spans several pauses: {windows:?}");
        let last = *sent.last().unwrap();
        for &(a, b) in windows.iter().filter(|w| w.1 < last) {
            assert!(!sent.iter().any(|&t| t >= a && t < b), "{hold}: a packet left during the pause [{a}, {b}) ns");
            assert!(sent.contains(&b), "{hold}: sending resumes at the end of the pause ({b} ns)");
        }
        assert_eq!(sent.len(), base.len(), "{hold}: same packets, none lost or resent");
        let s = sim.summary();
        assert!(s.packets.conserved && s.flows_finished == 1, "{hold}: {s:?}");
        assert_eq!(s.drops.values().sum::<u64>(), 0, "{hold}: a pause drops nothing");
        // the flow takes as much longer as it spent paused
        let paused = windows.iter().filter(|w| w.1 < last).count() as u64 * 50_000;
        let extra = (last - base.last().unwrap()) as i64 - paused as i64;
        assert!(extra.abs() < 20_000, "{hold}: {extra} ns beyond the pauses");
    }
}

#[test]
fn a_receiver_paused_for_data_keeps_receiving_but_not_for_all() {
    // from 5 us, while the sender's window is still a few packets: held ACKs stall it
    let pause_host1 = PAUSE_HOST0.replace("among = [0]", "among = [1]").replace("start_us = 100.0", "start_us = 5.0");
    let fct = |hold: &str| {
        let mut sim = build(&format!("{ONE_FLOW}{pause_host1}"), &[&format!("pauses.hold=\"{hold}\"")]);
        sim.run();
        sim.summary().fct_max_ns.unwrap()
    };
    let mut free = build(ONE_FLOW, &[]);
    free.run();
    let base = free.summary().fct_max_ns.unwrap();
    assert_eq!(fct("data"), base, "host 1 only receives: holding its data changes nothing");
    let all = fct("all");
    assert!(all > base + 30_000, "its ACKs are held too: the sender stalls ({all} vs {base} ns)");
}

const RING: &str =
    "[workload]\nkind = \"collective\"\nalgorithm = \"ring\"\nbytes = 800000\n[pauses]\nhosts = 2\nperiod_us = 30.0\n";

#[test]
fn pauses_are_a_function_of_the_seed() {
    let run = |seed: &str| {
        let mut s = build(RING, &[seed]);
        s.run();
        assert!(s.summary().packets.conserved);
        assert_eq!(s.summary().flows_finished, s.summary().flows);
        (s.pause_log(), flows_csv(&s))
    };
    let (log_a, csv_a) = run("seed=3");
    let (log_b, csv_b) = run("seed=3");
    let (log_c, _) = run("seed=4");
    assert_eq!(log_a, log_b);
    assert_eq!(csv_a, csv_b);
    assert_ne!(log_a, log_c, "another seed draws other hosts");
    assert!(log_a.iter().all(|(_, set)| set.len() == 2 && set[0] < set[1] && set[1] < 8), "{log_a:?}");
    let mut free = build(RING, &["pauses.hosts=0"]);
    free.run();
    assert!(free.summary().sim_time_ns < run("seed=3").0.last().unwrap().0, "pauses slow the ring down");
}

#[test]
fn a_paused_link_holds_its_queue_and_resumes() {
    // host 0 sends to host 4 across the only... spine paths: pause both uplinks of leaf0
    let flow = "[workload]\nkind = \"flows\"\nflows = [{ src = 0, dst = 4, bytes = 2000000 }]\n";
    let pause = "[[failures]]\nat_us = 50.0\nlink = \"leaf0-spine0\"\npause_us = 100.0\n[[failures]]\nat_us = 50.0\nlink = \"leaf0-spine1\"\npause_us = 100.0\n";
    let mut free = build(flow, &[]);
    free.run();
    let mut sim = build(&format!("{flow}{pause}"), &["switch.buffer_bytes=10000000"]);
    let mut up = Vec::new();
    let mut last = 0;
    while !sim.step(1) {
        let n =
            sim.port_counters("leaf0->spine0").unwrap().dequeued + sim.port_counters("leaf0->spine1").unwrap().dequeued;
        if n != last {
            up.push(sim.progress().now_ns);
            last = n;
        }
    }
    assert!(!up.iter().any(|&t| (50_000..150_000).contains(&t)), "nothing crosses a paused link");
    assert!(up.contains(&150_000), "it resumes on time with what it held");
    let s = sim.summary();
    assert!(s.packets.conserved && s.flows_finished == 1, "{s:?}");
    assert_eq!(s.drops.values().sum::<u64>(), 0, "a paused link keeps its queue: {:?}", s.drops);
    assert!(s.fct_max_ns.unwrap() >= free.summary().fct_max_ns.unwrap() + 90_000);
}

#[test]
fn bad_pause_keys_are_named() {
    let cases = [
        ("[pauses]\nhosts = 9\n", "pauses.hosts"),
        ("[pauses]\nhosts = 1\nperiod_us = 0.0\n", "pauses.period_us"),
        ("[pauses]\nhosts = 1\nperiod_us = 10.0\nduration_us = 20.0\n", "pauses.duration_us"),
        ("[pauses]\nhosts = 1\namong = [8]\n", "pauses.among.0"),
        ("[pauses]\nhosts = 1\namong = [2, 2]\n", "pauses.among.1"),
        ("[[failures]]\nat_us = 1.0\nlink = \"leaf0-spine0\"\npause_us = -1.0\n", "failures.0.pause_us"),
    ];
    for (extra, key) in cases {
        let err = load(&format!("{}{ONE_FLOW}{extra}", net()), &[]).expect_err("invalid");
        assert_eq!(err.key, key, "{extra}");
    }
}
