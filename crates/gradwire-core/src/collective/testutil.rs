//! Test helpers: gradients with exact sums, the reference executor, every rank's
//! [`RankExec`] driven together with starts and deliveries interleaved at random, and a
//! race check on the dependency graph.

use super::{execute_in_memory, Op, Rank, RankExec, Schedule, TransferId};

/// Small integers, so every f32 sum is exact; zero for `zeroed` ranks.
pub fn gradients(s: &Schedule, zeroed: &[Rank]) -> Vec<Vec<f32>> {
    let elems = (s.bytes / s.elem_bytes as u64) as usize;
    (0..s.world)
        .map(|r| {
            (0..elems)
                .map(|j| if zeroed.contains(&r) { 0.0 } else { ((r as usize * 31 + j * 7) % 13 + 1) as f32 })
                .collect()
        })
        .collect()
}

fn expected(inputs: &[Vec<f32>], workers: &[Rank]) -> Vec<f32> {
    let mut sum = vec![0.0; inputs[0].len()];
    for &w in workers {
        sum.iter_mut().zip(&inputs[w as usize]).for_each(|(s, v)| *s += v);
    }
    sum
}

/// Every rank ends with the sum of every rank's gradient.
pub fn check_allreduce(s: &Schedule, zeroed: &[Rank]) {
    let workers: Vec<Rank> = (0..s.world).filter(|r| !zeroed.contains(r)).collect();
    check_allreduce_among(s, &workers, zeroed);
}

/// `workers` end with the sum of their gradients (`zeroed` ranks start from zeros), with
/// the reference executor and with all ranks' `RankExec`s under a few random interleavings.
pub fn check_allreduce_among(s: &Schedule, workers: &[Rank], zeroed: &[Rank]) {
    s.validate().unwrap_or_else(|e| panic!("{}: {e}", s.name));
    if s.world == 0 {
        return;
    }
    let inputs = gradients(s, zeroed);
    let want = expected(&inputs, workers);
    let mut bufs = inputs.clone();
    execute_in_memory(s, &mut bufs);
    for &w in workers {
        assert_eq!(
            bufs[w as usize], want,
            "{} (world {}, {} bytes): rank {w} after execute_in_memory",
            s.name, s.world, s.bytes
        );
    }
    assert_race_free(s);
    for seed in 1..=3 {
        let mut bufs = inputs.clone();
        drive_rank_execs(s, &mut bufs, seed);
        for &w in workers {
            assert_eq!(bufs[w as usize], want, "{}: rank {w} after RankExecs (seed {seed})", s.name);
        }
    }
}

/// splitmix64: a tiny deterministic generator for interleavings.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What the world still has to do: tell the sender its send is done, or deliver and apply
/// the bytes read when the transfer started.
enum Pending {
    SenderDone(TransferId),
    Deliver(TransferId, Vec<f32>),
}

/// Runs the schedule the way a world does: each rank's `RankExec` says which sends may
/// start; a started transfer snapshots the sender's range; its sender-side completion and
/// its delivery (apply + receiver-side completion) happen later, in random order among
/// everything pending. Panics unless every rank completes and every transfer ran once.
pub fn drive_rank_execs(s: &Schedule, bufs: &mut [Vec<f32>], seed: u64) {
    let e = s.elem_bytes as u64;
    let mut execs: Vec<RankExec> = (0..s.world).map(|r| RankExec::new(s, r)).collect();
    let mut started = vec![false; s.transfers.len()];
    let mut pending: Vec<Pending> = Vec::new();
    let mut rng = seed;
    loop {
        for ex in &mut execs {
            while let Some(id) = ex.poll_ready() {
                let t = &s.transfers[id as usize];
                assert_eq!(t.src, ex.rank(), "RankExec {} offered transfer {id} of rank {}", ex.rank(), t.src);
                assert!(!std::mem::replace(&mut started[id as usize], true), "transfer {id} started twice");
                let data = bufs[t.src as usize][(t.range.start / e) as usize..(t.range.end / e) as usize].to_vec();
                pending.push(Pending::SenderDone(id));
                pending.push(Pending::Deliver(id, data));
            }
        }
        if pending.is_empty() {
            break;
        }
        let k = (next(&mut rng) % pending.len() as u64) as usize;
        match pending.swap_remove(k) {
            Pending::SenderDone(id) => execs[s.transfers[id as usize].src as usize].finished(s, id).unwrap(),
            Pending::Deliver(id, data) => {
                let t = &s.transfers[id as usize];
                let dst = &mut bufs[t.dst as usize][(t.range.start / e) as usize..(t.range.end / e) as usize];
                match t.op {
                    Op::Reduce => dst.iter_mut().zip(&data).for_each(|(d, v)| *d += v),
                    Op::Copy => dst.copy_from_slice(&data),
                }
                execs[t.dst as usize].finished(s, id).unwrap();
            }
        }
    }
    assert!(started.iter().all(|&x| x), "{}: some transfers never started", s.name);
    for ex in &execs {
        assert!(ex.is_complete(), "{}: rank {} has {} open transfers", s.name, ex.rank(), ex.open());
    }
}

/// No two accesses to overlapping bytes at one rank are unordered when order matters: a
/// send's read against a receive's write, or a `Copy` against any other receive. "Ordered"
/// means one transfer transitively depends on the other (deps here are on receives, so a
/// dependency's bytes are applied before the dependant starts).
pub fn assert_race_free(s: &Schedule) {
    let n = s.transfers.len();
    // reach[i]: transfers i transitively depends on (bitset)
    let words = n.div_ceil(64);
    let mut reach = vec![vec![0u64; words]; n];
    let mut order: Vec<usize> = Vec::with_capacity(n);
    let mut indeg: Vec<usize> = s.transfers.iter().map(|t| t.after.len()).collect();
    let mut deps_of = vec![Vec::new(); n];
    for (i, t) in s.transfers.iter().enumerate() {
        for &d in &t.after {
            deps_of[d as usize].push(i);
            assert_eq!(
                s.transfers[d as usize].dst, t.src,
                "{}: transfer {i} depends on a send; generators only depend on receives",
                s.name
            );
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    while let Some(i) = ready.pop() {
        order.push(i);
        for &j in &deps_of[i] {
            indeg[j] -= 1;
            if indeg[j] == 0 {
                ready.push(j);
            }
        }
    }
    for &i in &order {
        let mut bits = vec![0u64; words];
        for &d in &s.transfers[i].after {
            let d = d as usize;
            bits[d / 64] |= 1 << (d % 64);
            for (b, r) in bits.iter_mut().zip(&reach[d]) {
                *b |= r;
            }
        }
        reach[i] = bits;
    }
    let before = |a: usize, b: usize| reach[b][a / 64] >> (a % 64) & 1 == 1;
    let overlap = |a: usize, b: usize| {
        let (x, y) = (&s.transfers[a].range, &s.transfers[b].range);
        x.start < y.end && y.start < x.end
    };
    for a in 0..n {
        for b in a + 1..n {
            if !overlap(a, b) || before(a, b) || before(b, a) {
                continue;
            }
            let (ta, tb) = (&s.transfers[a], &s.transfers[b]);
            let read_write = ta.src == tb.dst || tb.src == ta.dst;
            let write_write = ta.dst == tb.dst && (ta.op == Op::Copy || tb.op == Op::Copy);
            assert!(!read_write && !write_write, "{}: transfers {a} {ta:?} and {b} {tb:?} race", s.name);
        }
    }
}
