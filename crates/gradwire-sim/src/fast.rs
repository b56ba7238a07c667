//! `fidelity = "fast"`: a parameter-server job simulated through a sample of its servers.
//!
//! In a PS job every worker sends to every server (a tensor split over all of them, or a
//! whole one to one server drawn at random), so the servers are alike and each sees the
//! whole fan-in of workers. The fast mode keeps `n = fast.servers` of the `S` servers and
//! only the flows to and from them: the work falls by about `S / n`. On the worker's half
//! of such a flow's path a packet stands for `m = S / n` packets (it holds the port and the
//! buffer `m` times as long and as much: the worker's flows to the servers left out would
//! have shared them); on the server's half it is itself (every flow of that server is
//! simulated). So a worker's NIC gives each flow the share it had among all `S`, and the
//! ports where a PS job queues and drops (a server's rack port, its NIC, a worker's rack
//! port) stay packet level with their priority queues, ECN and drops. A port toward a
//! worker holds `n / S` of the packets it would and marks ECN at a threshold scaled so
//! (`fast.scale_ecn`).
//!
//! What it cannot see: the racks of the servers left out carry none of their traffic, a
//! sample's slowest server is faster than the job's (a job's iteration is its slowest
//! server's), and a worker's link while it carries fewer flows than the share assumes.
//! Measured against packet level by `benchmarks/sim_fast` (docs/notes/fast-mode.md): on
//! the 128-host model, 1 in 4 servers runs 6x faster with the sampled servers' p99 FCT
//! and iteration time within 0.2 % of theirs at packet level, but their mean FCT 11 %
//! low and RTOs 20 % fewer, for a cause not yet found.

use crate::scenario::{DnnPattern, Scenario, ScenarioError, WorkloadKind};
use crate::topology::{NodeId, Topology};
use crate::workload::{ps_placement, Workload};

/// The servers a fast run simulates and the links it slows.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Hosts of the sampled servers.
    pub servers: Vec<u32>,
    /// The job's servers.
    pub of: u32,
    /// Per node: a worker, whose links run at `rate` of their speed.
    slowed: Vec<bool>,
    /// Per node: a sampled server.
    kept: Vec<bool>,
    pub rate: f64,
    /// Servers per sampled server (`S / servers`, a whole number).
    pub m: u16,
    pub scale_ecn: bool,
    weigh_core: bool,
}

/// How long a fast run's packet holds a port: a packet between a worker and a sampled
/// server stands for `S / servers` packets on the worker's half of its path (there the
/// worker's flows to the other servers would share the links), and for itself on the
/// server's half (every flow of that server is simulated). Only the host links of a
/// worker with `fast.weigh_core = false`.
#[derive(Debug, Clone)]
pub struct Weights {
    /// Per node: a worker.
    worker: Vec<bool>,
    hop: Vec<Hop>,
    /// Servers per sampled server.
    m: u16,
}

/// Where a port lies on the paths it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hop {
    /// Every packet weighs itself.
    Own,
    /// On the worker's half of the path of a packet to a worker (a down link).
    TowardWorkers,
    /// On the worker's half of the path of a packet from a worker (an up link).
    TowardServers,
}

impl Weights {
    /// Does a packet to `dst` at port `p` stand for the flows sampled away?
    #[inline]
    fn stands_for_more(&self, p: u32, dst: u32) -> bool {
        match self.hop[p as usize] {
            Hop::Own => false,
            Hop::TowardWorkers => self.worker[dst as usize],
            Hop::TowardServers => !self.worker[dst as usize],
        }
    }

    /// The bytes a packet to `dst` of `wire_bytes` is queued with at port `p`: where it
    /// stands for `m` packets it takes `m` times its bytes of the buffer and of the link.
    #[inline]
    pub fn at_port(&self, p: u32, dst: u32, wire_bytes: u16) -> u16 {
        if self.stands_for_more(p, dst) {
            wire_bytes * self.m
        } else {
            wire_bytes
        }
    }

    /// The bytes it leaves port `p` with: its own again.
    #[inline]
    pub fn leaving(&self, p: u32, dst: u32, wire_bytes: u16) -> u16 {
        if self.stands_for_more(p, dst) {
            wire_bytes / self.m
        } else {
            wire_bytes
        }
    }
}

impl Sample {
    /// The sample `s` asks for, `None` at packet fidelity; refuses by name what it cannot
    /// sample.
    pub fn plan(s: &Scenario, topo: &Topology) -> Result<Option<Sample>, ScenarioError> {
        if s.fidelity.is_packet() {
            return Ok(None);
        }
        let refuse = |key: &str, why: &str| {
            Err(ScenarioError::new(key, format!("fidelity = \"fast\" {why}; run it with fidelity = \"packet\"")))
        };
        let w = &s.workload;
        let ps = w.kind == WorkloadKind::Ps || (w.kind == WorkloadKind::Dnn && w.pattern == DnnPattern::Ps);
        if !ps {
            return refuse("workload.kind", "samples the servers of a PS job, and this workload is not one");
        }
        if w.colocated {
            return refuse("workload.colocated", "needs servers apart from workers (a colocated host is both)");
        }
        if !s.ideal.is_off() {
            return refuse("ideal", "simulates packets; an ideal row has none");
        }
        if s.pauses.hosts > 0 {
            return refuse("pauses.hosts", "cannot pause hosts it does not simulate");
        }
        if s.pcn.enabled {
            return refuse("pcn.enabled", "does not model PCN's announcements");
        }
        if !s.failures.is_empty() {
            return refuse("failures", "keeps no load on the links it samples away");
        }
        if s.fast.servers == 0 {
            return Err(ScenarioError::new("fast.servers", "must be at least 1 (got 0)"));
        }
        let (workers, all) = ps_placement(s, topo);
        let of = all.len() as u32;
        // a packet stands for a whole number of packets: the most servers that divide S
        let n = (1..=s.fast.servers.min(of)).rev().find(|n| of.is_multiple_of(*n)).unwrap_or(1);
        let m = of / n;
        let biggest = s.transport.mss_bytes as u64 + s.transport.header_bytes as u64;
        if m as u64 * biggest > u16::MAX as u64 {
            return Err(ScenarioError::new(
                "fast.servers",
                format!(
                    "{n} of {of} servers: a packet would stand for {m}, more than a 65535-byte frame holds; \
                     sample more servers"
                ),
            ));
        }
        let servers: Vec<u32> = (0..n).map(|i| all[(i * m) as usize]).collect();
        let mut slowed = vec![false; topo.nodes.len()];
        let mut kept = vec![false; topo.nodes.len()];
        for &w in &workers {
            slowed[w as usize] = n < of;
        }
        for &h in &servers {
            kept[h as usize] = true;
        }
        Ok(Some(Sample {
            servers,
            of,
            slowed,
            kept,
            rate: n as f64 / of as f64,
            m: m as u16,
            scale_ecn: s.fast.scale_ecn,
            weigh_core: s.fast.weigh_core,
        }))
    }

    /// Does a link with this end run at `rate`?
    pub fn slows(&self, node: NodeId) -> bool {
        self.slowed[node as usize]
    }

    /// What the packets of each port, given as (from, to), weigh.
    pub fn weights(&self, ports: impl Iterator<Item = (NodeId, NodeId)>) -> Weights {
        let hop = ports
            .map(|(from, to)| {
                // node ids grow with the tier: a port to a lower id leads toward the hosts
                let down = from > to;
                let here = self.weigh_core || self.slowed[from as usize] || self.slowed[to as usize];
                match (here, down) {
                    (false, _) => Hop::Own,
                    (true, true) => Hop::TowardWorkers,
                    (true, false) => Hop::TowardServers,
                }
            })
            .collect();
        Weights { worker: self.slowed.clone(), hop, m: self.m }
    }

    /// Keep only the flows of the sampled servers.
    pub fn thin(&self, wl: &mut Workload) {
        wl.retain(|f| self.kept[f.src as usize] || self.kept[f.dst as usize]);
    }
}
