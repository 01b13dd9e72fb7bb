//! # psybench
//!
//! Sweeps psyne's collectives over message sizes and records latency and bandwidth curves (CSV,
//! JSON, PNG), side by side for several backends (native vs MPI) and algorithms.

pub mod model;
