//! The emulator's scenario file: the simulator's `[topology]`, `[switch]`, `[host]` and
//! `[routing]` tables, typed and validated by `gradwire-sim` itself, plus `[emulate]`
//! (options of the emulated network), `[job]` (what runs on it) and `[sweep]`, both read
//! by the Python front end and ignored here.
//!
//! Keys the file leaves out take emulator defaults (below) rather than the simulator's,
//! whose 144-host 100G network would not fit in namespaces on one machine.

use gradwire_sim::scenario::{apply_override, from_table, Scenario, ScenarioError, SwitchPolicy, TopologyKind};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Top-level tables the emulator reads; anything else is an error, not silently ignored.
const KNOWN: [&str; 10] =
    ["name", "description", "seed", "topology", "switch", "host", "routing", "emulate", "job", "sweep"];

/// Emulator defaults: one switch with 2 hosts at 1 Gbit/s, 5 us per link, and a host NIC
/// queue of 1.5 MB for packets other than TCP (a txqueuelen of 1000 full-size packets;
/// TCP is never dropped there, see `Switch::nic_limit`).
const DEFAULTS: &str = r#"
[topology]
kind = "leaf_spine"
leaves = 1
spines = 1
uplinks_per_leaf = 1
hosts_per_leaf = 2
host_link_gbps = 1.0
uplink_gbps = 1.0
link_delay_ns = 5000
[host]
nic_queue_bytes = 1500000
"#;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmulateCfg {
    /// Random loss of single links by port name (`"leaf0->host1" = 0.01`), replacing
    /// `topology.link_loss_rate` on that link.
    pub link_loss: BTreeMap<String, f64>,
    /// MTU of every host's interface (bytes of IP packet).
    pub mtu: Option<u32>,
    /// TCP segmentation offload on the TUN devices (default on): fewer syscalls and
    /// kernel passes per packet; the switch still handles every packet on its own.
    pub offload: Option<bool>,
    /// PCN's threshold register on every switch port (pcn.md §3): the DSCP of a packet a
    /// port forwards is read as a PCN mark (`gradwire_core::switch::PcnMark`); a START
    /// lowers the port's ECN threshold to the one it carries until its burst's first packet
    /// passes, or for at most `pcn_lease_us`. Off by default: the DSCP then only picks the
    /// queue.
    pub pcn: Option<bool>,
    /// How long a port stays lowered when its burst never comes (default: twice the
    /// simulator's worker fallback, as `gradwire-sim` sets it).
    pub pcn_lease_us: Option<f64>,
    /// Receive interrupt moderation of every host's NIC (a NIC's `rx-usecs`): a packet that
    /// reaches a host waits up to this long for more, and what arrived meanwhile goes up
    /// as one batch (merged where GRO would), in one write and one pass through the host's
    /// stack. Default: one MTU-sized packet's serialization time at `host_link_gbps`. 0
    /// writes each packet at its arrival time (with what arrives in the same round of the
    /// switch's loop).
    pub rx_coalesce_us: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct EmuScenario {
    pub sim: Scenario,
    pub emulate: EmulateCfg,
}

impl EmuScenario {
    pub fn hosts(&self) -> u32 {
        self.sim.host_count()
    }

    pub fn offload(&self) -> bool {
        self.emulate.offload.unwrap_or(true)
    }

    /// See [`EmulateCfg::rx_coalesce_us`]: by default one MTU-sized packet's time at the
    /// host link rate (12 µs at 1 Gbit/s), so a slower network batches its deliveries as
    /// a faster one does.
    pub fn rx_coalesce(&self) -> gradwire_core::time::Time {
        match self.emulate.rx_coalesce_us {
            Some(us) => (us.max(0.0) * gradwire_core::time::US as f64) as u64,
            None => {
                let gbps = self.sim.topology.host_link_gbps.max(1e-6);
                (self.mtu() as f64 * 8.0 / gbps * gradwire_core::time::NS as f64) as u64
            }
        }
    }

    pub fn mtu(&self) -> u32 {
        self.emulate.mtu.unwrap_or(1500)
    }
}

/// Parse a scenario file and apply `key=value` overrides (dotted keys, TOML values).
pub fn load_with(text: &str, overrides: &[String]) -> Result<EmuScenario, ScenarioError> {
    let mut root: toml::Table =
        toml::from_str(text).map_err(|e| ScenarioError::new("", format!("not valid TOML: {e}")))?;
    for ov in overrides {
        apply_override(&mut root, ov)?;
    }
    typed(root)
}

pub fn load(text: &str) -> Result<EmuScenario, ScenarioError> {
    load_with(text, &[])
}

fn typed(mut root: toml::Table) -> Result<EmuScenario, ScenarioError> {
    if let Some(k) = root.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(ScenarioError::new(
            k.clone(),
            format!("is not an emulator key (top-level tables: {}; the job goes in [job])", KNOWN.join(", ")),
        ));
    }
    let emulate: EmulateCfg = match root.remove("emulate") {
        None => EmulateCfg::default(),
        Some(v) => v.try_into().map_err(|e| ScenarioError::new("emulate", e.to_string()))?,
    };
    // the front end runs the job and expands the sweep (into --set overrides)
    root.remove("job");
    root.remove("sweep");
    let defaults: toml::Table = toml::from_str(DEFAULTS).expect("defaults parse");
    for (table, values) in defaults {
        let entry = root.entry(table.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(t) = entry else {
            return Err(ScenarioError::new(table, "must be a table"));
        };
        for (k, v) in values.as_table().expect("defaults are tables") {
            t.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    // the simulator wants a workload (one flow, which nothing runs); the emulator's job is
    // the real processes in [job]
    let workload: toml::Table =
        toml::from_str("kind = \"flows\"\nflows = [{ src = 0, dst = 1, bytes = 1 }]").expect("parses");
    root.insert("workload".into(), toml::Value::Table(workload));
    let sim = from_table(root)?;
    if sim.topology.kind != TopologyKind::LeafSpine {
        return Err(ScenarioError::new(
            "topology.kind",
            "the emulator builds leaf_spine only (leaves = 1 is one switch)",
        ));
    }
    if sim.switch.policy == SwitchPolicy::Pfabric {
        return Err(ScenarioError::new(
            "switch.policy",
            "pfabric needs a per-packet rank, which IP packets do not carry",
        ));
    }
    if sim.host_count() < 2 || sim.host_count() > 250 {
        return Err(ScenarioError::new("topology", format!("needs 2..=250 hosts (got {})", sim.host_count())));
    }
    if !(576..=9000).contains(&emulate.mtu.unwrap_or(1500)) {
        return Err(ScenarioError::new("emulate.mtu", "must be in 576..=9000"));
    }
    for (port, rate) in &emulate.link_loss {
        if !(0.0..1.0).contains(rate) {
            return Err(ScenarioError::new(
                format!("emulate.link_loss.{port}"),
                format!("must be in [0, 1) (got {rate})"),
            ));
        }
    }
    Ok(EmuScenario { sim, emulate })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_in_and_user_keys_win() {
        let s = load("[topology]\nhosts_per_leaf = 4\n[switch]\necn_threshold_packets = 20\n").unwrap();
        assert_eq!(s.hosts(), 4);
        assert_eq!(s.sim.topology.host_link_gbps, 1.0);
        assert_eq!(s.sim.switch.ecn_threshold_packets, 20);
        assert_eq!(s.sim.host.nic_queue_bytes, 1_500_000);
        assert_eq!(s.mtu(), 1500);
    }

    #[test]
    fn overrides_set_dotted_keys() {
        let ov = ["topology.link_loss_rate=0.01".to_string(), "emulate.link_loss.\"host0->leaf0\"=0.5".to_string()];
        let s = load_with("[topology]\nhosts_per_leaf = 3\n", &ov[..1]).unwrap();
        assert_eq!((s.hosts(), s.sim.topology.link_loss_rate), (3, 0.01));
        assert!(load_with("", &["topology.leaves".to_string()]).is_err());
    }

    #[test]
    fn bad_keys_name_themselves() {
        let e = load("[workload]\nkind = \"incast\"\n").unwrap_err().to_string();
        assert!(e.contains("workload"), "{e}");
        let e = load("[topology]\nspine = 2\n").unwrap_err().to_string();
        assert!(e.contains("spine"), "{e}");
        let e = load("[switch]\npolicy = \"pfabric\"\n").unwrap_err().to_string();
        assert!(e.contains("pfabric"), "{e}");
        let e = load("[emulate.link_loss]\n\"leaf0->host0\" = 1.5\n").unwrap_err().to_string();
        assert!(e.contains("link_loss"), "{e}");
    }
}
