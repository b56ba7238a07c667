//! PIAS (Bai et al., "Information-Agnostic Flow Scheduling for Commodity Data Centers",
//! NSDI'15) as a sans-IO sender: DCTCP underneath, a multi-level feedback queue on top.
//!
//! PIAS does not know flow sizes. Every flow starts in the highest-priority queue and is
//! demoted as it sends more: with thresholds `α_1 < α_2 < … < α_k` a data packet whose
//! first byte lies at stream offset `s` goes to queue `priority + i`, where `i` is the
//! number of thresholds `α_j <= s`. So a flow is demoted at exactly the threshold byte
//! offsets, with packet granularity: the first packet that *starts* at or beyond `α_j` is
//! the first one in the lower queue. Short flows finish in the top queues, approximating
//! shortest-job-first; long flows share the bottom ones.
//!
//! Switches are plain strict-priority ports with per-queue ECN marking
//! ([`crate::switch::EgressPort`], `PortConfig::uniform(8, K, ..)`); PIAS needs nothing else
//! in the network. The rate control is DCTCP in every queue.
//!
//! * [`PiasSender`] wraps a [`TcpSender`] and rewrites the priority of each packet it
//!   emits; every other bit of behaviour (windows, ECN, retransmissions, timers) is the
//!   wrapped DCTCP sender's.
//! * The receiver is a plain [`TcpReceiver`] ([`PiasReceiver`]) built from
//!   `PiasConfig::tcp`: its ACKs ride queue `tcp.priority` (the highest level).
//!
//! Differences from the PIAS prototype: the level comes from the packet's stream offset,
//! so a retransmission keeps its original packet's level (the kernel module counts bytes
//! handed to the NIC, retransmissions included); thresholds are static (PIAS recomputes
//! them as the traffic changes).

use crate::packet::{FlowId, HostId, Packet};
use crate::switch::MAX_QUEUES;
use crate::time::{Time, MS};
use crate::transport::spec::{
    Build, Config, ConfigError, Info, Key, KeySet, KeyType, Pair, Transfer, TransportSpec, Value,
};
use crate::transport::tcp::{CongestionControl, TcpConfig, TcpReceiver, TcpSender};
use crate::transport::{forward_to_inner, tcp, Endpoint, Hosts};

/// Demotion thresholds (bytes) used by PIAS's own ns-2 simulations for the web search
/// workload (DCTCP paper's distribution) with 8 queues at 90% load: 759, 1132, 1456, 1737,
/// 2010, 2199 and 2325 packets of 1460 bytes. PIAS derives them from the flow size
/// distribution and load (its §4.2); recompute them for another workload.
pub const WEB_SEARCH_THRESHOLDS: [u64; MAX_QUEUES - 1] =
    [759 * 1460, 1132 * 1460, 1456 * 1460, 1737 * 1460, 2010 * 1460, 2199 * 1460, 2325 * 1460];

/// A PIAS flow's settings: the DCTCP transport underneath and the multi-level feedback
/// queue's demotion thresholds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PiasConfig {
    /// The DCTCP sender and receiver (`cc` should be `Dctcp`); `tcp.priority` is the
    /// top level's queue and the ACKs' queue.
    pub tcp: TcpConfig,
    /// Demotion thresholds in bytes of stream offset, strictly increasing; only the first
    /// `levels - 1` are used.
    pub thresholds: [u64; MAX_QUEUES - 1],
    /// Priority levels (queues) a flow can visit, 1..=8.
    pub levels: u8,
}

impl PiasConfig {
    /// `thresholds.len() + 1` levels over `tcp`. Panics if there are more than 7
    /// thresholds or they are not strictly increasing.
    pub fn new(tcp: TcpConfig, thresholds: &[u64]) -> Self {
        assert!(thresholds.len() < MAX_QUEUES, "at most {} thresholds", MAX_QUEUES - 1);
        assert!(thresholds.windows(2).all(|w| w[0] < w[1]), "thresholds must increase: {thresholds:?}");
        let mut t = [u64::MAX; MAX_QUEUES - 1];
        t[..thresholds.len()].copy_from_slice(thresholds);
        PiasConfig { tcp, thresholds: t, levels: thresholds.len() as u8 + 1 }
    }

    /// DCTCP (g = 1/16, RTOmin 10 ms as in DLCP's evaluation) with
    /// [`WEB_SEARCH_THRESHOLDS`] over 8 queues.
    pub fn web_search() -> Self {
        let tcp =
            TcpConfig { cc: CongestionControl::Dctcp { g: 1.0 / 16.0 }, rto_min: 10 * MS, ..TcpConfig::default() };
        PiasConfig::new(tcp, &WEB_SEARCH_THRESHOLDS)
    }

    /// The demotion thresholds in use.
    pub fn active_thresholds(&self) -> &[u64] {
        &self.thresholds[..(self.levels.clamp(1, MAX_QUEUES as u8) - 1) as usize]
    }

    /// The queue of a data packet whose first byte is at stream offset `offset`.
    pub fn queue_of(&self, offset: u64) -> u8 {
        let level = self.active_thresholds().iter().take_while(|&&t| offset >= t).count() as u8;
        (self.tcp.priority + level).min(MAX_QUEUES as u8 - 1)
    }
}

impl Default for PiasConfig {
    fn default() -> Self {
        PiasConfig::web_search()
    }
}

/// The PIAS receiver: a DCTCP receiver (ECN echo, one ACK per packet) on `PiasConfig::tcp`.
pub type PiasReceiver = TcpReceiver;

/// Sending side of one PIAS flow: a DCTCP [`TcpSender`] whose data packets are tagged with
/// the multi-level feedback queue's level.
pub struct PiasSender {
    cfg: PiasConfig,
    inner: TcpSender,
}

impl PiasSender {
    /// A flow of `size_bytes` from `src` to `dst` starting at `now`; the wrapped DCTCP sender
    /// runs on `cfg.tcp`.
    pub fn new(cfg: PiasConfig, flow: FlowId, src: HostId, dst: HostId, size_bytes: u64, now: Time) -> Self {
        PiasSender { cfg, inner: TcpSender::new(cfg.tcp, flow, src, dst, size_bytes, now) }
    }

    /// The receiver for this configuration (ACKs in the top queue).
    pub fn receiver(cfg: &PiasConfig, flow: FlowId, local: HostId, remote: HostId, size_bytes: u64) -> PiasReceiver {
        TcpReceiver::new(cfg.tcp, flow, local, remote, size_bytes)
    }

    /// The settings it was built with.
    pub fn config(&self) -> &PiasConfig {
        &self.cfg
    }

    /// The DCTCP sender underneath (cwnd, alpha, RTO).
    pub fn tcp(&self) -> &TcpSender {
        &self.inner
    }
}

impl Endpoint for PiasSender {
    fn handle_packet(&mut self, now: Time, pkt: &Packet) {
        self.inner.handle_packet(now, pkt);
    }

    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        let mut p = self.inner.poll_transmit(now)?;
        p.priority = self.cfg.queue_of(p.seq);
        Some(p)
    }

    forward_to_inner!();
}

/// PIAS demotion thresholds for a workload: the flow-size quantiles `i / levels`
/// (i = 1 .. levels-1), so each of `levels` queues is where an equal share of the flows
/// finish. PIAS derives them from the size distribution by optimisation (pias.md §4.2);
/// equal-count quantiles are the simple rule that puts them where the sizes are.
pub fn thresholds_for(sizes: impl Iterator<Item = u64>, levels: u8) -> Vec<u64> {
    let mut sizes: Vec<u64> = sizes.filter(|&b| b > 0).collect();
    sizes.sort_unstable();
    let mut out: Vec<u64> = Vec::new();
    if sizes.is_empty() {
        return out;
    }
    for i in 1..levels.clamp(1, 8) as usize {
        let t = sizes[(i * sizes.len() / levels as usize).min(sizes.len() - 1)];
        if out.last().is_none_or(|&last| t > last) {
            out.push(t);
        }
    }
    out
}

/// PIAS's keys.
pub static KEYS: KeySet = KeySet {
    name: "pias",
    keys: &[
        Key::new("pias_thresholds", KeyType::List, Value::List(Vec::new()), ["list of up to 7 strictly increasing integers, bytes", "`[]`", "Demotion thresholds in bytes sent (a flow moves to the next lower-priority queue after each); empty = PIAS's web-search thresholds."]),
        Key::hidden("pias_thresholds_from_workload", KeyType::Bool, Value::Bool(false), ["bool", "`false`", "Derive the demotion thresholds from the workload's flow sizes instead of `pias_thresholds`: the size quantiles `i / levels` (`levels` = `switch.queues`), so an equal share of flows finishes in each queue (a simpler rule than PIAS's own optimisation over the size distribution)."]),
    ],
    check: check_keys,
};

fn check_thresholds(th: &[u64]) -> Result<(), ConfigError> {
    if th.len() > WEB_SEARCH_THRESHOLDS.len() {
        return Err(ConfigError::new("pias_thresholds", format!("at most 7 thresholds (got {})", th.len())));
    }
    if th.windows(2).any(|w| w[0] >= w[1]) {
        return Err(ConfigError::new("pias_thresholds", "must be strictly increasing"));
    }
    Ok(())
}

fn check_keys(cfg: &Config) -> Result<(), ConfigError> {
    check_thresholds(cfg.values.list("pias_thresholds"))
}

/// PIAS's builder.
pub struct PiasBuild {
    cfg: PiasConfig,
    from_workload: bool,
    opener: tcp::spec::TcpOpener,
}

impl PiasBuild {
    /// The settings its flows get.
    pub fn config(&self) -> &PiasConfig {
        &self.cfg
    }
}

impl Build for PiasBuild {
    fn build(&self, t: &Transfer, now: Time, hosts: &mut Hosts) -> Pair {
        self.opener.open(t, now, hosts, |inner| Box::new(PiasSender { cfg: self.cfg, inner }))
    }

    fn data_priority(&self) -> u8 {
        self.cfg.tcp.priority
    }

    fn see_workload(&mut self, sizes: &mut dyn Iterator<Item = u64>, queues: u8) -> Result<(), ConfigError> {
        if self.from_workload {
            let th = thresholds_for(sizes, queues);
            check_thresholds(&th)?;
            let th: &[u64] = if th.is_empty() { &WEB_SEARCH_THRESHOLDS } else { &th };
            self.cfg = PiasConfig::new(self.cfg.tcp, th);
        }
        Ok(())
    }
}

static SETS: [&KeySet; 2] = [&tcp::spec::KEYS, &KEYS];

/// PIAS in the registry.
pub struct Pias;

impl TransportSpec for Pias {
    fn info(&self) -> Info {
        Info::new("pias", "PIAS (a baseline): DCTCP whose packets are demoted through the strict-priority queues as the flow sends more bytes (`pias_thresholds`).", &SETS)
    }

    fn builder(&self, cfg: &Config) -> Result<Box<dyn Build>, ConfigError> {
        let opener = tcp::spec::TcpOpener::new(cfg, tcp::spec::dctcp(cfg));
        let th = cfg.values.list("pias_thresholds");
        let th: &[u64] = if th.is_empty() { &WEB_SEARCH_THRESHOLDS } else { th };
        Ok(Box::new(PiasBuild {
            cfg: PiasConfig::new(*opener.config(), th),
            from_workload: cfg.values.bool("pias_thresholds_from_workload"),
            opener,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::PacketKind;
    use crate::testkit::{acked_pipe, random_loss};
    use crate::time::{MS, US};
    use crate::transport::EndpointEvent;

    const MSS: u64 = 1460;

    fn dctcp() -> TcpConfig {
        TcpConfig {
            cc: CongestionControl::Dctcp { g: 1.0 / 16.0 },
            rto_min: MS,
            rto_initial: MS,
            ..TcpConfig::default()
        }
    }

    #[test]
    fn levels_change_exactly_at_the_thresholds() {
        let c = PiasConfig::new(dctcp(), &[100, 5000, 70_000]);
        assert_eq!(c.levels, 4);
        assert_eq!(c.active_thresholds(), &[100, 5000, 70_000]);
        let cases = [(0, 0), (99, 0), (100, 1), (4999, 1), (5000, 2), (69_999, 2), (70_000, 3), (u64::MAX, 3)];
        for (offset, q) in cases {
            assert_eq!(c.queue_of(offset), q, "offset {offset}");
        }
        // levels start at the configured base queue and never pass the last queue
        let c = PiasConfig::new(TcpConfig { priority: 2, ..dctcp() }, &WEB_SEARCH_THRESHOLDS);
        assert_eq!((c.queue_of(0), c.queue_of(759 * 1460 - 1), c.queue_of(759 * 1460)), (2, 2, 3));
        assert_eq!(c.queue_of(2325 * 1460), 7);
        // no thresholds: a single level
        let c = PiasConfig::new(dctcp(), &[]);
        assert_eq!((c.levels, c.queue_of(0), c.queue_of(1 << 40)), (1, 0, 0));
    }

    #[test]
    #[should_panic(expected = "increase")]
    fn thresholds_must_increase() {
        PiasConfig::new(dctcp(), &[10, 10]);
    }

    #[test]
    fn web_search_default_is_dctcp_over_eight_queues() {
        let c = PiasConfig::default();
        assert_eq!(c.levels, 8);
        assert!(matches!(c.tcp.cc, CongestionControl::Dctcp { .. }));
        assert_eq!(c.active_thresholds(), &WEB_SEARCH_THRESHOLDS);
        assert!(WEB_SEARCH_THRESHOLDS.windows(2).all(|w| w[0] < w[1]));
    }

    /// Every data packet's queue follows its offset, over a lossy pipe, and everything
    /// but the priority is what a plain DCTCP sender does under the same losses.
    #[test]
    fn demotes_at_thresholds_and_otherwise_is_dctcp() {
        // thresholds off the segment grid, to check where a straddling packet goes
        let cfg = PiasConfig::new(dctcp(), &[2 * MSS, 10 * MSS + 700, 60 * MSS]);
        let size = 150 * MSS + 11;
        for seed in [3u64, 17, 99] {
            let mut s = PiasSender::new(cfg, 9, 1, 2, size, 0);
            let mut r = PiasSender::receiver(&cfg, 9, 2, 1, size);
            let o = acked_pipe(&mut s, &mut r, 5 * US, random_loss(seed, 0.05, 0.05), 10_000 * MS);
            assert_eq!(o.delivered.map(|d| d.1), Some(size), "seed {seed}");
            assert!(o.sender_done_at.is_some());
            let mut seen = [false; 4];
            for p in &o.sent {
                assert_eq!(p.kind, PacketKind::Data);
                assert!(p.ecn.ect, "DCTCP marks every queue's packets ECN-capable");
                let want = match p.seq {
                    s if s < 2 * MSS => 0,
                    s if s < 10 * MSS + 700 => 1, // the packet at 10*MSS starts below the threshold
                    s if s < 60 * MSS => 2,
                    _ => 3,
                };
                assert_eq!(p.priority, want, "seq {}", p.seq);
                seen[want as usize] = true;
            }
            assert_eq!(seen, [true; 4]);
            assert_eq!(o.sent.iter().find(|p| p.seq == 11 * MSS).unwrap().priority, 2);
            assert!(s.stats().retransmits > 0, "seed {seed}: the losses are exercised");

            // the same transfer with plain DCTCP: identical packets, times and counters
            let mut t = TcpSender::new(cfg.tcp, 9, 1, 2, size, 0);
            let mut tr = TcpReceiver::new(cfg.tcp, 9, 2, 1, size);
            let base = acked_pipe(&mut t, &mut tr, 5 * US, random_loss(seed, 0.05, 0.05), 10_000 * MS);
            let strip = |v: &[Packet]| v.iter().map(|p| Packet { priority: 0, ..*p }).collect::<Vec<_>>();
            assert_eq!(strip(&o.sent), strip(&base.sent), "seed {seed}");
            assert_eq!((o.delivered, o.sender_done_at), (base.delivered, base.sender_done_at));
            assert_eq!(s.stats(), t.stats());
            assert_eq!(s.tcp().cwnd_bytes(), t.cwnd_bytes());
        }
    }

    #[test]
    fn acks_ride_the_top_queue() {
        let cfg = PiasConfig::new(dctcp(), &[MSS]);
        let mut s = PiasSender::new(cfg, 9, 1, 2, 3 * MSS, 0);
        let mut r = PiasSender::receiver(&cfg, 9, 2, 1, 3 * MSS);
        let w: Vec<Packet> = std::iter::from_fn(|| s.poll_transmit(0)).collect();
        assert_eq!(w.iter().map(|p| p.priority).collect::<Vec<_>>(), vec![0, 1, 1]);
        for p in &w {
            r.handle_packet(1, p);
        }
        let acks: Vec<Packet> = std::iter::from_fn(|| r.poll_transmit(1)).collect();
        assert_eq!(acks.len(), 3);
        assert!(acks.iter().all(|a| a.kind == PacketKind::Ack && a.priority == 0));
        for a in &acks {
            s.handle_packet(2, a);
        }
        assert_eq!(s.poll_event(), Some(EndpointEvent::SenderDone));
    }

    #[test]
    fn pias_thresholds_are_the_size_quantiles_and_strictly_increase() {
        let sizes = (1..=800u64).map(|i| i * 1000);
        assert_eq!(thresholds_for(sizes, 8), vec![101_000, 201_000, 301_000, 401_000, 501_000, 601_000, 701_000]);
        // repeated sizes collapse into one threshold
        let few = [5u64, 5, 5, 5, 9, 9, 9, 9].into_iter();
        assert_eq!(thresholds_for(few, 4), vec![5, 9]);
        assert!(thresholds_for(std::iter::empty(), 8).is_empty());
    }
}
