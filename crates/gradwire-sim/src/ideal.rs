//! Ideal rows: fluid lower bounds on the same workload a scheme is simulated on.
//!
//! The network is relaxed to its host links and, per rack, one aggregate uplink and one
//! aggregate downlink (the sum of the rack switch's links to the fabric: what per-packet
//! spraying can at best use; ECMP's hash collisions only make it worse). Flows are fluid:
//! no packets, headers, queues, losses or control; a flow ends when its bytes have drained
//! plus the propagation delay of its shortest path. Barriers, compute delays and
//! iterations are those of the workload, so pulls, and later iterations, start when the
//! fluid pushes they depend on end.
//!
//! - [`IdealMode::Fair`]: max-min fair sharing (progressive filling) of every byte: what a
//!   perfect per-flow fair transport with zero queueing would reach.
//! - [`IdealMode::Srpt`]: shortest-remaining-first (greedy in order of remaining bytes,
//!   every flow at the most its links leave it), and each flow only needs
//!   `1 - loss bound` of its bytes (`transport.loss_bound`, `transport.pull_loss_bound`
//!   for PS pulls): a bound for loss-tolerant, size-aware schemes such as DLCP.
//!
//! Neither is a theorem-grade lower bound of every percentile for every schedule (fair
//! sharing does not minimize mean FCT; SRPT does on one link, not on a network), but both
//! drop every packet-level cost, which is what makes them floors in practice; a test
//! checks them against every simulated scheme on a small scenario.

use crate::maxmin::MaxMin;
use crate::scenario::Scenario;
use crate::topology::{NodeKind, Topology};
use crate::workload::Workload;
use gradwire_core::time::{Time, SEC};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// `ideal`: a fluid bound instead of the packet simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdealMode {
    /// Simulate packets (the normal run).
    #[default]
    Off,
    /// Fluid max-min fair sharing of every byte.
    Fair,
    /// Fluid SRPT, each flow done at `1 - loss bound` of its bytes.
    Srpt,
}

impl IdealMode {
    pub fn is_off(&self) -> bool {
        *self == IdealMode::Off
    }
}

/// Start and finish (ps) of every flow; `None` for a flow never started, or finished after `stop`.
#[derive(Debug, Clone, PartialEq)]
pub struct FluidRun {
    pub started: Vec<Option<Time>>,
    pub finished: Vec<Option<Time>>,
    /// Rate recomputations (one per distinct arrival/completion instant).
    pub events: u64,
}

/// The relaxed network: resources with capacities (bytes/s) and each host's resources.
struct Net {
    cap: Vec<f64>,
    /// Host h: tx resource, rx resource, rack up, rack down (up/down absent for a rack
    /// switch with no fabric links).
    host_tx: Vec<usize>,
    host_rx: Vec<usize>,
    rack_up: Vec<Option<usize>>,
    rack_down: Vec<Option<usize>>,
    rack: Vec<u32>,
    /// Propagation delay (ps) from every host to every node, by shortest hop count.
    delay: Vec<Vec<Time>>,
}

impl Net {
    fn build(topo: &Topology) -> Net {
        let n = topo.nodes.len();
        let mut adj: Vec<Vec<(usize, Time, u64)>> = vec![Vec::new(); n];
        for l in &topo.links {
            adj[l.a as usize].push((l.b as usize, l.delay, l.bits_per_sec));
            adj[l.b as usize].push((l.a as usize, l.delay, l.bits_per_sec));
        }
        let is_host = |v: usize| topo.nodes[v].kind == NodeKind::Host;
        let hosts = topo.hosts as usize;
        let mut cap = Vec::new();
        let mut host_tx = Vec::with_capacity(hosts);
        let mut host_rx = Vec::with_capacity(hosts);
        let mut rack = Vec::with_capacity(hosts);
        for (h, links) in adj.iter().enumerate().take(hosts) {
            let bps: u64 = links.iter().map(|e| e.2).sum();
            host_tx.push(cap.len());
            cap.push(bps as f64 / 8.0);
            host_rx.push(cap.len());
            cap.push(bps as f64 / 8.0);
            rack.push(topo.rack_of(h as u32));
        }
        let mut rack_up = vec![None; topo.racks as usize];
        let mut rack_down = vec![None; topo.racks as usize];
        for h in 0..hosts {
            let r = rack[h] as usize;
            if rack_up[r].is_some() {
                continue;
            }
            let Some(&(sw, _, _)) = adj[h].first() else {
                continue;
            };
            let bps: u64 = adj[sw].iter().filter(|e| !is_host(e.0)).map(|e| e.2).sum();
            if bps > 0 {
                rack_up[r] = Some(cap.len());
                cap.push(bps as f64 / 8.0);
                rack_down[r] = Some(cap.len());
                cap.push(bps as f64 / 8.0);
            }
        }
        let delay = (0..hosts)
            .map(|h| {
                let mut d = vec![Time::MAX; n];
                let mut q = VecDeque::from([h]);
                d[h] = 0;
                while let Some(v) = q.pop_front() {
                    for &(u, lat, _) in &adj[v] {
                        if d[u] == Time::MAX {
                            d[u] = d[v] + lat;
                            q.push_back(u);
                        }
                    }
                }
                d
            })
            .collect();
        Net { cap, host_tx, host_rx, rack_up, rack_down, rack, delay }
    }

    /// The resources a flow from `src` to `dst` uses (none for a host to itself).
    fn path(&self, src: u32, dst: u32) -> Vec<usize> {
        let (s, d) = (src as usize, dst as usize);
        if s == d {
            return Vec::new();
        }
        let mut out = vec![self.host_tx[s], self.host_rx[d]];
        let (rs, rd) = (self.rack[s] as usize, self.rack[d] as usize);
        if rs != rd {
            out.extend(self.rack_up[rs]);
            out.extend(self.rack_down[rd]);
        }
        out
    }
}

/// The fluid run of `wl` on `topo` under `mode` (not `Off`).
pub fn solve(s: &Scenario, topo: &Topology, wl: &Workload, mode: IdealMode) -> FluidRun {
    assert!(!mode.is_off(), "ideal::solve needs a fluid mode");
    let net = Net::build(topo);
    let nf = wl.flows.len();
    let stop = (s.stop_ms * 1e9).round() as Time;
    let need: Vec<f64> = wl
        .flows
        .iter()
        .map(|f| {
            let keep = match mode {
                IdealMode::Srpt => 1.0 - if f.pull { s.transport.pull_loss_bound } else { s.transport.loss_bound },
                _ => 1.0,
            };
            (f.bytes as f64 * keep).max(0.0)
        })
        .collect();
    let paths: Vec<Vec<usize>> = wl.flows.iter().map(|f| net.path(f.src, f.dst)).collect();
    let mut barrier_left: Vec<u32> = wl.barriers.iter().map(|b| b.waiting_for).collect();
    let mut started = vec![None; nf];
    let mut finished = vec![None; nf];
    // flows waiting to start, by (start, id)
    let mut pending: BinaryHeap<Reverse<(Time, u32)>> = (0..nf as u32)
        .filter(|&f| wl.flows[f as usize].gate.is_none_or(|b| barrier_left[b as usize] == 0))
        .map(|f| Reverse((wl.flows[f as usize].start, f)))
        .collect();
    // data drained, waiting for its propagation delay: (finish, id)
    let mut landing: BinaryHeap<Reverse<(Time, u32)>> = BinaryHeap::new();
    let mut active: Vec<u32> = Vec::new();
    let mut remaining = vec![0.0f64; nf];
    let mut rate = vec![0.0f64; nf];
    let mut now: Time = 0;
    let mut events = 0u64;
    let mut fair = MaxMin::default();
    let mut residual = vec![0.0f64; net.cap.len()];
    loop {
        // flows that land now finish, releasing what their barriers gate
        while let Some(&Reverse((t, f))) = landing.peek() {
            if t > now {
                break;
            }
            landing.pop();
            finished[f as usize] = Some(t);
            for &b in wl.feeds(f) {
                barrier_left[b as usize] -= 1;
                if barrier_left[b as usize] == 0 {
                    for &g in &wl.barriers[b as usize].releases {
                        let spec = &wl.flows[g as usize];
                        pending.push(Reverse((spec.start.max(t + spec.gate_delay), g)));
                    }
                }
            }
        }
        while let Some(&Reverse((t, f))) = pending.peek() {
            if t > now {
                break;
            }
            pending.pop();
            started[f as usize] = Some(t);
            remaining[f as usize] = need[f as usize];
            active.push(f);
        }
        // a flow with nothing left (or no network to cross) drains at once
        active.retain(|&f| {
            let done = remaining[f as usize] <= 1e-6 || paths[f as usize].is_empty();
            if done {
                landing.push(Reverse((now + prop(&net, &wl.flows[f as usize]), f)));
            }
            !done
        });
        let next_outside = [pending.peek(), landing.peek()].into_iter().flatten().map(|r| r.0 .0).min();
        if active.is_empty() {
            match next_outside {
                Some(t) if t <= stop => {
                    now = t;
                    continue;
                }
                _ => break,
            }
        }
        events += 1;
        match mode {
            IdealMode::Srpt => srpt(&mut active, &remaining, &paths, &net.cap, &mut rate, &mut residual),
            _ => fair.solve(&active, |f| paths[f as usize].iter().copied(), &net.cap, &mut rate),
        }
        // advance to the first completion or the next arrival/landing
        let mut dt = f64::INFINITY;
        for &f in &active {
            let r = rate[f as usize];
            if r > 0.0 {
                dt = dt.min(remaining[f as usize] / r);
            }
        }
        let dt_ps = if dt.is_finite() { (dt * SEC as f64).ceil() as Time } else { Time::MAX };
        let next = match next_outside {
            Some(t) => t.min(now.saturating_add(dt_ps.max(1))),
            None => now.saturating_add(dt_ps.max(1)),
        };
        if next > stop || next == Time::MAX {
            break;
        }
        let secs = (next - now) as f64 / SEC as f64;
        for &f in &active {
            let fi = f as usize;
            remaining[fi] -= rate[fi] * secs;
            // ceil of dt to ps can overshoot by a fraction of a byte
            if remaining[fi] <= 1e-6 * need[fi].max(1.0) {
                remaining[fi] = 0.0;
            }
        }
        now = next;
    }
    for f in finished.iter_mut() {
        if f.is_some_and(|t| t > stop) {
            *f = None;
        }
    }
    FluidRun { started, finished, events }
}

fn prop(net: &Net, f: &crate::workload::FlowSpec) -> Time {
    if f.src == f.dst {
        0
    } else {
        net.delay[f.src as usize][f.dst as usize]
    }
}

/// Fluid SRPT: in order of remaining bytes (then flow id), each flow takes the least
/// residual capacity along its path. `active` is sorted in place: it stays nearly sorted
/// from one event to the next, which the stable (run-detecting) sort makes cheap.
fn srpt(
    active: &mut [u32],
    remaining: &[f64],
    paths: &[Vec<usize>],
    cap: &[f64],
    rate: &mut [f64],
    residual: &mut [f64],
) {
    residual.copy_from_slice(cap);
    active.sort_by(|&a, &b| remaining[a as usize].total_cmp(&remaining[b as usize]).then(a.cmp(&b)));
    for &f in active.iter() {
        let p = &paths[f as usize];
        let r = p.iter().map(|&r| residual[r]).fold(f64::INFINITY, f64::min).max(0.0);
        rate[f as usize] = r;
        for &x in p {
            residual[x] -= r;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::load;
    use gradwire_core::time::US;

    fn run(text: &str, mode: IdealMode) -> (FluidRun, Workload) {
        let s = &load(text, &[]).unwrap()[0].scenario;
        let topo = Topology::build(&s.topology);
        let mut rng = <rand_xoshiro::Xoshiro256PlusPlus as rand::SeedableRng>::seed_from_u64(s.seed);
        let wl = crate::workload::build(s, &topo, &mut rng).unwrap();
        (solve(s, &topo, &wl, mode), wl)
    }

    const RACK: &str = "[topology]\nleaves = 2\nhosts_per_leaf = 4\nspines = 1\nuplinks_per_leaf = 1\n\
                        host_link_gbps = 100.0\nuplink_gbps = 100.0\nlink_delay_ns = 1000\n";

    #[test]
    fn incast_shares_the_receiver_link_fairly() {
        // 3 senders in the receiver's rack, 1 MB each into one 100G link: all end at 240 us + 2 hops
        let text = format!(
            "{RACK}[workload]\nkind = \"incast\"\nreceiver = 0\nsender_list = [1, 2, 3]\nflow_bytes = 1000000\n"
        );
        let (r, _) = run(&text, IdealMode::Fair);
        for f in 0..3 {
            let fct = r.finished[f].unwrap() - r.started[f].unwrap();
            assert!(fct.abs_diff(240 * US + 2000 * 1000) <= 3, "{fct}");
        }
    }

    #[test]
    fn srpt_finishes_the_shortest_first_and_needs_only_the_bound() {
        // 0.5 MB and 1 MB into one link, loss bound 0.1: 45 us, then 45 + 90 us
        let text = format!(
            "{RACK}[transport]\nloss_bound = 0.1\n[workload]\nkind = \"flows\"\n\
             flows = [{{ src = 1, dst = 0, bytes = 1000000 }}, {{ src = 2, dst = 0, bytes = 500000 }}]\n"
        );
        let (r, _) = run(&text, IdealMode::Srpt);
        let fct = |f: usize| r.finished[f].unwrap() - r.started[f].unwrap() - 2000 * 1000;
        assert!(fct(1).abs_diff(36 * US) <= 3, "{}", fct(1));
        assert!(fct(0).abs_diff(108 * US) <= 3, "{}", fct(0));
        let (fair, _) = run(&text, IdealMode::Fair);
        let ffct = |f: usize| fair.finished[f].unwrap() - fair.started[f].unwrap() - 2000 * 1000;
        assert!(ffct(1).abs_diff(80 * US) <= 3 && ffct(0).abs_diff(120 * US) <= 3);
    }

    #[test]
    fn max_min_gives_the_bottleneck_share_and_the_rest_to_others() {
        // flow a: host1 -> host0 (shares host0's rx with b); b: host4 -> host0 across the
        // 100G uplink; c: host5 -> host2 across the same uplink. rx of host0: a, b at 50;
        // uplink: b 50, c takes the other 50.
        let text = format!(
            "{RACK}[workload]\nkind = \"flows\"\nflows = [{{ src = 1, dst = 0, bytes = 1000000 }}, \
             {{ src = 4, dst = 0, bytes = 1000000 }}, {{ src = 5, dst = 2, bytes = 500000 }}]\n"
        );
        let (r, _) = run(&text, IdealMode::Fair);
        let drain = |f: usize, hops: u64| r.finished[f].unwrap() - r.started[f].unwrap() - hops * 1000 * 1000;
        // all three at 50G: c (0.5 MB) drains at 80 us, then a and b finish their last 0.5 MB
        // at 50G each (host0's rx is shared) at 160 us
        assert!(drain(2, 4).abs_diff(80 * US) <= 3, "{}", drain(2, 4));
        assert!(drain(0, 2).abs_diff(160 * US) <= 3, "{}", drain(0, 2));
        assert!(drain(1, 4).abs_diff(160 * US) <= 3, "{}", drain(1, 4));
    }

    #[test]
    fn barriers_and_compute_delays_chain_iterations() {
        let text = "[topology]\nleaves = 2\nhosts_per_leaf = 4\nspines = 2\nuplinks_per_leaf = 2\n\
                    [workload]\nkind = \"dnn\"\nmodel = \"resnet18\"\nworkers = 4\nservers = 1\niterations = 3\n";
        for mode in [IdealMode::Fair, IdealMode::Srpt] {
            let (r, wl) = run(text, mode);
            assert!(r.finished.iter().all(|f| f.is_some()), "every flow finishes");
            // a gated flow starts no earlier than compute delay after some flow of the previous stage
            for (f, spec) in wl.flows.iter().enumerate() {
                assert!(r.started[f].unwrap() >= spec.start);
                assert!(r.finished[f].unwrap() >= r.started[f].unwrap());
                if spec.gate.is_some() {
                    let release = (0..wl.flows.len()).filter(|&g| wl.feeds(g as u32).contains(&spec.gate.unwrap()));
                    let last = release.map(|g| r.finished[g].unwrap()).max().unwrap();
                    assert_eq!(r.started[f].unwrap(), spec.start.max(last + spec.gate_delay));
                }
            }
        }
    }
}
