//! gradwire-emu: an emulated testbed. Each host is a network namespace whose `eth0` is a
//! TUN device; one user-space process carries the packets between them through the
//! simulator's fabric (topology, routes, `gradwire-core` egress ports with their
//! strict-priority queues, ECN marking, DLCP selective dropping and buffers), a
//! line-rate shaper per port and seeded random loss per link. Real kernels, real TCP
//! and the real gradwire runtime run in the namespaces.
//!
//! Modules: [`scenario`] (the TOML file), [`ipv4`] (header fields), [`switch`] (the
//! real-time fabric model, no I/O), [`offload`] (TSO split, GRO merge), [`tun`],
//! [`netns`], [`run`] (the driver loop), [`cli`] (the command line, for the binary and for
//! `gradwire._core.emu_main`).

pub mod cli;
pub mod ipv4;
pub mod netns;
pub mod offload;
pub mod run;
pub mod scenario;
pub mod switch;
pub mod tun;
