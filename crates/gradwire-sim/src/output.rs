//! Results: `flows.csv`, `summary.json` and `queues.csv`, all readable by pandas.

use crate::sim::{Conservation, Simulation};
use gradwire_core::switch::DropReason;
use gradwire_core::time::NS;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

#[derive(Clone, Debug, Serialize)]
pub struct PacketCounts {
    pub sent: u64,
    pub delivered: u64,
    pub dropped: u64,
    pub in_flight: u64,
    /// `sent == delivered + dropped + in_flight`.
    pub conserved: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub name: String,
    pub seed: u64,
    pub transport: String,
    pub flows: u64,
    pub flows_finished: u64,
    pub fct_mean_ns: Option<f64>,
    pub fct_p50_ns: Option<u64>,
    pub fct_p99_ns: Option<u64>,
    pub fct_max_ns: Option<u64>,
    pub retransmits: u64,
    pub timeouts: u64,
    pub drops: BTreeMap<String, u64>,
    pub ecn_marks: u64,
    pub stray_packets: u64,
    pub packets: PacketCounts,
    pub sim_time_ns: u64,
    pub events: u64,
    pub wall_seconds: f64,
    pub events_per_second: f64,
    /// With `output.link_bytes`: what each link tier carried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_bytes: Option<BTreeMap<String, TierBytes>>,
    /// With `output.link_bytes` and a collective workload: the schedule's analysis.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collective: Option<CollectiveAnalysis>,
    /// With `pcn.enabled`: what PCN did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcn: Option<crate::sim::PcnStats>,
    /// With `fidelity = "fast"`: the servers simulated (every number above is theirs; with
    /// `fast.cover`, every server's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fast: Option<FastSummary>,
}

/// What a fast run sampled (`crate::fast`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FastSummary {
    /// Hosts of the sampled servers.
    pub servers: Vec<u32>,
    /// The job's servers.
    pub of: u32,
    /// Packets a sampled packet stands for on its worker's half of the path (`of` over the
    /// servers sampled; a fraction where they do not divide `of`).
    pub stands_for: f64,
    /// Samples run: 1, or with `fast.cover` all `stands_for` of them.
    pub samples: u32,
    /// Flows simulated for their load on the workers' links but left out of the results
    /// (other servers' whole tensors, `fast.keep_whole_tensors`).
    #[serde(skip_serializing_if = "is_zero")]
    pub unreported_flows: u64,
    /// Those whole tensors ran as a scale model, one in `m` of their workers
    /// (`fast.thin_whole_tensors`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub thinned: bool,
    /// The workers a thinned flow stands for (`fast.thin_by`; 0 when not thinned).
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub thinned_by: f64,
    /// With every server's whole tensors kept: the last finish of any flow simulated, the
    /// job's iteration as this run estimates it (a job's slowest servers are those whose
    /// whole tensors' incast takes RTO after RTO, and those it simulates whole). Absent
    /// without them, while a flow is unfinished, and in a cover (whose flows are the job's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_iteration_ns: Option<u64>,
    /// With every server's whole tensors kept: the job's flows as the run estimates them,
    /// each whole tensor's flow for itself (a thinned one for the `thin_by` workers it stands
    /// for) and each of the sample's spread shards for the `m` it stands for (the job's
    /// flow count), and their FCT figures and RTOs weighted so.
    /// The sample's own figures lean on which servers it drew: a server's whole tensors are
    /// its own, and these count every server's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_flows: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_fct_mean_ns: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_fct_p50_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_fct_p99_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_timeouts: Option<u64>,
}

impl FastSummary {
    /// Fills the job's estimated figures from every flow simulated (see the fields).
    fn estimate_job(&mut self, sim: &Simulation) {
        let all = 0..sim.flow_count() as u32;
        let unit = sim.job_weight_unit();
        let flows = |sum: u64| (sum + unit / 2) / unit;
        self.job_flows = Some(flows(all.clone().map(|f| sim.job_weight(f)).sum()));
        self.job_timeouts = Some(flows(all.clone().map(|f| sim.job_weight(f) * sim.flow_stats(f).timeouts).sum()));
        let mut fcts: Vec<(u64, u64)> = all
            .filter_map(|f| {
                let st = sim.flow_state(f);
                Some(((st.finished()? - st.started()?) / NS, sim.job_weight(f)))
            })
            .collect();
        fcts.sort_unstable();
        let weight: u64 = fcts.iter().map(|&(_, w)| w).sum();
        if weight > 0 {
            self.job_fct_mean_ns = Some(fcts.iter().map(|&(t, w)| t as f64 * w as f64).sum::<f64>() / weight as f64);
        }
        self.job_fct_p50_ns = weighted_percentile(&fcts, 50.0);
        self.job_fct_p99_ns = weighted_percentile(&fcts, 99.0);
    }
}

/// [`percentile`] of values each counted `weight` times, given sorted.
pub fn weighted_percentile(sorted: &[(u64, u64)], q: f64) -> Option<u64> {
    let total: u64 = sorted.iter().map(|&(_, w)| w).sum();
    if total == 0 {
        return None;
    }
    let rank = ((q / 100.0 * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    sorted
        .iter()
        .find(|&&(_, w)| {
            seen += w;
            seen >= rank
        })
        .map(|&(v, _)| v)
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_f64(n: &f64) -> bool {
    *n == 0.0
}

/// What one iteration of a collective schedule asks of the network (rat.md §2, Table 1),
/// from the schedule itself: the bytes its busiest rank and rack must send and receive,
/// what crosses rack boundaries, and its longest chain of dependent transfers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CollectiveAnalysis {
    pub world: u32,
    pub dependent_steps: u32,
    pub cross_rack_bytes: u64,
    /// Fat-tree only (else 0): bytes crossing pod boundaries.
    pub cross_pod_bytes: u64,
    pub max_rank_send_bytes: u64,
    pub max_rank_recv_bytes: u64,
    pub max_rack_out_bytes: u64,
    pub max_rack_in_bytes: u64,
}

impl CollectiveAnalysis {
    pub fn of(sim: &Simulation) -> CollectiveAnalysis {
        use crate::workload::collective;
        let (s, topo) = (sim.scenario(), sim.topology());
        let sch = collective::schedule(s, topo);
        let map = collective::rack_map(s, topo);
        let (mut send, mut recv) = (vec![0u64; sch.world as usize], vec![0u64; sch.world as usize]);
        let (mut out, mut inn) = (vec![0u64; topo.racks as usize], vec![0u64; topo.racks as usize]);
        for t in &sch.transfers {
            send[t.src as usize] += t.bytes();
            recv[t.dst as usize] += t.bytes();
            let (a, b) = (topo.rack_of(t.src), topo.rack_of(t.dst));
            if a != b {
                out[a as usize] += t.bytes();
                inn[b as usize] += t.bytes();
            }
        }
        let max = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
        CollectiveAnalysis {
            world: sch.world,
            dependent_steps: sch.dependency_depth(),
            cross_rack_bytes: sch.bytes_between_regions(|a, b| topo.rack_of(a) == topo.rack_of(b)),
            cross_pod_bytes: if map.levels() > 1 {
                sch.bytes_between_regions(|a, b| map.same_region(1, a, b))
            } else {
                0
            },
            max_rank_send_bytes: max(&send),
            max_rank_recv_bytes: max(&recv),
            max_rack_out_bytes: max(&out),
            max_rack_in_bytes: max(&inn),
        }
    }
}

/// Traffic one tier of links carried, both directions counted separately (`leaf->spine`
/// is the rack uplinks). `payload` excludes `transport.header_bytes` per packet, which
/// makes it the transfers' bytes when ACKs are `header_bytes` long (the default) and
/// nothing was resent. `drops` counts the packets the tier's egress ports dropped, for any
/// reason (where a scheme loses its packets: at the racks' down links in an incast, in the
/// core when it is oversubscribed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TierBytes {
    pub packets: u64,
    pub bytes: u64,
    pub payload: u64,
    pub drops: u64,
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q / 100.0 * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// `summary.json`'s FCT figures, from the FCTs (ns) of the flows that finished.
pub struct FctStats {
    pub finished: u64,
    pub mean_ns: Option<f64>,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub max_ns: Option<u64>,
}

impl FctStats {
    pub fn of(mut fcts: Vec<u64>) -> FctStats {
        fcts.sort_unstable();
        FctStats {
            finished: fcts.len() as u64,
            mean_ns: (!fcts.is_empty()).then(|| fcts.iter().sum::<u64>() as f64 / fcts.len() as f64),
            p50_ns: percentile(&fcts, 50.0),
            p99_ns: percentile(&fcts, 99.0),
            max_ns: fcts.last().copied(),
        }
    }
}

impl Summary {
    pub fn of(sim: &Simulation) -> Summary {
        let reported = || (0..sim.flow_count() as u32).filter(|&f| sim.reported(f));
        let fct = FctStats::of(
            reported()
                .filter_map(|f| {
                    let st = sim.flow_state(f);
                    Some((st.finished()? - st.started()?) / NS)
                })
                .collect(),
        );
        let flows = reported().count() as u64;
        let c: Conservation = sim.conservation();
        let wall = sim.wall.as_secs_f64();
        let s = sim.scenario();
        Summary {
            name: s.name.clone(),
            seed: s.seed,
            transport: s.transport.kind.name().to_string(),
            flows,
            flows_finished: fct.finished,
            fct_mean_ns: fct.mean_ns,
            fct_p50_ns: fct.p50_ns,
            fct_p99_ns: fct.p99_ns,
            fct_max_ns: fct.max_ns,
            retransmits: reported().map(|f| sim.flow_stats(f).retransmits).sum(),
            timeouts: reported().map(|f| sim.flow_stats(f).timeouts).sum(),
            drops: DropReason::ALL.iter().map(|r| (r.as_str().to_string(), sim.drops_by_reason[*r as usize])).collect(),
            ecn_marks: sim.fabric.ports.iter().map(|p| p.queue.counters().ecn_marked).sum(),
            stray_packets: sim.strays,
            packets: PacketCounts {
                sent: c.sent,
                delivered: c.delivered,
                dropped: c.dropped,
                in_flight: c.in_flight,
                conserved: c.holds(),
            },
            sim_time_ns: sim.now / NS,
            events: sim.events_processed,
            wall_seconds: wall,
            events_per_second: if wall > 0.0 { sim.events_processed as f64 / wall } else { 0.0 },
            link_bytes: s.output.link_bytes.then(|| sim.tier_bytes()),
            collective: (s.output.link_bytes && s.workload.kind == crate::scenario::WorkloadKind::Collective)
                .then(|| CollectiveAnalysis::of(sim)),
            pcn: sim.pcn_stats(),
            fast: sim.fast_sample().map(|x| {
                let mut summary = FastSummary {
                    servers: x.servers.clone(),
                    of: x.of,
                    stands_for: x.m,
                    samples: 1,
                    unreported_flows: sim.flow_count() as u64 - flows,
                    thinned: x.thins_whole_tensors(),
                    thinned_by: if x.thins_whole_tensors() { x.thin_by } else { 0.0 },
                    job_iteration_ns: x.keeps_whole_tensors().then(|| sim.last_finish()).flatten().map(|t| t / NS),
                    ..FastSummary::default()
                };
                if x.keeps_whole_tensors() {
                    summary.estimate_job(sim);
                }
                summary
            }),
        }
    }
}

/// `flows.csv`: one row per flow; unfinished flows have empty finish and FCT.
pub fn flows_csv(sim: &Simulation) -> String {
    let mut out = Vec::new();
    write_flows_csv(sim, &mut out).expect("writing to memory");
    String::from_utf8(out).expect("ASCII")
}

/// One row of `flows.csv`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowRow {
    /// The whole job's flow index (a fast run's sample keeps the job's numbering).
    pub flow_id: u32,
    pub src: u32,
    pub dst: u32,
    pub size_bytes: u64,
    pub start_ns: Option<u64>,
    pub finish_ns: Option<u64>,
    /// Finish minus start in picoseconds, then in ns (not `finish_ns - start_ns`).
    pub fct_ns: Option<u64>,
    pub retransmits: u64,
    pub timeouts: u64,
    pub iteration: u32,
    pub pull: bool,
    pub layer: u32,
}

pub const FLOWS_CSV_HEADER: &[u8] =
    b"flow_id,src,dst,size_bytes,start_ns,finish_ns,fct_ns,retransmits,timeouts,iteration,pull,layer\n";

impl FlowRow {
    /// Append the row, newline included, to `out`.
    pub fn write(&self, out: &mut String) {
        let opt = |t: Option<u64>| t.map(|v| v.to_string()).unwrap_or_default();
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{}",
            self.flow_id,
            self.src,
            self.dst,
            self.size_bytes,
            opt(self.start_ns),
            opt(self.finish_ns),
            opt(self.fct_ns),
            self.retransmits,
            self.timeouts,
            self.iteration,
            self.pull as u8,
            self.layer
        );
    }
}

/// The run's `flows.csv` rows, flow by flow.
pub fn flow_rows(sim: &Simulation) -> impl Iterator<Item = FlowRow> + '_ {
    let rows = sim.workload.flows.iter().zip(sim.flow_states()).enumerate();
    rows.filter(|&(i, _)| sim.reported(i as u32)).map(|(i, (spec, st))| {
        let stats = sim.flow_stats(i as u32);
        FlowRow {
            flow_id: sim.workload.job_id(i as u32),
            src: spec.src,
            dst: spec.dst,
            size_bytes: spec.bytes,
            start_ns: st.started().map(|t| t / NS),
            finish_ns: st.finished().map(|t| t / NS),
            fct_ns: st.finished().zip(st.started()).map(|(f, s)| (f - s) / NS),
            retransmits: stats.retransmits,
            timeouts: stats.timeouts,
            iteration: spec.iteration,
            pull: spec.pull,
            layer: spec.layer,
        }
    })
}

/// [`flows_csv`] written out as it is made (millions of rows need not sit in memory).
pub fn write_flows_csv(sim: &Simulation, out: &mut impl io::Write) -> io::Result<()> {
    write_rows(flow_rows(sim), out)
}

/// `flows.csv` of `rows`, header first.
pub fn write_rows(rows: impl Iterator<Item = FlowRow>, out: &mut impl io::Write) -> io::Result<()> {
    out.write_all(FLOWS_CSV_HEADER)?;
    let mut line = String::new();
    for row in rows {
        line.clear();
        row.write(&mut line);
        out.write_all(line.as_bytes())?;
    }
    Ok(())
}

pub fn queues_csv(sim: &Simulation) -> String {
    let mut out = String::from("time_ns,port,bytes,packets\n");
    for q in &sim.queue_samples {
        let _ = writeln!(out, "{},{},{},{}", q.time_ns, sim.fabric.ports[q.port as usize].name, q.bytes, q.packets);
    }
    out
}

pub fn port_bytes_csv(sim: &Simulation) -> String {
    let mut out = String::from("time_ns,port,bytes\n");
    for &(t, port, bytes) in &sim.byte_samples {
        let _ = writeln!(out, "{t},{},{bytes}", sim.fabric.ports[port as usize].name);
    }
    out
}

impl Simulation {
    pub fn summary(&self) -> Summary {
        Summary::of(self)
    }

    /// Traffic carried per link tier, keyed `from->to` with the node numbers dropped
    /// (`leaf->spine`, `agg->core`, `host->edge`, ...).
    pub fn tier_bytes(&self) -> BTreeMap<String, TierBytes> {
        let kind = |n: u32| self.topo.nodes[n as usize].name.trim_end_matches(|c: char| c.is_ascii_digit()).to_string();
        let header = self.scenario().transport.header_bytes as u64;
        let mut out: BTreeMap<String, TierBytes> = BTreeMap::new();
        for p in &self.fabric.ports {
            let c = p.queue.counters();
            let t = out.entry(format!("{}->{}", kind(p.from), kind(p.to))).or_default();
            t.packets += c.dequeued;
            t.bytes += c.dequeued_bytes;
            t.payload += c.dequeued_bytes.saturating_sub(c.dequeued * header);
            t.drops += c.dropped.iter().sum::<u64>();
        }
        out
    }

    /// Write `flows.csv`, `summary.json` and (if ports were sampled) `queues.csv` into `dir`.
    pub fn write_outputs(&self, dir: &Path) -> io::Result<Summary> {
        std::fs::create_dir_all(dir)?;
        let summary = self.summary();
        let mut flows = io::BufWriter::new(std::fs::File::create(dir.join("flows.csv"))?);
        write_flows_csv(self, &mut flows)?;
        io::Write::flush(&mut flows)?;
        let json = serde_json::to_string_pretty(&summary).map_err(io::Error::other)?;
        std::fs::write(dir.join("summary.json"), json + "\n")?;
        if !self.queue_samples.is_empty() {
            std::fs::write(dir.join("queues.csv"), queues_csv(self))?;
        }
        if !self.byte_samples.is_empty() {
            std::fs::write(dir.join("port_bytes.csv"), port_bytes_csv(self))?;
        }
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::{percentile, weighted_percentile};

    #[test]
    fn weighted_nearest_rank() {
        let v: Vec<(u64, u64)> = (1..=100).map(|x| (x, 1)).collect();
        assert_eq!(weighted_percentile(&v, 50.0), percentile(&(1..=100).collect::<Vec<_>>(), 50.0));
        // 1 counted 3 times and 2 once: the median is 1, the 99th percentile 2
        assert_eq!(weighted_percentile(&[(1, 3), (2, 1)], 50.0), Some(1));
        assert_eq!(weighted_percentile(&[(1, 3), (2, 1)], 76.0), Some(2));
        assert_eq!(weighted_percentile(&[(1, 3), (2, 1)], 99.0), Some(2));
        assert_eq!(weighted_percentile(&[], 50.0), None);
    }

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
