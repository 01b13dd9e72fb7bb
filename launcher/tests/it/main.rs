//! psyrun's integration tests, one binary (`cargo test -p psyrun --test it`). Each module is the
//! tests of one subject. Tiers, selected by name (scripts/ci/test.sh runs them):
//! - every module but `root::`: psyrun and its ranks as processes on loopback (the process tier);
//! - `root::`: SSH clusters in network namespaces, Slurm, and real MPI libraries (the root tier:
//!   each test says why and passes when it lacks root or a package scripts/setup.sh installs).
//!
//! The programs these tests run (psyrun, psyne-check, psyne's examples, train) are built by the
//! test command before the tests (scripts/ci/test.sh; see [`common::built`]), never by a test.

mod common;

mod binding;
mod cli;
mod collectives;
mod contract;
mod env_forward;
mod env_rendezvous;
mod examples;
mod hosts_local;
mod mpmd;
mod output;
mod restart;
mod shrink;
mod store_strangers;
mod supervision;
mod train;
mod tuning_file;

/// Tests that need root or installed MPI libraries and Slurm (the root tier).
mod root {
    mod cluster;
    mod mpi;
    mod mpi_examples;
    mod mpi_programs;
    mod multihost;
    mod pmi_simple;
    mod pmix;
    mod slurm;
    mod slurm_nodes;
    mod small_shm;
}
