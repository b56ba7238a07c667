//! Retransmission timeout estimation (RFC 6298).

use super::TcpConfig;
use crate::time::Time;
use crate::transport::opt::Opt;

#[derive(Clone, Copy, Debug)]
pub(super) struct RttEstimator {
    srtt: Opt,
    rttvar: Time,
    /// Current RTO, backoff included.
    rto: Time,
    rto_min: Time,
    rto_max: Time,
}

impl RttEstimator {
    pub(super) fn new(cfg: &TcpConfig) -> Self {
        RttEstimator { srtt: Opt::NONE, rttvar: 0, rto: cfg.rto_initial, rto_min: cfg.rto_min, rto_max: cfg.rto_max }
    }

    pub(super) fn rto(&self) -> Time {
        self.rto
    }

    pub(super) fn srtt(&self) -> Option<Time> {
        self.srtt.get()
    }

    /// Feed one valid (Karn) sample; this also clears any backoff (RFC 6298 5.7).
    pub(super) fn sample(&mut self, r: Time) {
        let srtt = match self.srtt.get() {
            None => {
                self.rttvar = r / 2;
                r
            }
            Some(s) => {
                // beta = 1/4, alpha = 1/8; rttvar uses the old srtt.
                self.rttvar = (3 * self.rttvar + s.abs_diff(r)) / 4;
                (7 * s + r) / 8
            }
        };
        self.srtt = Some(srtt).into();
        let rto = srtt.saturating_add(self.rttvar.saturating_mul(4));
        // max/min rather than clamp: clamp panics on a nonsensical config (min > max).
        self.rto = rto.max(self.rto_min).min(self.rto_max);
    }

    /// The RTO from the estimate, without backoff (a connection's next flow starts here).
    pub(super) fn settled(mut self) -> Self {
        if let Some(srtt) = self.srtt.get() {
            self.rto = srtt.saturating_add(self.rttvar.saturating_mul(4)).max(self.rto_min).min(self.rto_max);
        }
        self
    }

    /// The RTO from the estimate without backoff, or `initial` before any sample (ns-3.37's
    /// `TcpSocketBase::NewAck`, on every ACK of new data).
    pub(super) fn reset_backoff(&mut self, initial: Time) {
        match self.srtt.get() {
            Some(_) => *self = self.settled(),
            None => self.rto = initial,
        }
    }

    /// Exponential backoff on a timeout (RFC 6298 5.5).
    pub(super) fn backoff(&mut self) {
        self.rto = self.rto.saturating_mul(2).min(self.rto_max);
    }
}
