//! `psyrun -n N PROGRAM [ARGS...]`: start N ranks of PROGRAM on this machine and supervise them.
//! All the work is in the `psyrun` library; see `psyrun --help` for the flags and exit codes.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(psyrun::cli_main(std::env::args_os()))
}
