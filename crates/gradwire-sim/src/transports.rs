//! The scenario's `[transport]` as the core's transport [`Params`], and each flow as a
//! core [`Transfer`]: the core's [`Builder`] makes the endpoints, so the simulator names no
//! concrete transport.

use crate::scenario::{
    DlcpImportance, DlcpRateHint, DlcpRateState, Scenario, ScenarioError, TcpCc, TcpConnections, TcpSlowStart,
    WorkloadKind,
};
use crate::workload::FlowSpec;
use gradwire_core::tensor::layer_queue;
use gradwire_core::time::{from_us, Time, NS};
use gradwire_core::transport::dlcp::{DlcpConfig, Importance, RateHint};
use gradwire_core::transport::ltp::LtpConfig;
use gradwire_core::transport::tcp::{DelayedAck, TcpConfig};
use gradwire_core::transport::{Builder, Carry, ConfigError, Pair, Params, Transfer};

/// The core's transport parameters a scenario describes.
pub fn params(s: &Scenario) -> Params {
    let tr = &s.transport;
    Params {
        kind: tr.kind,
        tcp: TcpConfig {
            mss: tr.mss_bytes,
            header_bytes: tr.header_bytes,
            ack_bytes: tr.ack_bytes,
            init_cwnd_packets: tr.init_cwnd_packets,
            rto_min: from_us(tr.rto_min_us),
            rto_max: from_us(tr.rto_max_us),
            rto_initial: from_us(tr.rto_initial_us.unwrap_or(tr.rto_min_us)),
            dupack_threshold: tr.dupack_threshold,
            priority: tr.priority,
            sack: tr.tcp_sack,
            rack_tlp: tr.tcp_rack_tlp,
            partial_ack_resend: tr.tcp_partial_ack_resend,
            delayed_ack: DelayedAck { count: tr.tcp_delack_count, timeout: from_us(tr.tcp_delack_timeout_us) },
            slow_start_per_ack: tr.tcp_slow_start == TcpSlowStart::PerAck,
            ..TcpConfig::default()
        },
        tcp_cubic: tr.tcp_cc == TcpCc::Cubic,
        dctcp_g: tr.dctcp_g,
        newreno_ecn: tr.newreno_ecn,
        pias_thresholds: tr.pias_thresholds.clone(),
        pfabric_rto: tr.pfabric_rto_us.map(from_us),
        base_rtt: s.base_rtt_ns() * NS,
        dlcp: DlcpConfig {
            mss: tr.mss_bytes,
            header_bytes: tr.header_bytes,
            ctrl_bytes: tr.ack_bytes,
            loss_bound: tr.loss_bound,
            rate_period: from_us(tr.rate_period_us),
            delta: tr.rate_delta,
            additive_increase_frac: tr.rate_increase_frac,
            ctrl_priority: 0,
            importance: Importance::Fraction { fraction: tr.important_fraction, seed: s.seed },
            ctrl_rto: from_us(tr.ctrl_rto_us),
            resend_at_line_rate: tr.dlcp_resend_at_line_rate,
            retx_quiet: from_us(tr.dlcp_retx_quiet_us),
            stop_behind_data: tr.dlcp_stop_behind_data,
            start_rate_frac: tr.dlcp_start_rate_frac,
            rate_restart: tr.dlcp_rate_restart_us.map(from_us),
            rate_hint: match tr.dlcp_rate_hint {
                DlcpRateHint::None => RateHint::None,
                DlcpRateHint::ReceiverShare => RateHint::ReceiverShare,
            },
            share_headroom: tr.dlcp_share_headroom,
            ..DlcpConfig::default()
        },
        ltp: LtpConfig {
            mss: tr.mss_bytes,
            header_bytes: tr.header_bytes,
            ack_bytes: tr.ack_bytes,
            ctrl_bytes: tr.ack_bytes,
            loss_bound: tr.loss_bound,
            lt_c: from_us(tr.ltp_c_ms * 1000.0),
            initial_rtprop: s.base_rtt_ns() * NS,
            ctrl_rto: from_us(tr.ctrl_rto_us),
            ..LtpConfig::default()
        },
        // LTP's thresholds always live per link (ltp.md §III-B1); DLCP's rate state per
        // tensor unless the scenario asks for a deviation.
        carry: Carry {
            dlcp_rate: tr.dlcp_rate_state != DlcpRateState::Tensor,
            dlcp_rate_shared: matches!(
                tr.dlcp_rate_state,
                DlcpRateState::PairShared | DlcpRateState::PairPriority | DlcpRateState::PairStrict
            ),
            dlcp_rate_by_priority: tr.dlcp_rate_state == DlcpRateState::PairPriority,
            dlcp_rate_strict: tr.dlcp_rate_state == DlcpRateState::PairStrict,
            ltp_threshold: true,
            tcp_connection: tr.tcp_connections == TcpConnections::Persistent,
        },
    }
}

/// The scenario key a core parameter comes from.
fn scenario_key(field: &str) -> &'static str {
    match field.rsplit('.').next().unwrap_or(field) {
        "mss" | "elem_bytes" => "transport.mss_bytes",
        "loss_bound" => "transport.loss_bound",
        "init_cwnd_packets" => "transport.init_cwnd_packets",
        "dupack_threshold" => "transport.dupack_threshold",
        "delayed_ack.count" | "count" => "transport.tcp_delack_count",
        "delayed_ack.timeout" | "timeout" => "transport.tcp_delack_timeout_us",
        "rack_tlp" => "transport.tcp_rack_tlp",
        "rto_min" => "transport.rto_min_us",
        "rto_max" => "transport.rto_max_us",
        "rto_initial" => "transport.rto_initial_us",
        "dctcp_g" => "transport.dctcp_g",
        "pias_thresholds" => "transport.pias_thresholds",
        "pfabric_rto" => "transport.pfabric_rto_us",
        "rate_period" => "transport.rate_period_us",
        "delta" => "transport.rate_delta",
        "additive_increase_frac" => "transport.rate_increase_frac",
        "importance" => "transport.important_fraction",
        "start_rate_frac" => "transport.dlcp_start_rate_frac",
        "rate_restart" => "transport.dlcp_rate_restart_us",
        "share_headroom" => "transport.dlcp_share_headroom",
        "ctrl_rto" => "transport.ctrl_rto_us",
        "lt_c" => "transport.ltp_c_ms",
        "initial_rtprop" => "topology.link_delay_ns",
        _ => "transport",
    }
}

/// The core's verdict on the scenario's transport, under the scenario's keys.
pub fn validate(s: &Scenario) -> Result<(), ScenarioError> {
    let refuse = |e: ConfigError| ScenarioError::new(scenario_key(&e.field), e.message);
    params(s).validate().map_err(refuse)?;
    important_shares(s)?;
    gradwire_core::transport::check_loss_bound("pull_loss_bound", s.transport.pull_loss_bound)
        .map_err(|e| ScenarioError::new("transport.pull_loss_bound", e.message))
}

/// Builds every flow's endpoints from the core, under the scenario's transport.
pub struct EndpointFactory {
    builder: Builder,
    loss_bound: f64,
    pull_loss_bound: f64,
    /// Data queues below the control queue (DLCP's layer priorities).
    data_priorities: u8,
    /// Some: TCP-based flows open their connections first (`crate::baselines`).
    handshakes: Option<crate::baselines::Handshakes>,
    /// Some (`transport.importance = "median_profile"`): DLCP's important share per layer.
    important_shares: Option<Vec<f64>>,
}

/// The per-layer important shares `transport.importance` asks for (None: `fixed`).
fn important_shares(s: &Scenario) -> Result<Option<Vec<f64>>, ScenarioError> {
    const KEY: &str = "transport.importance";
    match s.transport.importance {
        DlcpImportance::Fixed => Ok(None),
        DlcpImportance::MedianProfile if s.workload.kind != WorkloadKind::Dnn => {
            Err(ScenarioError::new(KEY, "`median_profile` needs a DNN workload (workload.kind = \"dnn\")"))
        }
        DlcpImportance::MedianProfile => crate::models::important_shares(&s.workload.model, KEY).map(Some),
    }
}

impl EndpointFactory {
    pub fn new(s: &Scenario) -> Result<EndpointFactory, ScenarioError> {
        validate(s)?;
        let builder = Builder::new(params(s)).map_err(|e| ScenarioError::new(scenario_key(&e.field), e.message))?;
        Ok(EndpointFactory {
            builder,
            loss_bound: s.transport.loss_bound,
            pull_loss_bound: s.transport.pull_loss_bound,
            data_priorities: s.switch.queues - 1,
            handshakes: crate::baselines::Handshakes::new(s),
            important_shares: important_shares(s)?,
        })
    }

    /// PIAS's demotion thresholds, replacing the scenario's (`pias_thresholds_from_workload`).
    pub fn set_pias_thresholds(&mut self, thresholds: &[u64]) -> Result<(), ScenarioError> {
        let params = Params { pias_thresholds: thresholds.to_vec(), ..self.builder.params().clone() };
        self.builder = Builder::new(params).map_err(|e| ScenarioError::new("transport.pias_thresholds", e.message))?;
        Ok(())
    }

    /// The queue of a flow's data, and the class its sender gets at its host NIC (0 =
    /// served first).
    pub fn data_class(&self, spec: &FlowSpec) -> u8 {
        let p = self.builder.params();
        if p.kind.priority_by_layer() {
            layer_queue(spec.layer, spec.layers.max(1), self.data_priorities)
        } else {
            p.data_priority()
        }
    }

    /// Flow `f` as the core's transfer; `line_rate_bps` is the sender's NIC rate. PS pulls
    /// carry aggregated gradients: the tighter `pull_loss_bound`, and LTP's reliable
    /// broadcast (ltp.md §IV).
    pub fn transfer(&self, f: u32, spec: &FlowSpec, line_rate_bps: u64) -> Transfer {
        Transfer {
            flow: f,
            src: spec.src,
            dst: spec.dst,
            bytes: spec.bytes,
            loss_bound: if spec.pull { self.pull_loss_bound } else { self.loss_bound },
            loss_tolerant: !spec.pull,
            priority: self.data_class(spec),
            elem_bytes: self.builder.params().dlcp.elem_bytes,
            line_rate_bps,
            important_fraction: self.important_shares.as_ref().and_then(|v| v.get(spec.layer as usize).copied()),
        }
    }

    /// Sender and receiver of flow `f`.
    pub fn make(&self, f: u32, spec: &FlowSpec, line_rate_bps: u64, now: Time) -> Pair {
        let pair = self.builder.build(&self.transfer(f, spec, line_rate_bps), now);
        match &self.handshakes {
            None => pair,
            Some(h) => h.wrap(f, spec.src, spec.dst, spec.bytes, pair),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::load;
    use gradwire_core::transport::EndpointEvent;
    use gradwire_core::Packet;

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
            iteration: 0,
            gate_delay: 0,
        }
    }

    /// Run a pair over a lossless pipe with a fixed one-way delay until the receiver
    /// delivers; returns when.
    fn run_pair((mut s, mut r): Pair, delay: Time) -> Time {
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
            if let Some(EndpointEvent::Delivered { .. }) = r.poll_event() {
                return now;
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
    fn ltp_lt_state_is_carried_per_link_and_size() {
        let text = "[topology]\nleaves = 1\nspines = 1\nuplinks_per_leaf = 1\nhosts_per_leaf = 4\n\
                    [transport]\nkind = \"ltp\"\n[workload]\nkind = \"incast\"\nsenders = 2\nflow_bytes = 100000\n";
        let s = &load(text, &[]).unwrap()[0].scenario;
        let fac = EndpointFactory::new(s).unwrap();
        let line = 100_000_000_000;
        assert!(fac.builder.lt_thresholds().is_empty());
        let d = run_pair(fac.make(0, &spec(1, 0, 100_000), line, 0), 5 * NS * 1000);
        let states = fac.builder.lt_thresholds();
        assert_eq!(states.len(), 1);
        let lt = &states[&(1, 0, 100_000)];
        // the complete transfer's duration (from its first packet) is the link's threshold now
        let (size, shortest) = lt.shortest_complete().expect("a complete transfer is recorded");
        assert_eq!(size, 100_000);
        assert!(shortest > 0 && shortest <= d, "{shortest} vs delivered at {d}");
        // another link, another size: their own entries; the first one is left alone
        run_pair(fac.make(1, &spec(2, 0, 100_000), line, 0), 5 * NS * 1000);
        run_pair(fac.make(2, &spec(1, 0, 50_000), line, 0), 5 * NS * 1000);
        let states = fac.builder.lt_thresholds();
        assert_eq!(states.len(), 3);
        assert_eq!(states[&(1, 0, 100_000)].shortest_complete(), Some((size, shortest)));
        // the next transfer on the first link starts from the carried state, and a slower
        // run (longer delay) does not raise the shortest
        run_pair(fac.make(3, &spec(1, 0, 100_000), line, 0), 50 * NS * 1000);
        assert_eq!(fac.builder.lt_thresholds()[&(1, 0, 100_000)].shortest_complete(), Some((size, shortest)));
        // without the carried state the slow run starts from the formula again (and, past
        // that threshold with 90 % in, closes early: nothing complete to record)
        fac.builder.forget();
        run_pair(fac.make(4, &spec(1, 0, 100_000), line, 0), 50 * NS * 1000);
        assert_eq!(fac.builder.lt_thresholds()[&(1, 0, 100_000)].shortest_complete(), None);
    }
}
