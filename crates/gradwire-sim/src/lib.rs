//! gradwire-sim: a packet-level discrete-event simulator in the style of htsim.
//!
//! One event per component, never one heap allocation per packet: a port schedules only
//! the packet it is serializing, a link keeps its in-flight packets in a ring buffer and
//! schedules only its head, and packets are plain structs in a pool. Transports are the
//! sans-IO endpoints of `gradwire-core`, driven with the simulated clock.
//!
//! Modules, bottom-up: [`engine`] (event queue), [`topology`] (graph builders),
//! [`routing`] (equal-cost next hops), [`fabric`] (ports, links, packet pool),
//! [`workload`] (flows and their dependencies), [`sim`] (the world that ties them
//! together), [`output`] (flows.csv, summary.json, queues.csv), [`scenario`] (TOML) and [`runner`]
//! (one simulation, or a fast run's every sample: [`cover`]).

pub mod bytesched;
pub mod cover;
pub mod engine;
pub mod fabric;
pub mod fast;
pub mod ideal;
pub mod maxmin;
pub mod models;
pub mod output;
pub mod routing;
pub mod runner;
pub mod scenario;
pub mod sim;
pub mod topology;
pub mod transports;
pub mod workload;

pub use output::Summary;
pub use runner::Runner;
pub use scenario::{load, Run, Scenario, ScenarioError};
pub use sim::{Progress, Simulation};
