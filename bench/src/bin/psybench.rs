//! `psybench`: sweeps psyne's collectives over message sizes. See `psybench --help`.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(psybench::app::main_with(std::env::args().collect()))
}
