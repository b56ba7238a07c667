//! The switch's command line, `gradwire-emu run | check | sweep`: the `gradwire-emu` binary
//! and the Python extension's `gradwire._core.emu_main` (what `gradwire emulate` runs in a
//! child process, `python -m gradwire.emu.switch`, so an installed wheel carries the switch)
//! both call [`main`].
//!
//! `run SCENARIO.toml [--stats FILE] [--duration S] [--watch-stdin] [--set KEY=VALUE]...`
//! `check SCENARIO.toml [--set KEY=VALUE]...` (validate, list hosts and ports)
//! `sweep` (remove namespaces left by runs that are gone)

use crate::{netns, run, scenario, switch::Switch};
use std::path::PathBuf;

const USAGE: &str =
    "usage: gradwire-emu run SCENARIO.toml [--stats FILE] [--duration SECONDS] [--watch-stdin] [--set KEY=VALUE]...
       gradwire-emu check SCENARIO.toml [--set KEY=VALUE]...
       gradwire-emu sweep";

fn load(path: &str, overrides: &[String]) -> Result<scenario::EmuScenario, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    scenario::load_with(&text, overrides).map_err(|e| format!("{path}: {e}"))
}

fn main_inner(args: &[String]) -> Result<i32, String> {
    match args.first().map(String::as_str) {
        Some("sweep") => {
            for ns in netns::sweep_stale() {
                println!("removed {ns}");
            }
            Ok(0)
        }
        Some("check") if args.len() >= 2 => {
            let mut overrides = Vec::new();
            let mut rest = args[2..].iter();
            while let Some(a) = rest.next() {
                match a.as_str() {
                    "--set" => overrides.push(rest.next().ok_or("--set needs KEY=VALUE")?.clone()),
                    other => return Err(format!("unknown option {other}\n{USAGE}")),
                }
            }
            let s = load(&args[1], &overrides)?;
            let sw = Switch::new(&s);
            println!("{}: {} hosts, ports: {}", s.sim.name, sw.hosts(), sw.port_names().join(", "));
            Ok(0)
        }
        Some("run") if args.len() >= 2 => {
            let mut overrides = Vec::new();
            let mut opts = run::Options {
                prefix: netns::prefix_for(std::process::id()),
                stats: None,
                watch_stdin: false,
                duration: None,
            };
            let mut rest = args[2..].iter();
            while let Some(a) = rest.next() {
                match a.as_str() {
                    "--stats" => opts.stats = Some(PathBuf::from(rest.next().ok_or("--stats needs a file")?)),
                    "--duration" => {
                        let v = rest.next().ok_or("--duration needs seconds")?;
                        opts.duration = Some(v.parse().map_err(|_| format!("--duration {v}: not a number"))?);
                    }
                    "--watch-stdin" => opts.watch_stdin = true,
                    "--set" => overrides.push(rest.next().ok_or("--set needs KEY=VALUE")?.clone()),
                    other => return Err(format!("unknown option {other}\n{USAGE}")),
                }
            }
            let s = load(&args[1], &overrides)?;
            let sig = run::run(&s, &opts).map_err(|e| format!("gradwire-emu: {e}"))?;
            Ok(if sig == 0 { 0 } else { 128 + sig })
        }
        _ => Err(USAGE.to_string()),
    }
}

/// Runs the switch's command line (`args` without the program name); returns the exit
/// code: 0, 2 for bad arguments or a failure (the message is on stderr), 128 + the signal
/// that stopped a run.
pub fn main(args: &[String]) -> i32 {
    match main_inner(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{e}");
            2
        }
    }
}
