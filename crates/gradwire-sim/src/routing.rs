//! Equal-cost shortest-path next hops from every node to every host, over the links
//! that are up. Recomputed when a failure changes the graph.

use crate::topology::{NodeId, NodeKind, Topology};
use std::collections::VecDeque;

pub type PortId = u32;

/// One direction of a link, as the fabric sees it for routing.
#[derive(Clone, Copy, Debug)]
pub struct Hop {
    pub from: NodeId,
    pub to: NodeId,
    pub up: bool,
}

/// `next_hops(node, host)` is a slice of egress ports. Each node's distinct sets of next
/// hops are stored once (a leaf sends every other rack's hosts to the same spines), and
/// the node × host table holds a 2-byte index among the node's own sets: at 1 024 hosts
/// it is 2.75 MB where (start, len) pairs took 11 MB, and its load, a miss on most hops,
/// was most of forwarding's time. The sets themselves are few and stay in cache.
pub struct Routes {
    hosts: u32,
    /// `ids[node * hosts + host]`: the set's index among `node`'s sets.
    ids: Vec<u16>,
    /// Where `node`'s sets start in `sets`.
    first_set: Vec<u32>,
    /// (start, len) of a set in `ports`.
    sets: Vec<(u32, u32)>,
    ports: Vec<PortId>,
}

impl Routes {
    /// `node_ports[n]` lists the egress ports of node `n`; `hops[p]` describes port `p`.
    pub fn compute(topo: &Topology, node_ports: &[Vec<PortId>], hops: &[Hop]) -> Routes {
        let n = topo.nodes.len();
        let hosts = topo.hosts as usize;
        // ingress adjacency for a backward BFS from each destination
        let mut ingress: Vec<Vec<PortId>> = vec![Vec::new(); n];
        for (p, h) in hops.iter().enumerate() {
            if h.up {
                ingress[h.to as usize].push(p as PortId);
            }
        }
        // Each node's distinct next-hop sets, interned as each destination's BFS ends (in
        // destination order, so a set's index is its first destination's rank): the
        // node × host × ports table is never built (at 10 000 hosts it peaked at 2.8 GB).
        let mut ids = vec![0u16; n * hosts];
        let mut node_sets: Vec<Vec<Vec<PortId>>> = vec![Vec::new(); n];
        let mut index: Vec<std::collections::HashMap<Vec<PortId>, u16>> = vec![Default::default(); n];
        let mut next = Vec::new();
        let mut d = vec![u32::MAX; n];
        let mut frontier = VecDeque::new();
        for dst in 0..hosts {
            d.fill(u32::MAX);
            d[dst] = 0;
            frontier.push_back(dst as NodeId);
            while let Some(v) = frontier.pop_front() {
                // hosts do not forward: paths end at them
                if topo.nodes[v as usize].kind == NodeKind::Host && v as usize != dst {
                    continue;
                }
                for &p in &ingress[v as usize] {
                    let u = hops[p as usize].from as usize;
                    if d[u] == u32::MAX {
                        d[u] = d[v as usize] + 1;
                        frontier.push_back(u as NodeId);
                    }
                }
            }
            for node in 0..n {
                next.clear();
                if d[node] != u32::MAX && d[node] > 0 {
                    for &p in &node_ports[node] {
                        let h = hops[p as usize];
                        if h.up && d[h.to as usize] == d[node] - 1 {
                            next.push(p);
                        }
                    }
                }
                let sets = &mut node_sets[node];
                let id = match index[node].get(next.as_slice()) {
                    Some(&id) => id,
                    None => {
                        let id = u16::try_from(sets.len())
                            .expect("routing: more than 65 536 distinct next-hop sets at one node");
                        sets.push(next.clone());
                        index[node].insert(next.clone(), id);
                        id
                    }
                };
                ids[node * hosts + dst] = id;
            }
        }
        drop(index);
        let (mut first_set, mut sets, mut ports) = (Vec::with_capacity(n), Vec::new(), Vec::new());
        for node_sets in node_sets {
            first_set.push(sets.len() as u32);
            for next in node_sets {
                sets.push((ports.len() as u32, next.len() as u32));
                ports.extend_from_slice(&next);
            }
        }
        Routes { hosts: hosts as u32, ids, first_set, sets, ports }
    }

    /// Start loading the entry [`next_hops`](Self::next_hops) reads for `(node, host)`:
    /// the node × host table misses the cache on most hops.
    #[inline]
    pub fn prefetch(&self, node: NodeId, host: u32) {
        if let Some(id) = self.ids.get(node as usize * self.hosts as usize + host as usize) {
            gradwire_core::prefetch::line(id as *const u16 as *const u8);
        }
    }

    #[inline]
    pub fn next_hops(&self, node: NodeId, host: u32) -> &[PortId] {
        let id = self.ids[node as usize * self.hosts as usize + host as usize];
        let (start, len) = self.sets[self.first_set[node as usize] as usize + id as usize];
        &self.ports[start as usize..(start + len) as usize]
    }

    /// The port ECMP forwards `flow` on at `node` toward `host` (`None`: no route): a
    /// seeded hash of (flow, node), so each switch splits flows on its own. The simulator
    /// and the emulator both forward with it, so a flow takes the same path in both.
    #[inline]
    pub fn ecmp(&self, node: NodeId, host: u32, flow: u32, seed: u64) -> Option<PortId> {
        match self.next_hops(node, host) {
            [] => None,
            [one] => Some(*one),
            hops => Some(hops[(flow_hash(flow, node, seed) % hops.len() as u64) as usize]),
        }
    }
}

/// How a switch picks among equal-cost next hops (`routing.mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// One path per flow: [`Routes::ecmp`] with this seed.
    Ecmp { seed: u64 },
    /// Each packet on a uniformly drawn port (DLCP's spraying).
    Spray,
}

impl Routes {
    /// The egress port at `node` for a packet of `flow` toward `host` (`None`: no route),
    /// picked as `pick` says; a spray draws from `rng` only where there is a choice. The
    /// simulator and the emulator forward every packet through this.
    #[inline]
    pub fn pick(&self, node: NodeId, host: u32, flow: u32, pick: Pick, rng: &mut impl rand::Rng) -> Option<PortId> {
        let hops = self.next_hops(node, host);
        match (hops.len(), pick) {
            (0, _) => None,
            (1, _) => Some(hops[0]),
            (_, Pick::Ecmp { seed }) => self.ecmp(node, host, flow, seed),
            (n, Pick::Spray) => Some(hops[rng.gen_range(0..n)]),
        }
    }
}

/// Deterministic per-(flow, switch) ECMP choice: splitmix64 of the pair and the seed.
fn flow_hash(flow: u32, node: NodeId, seed: u64) -> u64 {
    let mut z = ((flow as u64) << 32 | node as u64) ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::TopologyCfg;
    use crate::topology::leaf_spine;

    fn ports_of(t: &Topology) -> (Vec<Vec<PortId>>, Vec<Hop>) {
        let mut node_ports = vec![Vec::new(); t.nodes.len()];
        let mut hops = Vec::new();
        for l in &t.links {
            for (a, b) in [(l.a, l.b), (l.b, l.a)] {
                node_ports[a as usize].push(hops.len() as PortId);
                hops.push(Hop { from: a, to: b, up: true });
            }
        }
        (node_ports, hops)
    }

    #[test]
    fn pick_hashes_or_sprays_and_draws_only_where_there_is_a_choice() {
        use rand::{Rng, SeedableRng};
        let t = leaf_spine(&TopologyCfg::default());
        let (np, hops) = ports_of(&t);
        let r = Routes::compute(&t, &np, &hops);
        let leaf0 = t.node_by_name("leaf0").unwrap();
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(1);
        let ecmp = Pick::Ecmp { seed: 3 };
        assert_eq!(r.pick(leaf0, 20, 5, ecmp, &mut rng), r.ecmp(leaf0, 20, 5, 3));
        // in-rack: one port, and the generator is left as it was
        let before = rng.clone();
        assert_eq!(r.pick(leaf0, 3, 5, Pick::Spray, &mut rng), Some(r.next_hops(leaf0, 3)[0]));
        assert_eq!(rng.gen::<u64>(), before.clone().gen::<u64>());
        let sprayed: std::collections::HashSet<_> =
            (0..64).map(|_| r.pick(leaf0, 20, 5, Pick::Spray, &mut rng).unwrap()).collect();
        assert_eq!(sprayed.len(), 4, "a spray reaches every spine");
    }

    #[test]
    fn leaf_spine_has_one_path_in_rack_and_spines_across() {
        let t = leaf_spine(&TopologyCfg::default());
        let (np, mut hops) = ports_of(&t);
        let r = Routes::compute(&t, &np, &hops);
        let leaf0 = t.node_by_name("leaf0").unwrap();
        assert_eq!(r.next_hops(leaf0, 3).len(), 1, "in-rack: straight down");
        assert_eq!(r.next_hops(leaf0, 20).len(), 4, "cross-rack: all four spines");
        assert_eq!(r.next_hops(0, 20).len(), 1, "a host has one NIC");
        // take spine0 down: cross-rack traffic uses the other three
        let spine0 = t.node_by_name("spine0").unwrap();
        for h in hops.iter_mut() {
            if h.from == spine0 || h.to == spine0 {
                h.up = false;
            }
        }
        let r = Routes::compute(&t, &np, &hops);
        assert_eq!(r.next_hops(leaf0, 20).len(), 3);
        // hosts never forward: no route from host 0 to host 1 via host 2 etc.
        assert!(r.next_hops(leaf0, 0).iter().all(|&p| hops[p as usize].to == 0));
    }
}
