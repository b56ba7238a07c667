//! Ranks 1..n: reach rank 0, say hello, and take the Welcome.

use std::net::{SocketAddr, TcpListener};
use std::time::Instant;

use super::addr::*;
use super::frame::*;
use super::mesh::build_mesh;
use super::stream::*;
use super::*;
use crate::auth::token_proof;
use crate::NetError;

pub(super) fn join(cfg: &RendezvousConfig, udp_addr: SocketAddr, start: Instant) -> Result<Mesh, NetError> {
    let me = cfg.rank;
    let n = cfg.world_size;
    let here = cfg.master_display();

    // Reach rank 0.
    let mut master = connect_retry(
        || cfg.resolve_master(),
        start + cfg.timeout,
        &format!("rank {me} waiting for rank 0 to accept connections at {here}"),
        start,
    )?;
    let local_ip = master.local_addr().map_err(|e| NetError::io("reading the local address", e))?.ip();
    let listener = TcpListener::bind((local_ip, 0))
        .map_err(|e| NetError::io(format!("binding rank {me}'s control listener on {local_ip}"), e))?;
    let ctrl = listener.local_addr().map_err(|e| NetError::io("reading the control listener's address", e))?;
    let udp = with_ip(udp_addr, local_ip);

    // Be admitted.
    let step = Instant::now() + cfg.timeout + grace(cfg.timeout);
    let hello = Frame::Hello(Hello {
        // A proof of the token, not the token: the job key is derived from it.
        token: token_proof(&cfg.token, cfg.authenticated),
        rank: me,
        world_size: n,
        udp,
        ctrl,
        mss: cfg.mss.unwrap_or(0),
        mtu: path_mtu(&master),
    });
    let what = format!("rank {me} waiting for rank 0 at {here} to admit it (rank 0 waits until all ranks have joined)");
    let (session, mss, table) =
        match send_frame(&mut master, &hello, step).and_then(|_| recv_frame(&mut master, MAX_FRAME, step)) {
            Ok(Frame::Welcome { session, mss, peers }) => {
                if session == 0
                    || peers.len() != n as usize
                    || peers[me as usize] != (Entry { udp, ctrl })
                    || cfg.mss.is_some_and(|m| m != mss)
                {
                    return Err(NetError::Protocol(format!("{what}: rank 0 sent an inconsistent peer table")));
                }
                (session, mss, peers)
            }
            Ok(Frame::Refuse(reason)) => {
                return Err(NetError::Refused(format!("rank 0 at {here} refused this process: {reason}")))
            }
            Ok(Frame::Abort { kind, rank, msg }) => return Err(abort_error(kind, rank, msg, start)),
            Ok(other) => return Err(NetError::Protocol(format!("{what}: rank 0 sent {other:?}"))),
            Err(e) => return Err(step_error(e, &what, 0, start)),
        };

    // Connect the mesh; on failure tell rank 0, which tells the others.
    let step = Instant::now() + cfg.timeout;
    let mut control = match build_mesh(me, n, session, &table, listener, step, start) {
        Ok(c) => c,
        Err(e) => {
            send_quietly(&mut master, &abort_frame(&e, me));
            return Err(e);
        }
    };

    // Barrier.
    let step = Instant::now() + cfg.timeout + 2 * grace(cfg.timeout);
    let what = format!("rank {me} waiting for rank 0 at {here} to confirm that every rank is connected");
    match send_frame(&mut master, &Frame::Ready { session }, step)
        .and_then(|_| recv_frame(&mut master, MAX_FRAME, step))
    {
        Ok(Frame::Go { session: s }) if s == session => {}
        Ok(Frame::Abort { kind, rank, msg }) => return Err(abort_error(kind, rank, msg, start)),
        Ok(other) => return Err(NetError::Protocol(format!("{what}: rank 0 sent {other:?}"))),
        Err(e) => return Err(step_error(e, &what, 0, start)),
    }
    control[0] = Some(master);
    for s in control.iter().flatten() {
        finish_stream(s)?;
    }
    let peers = table.iter().enumerate().map(|(r, e)| PeerInfo { rank: r as u32, udp_addr: e.udp }).collect();
    Ok(Mesh { rank: me, world_size: n, session, peers, control, mss })
}
