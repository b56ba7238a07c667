//! Packet tagging at the end host (DLCP §3.2.2): priority by layer, importance by
//! gradient magnitude.
//!
//! Priority queues: queue 0 is served first and is reserved for control messages
//! (DLCP §4.2), so the `P` data priorities use queues `1..=P`, `P <= 7`. Layer `x` of `L`
//! gets data priority `floor(x * P / L)` and queue `1 + floor(x * P / L)`: front layers
//! (small `x`, needed first by the next forward pass) get the lower queue numbers, i.e.
//! higher priority, and — with the switch's lower drop thresholds on those queues — are
//! also the first to be dropped, as the paper wants.
//!
//! Importance: a segment is important (sent ECN-capable, so a switch marks it instead of
//! dropping it) iff the mean `|g|` of its elements is at least the tensor's median `|g|`,
//! estimated from a deterministic 0.1% sample.

/// Queue reserved for control messages.
pub const CTRL_QUEUE: u8 = 0;
/// Data priorities available once queue 0 is reserved (8 queues in all).
pub const MAX_DATA_PRIORITIES: u8 = 7;
/// Share of a tensor's elements sampled to estimate the median magnitude.
pub const MEDIAN_SAMPLE_FRACTION: f64 = 0.001;

/// Data priority `floor(x * P / L)` in `0..P` of layer `x` of `layers`, over `priorities`.
/// Out-of-range inputs are clamped (`x` to `L - 1`, `P` to `1..=7`); `L = 0` gives 0.
pub fn layer_priority(x: u32, layers: u32, priorities: u8) -> u8 {
    if layers == 0 {
        return 0;
    }
    let p = priorities.clamp(1, MAX_DATA_PRIORITIES) as u64;
    let x = x.min(layers - 1) as u64;
    (x * p / layers as u64) as u8
}

/// Switch queue of layer `x`: `1 + layer_priority(x, L, P)`, in `1..=P`.
pub fn layer_queue(x: u32, layers: u32, priorities: u8) -> u8 {
    1 + layer_priority(x, layers, priorities)
}

/// Median `|g|` over an evenly spaced deterministic sample of `ceil(n * fraction)`
/// elements (at least one). Lower median for an even sample; 0.0 for an empty tensor.
pub fn sample_median_abs(grads: &[f32], fraction: f64) -> f32 {
    let n = grads.len();
    if n == 0 {
        return 0.0;
    }
    let k = ((n as f64 * fraction).ceil() as usize).clamp(1, n);
    let mut s: Vec<f32> = (0..k).map(|i| grads[i * n / k].abs()).collect();
    s.sort_unstable_by(f32::total_cmp);
    s[(k - 1) / 2]
}

/// Per segment of `elems_per_seg` elements: is its mean `|g|` at least `threshold`?
pub fn importance_with_threshold(grads: &[f32], elems_per_seg: usize, threshold: f32) -> Vec<bool> {
    grads
        .chunks(elems_per_seg.max(1))
        .map(|c| {
            let sum: f64 = c.iter().map(|g| g.abs() as f64).sum();
            sum / c.len() as f64 >= threshold as f64
        })
        .collect()
}

/// DLCP's importance mask: threshold is the sampled median (0.1% sample).
pub fn importance_mask(grads: &[f32], elems_per_seg: usize) -> Vec<bool> {
    importance_with_threshold(grads, elems_per_seg, sample_median_abs(grads, MEDIAN_SAMPLE_FRACTION))
}

/// Tagging without gradient values (simulation): segment `index` of `tensor` is important
/// with probability `fraction`, decided by a seeded hash so every run agrees.
pub fn synthetic_important(seed: u64, tensor: u32, index: u64, fraction: f64) -> bool {
    let h = splitmix64(seed ^ splitmix64(((tensor as u64) << 40) ^ index));
    ((h >> 11) as f64 / (1u64 << 53) as f64) < fraction
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
