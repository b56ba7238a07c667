//! Collective schedules run by the simulator on an oversubscribed leaf-spine: every
//! transfer completes, the cross-rack bytes the simulator moved (from its flow records)
//! are the schedule's, and rat.md's Table 1 claim holds there: RAT moves the analytic
//! minimum across racks, PS and a rack-agnostic tree more. Ring moves more than the minimum
//! too when racks hold several ranks (see core's table1 tests: within r/(r-1) of it).

use gradwire_sim::output::flows_csv;
use gradwire_sim::workload::collective;
use gradwire_sim::{load, Simulation};

const RACKS: u64 = 3;
const PER_RACK: u64 = 4;
const WORLD: u64 = RACKS * PER_RACK;
/// Divisible by WORLD * 4 so every chunk, tree piece and shard is the same size.
const BYTES: u64 = WORLD * 4 * 25_000;

/// 3 racks of 4 hosts, one 100G uplink per leaf: 4:1 oversubscribed.
fn net(algorithm: &str, extra: &str) -> String {
    format!(
        "name = \"collective-{algorithm}\"\n\
         [topology]\nkind = \"leaf_spine\"\nspines = 2\nleaves = {RACKS}\nhosts_per_leaf = {PER_RACK}\nuplinks_per_leaf = 1\nlink_delay_ns = 1000\n\
         [switch]\nbuffer_bytes = 200000\necn_threshold_packets = 20\n\
         [transport]\nkind = \"dctcp\"\nrto_min_us = 1000.0\n\
         [workload]\nkind = \"collective\"\nalgorithm = \"{algorithm}\"\nbytes = {BYTES}\n{extra}"
    )
}

struct Measured {
    cross_rack_bytes: u64,
    schedule_cross: u64,
    time_ns: u64,
}

fn run(algorithm: &str, extra: &str) -> Measured {
    let runs = load(&net(algorithm, extra), &[]).unwrap_or_else(|e| panic!("{e}"));
    let scenario = &runs[0].scenario;
    let mut sim = Simulation::new(scenario).unwrap_or_else(|e| panic!("{e}"));
    sim.run();
    let topo = sim.topology().clone();
    let schedule = collective::schedule(scenario, &topo);
    let summary = sim.summary();
    let iterations = scenario.workload.iterations as u64;
    assert_eq!(summary.flows, schedule.transfers.len() as u64 * iterations, "{algorithm}: one flow per transfer");
    assert_eq!(summary.flows_finished, summary.flows, "{algorithm}: every transfer completes");
    assert!(summary.packets.conserved);
    // from the simulator's flow records: finished flows whose ends sit in different racks
    let csv = flows_csv(&sim);
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|&h| h == name).unwrap();
    let (src, dst, size, finish) = (col("src"), col("dst"), col("size_bytes"), col("finish_ns"));
    let mut cross_rack_bytes = 0;
    for line in lines {
        let v: Vec<&str> = line.split(',').collect();
        assert!(!v[finish].is_empty(), "{algorithm}: unfinished flow {line}");
        let (a, b): (u32, u32) = (v[src].parse().unwrap(), v[dst].parse().unwrap());
        if topo.rack_of(a) != topo.rack_of(b) {
            cross_rack_bytes += v[size].parse::<u64>().unwrap();
        }
    }
    let schedule_cross = iterations * schedule.bytes_between_regions(|a, b| topo.rack_of(a) == topo.rack_of(b));
    Measured { cross_rack_bytes, schedule_cross, time_ns: summary.sim_time_ns }
}

#[test]
fn cross_rack_bytes_match_the_schedules_and_rat_is_at_the_minimum() {
    // any allreduce moves each element across region boundaries at least 2 (r - 1) times
    let min = 2 * (RACKS - 1) * BYTES;
    let rat = run("rat", "");
    let ring = run("ring", "");
    let ps = run("ps", &format!("servers = {WORLD}\n"));
    let tree = run("tree", "pipeline_chunks = 4\n");
    for (name, m) in [("rat", &rat), ("ring", &ring), ("ps", &ps), ("tree", &tree)] {
        assert_eq!(m.cross_rack_bytes, m.schedule_cross, "{name}: the simulator moved the schedule's bytes");
        eprintln!("{name}: {} cross-rack bytes ({:.2} x minimum), {} us", m.cross_rack_bytes, m.cross_rack_bytes as f64 / min as f64, m.time_ns / 1000);
    }
    assert_eq!(rat.cross_rack_bytes, min, "RAT crosses each rack boundary once up, once down");
    // PS with a shard on every rank: each shard's off-rack workers push and pull it
    assert_eq!(ps.cross_rack_bytes, PER_RACK * min);
    // ring in rank order: RACKS of its WORLD edges cross racks, 2 (w - 1) / w of the buffer each
    assert_eq!(ring.cross_rack_bytes, RACKS * 2 * (WORLD - 1) * BYTES / WORLD);
    assert!(ring.cross_rack_bytes > min && ring.cross_rack_bytes < ps.cross_rack_bytes);
    assert!(tree.cross_rack_bytes > min);
    // with 4:1 oversubscribed uplinks, 4x the cross-rack bytes costs PS time
    assert!(rat.time_ns < ps.time_ns, "RAT {} ns vs PS {} ns", rat.time_ns, ps.time_ns);
}

#[test]
fn iterations_repeat_the_schedule_and_dedicated_servers_work() {
    let m = run("rat", "iterations = 2\nworkers = 8\n");
    assert_eq!(m.cross_rack_bytes, m.schedule_cross);
    let m = run("ps", "workers = 8\nservers = 2\ncolocated = false\n");
    assert_eq!(m.cross_rack_bytes, m.schedule_cross);
}
