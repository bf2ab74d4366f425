//! A writer killed with SIGKILL in the middle of a burst leaves a folder where every
//! session file parses, `index.json` points only at files that exist, and, once the
//! folder is opened again, `index.json` agrees exactly with the files and every write
//! that was acknowledged before the kill is there.
//!
//! The writer is this test binary itself, started again with `CRASH_WRITER_DIR` set so
//! that the `crash_writer_child` test turns into the writer.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;
use stepwise_core::document::{DocumentLimits, parse_document};
use stepwise_core::{EventType, ExecutionStatus, Role, StepBody, StepKind};
use stepwise_store::prelude::*;
use stepwise_store::{
    MessageQuery, NewEvent, NewExecution, NewMessage, NewSession, NewStep, Tenant,
};
use stepwise_store_files::{FileStore, INDEX_FILE, IndexFile, METADATA_FILE};

const DIR_VAR: &str = "CRASH_WRITER_DIR";

/// Kills the child on every path out of the test.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The writer: four tasks, each creating sessions and appending messages (awaited, then
/// reported on stdout as `acked NAME COUNT`), steps and events (fire-and-forget), until
/// the process is killed.
#[test]
fn crash_writer_child() {
    let Some(dir) = std::env::var_os(DIR_VAR) else {
        return; // an ordinary test run: nothing to do
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    runtime.block_on(async move {
        let store = FileStore::open(Path::new(&dir)).unwrap_or_else(|e| panic!("open: {e}"));
        let round = std::env::var("CRASH_ROUND").unwrap_or_default();
        let mut tasks = Vec::new();
        for w in 0..4 {
            let store = store.clone();
            let round = round.clone();
            tasks.push(tokio::spawn(async move {
                let tenant = Tenant::new(if w == 3 { "acme" } else { "local" })
                    .unwrap_or_else(|e| panic!("{e}"));
                for i in 0..100_000 {
                    let name = format!("r{round}-w{w}-s{i}");
                    let session = store
                        .create_session(
                            &tenant,
                            NewSession {
                                user_id: "u".into(),
                                name: Some(name.clone()),
                                title: Some(format!("Session {i} of writer {w}")),
                                ..NewSession::default()
                            },
                        )
                        .await
                        .unwrap_or_else(|e| panic!("create: {e}"));
                    let execution = store
                        .create_execution(
                            &tenant,
                            NewExecution {
                                session_id: Some(session.id),
                                parent_execution_id: None,
                                user_id: "u".into(),
                                agent_type: "demo".into(),
                                agent_config: json!(null),
                                input: json!("go"),
                                metadata: json!({}),
                                status: ExecutionStatus::Running,
                                lease: None,
                            },
                        )
                        .await
                        .unwrap_or_else(|e| panic!("execution: {e}"));
                    for n in 1..=6u32 {
                        let message =
                            NewMessage::new(session.id, Role::User, format!("message {n}"));
                        store
                            .append_message(&tenant, message)
                            .await
                            .unwrap_or_else(|e| panic!("message: {e}"));
                        println!("acked {} {name} {n}", tenant.as_str());
                        let body = StepBody {
                            model_output: Some(format!("thinking {n} ").repeat(20)),
                            ..StepBody::default()
                        };
                        let step = NewStep {
                            execution_id: execution.id,
                            step_number: n,
                            kind: StepKind::Action,
                            body,
                        };
                        drop(store.append_step(&tenant, step).await);
                        let event = NewEvent {
                            session_id: session.id,
                            message_id: None,
                            execution_id: Some(execution.id),
                            event_type: EventType::StepCompleted,
                            content: format!("Completed step {n}"),
                            metadata: json!({"step_number": n}),
                        };
                        drop(store.append_event(&tenant, event).await);
                    }
                }
            }));
        }
        for task in tasks {
            let _ = task.await;
        }
    });
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(json_files(&path));
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
    out
}

fn folders(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    for entry in std::fs::read_dir(dir.join("tenants"))
        .into_iter()
        .flatten()
        .flatten()
    {
        out.push(entry.path());
    }
    out
}

/// Every `.json` file parses: session files as session documents (strictly, as an
/// import would read them), `index.json` as an index, `metadata.json` as JSON.
fn assert_every_file_parses(dir: &Path) {
    for path in json_files(dir) {
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        match name.as_deref() {
            Some(INDEX_FILE) => {
                serde_json::from_slice::<IndexFile>(&bytes)
                    .unwrap_or_else(|e| panic!("{} is not an index: {e}", path.display()));
            }
            Some(METADATA_FILE) => {
                serde_json::from_slice::<serde_json::Value>(&bytes)
                    .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
            }
            _ => {
                parse_document(&bytes, &DocumentLimits::default()).unwrap_or_else(|e| {
                    panic!("{} is not a session document: {e}", path.display())
                });
            }
        }
    }
}

/// How `index.json` and the session files of each folder compare. `exact`: every entry
/// equal to what the files say, and every file listed; otherwise only that each entry
/// names an existing file of the same session, whose counts are not behind the entry's.
fn check_index(dir: &Path, exact: bool) -> usize {
    let mut lagging = 0;
    for folder in folders(dir) {
        let mut files: HashMap<String, stepwise_core::SessionDocument> = HashMap::new();
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".json") || name == INDEX_FILE || name == METADATA_FILE {
                continue;
            }
            let bytes = std::fs::read(entry.path()).unwrap_or_default();
            if let Ok(doc) = parse_document(&bytes, &DocumentLimits::default()) {
                files.insert(name, doc);
            }
        }
        let index_path = folder.join(INDEX_FILE);
        let Ok(bytes) = std::fs::read(&index_path) else {
            assert!(
                !exact || files.is_empty(),
                "{} is missing while session files exist",
                index_path.display()
            );
            continue;
        };
        let index: IndexFile = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{}: {e}", index_path.display()));
        for entry in &index.sessions {
            let doc = files.get(&entry.file).unwrap_or_else(|| {
                panic!("index.json lists {} but there is no such file", entry.file)
            });
            assert_eq!(doc.session.id, entry.id, "{}", entry.file);
            assert!(
                doc.session.message_count >= entry.message_count,
                "{}: the index is ahead of the file",
                entry.file
            );
            if exact {
                assert_eq!(entry.name, doc.session.name);
                assert_eq!(entry.description, doc.session.title);
                assert_eq!(entry.status, doc.session.status);
                assert_eq!(entry.created_at, doc.session.created_at);
                assert_eq!(entry.updated_at, doc.session.updated_at, "{}", entry.file);
                assert_eq!(
                    entry.message_count, doc.session.message_count,
                    "{}",
                    entry.file
                );
                assert_eq!(entry.message_count, doc.messages.len() as u64);
                let first = doc
                    .messages
                    .iter()
                    .find(|m| m.role == Role::User)
                    .map(|m| m.content.clone());
                assert_eq!(entry.first_message, first, "{}", entry.file);
            } else if entry.message_count != doc.session.message_count
                || entry.updated_at != doc.session.updated_at
            {
                lagging += 1;
            }
        }
        if exact {
            assert_eq!(
                index.sessions.len(),
                files.len(),
                "{}: every session file is listed",
                index_path.display()
            );
        } else {
            lagging += files.len().saturating_sub(index.sessions.len());
        }
    }
    lagging
}

#[test]
fn a_kill_mid_burst_leaves_every_file_whole_and_the_index_in_agreement() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    // Acknowledged messages, by (tenant, session name): the highest count acknowledged.
    let mut acked: HashMap<(String, String), u32> = HashMap::new();
    for (round, kill_after) in [(0, 25), (1, 120), (2, 400)] {
        let child = Command::new(&exe)
            .args([
                "--exact",
                "crash_writer_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_VAR, dir.path())
            .env("CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the writer: {e}"));
        let mut child = Killed(child);
        // A writer that hangs without printing would block the read below: kill it then.
        let (done, watchdog) = std::sync::mpsc::channel::<()>();
        let pid = child.0.id().to_string();
        std::thread::spawn(move || {
            if watchdog.recv_timeout(Duration::from_secs(120)).is_err() {
                let _ = Command::new("kill").args(["-9", &pid]).status();
            }
        });
        let stdout = child.0.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let mut seen = 0;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut parts = line.split_whitespace();
            if parts.next() != Some("acked") {
                continue;
            }
            let (Some(tenant), Some(name), Some(n)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let n: u32 = n.parse().unwrap_or(0);
            let best = acked
                .entry((tenant.to_string(), name.to_string()))
                .or_default();
            *best = (*best).max(n);
            seen += 1;
            if seen >= kill_after {
                break;
            }
        }
        assert_eq!(seen, kill_after, "the writer stopped before it was killed");
        // SIGKILL, mid-burst: the other tasks are still writing.
        child.0.kill().unwrap_or_else(|e| panic!("kill: {e}"));
        let _ = child.0.wait();
        let _ = done.send(());
        drop(child);

        assert_every_file_parses(dir.path());
        let lagging = check_index(dir.path(), false);
        eprintln!(
            "round {round}: killed after {kill_after} acknowledged messages; {lagging} index entries one batch behind"
        );

        // Opening again repairs the index, and everything acknowledged is there.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        runtime.block_on(async {
            let store = FileStore::open(dir.path()).unwrap_or_else(|e| panic!("reopen: {e}"));
            assert_eq!(
                store.open_report().skipped,
                Vec::new(),
                "no file was skipped"
            );
            for ((tenant, name), count) in &acked {
                let tenant = Tenant::new(tenant.clone()).unwrap_or_else(|e| panic!("{e}"));
                let session = store
                    .find_session_by_name(&tenant, name)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"))
                    .unwrap_or_else(|| panic!("acknowledged session {name} is missing"));
                let messages = store
                    .list_messages(&tenant, session.id, MessageQuery::default())
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                assert!(
                    messages.len() as u32 >= *count,
                    "{name}: {} messages, {count} were acknowledged",
                    messages.len()
                );
                assert_eq!(session.message_count, messages.len() as u64);
            }
            store.close().await.unwrap_or_else(|e| panic!("close: {e}"));
        });
        assert_every_file_parses(dir.path());
        check_index(dir.path(), true);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "open removed the temporary files");
    }
}
