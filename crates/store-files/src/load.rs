//! Opening a folder: every file is read; a file that cannot be read is reported and
//! skipped (and never overwritten), the others load. Leftovers of an interrupted write
//! (temporary files, the old file of a rename) are cleaned up, and `index.json` is
//! rebuilt from the session files whenever it disagrees with them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use stepwise_core::name::validate_name;
use stepwise_core::{Id, Session};

use crate::disk::{
    self, Decoded, INDEX_FILE, LOCAL_TENANT, METADATA_FILE, TENANTS_DIR, decode_container,
    is_temp_file, stem_of, tenant_dir, tenant_dir_name,
};
use crate::state::{Key, State, TenantState};

/// A file that was skipped at open, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedFile {
    pub path: PathBuf,
    pub reason: String,
}

/// What opening a folder found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpenReport {
    /// Sessions loaded, over every tenant.
    pub sessions: usize,
    /// Files that could not be read; they are left as they are.
    pub skipped: Vec<SkippedFile>,
    /// Records inside readable files that could not be decoded (kept aside, counted).
    pub damaged_records: u64,
    /// Leftovers of interrupted writes that were removed.
    pub removed_leftovers: Vec<PathBuf>,
}

struct Candidate {
    stem: String,
    path: PathBuf,
    decoded: Decoded,
}

pub(crate) fn load(root: &Path) -> std::io::Result<(State, OpenReport)> {
    let mut state = State::default();
    let mut report = OpenReport::default();
    load_tenant_dir(
        &mut state,
        &mut report,
        root,
        Some(LOCAL_TENANT.to_string()),
        true,
    )?;
    let tenants = root.join(TENANTS_DIR);
    if tenants.is_dir() {
        let mut dirs: Vec<_> = std::fs::read_dir(&tenants)?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .collect();
        dirs.sort_by_key(|e| e.file_name());
        for entry in dirs {
            let name = entry.file_name().to_string_lossy().into_owned();
            let hint = if name.starts_with('~') {
                None
            } else if validate_name(&name).is_ok() && name != LOCAL_TENANT {
                Some(name)
            } else {
                report.skipped.push(SkippedFile {
                    path: entry.path(),
                    reason: "not a tenant folder this store writes".into(),
                });
                continue;
            };
            load_tenant_dir(&mut state, &mut report, &entry.path(), hint, false)?;
        }
    }
    // The index is derived: rebuild it wherever it disagrees with the session files.
    for (tenant, ts) in &state.tenants {
        let built = disk::build_index(tenant, ts.sessions.values());
        let on_disk = std::fs::read(ts.dir.join(INDEX_FILE))
            .ok()
            .and_then(|b| serde_json::from_slice::<disk::IndexFile>(&b).ok());
        if on_disk.as_ref() != Some(&built) {
            state.pending.index_dirty.insert(tenant.clone());
        }
    }
    report.sessions = state.tenants.values().map(|t| t.sessions.len()).sum();
    Ok((state, report))
}

fn load_tenant_dir(
    state: &mut State,
    report: &mut OpenReport,
    dir: &Path,
    mut tenant: Option<String>,
    root: bool,
) -> std::io::Result<()> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let skip = |report: &mut OpenReport, path: &Path, reason: String| {
        tracing::warn!(file = %path.display(), %reason, "skipping a file that cannot be read");
        report.skipped.push(SkippedFile {
            path: path.to_path_buf(),
            reason,
        });
    };
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut metadata: Option<Decoded> = None;
    let mut blocked: Vec<String> = Vec::new();
    for name in names {
        let path = dir.join(&name);
        if is_temp_file(&name) {
            // A write that never reached its rename: the real file is intact.
            if std::fs::remove_file(&path).is_ok() {
                report.removed_leftovers.push(path);
            }
            continue;
        }
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        if name == INDEX_FILE {
            continue;
        }
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) => {
                skip(report, &path, format!("cannot be read: {e}"));
                blocked.push(stem.to_string());
                continue;
            }
        };
        state.file_sizes.insert(path.clone(), bytes.len() as u64);
        if name == METADATA_FILE {
            match decode_container(&bytes, false) {
                Ok(decoded) => metadata = Some(decoded),
                Err(e) => skip(report, &path, e.0),
            }
            continue;
        }
        if disk::session_path(dir, stem).is_none() {
            skip(report, &path, "not a session file name".into());
            continue;
        }
        match decode_container(&bytes, true) {
            Ok(decoded) => candidates.push(Candidate {
                stem: stem.to_string(),
                path,
                decoded,
            }),
            Err(e) => {
                skip(report, &path, e.0);
                blocked.push(stem.to_string());
            }
        }
    }
    // Which tenant this folder is: known from its name, or from what its files say.
    if tenant.is_none() {
        tenant = metadata
            .as_ref()
            .and_then(|m| m.tenant_id.clone())
            .or_else(|| {
                candidates
                    .iter()
                    .find_map(|c| c.decoded.container.session.as_ref())
                    .map(|s| s.tenant_id.clone())
            });
    }
    let Some(tenant) = tenant else {
        return Ok(());
    };
    let dir_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !root && tenant_dir_name(&tenant) != dir_name {
        skip(
            report,
            dir,
            format!("its files belong to tenant {tenant:?}, which is kept elsewhere"),
        );
        return Ok(());
    }
    let root_dir = if root {
        dir.to_path_buf()
    } else {
        dir.parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_default()
    };
    let mut ts = TenantState {
        dir: tenant_dir(&root_dir, &tenant),
        ..TenantState::default()
    };
    ts.blocked_stems.extend(blocked);

    if let Some(meta) = metadata {
        let path = dir.join(METADATA_FILE);
        if meta.tenant_id.as_deref().is_some_and(|t| t != tenant) {
            skip(report, &path, "it belongs to another tenant".into());
        } else {
            report.damaged_records += meta.damaged_records;
            if root {
                state.api_keys = meta.api_keys;
                state.signing_keys = meta.signing_keys;
            }
            ts.loose = meta.container;
            ts.loose.session = None;
            ts.loose.executions.retain(|e| {
                let own = e.execution.tenant_id == tenant
                    && !state.executions.contains_key(&e.execution.id);
                if own {
                    state.executions.insert(
                        e.execution.id,
                        Key {
                            tenant: tenant.clone(),
                            session: None,
                        },
                    );
                }
                own
            });
            for s in &ts.loose.snapshots {
                state.snapshots.insert(
                    s.id,
                    Key {
                        tenant: tenant.clone(),
                        session: None,
                    },
                );
            }
        }
    }

    // One file per session: when two files hold the same session (a rename or a naming
    // that a crash interrupted), keep the one named after the session, then the newest.
    let mut by_session: HashMap<Id, Vec<Candidate>> = HashMap::new();
    for c in candidates {
        let Some(session) = c.decoded.container.session.as_ref() else {
            continue;
        };
        if session.tenant_id != tenant {
            skip(
                report,
                &c.path,
                format!("it belongs to tenant {:?}", session.tenant_id),
            );
            ts.blocked_stems.insert(c.stem);
            continue;
        }
        if let Some(name) = &session.name
            && let Err(e) = validate_name(name)
        {
            skip(report, &c.path, format!("its session name is invalid: {e}"));
            ts.blocked_stems.insert(c.stem);
            continue;
        }
        by_session.entry(session.id).or_default().push(c);
    }
    let mut sessions: Vec<Candidate> = Vec::new();
    for (_, mut group) in by_session {
        group.sort_by_key(|c| {
            let session = c.decoded.container.session.as_ref();
            let named_right = session.is_some_and(|s| stem_of(s) == c.stem);
            (named_right, session.map(|s| s.updated_at))
        });
        let Some(best) = group.pop() else { continue };
        for stale in group {
            tracing::info!(file = %stale.path.display(), "removing an older copy of a session left by an interrupted rename");
            if std::fs::remove_file(&stale.path).is_ok() {
                report.removed_leftovers.push(stale.path);
            }
        }
        sessions.push(best);
    }
    sessions.sort_by_key(|c| c.stem.clone());
    for c in sessions {
        let Decoded {
            container,
            damaged_records,
            ..
        } = c.decoded;
        let Some(session): Option<&Session> = container.session.as_ref() else {
            continue;
        };
        let id = session.id;
        let proper = stem_of(session);
        let clash = ts.stems.get(&proper).is_some_and(|other| *other != id)
            || ts.blocked_stems.contains(&proper) && proper != c.stem
            || session
                .name
                .as_ref()
                .is_some_and(|n| ts.names.get(n).is_some_and(|o| *o != id));
        let foreign_ids = container
            .executions
            .iter()
            .any(|e| state.executions.contains_key(&e.execution.id));
        if clash || foreign_ids {
            skip(
                report,
                &c.path,
                "it holds a session or records that another file already holds".into(),
            );
            ts.blocked_stems.insert(c.stem);
            continue;
        }
        report.damaged_records += damaged_records;
        let key = Key {
            tenant: tenant.clone(),
            session: Some(id),
        };
        if proper != c.stem {
            // Renamed by hand: write it back under its own name.
            state.pending.dirty.insert(key.clone());
            state
                .pending
                .removals
                .push((tenant.clone(), c.stem.clone()));
        }
        if let Some(name) = &session.name {
            ts.names.insert(name.clone(), id);
        }
        ts.stems.insert(proper, id);
        for e in &container.executions {
            state.executions.insert(e.execution.id, key.clone());
        }
        for s in &container.snapshots {
            state.snapshots.insert(s.id, key.clone());
        }
        ts.sessions.insert(id, container);
    }
    state.tenants.insert(tenant, ts);
    Ok(())
}
