//! Topology builders. Hosts are nodes `0..hosts`, so a host id is its node id; switches
//! follow. Hosts sit in racks (a leaf, or a fat-tree edge switch): host `h` is in rack
//! `h / hosts_per_rack`.

use crate::scenario::{TopologyCfg, TopologyKind};
use gradwire_core::time::{Time, NS};

pub type NodeId = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    Host,
    Switch,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
}

/// A full-duplex link; the fabric makes one egress port per direction.
#[derive(Clone, Debug)]
pub struct Link {
    pub a: NodeId,
    pub b: NodeId,
    pub bits_per_sec: u64,
    pub delay: Time,
}

#[derive(Clone, Debug)]
pub struct Topology {
    pub nodes: Vec<Node>,
    pub links: Vec<Link>,
    pub hosts: u32,
    pub racks: u32,
    pub hosts_per_rack: u32,
}

impl Topology {
    pub fn build(cfg: &TopologyCfg) -> Topology {
        match cfg.kind {
            TopologyKind::LeafSpine => leaf_spine(cfg),
            TopologyKind::FatTree => fat_tree(cfg),
        }
    }

    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.nodes.iter().position(|n| n.name == name).map(|i| i as NodeId)
    }

    pub fn rack_of(&self, host: u32) -> u32 {
        host / self.hosts_per_rack
    }
}

fn gbps(g: f64) -> u64 {
    (g * 1e9).round() as u64
}

struct Builder {
    nodes: Vec<Node>,
    links: Vec<Link>,
    delay: Time,
}

impl Builder {
    fn node(&mut self, name: String, kind: NodeKind) -> NodeId {
        self.nodes.push(Node { name, kind });
        (self.nodes.len() - 1) as NodeId
    }

    fn link(&mut self, a: NodeId, b: NodeId, g: f64) {
        self.links.push(Link { a, b, bits_per_sec: gbps(g), delay: self.delay });
    }
}

/// `leaves` racks of `hosts_per_leaf` hosts; leaf uplink `j` goes to spine `j % spines`,
/// so `uplinks_per_leaf > spines` gives parallel leaf-spine links.
pub fn leaf_spine(cfg: &TopologyCfg) -> Topology {
    let mut b = Builder { nodes: Vec::new(), links: Vec::new(), delay: cfg.link_delay_ns * NS };
    let hosts = cfg.leaves * cfg.hosts_per_leaf;
    for h in 0..hosts {
        b.node(format!("host{h}"), NodeKind::Host);
    }
    let leaf0 = hosts;
    for l in 0..cfg.leaves {
        b.node(format!("leaf{l}"), NodeKind::Switch);
    }
    let spine0 = leaf0 + cfg.leaves;
    for s in 0..cfg.spines {
        b.node(format!("spine{s}"), NodeKind::Switch);
    }
    for h in 0..hosts {
        b.link(h, leaf0 + h / cfg.hosts_per_leaf, cfg.host_link_gbps);
    }
    for l in 0..cfg.leaves {
        for j in 0..cfg.uplinks_per_leaf {
            b.link(leaf0 + l, spine0 + j % cfg.spines, cfg.uplink_gbps);
        }
    }
    Topology { nodes: b.nodes, links: b.links, hosts, racks: cfg.leaves, hosts_per_rack: cfg.hosts_per_leaf }
}

/// The classic k-ary fat-tree: k pods of k/2 edge and k/2 aggregation switches, (k/2)^2
/// cores, k/2 hosts per edge switch, every link at `link_gbps`.
pub fn fat_tree(cfg: &TopologyCfg) -> Topology {
    let k = cfg.k;
    let half = k / 2;
    let mut b = Builder { nodes: Vec::new(), links: Vec::new(), delay: cfg.link_delay_ns * NS };
    let hosts = k * half * half;
    for h in 0..hosts {
        b.node(format!("host{h}"), NodeKind::Host);
    }
    let edge0 = hosts;
    for e in 0..k * half {
        b.node(format!("edge{e}"), NodeKind::Switch);
    }
    let agg0 = edge0 + k * half;
    for a in 0..k * half {
        b.node(format!("agg{a}"), NodeKind::Switch);
    }
    let core0 = agg0 + k * half;
    for c in 0..half * half {
        b.node(format!("core{c}"), NodeKind::Switch);
    }
    let g = cfg.link_gbps;
    for h in 0..hosts {
        b.link(h, edge0 + h / half, g);
    }
    for pod in 0..k {
        for e in 0..half {
            for a in 0..half {
                b.link(edge0 + pod * half + e, agg0 + pod * half + a, g);
            }
        }
        // aggregation switch a of every pod connects to cores a*half .. a*half + half
        for a in 0..half {
            for c in 0..half {
                b.link(agg0 + pod * half + a, core0 + a * half + c, g);
            }
        }
    }
    Topology { nodes: b.nodes, links: b.links, hosts, racks: k * half, hosts_per_rack: half }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dlcp_leaf_spine_shape() {
        let t = leaf_spine(&TopologyCfg::default());
        assert_eq!(t.hosts, 144);
        assert_eq!(t.nodes.len(), 144 + 9 + 4);
        assert_eq!(t.links.len(), 144 + 9 * 4);
        assert_eq!(t.rack_of(17), 1);
        assert_eq!(t.node_by_name("spine3"), Some(156));
    }

    #[test]
    fn fat_tree_k4_shape() {
        let cfg = TopologyCfg { kind: TopologyKind::FatTree, k: 4, ..TopologyCfg::default() };
        let t = fat_tree(&cfg);
        assert_eq!(t.hosts, 16);
        assert_eq!(t.nodes.len(), 16 + 8 + 8 + 4);
        // host links + edge-agg + agg-core
        assert_eq!(t.links.len(), 16 + 4 * 4 + 4 * 4);
    }

    /// `crate::fast` tells a link's down direction by its ends' ids: every node's id is
    /// above those of the tier beneath it (hosts, then racks, then the tiers above).
    #[test]
    fn node_ids_grow_with_the_tier() {
        let tier = |t: &Topology, n: NodeId| -> u32 {
            let name = &t.nodes[n as usize].name;
            ["host", "leaf", "edge", "agg", "spine", "core"]
                .iter()
                .position(|p| name.starts_with(p))
                .map(|i| [0, 1, 1, 2, 2, 3][i])
                .expect("a known node kind")
        };
        let fat = fat_tree(&TopologyCfg { kind: TopologyKind::FatTree, k: 6, ..TopologyCfg::default() });
        for t in [leaf_spine(&TopologyCfg::default()), fat] {
            for l in &t.links {
                let (lo, hi) = if l.a < l.b { (l.a, l.b) } else { (l.b, l.a) };
                assert!(tier(&t, lo) < tier(&t, hi), "{} - {}", t.nodes[lo as usize].name, t.nodes[hi as usize].name);
            }
        }
    }
}
