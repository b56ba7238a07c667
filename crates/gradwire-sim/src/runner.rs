//! What runs a scenario: one [`Simulation`], or with `fast.cover` every sample of a fast
//! run ([`Cover`]). The command line and the Python extension step either the same way.

use crate::cover::Cover;
use crate::output::Summary;
use crate::scenario::{Scenario, ScenarioError};
use crate::sim::{Conservation, Progress, Simulation};
use crate::topology::Topology;
use std::io;
use std::path::Path;

pub enum Runner {
    One(Box<Simulation>),
    Cover(Box<Cover>),
}

impl Runner {
    pub fn new(scenario: &Scenario) -> Result<Runner, ScenarioError> {
        Ok(if scenario.fast.cover {
            Runner::Cover(Box::new(Cover::new(scenario)?))
        } else {
            Runner::One(Box::new(Simulation::new(scenario)?))
        })
    }

    /// What [`Runner::new`] would refuse beyond [`Scenario::validate`] (the fast mode's
    /// and a cover's refusals), found without building the workload; a fast run's sample
    /// (servers kept, of the job's) if it is one.
    pub fn check(scenario: &Scenario) -> Result<Option<(u32, u32)>, ScenarioError> {
        scenario.validate()?;
        if scenario.fast.cover {
            crate::cover::check(scenario)?;
        }
        let sample = crate::fast::Sample::plan(scenario, &Topology::build(&scenario.topology))?;
        if let Some(x) = sample.as_ref().filter(|_| scenario.fast.cover) {
            crate::cover::covers(x)?;
        }
        Ok(sample.map(|x| (x.servers.len() as u32, x.of)))
    }

    /// Run about `max_events` more events; `true` once the run is over.
    pub fn step(&mut self, max_events: u64) -> bool {
        match self {
            Runner::One(s) => s.step(max_events),
            Runner::Cover(c) => c.step(max_events),
        }
    }

    pub fn run(&mut self) {
        match self {
            Runner::One(s) => s.run(),
            Runner::Cover(c) => c.run(),
        }
    }

    pub fn progress(&self) -> Progress {
        match self {
            Runner::One(s) => s.progress(),
            Runner::Cover(c) => c.progress(),
        }
    }

    pub fn summary(&self) -> Summary {
        match self {
            Runner::One(s) => s.summary(),
            Runner::Cover(c) => c.summary(),
        }
    }

    pub fn conservation(&self) -> Conservation {
        match self {
            Runner::One(s) => s.conservation(),
            Runner::Cover(c) => c.conservation(),
        }
    }

    /// `flows.csv` as text.
    pub fn flows_csv(&self) -> String {
        match self {
            Runner::One(s) => crate::output::flows_csv(s),
            Runner::Cover(c) => c.flows_csv(),
        }
    }

    pub fn write_outputs(&self, dir: &Path) -> io::Result<Summary> {
        match self {
            Runner::One(s) => s.write_outputs(dir),
            Runner::Cover(c) => c.write_outputs(dir),
        }
    }

    pub fn scenario(&self) -> &Scenario {
        match self {
            Runner::One(s) => s.scenario(),
            Runner::Cover(c) => c.scenario(),
        }
    }
}
