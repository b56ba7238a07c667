//! What a host's transfers share, as one object the driver owns: [`HostState`].
//!
//! Some state outlives a transfer or spans several at once: a TCP persistent connection,
//! LTP's path model and LT thresholds, DLCP's pair rate, the pair's senders with data, the
//! receiving host's load. The state machines hold none of it (no shared cells, locks or
//! atomics): as quinn keeps what connections share in its `Endpoint`, the driver keeps a
//! `HostState` per host and hands it over explicitly, at three points:
//!
//! 1. building: the [`super::Build`] methods read it to seed a transfer (a warm window, a
//!    measured path, a carried threshold) and note what the build itself changes (a TCP
//!    connection now open);
//! 2. [`super::EndpointEvent::HandOn`]: an endpoint has something for its host (state to
//!    leave for the next transfer, a change in the pair's senders); the driver calls
//!    [`super::Endpoint::hand_on`] with its host's state at once, before it feeds any other
//!    endpoint, then calls `hand_on` of every flow [`HostState::take_stale`] names, whose
//!    view of the host just changed (DLCP senders pacing at a share of their pair's rate).
//!    `hand_on` may be called at any time (it hands on whatever is due): a driver that
//!    asks an endpoint for packets before it drains its events (the simulator's FIFO NIC)
//!    calls it first, so a sender's change reaches the host before its next packet;
//! 3. [`super::Endpoint::handle_timeout_with`]: a timeout that reads and writes the host in
//!    one step (a DLCP receiver's fair share in its rate report).
//!
//! A driver that runs every host (the simulator) keeps one per host ([`Hosts`]); the socket
//! runtime keeps one per engine, the host it runs on: every transfer it drives has this
//! host at one end, and one engine thread owns it, so it needs no lock. Per host, not per
//! link: a host is what each driver has (the runtime sees only its own), and the DLCP
//! receiving host's load spans all its links; inside, what is per link is per peer. A
//! driver that ignores `HandOn`, or passes a fresh state each time, gets every transfer
//! started cold, as if nothing had run before.

use std::collections::HashMap;

use super::dlcp::{CarriedRate, HostLoad, PairSenders};
use super::ltp::{LtThreshold, PathModel};
use super::tcp::TcpConnState;
use crate::packet::{FlowId, HostId};

/// What one host's transfers share (see the module docs).
#[derive(Debug, Default)]
pub struct HostState {
    peers: HashMap<HostId, Peer>,
    /// DLCP receivers here with `dlcp_rate_hint = "receiver_share"`: the remote hosts
    /// sending into this host.
    pub(crate) dlcp_load: Option<HostLoad>,
    /// Flows whose view of this host changed since the driver last asked.
    stale: Vec<FlowId>,
}

/// What this host's transfers with one peer host share.
#[derive(Debug, Default)]
pub struct Peer {
    /// A TCP connection to the peer is open (`tcp_connections` other than `per_flow`): the
    /// next flow needs no handshake.
    pub(crate) tcp_open: bool,
    /// `tcp_connections = "persistent"`: the connection's window, RTT and congestion state,
    /// as its last flow left it.
    pub(crate) tcp: Option<TcpConnState>,
    /// LTP, sending to the peer: the path model the last transfer measured.
    pub(crate) ltp_path: Option<PathModel>,
    /// LTP, receiving from the peer: the LT threshold, per transfer size (ltp.md §III-B1).
    pub(crate) ltp_lt: HashMap<u64, LtThreshold>,
    /// DLCP, sending to the peer (`dlcp_rate_state` other than `tensor`): the pair's rate.
    pub(crate) dlcp_rate: Option<CarriedRate>,
    /// DLCP, sending to the peer (`pair_shared`, `pair_priority`, `pair_strict`): the
    /// pair's senders with data.
    pub(crate) dlcp_senders: PairSenders,
}

impl HostState {
    /// A host with nothing carried.
    pub fn new() -> HostState {
        HostState::default()
    }

    /// What is shared with `peer`, if anything was.
    pub(crate) fn peer(&self, peer: HostId) -> Option<&Peer> {
        self.peers.get(&peer)
    }

    /// What is shared with `peer`, made empty if nothing was.
    pub(crate) fn peer_mut(&mut self, peer: HostId) -> &mut Peer {
        self.peers.entry(peer).or_default()
    }

    /// The receiving host's load record, made for a link of `link_bps` if there was none.
    pub(crate) fn load_mut(&mut self, link_bps: u64) -> &mut HostLoad {
        self.dlcp_load.get_or_insert_with(|| HostLoad::new(link_bps))
    }

    /// The DLCP senders with data toward `peer` but `except` must see the host again
    /// ([`Self::take_stale`]): their count changed.
    pub(crate) fn mark_pair_stale(&mut self, peer: HostId, except: FlowId) {
        if let Some(p) = self.peers.get(&peer) {
            self.stale.extend(p.dlcp_senders.flows().filter(|&f| f != except));
        }
    }

    /// The next flow whose view of this host changed: the driver calls its endpoint's
    /// [`super::Endpoint::hand_on`] (a flow it no longer runs is skipped).
    pub fn take_stale(&mut self) -> Option<FlowId> {
        self.stale.pop()
    }

    /// Forgets everything carried (the next transfers start cold).
    pub fn forget(&mut self) {
        *self = HostState::default();
    }

    /// The LT thresholds carried here, per (sending peer, transfer size).
    pub fn lt_thresholds(&self) -> impl Iterator<Item = (HostId, u64, &LtThreshold)> + '_ {
        self.peers.iter().flat_map(|(&peer, p)| p.ltp_lt.iter().map(move |(&size, lt)| (peer, size, lt)))
    }

    /// Whether a TCP persistent connection to `peer` has left its state here.
    pub fn has_tcp_connection(&self, peer: HostId) -> bool {
        self.peer(peer).is_some_and(|p| p.tcp.is_some())
    }

    /// DLCP's rate state carried toward `peer`.
    pub fn dlcp_rate(&self, peer: HostId) -> Option<CarriedRate> {
        self.peer(peer).and_then(|p| p.dlcp_rate)
    }

    /// LTP's path model carried toward `peer`.
    pub fn ltp_path(&self, peer: HostId) -> Option<PathModel> {
        self.peer(peer).and_then(|p| p.ltp_path)
    }
}

/// One [`HostState`] per host, for a driver that runs every host (the simulator).
#[derive(Debug, Default)]
pub struct Hosts(Vec<HostState>);

impl Hosts {
    /// No host has state yet.
    pub fn new() -> Hosts {
        Hosts::default()
    }

    /// Host `id`'s state (made on first use).
    pub fn host(&mut self, id: HostId) -> &mut HostState {
        let i = id as usize;
        if i >= self.0.len() {
            self.0.resize_with(i + 1, HostState::default);
        }
        &mut self.0[i]
    }

    /// Host `id`'s state, if it has one.
    pub fn get(&self, id: HostId) -> Option<&HostState> {
        self.0.get(id as usize)
    }

    /// Forgets everything every host carried.
    pub fn forget(&mut self) {
        self.0.clear();
    }
}

/// Where an endpoint's hand-on to its host stands: nothing to hand on, something due
/// (announce it: [`super::EndpointEvent::HandOn`]), or announced and not yet taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Handing {
    #[default]
    Idle,
    Due,
    Announced,
}

impl Handing {
    /// Something is due for the host.
    #[inline]
    pub fn due(&mut self) {
        if *self == Handing::Idle {
            *self = Handing::Due;
        }
    }

    /// Whether to return `HandOn` now (once per hand-on, so a driver that ignores it
    /// does not spin).
    #[inline]
    pub fn announce(&mut self) -> bool {
        let due = *self == Handing::Due;
        if due {
            *self = Handing::Announced;
        }
        due
    }

    /// A sender's next event: `HandOn` first (the peer's next transfer may start on
    /// `SenderDone` and should find what this one hands on), then `SenderDone` once.
    #[inline]
    pub fn sender_event(&mut self, done_pending: &mut bool) -> Option<super::EndpointEvent> {
        if self.announce() {
            return Some(super::EndpointEvent::HandOn);
        }
        std::mem::take(done_pending).then_some(super::EndpointEvent::SenderDone)
    }

    /// Whether anything is due or announced; it is taken now.
    #[inline]
    pub fn take(&mut self) -> bool {
        std::mem::take(self) != Handing::Idle
    }
}
