//! Stepwise's benchmarks, kept out of the product crates: [`commands`] is `stepwise bench`
//! (the storage workload, queue depth, HTTP intake, fan-out, idle, retention, PostgreSQL; the
//! binary only dispatches to it), and [`http_figures`] measures the real server over HTTP (in
//! one process, or a server running in a process of its own), the load generator of
//! `stepwise bench http` and `stepwise bench fanout`.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod commands;
pub mod http_figures;

pub use commands::{BenchArgs, run};
