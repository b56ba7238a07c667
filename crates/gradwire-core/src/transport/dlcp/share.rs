//! The receiver-informed rate ([`RateHint::ReceiverShare`], a deviation from dlcp.md).
//!
//! Into an N-to-1 incast the minimal rate control's aggregate additive increase is N steps
//! per period, so the senders overshoot the receiver's link every period and the steady
//! state sits at the loss threshold. The receiving host is the one place that knows how
//! many hosts send into its link: its receivers note each remote host whose data arrived
//! in their period ([`HostLoad`], kept in the host's [`crate::transport::HostState`]), and every RATE report also carries the host's fair
//! share, its link rate over that count. The sender holds its rate at or below
//! `share_headroom` times the share: with a headroom above 1 the receiver's queue can still
//! form, which is where DLCP's strict layer priority acts (a rate held at exactly the fair
//! share keeps the queue empty and turns priority into even sharing), and the link is not
//! left idle by hosts counted in the window that send little.

use crate::packet::HostId;
use crate::time::Time;

/// What a DLCP receive-rate report carries besides the receive rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RateHint {
    /// The receive rate only (dlcp.md).
    #[default]
    None,
    /// Also the receiving host's fair share: its link rate over the number of hosts whose
    /// data reached it in the last period and a half; the sender holds its rate at or
    /// below `share_headroom` times that share.
    ReceiverShare,
}

/// The remote hosts with data arriving at one receiving host, shared by its DLCP receivers.
#[derive(Debug)]
pub struct HostLoad {
    link_bps: u64,
    /// Each remote host, and when a receiver here last found its data in a period.
    seen: Vec<(HostId, Time)>,
}

impl HostLoad {
    /// The load of a host whose link carries `link_bps` bit/s.
    pub fn new(link_bps: u64) -> Self {
        HostLoad { link_bps: link_bps.max(1), seen: Vec::new() }
    }

    /// A receiver here ends a period of length `period` at `now`; `remote`'s data arrived
    /// in it if `active`. Returns the host's fair share in bit/s: its link rate over the
    /// remote hosts seen within a period and a half before `now` (at least one), so a host
    /// whose every period brings data is never missed between two receivers' reports.
    pub fn report(&mut self, remote: HostId, active: bool, now: Time, period: Time) -> u64 {
        let seen = &mut self.seen;
        if active {
            match seen.iter_mut().find(|(h, _)| *h == remote) {
                Some((_, at)) => *at = now,
                None => seen.push((remote, now)),
            }
        }
        let window = period.max(1) + period / 2;
        seen.retain(|&(_, at)| at.saturating_add(window) >= now);
        self.link_bps / seen.len().max(1) as u64
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
    fn the_share_is_the_link_over_the_hosts_seen_sending() {
        let (link, p) = (100_000_000_000u64, 100 * US);
        let mut load = HostLoad::new(link);
        assert_eq!(load.report(1, false, 0, p), link, "nobody seen: the whole link");
        for k in 1..=8u32 {
            // k hosts, each noted by some receiver here
            let share = (1..=k).map(|h| load.report(h, true, 10 * US, p)).last().unwrap();
            assert_eq!(share, link / k as u64, "{k} senders");
            assert_eq!(load.report(1, true, 10 * US, p), share, "a host with two transfers counts once");
        }
        // host 1 stays active; the others go quiet and leave the count after 1.5 periods
        assert_eq!(load.report(1, true, 100 * US, p), link / 8);
        assert_eq!(load.report(1, true, 160 * US, p), link / 8);
        assert_eq!(load.report(1, true, 161 * US, p), link);
        assert_eq!(load.report(1, false, 400 * US, p), link);
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
