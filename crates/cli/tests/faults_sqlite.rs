//! The fault suite on SQLite, with the real `stepwise serve` binary over loopback, each
//! test on its own temporary database:
//! - `--durability full` syncs the WAL between writing a step and answering for it
//!   (seen with `strace`), `process` does not;
//! - the WAL stays bounded under steady writes and is truncated when writes stop; under the
//!   default limit it starts over long before that limit;
//! - a second `serve` on the same file refuses to start, CLI commands still work;
//! - pausing and resuming an execution many times is not counted as crashes;
//! - kill -9 under 32 writing clients: every acknowledged step is there exactly once;
//! - a full disk (a small tmpfs, when running as root) answers 503 `storage_full`, turns
//!   `/readyz` and `stepwise_store_writable` to not ready, and recovers once space is freed
//!   (SQLite, and the session-files backend);
//! - a corrupted stored step is skipped and counted, the rest of the session still served.

mod fault_support;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fault_support::*;
use serde_json::json;

fn db_arg(db: &Path) -> String {
    format!("sqlite://{}", db.display())
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn wal_path(db: &Path) -> std::path::PathBuf {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    wal.into()
}

// --- durability ------------------------------------------------------------------------

/// `serve` on `db` (with `args`) under `strace -f -y`: its disk syncs and writes, and
/// the HTTP it reads and writes, go to `trace.txt` beside `db`.
fn traced_serve(db: &Path, args: &[&str]) -> Server {
    let trace = db.with_file_name("trace.txt").display().to_string();
    let db_text = db_arg(db);
    let mut all = vec!["--database", &db_text];
    all.extend_from_slice(args);
    let started = start_serve(
        &all,
        &db.with_file_name("serve.log"),
        &[
            "strace",
            "-f",
            "-y",
            "-s",
            "64",
            "-e",
            "trace=fsync,fdatasync,pwrite64,write,writev,sendto,sendmsg,read,recvfrom",
            "-o",
            &trace,
        ],
    );
    match started {
        Started::Listening(server) => server,
        Started::Exited(status, log) => panic!("serve under strace exited ({status}):\n{log}"),
    }
}

/// Stops a server from [`traced_serve`] (strace's child; strace ends with it, its trace
/// complete) and returns the trace.
fn stop_traced(mut server: Server, db: &Path) -> String {
    let strace_pid = server.child.id();
    let children =
        std::fs::read_to_string(format!("/proc/{strace_pid}/task/{strace_pid}/children"))
            .unwrap_or_default();
    for pid in children.split_whitespace() {
        let _ = Command::new("kill").args(["-TERM", pid]).status();
    }
    wait_for("the traced server to exit", || {
        server.child.try_wait().ok().flatten()
    });
    std::fs::read_to_string(db.with_file_name("trace.txt")).expect("read the trace")
}

/// The trace lines of one posted step: the read of its request and the answer carrying
/// its id.
fn step_window(lines: &[&str], execution: &str, step_id: &str) -> (usize, usize) {
    let answer = lines
        .iter()
        .position(|l| {
            l.contains(&format!("\\\"id\\\":\\\"{step_id}")) && l.contains("HTTP/1.1 201")
        })
        .or_else(|| {
            lines
                .iter()
                .position(|l| l.contains(&format!("\\\"id\\\":\\\"{step_id}")))
        })
        .unwrap_or_else(|| panic!("the answer for step {step_id} is not in the trace"));
    let request = lines[..answer]
        .iter()
        .rposition(|l| l.contains(&format!("POST /v1/executions/{execution}/steps")))
        .unwrap_or_else(|| panic!("the request for step {step_id} is not in the trace"));
    (request, answer)
}

/// Runs a server under `strace`, posts one step, and answers whether the writer thread
/// synced the WAL between the request and the HTTP answer for it, after writing frames.
///
/// The window starts at the read of the request: the writer writes each batch's frames and,
/// with `full`, syncs them before it takes the next batch, so the step's commit (in the
/// window, answered only once durable) or an earlier batch in the window is followed by a
/// sync before the answer. With `process` nothing syncs the WAL there. (Queued writes that
/// commit after the step, such as its events, may write frames before the answer goes out
/// and sync after it: the window's last frames are not always the step's.)
fn synced_before_answer(durability: &str) -> Option<bool> {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("stepwise.db");
    let server = traced_serve(&db, &["--durability", durability]);
    let (_, execution) = external_execution(&server.addr);
    let (status, step) = server.request(
        "POST",
        &format!("/v1/executions/{execution}/steps"),
        Some(&step_body(1, 100)),
    );
    assert_eq!(status, 201, "{step}");
    let step_id = step["id"].as_str().expect("step id").to_string();
    let text = stop_traced(server, &db);
    let lines: Vec<&str> = text.lines().collect();
    let (request, answer) = step_window(&lines, &execution, &step_id);
    // The first WAL write after it, and the thread that made it (the writer).
    let wal_write = request
        + lines[request..answer]
            .iter()
            .position(|l| l.contains("pwrite64(") && l.contains("-wal>"))
            .expect("a WAL write between the request and the answer");
    let tid = lines[wal_write].split_whitespace().next().unwrap_or("");
    let synced = lines[wal_write..answer].iter().any(|l| {
        l.split_whitespace().next() == Some(tid)
            && (l.contains("fsync(") || l.contains("fdatasync("))
            && l.contains("-wal>")
    });
    Some(synced)
}

fn strace_available() -> bool {
    let ok = Command::new("strace")
        .args(["-f", "-e", "trace=none", "true"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        eprintln!(
            "\n*** SKIPPED: strace is not installed or cannot trace here (apt-get install strace) ***\n"
        );
    }
    ok
}

#[test]
fn durability_full_syncs_the_wal_before_answering_and_process_does_not() {
    if !strace_available() {
        return;
    }
    assert_eq!(
        synced_before_answer("full"),
        Some(true),
        "with --durability full the writer syncs the WAL between writing a step and the answer"
    );
    assert_eq!(
        synced_before_answer("process"),
        Some(false),
        "with --durability process the commit is not synced before the answer"
    );
}

/// An agent saves a step every few seconds, while its model answers. Each such save is
/// one commit at the end of the WAL: the WAL does not start over (which costs a sync of
/// its new header first), and nothing is checkpointed into the database file between the
/// saves (each checkpoint syncs that file too).
#[test]
fn steps_saved_seconds_apart_append_to_the_wal_without_starting_it_over() {
    if !strace_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("stepwise.db");
    let server = traced_serve(&db, &[]);
    let (_, execution) = external_execution(&server.addr);
    let mut ids = Vec::new();
    for n in 1..=4u64 {
        // Longer than a second: the pause that used to see the WAL checkpointed, then cut.
        std::thread::sleep(std::time::Duration::from_millis(1300));
        let (status, step) = server.request(
            "POST",
            &format!("/v1/executions/{execution}/steps"),
            Some(&step_body(n, 2000)),
        );
        assert_eq!(status, 201, "{step}");
        ids.push(step["id"].as_str().expect("step id").to_string());
    }
    let text = stop_traced(server, &db);
    let lines: Vec<&str> = text.lines().collect();
    let (first, _) = step_window(&lines, &execution, &ids[1]);
    let (_, last) = step_window(&lines, &execution, &ids[3]);
    let saves = &lines[first..last];
    let wal_header_writes: Vec<&&str> = saves
        .iter()
        .filter(|l| l.contains("pwrite64(") && l.contains("-wal>") && l.contains(", 32, 0)"))
        .collect();
    assert!(
        wal_header_writes.is_empty(),
        "the WAL started over between saves seconds apart: {wal_header_writes:#?}"
    );
    let database_syncs: Vec<&&str> = saves
        .iter()
        .filter(|l| {
            (l.contains("fsync(") || l.contains("fdatasync(")) && l.contains("stepwise.db>")
        })
        .collect();
    assert!(
        database_syncs.is_empty(),
        "the database file was checkpointed between saves seconds apart: {database_syncs:#?}"
    );
    let wal_syncs = saves
        .iter()
        .filter(|l| (l.contains("fsync(") || l.contains("fdatasync(")) && l.contains("-wal>"))
        .count();
    assert!(
        wal_syncs >= 3,
        "each save is synced ({wal_syncs} WAL syncs)"
    );
}

// --- the WAL stays bounded -------------------------------------------------------------

/// Four clients writing 1,000 steps of 8 KiB each (~40 MiB through the WAL) while the
/// `-wal` file is watched: the largest size it reached, and the database file's size after.
fn largest_wal_under_steady_writes(server: &Server, db: &Path) -> (u64, u64) {
    let wal = wal_path(db);
    let largest = Arc::new(Mutex::new(0u64));
    let writing = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (wal, largest, writing) = (wal.clone(), largest.clone(), writing.clone());
        std::thread::spawn(move || {
            while writing.load(Ordering::Relaxed) {
                let size = file_size(&wal);
                let mut max = largest.lock().expect("lock");
                *max = (*max).max(size);
                drop(max);
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
    };
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let addr = server.addr.clone();
            std::thread::spawn(move || {
                let (_, execution) = external_execution(&addr);
                for n in 1..=1000u64 {
                    let (status, body) = request(
                        &addr,
                        "POST",
                        &format!("/v1/executions/{execution}/steps"),
                        Some(&step_body(n, 8 * 1024)),
                    );
                    assert_eq!(status, 201, "step {n}: {body}");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().expect("writer");
    }
    writing.store(false, Ordering::Relaxed);
    watcher.join().expect("watcher");
    let largest = *largest.lock().expect("lock");
    let data = file_size(db);
    assert!(
        data > 20 * 1024 * 1024,
        "the writes reached the database file ({data} bytes)"
    );
    (largest, data)
}

#[test]
fn the_wal_stays_bounded_under_steady_writes_and_is_truncated_when_idle() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("stepwise.db");
    let db_text = db_arg(&db);
    // A 1 MiB bound, far below what goes through the WAL.
    let server = serve(
        &["--database", &db_text, "--wal-limit-mb", "1"],
        &dir.path().join("serve.log"),
    );
    let (largest, data) = largest_wal_under_steady_writes(&server, &db);
    // The bound is 1 MiB; a batch and the checkpoint in progress may pass it. Far less
    // than the data written (the WAL used to hold all of it).
    assert!(
        largest < 12 * 1024 * 1024,
        "the WAL grew to {largest} bytes under a 1 MiB bound ({data} bytes of data)"
    );
    // Idle: the WAL is checkpointed and truncated to nothing.
    wait_for("the idle WAL to be truncated", || {
        (file_size(&wal_path(&db)) == 0).then_some(())
    });
    let (status, _) = server.request("GET", "/readyz", None);
    assert_eq!(status, 200);
}

#[test]
fn under_steady_writes_the_wal_starts_over_long_before_its_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("stepwise.db");
    let db_text = db_arg(&db);
    // The default limit (64 MiB): truncating at three quarters of it is the last resort.
    // Before that, past 1,000 pages (4 MiB) the writer's commit checkpoints and the WAL
    // starts over from its beginning, so the file stops growing a few MiB in.
    let server = serve(&["--database", &db_text], &dir.path().join("serve.log"));
    let (largest, data) = largest_wal_under_steady_writes(&server, &db);
    assert!(
        largest < 24 * 1024 * 1024,
        "the WAL grew to {largest} bytes ({data} bytes of data): it did not start over"
    );
}

// --- one server per SQLite file ---------------------------------------------------------

#[test]
fn a_second_server_on_the_same_sqlite_file_refuses_and_cli_commands_still_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("stepwise.db");
    let db_text = db_arg(&db);
    let mut first = serve(&["--database", &db_text], &dir.path().join("first.log"));
    let (status, _) = first.request("POST", "/v1/sessions", Some(&json!({"name": "kept"})));
    assert_eq!(status, 201);

    match start_serve(
        &["--database", &db_text],
        &dir.path().join("second.log"),
        &[],
    ) {
        Started::Listening(_) => panic!("a second server started on the same SQLite file"),
        Started::Exited(status, log) => {
            assert!(!status.success(), "the second server exits non-zero");
            assert!(
                log.contains("another `stepwise serve` is already running")
                    && log.contains("PostgreSQL"),
                "the refusal says why and what to use for several servers:\n{log}"
            );
        }
    }
    // The same file through another path spelling is the same lock.
    let other_spelling = format!("sqlite://{}/./stepwise.db", dir.path().display());
    assert!(matches!(
        start_serve(
            &["--database", &other_spelling],
            &dir.path().join("third.log"),
            &[]
        ),
        Started::Exited(..)
    ));

    // CLI commands still use the file beside the running server.
    let out = Command::new(binary())
        .args(["sessions", "list", "--database", &db_text])
        .env_remove("STEPWISE_CONFIG")
        .output()
        .expect("sessions list");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("kept"));

    // Once the first server is gone, a new one starts.
    assert!(first.stop().success());
    drop(first);
    let again = serve(&["--database", &db_text], &dir.path().join("again.log"));
    let (status, _) = again.request("GET", "/readyz", None);
    assert_eq!(status, 200);
}

// --- pausing is not crashing -------------------------------------------------------------

#[test]
fn seven_pauses_then_kill_9_resume_the_execution_instead_of_failing_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("stepwise.db");
    let db_text = db_arg(&db);
    let args = [
        "--database",
        &db_text,
        "--lease-secs",
        "1",
        "--max-attempts",
        "5",
    ];
    let mut server = serve(&args, &dir.path().join("first.log"));
    let (session, execution) = external_execution(&server.addr);
    let get = |server: &Server| {
        let (status, body) = server.request("GET", &format!("/v1/executions/{execution}"), None);
        assert_eq!(status, 200, "{body}");
        body["status"].as_str().unwrap_or_default().to_string()
    };
    for round in 1..=7 {
        let (status, body) = server.request(
            "POST",
            &format!("/v1/executions/{execution}/pause"),
            Some(&json!({"question": format!("question {round}?")})),
        );
        assert_eq!(status, 200, "pause {round}: {body}");
        let (status, body) = server.request(
            "POST",
            &format!("/v1/sessions/{session}/messages"),
            Some(&json!({"content": format!("answer {round}")})),
        );
        assert_eq!(status, 202, "answer {round}: {body}");
        assert_eq!(body["execution"]["id"].as_str(), Some(execution.as_str()));
        // A worker takes the resumed execution back (the agent drives it over HTTP).
        wait_for("the resumed execution to run", || {
            (get(&server) == "running").then_some(())
        });
    }
    server.kill_9();
    drop(server);

    let log = dir.path().join("second.log");
    let server = serve(&args, &log);
    // The expired lease is claimed again: resumed, not failed as "interrupted 7 times".
    wait_for("the execution to be taken over after the crash", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            !text.contains("giving up") && get(&server) != "failed",
            "the execution was failed after pauses and one crash:\n{text}"
        );
        text.lines()
            .any(|l| l.contains("running execution") && l.contains(&execution))
            .then_some(())
    });
    assert_eq!(get(&server), "running");
    let (status, body) = server.request(
        "POST",
        &format!("/v1/executions/{execution}/steps"),
        Some(&step_body(1, 10)),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = server.request(
        "POST",
        &format!("/v1/executions/{execution}/complete"),
        Some(&json!({"output": "done"})),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "completed");
}

// --- kill -9 under load -----------------------------------------------------------------

#[test]
fn kill_9_under_32_writing_clients_keeps_every_acknowledged_step_exactly_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("stepwise.db");
    let db_text = db_arg(&db);
    let mut server = serve(&["--database", &db_text], &dir.path().join("first.log"));
    let acked: Arc<Mutex<HashMap<String, Vec<u64>>>> = Arc::default();
    let total = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let clients: Vec<_> = (0..32)
        .map(|_| {
            let (addr, acked, total) = (server.addr.clone(), acked.clone(), total.clone());
            std::thread::spawn(move || {
                let (_, execution) = external_execution(&addr);
                acked
                    .lock()
                    .expect("lock")
                    .insert(execution.clone(), Vec::new());
                // Bounded: the server is killed long before this ends.
                for n in 1..=5000u64 {
                    let (status, _) = request(
                        &addr,
                        "POST",
                        &format!("/v1/executions/{execution}/steps"),
                        Some(&step_body(n, 512)),
                    );
                    if status != 201 {
                        return; // the server is gone
                    }
                    acked
                        .lock()
                        .expect("lock")
                        .get_mut(&execution)
                        .expect("entry")
                        .push(n);
                    total.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    wait_for("2,000 acknowledged steps", || {
        (total.load(Ordering::Relaxed) >= 2000).then_some(())
    });
    server.kill_9();
    for client in clients {
        client.join().expect("client");
    }
    drop(server);

    let server = serve(&["--database", &db_text], &dir.path().join("second.log"));
    let acked = acked.lock().expect("lock").clone();
    assert_eq!(acked.len(), 32);
    for (execution, numbers) in &acked {
        let stored = step_numbers(&server.addr, execution);
        let last = numbers.last().copied().unwrap_or(0);
        // Every acknowledged step is there, once; at most the one in flight beyond it.
        assert!(
            stored.len() as u64 == last || stored.len() as u64 == last + 1,
            "execution {execution}: {} acknowledged, {} stored",
            numbers.len(),
            stored.len()
        );
        let expected: Vec<u64> = (1..=stored.len() as u64).collect();
        assert_eq!(
            stored, expected,
            "execution {execution}: each step once, in order"
        );
    }
}

// --- disk full -------------------------------------------------------------------------

fn metric(server: &Server, name: &str) -> Option<u64> {
    let (status, text) = request_text(&server.addr, "GET", "/metrics", None);
    assert_eq!(status, 200);
    text.lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

struct Tmpfs(std::path::PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_answers_storage_full_and_recovers_when_space_is_freed() {
    full_disk_scenario("sqlite", |dir| db_arg(&dir.join("stepwise.db")));
}

#[test]
fn a_full_disk_under_the_files_backend_answers_storage_full_too() {
    full_disk_scenario("files", |dir| {
        format!("files://{}", dir.join("sessions").display())
    });
}

/// A server whose database lives on an 8 MiB tmpfs (with 3 MiB of filler to free later)
/// takes steps until a save fails: that answer is 503 `storage_full`, `/readyz` says the
/// same and `stepwise_store_writable` is 0, reads still work; once space is freed, saves
/// succeed again and readiness comes back.
fn full_disk_scenario(backend: &str, url_for: impl Fn(&Path) -> String) {
    if !is_root() {
        eprintln!("\n*** SKIPPED ({backend}): mounting a small tmpfs needs root ***\n");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mount = dir.path().join("small");
    std::fs::create_dir(&mount).expect("mkdir");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
        .arg(&mount)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("\n*** SKIPPED ({backend}): cannot mount a tmpfs here ***\n");
        return;
    }
    let _unmount = Tmpfs(mount.clone());
    // Room to free later.
    let filler = mount.join("filler");
    std::fs::write(&filler, vec![7u8; 3 * 1024 * 1024]).expect("filler");
    let url = url_for(&mount);
    let log = dir.path().join("serve.log");
    let mut server = serve(&["--database", &url], &log);
    assert_eq!(metric(&server, "stepwise_store_writable"), Some(1));
    let (_, execution) = external_execution(&server.addr);
    let mut acked = 0u64;
    let full = loop {
        let n = acked + 1;
        let (status, body) = server.request(
            "POST",
            &format!("/v1/executions/{execution}/steps"),
            Some(&step_body(n, 32 * 1024)),
        );
        match status {
            201 => acked = n,
            _ => break (status, body),
        }
        assert!(n < 1000, "{backend}: an 8 MiB disk never filled");
    };
    assert_eq!(full.0, 503, "{backend}: {}", full.1);
    assert_eq!(
        full.1["error"]["code"], "storage_full",
        "{backend}: {}",
        full.1
    );
    let (status, ready) = server.request("GET", "/readyz", None);
    assert_eq!(status, 503, "{backend}: {ready}");
    assert_eq!(ready["error"]["code"], "storage_full");
    assert_eq!(metric(&server, "stepwise_store_writable"), Some(0));
    // Reads still work and every acknowledged step is there, once.
    let stored = step_numbers(&server.addr, &execution);
    assert!(
        stored.len() as u64 >= acked && stored == (1..=stored.len() as u64).collect::<Vec<_>>(),
        "{backend}: {acked} acknowledged, stored {stored:?}"
    );

    // Space comes back: saves succeed again, and readiness with them.
    std::fs::remove_file(&filler).expect("free space");
    let next = stored.len() as u64 + 1;
    wait_for("a save to succeed once space is freed", || {
        let (status, _) = server.request(
            "POST",
            &format!("/v1/executions/{execution}/steps"),
            Some(&step_body(next, 100)),
        );
        matches!(status, 200 | 201).then_some(())
    });
    wait_for("readiness to come back", || {
        (server.request("GET", "/readyz", None).0 == 200).then_some(())
    });
    assert_eq!(metric(&server, "stepwise_store_writable"), Some(1));
    assert!(server.stop().success());
    drop(server);
}

// --- corrupted rows --------------------------------------------------------------------

#[test]
fn a_corrupted_step_is_skipped_and_counted_and_the_rest_is_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("stepwise.db");
    let db_text = db_arg(&db);
    let mut server = serve(&["--database", &db_text], &dir.path().join("first.log"));
    let (session, execution) = external_execution(&server.addr);
    for n in 1..=5 {
        let (status, body) = server.request(
            "POST",
            &format!("/v1/executions/{execution}/steps"),
            Some(&step_body(n, 64)),
        );
        assert_eq!(status, 201, "{body}");
    }
    assert!(server.stop().success());
    drop(server);
    {
        let conn = rusqlite::Connection::open(&db).expect("open");
        let changed = conn
            .execute(
                "UPDATE steps SET payload = x'7b2276657273696f6e223a20322c' WHERE step_number = 3",
                [],
            )
            .expect("corrupt step 3");
        assert_eq!(changed, 1);
    }
    let server = serve(&["--database", &db_text], &dir.path().join("second.log"));
    let (status, memory) = server.request("GET", &format!("/v1/sessions/{session}/memory"), None);
    assert_eq!(status, 200, "{memory}");
    let numbers: Vec<u64> = memory["steps"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|s| s["step_number"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(
        numbers,
        vec![1, 2, 4, 5],
        "the corrupted step is skipped, the rest restored"
    );
    assert!(metric(&server, "stepwise_decode_errors_total").unwrap_or(0) >= 1);
    let (status, _) = server.request("GET", "/readyz", None);
    assert_eq!(status, 200);
}

/// The files backend keeps no LangGraph checkpoints: each checkpoint endpoint answers 422
/// `invalid_state` naming the backends that do, and the rest of the API works as usual.
#[test]
fn the_files_backend_answers_checkpoint_calls_with_422() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("files://{}", dir.path().join("sessions").display());
    let server = serve(&["--database", &url], &dir.path().join("serve.log"));
    for (method, path) in [
        ("GET", "/v1/threads/t"),
        ("GET", "/v1/threads/t/checkpoints/latest"),
        ("GET", "/v1/checkpoints"),
    ] {
        let (status, body) = server.request(method, path, None);
        assert_eq!(status, 422, "{method} {path}: {body}");
        assert_eq!(body["error"]["code"], "invalid_state", "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("SQLite or PostgreSQL"), "{message}");
    }
    let (status, _) = server.request("POST", "/v1/sessions", Some(&json!({"user_id": "u"})));
    assert_eq!(status, 201);
}
