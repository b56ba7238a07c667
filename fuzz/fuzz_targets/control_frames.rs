//! Fuzz the control-link parser (`gradwire_net::control::parse_frames`: transport
//! headers, call descriptors and "received" notices on one TCP stream), plain and
//! authenticated: any bytes give frames or an error, never a panic; the bytes consumed
//! are whole frames; an authenticated link accepts nothing without the key's tags.
#![no_main]

use gradwire_net::auth::JobKey;
use gradwire_net::control::{parse_frames, LinkAuth};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (mut headers, mut own) = (Vec::new(), Vec::new());
    if let Ok(used) = parse_frames(data, &mut headers, &mut own, None) {
        assert!(used <= data.len());
        assert_eq!(used, headers.len() * 32 + own.iter().map(|f| match f {
            gradwire_net::control::LinkFrame::Call(_) => 64,
            gradwire_net::control::LinkFrame::Received { .. } => 16,
        }).sum::<usize>());
    }
    let mut auth = LinkAuth { key: JobKey::derive("fuzz", 1), me: 0, peer: 1, sent: 0, received: 0 };
    let (mut headers, mut own) = (Vec::new(), Vec::new());
    if let Ok(used) = parse_frames(data, &mut headers, &mut own, Some(&mut auth)) {
        // Forging a 16-byte tag is out of a fuzzer's reach: nothing whole gets through.
        assert!(headers.is_empty() && own.is_empty() && used == 0, "an unauthenticated frame was accepted");
    }
});
