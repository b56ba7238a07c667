//! Builds the endpoint pair of a flow for the scenario's transport. The only place the
//! simulator names concrete transports; everything else sees `dyn Endpoint`.

use crate::scenario::{DlcpRateState, Scenario, TransportKind};
use crate::workload::FlowSpec;
use gradwire_core::cc::MinimalRate;
use gradwire_core::tensor::layer_queue;
use gradwire_core::time::NS;
use gradwire_core::time::{from_us, Time};
use gradwire_core::transport::dlcp::{DlcpConfig, DlcpReceiver, DlcpSender, Importance};
use gradwire_core::transport::ltp::{LtThreshold, LtpConfig, LtpReceiver, LtpSender};
use gradwire_core::transport::pfabric::{PFabricConfig, PFabricReceiver, PFabricSender};
use gradwire_core::transport::pias::{PiasConfig, PiasSender, WEB_SEARCH_THRESHOLDS};
use gradwire_core::transport::tcp::{CongestionControl, TcpConfig, TcpReceiver, TcpSender};
use gradwire_core::transport::{Endpoint, EndpointEvent, EndpointStats};
use gradwire_core::Packet;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// LTP's LT threshold state per (sender host, receiver host, transfer size): each
/// point-to-point link keeps its own threshold across transfers (ltp.md §III-B1), and a
/// measured duration is only reused for a transfer of the same size (one layer's tensor
/// in the next iteration), as [`LtThreshold`] does. Shared by the factory and the LTP
/// receivers it built; a `Mutex`, not a `RefCell`, so endpoints stay `Send`.
type LtStates = Arc<Mutex<HashMap<(u32, u32, u64), LtThreshold>>>;

/// DLCP rate state per (sender host, receiver host) with `dlcp_rate_state = "pair"`.
type RateStates = Arc<Mutex<HashMap<(u32, u32), MinimalRate>>>;

pub struct EndpointFactory {
    kind: TransportKind,
    tcp: TcpConfig,
    dlcp: DlcpConfig,
    pull_loss_bound: f64,
    data_priorities: u8,
    pias: PiasConfig,
    pfabric_rto: Option<Time>,
    base_rtt: Time,
    ltp: LtpConfig,
    lt_states: LtStates,
    /// Some: DLCP rate state is carried per host pair.
    dlcp_rates: Option<RateStates>,
    /// Some: TCP-based flows open their connections first (`crate::baselines`).
    handshakes: Option<crate::baselines::Handshakes>,
}

pub type EndpointPair = (Box<dyn Endpoint>, Box<dyn Endpoint>);

impl EndpointFactory {
    pub fn new(s: &Scenario) -> EndpointFactory {
        let tr = &s.transport;
        let tcp = TcpConfig {
            mss: tr.mss_bytes,
            header_bytes: tr.header_bytes,
            ack_bytes: tr.ack_bytes,
            init_cwnd_packets: tr.init_cwnd_packets,
            rto_min: from_us(tr.rto_min_us),
            rto_max: from_us(tr.rto_max_us),
            rto_initial: from_us(tr.rto_initial_us.unwrap_or(tr.rto_min_us)),
            dupack_threshold: tr.dupack_threshold,
            cc: match tr.kind {
                TransportKind::Dctcp | TransportKind::Pias => CongestionControl::Dctcp { g: tr.dctcp_g },
                TransportKind::Newreno if tr.newreno_ecn => CongestionControl::NewRenoEcn,
                _ => CongestionControl::NewReno,
            },
            priority: tr.priority,
        };
        let dlcp = DlcpConfig {
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
            ..DlcpConfig::default()
        };
        let ltp = LtpConfig {
            mss: tr.mss_bytes,
            header_bytes: tr.header_bytes,
            ack_bytes: tr.ack_bytes,
            ctrl_bytes: tr.ack_bytes,
            loss_bound: tr.loss_bound,
            lt_c: from_us(tr.ltp_c_ms * 1000.0),
            initial_rtprop: s.base_rtt_ns() * NS,
            ctrl_rto: from_us(tr.ctrl_rto_us),
            ..LtpConfig::default()
        };
        let thresholds: &[u64] =
            if tr.pias_thresholds.is_empty() { &WEB_SEARCH_THRESHOLDS } else { &tr.pias_thresholds };
        EndpointFactory {
            kind: tr.kind,
            pias: PiasConfig::new(tcp, thresholds),
            pfabric_rto: tr.pfabric_rto_us.map(from_us),
            base_rtt: s.base_rtt_ns() * NS,
            ltp,
            lt_states: LtStates::default(),
            dlcp_rates: (tr.dlcp_rate_state == DlcpRateState::Pair).then(RateStates::default),
            handshakes: crate::baselines::Handshakes::new(s),
            tcp,
            dlcp,
            pull_loss_bound: tr.pull_loss_bound,
            data_priorities: s.switch.queues - 1,
        }
    }

    /// The class a flow's sender gets at its host NIC (0 = served first): its data queue.
    pub fn data_class(&self, spec: &FlowSpec) -> u8 {
        match self.kind {
            TransportKind::Dlcp => layer_queue(spec.layer, spec.layers.max(1), self.data_priorities),
            TransportKind::Ltp => self.ltp.data_priority,
            _ => self.tcp.priority,
        }
    }

    /// PIAS's demotion thresholds, replacing the scenario's (`pias_thresholds_from_workload`).
    pub fn set_pias_thresholds(&mut self, thresholds: &[u64]) {
        self.pias = PiasConfig::new(self.pias.tcp, thresholds);
    }

    /// Sender and receiver of flow `f`; `line_rate_bps` is the sender's NIC rate.
    pub fn make(&self, f: u32, spec: &FlowSpec, line_rate_bps: u64, now: Time) -> EndpointPair {
        let pair = self.make_bare(f, spec, line_rate_bps, now);
        match &self.handshakes {
            None => pair,
            Some(h) => h.wrap(f, spec.src, spec.dst, spec.bytes, pair),
        }
    }

    fn make_bare(&self, f: u32, spec: &FlowSpec, line_rate_bps: u64, now: Time) -> EndpointPair {
        let (src, dst, bytes) = (spec.src, spec.dst, spec.bytes);
        match self.kind {
            TransportKind::Newreno | TransportKind::Dctcp => (
                Box::new(TcpSender::new(self.tcp, f, src, dst, bytes, now)),
                Box::new(TcpReceiver::new(self.tcp, f, dst, src, bytes)),
            ),
            TransportKind::Dlcp => {
                let cfg = DlcpConfig {
                    line_rate_bps,
                    loss_bound: if spec.pull { self.pull_loss_bound } else { self.dlcp.loss_bound },
                    data_priority: layer_queue(spec.layer, spec.layers.max(1), self.data_priorities),
                    ..self.dlcp
                };
                let receiver = Box::new(DlcpReceiver::new(cfg, f, dst, src, bytes));
                match &self.dlcp_rates {
                    None => (Box::new(DlcpSender::new(cfg, f, src, dst, bytes, now)), receiver),
                    Some(states) => {
                        let warm = states.lock().unwrap().get(&(src, dst)).copied();
                        let inner = DlcpSender::with_rate(cfg, f, src, dst, bytes, now, warm);
                        (Box::new(CarryRate { inner, key: (src, dst), states: states.clone() }), receiver)
                    }
                }
            }
            TransportKind::Ltp => {
                // lossy gather (push), fully reliable broadcast (pull): ltp.md §IV
                let cfg = LtpConfig { initial_btlbw_bps: line_rate_bps, loss_tolerant: !spec.pull, ..self.ltp.clone() };
                let key = (src, dst, bytes);
                let lt =
                    self.lt_states.lock().unwrap().get(&key).cloned().unwrap_or_else(|| LtThreshold::from_config(&cfg));
                (
                    Box::new(LtpSender::new(cfg.clone(), f, src, dst, bytes, now)),
                    Box::new(CarryLt {
                        inner: LtpReceiver::with_lt_state(cfg, f, dst, src, bytes, lt),
                        key,
                        states: self.lt_states.clone(),
                    }),
                )
            }
            TransportKind::Pias => (
                Box::new(PiasSender::new(self.pias, f, src, dst, bytes, now)),
                Box::new(PiasSender::receiver(&self.pias, f, dst, src, bytes)),
            ),
            TransportKind::Pfabric => {
                let mut cfg = PFabricConfig::for_link(line_rate_bps, self.base_rtt);
                cfg.mss = self.tcp.mss;
                cfg.header_bytes = self.tcp.header_bytes;
                cfg.ack_bytes = self.tcp.ack_bytes;
                cfg.rto = self.pfabric_rto.unwrap_or(cfg.rto);
                (
                    Box::new(PFabricSender::new(cfg, f, src, dst, bytes, now)),
                    Box::new(PFabricReceiver::new(cfg, f, dst, src, bytes)),
                )
            }
        }
    }
}

/// An LTP receiver that hands its link's LT state back to the factory when its transfer
/// closes, so the next transfer on the link starts from it.
struct CarryLt {
    inner: LtpReceiver,
    key: (u32, u32, u64),
    states: LtStates,
}

impl Endpoint for CarryLt {
    fn handle_packet(&mut self, now: Time, pkt: &Packet) {
        self.inner.handle_packet(now, pkt)
    }

    fn handle_timeout(&mut self, now: Time) {
        self.inner.handle_timeout(now)
    }

    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        self.inner.poll_transmit(now)
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.inner.poll_timeout()
    }

    fn poll_event(&mut self) -> Option<EndpointEvent> {
        let ev = self.inner.poll_event();
        if matches!(ev, Some(EndpointEvent::Delivered { .. })) {
            self.states.lock().unwrap().insert(self.key, self.inner.lt_state().clone());
        }
        ev
    }

    fn stats(&self) -> EndpointStats {
        self.inner.stats()
    }
}

/// A DLCP sender that leaves its rate state to its host pair after every rate decision,
/// so the pair's next transfer starts from it (`dlcp_rate_state = "pair"`).
struct CarryRate {
    inner: DlcpSender,
    key: (u32, u32),
    states: RateStates,
}

impl Endpoint for CarryRate {
    fn handle_packet(&mut self, now: Time, pkt: &Packet) {
        self.inner.handle_packet(now, pkt)
    }

    fn handle_timeout(&mut self, now: Time) {
        let before = *self.inner.rate_control();
        self.inner.handle_timeout(now);
        if *self.inner.rate_control() != before {
            self.states.lock().unwrap().insert(self.key, *self.inner.rate_control());
        }
    }

    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        self.inner.poll_transmit(now)
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.inner.poll_timeout()
    }

    fn poll_timeout_unpaced(&self) -> Option<Time> {
        self.inner.poll_timeout_unpaced()
    }

    fn poll_event(&mut self) -> Option<EndpointEvent> {
        self.inner.poll_event()
    }

    fn stats(&self) -> EndpointStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::load;

    fn spec(src: u32, dst: u32, bytes: u64) -> FlowSpec {
        FlowSpec {
            src,
            dst,
            bytes,
            start: 0,
            gate: None,
            feeds: Vec::new(),
            layer: 0,
            layers: 1,
            pull: false,
            iteration: 0,
            gate_delay: 0,
        }
    }

    /// Run a pair over a lossless pipe with a fixed one-way delay until the receiver
    /// delivers; returns when.
    fn run_pair((mut s, mut r): EndpointPair, delay: Time) -> Time {
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
    fn ltp_lt_state_is_carried_per_link_and_size() {
        let text = "[topology]\nleaves = 1\nspines = 1\nuplinks_per_leaf = 1\nhosts_per_leaf = 4\n\
                    [transport]\nkind = \"ltp\"\n[workload]\nkind = \"incast\"\nsenders = 2\nflow_bytes = 100000\n";
        let s = &load(text, &[]).unwrap()[0].scenario;
        let fac = EndpointFactory::new(s);
        let line = 100_000_000_000;
        assert!(fac.lt_states.lock().unwrap().is_empty());
        let d = run_pair(fac.make(0, &spec(1, 0, 100_000), line, 0), 5 * NS * 1000);
        let states = fac.lt_states.lock().unwrap().clone();
        assert_eq!(states.len(), 1);
        let lt = &states[&(1, 0, 100_000)];
        // the complete transfer's duration (from its first packet) is the link's threshold now
        let (size, shortest) = lt.shortest_complete().expect("a complete transfer is recorded");
        assert_eq!(size, 100_000);
        assert!(shortest > 0 && shortest <= d, "{shortest} vs delivered at {d}");
        // another link, another size: their own entries; the first one is left alone
        run_pair(fac.make(1, &spec(2, 0, 100_000), line, 0), 5 * NS * 1000);
        run_pair(fac.make(2, &spec(1, 0, 50_000), line, 0), 5 * NS * 1000);
        let states = fac.lt_states.lock().unwrap().clone();
        assert_eq!(states.len(), 3);
        assert_eq!(states[&(1, 0, 100_000)].shortest_complete(), Some((size, shortest)));
        // the next transfer on the first link starts from the carried state, and a slower
        // run (longer delay) does not raise the shortest
        run_pair(fac.make(3, &spec(1, 0, 100_000), line, 0), 50 * NS * 1000);
        assert_eq!(fac.lt_states.lock().unwrap()[&(1, 0, 100_000)].shortest_complete(), Some((size, shortest)));
        // without the carried state the slow run starts from the formula again (and, past
        // that threshold with 90 % in, closes early: nothing complete to record)
        fac.lt_states.lock().unwrap().clear();
        run_pair(fac.make(4, &spec(1, 0, 100_000), line, 0), 50 * NS * 1000);
        assert_eq!(fac.lt_states.lock().unwrap()[&(1, 0, 100_000)].shortest_complete(), None);
    }
}
