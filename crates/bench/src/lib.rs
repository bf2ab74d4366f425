//! Stepwise's benchmarks, kept out of the product crates: [`http_figures`] measures the real
//! server over HTTP (in one process, or a server running in a process of its own), and is
//! the load generator of `stepwise bench http` and `stepwise bench fanout`.

pub mod http_figures;
