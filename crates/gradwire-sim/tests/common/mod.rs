//! What the option tests share: run a scenario with overrides, and check that every option
//! of a list keeps packets conserved, finishes every flow and runs deterministic.

use gradwire_sim::output::flows_csv;
use gradwire_sim::{load, Simulation, Summary};

/// `text` with `overrides` (`key=value`), run to the end: flows.csv and the summary.
pub fn run(text: &str, overrides: &[&str]) -> (String, Summary) {
    let ov: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    let runs = load(text, &ov).unwrap_or_else(|e| panic!("{e}"));
    let mut s = Simulation::new(&runs[0].scenario).unwrap_or_else(|e| panic!("{e}"));
    s.run();
    (flows_csv(&s), s.summary())
}

/// Each option set run twice: the same flows.csv, every flow finished, packets conserved.
/// Returns each set's run.
pub fn conserved_and_deterministic(text: &str, options: &[&[&str]]) -> Vec<(String, Summary)> {
    let mut outputs = Vec::new();
    for ov in options {
        let (a, sa) = run(text, ov);
        let (b, _) = run(text, ov);
        assert_eq!(a, b, "{ov:?}: not deterministic");
        assert_eq!(sa.flows_finished, sa.flows, "{ov:?}");
        assert!(sa.packets.conserved, "{ov:?}: {:?}", sa.packets);
        outputs.push((a, sa));
    }
    outputs
}
