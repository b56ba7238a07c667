//! Fuzz what a datagram must pass before its bytes go anywhere (`gradwire_net::inbound`):
//! the direct receive's header gate and the authentication tag check.
//!
//! - `direct_header` never panics; in an authenticated job it never admits a datagram
//!   (its payload would land before its tag is checked); otherwise what it admits is a data
//!   segment of the session, at least `DIRECT_MIN` of payload, whose declared length is
//!   exactly the rest of the datagram.
//! - `authenticate` never panics and, with a key, admits nothing the fuzzer makes (forging
//!   a 16-byte tag is out of its reach); a genuinely tagged copy of the input verifies and
//!   returns exactly its body, and the same copy with any one byte flipped (the byte and
//!   bit chosen by the input) does not.
#![no_main]

use gradwire_core::packet::PacketKind;
use gradwire_core::wire::HEADER_LEN;
use gradwire_net::auth::JobKey;
use gradwire_net::inbound::{authenticate, direct_header, Rejected, DIRECT_MIN};
use libfuzzer_sys::fuzz_target;

const SESSION: u64 = 0x0123_4567_89ab_cdef;

fuzz_target!(|data: &[u8]| {
    if data.len() < HEADER_LEN + 8 {
        return;
    }
    let (ctl, d) = data.split_at(8);
    let head: &[u8; HEADER_LEN] = d[..HEADER_LEN].try_into().unwrap();
    // The datagram's length as the peek reports it: the input's, or (to reach the large
    // sizes) one the input claims.
    let claimed = u32::from_le_bytes(ctl[0..4].try_into().unwrap()) as usize % (1 << 17);
    for total in [d.len(), claimed] {
        assert!(direct_header(head, total, SESSION, true).is_none(), "an authenticated job read into place");
        if let Some(h) = direct_header(head, total, SESSION, false) {
            assert_eq!(h.kind, PacketKind::Data);
            assert_eq!(h.session, SESSION);
            assert_eq!(total, HEADER_LEN + h.payload_len as usize);
            assert!(h.payload_len as usize >= DIRECT_MIN);
        }
    }

    let key = JobKey::derive("fuzz", SESSION);
    let (src, me) = (u32::from(ctl[4] % 4), u32::from(ctl[5] % 4));
    for from in [Some(src), None] {
        assert!(authenticate(d, Some(&key), from, me).is_err(), "an untagged datagram was accepted");
    }
    assert_eq!(authenticate(d, None, None, me), Ok(d));

    let mut tagged = d.to_vec();
    tagged.extend_from_slice(&key.datagram_tag(src, me, &[d]));
    assert_eq!(authenticate(&tagged, Some(&key), Some(src), me), Ok(d));
    assert_eq!(authenticate(&tagged, Some(&key), None, me), Err(Rejected::WrongSource));
    let at = u16::from_le_bytes([ctl[6], ctl[7]]) as usize % tagged.len();
    tagged[at] ^= 1 << (ctl[7] % 8);
    assert_eq!(authenticate(&tagged, Some(&key), Some(src), me), Err(Rejected::AuthFailure), "flipped byte {at}");
});
