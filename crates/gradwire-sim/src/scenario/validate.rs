//! Checks serde cannot express: ranges, cross-field requirements, hosts in range.

use super::*;

impl Scenario {
    /// `fast.cover`: every sample of a fast run, whose flows are merged (nothing else is).
    fn check_cover(&self) -> Result<(), ScenarioError> {
        if self.fidelity.is_packet() {
            return Err(ScenarioError::new("fast.cover", "covers the samples of fidelity = \"fast\"; set it too"));
        }
        if self.fast.offset != 0 {
            return Err(ScenarioError::new(
                "fast.offset",
                format!("picks one sample, and fast.cover runs them all (got {})", self.fast.offset),
            ));
        }
        let o = &self.output;
        for (key, on) in [
            ("output.queue_ports", !o.queue_ports.is_empty()),
            ("output.counter_ports", !o.counter_ports.is_empty()),
            ("output.link_bytes", o.link_bytes),
        ] {
            if on {
                return Err(ScenarioError::new(
                    key,
                    "is per port, and each sample of fast.cover loads the ports differently; \
                     run one sample (fast.offset) or fidelity = \"packet\"",
                ));
            }
        }
        Ok(())
    }

    /// Checks serde cannot express: ranges, cross-field requirements.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        positive("stop_ms", self.stop_ms)?;
        if self.stop_ms > 1_000_000.0 {
            return Err(ScenarioError::new(
                "stop_ms",
                format!("must be at most 1000000 (1000 s of simulated time; got {})", self.stop_ms),
            ));
        }
        if !(1..=64).contains(&self.threads) {
            return Err(ScenarioError::new("threads", format!("must be 1..=64 (got {})", self.threads)));
        }
        if let Some(tau) = self.fast.phantom_tau_us {
            positive("fast.phantom_tau_us", tau)?;
        }
        if self.fast.cover {
            self.check_cover()?;
        }
        let t = &self.topology;
        match t.kind {
            TopologyKind::LeafSpine => {
                nonzero("topology.spines", t.spines)?;
                nonzero("topology.leaves", t.leaves)?;
                nonzero("topology.hosts_per_leaf", t.hosts_per_leaf)?;
                nonzero("topology.uplinks_per_leaf", t.uplinks_per_leaf)?;
                positive("topology.host_link_gbps", t.host_link_gbps)?;
                positive("topology.uplink_gbps", t.uplink_gbps)?;
            }
            TopologyKind::FatTree => {
                if t.k < 2 || !t.k.is_multiple_of(2) {
                    return Err(ScenarioError::new("topology.k", format!("must be an even number >= 2 (got {})", t.k)));
                }
                positive("topology.link_gbps", t.link_gbps)?;
            }
        }
        if !(0.0..1.0).contains(&t.link_loss_rate) {
            return Err(ScenarioError::new(
                "topology.link_loss_rate",
                format!("must be in [0, 1) (got {})", t.link_loss_rate),
            ));
        }
        let share = self.host.nic_rate_share;
        if !(share > 0.0 && share <= 1.0) {
            return Err(ScenarioError::new("host.nic_rate_share", format!("must be in (0, 1] (got {share})")));
        }
        let s = &self.switch;
        nonzero("switch.buffer_bytes", s.buffer_bytes)?;
        positive("switch.dt_alpha", s.dt_alpha)?;
        if !(1..=8).contains(&s.queues) {
            return Err(ScenarioError::new("switch.queues", format!("must be 1..=8 (got {})", s.queues)));
        }
        let tr = &self.transport;
        // the fabric carries a packet's wire size in 16 bits (`fabric::Hdr`), like IPv4
        for (key, v) in [
            ("transport.mss_bytes", tr.mss_bytes as u64 + tr.header_bytes as u64),
            ("transport.ack_bytes", tr.ack_bytes as u64),
        ] {
            if v > u16::MAX as u64 {
                return Err(ScenarioError::new(
                    key,
                    format!("a packet may be at most 65535 bytes on the wire (got {v})"),
                ));
            }
        }
        // the transport's own ranges: the core's checks, under the scenario's keys
        crate::transports::validate(self)?;
        if !(s.dlcp_d.is_finite() && s.dlcp_d >= 0.0) {
            return Err(ScenarioError::new("switch.dlcp_d", format!("must be >= 0 (got {})", s.dlcp_d)));
        }
        if tr.kind.places_payload() && s.queues < 2 {
            return Err(ScenarioError::new(
                "switch.queues",
                format!("{} needs at least 2 queues (control + data)", tr.kind),
            ));
        }
        if tr.priority >= s.queues {
            return Err(ScenarioError::new(
                "transport.priority",
                format!("must be below switch.queues = {} (got {})", s.queues, tr.priority),
            ));
        }
        nonnegative("workload.start_us", self.workload.start_us)?;
        nonnegative("workload.start_jitter_us", self.workload.start_jitter_us)?;
        nonzero("output.queue_sample_ns", self.output.queue_sample_ns)?;
        for (i, f) in self.failures.iter().enumerate() {
            nonnegative(&format!("failures.{i}.at_us"), f.at_us)?;
            if f.link.is_some() == f.node.is_some() {
                return Err(ScenarioError::new(format!("failures.{i}"), "needs exactly one of `link` or `node`"));
            }
            if let Some(p) = f.pause_us {
                positive(&format!("failures.{i}.pause_us"), p)?;
            }
        }
        self.validate_pauses()?;
        self.validate_pcn()?;
        self.validate_workload()
    }

    /// Propagation round trip across the widest path (leaf-spine: 4 links each way;
    /// fat-tree: 6), used to default RTT-scaled parameters.
    pub fn base_rtt_ns(&self) -> u64 {
        let t = &self.topology;
        let hops = match t.kind {
            TopologyKind::LeafSpine => 4,
            TopologyKind::FatTree => 6,
        };
        2 * hops * t.link_delay_ns
    }

    /// Hosts in the topology (needed to range-check workloads).
    pub fn host_count(&self) -> u32 {
        let t = &self.topology;
        match t.kind {
            TopologyKind::LeafSpine => t.leaves * t.hosts_per_leaf,
            TopologyKind::FatTree => t.k * t.k * t.k / 4,
        }
    }

    fn validate_pcn(&self) -> Result<(), ScenarioError> {
        let p = &self.pcn;
        if !p.enabled {
            return Ok(());
        }
        if !(p.k.is_finite() && p.k > 0.0 && p.k <= 1.0) {
            return Err(ScenarioError::new("pcn.k", format!("must be in (0, 1] (got {})", p.k)));
        }
        nonzero("pcn.long_flows", p.long_flows as u64)?;
        if let Some(t) = p.threshold {
            gradwire_core::switch::PcnMark::Start { threshold: t }
                .encode()
                .map_err(|e| ScenarioError::new("pcn.threshold", e.to_string()))?;
        }
        for (key, v) in [("pcn.rtt_us", p.rtt_us), ("pcn.fallback_us", p.fallback_us)] {
            if let Some(v) = v {
                positive(key, v)?;
            }
        }
        nonzero("pcn.packet_bytes", p.packet_bytes as u64)?;
        nonnegative("pcn.burst_delay_us", p.burst_delay_us)?;
        if self.switch.ecn_threshold_packets == 0 {
            return Err(ScenarioError::new(
                "switch.ecn_threshold_packets",
                "PCN lowers the ECN threshold: it must be on (> 0)",
            ));
        }
        if self.workload.kind != WorkloadKind::Ddlgen {
            return Err(ScenarioError::new("pcn.enabled", "PCN announces the bursts of workload.kind = \"ddlgen\""));
        }
        Ok(())
    }

    fn validate_pauses(&self) -> Result<(), ScenarioError> {
        let p = &self.pauses;
        if p.hosts == 0 {
            return Ok(());
        }
        positive("pauses.period_us", p.period_us)?;
        nonnegative("pauses.start_us", p.start_us)?;
        if let Some(d) = p.duration_us {
            positive("pauses.duration_us", d)?;
            if d > p.period_us {
                return Err(ScenarioError::new(
                    "pauses.duration_us",
                    format!(
                        "must be at most pauses.period_us = {} (got {d}): a set is paused until the next draw at most",
                        p.period_us
                    ),
                ));
            }
        }
        if let Some(s) = p.stop_us {
            nonnegative("pauses.stop_us", s)?;
        }
        if p.hold == PauseHold::Data && self.host.nic != NicDiscipline::RoundRobin {
            return Err(ScenarioError::new(
                "pauses.hold",
                "`data` keeps a paused host's senders out of its NIC's round robin; with host.nic = \"fifo\" or \"flow_queues\" use `all`",
            ));
        }
        let n = self.host_count();
        let candidates = match &p.among {
            Some(list) => {
                for (i, &h) in list.iter().enumerate() {
                    if h >= n {
                        return Err(ScenarioError::new(
                            format!("pauses.among.{i}"),
                            format!("host {h} is out of range: the topology has {n} hosts (0..{n})"),
                        ));
                    }
                    if list[..i].contains(&h) {
                        return Err(ScenarioError::new(
                            format!("pauses.among.{i}"),
                            format!("host {h} is listed twice"),
                        ));
                    }
                }
                list.len() as u32
            }
            None => n,
        };
        if p.hosts > candidates {
            return Err(ScenarioError::new(
                "pauses.hosts",
                format!("cannot pause {} of {candidates} candidate hosts", p.hosts),
            ));
        }
        Ok(())
    }

    fn validate_workload(&self) -> Result<(), ScenarioError> {
        let w = &self.workload;
        let n = self.host_count();
        let host = |key: &str, h: u32| {
            if h < n {
                Ok(())
            } else {
                Err(ScenarioError::new(key, format!("host {h} is out of range: the topology has {n} hosts (0..{n})")))
            }
        };
        // One of `workload.flows`: two distinct hosts, a start time.
        let flow = |i: usize, f: &FlowCfg| {
            host(&format!("workload.flows.{i}.src"), f.src)?;
            host(&format!("workload.flows.{i}.dst"), f.dst)?;
            if f.src == f.dst {
                return Err(ScenarioError::new(format!("workload.flows.{i}.dst"), "equals src"));
            }
            nonnegative(&format!("workload.flows.{i}.start_us"), f.start_us)
        };
        match w.kind {
            WorkloadKind::Flows => {
                if w.flows.is_empty() {
                    return Err(ScenarioError::new("workload.flows", "is empty: list at least one flow"));
                }
                for (i, f) in w.flows.iter().enumerate() {
                    flow(i, f)?;
                    for &a in &f.after {
                        if a as usize >= i {
                            return Err(ScenarioError::new(
                                format!("workload.flows.{i}.after"),
                                format!("flow {a} must come earlier in the list than flow {i}"),
                            ));
                        }
                    }
                }
            }
            WorkloadKind::Incast => {
                host("workload.receiver", w.receiver)?;
                nonzero("workload.flow_bytes", w.flow_bytes)?;
                match (&w.senders, &w.sender_list) {
                    (Some(_), Some(_)) | (None, None) => {
                        return Err(ScenarioError::new(
                            "workload.senders",
                            "give exactly one of `senders` or `sender_list`",
                        ))
                    }
                    (Some(c), None) => {
                        if *c == 0 || *c >= n {
                            return Err(ScenarioError::new(
                                "workload.senders",
                                format!("must be 1..{} for {n} hosts (got {c})", n - 1),
                            ));
                        }
                    }
                    (None, Some(list)) => {
                        for (i, &h) in list.iter().enumerate() {
                            host(&format!("workload.sender_list.{i}"), h)?;
                            if h == w.receiver {
                                return Err(ScenarioError::new(format!("workload.sender_list.{i}"), "is the receiver"));
                            }
                        }
                    }
                }
            }
            WorkloadKind::Permutation => nonzero("workload.flow_bytes", w.flow_bytes)?,
            WorkloadKind::AllToAll => {
                nonzero("workload.flow_bytes", w.flow_bytes)?;
                if let Some(hosts) = &w.hosts {
                    for (i, &h) in hosts.iter().enumerate() {
                        host(&format!("workload.hosts.{i}"), h)?;
                    }
                }
            }
            WorkloadKind::Dnn => {
                crate::models::load(&w.model)?;
                nonzero("workload.iterations", w.iterations as u64)?;
                nonzero("workload.workers", w.workers as u64)?;
                if w.pattern == DnnPattern::Ps {
                    nonzero("workload.servers", w.servers as u64)?;
                }
                let hosts_needed =
                    if w.colocated || w.pattern == DnnPattern::Ring { w.workers } else { w.workers + w.servers };
                ps_hosts_fit(w, hosts_needed, n)?;
            }
            WorkloadKind::Collective => crate::workload::collective::validate(self)?,
            WorkloadKind::Ddlgen => {
                host("workload.receiver", w.receiver)?;
                nonzero("workload.flow_bytes", w.flow_bytes)?;
                nonzero("workload.iterations", w.iterations as u64)?;
                nonnegative("workload.idle_us", w.idle_us)?;
                nonnegative("workload.idle_jitter_us", w.idle_jitter_us)?;
                let list = w.sender_list.as_deref().unwrap_or_default();
                if list.is_empty() {
                    return Err(ScenarioError::new("workload.sender_list", "list the worker hosts"));
                }
                for (i, &h) in list.iter().enumerate() {
                    host(&format!("workload.sender_list.{i}"), h)?;
                    if h == w.receiver {
                        return Err(ScenarioError::new(format!("workload.sender_list.{i}"), "is the receiver"));
                    }
                }
                for (i, f) in w.flows.iter().enumerate() {
                    flow(i, f)?;
                }
            }
            WorkloadKind::Ps => {
                nonzero("workload.workers", w.workers as u64)?;
                nonzero("workload.servers", w.servers as u64)?;
                nonzero("workload.push_bytes", w.push_bytes)?;
                let hosts_needed = if w.colocated { w.workers } else { w.workers + w.servers };
                ps_hosts_fit(w, hosts_needed, n)?;
            }
        }
        Ok(())
    }
}

/// A job needing `hosts_needed` hosts fits the topology's `n`, and colocated servers each
/// share a host with a worker.
fn ps_hosts_fit(w: &WorkloadCfg, hosts_needed: u32, n: u32) -> Result<(), ScenarioError> {
    if hosts_needed > n {
        return Err(ScenarioError::new(
            "workload.workers",
            format!("{hosts_needed} hosts needed but the topology has {n}"),
        ));
    }
    if w.colocated && w.servers > w.workers {
        return Err(ScenarioError::new(
            "workload.servers",
            format!("colocated servers ({}) cannot outnumber workers ({})", w.servers, w.workers),
        ));
    }
    Ok(())
}

fn positive(key: &str, v: f64) -> Result<(), ScenarioError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(ScenarioError::new(key, format!("must be a positive number (got {v})")))
    }
}

fn nonnegative(key: &str, v: f64) -> Result<(), ScenarioError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(ScenarioError::new(key, format!("must be >= 0 (got {v})")))
    }
}

fn nonzero(key: &str, v: impl Into<u64>) -> Result<(), ScenarioError> {
    let v = v.into();
    if v > 0 {
        Ok(())
    } else {
        Err(ScenarioError::new(key, "must be greater than 0 (got 0)"))
    }
}
