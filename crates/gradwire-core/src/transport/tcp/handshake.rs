//! TCP's three-way handshake in front of a sender and its receiver, as ns-3 opens a
//! connection: the sender's SYN, the receiver's SYN-ACK, the sender's ACK, then data.
//!
//! A SYN or SYN-ACK lost in the network costs the connection timeout (ns-3's
//! `TcpSocket::ConnTimeout`, 3 s by default), doubled on every further retry, not the
//! data RTO: the RTT estimator has no sample yet. The SYN is a `Ctrl(Start)` packet (`seq`
//! = flow size), the SYN-ACK its `CtrlAck(Start)`. The receiver answers every SYN, so a
//! lost SYN-ACK is recovered by the sender's SYN retry (ns-3's receiver would also resend
//! its SYN-ACK after its own `ConnTimeout`: the same wait). Data starts after the SYN-ACK
//! and the RTT of the handshake is not sampled (Karn: nothing to time it against but the
//! first SYN).

use crate::packet::{CtrlOp, FlowId, HostId, Packet, PacketKind};
use crate::time::Time;
use crate::transport::{forward_to_inner, Endpoint, EndpointEvent, EndpointStats};

/// How a connection is opened.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HandshakeConfig {
    /// Wait for the SYN-ACK before the first SYN retry; doubles per retry.
    pub conn_timeout: Time,
    /// Longest wait between SYN retries (the backoff's cap).
    pub max_timeout: Time,
    /// Wire size of SYN, SYN-ACK and the handshake's ACK.
    pub bytes: u32,
    /// Priority queue of the handshake's packets.
    pub priority: u8,
}

/// The connecting side: sends SYNs until a SYN-ACK arrives, then hands over to `inner`.
pub struct Connecting<S: Endpoint> {
    inner: S,
    cfg: HandshakeConfig,
    flow: FlowId,
    src: HostId,
    dst: HostId,
    size: u64,
    state: Open,
    syn_timeouts: u64,
    syns_sent: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Open {
    /// A SYN is due now.
    SynDue,
    /// A SYN is out; retry at `deadline`.
    SynSent {
        deadline: Time,
    },
    /// SYN-ACK received; the handshake's ACK is still to go.
    AckDue,
    Established,
}

impl<S: Endpoint> Connecting<S> {
    /// `inner`, a sender of `size` bytes from `src` to `dst`, behind a handshake.
    pub fn new(inner: S, cfg: HandshakeConfig, flow: FlowId, src: HostId, dst: HostId, size: u64) -> Self {
        Connecting { inner, cfg, flow, src, dst, size, state: Open::SynDue, syn_timeouts: 0, syns_sent: 0 }
    }

    /// Whether the SYN-ACK has arrived.
    pub fn established(&self) -> bool {
        matches!(self.state, Open::AckDue | Open::Established)
    }

    /// The sender behind the handshake.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn timeout(&self) -> Time {
        let doubled = self.cfg.conn_timeout.saturating_mul(1 << self.syn_timeouts.min(32));
        doubled.min(self.cfg.max_timeout.max(self.cfg.conn_timeout))
    }

    fn packet(&self, kind: PacketKind, now: Time, seq: u64) -> Packet {
        let mut p = Packet::ctrl(kind, self.flow, self.src, self.dst, seq, self.cfg.bytes);
        p.priority = self.cfg.priority;
        p.sent_at = now;
        p
    }
}

impl<S: Endpoint> Endpoint for Connecting<S> {
    fn handle_packet(&mut self, now: Time, pkt: &Packet) {
        match (self.state, pkt.kind) {
            (Open::SynDue | Open::SynSent { .. }, PacketKind::CtrlAck(CtrlOp::Start)) if pkt.flow == self.flow => {
                self.state = Open::AckDue
            }
            (Open::AckDue | Open::Established, _) => self.inner.handle_packet(now, pkt),
            _ => {}
        }
    }

    fn handle_timeout(&mut self, now: Time) {
        match self.state {
            Open::SynSent { deadline } if now >= deadline => {
                self.syn_timeouts += 1;
                self.state = Open::SynDue;
            }
            Open::AckDue | Open::Established => self.inner.handle_timeout(now),
            _ => {}
        }
    }

    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        match self.state {
            Open::SynDue => {
                self.state = Open::SynSent { deadline: now.saturating_add(self.timeout()) };
                self.syns_sent += 1;
                Some(self.packet(PacketKind::Ctrl(CtrlOp::Start), now, self.size))
            }
            Open::SynSent { .. } => None,
            Open::AckDue => {
                self.state = Open::Established;
                Some(self.packet(PacketKind::Ack, now, 0))
            }
            Open::Established => self.inner.poll_transmit(now),
        }
    }

    fn poll_timeout(&self) -> Option<Time> {
        match self.state {
            Open::SynDue | Open::AckDue => None,
            Open::SynSent { deadline } => Some(deadline),
            Open::Established => self.inner.poll_timeout(),
        }
    }

    fn poll_timeout_unpaced(&self) -> Option<Time> {
        match self.state {
            Open::Established => self.inner.poll_timeout_unpaced(),
            _ => self.poll_timeout(),
        }
    }

    fn poll_event(&mut self) -> Option<EndpointEvent> {
        self.inner.poll_event()
    }

    fn hand_on(&mut self, host: &mut crate::transport::HostState) {
        self.inner.hand_on(host)
    }

    fn stats(&self) -> EndpointStats {
        let mut s = self.inner.stats();
        s.timeouts += self.syn_timeouts;
        s.packets_sent += self.syns_sent;
        s
    }
}

/// The listening side: answers every SYN with a SYN-ACK; everything else goes to `inner`.
pub struct Accepting<R: Endpoint> {
    inner: R,
    cfg: HandshakeConfig,
    flow: FlowId,
    local: HostId,
    remote: HostId,
    synacks_due: u32,
}

impl<R: Endpoint> Accepting<R> {
    /// `inner`, a receiver at `local` for `remote`'s flow, behind a handshake.
    pub fn new(inner: R, cfg: HandshakeConfig, flow: FlowId, local: HostId, remote: HostId) -> Self {
        Accepting { inner, cfg, flow, local, remote, synacks_due: 0 }
    }
}

impl<R: Endpoint> Endpoint for Accepting<R> {
    fn handle_packet(&mut self, now: Time, pkt: &Packet) {
        if pkt.kind == PacketKind::Ctrl(CtrlOp::Start) && pkt.flow == self.flow {
            self.synacks_due += 1;
        } else {
            self.inner.handle_packet(now, pkt);
        }
    }

    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        if self.synacks_due > 0 {
            self.synacks_due -= 1;
            let mut p =
                Packet::ctrl(PacketKind::CtrlAck(CtrlOp::Start), self.flow, self.local, self.remote, 0, self.cfg.bytes);
            p.priority = self.cfg.priority;
            p.sent_at = now;
            return Some(p);
        }
        self.inner.poll_transmit(now)
    }

    forward_to_inner!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{MS, SEC, US};
    use crate::transport::tcp::{TcpConfig, TcpReceiver, TcpSender};

    const FLOW: u32 = 3;
    const CFG: HandshakeConfig =
        HandshakeConfig { conn_timeout: 3 * SEC, max_timeout: 60 * SEC, bytes: 40, priority: 0 };

    fn pair(size: u64) -> (Connecting<TcpSender>, Accepting<TcpReceiver>) {
        let tcp = TcpConfig::default();
        (
            Connecting::new(TcpSender::new(tcp, FLOW, 1, 2, size, 0), CFG, FLOW, 1, 2, size),
            Accepting::new(TcpReceiver::new(tcp, FLOW, 2, 1, size), CFG, FLOW, 2, 1),
        )
    }

    fn drain(e: &mut impl Endpoint, now: Time) -> Vec<Packet> {
        std::iter::from_fn(|| e.poll_transmit(now)).collect()
    }

    #[test]
    fn data_waits_for_the_syn_ack_then_flows() {
        let (mut s, mut r) = pair(3000);
        let syn = drain(&mut s, 0);
        assert_eq!(syn.len(), 1, "only the SYN before the SYN-ACK");
        assert_eq!((syn[0].kind, syn[0].seq, syn[0].wire_bytes), (PacketKind::Ctrl(CtrlOp::Start), 3000, 40));
        assert_eq!(s.poll_timeout(), Some(3 * SEC), "the connection timeout, not the data RTO");
        r.handle_packet(10 * US, &syn[0]);
        let synack = drain(&mut r, 10 * US);
        assert_eq!(synack.len(), 1);
        assert_eq!(synack[0].kind, PacketKind::CtrlAck(CtrlOp::Start));
        s.handle_packet(20 * US, &synack[0]);
        assert!(s.established());
        let out = drain(&mut s, 20 * US);
        assert_eq!(out[0].kind, PacketKind::Ack, "the handshake's ACK first");
        assert_eq!(out[1..].iter().filter(|p| p.kind == PacketKind::Data).count(), 3);
        for p in &out {
            r.handle_packet(30 * US, p);
        }
        assert!(matches!(r.poll_event(), Some(EndpointEvent::Delivered { bytes: 3000 })));
    }

    #[test]
    fn a_lost_syn_waits_for_the_connection_timeout_then_doubles() {
        let (mut s, mut r) = pair(1000);
        let _lost = drain(&mut s, 0);
        s.handle_timeout(3 * SEC - 1);
        assert!(drain(&mut s, 3 * SEC - 1).is_empty(), "no retry before ConnTimeout");
        s.handle_timeout(3 * SEC);
        let retry = drain(&mut s, 3 * SEC);
        assert_eq!(retry.len(), 1);
        assert_eq!(retry[0].kind, PacketKind::Ctrl(CtrlOp::Start));
        assert_eq!(s.poll_timeout(), Some(3 * SEC + 6 * SEC), "backed off");
        assert_eq!(s.stats().timeouts, 1);
        r.handle_packet(3 * SEC + MS, &retry[0]);
        let synack = drain(&mut r, 3 * SEC + MS);
        s.handle_packet(3 * SEC + 2 * MS, &synack[0]);
        let out = drain(&mut s, 3 * SEC + 2 * MS);
        assert_eq!(out.iter().filter(|p| p.kind == PacketKind::Data).count(), 1);
        assert_eq!(s.poll_timeout(), Some(3 * SEC + 2 * MS + 10 * MS), "then the data RTO");
    }

    #[test]
    fn a_late_duplicate_syn_ack_is_ignored_and_every_syn_is_answered() {
        let (mut s, mut r) = pair(1000);
        let syn = drain(&mut s, 0).remove(0);
        r.handle_packet(1, &syn);
        r.handle_packet(2, &syn);
        let synacks = drain(&mut r, 2);
        assert_eq!(synacks.len(), 2, "each SYN gets its SYN-ACK");
        s.handle_packet(3, &synacks[0]);
        let first = drain(&mut s, 3);
        s.handle_packet(4, &synacks[1]);
        assert!(drain(&mut s, 4).is_empty(), "the duplicate SYN-ACK sends nothing");
        assert_eq!(first.len(), 2);
    }
}
