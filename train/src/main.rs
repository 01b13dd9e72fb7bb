//! `train`: data-parallel training of an MLP on the handwritten digits with psyne. Run it under
//! psyrun (`psyrun -n 4 train --check`); `train --help` lists the flags.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = train::Args::parse();
    match args.validate().and_then(train::run) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("train: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
