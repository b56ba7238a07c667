//! `gradwire-sim SCENARIO.toml [--out DIR] [--seed N] [--set key=value]...`
//!
//! The simulator without Python, for benchmarks and scripting. One run writes its files
//! into DIR; a sweep writes DIR/<run>/ per point. Exit code 2 on a bad scenario.

use gradwire_sim::{load, Runner};
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: gradwire-sim SCENARIO.toml [--out DIR] [--seed N] [--set key=value]... [--quiet]";

/// The allocator of the Python extension too (see `gradwire-py`): 4 % less CPU. The
/// `system-alloc` feature leaves it out, for heap profilers that hook malloc.
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut scenario = None;
    let mut out = PathBuf::from("out");
    let mut overrides = Vec::new();
    let mut quiet = false;
    while let Some(a) = args.next() {
        let mut value = |flag: &str| args.next().ok_or_else(|| format!("{flag} needs a value"));
        let r = match a.as_str() {
            "--out" => value("--out").map(|v| out = v.into()),
            "--seed" => value("--seed").map(|v| overrides.push(format!("seed={v}"))),
            "--set" => value("--set").map(|v| overrides.push(v)),
            "--quiet" => {
                let _: () = quiet = true;
                Ok(())
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ if scenario.is_none() && !a.starts_with('-') => {
                let _: () = scenario = Some(PathBuf::from(&a));
                Ok(())
            }
            _ => Err(format!("unexpected argument `{a}`")),
        };
        if let Err(e) = r {
            eprintln!("error: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    let Some(path) = scenario else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let runs = match load(&text, &overrides) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error in {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let single = runs.len() == 1;
    for run in runs {
        let mut sim = match Runner::new(&run.scenario) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error in {}: {e}", path.display());
                return ExitCode::from(2);
            }
        };
        sim.run();
        let dir = if single { out.clone() } else { out.join(&run.name) };
        match sim.write_outputs(&dir) {
            Ok(s) if !quiet => println!(
                "{}: {}/{} flows, mean FCT {:.1} us, p99 {:.1} us, {} events in {:.2} s -> {}",
                run.name,
                s.flows_finished,
                s.flows,
                s.fct_mean_ns.unwrap_or(f64::NAN) / 1e3,
                s.fct_p99_ns.map_or(f64::NAN, |v| v as f64 / 1e3),
                s.events,
                s.wall_seconds,
                dir.display()
            ),
            Ok(_) => {}
            Err(e) => {
                eprintln!("error: writing {}: {e}", dir.display());
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
