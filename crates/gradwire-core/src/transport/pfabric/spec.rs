//! pFabric in the registry: its key (`pfabric_rto_us`) and its builder.

use super::{PFabricConfig, PFabricReceiver, PFabricSender};
use crate::time::{from_us, Time};
use crate::transport::shared::check_positive;
use crate::transport::spec::{
    check_positive_number, Build, Common, Config, ConfigError, Info, Key, KeySet, KeyType, Pair, Transfer,
    TransportSpec,
};

/// pFabric's keys.
pub static KEYS: KeySet = KeySet {
    name: "pfabric",
    keys: &[Key::optional("pfabric_rto_us", KeyType::F64, false, ["float > 0, µs", "3 × base RTT", "Fixed retransmission timeout; the default is three times the propagation round trip across the widest path (leaf-spine: 4 links each way, fat-tree: 6)."])],
    check,
};

fn check(cfg: &Config) -> Result<(), ConfigError> {
    if let Some(rto) = cfg.values.opt_f64("pfabric_rto_us") {
        check_positive_number("pfabric_rto_us", rto)?;
        check_positive("pfabric_rto_us", from_us(rto))?;
    }
    Ok(())
}

/// pFabric's builder: each transfer's window is its sender's BDP.
pub struct PFabricBuild {
    common: Common,
    rto: Option<Time>,
}

impl PFabricBuild {
    fn config(&self, t: &Transfer) -> PFabricConfig {
        let mut cfg = PFabricConfig::for_link(t.line_rate_bps, self.common.base_rtt);
        cfg.mss = self.common.mss;
        cfg.header_bytes = self.common.header_bytes;
        cfg.ack_bytes = self.common.ack_bytes;
        cfg.rto = self.rto.unwrap_or(cfg.rto);
        cfg
    }
}

impl Build for PFabricBuild {
    fn build(&self, t: &Transfer, now: Time, _hosts: &mut crate::transport::Hosts) -> Pair {
        let cfg = self.config(t);
        (
            Box::new(PFabricSender::new(cfg, t.flow, t.src, t.dst, t.bytes, now)),
            Box::new(PFabricReceiver::new(cfg, t.flow, t.dst, t.src, t.bytes)),
        )
    }

    fn data_priority(&self) -> u8 {
        self.common.priority
    }
}

static SETS: [&KeySet; 1] = [&KEYS];

/// pFabric in the registry.
pub struct PFabric;

impl TransportSpec for PFabric {
    fn info(&self) -> Info {
        Info::new("pfabric", "pFabric (a baseline): starts at line rate and tags packets with the remaining flow size as rank — pair it with `switch.policy = \"pfabric\"` and `routing.mode = \"spray\"`.", &SETS)
    }

    fn builder(&self, cfg: &Config) -> Result<Box<dyn Build>, ConfigError> {
        Ok(Box::new(PFabricBuild { common: cfg.common, rto: cfg.values.opt_f64("pfabric_rto_us").map(from_us) }))
    }
}
