//! The network as fluid flows over host NICs: every host has an uplink and a downlink, the
//! fabric between them does not block (the paper's testbed: a 100 Gbit/s leaf-spine with
//! NICs limited to 0.5–25 Gbit/s, §IV-A), and concurrent flows share each link max-min
//! fairly, as long-lived TCP flows do. A limit applies to both directions, or to the uplink
//! alone with the downlink at the port's speed (`Shaping`).

use crate::maxmin::MaxMin;

/// A link: host `h`'s uplink is `h`, its downlink `hosts + h`.
pub type Link = usize;

/// What a flow carries, for the job to act on when it finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag {
    /// Worker `worker`'s push of (tensor, offset) to `server`.
    Push { worker: u32, server: u32, tensor: u64, offset: u64, bytes: u64 },
    /// `server`'s piece of the aggregate of (tensor, offset), pulled by `worker`.
    Pull { worker: u32, server: u32, tensor: u64, offset: u64, bytes: u64 },
    /// One step of ring all-reduce `ring` (an index into the job's live rings).
    Ring { ring: u64 },
    /// Another job's long-lived flow: never finishes.
    Background { job: u32 },
}

#[derive(Clone, Debug)]
pub struct Flow {
    pub tag: Tag,
    pub links: [Option<Link>; 2],
    /// Bytes left (infinite for background flows).
    pub remaining: f64,
    /// Bytes/s under the current allocation.
    pub rate: f64,
}

/// Flows closer than this many bytes to done are done (rounding of rate × time).
const DONE_BYTES: f64 = 1e-3;

#[derive(Debug)]
pub struct Network {
    hosts: usize,
    /// Only uplinks are limited; downlinks stay at the port's speed.
    egress_only: bool,
    /// Bytes/s of every link.
    capacity: Vec<f64>,
    pub flows: Vec<Flow>,
    dirty: bool,
    /// Bytes this job sent (uplinks) and received (downlinks) per link since the last reset.
    pub carried: Vec<f64>,
    fair: MaxMin,
}

impl Network {
    /// Every link at `gbps`, or with `port_gbps` given, the downlinks at it and only the
    /// uplinks limited (`set_rate` then changes the uplink alone).
    pub fn new(hosts: usize, gbps: f64, port_gbps: Option<f64>) -> Network {
        let mut capacity = vec![gbps * 1e9 / 8.0; 2 * hosts];
        if let Some(p) = port_gbps {
            capacity[hosts..].fill(p * 1e9 / 8.0);
        }
        Network {
            hosts,
            egress_only: port_gbps.is_some(),
            capacity,
            flows: Vec::new(),
            dirty: false,
            carried: vec![0.0; 2 * hosts],
            fair: MaxMin::default(),
        }
    }

    pub fn up(&self, host: u32) -> Link {
        host as usize
    }

    pub fn down(&self, host: u32) -> Link {
        self.hosts + host as usize
    }

    /// Limit `host` to `gbps`: both directions, or its uplink alone if only egress is shaped.
    pub fn set_rate(&mut self, host: u32, gbps: f64) {
        let (u, d) = (self.up(host), self.down(host));
        self.capacity[u] = gbps * 1e9 / 8.0;
        if !self.egress_only {
            self.capacity[d] = gbps * 1e9 / 8.0;
        }
        self.dirty = true;
    }

    pub fn gbps(&self, link: Link) -> f64 {
        self.capacity[link] * 8.0 / 1e9
    }

    /// The max-min share one new flow would get on `link` against the background flows.
    pub fn probe_gbps(&self, link: Link) -> f64 {
        let others = self
            .flows
            .iter()
            .filter(|f| matches!(f.tag, Tag::Background { .. }) && f.links.contains(&Some(link)))
            .count();
        self.gbps(link) / (1 + others) as f64
    }

    pub fn add(&mut self, tag: Tag, links: [Option<Link>; 2], bytes: f64) {
        self.flows.push(Flow { tag, links, remaining: bytes, rate: 0.0 });
        self.dirty = true;
    }

    pub fn remove_background(&mut self, job: u32) {
        self.flows.retain(|f| f.tag != Tag::Background { job });
        self.dirty = true;
    }

    /// True while some flow of this job (not a background one) is moving.
    pub fn busy(&self) -> bool {
        self.flows.iter().any(|f| !matches!(f.tag, Tag::Background { .. }))
    }

    /// Seconds until the next flow of this job finishes, under the current rates.
    pub fn next_finish(&mut self) -> Option<f64> {
        self.allocate();
        self.flows
            .iter()
            .filter(|f| f.rate > 0.0 && f.remaining.is_finite())
            .map(|f| f.remaining / f.rate)
            .min_by(f64::total_cmp)
    }

    /// Move every flow forward by `dt` seconds; returns the tags of those that finished, in
    /// the order they were added.
    pub fn advance(&mut self, dt: f64) -> Vec<Tag> {
        self.allocate();
        let mut done = Vec::new();
        for f in &mut self.flows {
            if f.remaining.is_finite() {
                let moved = (f.rate * dt).min(f.remaining);
                f.remaining -= moved;
                for l in f.links.iter().flatten() {
                    self.carried[*l] += moved;
                }
                if f.remaining <= DONE_BYTES {
                    done.push(f.tag);
                }
            }
        }
        if !done.is_empty() {
            self.flows.retain(|f| !f.remaining.is_finite() || f.remaining > DONE_BYTES);
            self.dirty = true;
        }
        done
    }

    /// Max-min fair rates (`maxmin`): the link with the smallest fair share fixes the rate
    /// of every flow through it, which leaves that capacity to the others.
    fn allocate(&mut self) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        let open: Vec<u32> = (0..self.flows.len() as u32).collect();
        let mut rate = vec![0.0; self.flows.len()];
        let flows = &self.flows;
        self.fair.solve(&open, |f| flows[f as usize].links.into_iter().flatten(), &self.capacity, &mut rate);
        for (f, r) in self.flows.iter_mut().zip(rate) {
            f.rate = r;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_min_shares_a_bottleneck_and_gives_the_rest_away() {
        // hosts 0,1,2: flows 0->1, 0->2, 2->1. Uplink 0 carries two, downlink 1 carries two.
        let mut n = Network::new(3, 8.0, None); // 1e9 bytes/s per link
        let tag = |i| Tag::Ring { ring: i };
        n.add(tag(0), [Some(n.up(0)), Some(n.down(1))], 1e9);
        n.add(tag(1), [Some(n.up(0)), Some(n.down(2))], 1e9);
        n.add(tag(2), [Some(n.up(2)), Some(n.down(1))], 1e9);
        n.allocate();
        let rates: Vec<f64> = n.flows.iter().map(|f| f.rate).collect();
        assert_eq!(rates, [5e8, 5e8, 5e8]);
        n.add(Tag::Background { job: 0 }, [Some(n.up(2)), None], f64::INFINITY);
        n.allocate();
        let rates: Vec<f64> = n.flows.iter().map(|f| f.rate).collect();
        assert_eq!(rates, [5e8, 5e8, 5e8, 5e8]);
    }

    #[test]
    fn egress_shaping_limits_what_a_host_sends_not_what_it_receives() {
        // two senders into host 0: limited both ways they share its downlink; with only
        // egress shaped each sends at its own uplink's rate, and a rate change keeps the
        // downlink at the port's speed
        for (port, each) in [(None, 5e8), (Some(100.0), 1e9)] {
            let mut n = Network::new(3, 8.0, port);
            n.add(Tag::Ring { ring: 0 }, [Some(n.up(1)), Some(n.down(0))], 1e9);
            n.add(Tag::Ring { ring: 1 }, [Some(n.up(2)), Some(n.down(0))], 1e9);
            n.allocate();
            assert!(n.flows.iter().all(|f| f.rate == each), "{port:?}");
            n.set_rate(0, 0.8);
            n.allocate();
            let expect = if port.is_some() { 1e9 } else { 5e7 };
            assert!(n.flows.iter().all(|f| f.rate == expect), "{port:?} after set_rate");
        }
    }

    #[test]
    fn bytes_carried_add_up_to_the_flow() {
        let mut n = Network::new(2, 8.0, None);
        n.add(Tag::Ring { ring: 0 }, [Some(n.up(0)), Some(n.down(1))], 3e8);
        let dt = n.next_finish().unwrap();
        let done = n.advance(dt);
        assert_eq!(done.len(), 1);
        assert!((n.carried[0] - 3e8).abs() < 1e-2 && (n.carried[3] - 3e8).abs() < 1e-2);
        assert!(!n.busy());
    }
}
