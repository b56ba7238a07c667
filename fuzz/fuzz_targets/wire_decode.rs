//! Fuzz the datagram decoder (`gradwire_core::wire::Header::decode`) with arbitrary bytes.
//!
//! Decoding must never panic; when it succeeds, the header must re-encode to exactly the
//! bytes it was decoded from (the layout has one encoding per header), the payload must be
//! the rest of the datagram, and decoding the re-encoded datagram gives the same header.
#![no_main]

use gradwire_core::wire::{Header, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok((header, payload)) = Header::decode(data) else { return };
    assert!(data.len() >= HEADER_LEN);
    assert_eq!(payload, &data[HEADER_LEN..]);
    assert_eq!(header.payload_len as usize, payload.len());
    assert!(header.priority <= 7);

    let mut encoded = [0u8; HEADER_LEN];
    header.encode(&mut encoded);
    assert_eq!(&encoded[..], &data[..HEADER_LEN], "encode(decode(x)) differs from x for {header:?}");

    let mut again = encoded.to_vec();
    again.extend_from_slice(payload);
    let (header2, payload2) = Header::decode(&again).expect("a re-encoded header decodes");
    assert_eq!(header2, header);
    assert_eq!(payload2, payload);
});
