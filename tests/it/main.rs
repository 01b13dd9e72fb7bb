//! psyne's integration tests, one binary (`cargo test -p psyne --test it`). Each module is the
//! tests of one subject. Tiers, selected by name (scripts/ci/test.sh runs them):
//! - `sim::`: schedules against the oracle and the simulator, no sockets (the unit tier);
//! - every other module: ranks as threads over real TCP and shared memory on loopback (the
//!   process tier).

mod common;

mod canonical;
mod collectives;
mod failures;
mod hier;
mod interrupt;
mod lazy_connections;
mod mismatch_roles;
mod misuse;
mod nonblocking;
mod rdma;
mod shared_buffers;
mod split;
mod strangers;

/// Schedules against the oracle and the simulator: pure, no sockets (the unit tier).
mod sim {
    mod domains_schedule;
    mod hier_schedule;
    mod schedule_oracle;
    mod values;
}
