//! A flow costs no endpoint state before it starts, and gives it back once it is done: the
//! simulator's endpoint pairs (both endpoints and the driver's state for them) exist only
//! for flows between their start and their end. Before issue 32 every flow had its pair
//! from the start of the run, so `open_endpoint_pairs` was the workload's flow count.

use gradwire_sim::{load, Simulation};

/// ResNet18 through 2 dedicated parameter servers from 6 workers, 3 iterations: every
/// iteration's pulls wait for its pushes, and iterations 1 and 2 wait for the one before.
fn chained() -> Simulation {
    let text = "seed = 1\nstop_ms = 5000\n\
                [topology]\nleaves = 2\nhosts_per_leaf = 4\nspines = 2\nuplinks_per_leaf = 2\n\
                [transport]\nkind = \"dctcp\"\n\
                [workload]\nkind = \"dnn\"\nmodel = \"resnet18\"\npattern = \"ps\"\nworkers = 6\nservers = 2\n\
                colocated = false\niterations = 3\n";
    Simulation::new(&load(text, &[]).unwrap()[0].scenario).unwrap()
}

#[test]
fn unstarted_flows_hold_no_endpoint_state() {
    let mut sim = chained();
    let flows = sim.flow_count() as u64;
    assert!(flows > 400, "{flows}");
    assert_eq!(sim.open_endpoint_pairs(), 0, "nothing has started");
    assert_eq!(sim.endpoint_pairs_peak(), 0, "no pair was ever made");
    let (mut saw_waiting, mut most_freed) = (false, 0);
    loop {
        let over = sim.step(2000);
        let started = sim.flow_states().filter(|f| f.started().is_some()).count() as u64;
        let open = sim.open_endpoint_pairs();
        assert!(open <= started, "{open} pairs open, {started} flows started");
        saw_waiting |= started < flows / 2 && open > 0;
        most_freed = most_freed.max(started - open);
        if over {
            break;
        }
    }
    assert!(saw_waiting, "the run never had started and unstarted flows at once");
    assert_eq!(sim.progress().flows_done, flows, "every flow finished");
    // done flows gave their pairs back, and later ones reused them: never one per flow
    let peak = sim.endpoint_pairs_peak() as u64;
    eprintln!("{flows} flows, at most {peak} pairs at once, up to {most_freed} given back");
    assert!(peak <= flows / 2, "{peak} pairs for {flows} flows");
    assert!(most_freed >= flows / 2, "only {most_freed} of {flows} pairs given back");
}
