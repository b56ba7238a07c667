//! Authenticated transfers: a per-job key and the tags it puts on datagrams and frames.
//!
//! Off by default (`GRADWIRE_AUTH=1`, `RendezvousConfig::authenticated`). The key is
//! derived from the job token and the session id rank 0 picks at rendezvous, with
//! BLAKE3's key derivation; each data datagram carries a 16-byte BLAKE3 keyed-hash tag
//! over the sending and receiving ranks, header and payload, and each control frame one
//! over the link's direction, a frame counter and the frame (so a frame can be neither
//! forged, moved to another link, nor replayed). A datagram whose tag does not verify is
//! dropped and counted (`auth_failures`); a control frame that does not verify ends the
//! link (a TCP stream that carries forged bytes cannot be trusted further).
//!
//! BLAKE3 (the `blake3` crate, maintained by its designers): a keyed hash and a KDF in
//! one well-kept crate, several GB/s per core with SIMD, so the tag costs little next to
//! the payload copy. The token itself never travels: the rendezvous sends a proof of it
//! ([`token_proof`]), so someone who watches the rendezvous cannot derive the key.
//!
//! Not covered: confidentiality (payloads travel in clear), and replays of a datagram
//! into a later call that reuses its flow id (call numbers wrap after 4096 calls): such a
//! datagram is a genuine earlier payload of the same transfer, not a forged one.

use std::fmt;

pub const TAG_LEN: usize = 16;

/// The job's secret key (`Debug` does not print it).
#[derive(Clone)]
pub struct JobKey {
    key: [u8; 32],
}

impl fmt::Debug for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JobKey(..)")
    }
}

impl JobKey {
    /// The key of the job with `token` and `session` (the same on every rank).
    pub fn derive(token: &str, session: u64) -> Self {
        let mut h = blake3::Hasher::new_derive_key("gradwire 2026-11 job key v1");
        h.update(&(token.len() as u64).to_be_bytes());
        h.update(token.as_bytes());
        h.update(&session.to_be_bytes());
        JobKey { key: *h.finalize().as_bytes() }
    }

    fn tag(&self, domain: &[u8; 4], context: &[u8], parts: &[&[u8]]) -> [u8; TAG_LEN] {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(domain);
        h.update(context);
        for p in parts {
            h.update(p);
        }
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(&h.finalize().as_bytes()[..TAG_LEN]);
        out
    }

    /// The tag of a datagram from rank `src` to rank `dst` made of `parts` (header,
    /// payload).
    pub fn datagram_tag(&self, src: u32, dst: u32, parts: &[&[u8]]) -> [u8; TAG_LEN] {
        self.tag(b"data", &ranks(src, dst, 0), parts)
    }

    /// The tag of the `n`th control frame from rank `src` to rank `dst`.
    pub fn frame_tag(&self, src: u32, dst: u32, n: u64, frame: &[u8]) -> [u8; TAG_LEN] {
        self.tag(b"ctrl", &ranks(src, dst, n), &[frame])
    }
}

fn ranks(src: u32, dst: u32, n: u64) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0..4].copy_from_slice(&src.to_be_bytes());
    c[4..8].copy_from_slice(&dst.to_be_bytes());
    c[8..16].copy_from_slice(&n.to_be_bytes());
    c
}

/// Compares in time independent of where the tags differ.
pub fn tags_equal(a: &[u8], b: &[u8; TAG_LEN]) -> bool {
    a.len() == TAG_LEN && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What a joining rank shows rank 0 instead of its token: a one-way function of the token
/// and of whether the job authenticates (ranks that disagree on that refuse each other as
/// a token mismatch would).
pub fn token_proof(token: &str, authenticated: bool) -> Vec<u8> {
    let mut h = blake3::Hasher::new_derive_key("gradwire 2026-11 token proof v1");
    h.update(&[authenticated as u8]);
    h.update(token.as_bytes());
    h.finalize().as_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_depend_on_key_ranks_and_bytes() {
        let k = JobKey::derive("tok", 7);
        let t = k.datagram_tag(0, 1, &[b"head", b"payload"]);
        assert!(
            tags_equal(&t, &k.datagram_tag(0, 1, &[b"headpay", b"load"])),
            "a tag covers the bytes, not their split"
        );
        assert!(!tags_equal(&t, &k.datagram_tag(1, 0, &[b"head", b"payload"])));
        assert!(!tags_equal(&t, &k.datagram_tag(0, 1, &[b"head", b"payloaD"])));
        assert!(!tags_equal(&t, &JobKey::derive("tok", 8).datagram_tag(0, 1, &[b"head", b"payload"])));
        assert!(!tags_equal(&t, &JobKey::derive("tok2", 7).datagram_tag(0, 1, &[b"head", b"payload"])));
        assert_ne!(k.frame_tag(0, 1, 0, b"f"), k.frame_tag(0, 1, 1, b"f"));
        assert_ne!(token_proof("a", false), token_proof("a", true));
        assert_eq!(format!("{k:?}"), "JobKey(..)");
    }
}

#[cfg(test)]
mod speed {
    /// Tag throughput on this machine, for docs/performance.md:
    /// `cargo test --release -p gradwire-net tag_throughput -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn tag_throughput() {
        let key = super::JobKey::derive("t", 1);
        let payload = vec![7u8; 65_456];
        let head = [1u8; 32];
        let (n, t0) = (20_000, std::time::Instant::now());
        let mut x = 0u8;
        for _ in 0..n {
            x ^= key.datagram_tag(0, 1, &[&head, &payload])[0];
        }
        let s = t0.elapsed().as_secs_f64();
        let mut buf = vec![0u8; payload.len()];
        let t1 = std::time::Instant::now();
        for _ in 0..n {
            buf.copy_from_slice(std::hint::black_box(&payload));
            std::hint::black_box(&mut buf);
        }
        let c = t1.elapsed().as_secs_f64();
        let gb = (n * payload.len()) as f64 / 1e9;
        eprintln!("tags: {:.2} GB/s; memcpy of the same: {:.2} GB/s ({x})", gb / s, gb / c);
    }
}
