//! `gradwire-emu run | check | sweep`: the switch on its own (see [`gradwire_emu::cli`]).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    ExitCode::from(gradwire_emu::cli::main(&args) as u8)
}
