//! What the `stepwise` binary's commands (crates/cli) and its benchmarks (crates/bench) share:
//! the database a URL names, opened as one store type ([`db::OpenedStore`], so the generic
//! server and engine are compiled once, not once per backend), the data directory it lives in
//! by default, aligned text tables ([`table`]) and a session's event stream parsed from a
//! response ([`sse`]).

#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::path::{Path, PathBuf};

use anyhow::bail;

pub mod db;
pub mod sse;
pub mod table;

/// The data directory: `STEPWISE_DATA_DIR` (or `--data-dir`), else `$XDG_DATA_HOME/stepwise`,
/// else `~/.local/share/stepwise`.
pub fn data_dir(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(dir) = explicit.filter(|d| !d.as_os_str().is_empty()) {
        return Ok(dir.to_path_buf());
    }
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(xdg).join("stepwise"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/stepwise")),
        None => bail!(
            "no data directory: set STEPWISE_DATA_DIR, XDG_DATA_HOME or HOME, or pass --database"
        ),
    }
}
