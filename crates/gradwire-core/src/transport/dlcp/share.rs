//! The receiver-informed rate ([`RateHint::ReceiverShare`], a deviation from dlcp.md).
//!
//! Into an N-to-1 incast the minimal rate control's aggregate additive increase is N steps
//! per period, so the senders overshoot the receiver's link every period and the steady
//! state sits at the loss threshold. The receiving host is the one place that knows how
//! many hosts send into its link: its receivers note each remote host whose data arrived
//! in their period ([`HostLoad`]), and every RATE report also carries the host's fair
//! share, its link rate over that count. The sender holds its rate at or below the share.

use std::sync::Mutex;

use crate::packet::HostId;
use crate::time::Time;

/// What a DLCP receive-rate report carries besides the receive rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RateHint {
    /// The receive rate only (dlcp.md).
    #[default]
    None,
    /// Also the receiving host's fair share: its link rate over the number of hosts whose
    /// data reached it in the last period and a half; the sender caps its rate there.
    ReceiverShare,
}

/// The remote hosts with data arriving at one receiving host, shared by its DLCP receivers.
///
/// The share is an allowance `Λ` of the host's link split evenly over the remote hosts
/// seen sending: `Λ / N`. `Λ` starts at the link rate (the share is then the fair share of
/// a saturated link) and follows the host's measured arrival rate `A` once per period,
/// within `[link, N·link]`: below `η` of the link (η = 0.95), `Λ += (η·link − A) / 2`, so
/// a link left idle by senders limited elsewhere (another bottleneck, data not ready yet)
/// raises the others' share; at `η` or more the excess `Λ − link` halves, back toward the
/// fair share (a full link does not show how far the senders overshoot it). A burst of
/// new senders divides `Λ` among more hosts at once.
#[derive(Debug)]
pub struct HostLoad {
    link_bps: u64,
    state: Mutex<LoadState>,
}

#[derive(Debug)]
struct LoadState {
    /// Each remote host, and when a receiver here last found its data in a period.
    seen: Vec<(HostId, Time)>,
    allowance_bps: f64,
    /// Wire bytes the receivers reported since `measured_from`.
    bytes: u64,
    measured_from: Time,
}

impl HostLoad {
    /// Target utilization of the host's link: the allowance shrinks above it.
    const UTILIZATION: f64 = 0.95;

    /// The load of a host whose link carries `link_bps` bit/s.
    pub fn new(link_bps: u64) -> Self {
        let link_bps = link_bps.max(1);
        let state = LoadState { seen: Vec::new(), allowance_bps: link_bps as f64, bytes: 0, measured_from: 0 };
        HostLoad { link_bps, state: Mutex::new(state) }
    }

    /// A receiver here ends a period of length `period` at `now`, in which `bytes` wire
    /// bytes of `remote`'s data arrived. Returns the host's share in bit/s: the allowance
    /// over the remote hosts seen within a period and a half before `now` (at least one).
    pub fn report(&self, remote: HostId, bytes: u64, now: Time, period: Time) -> u64 {
        let mut st = self.state.lock().expect("not poisoned");
        let period = period.max(1);
        if bytes > 0 {
            match st.seen.iter_mut().find(|(h, _)| *h == remote) {
                Some((_, at)) => *at = now,
                None => st.seen.push((remote, now)),
            }
        }
        let window = period + period / 2;
        st.seen.retain(|&(_, at)| at.saturating_add(window) >= now);
        let n = st.seen.len().max(1) as f64;
        let link = self.link_bps as f64;
        st.bytes += bytes;
        let elapsed = now.saturating_sub(st.measured_from);
        if elapsed > 2 * period {
            // idle in between: measure afresh rather than read the gap as a free link
            (st.bytes, st.measured_from) = (bytes, now.saturating_sub(period));
        } else if elapsed >= period {
            let arrival = st.bytes as f64 * 8.0 * crate::time::SEC as f64 / elapsed as f64;
            let allowance = if arrival < Self::UTILIZATION * link {
                st.allowance_bps + (Self::UTILIZATION * link - arrival) / 2.0
            } else {
                // a full link hides how far the senders overshoot it: halve the excess
                link + (st.allowance_bps - link) / 2.0
            };
            st.allowance_bps = allowance.clamp(link, n * link);
            (st.bytes, st.measured_from) = (0, now);
        }
        (st.allowance_bps.min(n * link) / n) as u64
    }
}

/// A RATE argument under [`RateHint::ReceiverShare`]: `share:32 | receive rate:32`, both
/// in kbit/s and saturated (4.29 Tbit/s); a share of 0 means none. Without the hint the
/// argument is the receive rate in bit/s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RateReport {
    pub recv_bps: u64,
    pub share_bps: Option<u64>,
}

impl RateReport {
    const KBPS: u64 = 1000;

    pub fn pack(self, hint: RateHint) -> u64 {
        let kbps = |bps: u64| (bps / Self::KBPS).min(u32::MAX as u64);
        match hint {
            RateHint::None => self.recv_bps,
            RateHint::ReceiverShare => {
                // a share below 1 kbit/s still caps: it must not read as "none"
                let share = self.share_bps.map_or(0, |s| kbps(s).max(1));
                share << 32 | kbps(self.recv_bps)
            }
        }
    }

    /// Any argument unpacks (a report is unauthenticated data from the network).
    pub fn unpack(arg: u64, hint: RateHint) -> Self {
        match hint {
            RateHint::None => RateReport { recv_bps: arg, share_bps: None },
            RateHint::ReceiverShare => {
                let share = arg >> 32;
                RateReport {
                    recv_bps: (arg & u32::MAX as u64) * Self::KBPS,
                    share_bps: (share > 0).then_some(share * Self::KBPS),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::US;

    #[test]
    fn the_share_is_the_link_over_the_hosts_seen_while_the_link_is_busy() {
        let link = 100_000_000_000u64;
        let p = 100 * US;
        // a period's worth of bytes at `gbps`
        let bytes = |gbps: u64| gbps * 1_000_000_000 / 8 * p / crate::time::SEC;
        let load = HostLoad::new(link);
        assert_eq!(load.report(1, 0, 0, p), link, "nobody seen: the whole link");
        for k in 1..=8u32 {
            // k hosts, each noted by some receiver here, the link full; host 1 twice
            let share = (1..=k).map(|h| load.report(h, bytes(100) / k as u64, 10 * US, p)).last().unwrap();
            assert_eq!(share, link / k as u64, "{k} senders");
            assert_eq!(load.report(1, 1, 10 * US, p), share, "a host with two transfers counts once");
        }
        // host 1 stays; the others go quiet and leave the count after a period and a half
        assert_eq!(load.report(1, bytes(100), 100 * US, p), link / 8);
        assert_eq!(load.report(1, bytes(100), 161 * US, p), link);
        assert_eq!(load.report(1, 0, 1000 * US, p), link);
    }

    #[test]
    fn a_link_left_idle_raises_the_share_and_a_full_one_brings_it_back() {
        let link = 100_000_000_000u64;
        let p = 100 * US;
        let bytes = |gbps: u64| gbps * 1_000_000_000 / 8 * p / crate::time::SEC;
        let load = HostLoad::new(link);
        // 4 senders, together at 20 Gbit/s: the share grows beyond link / 4
        let mut share = 0;
        for i in 1..=6u64 {
            for h in 0..4 {
                share = load.report(h, bytes(5), i * p, p);
            }
        }
        assert!(share > link / 2, "idle link: share {share}");
        assert!(share <= link, "never above the link");
        // now they fill it: back to the fair share
        for i in 7..=40u64 {
            for h in 0..4 {
                share = load.report(h, bytes(25), i * p, p);
            }
        }
        assert!(share.abs_diff(link / 4) < link / 1000, "full link: share {share}");
        // four more hosts join: the allowance is divided among eight at once
        let share = (4..8).map(|h| load.report(h, bytes(25), 41 * p, p)).last().unwrap();
        assert!(share.abs_diff(link / 8) < link / 1000, "eight senders: share {share}");
    }

    #[test]
    fn a_report_round_trips_and_any_argument_unpacks() {
        let r = RateReport { recv_bps: 42_000_000_000, share_bps: Some(1_562_500_000) };
        assert_eq!(RateReport::unpack(r.pack(RateHint::None), RateHint::None).recv_bps, 42_000_000_000);
        let back = RateReport::unpack(r.pack(RateHint::ReceiverShare), RateHint::ReceiverShare);
        assert_eq!(back, RateReport { recv_bps: 42_000_000_000, share_bps: Some(1_562_500_000) });
        let none = RateReport { recv_bps: 7, share_bps: None }.pack(RateHint::ReceiverShare);
        assert_eq!(RateReport::unpack(none, RateHint::ReceiverShare).share_bps, None);
        let tiny = RateReport { recv_bps: 0, share_bps: Some(1) }.pack(RateHint::ReceiverShare);
        assert_eq!(RateReport::unpack(tiny, RateHint::ReceiverShare).share_bps, Some(1000));
        let huge = RateReport { recv_bps: u64::MAX, share_bps: Some(u64::MAX) }.pack(RateHint::ReceiverShare);
        assert_eq!(huge, u64::MAX, "saturated, not wrapped");
        for arg in [0, 1, u64::MAX, 0x8000_0000_0000_0000, 0xdead_beef_0000_0001] {
            let r = RateReport::unpack(arg, RateHint::ReceiverShare);
            assert!(r.recv_bps <= u32::MAX as u64 * 1000 && r.share_bps.is_none_or(|s| s >= 1000));
        }
    }
}
