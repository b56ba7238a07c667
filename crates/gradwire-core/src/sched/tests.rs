use std::collections::{BTreeMap, VecDeque};

use proptest::prelude::*;

use super::*;

#[test]
fn configs_that_cannot_run_are_refused() {
    assert_eq!(Config::new(0, 4), Err(ConfigError::ZeroPartition));
    let c = Config { partition_bytes: 4_000_000, credit_bytes: 1_000_000 };
    assert!(matches!(c.validate(), Err(ConfigError::CreditBelowPartition { .. })));
    assert!(Scheduler::new(c, Order::FrontLayerFirst).is_err());
    assert_eq!(Config::new(2_000_000, 3).unwrap().credit_bytes, 6_000_000);
    assert!(Config::UNSCHEDULED.validate().is_ok() && Config::P3.validate().is_ok());
}

#[test]
fn a_tensor_is_cut_into_partitions_of_the_configured_size() {
    let mut s = Scheduler::new(Config::new(1000, 100).unwrap(), Order::FrontLayerFirst).unwrap();
    s.post(7, 3, 2500).unwrap();
    let parts: Vec<_> = std::iter::from_fn(|| s.poll_start()).collect();
    let cuts: Vec<_> = parts.iter().map(|p| (p.tensor, p.layer, p.offset, p.len)).collect();
    assert_eq!(cuts, [(7, 3, 0, 1000), (7, 3, 1000, 1000), (7, 3, 2000, 500)]);
    assert_eq!(s.in_flight_bytes(), 2500);
}

#[test]
fn the_queue_is_bounded_whatever_the_sizes() {
    let mut s = Scheduler::new(Config::new(1, 1).unwrap(), Order::FrontLayerFirst).unwrap();
    let too_many = Err(SchedError::TooManyPartitions { tensor: 1, partitions: u64::MAX });
    assert_eq!(s.post(1, 0, u64::MAX), too_many, "refused before a partition is cut");
    s.post(2, 0, 10).unwrap();
    let fills = MAX_QUEUED_PARTITIONS - 9;
    let over = Err(SchedError::TooManyPartitions { tensor: 3, partitions: fills });
    assert_eq!(s.post(3, 0, fills), over, "counts what is queued already");
    let mut s = Scheduler::new(Config::new(1 << 30, 1).unwrap(), Order::FrontLayerFirst).unwrap();
    s.post(1, 0, 1 << 40).unwrap();
    assert!(matches!(s.post(2, 0, u64::MAX), Err(SchedError::TooManyPartitions { .. })), "bytes past u64");
    assert_eq!(
        s.reconfigure(Config::new(1, 1).unwrap()),
        Err(ConfigError::TooManyPartitions { partitions: 1 << 40 }),
        "re-cutting is bounded too"
    );
    assert_eq!(s.queued_partitions(), 1 << 10, "a refused reconfiguration changes nothing");
}

#[test]
fn the_window_holds_back_until_a_partition_completes() {
    let mut s = Scheduler::new(Config::new(1000, 2).unwrap(), Order::FrontLayerFirst).unwrap();
    s.post(1, 0, 5000).unwrap();
    let a = s.poll_start().unwrap();
    let _b = s.poll_start().unwrap();
    assert_eq!(s.poll_start(), None, "credit of 2 partitions is used up");
    s.complete(a.id).unwrap();
    assert!(s.poll_start().is_some());
    assert_eq!(s.complete(a.id), Err(SchedError::NotInFlight(a.id)));
    assert_eq!(s.post(2, 0, 0), Err(SchedError::EmptyTensor { tensor: 2 }));
}

#[test]
fn front_layers_overtake_back_layers_posted_earlier() {
    // Backward propagation posts the back layer first.
    for (order, want) in [(Order::FrontLayerFirst, [0, 1, 2]), (Order::Fifo, [2, 1, 0])] {
        let mut s = Scheduler::new(Config::new(100, 1).unwrap(), order).unwrap();
        for layer in [2, 1, 0] {
            s.post(u64::from(layer), layer, 100).unwrap();
        }
        let mut got = vec![];
        while let Some(p) = s.poll_start() {
            got.push(p.layer);
            s.complete(p.id).unwrap();
        }
        assert_eq!(got, want, "{order:?}");
    }
}

#[test]
fn unscheduled_sends_whole_tensors_at_once() {
    let mut s = Scheduler::new(Config::UNSCHEDULED, Order::Fifo).unwrap();
    s.post(0, 1, 90_000_000).unwrap();
    s.post(1, 0, 1).unwrap();
    assert_eq!(s.poll_start().map(|p| p.len), Some(90_000_000));
    assert_eq!(s.poll_start().map(|p| p.len), Some(1));
    assert!(s.poll_start().is_none() && s.queued_partitions() == 0);
}

#[test]
fn a_smaller_window_waits_for_the_bytes_already_in_flight() {
    let mut s = Scheduler::new(Config::new(1000, 4).unwrap(), Order::FrontLayerFirst).unwrap();
    s.post(1, 0, 8000).unwrap();
    let started: Vec<_> = std::iter::from_fn(|| s.poll_start()).collect();
    assert_eq!(started.len(), 4);
    s.reconfigure(Config::new(1000, 1).unwrap()).unwrap();
    s.complete(started[0].id).unwrap();
    assert!(s.poll_start().is_none(), "3000 bytes still in flight against a 1000-byte credit");
    for p in &started[1..] {
        s.complete(p.id).unwrap();
    }
    assert!(s.poll_start().is_some());
    assert!(s.reconfigure(Config { partition_bytes: 0, credit_bytes: 1 }).is_err());
    assert_eq!(s.config(), Config::new(1000, 1).unwrap(), "a refused configuration changes nothing");
}

/// One step of a driver: post a tensor, start what the window admits, complete the oldest
/// partition in flight, or change `⟨S_p, S_c⟩`.
#[derive(Clone, Debug)]
enum Op {
    Post { layer: u32, bytes: u64 },
    Start,
    Complete,
    Reconfigure { partition: u64, multiple: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..8, 1u64..20_000).prop_map(|(layer, bytes)| Op::Post { layer, bytes }),
        Just(Op::Start),
        Just(Op::Start),
        Just(Op::Complete),
        (1u64..6_000, 1u64..5).prop_map(|(partition, multiple)| Op::Reconfigure { partition, multiple }),
    ]
}

proptest! {
    /// Whatever the driver does: every byte of every tensor is sent exactly once, the bytes
    /// in flight never exceed the credit in force when a partition starts, and with a credit
    /// of one partition each start is the front-most ready partition.
    #[test]
    fn partitions_cover_tensors_exactly_once_within_the_credit(
        partition in 1u64..6_000,
        multiple in 1u64..5,
        front_first in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let order = if front_first { Order::FrontLayerFirst } else { Order::Fifo };
        let mut s = Scheduler::new(Config::new(partition, multiple).unwrap(), order).unwrap();
        let mut sizes: BTreeMap<u64, u64> = BTreeMap::new();
        let mut sent: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
        let mut flying: VecDeque<Partition> = VecDeque::new();
        // Queued bytes per layer (a re-cut changes partition counts, not bytes).
        let mut queued_layers: BTreeMap<u32, u64> = BTreeMap::new();
        let start = |s: &mut Scheduler, flying: &mut VecDeque<Partition>, sent: &mut BTreeMap<u64, Vec<(u64, u64)>>, queued_layers: &mut BTreeMap<u32, u64>| {
            let front = queued_layers.keys().next().copied();
            let before = s.in_flight_bytes();
            let credit = s.config().credit_bytes;
            if let Some(p) = s.poll_start() {
                prop_assert!(s.in_flight_bytes() <= credit, "{} in flight > credit {}", s.in_flight_bytes(), credit);
                prop_assert_eq!(s.in_flight_bytes(), before + p.len);
                if order == Order::FrontLayerFirst {
                    prop_assert_eq!(Some(p.layer), front, "not the front-most ready layer");
                }
                let n = queued_layers.get_mut(&p.layer).unwrap();
                *n -= p.len;
                if *n == 0 {
                    queued_layers.remove(&p.layer);
                }
                sent.entry(p.tensor).or_default().push((p.offset, p.len));
                flying.push_back(p);
            } else {
                // Refused only when nothing is queued or the window is too full for the head:
                // never with an empty window (no queued partition outgrows S_p ≤ S_c).
                prop_assert!(s.queued_partitions() == 0 || before > 0);
            }
            Ok(())
        };
        for op in ops {
            match op {
                Op::Post { layer, bytes } => {
                    let t = sizes.len() as u64;
                    s.post(t, layer, bytes).unwrap();
                    *queued_layers.entry(layer).or_default() += bytes;
                    sizes.insert(t, bytes);
                }
                Op::Start => start(&mut s, &mut flying, &mut sent, &mut queued_layers)?,
                Op::Complete => {
                    if let Some(p) = flying.pop_front() {
                        s.complete(p.id).unwrap();
                    }
                }
                Op::Reconfigure { partition, multiple } => {
                    s.reconfigure(Config::new(partition, multiple).unwrap()).unwrap();
                }
            }
        }
        // Drain: everything posted goes out.
        loop {
            start(&mut s, &mut flying, &mut sent, &mut queued_layers)?;
            if s.queued_partitions() == 0 {
                break;
            }
            if let Some(p) = flying.pop_front() {
                s.complete(p.id).unwrap();
            }
        }
        while let Some(p) = flying.pop_front() {
            s.complete(p.id).unwrap();
        }
        prop_assert!(s.is_idle());
        prop_assert_eq!(s.in_flight_bytes(), 0);
        for (t, bytes) in &sizes {
            let mut pieces = sent.remove(t).unwrap_or_default();
            pieces.sort();
            let mut at = 0;
            for (offset, len) in pieces {
                prop_assert_eq!(offset, at, "tensor {} has a gap or an overlap", t);
                prop_assert!(len > 0);
                at += len;
            }
            prop_assert_eq!(at, *bytes);
        }
        prop_assert!(sent.is_empty());
    }

    /// With a credit of one partition, starts follow the layers strictly front first when
    /// every tensor is ready up front.
    #[test]
    fn credit_of_one_partition_is_strictly_front_first(
        layers in proptest::collection::vec((0u32..20, 1u64..5_000), 1..40),
        partition in 1u64..2_000,
    ) {
        let mut s = Scheduler::new(Config::new(partition, 1).unwrap(), Order::FrontLayerFirst).unwrap();
        for (t, (layer, bytes)) in layers.iter().enumerate() {
            s.post(t as u64, *layer, *bytes).unwrap();
        }
        let mut last = 0;
        while let Some(p) = s.poll_start() {
            prop_assert!(p.layer >= last);
            last = p.layer;
            prop_assert!(s.in_flight_bytes() <= partition);
            s.complete(p.id).unwrap();
        }
        prop_assert!(s.is_idle());
    }
}
