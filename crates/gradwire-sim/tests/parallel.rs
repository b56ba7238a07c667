//! `threads = N`: one scenario on N cores. Each part of the split network runs on its own
//! thread in windows one link delay long (`sim::parallel`). A run must finish every flow a
//! single run finishes, conserve every packet, give the same output every time for its
//! seed, and land within packet level's seed-to-seed spread of the single run.

use gradwire_sim::output::{flows_csv, port_bytes_csv, queues_csv};
use gradwire_sim::sim::parallel::node_parts;
use gradwire_sim::{load, Scenario, Simulation, Summary};

fn scenario(text: &str, sets: &[&str]) -> Scenario {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    load(text, &sets).unwrap().remove(0).scenario
}

/// A k = 4 fat-tree (16 hosts), ResNet18 through 2 dedicated servers from 4 workers, two
/// iterations (pulls wait for pushes, the second iteration for the first).
const PS: &str = "seed = 1\nstop_ms = 5000\n\
    [topology]\nkind = \"fat_tree\"\nk = 4\nlink_gbps = 100.0\n\
    [transport]\nkind = \"dctcp\"\n\
    [workload]\nkind = \"dnn\"\nmodel = \"resnet18\"\npattern = \"ps\"\nworkers = 4\nservers = 2\n\
    colocated = false\niterations = 2\n";

/// The default leaf-spine (144 hosts under 9 leaves) with a 32-to-1 incast at 1 % loss.
const INCAST: &str = "seed = 3\nstop_ms = 2000\n\
    [topology]\nlink_loss_rate = 0.01\n\
    [transport]\nkind = \"newreno\"\n\
    [workload]\nkind = \"incast\"\nsenders = 32\nflow_bytes = 200000\n";

fn run(s: &Scenario) -> (Summary, String) {
    let mut sim = Simulation::new(s).unwrap();
    sim.run();
    (Summary::of(&sim), flows_csv(&sim))
}

fn rows(csv: &str) -> Vec<Vec<String>> {
    csv.lines().skip(1).map(|l| l.split(',').map(String::from).collect()).collect()
}

/// Same flows, every one finished, every packet accounted for. (Strays, ACKs that reach
/// a closed sender, depend on the losses' timing: a parallel run has as few, not the same.)
fn check_against_single(single: &(Summary, String), par: &(Summary, String)) {
    let (a, b) = (&single.0, &par.0);
    assert_eq!(a.flows, b.flows);
    assert_eq!(b.flows_finished, b.flows, "every flow finished");
    assert!(b.packets.conserved, "{:?}", b.packets);
    assert_eq!(b.packets.in_flight + b.packets.delivered + b.packets.dropped, b.packets.sent);
    let (ra, rb) = (rows(&single.1), rows(&par.1));
    for (x, y) in ra.iter().zip(&rb) {
        assert_eq!(x[..4], y[..4], "flow ids, hosts and sizes");
        assert!(!y[5].is_empty() && y[6].parse::<u64>().unwrap() > 0, "flow {} finished after it started", y[0]);
    }
}

#[test]
fn a_ps_iteration_on_two_threads_finishes_as_one_does_and_is_repeatable() {
    let one = run(&scenario(PS, &[]));
    let two = run(&scenario(PS, &["threads=2"]));
    check_against_single(&one, &two);
    // the parallel run orders ties, draws and its end differently: close, not equal
    let (a, b) = (&one.0, &two.0);
    let (ma, mb) = (a.fct_mean_ns.unwrap(), b.fct_mean_ns.unwrap());
    eprintln!("mean FCT {ma} / {mb}, iteration {} / {} ns", a.sim_time_ns, b.sim_time_ns);
    assert!((mb / ma - 1.0).abs() < 0.15, "mean FCT {ma} against {mb}");
    let (ta, tb) = (a.sim_time_ns as f64, b.sim_time_ns as f64);
    assert!((tb / ta - 1.0).abs() < 0.10, "iteration time {ta} against {tb}");
    assert_eq!(run(&scenario(PS, &["threads=2"])).1, two.1, "a seed gives one output");
}

#[test]
fn a_lossy_incast_on_three_threads_conserves_packets_and_is_repeatable() {
    let one = run(&scenario(INCAST, &[]));
    let three = run(&scenario(INCAST, &["threads=3"]));
    check_against_single(&one, &three);
    assert!(three.0.drops["random_loss"] > 0, "the links dropped packets");
    assert!(three.0.retransmits > 0);
    let again = run(&scenario(INCAST, &["threads=3"]));
    assert_eq!(again.1, three.1, "a seed gives one output");
    assert_eq!(again.0.events, three.0.events);
}

/// A parallel run stops between windows when a `step` has done its share, and goes on
/// from there: stepped a few thousand events at a time, it writes what one `run` writes,
/// and in between its progress counts every part's flows.
#[test]
fn a_parallel_run_stepped_in_small_steps_is_the_run_and_shows_its_progress() {
    let s = scenario(INCAST, &["threads=3"]);
    let whole = run(&s);
    let mut sim = Simulation::new(&s).unwrap();
    let (mut steps, mut seen) = (0, Vec::new());
    while !sim.step(3_000) {
        steps += 1;
        let p = sim.progress();
        assert!(!p.finished && p.flows_done < p.flows_total);
        seen.push((p.now_ns, p.flows_done, p.events));
    }
    assert!(steps > 10, "{steps} steps");
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1 && w[0].2 < w[1].2), "progress only grows");
    assert!(seen.iter().any(|&(_, done, _)| done > 0), "finished flows of every part are counted");
    assert_eq!(flows_csv(&sim), whole.1, "stepping does not change the run");
    assert_eq!(Summary::of(&sim).events, whole.0.events);
}

/// A parallel run dropped midway (a Ctrl-C between steps) ends its parts' threads.
#[test]
fn a_parallel_run_dropped_midway_ends_its_threads() {
    let s = scenario(INCAST, &["threads=3"]);
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..20 {
            let mut sim = Simulation::new(&s).unwrap();
            assert!(!sim.step(5_000));
            drop(sim); // joins the parked parts
        }
        done.send(()).unwrap();
    });
    // a part left waiting would hang the drop: fail instead of hanging the suite
    finished.recv_timeout(std::time::Duration::from_secs(120)).expect("20 runs dropped midway within 120 s");
}

/// DLCP and LTP keep what a host's transfers share (pair rates and counts, LT thresholds,
/// path models) in that host's part: their senders and receivers run where their hosts are.
#[test]
fn the_training_transports_run_on_parts() {
    for kind in ["dlcp", "ltp"] {
        let sets = [format!("transport.kind=\"{kind}\""), "workload.senders=24".into()];
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let one = run(&scenario(INCAST, &sets));
        let mut two_sets = sets.clone();
        two_sets.push("threads=2");
        let two = run(&scenario(INCAST, &two_sets));
        check_against_single(&one, &two);
        let (ma, mb) = (one.0.fct_mean_ns.unwrap(), two.0.fct_mean_ns.unwrap());
        assert!((mb / ma - 1.0).abs() < 0.25, "{kind}: mean FCT {ma} against {mb}");
        assert_eq!(run(&scenario(INCAST, &two_sets)).1, two.1, "{kind}: a seed gives one output");
    }
}

#[test]
fn sampled_ports_are_sampled_by_their_part_and_listed_as_one_run_lists_them() {
    // leaf0's port to host0 (part 0) and leaf1's to host16 (part 1), in that order
    let ports = [
        "output.queue_ports=[\"leaf1->host16\", \"leaf0->host0\"]",
        "output.counter_ports=[\"leaf1->host16\", \"leaf0->host0\"]",
    ];
    let text = INCAST.replace("senders = 32", "senders = 24");
    let mut sets = vec!["threads=2"];
    sets.extend(ports);
    let mut sim = Simulation::new(&scenario(&text, &sets)).unwrap();
    sim.run();
    let rows = |csv: String| {
        csv.lines().skip(1).map(|l| l.split(',').map(String::from).collect::<Vec<_>>()).collect::<Vec<_>>()
    };
    for (csv, what) in [(queues_csv(&sim), "queues"), (port_bytes_csv(&sim), "port bytes")] {
        let r = rows(csv);
        assert!(r.len() > 100, "{what}: {} samples", r.len());
        for pair in r.chunks(2) {
            assert_eq!(pair[0][0], pair[1][0], "{what}: both ports at each time");
            assert_eq!(
                (pair[0][1].as_str(), pair[1][1].as_str()),
                ("leaf1->host16", "leaf0->host0"),
                "{what}: listed order"
            );
        }
        // the incast's receiver is host0: its port carried the bytes
        if what == "port bytes" {
            let last = &r[r.len() - 2..];
            assert!(last.iter().any(|row| row[2].parse::<u64>().unwrap() > 4_000_000), "{last:?}");
        }
    }
}

#[test]
fn a_run_stopped_midway_counts_every_part_s_packets_in_flight() {
    let (one, _) = run(&scenario(INCAST, &["stop_ms=0.3"]));
    let (two, csv) = run(&scenario(INCAST, &["stop_ms=0.3", "threads=2"]));
    for s in [&one, &two] {
        assert!(s.flows_finished < s.flows, "the stop came first");
        assert_eq!(s.sim_time_ns, 300_000, "the run ends at the stop");
        assert!(s.packets.in_flight > 0 && s.packets.conserved, "{:?}", s.packets);
    }
    // unfinished flows have a start and no finish
    let unfinished = rows(&csv).iter().filter(|r| r[5].is_empty()).count() as u64;
    assert_eq!(unfinished, two.flows - two.flows_finished);
}

#[test]
fn parts_follow_pods_and_racks() {
    let s = scenario(PS, &["threads=2"]);
    let sim = Simulation::new(&s).unwrap();
    let topo = sim.topology();
    let owner = node_parts(&s, topo, 2);
    // k = 4: 4 hosts per pod, pods alternate; a pod's edge and aggregation switches go with it
    assert_eq!(&owner[..16], &[0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]);
    let part = |name: &str| owner[topo.node_by_name(name).unwrap() as usize];
    assert_eq!((part("edge0"), part("edge1"), part("edge2")), (0, 0, 1));
    assert_eq!((part("agg2"), part("agg3"), part("core0"), part("core1")), (1, 1, 0, 1));
    let s = scenario(INCAST, &["threads=3"]);
    let sim = Simulation::new(&s).unwrap();
    let topo = sim.topology();
    let owner = node_parts(&s, topo, 3);
    let part = |name: &str| owner[topo.node_by_name(name).unwrap() as usize];
    assert_eq!((part("host0"), part("host16"), part("host17"), part("leaf1")), (0, 1, 1, 1));
    assert_eq!((part("spine0"), part("spine2"), part("spine3")), (0, 2, 0));
}

#[test]
fn what_a_part_cannot_run_alone_is_refused_by_name() {
    let refused = |text: &str, sets: &[&str], says: &str| {
        let err = match Simulation::new(&scenario(text, sets)) {
            Ok(_) => panic!("{sets:?} was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("threads") && err.contains(says), "{sets:?}: {err}");
    };
    refused(INCAST, &["threads=2", "failures=[{at_us = 100.0, link = \"leaf0-spine0\"}]"], "failures");
    refused(INCAST, &["threads=2", "pauses.hosts=2", "pauses.period_us=100"], "pauses");
    refused(INCAST, &["threads=2", "host.nic=\"fifo\""], "fifo");
    refused(INCAST, &["threads=2", "host.nic=\"flow_queues\""], "flow_queues");
    let Err(err) = load(INCAST, &["threads=0".to_string()]) else { panic!("0 threads accepted") };
    let err = err.to_string();
    assert!(err.contains("threads") && err.contains("1..=64"), "{err}");
    // one thread is a single run, whatever it holds
    Simulation::new(&scenario(INCAST, &["threads=1", "host.nic=\"fifo\""])).unwrap();
}
