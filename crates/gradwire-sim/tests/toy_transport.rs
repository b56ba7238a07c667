//! A transport registered from a test module proves what docs/ARCHITECTURE.md's "Adding a
//! transport" says: one module with its keys, its check and its endpoints, and one
//! `register` call; the simulator's `[transport]` then takes its name and keys, validates
//! them under `transport.<key>`, and runs it, without a line changed in the simulator.
//!
//! "Toy": the sender blasts every segment once (in the packet's configured queue, at
//! whatever rate the NIC asks), the receiver answers the last byte with one ACK and
//! resends nothing; a lossless fabric is all it needs.

use gradwire_core::packet::{Packet, PacketKind};
use gradwire_core::time::Time;
use gradwire_core::transport::{
    registry, Build, Config, ConfigError, Endpoint, EndpointEvent, EndpointStats, Info, Key, KeySet, KeyType, Pair,
    Transfer, TransportSpec, Value,
};
use gradwire_sim::load;
use gradwire_sim::sim::Simulation;

static KEYS: KeySet = KeySet {
    name: "toy",
    keys: &[Key::new(
        "toy_segment_bytes",
        KeyType::U32,
        Value::Int(1000),
        ["integer > 0, bytes", "`1000`", "Payload bytes per toy packet."],
    )],
    check: |cfg| match cfg.values.u32("toy_segment_bytes") {
        0 => Err(ConfigError::new("toy_segment_bytes", "must be positive (got 0)")),
        _ => Ok(()),
    },
};
static SETS: [&KeySet; 1] = [&KEYS];

struct Toy;
static TOY: Toy = Toy;

impl TransportSpec for Toy {
    fn info(&self) -> Info {
        Info::new("toy", "A test's transport: every segment once, one ACK at the end.", &SETS)
    }
    fn builder(&self, cfg: &Config) -> Result<Box<dyn Build>, ConfigError> {
        let c = cfg.common;
        Ok(Box::new(ToyBuild {
            seg: cfg.values.u32("toy_segment_bytes"),
            header: c.header_bytes,
            priority: c.priority,
        }))
    }
}

struct ToyBuild {
    seg: u32,
    header: u32,
    priority: u8,
}

impl Build for ToyBuild {
    fn build(&self, t: &Transfer, _now: Time, _hosts: &mut gradwire_core::transport::Hosts) -> Pair {
        let s = ToySender {
            t: *t,
            seg: self.seg,
            header: self.header,
            priority: self.priority,
            next: 0,
            done: false,
            stats: EndpointStats::default(),
            event: None,
        };
        let r = ToyReceiver {
            t: *t,
            header: self.header,
            got: 0,
            ack_due: false,
            stats: EndpointStats::default(),
            event: None,
        };
        (Box::new(s), Box::new(r))
    }
    fn data_priority(&self) -> u8 {
        self.priority
    }
}

/// What both toy ends answer alike: no timer, the one pending event, their counters.
macro_rules! toy_endpoint_common {
    () => {
        fn handle_timeout(&mut self, _now: Time) {}
        fn poll_timeout(&self) -> Option<Time> {
            None
        }
        fn poll_event(&mut self) -> Option<EndpointEvent> {
            self.event.take()
        }
        fn stats(&self) -> EndpointStats {
            self.stats
        }
    };
}

struct ToySender {
    t: Transfer,
    seg: u32,
    header: u32,
    priority: u8,
    next: u64,
    done: bool,
    stats: EndpointStats,
    event: Option<EndpointEvent>,
}

impl Endpoint for ToySender {
    fn handle_packet(&mut self, _now: Time, p: &Packet) {
        if p.kind == PacketKind::Ack && p.flow == self.t.flow && !self.done {
            self.done = true;
            self.event = Some(EndpointEvent::SenderDone);
        }
    }
    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        if self.next >= self.t.bytes {
            return None;
        }
        let len = (self.t.bytes - self.next).min(self.seg as u64) as u32;
        let mut p = Packet::data(self.t.flow, self.t.src, self.t.dst, self.next, len, self.header);
        p.priority = self.priority;
        p.sent_at = now;
        self.next += len as u64;
        self.stats.count_data(false);
        Some(p)
    }
    toy_endpoint_common!();
}

struct ToyReceiver {
    t: Transfer,
    header: u32,
    got: u64,
    ack_due: bool,
    stats: EndpointStats,
    event: Option<EndpointEvent>,
}

impl Endpoint for ToyReceiver {
    fn handle_packet(&mut self, _now: Time, p: &Packet) {
        if p.kind != PacketKind::Data || p.flow != self.t.flow {
            return;
        }
        self.got += p.len as u64;
        if self.got == self.t.bytes {
            self.ack_due = true;
            self.event = Some(EndpointEvent::Delivered { bytes: self.got });
        }
    }
    fn poll_transmit(&mut self, _now: Time) -> Option<Packet> {
        if !std::mem::take(&mut self.ack_due) {
            return None;
        }
        self.stats.packets_sent += 1;
        Some(Packet::ack(self.t.flow, self.t.dst, self.t.src, self.got, self.header))
    }
    toy_endpoint_common!();
}

const SCENARIO: &str =
    "stop_ms = 100.0\n[topology]\nleaves = 2\nspines = 1\nuplinks_per_leaf = 1\nhosts_per_leaf = 4\n\
                        [switch]\nbuffer_bytes = 100000000\n[transport]\nkind = \"toy\"\ntoy_segment_bytes = 1400\n\
                        [workload]\nkind = \"incast\"\nsenders = 3\nflow_bytes = 100000\n";

#[test]
fn a_transport_registered_from_a_test_runs_in_the_simulator() {
    registry::register(&TOY).unwrap();
    assert!(registry::register(&TOY).is_err(), "a name is registered once");

    let s = &load(SCENARIO, &[]).unwrap()[0].scenario;
    assert_eq!(s.transport.kind.name(), "toy");
    assert_eq!(s.transport.keys.u32("toy_segment_bytes"), 1400);
    let mut sim = Simulation::new(s).unwrap();
    sim.run();
    assert!(sim.conservation().holds());
    let p = sim.progress();
    assert_eq!((p.flows_done, p.flows_total), (3, 3), "every flow finished");
    // 100 000 bytes in 1400-byte packets: 72 data packets per flow, and its ACK
    let sent: u64 = (0..3).map(|f| sim.flow_stats(f).packets_sent).sum();
    assert_eq!(sent, 3 * 72);

    // its key is a scenario key: refused under its name, unknown to the other keys' checks
    let e = load(SCENARIO, &["transport.toy_segment_bytes=0".into()]).unwrap_err();
    assert_eq!((e.key.as_str(), e.message.as_str()), ("transport.toy_segment_bytes", "must be positive (got 0)"));
    let e = load(SCENARIO, &["transport.toy_segment_bytes=-1".into()]).unwrap_err();
    assert_eq!(e.key, "transport.toy_segment_bytes");
    // the other transports' keys still work beside it, and it is written back by name
    let dctcp = load(SCENARIO, &["transport.kind=dctcp".into()]).unwrap();
    assert_eq!(dctcp[0].scenario.transport.keys.u32("toy_segment_bytes"), 1400);
    let json = serde_json::to_value(&s.transport).unwrap();
    assert_eq!((json["kind"].as_str(), json["toy_segment_bytes"].as_u64()), (Some("toy"), Some(1400)));
    // and it is in the generated docs table
    assert!(gradwire_sim::scenario::transport_docs_tables().contains("| `toy_segment_bytes` |"));
}
