//! The full mesh of control connections: the higher rank of each pair connects to the
//! lower rank's listener and proves session and rank.

use std::collections::BTreeSet;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use super::frame::*;
use super::stream::*;
use super::*;
use crate::NetError;

/// Rank `me`'s control connections to ranks 1..n other than itself (index 0 left `None`).
pub(super) fn build_mesh(
    me: u32,
    n: u32,
    session: u64,
    table: &[Entry],
    listener: TcpListener,
    deadline: Instant,
    start: Instant,
) -> Result<Vec<Option<TcpStream>>, NetError> {
    let mut control: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    // Lower ranks: connect to their listeners. They accept once their own connections to
    // even lower ranks are up, so there is no cycle.
    for i in 1..me {
        let addr = table[i as usize].ctrl;
        let mut s = connect_retry(
            || Ok(addr),
            deadline,
            &format!("rank {me} waiting to connect to rank {i}'s control listener at {addr}"),
            start,
        )?;
        let what = format!("rank {me} waiting for rank {i} at {addr} to accept its control connection");
        match send_frame(&mut s, &Frame::MeshHello { session, from: me, to: i }, deadline)
            .and_then(|_| recv_frame(&mut s, MAX_HELLO_FRAME, deadline))
        {
            Ok(Frame::MeshAck { session: ss, rank }) if ss == session && rank == i => {}
            Ok(Frame::Refuse(reason)) => {
                return Err(NetError::Refused(format!(
                    "rank {i} at {addr} refused rank {me}'s control connection: {reason}"
                )))
            }
            Ok(other) => return Err(NetError::Protocol(format!("{what}: {addr} answered {other:?}"))),
            Err(e) => return Err(step_error(e, &what, i, start)),
        }
        control[i as usize] = Some(s);
    }

    // Higher ranks: accept, and check that each connection is who it says it is.
    let ctrl = listener.local_addr().map_err(|e| NetError::io("reading the control listener's address", e))?;
    listener.set_nonblocking(true).map_err(|e| NetError::io("configuring the control listener", e))?;
    let mut pending: BTreeSet<u32> = (me + 1..n).collect();
    while !pending.is_empty() {
        if Instant::now() >= deadline {
            let missing: Vec<u32> = pending.iter().copied().collect();
            return Err(NetError::Timeout {
                what: format!(
                    "rank {me} waiting for {} to connect to its control listener at {ctrl}",
                    ranks_text(&missing)
                ),
                waited: start.elapsed(),
            });
        }
        let (mut s, _from) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(_) => {
                thread::sleep(Duration::from_millis(2));
                continue;
            }
        };
        if s.set_nonblocking(false).is_err() || s.set_nodelay(true).is_err() {
            continue;
        }
        let quick = deadline.min(Instant::now() + HELLO_READ_LIMIT);
        let reason = match recv_frame(&mut s, MAX_HELLO_FRAME, quick) {
            Ok(Frame::MeshHello { session: ss, from, to }) => {
                if ss != session {
                    Some("the session does not match: this connection belongs to another job".to_string())
                } else if to != me {
                    Some(format!("the connection is meant for rank {to} but this is rank {me}"))
                } else if from <= me || from >= n {
                    Some(format!("rank {from} must not connect to rank {me} (the higher rank of a pair connects)"))
                } else if !pending.contains(&from) {
                    Some(format!("rank {from} is already connected to rank {me}"))
                } else {
                    match send_frame(&mut s, &Frame::MeshAck { session, rank: me }, deadline) {
                        Ok(()) => {
                            pending.remove(&from);
                            control[from as usize] = Some(s);
                            continue;
                        }
                        Err(e) => {
                            return Err(step_error(
                                e,
                                &format!("rank {me} accepting rank {from}'s control connection"),
                                from,
                                start,
                            ))
                        }
                    }
                }
            }
            Ok(_) => Some("expected a mesh hello as the first frame".to_string()),
            Err(RecvError::Decode(DecodeError::Version(v))) => {
                Some(format!("it speaks rendezvous protocol version {v} but this rank speaks {PROTOCOL_VERSION}"))
            }
            Err(RecvError::Decode(DecodeError::Bad(m))) => Some(m),
            Err(_) => None, // stalled or closed: just drop it
        };
        if let Some(reason) = reason {
            refuse(s, &reason);
        }
    }
    Ok(control)
}
