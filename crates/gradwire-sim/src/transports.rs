//! Builds the endpoint pair of a flow for the scenario's transport. The only place the
//! simulator names concrete transports; everything else sees `dyn Endpoint`.

use crate::scenario::{Scenario, TransportKind};
use crate::workload::FlowSpec;
use gradwire_core::tensor::layer_queue;
use gradwire_core::time::{from_us, Time};
use gradwire_core::time::NS;
use gradwire_core::transport::dlcp::{DlcpConfig, DlcpReceiver, DlcpSender, Importance};
use gradwire_core::transport::ltp::{LtpConfig, LtpReceiver, LtpSender};
use gradwire_core::transport::pfabric::{PFabricConfig, PFabricReceiver, PFabricSender};
use gradwire_core::transport::pias::{PiasConfig, PiasSender, WEB_SEARCH_THRESHOLDS};
use gradwire_core::transport::tcp::{CongestionControl, TcpConfig, TcpReceiver, TcpSender};
use gradwire_core::transport::Endpoint;

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
        let thresholds: &[u64] = if tr.pias_thresholds.is_empty() { &WEB_SEARCH_THRESHOLDS } else { &tr.pias_thresholds };
        EndpointFactory {
            kind: tr.kind,
            pias: PiasConfig::new(tcp, thresholds),
            pfabric_rto: tr.pfabric_rto_us.map(from_us),
            base_rtt: s.base_rtt_ns() * NS,
            ltp,
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

    /// Sender and receiver of flow `f`; `line_rate_bps` is the sender's NIC rate.
    pub fn make(&self, f: u32, spec: &FlowSpec, line_rate_bps: u64, now: Time) -> EndpointPair {
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
                (
                    Box::new(DlcpSender::new(cfg, f, src, dst, bytes, now)),
                    Box::new(DlcpReceiver::new(cfg, f, dst, src, bytes)),
                )
            }
            TransportKind::Ltp => {
                // lossy gather (push), fully reliable broadcast (pull): ltp.md §IV
                let cfg = LtpConfig { initial_btlbw_bps: line_rate_bps, loss_tolerant: !spec.pull, ..self.ltp.clone() };
                (
                    Box::new(LtpSender::new(cfg.clone(), f, src, dst, bytes, now)),
                    Box::new(LtpReceiver::new(cfg, f, dst, src, bytes)),
                )
            }
            TransportKind::Pias => (
                Box::new(PiasSender::new(self.pias.clone(), f, src, dst, bytes, now)),
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
