//! PCN in the simulated world: the core's [`PcnRegister`] on every switch egress port,
//! PCN-START and its ACK as out-of-band packets, and the burst flows of a `ddlgen`
//! workload held until their ACK (or the fallback).
//!
//! Packets carry their PCN mark in a side table indexed by packet handle (the core's
//! `Packet` has no DSCP field): written for every packet a host sends while PCN is on,
//! read by switch ports and hosts. With PCN off none of this runs.

use super::*;
use gradwire_core::packet::{CtrlOp, PacketKind};
use gradwire_core::switch::{pcn_thresholds, worker_fallback, PcnMark, PcnRegister};
use serde::Serialize;

/// Per burst flow: where its announcement stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Burst {
    /// Not a burst (background traffic).
    No,
    /// Not yet announced.
    Due,
    /// START sent at `since`, waiting for the ACK or the fallback.
    Waiting {
        since: Time,
    },
    /// ACK in; the burst starts `at` (`pcn.burst_delay_us` after the ACK).
    Acked {
        since: Time,
        at: Time,
    },
    /// Started; its first packet still to carry the burst mark.
    MarkNext,
    Started,
}

pub(super) struct PcnWorld {
    threshold: u32,
    fallback: Time,
    burst_delay: Time,
    packet_bytes: u32,
    regs: Vec<PcnRegister>,
    /// The threshold each port applies now (to touch a port only on change).
    applied: Vec<u32>,
    tags: Vec<Option<PcnMark>>,
    bursts: Vec<Burst>,
    stats: PcnStats,
}

/// What PCN did in a run: in `summary.json` under `pcn`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PcnStats {
    pub initial_threshold: u32,
    pub pcn_threshold: u32,
    pub fallback_ns: u64,
    pub starts_sent: u64,
    pub acks_sent: u64,
    /// Bursts released by the server's ACK, and by the fallback timer.
    pub released_by_ack: u64,
    pub released_by_fallback: u64,
    /// Summed over bursts: from the START to the burst's start (what PCN costs a worker).
    pub waited_ns: u64,
    /// Summed over switch ports: STARTs seen, burst marks matched, leases that ran out.
    pub port_starts: u64,
    pub port_bursts: u64,
    pub port_lease_expiries: u64,
    /// Switch ports whose PCN threshold is still in force at the end of the run.
    pub ports_lowered_at_end: u64,
}

impl PcnWorld {
    pub fn new(s: &Scenario, workload: &Workload, ports: usize) -> Option<PcnWorld> {
        let cfg = &s.pcn;
        if !cfg.enabled {
            return None;
        }
        let initial = s.switch.ecn_threshold_packets;
        let rtt_ns = cfg.rtt_us.map_or(s.base_rtt_ns() as f64, |r| r * 1e3);
        let rate = match s.topology.kind {
            crate::scenario::TopologyKind::LeafSpine => s.topology.host_link_gbps,
            crate::scenario::TopologyKind::FatTree => s.topology.link_gbps,
        } * 1e9;
        let mtu = s.transport.mss_bytes + s.transport.header_bytes;
        let threshold = cfg.threshold.unwrap_or_else(|| pcn_thresholds(rtt_ns, rate, cfg.long_flows, mtu, cfg.k).1);
        // the longest a START and its ACK can take without being lost: base RTT plus a
        // full queue (the buffer, or the drop threshold's packets) at each of the 3
        // switch ports each way (a leaf-spine path)
        let queue_cap = match s.switch.drop_threshold_packets {
            0 => s.switch.buffer_bytes,
            n => s.switch.buffer_bytes.min(n as u64 * mtu as u64),
        };
        let drain = gradwire_core::time::serialization(queue_cap.min(u32::MAX as u64) as u32, rate as u64);
        let fallback = cfg.fallback_us.map_or_else(|| worker_fallback(s.base_rtt_ns() * NS, 3 * drain), from_us);
        let burst_delay = from_us(cfg.burst_delay_us);
        let mut bursts = vec![Burst::No; workload.flows.len()];
        for &f in &workload.bursts {
            bursts[f as usize] = Burst::Due;
        }
        Some(PcnWorld {
            threshold,
            fallback,
            burst_delay,
            packet_bytes: cfg.packet_bytes,
            // a lease of twice the fallback and the delay: the burst follows its ACK
            // within the fallback, and its own delay after that
            regs: vec![PcnRegister::new(initial, 2 * (fallback + burst_delay)); ports],
            applied: vec![initial; ports],
            tags: Vec::new(),
            bursts,
            stats: PcnStats {
                initial_threshold: initial,
                pcn_threshold: threshold,
                fallback_ns: fallback / NS,
                ..Default::default()
            },
        })
    }

    fn tag(&mut self, id: PktId, mark: Option<PcnMark>) {
        let i = id as usize;
        if i >= self.tags.len() {
            self.tags.resize(i + 1, None);
        }
        self.tags[i] = mark;
    }

    fn mark_of(&self, id: PktId) -> Option<PcnMark> {
        self.tags.get(id as usize).copied().flatten()
    }

    pub fn stats(&self) -> PcnStats {
        let mut s = self.stats;
        for r in &self.regs {
            s.port_starts += r.counters.starts;
            s.port_bursts += r.counters.bursts;
            s.port_lease_expiries += r.counters.lease_expiries;
            s.ports_lowered_at_end += (r.pending() > 0) as u64;
        }
        s
    }
}

impl Simulation {
    /// A flow is due to start: a burst is announced first (true: the caller must not
    /// start it now), a fallback timer releases a burst still waiting for its ACK.
    #[cold]
    #[inline(never)]
    pub(super) fn pcn_gate(&mut self, f: u32) -> bool {
        let Some(pcn) = self.pcn.as_mut() else {
            return false;
        };
        match pcn.bursts[f as usize] {
            Burst::No => false,
            Burst::Due => {
                pcn.bursts[f as usize] = Burst::Waiting { since: self.now };
                pcn.stats.starts_sent += 1;
                let (bytes, fallback, threshold) = (pcn.packet_bytes, pcn.fallback, pcn.threshold);
                let spec = &self.workload.flows[f as usize];
                let p = Packet::ctrl(PacketKind::Ctrl(CtrlOp::Start), f, spec.src, spec.dst, 0, bytes);
                self.send_marked(p, PcnMark::Start { threshold });
                self.events.push(self.now + fallback, Target::FlowStart(f));
                true
            }
            Burst::Waiting { since } => {
                // the fallback fired before any ACK
                pcn.stats.released_by_fallback += 1;
                pcn.stats.waited_ns += (self.now - since) / NS;
                pcn.bursts[f as usize] = Burst::MarkNext;
                false
            }
            // the delayed start after the ACK (a fallback timer firing earlier is ignored)
            Burst::Acked { since, at } if self.now >= at => {
                pcn.stats.waited_ns += (self.now - since) / NS;
                pcn.bursts[f as usize] = Burst::MarkNext;
                false
            }
            Burst::Acked { .. } => true,
            // a fallback timer left behind by an ACK that came first
            Burst::MarkNext | Burst::Started => true,
        }
    }

    fn send_marked(&mut self, mut p: Packet, mark: PcnMark) {
        p.sent_at = self.now;
        self.counts.sent += 1;
        let tag = self.flow_packet_sent(p.flow);
        let id = self.fabric.packets.alloc(p, tag);
        self.pcn.as_mut().expect("pcn is on").tag(id, Some(mark));
        self.forward(p.src, Hdr::of(id, &p));
    }

    /// A host sends packet `id` of flow `flow`: tag it (the burst's first packet carries
    /// the burst mark; everything else is unmarked).
    #[cold]
    #[inline(never)]
    pub(super) fn pcn_on_send(&mut self, id: PktId, flow: u32) {
        let Some(pcn) = self.pcn.as_mut() else { return };
        let mark = match pcn.bursts.get(flow as usize) {
            Some(Burst::MarkNext) => {
                pcn.bursts[flow as usize] = Burst::Started;
                Some(PcnMark::Burst)
            }
            _ => None,
        };
        pcn.tag(id, mark);
    }

    /// A packet is offered to `port`: a switch port's register sees its mark and its lease
    /// expiry, and the port's ECN threshold follows the register.
    #[cold]
    #[inline(never)]
    pub(super) fn pcn_at_port(&mut self, port: PortId, id: PktId) {
        let Some(pcn) = self.pcn.as_mut() else { return };
        let pr = &mut self.fabric.ports[port as usize];
        if self.topo.nodes[pr.from as usize].kind != NodeKind::Switch {
            return;
        }
        let mark = pcn.mark_of(id);
        let reg = &mut pcn.regs[port as usize];
        reg.handle_timeout(self.now);
        if let Some(mark) = mark {
            reg.on_mark(mark, self.now);
        }
        let th = reg.threshold();
        if th != pcn.applied[port as usize] {
            pcn.applied[port as usize] = th;
            pr.queue.set_ecn_threshold(th);
        }
    }

    /// A START or ACK reached `host` (true: consumed; data, burst-marked or not, goes on
    /// to its endpoint).
    #[cold]
    #[inline(never)]
    pub(super) fn pcn_receive(&mut self, host: NodeId, id: PktId, p: &Packet) -> bool {
        let Some(pcn) = self.pcn.as_mut() else {
            return false;
        };
        match pcn.mark_of(id) {
            Some(mark @ PcnMark::Start { .. }) if p.dst == host => {
                pcn.stats.acks_sent += 1;
                let ack = Packet::ctrl(PacketKind::CtrlAck(CtrlOp::Start), p.flow, host, p.src, 0, pcn.packet_bytes);
                self.send_marked(ack, mark.ack_for().expect("a START has an ACK"));
                true
            }
            Some(PcnMark::Ack { .. }) => {
                let f = p.flow;
                if let Some(&Burst::Waiting { since }) = pcn.bursts.get(f as usize) {
                    pcn.stats.released_by_ack += 1;
                    if pcn.burst_delay == 0 {
                        pcn.stats.waited_ns += (self.now - since) / NS;
                        pcn.bursts[f as usize] = Burst::MarkNext;
                        self.launch_flow(f);
                    } else {
                        let at = self.now + pcn.burst_delay;
                        pcn.bursts[f as usize] = Burst::Acked { since, at };
                        self.events.push(at, Target::FlowStart(f));
                    }
                }
                true
            }
            Some(PcnMark::Start { .. }) => true,
            _ => false,
        }
    }

    pub fn pcn_stats(&self) -> Option<PcnStats> {
        self.pcn.as_ref().map(PcnWorld::stats)
    }
}
