//! What an incoming datagram must pass before any of its bytes go anywhere. Pure checks,
//! shared by the engine's receive paths and driven by the `inbound` fuzz target.
//!
//! The rule they keep: **no byte of an unauthenticated datagram reaches a caller's buffer
//! or a reduction.** A datagram is either checked whole in a receive buffer and only then
//! placed ([`authenticate`]), or, in a job without authentication, read straight into
//! place ([`direct_header`]) — never the second in an authenticated job, where a forged
//! payload read into place before its tag is checked would already have overwritten what
//! the region held (this rank's own contribution, for an all-gather receive posted at the
//! start of its call).

use gradwire_core::packet::PacketKind;
use gradwire_core::wire::{Header, HEADER_LEN};

use crate::auth::{tags_equal, JobKey, TAG_LEN};

/// Datagrams with at least this much payload are worth a peek to be read straight into
/// place (the extra syscall costs less than the copy it saves).
pub const DIRECT_MIN: usize = 16 << 10;

/// Why a datagram was dropped before its header was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// Too short to hold a header and a tag.
    Malformed,
    /// From an address no peer registered (an authenticated job cannot say whose key
    /// would check it).
    WrongSource,
    /// The tag does not verify.
    AuthFailure,
}

/// The body (header and payload, tag stripped) of datagram `d` that rank `me` received from
/// rank `from` (`None`: an address no peer registered). Without a key the datagram is its
/// own body; with one, its last [`TAG_LEN`] bytes must be the tag of the rest.
pub fn authenticate<'a>(d: &'a [u8], key: Option<&JobKey>, from: Option<u32>, me: u32) -> Result<&'a [u8], Rejected> {
    let Some(key) = key else { return Ok(d) };
    let split = d.len().checked_sub(TAG_LEN).filter(|&n| n >= HEADER_LEN).ok_or(Rejected::Malformed)?;
    let (body, tag) = d.split_at(split);
    let src = from.ok_or(Rejected::WrongSource)?;
    if tags_equal(tag, &key.datagram_tag(src, me, &[body])) {
        Ok(body)
    } else {
        Err(Rejected::AuthFailure)
    }
}

/// The header of a datagram that may be read straight into place, from its first bytes
/// `head` and its length `total`: a data segment of session `session`, at least
/// [`DIRECT_MIN`] of payload, its declared payload the rest of the datagram. `None` in an
/// authenticated job: there a payload is placed only once its tag has been checked.
pub fn direct_header(head: &[u8; HEADER_LEN], total: usize, session: u64, authenticated: bool) -> Option<Header> {
    if authenticated || total < HEADER_LEN + DIRECT_MIN {
        return None;
    }
    let h = Header::decode_header(head).ok()?;
    (h.kind == PacketKind::Data && h.session == session && total == HEADER_LEN + h.payload_len as usize).then_some(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(payload_len: usize, session: u64) -> Vec<u8> {
        let h = Header {
            kind: PacketKind::Data,
            ect: false,
            ce: false,
            ece: false,
            priority: 1,
            session,
            flow: 7,
            payload_len: payload_len as u32,
            seq: 0,
        };
        let mut head = [0u8; HEADER_LEN];
        h.encode(&mut head);
        let mut d = head.to_vec();
        d.resize(HEADER_LEN + payload_len, 0xab);
        d
    }

    #[test]
    fn an_authenticated_job_reads_nothing_into_place() {
        let d = datagram(65_456, 9);
        let head: &[u8; HEADER_LEN] = d[..HEADER_LEN].try_into().unwrap();
        assert!(direct_header(head, d.len(), 9, false).is_some());
        assert!(direct_header(head, d.len() + TAG_LEN, 9, true).is_none());
        assert!(direct_header(head, d.len(), 8, false).is_none(), "another session");
        assert!(direct_header(head, d.len() - 1, 9, false).is_none(), "a length the header does not claim");
        let small = datagram(DIRECT_MIN - 1, 9);
        assert!(direct_header(small[..HEADER_LEN].try_into().unwrap(), small.len(), 9, false).is_none());
    }

    #[test]
    fn only_the_tag_of_the_sender_and_receiver_verifies() {
        let key = JobKey::derive("t", 1);
        let body = datagram(1440, 1);
        let mut d = body.clone();
        d.extend_from_slice(&key.datagram_tag(0, 1, &[&body]));
        assert_eq!(authenticate(&d, Some(&key), Some(0), 1), Ok(&body[..]));
        assert_eq!(authenticate(&d, Some(&key), Some(2), 1), Err(Rejected::AuthFailure), "another sender");
        assert_eq!(authenticate(&d, Some(&key), Some(0), 2), Err(Rejected::AuthFailure), "another receiver");
        assert_eq!(authenticate(&d, Some(&key), None, 1), Err(Rejected::WrongSource));
        assert_eq!(authenticate(&d[..HEADER_LEN + TAG_LEN - 1], Some(&key), Some(0), 1), Err(Rejected::Malformed));
        for i in [0, HEADER_LEN, d.len() - 1] {
            let mut forged = d.clone();
            forged[i] ^= 1;
            assert_eq!(authenticate(&forged, Some(&key), Some(0), 1), Err(Rejected::AuthFailure), "byte {i}");
        }
        assert_eq!(authenticate(&body, None, None, 1), Ok(&body[..]));
    }
}
