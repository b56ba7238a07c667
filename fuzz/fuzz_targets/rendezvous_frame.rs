//! Fuzz the rendezvous frame decoder (rank 0's listener and the joiners' mesh links face
//! unauthenticated TCP): any body must decode or be refused without a panic, and a
//! decoded frame must survive an encode/decode round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    gradwire_net::rendezvous::fuzz_decode_frame(data);
});
