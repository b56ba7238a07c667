//! Simulated and real time as integer picoseconds.
//!
//! Picoseconds keep serialization exact at datacenter rates: a 40-byte ACK on a
//! 400 Gbit/s link takes 800 ps, which nanoseconds would round away.

/// A point in time or a duration, in picoseconds. `u64` covers 213 days.
pub type Time = u64;

/// One picosecond, the unit of [`Time`].
pub const PS: Time = 1;
/// One nanosecond in [`Time`] units (ps).
pub const NS: Time = 1_000;
/// One microsecond in [`Time`] units (ps).
pub const US: Time = 1_000_000;
/// One millisecond in [`Time`] units (ps).
pub const MS: Time = 1_000_000_000;
/// One second in [`Time`] units (ps).
pub const SEC: Time = 1_000_000_000_000;

/// Time to serialize `bytes` onto a link of `bits_per_sec`, rounded up to a picosecond.
#[inline]
pub fn serialization(bytes: u32, bits_per_sec: u64) -> Time {
    let bits = bytes as u128 * 8 * SEC as u128;
    bits.div_ceil(bits_per_sec as u128) as Time
}

/// Convert microseconds given as a float (config files) to [`Time`].
pub fn from_us(us: f64) -> Time {
    (us * US as f64).round() as Time
}

/// Convert [`Time`] to nanoseconds (outputs are in ns).
pub fn to_ns(t: Time) -> u64 {
    t / NS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialization_is_exact_at_100g() {
        assert_eq!(serialization(1500, 100_000_000_000), 120 * NS);
        assert_eq!(serialization(40, 400_000_000_000), 800 * PS);
        // rounds up, never down
        assert_eq!(serialization(1, 3), 2_666_666_666_667);
    }
}
