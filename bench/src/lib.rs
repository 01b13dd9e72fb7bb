//! # psybench
//!
//! Sweeps psyne's collectives over message sizes and records latency and bandwidth curves (CSV,
//! JSON, PNG), side by side for several backends (native vs MPI) and algorithms.

pub mod app;
pub mod backend;
pub mod buffer;
pub mod check;
pub mod cli;
pub mod compare;
pub mod config;
pub mod destination;
pub mod export;
pub mod factors;
pub mod fit;
pub mod launch;
pub mod many_cores;
pub mod measure;
pub mod memory;
pub mod meta;
pub mod model;
pub mod peak;
pub mod plot;
pub mod runner;
pub mod sizes;
pub mod stats;
pub mod table;
pub mod tune;
