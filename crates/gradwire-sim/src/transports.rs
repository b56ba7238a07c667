//! The scenario's `[transport]` as the core's transport [`Config`], and each flow as a
//! core [`Transfer`]: the core's [`Builder`] makes the endpoints of whatever transport the
//! registry holds under `transport.kind`, so the simulator names no concrete transport.

use crate::scenario::{Scenario, ScenarioError, TopologyKind, WorkloadKind};
use crate::workload::FlowSpec;
use gradwire_core::tensor::layer_queue;
use gradwire_core::time::{Time, NS};
use gradwire_core::transport::{Builder, Common, Config, ConfigError, Hosts, Pair, Transfer};

/// The element size of every simulated transfer (f32 gradients).
const ELEM_BYTES: u32 = 4;

/// The core's transport configuration a scenario describes.
pub fn config(s: &Scenario) -> Config {
    let tr = &s.transport;
    Config {
        kind: tr.kind,
        common: Common {
            mss: tr.mss_bytes,
            header_bytes: tr.header_bytes,
            ack_bytes: tr.ack_bytes,
            priority: tr.priority,
            loss_bound: tr.loss_bound,
            base_rtt: s.base_rtt_ns() * NS,
            seed: s.seed,
        },
        values: tr.keys.clone(),
    }
}

/// The core's error under the scenario key it comes from.
fn refuse(e: ConfigError) -> ScenarioError {
    let key = match e.field.as_str() {
        "" => "transport".to_string(),
        "base_rtt" => "topology.link_delay_ns".to_string(),
        f => format!("transport.{f}"),
    };
    ScenarioError::new(key, e.message)
}

/// The core's verdict on the scenario's transport, under the scenario's keys.
pub fn validate(s: &Scenario) -> Result<(), ScenarioError> {
    let builder = Builder::new(&config(s)).map_err(refuse)?;
    if builder.wants_layer_importance() {
        important_shares(s)?;
    }
    gradwire_core::transport::check_loss_bound("pull_loss_bound", s.transport.pull_loss_bound).map_err(refuse)
}

/// Builds every flow's endpoints from the core, under the scenario's transport.
pub struct EndpointFactory {
    builder: Builder,
    loss_bound: f64,
    pull_loss_bound: f64,
    /// The transport puts each flow's data in its layer's queue.
    priority_by_layer: bool,
    /// Data queues below the control queue (layer priorities).
    data_priorities: u8,
    /// Some: each layer's measured important share (`transport.importance = "median_profile"`).
    important_shares: Option<Vec<f64>>,
    idle: IdlePaths,
}

/// The round trip between two hosts with every queue empty: each link's propagation and
/// an ACK-sized packet's serialization, both ways (what a handshake on an idle network
/// measures; [`Transfer::idle_rtt`]).
struct IdlePaths {
    kind: TopologyKind,
    hosts_per_rack: u32,
    /// Fat-tree: hosts per pod.
    hosts_per_pod: u32,
    /// One direction over a host link, and over a link between switches, ps.
    host_link: Time,
    switch_link: Time,
}

impl IdlePaths {
    fn new(s: &Scenario) -> IdlePaths {
        let t = &s.topology;
        let one_way = |gbps: f64| t.link_delay_ns * NS + (s.transport.ack_bytes as f64 * 8e3 / gbps).ceil() as Time;
        let (hosts_per_rack, hosts_per_pod, host_gbps, switch_gbps) = match t.kind {
            TopologyKind::LeafSpine => (t.hosts_per_leaf, 0, t.host_link_gbps, t.uplink_gbps),
            TopologyKind::FatTree => (t.k / 2, t.k * t.k / 4, t.link_gbps, t.link_gbps),
        };
        IdlePaths {
            kind: t.kind,
            hosts_per_rack: hosts_per_rack.max(1),
            hosts_per_pod: hosts_per_pod.max(1),
            host_link: one_way(host_gbps),
            switch_link: one_way(switch_gbps),
        }
    }

    fn rtt(&self, a: u32, b: u32) -> Time {
        let switch_links = if a / self.hosts_per_rack == b / self.hosts_per_rack {
            0
        } else if self.kind == TopologyKind::LeafSpine || a / self.hosts_per_pod == b / self.hosts_per_pod {
            2
        } else {
            4
        };
        2 * (2 * self.host_link + switch_links * self.switch_link)
    }
}

/// The per-layer important shares of the scenario's DNN model.
fn important_shares(s: &Scenario) -> Result<Vec<f64>, ScenarioError> {
    const KEY: &str = "transport.importance";
    if s.workload.kind != WorkloadKind::Dnn {
        return Err(ScenarioError::new(KEY, "`median_profile` needs a DNN workload (workload.kind = \"dnn\")"));
    }
    crate::models::important_shares(&s.workload.model, KEY)
}

impl EndpointFactory {
    pub fn new(s: &Scenario) -> Result<EndpointFactory, ScenarioError> {
        validate(s)?;
        let builder = Builder::new(&config(s)).map_err(refuse)?;
        let important_shares = if builder.wants_layer_importance() { Some(important_shares(s)?) } else { None };
        Ok(EndpointFactory {
            priority_by_layer: s.transport.kind.priority_by_layer(),
            builder,
            loss_bound: s.transport.loss_bound,
            pull_loss_bound: s.transport.pull_loss_bound,
            data_priorities: s.switch.queues - 1,
            important_shares,
            idle: IdlePaths::new(s),
        })
    }

    /// The workload's flow sizes and the switch's queue count, for a transport that tunes
    /// itself to them.
    pub fn see_workload(&mut self, mut sizes: impl Iterator<Item = u64>, queues: u8) -> Result<(), ScenarioError> {
        self.builder.see_workload(&mut sizes, queues).map_err(refuse)
    }

    /// The queue of a flow's data, and the class its sender gets at its host NIC (0 =
    /// served first).
    pub fn data_class(&self, spec: &FlowSpec) -> u8 {
        if self.priority_by_layer {
            layer_queue(spec.layer, spec.layers.max(1), self.data_priorities)
        } else {
            self.builder.data_priority()
        }
    }

    /// Flow `f` as the core's transfer; `line_rate_bps` is the sender's NIC rate. PS pulls
    /// carry aggregated gradients: the tighter `pull_loss_bound`, and a reliable broadcast
    /// for the transports that close early (ltp.md §IV).
    pub fn transfer(&self, f: u32, spec: &FlowSpec, line_rate_bps: u64) -> Transfer {
        Transfer {
            flow: f,
            src: spec.src,
            dst: spec.dst,
            bytes: spec.bytes,
            loss_bound: if spec.pull { self.pull_loss_bound } else { self.loss_bound },
            loss_tolerant: !spec.pull,
            priority: self.data_class(spec),
            elem_bytes: ELEM_BYTES,
            line_rate_bps,
            important_fraction: self.important_shares.as_ref().and_then(|v| v.get(spec.layer as usize).copied()),
            idle_rtt: Some(self.idle.rtt(spec.src, spec.dst)),
        }
    }

    /// Sender and receiver of flow `f`, seeded from (and noting in) its hosts' state.
    pub fn make(&self, f: u32, spec: &FlowSpec, line_rate_bps: u64, now: Time, hosts: &mut Hosts) -> Pair {
        self.builder.build(&self.transfer(f, spec, line_rate_bps), now, hosts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::load;
    use gradwire_core::transport::EndpointEvent;
    use gradwire_core::Packet;

    /// The LT thresholds the hosts carry, per (sending host, receiving host, size).
    fn thresholds(
        hosts: &Hosts,
    ) -> std::collections::HashMap<(u32, u32, u64), gradwire_core::transport::ltp::LtThreshold> {
        let at = |dst: u32| {
            hosts
                .get(dst)
                .into_iter()
                .flat_map(move |h| h.lt_thresholds().map(move |(src, size, lt)| ((src, dst, size), lt.clone())))
        };
        (0..4).flat_map(at).collect()
    }

    fn spec(src: u32, dst: u32, bytes: u64) -> FlowSpec {
        FlowSpec {
            src,
            dst,
            bytes,
            start: 0,
            gate: None,
            layer: 0,
            layers: 1,
            pull: false,
            spread: false,
            iteration: 0,
            gate_delay: 0,
        }
    }

    /// Run a pair from host `src` to host `dst` over a lossless pipe with a fixed one-way
    /// delay until the receiver delivers; returns when.
    fn run_pair((mut s, mut r): Pair, (src, dst): (u32, u32), hosts: &mut Hosts, delay: Time) -> Time {
        let mut wire: std::collections::BTreeMap<(Time, u64), (bool, Packet)> = Default::default();
        let (mut now, mut n) = (0, 0u64);
        for _ in 0..1_000_000 {
            while let Some(p) = s.poll_transmit(now) {
                wire.insert((now + delay, n), (true, p));
                n += 1;
            }
            while let Some(p) = r.poll_transmit(now) {
                wire.insert((now + delay, n), (false, p));
                n += 1;
            }
            while let Some(ev) = s.poll_event() {
                if ev == EndpointEvent::HandOn {
                    s.hand_on(hosts.host(src));
                }
            }
            while let Some(ev) = r.poll_event() {
                match ev {
                    EndpointEvent::HandOn => r.hand_on(hosts.host(dst)),
                    EndpointEvent::Delivered { .. } => return now,
                    _ => {}
                }
            }
            let next_pkt = wire.keys().next().map(|k| k.0);
            let next = [next_pkt, s.poll_timeout(), r.poll_timeout()].into_iter().flatten().min().expect("stuck");
            now = now.max(next);
            while let Some(e) = wire.first_entry().filter(|e| e.key().0 <= now) {
                let (to_r, p) = e.remove();
                if to_r {
                    r.handle_packet(now, &p)
                } else {
                    s.handle_packet(now, &p)
                }
            }
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
            if r.poll_timeout().is_some_and(|t| t <= now) {
                r.handle_timeout(now);
            }
        }
        panic!("transfer did not finish");
    }

    #[test]
    fn the_cores_checks_answer_under_the_scenario_keys() {
        let text = "[transport]\nkind = \"dlcp\"\n[workload]\nkind = \"incast\"\nsenders = 2\nflow_bytes = 1000\n";
        let err = |ov: &str| load(text, &[ov.to_string()]).unwrap_err();
        // (key, message) of a refused override
        let refused = |ov: &str| {
            let e = err(ov);
            (e.key, e.message)
        };
        assert_eq!(
            refused("transport.loss_bound=1.5"),
            ("transport.loss_bound".into(), "1.5 is outside [0, 1]".into())
        );
        assert_eq!(err("transport.pull_loss_bound=-1").key, "transport.pull_loss_bound");
        assert_eq!(err("transport.rate_delta=0").key, "transport.rate_delta");
        assert_eq!(err("transport.important_fraction=2").key, "transport.important_fraction");
        assert_eq!(err("transport.dlcp_start_rate_frac=0").key, "transport.dlcp_start_rate_frac");
        assert_eq!(
            refused("transport.dlcp_rate_restart_us=0"),
            ("transport.dlcp_rate_restart_us".into(), "must be positive".into())
        );
        assert_eq!(err("transport.dlcp_rate_restart_us=-5").key, "transport.dlcp_rate_restart_us");
        assert_eq!(
            refused("transport.dlcp_share_headroom=0"),
            ("transport.dlcp_share_headroom".into(), "must be a positive number (got 0)".into())
        );
        let e = err("transport.dlcp_rate_hint=sender");
        assert_eq!(e.key, "transport.dlcp_rate_hint");
        assert!(e.message.contains("unknown variant `sender`") && e.message.contains("receiver_share"), "{e}");
        assert_eq!(err("transport.dctcp_g=0").key, "transport.dctcp_g");
        assert_eq!(err("transport.pias_thresholds=[5, 3]").key, "transport.pias_thresholds");
        assert_eq!(
            refused("transport.rto_min_us=-5"),
            ("transport.rto_min_us".into(), "must be a positive number (got -5)".into())
        );
        // what every kind leaves unread is refused all the same: a sweep over kinds stays valid
        assert_eq!(
            load(text, &["transport.kind=dctcp".into(), "transport.rate_delta=0".into()]).unwrap_err().key,
            "transport.rate_delta"
        );
        let e = err("transport.kind=tcp");
        assert!(e.message.contains("unknown variant `tcp`") && e.message.contains("pfabric"), "{e}");
    }

    #[test]
    fn median_profile_importance_gives_each_layer_its_measured_share() {
        let text = "[transport]\nkind = \"dlcp\"\n[workload]\nkind = \"dnn\"\nmodel = \"resnet50\"\nworkers = 4\nservers = 1\n";
        let median = ["transport.importance=median_profile".to_string()];
        let s = &load(text, &median).unwrap()[0].scenario;
        let shares = crate::models::important_shares("resnet50", "k").unwrap();
        let f = EndpointFactory::new(s).unwrap();
        for layer in [0, 5, 106] {
            let spec = FlowSpec { layer, layers: 107, ..spec(0, 1, 1000) };
            assert_eq!(f.transfer(0, &spec, 1).important_fraction, Some(shares[layer as usize]));
        }
        assert!(shares.iter().any(|&x| x != shares[0]), "the shares differ per layer");
        // `fixed` (the default) leaves it to `important_fraction`
        let s = &load(text, &[]).unwrap()[0].scenario;
        assert_eq!(EndpointFactory::new(s).unwrap().transfer(0, &spec(0, 1, 1000), 1).important_fraction, None);
        // a workload without layers, a model without a profile: refused under the key
        let incast = "[transport]\nkind = \"dlcp\"\n[workload]\nkind = \"incast\"\nsenders = 2\nflow_bytes = 1000\n";
        assert_eq!(load(incast, &median).unwrap_err().key, "transport.importance");
        let e = load(text, &[median[0].clone(), "workload.model=vgg16".into()]).unwrap_err();
        assert!(e.key == "transport.importance" && e.message.contains("no gradient-magnitude profile"), "{e}");
    }

    #[test]
    fn a_transfers_idle_rtt_counts_the_links_of_its_path_both_ways() {
        // k = 4 fat-tree: 2 hosts per rack, 4 per pod; 1 us links at 100 G, 40-byte ACKs
        // (3.2 ns each); a leaf-spine crosses 2 switch links between racks, at their rate.
        let ft = "[topology]\nkind = \"fat_tree\"\nk = 4\nlink_delay_ns = 1000\n[workload]\nkind = \"incast\"\nsenders = 2\nflow_bytes = 1000\n";
        let f = EndpointFactory::new(&load(ft, &[]).unwrap()[0].scenario).unwrap();
        let rtt = |f: &EndpointFactory, a, b| f.transfer(0, &spec(a, b, 1000), 1).idle_rtt.unwrap();
        let link = 1000 * NS + 3200;
        assert_eq!([rtt(&f, 0, 1), rtt(&f, 0, 2), rtt(&f, 0, 4)], [4 * link, 8 * link, 12 * link]);
        let ls = "[topology]\nleaves = 2\nspines = 1\nuplinks_per_leaf = 1\nhosts_per_leaf = 2\nlink_delay_ns = 1000\n\
                  uplink_gbps = 400.0\n[workload]\nkind = \"incast\"\nsenders = 2\nflow_bytes = 1000\n";
        let f = EndpointFactory::new(&load(ls, &[]).unwrap()[0].scenario).unwrap();
        assert_eq!([rtt(&f, 0, 1), rtt(&f, 0, 2)], [4 * link, 4 * link + 4 * (1000 * NS + 800)]);
    }

    #[test]
    fn ltp_lt_state_is_carried_per_link_and_size() {
        let text = "[topology]\nleaves = 1\nspines = 1\nuplinks_per_leaf = 1\nhosts_per_leaf = 4\n\
                    [transport]\nkind = \"ltp\"\n[workload]\nkind = \"incast\"\nsenders = 2\nflow_bytes = 100000\n";
        let s = &load(text, &[]).unwrap()[0].scenario;
        let fac = EndpointFactory::new(s).unwrap();
        let line = 100_000_000_000;
        let mut hosts = Hosts::new();
        let run = |f, spec: FlowSpec, delay, hosts: &mut Hosts| {
            let pair = fac.make(f, &spec, line, 0, hosts);
            run_pair(pair, (spec.src, spec.dst), hosts, delay)
        };
        assert!(thresholds(&hosts).is_empty());
        let d = run(0, spec(1, 0, 100_000), 5 * NS * 1000, &mut hosts);
        let states = thresholds(&hosts);
        assert_eq!(states.len(), 1);
        let lt = &states[&(1, 0, 100_000)];
        // the complete transfer's duration (from its first packet) is the link's threshold now
        let (size, shortest) = lt.shortest_complete().expect("a complete transfer is recorded");
        assert_eq!(size, 100_000);
        assert!(shortest > 0 && shortest <= d, "{shortest} vs delivered at {d}");
        // another link, another size: their own entries; the first one is left alone
        run(1, spec(2, 0, 100_000), 5 * NS * 1000, &mut hosts);
        run(2, spec(1, 0, 50_000), 5 * NS * 1000, &mut hosts);
        let states = thresholds(&hosts);
        assert_eq!(states.len(), 3);
        assert_eq!(states[&(1, 0, 100_000)].shortest_complete(), Some((size, shortest)));
        // the next transfer on the first link starts from the carried state, and a slower
        // run (longer delay) does not raise the shortest
        run(3, spec(1, 0, 100_000), 50 * NS * 1000, &mut hosts);
        assert_eq!(thresholds(&hosts)[&(1, 0, 100_000)].shortest_complete(), Some((size, shortest)));
        // without the carried state the slow run starts from the formula again (and, past
        // that threshold with 90 % in, closes early: nothing complete to record)
        hosts.forget();
        run(4, spec(1, 0, 100_000), 50 * NS * 1000, &mut hosts);
        assert_eq!(thresholds(&hosts)[&(1, 0, 100_000)].shortest_complete(), None);
    }

    #[test]
    fn a_lost_syn_waits_for_the_connection_timeout_in_the_simulator() {
        // one-packet flows over lossy links: a flow whose SYN or SYN-ACK is lost takes the
        // 20 ms connection timeout, one whose data is lost the 1 ms RTO (SACK-less TCP
        // without delayed ACKs, whose single-segment flows are ACKed at once; a SYN lost
        // five times would outlast the run)
        let flows: Vec<String> = (0..40)
            .map(|i| format!("{{src = 0, dst = {}, bytes = 1460, start_us = {}}}", 1 + i % 3, i as f64))
            .collect();
        let text = format!(
            "stop_ms = 500\nbaseline = \"sackless\"\n[topology]\nleaves = 1\nspines = 1\nhosts_per_leaf = 4\nlink_delay_ns = 1000\n\
             link_loss_rate = 0.15\n[transport]\nkind = \"dctcp\"\nrto_min_us = 1000.0\ntcp_handshake = true\n\
             tcp_conn_timeout_us = 20000.0\n[workload]\nkind = \"flows\"\nflows = [{}]\n",
            flows.join(", ")
        );
        let s = &load(&text, &[]).unwrap()[0].scenario;
        let mut sim = crate::sim::Simulation::new(s).unwrap();
        sim.run();
        assert!(sim.conservation().holds());
        let fct: Vec<u64> = sim.flow_states().map(|f| f.finished().unwrap() - f.started().unwrap()).collect();
        let waited = fct.iter().filter(|&&t| t >= 20 * gradwire_core::time::MS).count();
        let quick = fct.iter().filter(|&&t| t < gradwire_core::time::MS).count();
        assert!(waited > 0 && quick > waited, "{fct:?}");
        // without the handshake the same losses cost at most RTOs of 1 ms (doubling)
        let s = &load(&text.replace("tcp_handshake = true", "tcp_handshake = false"), &[]).unwrap()[0].scenario;
        let mut sim = crate::sim::Simulation::new(s).unwrap();
        sim.run();
        assert!(sim.flow_states().all(|f| f.finished().unwrap() - f.started().unwrap() < 20 * gradwire_core::time::MS));
    }
}
