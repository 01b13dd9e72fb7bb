//! psybench's integration tests, one binary (`cargo test -p psybench --test it`). Each module is
//! the tests of one subject; `root::` holds the ones that need a real MPI (the root tier of
//! scripts/ci/test.sh), every other one runs psybench as a process on loopback (the process tier).

mod common;

mod cli;
mod compare;
mod e2e;
mod export;
mod fit;
mod plot;
mod sizes_factors_stats;
mod table_meta;
mod versus_paired;

/// Tests against a real MPI (the root tier).
mod root {
    mod crosscheck;
}
