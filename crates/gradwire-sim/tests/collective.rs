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
         [output]\nlink_bytes = true\n\
         [workload]\nkind = \"collective\"\nalgorithm = \"{algorithm}\"\nbytes = {BYTES}\n{extra}"
    )
}

struct Measured {
    retransmits: u64,
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
    // on the links: every cross-rack byte goes up one rack uplink and down another, once,
    // when no packet was resent (PS's incast into 4:1 uplinks drops some: then at least)
    let links = summary.link_bytes.as_ref().expect("output.link_bytes is on");
    let total: u64 = schedule.transfers.iter().map(|t| t.bytes()).sum::<u64>() * iterations;
    if summary.retransmits == 0 {
        assert_eq!(
            links["leaf->spine"].payload, cross_rack_bytes,
            "{algorithm}: rack uplinks carried the cross-rack bytes"
        );
        assert_eq!(links["spine->leaf"].payload, cross_rack_bytes, "{algorithm}: and rack downlinks");
        assert_eq!(links["host->leaf"].payload, total, "{algorithm}: every transfer left its host once");
    } else {
        assert!(links["leaf->spine"].payload >= cross_rack_bytes && links["host->leaf"].payload > total);
    }
    // no loss but the ports': every dropped packet was dropped by some tier's port
    let dropped: u64 = links.values().map(|t| t.drops).sum();
    assert_eq!(dropped, summary.packets.dropped, "{algorithm}: drops per tier");
    Measured { retransmits: summary.retransmits, cross_rack_bytes, schedule_cross, time_ns: summary.sim_time_ns }
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
        eprintln!(
            "{name}: {} cross-rack bytes ({:.2} x minimum), {} us",
            m.cross_rack_bytes,
            m.cross_rack_bytes as f64 / min as f64,
            m.time_ns / 1000
        );
    }
    assert_eq!((rat.retransmits, ring.retransmits), (0, 0), "RAT and ring were checked on the links exactly");
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

/// k = 4 fat-tree (4 pods of 2 racks of 2): RAT's rack and pod levels each carry the
/// minimum 2 (r - 1) B across their boundaries, as the links measure it.
#[test]
fn fat_tree_links_carry_rat_s_minimum_at_both_levels() {
    let bytes: u64 = 16 * 4 * 1000;
    let text = format!(
        "[topology]\nkind = \"fat_tree\"\nk = 4\nlink_delay_ns = 1000\n[switch]\nbuffer_bytes = 400000\n\
         [transport]\nrto_min_us = 1000.0\n[output]\nlink_bytes = true\n\
         [workload]\nkind = \"collective\"\nalgorithm = \"rat\"\nbytes = {bytes}\n"
    );
    let runs = load(&text, &[]).unwrap();
    let mut sim = Simulation::new(&runs[0].scenario).unwrap();
    sim.run();
    let s = sim.summary();
    assert_eq!((s.flows_finished, s.retransmits), (s.flows, 0));
    let links = s.link_bytes.unwrap();
    // pods: 4 regions; racks: 8 regions. Crossing a pod goes through the core.
    assert_eq!(links["agg->core"].payload, 2 * 3 * bytes, "pod boundaries");
    assert_eq!(links["core->agg"].payload, 2 * 3 * bytes);
    assert_eq!(links["edge->agg"].payload, 2 * 7 * bytes, "rack boundaries");
}

#[test]
fn iterations_repeat_the_schedule_and_dedicated_servers_work() {
    let m = run("rat", "iterations = 2\nworkers = 8\n");
    assert_eq!(m.cross_rack_bytes, m.schedule_cross);
    let m = run("ps", "workers = 8\nservers = 2\ncolocated = false\n");
    assert_eq!(m.cross_rack_bytes, m.schedule_cross);
}
