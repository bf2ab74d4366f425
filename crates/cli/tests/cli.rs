//! End-to-end tests of the `stepwise` binary: each runs the real executable against a real
//! SQLite file in a temporary directory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use stepwise_core::document::FORMAT_VERSION;
use stepwise_core::{
    Execution, ExecutionStatus, Message, Role, Session, SessionDocument, SessionStatus, Step,
    StepKind, Timestamp, TokenUsage, ToolCall, new_id,
};

/// A working directory and data directory of its own, so no test sees the user's settings.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn db(&self) -> String {
        format!("sqlite://{}", self.path().join("test.db").display())
    }

    fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_stepwise"));
        command.current_dir(self.path());
        for var in [
            "STEPWISE_DATABASE_URL",
            "STEPWISE_CONFIG",
            "STEPWISE_TENANT",
            "STEPWISE_USER",
            "STEPWISE_LISTEN",
            "STEPWISE_BENCH_STEPS",
            "STEPWISE_ABANDON_AFTER_DAYS",
            "STEPWISE_COMPLETED_DAYS",
            "STEPWISE_ABANDONED_DAYS",
            "STEPWISE_DELETED_DAYS",
        ] {
            command.env_remove(var);
        }
        command.env("STEPWISE_DATA_DIR", self.path().join("data"));
        command
    }

    /// Runs `stepwise --database <test db> ARGS`.
    fn run(&self, args: &[&str]) -> Output {
        let mut command = self.command();
        command.arg("--database").arg(self.db()).args(args);
        command.output().expect("run stepwise")
    }

    /// Runs and requires success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "stepwise {args:?} failed:\nstdout: {}\nstderr: {}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    fn json(&self, args: &[&str]) -> Value {
        let stdout = self.ok(args);
        serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("stepwise {args:?} printed no JSON ({e}): {stdout}"))
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn last_line(stdout: &str) -> &str {
    stdout.trim_end().lines().last().unwrap_or("")
}

#[test]
fn keys_create_list_revoke_round_trip() {
    let sandbox = Sandbox::new();
    let created = sandbox.ok(&[
        "keys", "create", "--tenant", "acme", "--user", "ann", "--name", "ci",
    ]);
    let secret = last_line(&created).to_string();
    assert!(
        secret.starts_with("sw_") && secret.len() > 40,
        "the key is alone on the last line: {created}"
    );
    assert_eq!(
        created.matches(&secret).count(),
        1,
        "the secret is printed exactly once"
    );

    let listed = sandbox.json(&["keys", "list", "--json"]);
    let items = listed["items"].as_array().expect("items");
    assert_eq!(items.len(), 1);
    let key = &items[0];
    assert_eq!(key["tenant_id"], "acme");
    assert_eq!(key["user_id"], "ann");
    assert_eq!(key["name"], "ci");
    assert!(key["revoked_at"].is_null());
    for field in [
        "id",
        "name",
        "tenant_id",
        "user_id",
        "created_at",
        "revoked_at",
    ] {
        assert!(key.get(field).is_some(), "keys list --json has `{field}`");
    }
    let table = sandbox.ok(&["keys", "list"]);
    assert!(
        !table.contains(&secret) && !listed.to_string().contains(&secret[3..]),
        "list never prints the secret"
    );
    let id = key["id"].as_str().expect("id").to_string();
    assert!(table.contains(&id));

    sandbox.ok(&["keys", "revoke", &id]);
    let listed = sandbox.json(&["keys", "list", "--json"]);
    assert!(
        listed["items"][0]["revoked_at"].is_string(),
        "revoked: {listed}"
    );

    // Revoking what does not exist, or is not an id, is a clear error.
    let out = sandbox.run(&["keys", "revoke", &new_id().to_string()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no API key"),
        "{}",
        text(&out.stderr)
    );
    let out = sandbox.run(&["keys", "revoke", "not-an-id"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("not a key id"));

    // Missing required flags are a usage error from clap, not a panic.
    let out = sandbox.run(&["keys", "create", "--tenant", "acme"]);
    assert_eq!(out.status.code(), Some(2));
}

fn sample_document() -> SessionDocument {
    let t = |s: i64| Timestamp::from_micros(1_767_700_000_000_000 + s * 1_000_000);
    let session_id = new_id();
    let execution_id = new_id();
    let session = Session {
        id: session_id,
        tenant_id: "elsewhere".into(),
        user_id: "someone".into(),
        name: Some("trip-planning".into()),
        title: Some("Plan a trip".into()),
        status: SessionStatus::Active,
        related_type: Some("ticket".into()),
        related_id: Some("T-1".into()),
        initial_context_url: None,
        metadata: json!({"source": "test"}),
        agent: None,
        last_execution_id: Some(execution_id),
        last_snapshot_id: None,
        message_count: 2,
        first_message: None,
        created_at: t(0),
        updated_at: t(10),
    };
    let message = |role: Role, content: &str, at: i64| Message {
        id: new_id(),
        session_id,
        role,
        content: content.into(),
        execution_id: Some(execution_id),
        related_type: None,
        related_id: None,
        context_url: None,
        metadata: json!({}),
        created_at: t(at),
    };
    let execution = Execution {
        id: execution_id,
        session_id: Some(session_id),
        parent_execution_id: None,
        tenant_id: "elsewhere".into(),
        user_id: "someone".into(),
        agent_type: "demo".into(),
        agent_config: json!({}),
        status: ExecutionStatus::Completed,
        input: json!({"task": "plan"}),
        output: json!({"answer": "go to Lisbon"}),
        last_snapshot_id: None,
        step_count: 2,
        token_usage: TokenUsage::new(30, 12),
        metadata: json!({}),
        error_message: None,
        attempts: 1,
        lease_expires_at: None,
        started_at: Some(t(1)),
        completed_at: Some(t(5)),
        created_at: t(1),
        updated_at: t(5),
    };
    let step = |n: u32, kind: StepKind, at: i64| Step {
        id: new_id(),
        execution_id,
        session_id: Some(session_id),
        step_number: n,
        kind,
        model_output: Some(format!("thinking {n}")),
        tool_calls: if n == 1 {
            vec![ToolCall {
                id: "c1".into(),
                name: "search".into(),
                arguments: json!({"q": "Lisbon"}),
            }]
        } else {
            vec![]
        },
        code: None,
        observations: Some(format!("observed {n} {}", "x".repeat(3000))),
        error: None,
        output: json!(null),
        token_usage: TokenUsage::new(15, 6),
        started_at: Some(t(at)),
        ended_at: Some(t(at + 1)),
        created_at: t(at + 1),
    };
    SessionDocument {
        format_version: FORMAT_VERSION,
        session,
        messages: vec![
            message(Role::User, "Plan a trip", 0),
            message(Role::Assistant, "Go to Lisbon", 5),
        ],
        executions: vec![execution],
        steps: vec![
            step(1, StepKind::Action, 2),
            step(2, StepKind::FinalAnswer, 3),
        ],
        snapshots: vec![],
        thread: None,
    }
}

fn write_document(dir: &Path, doc: &SessionDocument) -> PathBuf {
    let path = dir.join("in.json");
    std::fs::write(&path, serde_json::to_vec_pretty(doc).expect("encode")).expect("write");
    path
}

#[test]
fn sessions_import_export_round_trip() {
    let sandbox = Sandbox::new();
    let original = sample_document();
    let input = write_document(sandbox.path(), &original);

    let imported = sandbox.ok(&["sessions", "import", input.to_str().expect("path")]);
    let id = last_line(&imported).to_string();
    assert!(
        stepwise_core::parse_id(&id).is_some(),
        "import prints the new id: {imported}"
    );
    assert_ne!(
        id,
        original.session.id.to_string(),
        "the import has fresh ids"
    );

    // Listed (HTTP shape), shown by id and by name.
    let listed = sandbox.json(&["sessions", "list", "--json"]);
    let items = listed["items"].as_array().expect("items");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["id"], id.as_str());
    assert_eq!(
        items[0]["tenant_id"], "local",
        "imports land in the chosen tenant"
    );
    assert!(listed.get("next_cursor").is_some());
    let shown = sandbox.json(&["sessions", "show", &id, "--json"]);
    assert_eq!(shown["name"], "trip-planning");
    assert_eq!(shown["message_count"], 2);
    let by_name = sandbox.ok(&["sessions", "show", "trip-planning"]);
    assert!(
        by_name.contains(&id) && by_name.contains("completed"),
        "{by_name}"
    );
    let table = sandbox.ok(&["sessions", "list"]);
    assert!(table.contains(&id) && table.contains("trip-planning"));

    // Another tenant sees nothing.
    let other = sandbox.json(&["sessions", "--tenant", "other", "list", "--json"]);
    assert_eq!(other["items"].as_array().map(Vec::len), Some(0));
    assert!(
        !sandbox
            .run(&["sessions", "--tenant", "other", "show", &id])
            .status
            .success()
    );

    // Export to a file and compare what a user cares about.
    let out = sandbox.path().join("out.json");
    sandbox.ok(&[
        "sessions",
        "export",
        &id,
        "--out",
        out.to_str().expect("path"),
    ]);
    let exported: SessionDocument =
        serde_json::from_slice(&std::fs::read(&out).expect("read")).expect("a document");
    assert_eq!(exported.session.id.to_string(), id);
    assert_eq!(exported.session.title, original.session.title);
    let contents = |d: &SessionDocument| {
        d.messages
            .iter()
            .map(|m| (m.role, m.content.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(contents(&exported), contents(&original));
    let bodies = |d: &SessionDocument| {
        d.steps
            .iter()
            .map(|s| (s.step_number, s.kind, s.body()))
            .collect::<Vec<_>>()
    };
    assert_eq!(bodies(&exported), bodies(&original));
    assert_eq!(exported.executions.len(), 1);
    assert_eq!(exported.executions[0].output, original.executions[0].output);

    // The export imports again (stdout export, stdin import) as a second session.
    let stdout_export = sandbox.ok(&["sessions", "export", &id]);
    let again: SessionDocument =
        serde_json::from_str(&stdout_export).expect("export to stdout is the document");
    assert_eq!(bodies(&again), bodies(&original));
    let mut child = sandbox
        .command()
        .args(["--database", &sandbox.db(), "sessions", "import", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut again_doc = again.clone();
    again_doc.session.name = Some("trip-planning-2".into());
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&serde_json::to_vec(&again_doc).expect("encode"))
        .expect("write");
    let second = child.wait_with_output().expect("wait");
    assert!(second.status.success());
    let second_id = last_line(&text(&second.stdout)).to_string();
    assert_ne!(second_id, id);

    // Delete is soft: gone from the default list, listed with --status deleted.
    sandbox.ok(&["sessions", "delete", &id]);
    let listed = sandbox.json(&["sessions", "list", "--json"]);
    let ids: Vec<&str> = listed["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, vec![second_id.as_str()]);
    let deleted = sandbox.json(&["sessions", "list", "--status", "deleted", "--json"]);
    assert_eq!(deleted["items"][0]["id"], id.as_str());
    assert_eq!(deleted["items"][0]["status"], "deleted");
    let all = sandbox.json(&["sessions", "list", "--status", "all", "--json"]);
    assert_eq!(all["items"].as_array().map(Vec::len), Some(2));

    // Bad input is a clear error.
    let out = sandbox.run(&["sessions", "list", "--status", "sleeping"]);
    assert!(!out.status.success() && text(&out.stderr).contains("unknown status"));
    let garbage = sandbox.path().join("garbage.json");
    std::fs::write(&garbage, "{not json").expect("write");
    let out = sandbox.run(&["sessions", "import", garbage.to_str().expect("path")]);
    assert!(!out.status.success() && text(&out.stderr).contains("not a session document"));
    assert!(!text(&out.stderr).contains("panicked"));
}

#[test]
fn sessions_import_refuses_hostile_documents_and_writes_nothing() {
    let sandbox = Sandbox::new();
    let mut bad_name = sample_document();
    bad_name.session.name = Some("../escape".into());
    let mut deep = serde_json::to_value(sample_document()).expect("encode");
    let mut nested = json!("bottom");
    for _ in 0..200 {
        nested = json!([nested]);
    }
    deep["session"]["metadata"] = json!({ "x": nested });
    let mut foreign_step = sample_document();
    foreign_step.steps[0].execution_id = new_id();
    for (label, bytes) in [
        ("bad name", serde_json::to_vec(&bad_name).expect("encode")),
        ("deep nesting", serde_json::to_vec(&deep).expect("encode")),
        (
            "step of another execution",
            serde_json::to_vec(&foreign_step).expect("encode"),
        ),
        (
            "JSON that is no document",
            br#"{"hello": "world"}"#.to_vec(),
        ),
    ] {
        let path = sandbox.path().join("hostile.json");
        std::fs::write(&path, bytes).expect("write");
        let out = sandbox.run(&["sessions", "import", path.to_str().expect("path")]);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{label}: refused");
        assert!(
            stderr.contains("not a session document") && !stderr.contains("panicked"),
            "{label}: a clear error: {stderr}"
        );
    }
    let listed = sandbox.json(&["sessions", "list", "--status", "all", "--json"]);
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(0),
        "nothing was written"
    );
}

#[test]
fn sessions_import_stores_context_urls_canonical_and_refuses_other_schemes() {
    let sandbox = Sandbox::new();
    let mut spelled = sample_document();
    spelled.session.initial_context_url = Some("HTTPS://App.Example:443/a/../tickets/7".into());
    let input = write_document(sandbox.path(), &spelled);
    let id =
        last_line(&sandbox.ok(&["sessions", "import", input.to_str().expect("path")])).to_string();
    let shown = sandbox.json(&["sessions", "show", &id, "--json"]);
    assert_eq!(
        shown["initial_context_url"], "https://app.example/tickets/7",
        "{shown}"
    );

    let mut script = sample_document();
    script.session.initial_context_url = Some("javascript:alert(1)".into());
    let path = write_document(sandbox.path(), &script);
    let out = sandbox.run(&["sessions", "import", path.to_str().expect("path")]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "a javascript: URL is refused");
    assert!(
        stderr.contains("session.initial_context_url") && !stderr.contains("panicked"),
        "{stderr}"
    );
    let listed = sandbox.json(&["sessions", "list", "--status", "all", "--json"]);
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1));
}

#[test]
fn cleanup_dry_run_counts_and_changes_nothing() {
    let sandbox = Sandbox::new();
    let input = write_document(sandbox.path(), &sample_document());
    let id =
        last_line(&sandbox.ok(&["sessions", "import", input.to_str().expect("path")])).to_string();

    // With a zero-day idle limit the fresh session is past it.
    let dry = sandbox.ok(&["cleanup", "--dry-run", "--abandon-after-days", "0"]);
    assert!(dry.contains("dry run"), "{dry}");
    assert!(dry.contains("would mark abandoned: 1 sessions"), "{dry}");
    assert!(dry.contains("would delete:"), "{dry}");
    let shown = sandbox.json(&["sessions", "show", &id, "--json"]);
    assert_eq!(shown["status"], "active", "a dry run changes nothing");

    let report = sandbox.json(&[
        "cleanup",
        "--dry-run",
        "--json",
        "--abandon-after-days",
        "0",
    ]);
    assert_eq!(report["dry_run"], true);
    assert_eq!(report["marked_abandoned"], 1);
    assert!(report["deleted"]["sessions"].is_u64());

    // The real pass does it, with the number taken from stepwise.toml this time.
    std::fs::write(
        sandbox.path().join("stepwise.toml"),
        "abandon_after_days = 0\n",
    )
    .expect("write");
    let real = sandbox.ok(&["cleanup"]);
    assert!(real.contains("marked abandoned: 1 sessions"), "{real}");
    let shown = sandbox.json(&["sessions", "show", &id, "--json"]);
    assert_eq!(shown["status"], "abandoned");
}

#[test]
fn settings_come_from_flags_then_environment_then_stepwise_toml() {
    let sandbox = Sandbox::new();
    std::fs::write(
        sandbox.path().join("stepwise.toml"),
        "database = \"sqlite://from-file.db\"\n",
    )
    .expect("write");
    let run = |env_db: Option<&str>, flag_db: Option<&str>| {
        let mut command = sandbox.command();
        if let Some(db) = env_db {
            command.env("STEPWISE_DATABASE_URL", db);
        }
        if let Some(db) = flag_db {
            command.args(["--database", db]);
        }
        let out = command.args(["migrate"]).output().expect("run");
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert!(run(None, None).contains("from-file.db"));
    assert!(sandbox.path().join("from-file.db").exists());
    assert!(run(Some("sqlite://from-env.db"), None).contains("from-env.db"));
    assert!(run(Some("sqlite://from-env.db"), Some("from-flag.db")).contains("from-flag.db"));
    assert!(sandbox.path().join("from-flag.db").exists());

    // Without any setting: stepwise.db in the data directory, created on first use.
    std::fs::remove_file(sandbox.path().join("stepwise.toml")).expect("remove");
    let first = run(None, None);
    assert!(first.contains("applied"), "{first}");
    assert!(sandbox.path().join("data/stepwise.db").exists());
    assert!(run(None, None).contains("already up to date"));

    // A typo in the settings file is an error that names it.
    std::fs::write(sandbox.path().join("stepwise.toml"), "databse = \"x\"\n").expect("write");
    let out = sandbox.command().args(["migrate"]).output().expect("run");
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("databse"));
}

#[test]
fn unreachable_or_unknown_databases_are_clear_errors() {
    let sandbox = Sandbox::new();
    // Port 1: nothing listens there, so this fails at once on any machine.
    let out = sandbox
        .command()
        .args([
            "--database",
            "postgres://me:secret@127.0.0.1:1/db",
            "sessions",
            "list",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("postgres://me:***@127.0.0.1:1/db"),
        "names the database: {stderr}"
    );
    assert!(
        !stderr.contains("secret") && !stderr.contains("panicked"),
        "{stderr}"
    );
    let out = sandbox
        .command()
        .args(["--database", "mysql://x", "migrate"])
        .output()
        .expect("run");
    assert!(!out.status.success() && text(&out.stderr).contains("unknown database scheme"));
}

#[test]
fn bench_steps_runs_the_workload_and_prints_its_json() {
    let sandbox = Sandbox::new();
    // A small corpus in the workload's line format.
    let corpus = sandbox.path().join("steps.jsonl.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&corpus).expect("create"),
        flate2::Compression::default(),
    );
    for k in 1..=12 {
        let line = json!({
            "step": k,
            "thought": format!("thought {k} {}", "t".repeat(300)),
            "tool_call": {"id": format!("call_{k}"), "name": "search", "arguments": {"query": "q".repeat(300)}},
            "observation": "o".repeat(1400),
            "tokens": {"prompt": 700, "completion": 200, "total": 900},
        });
        writeln!(gz, "{line}").expect("write");
    }
    gz.finish().expect("finish");

    let db = sandbox.path().join("bench.db");
    let out = sandbox
        .command()
        .args(["bench", "steps", "--steps", corpus.to_str().expect("path")])
        .args(["--database", &format!("sqlite://{}", db.display())])
        .args([
            "--w1-steps",
            "30",
            "--sessions",
            "4",
            "--steps-per-session",
            "5",
            "--warm-loads",
            "3",
        ])
        .output()
        .expect("run");
    assert!(out.status.success(), "bench failed: {}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    assert_eq!(report["backend"], "sqlite");
    assert!(report["version"].is_string());
    assert_eq!(report["w1"]["n"], 30);
    for key in ["total_s", "steps_per_s"] {
        assert!(
            report["w1"][key].as_f64().is_some_and(|v| v > 0.0),
            "w1.{key}"
        );
    }
    for window in ["1-10", "6-15", "21-30"] {
        for key in ["p50_ms", "p99_ms"] {
            assert!(
                report["w1"]["windows"][window][key].is_f64(),
                "w1.windows.{window}.{key}: {report}"
            );
        }
    }
    assert_eq!(report["w2"]["sessions"], 4);
    assert_eq!(report["w2"]["steps_per_session"], 5);
    for key in ["total_s", "steps_per_s"] {
        assert!(report["w2"][key].is_f64());
    }
    for key in ["total_s", "steps_per_s", "p50_ms", "p99_ms"] {
        assert!(report["w2c"][key].is_f64(), "w2c.{key}");
    }
    assert_eq!(report["w3"]["steps_loaded"], 30);
    assert!(report["w3"]["cold_ms"].is_f64() && report["w3"]["warm_ms_median"].is_f64());
    assert!(report["w4"]["bytes"].as_u64().is_some_and(|b| b > 0));
    assert!(report["w4"]["bytes_per_step"].is_f64());
    assert!(report["raw_insert"]["steps_per_s"].is_f64());
    assert!(report["w1_vs_raw"].is_f64() && report["w1_p99_ratio"].is_f64());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("W1") && stderr.contains("W4"),
        "a table on stderr: {stderr}"
    );
    assert!(db.exists(), "--database names where the benchmark writes");

    // Without --database the benchmark never touches the configured database.
    std::fs::write(
        sandbox.path().join("stepwise.toml"),
        "database = \"sqlite://mine.db\"\n",
    )
    .expect("write");
    let out = sandbox
        .command()
        .args(["bench", "steps", "--steps", corpus.to_str().expect("path")])
        .args([
            "--w1-steps",
            "10",
            "--sessions",
            "2",
            "--steps-per-session",
            "2",
            "--warm-loads",
            "1",
        ])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!sandbox.path().join("mine.db").exists());

    // A missing corpus is a clear error.
    let out = sandbox
        .command()
        .args(["bench", "steps", "--steps", "nope.jsonl.gz"])
        .output()
        .expect("run");
    assert!(!out.status.success() && text(&out.stderr).contains("does not exist"));
}

#[test]
fn the_files_backend_is_picked_by_its_url() {
    let sandbox = Sandbox::new();
    let folder = sandbox.path().join("sessions");
    let url = format!("files://{}", folder.display());
    let input = write_document(sandbox.path(), &sample_document());
    let run = |args: &[&str]| {
        let out = sandbox
            .command()
            .args(["--database", &url])
            .args(args)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "stepwise {args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    let id = last_line(&run(&["sessions", "import", input.to_str().expect("path")])).to_string();
    let listed: Value = serde_json::from_str(&run(&["sessions", "list", "--json"])).expect("json");
    assert_eq!(listed["items"][0]["id"], id.as_str());
    assert!(
        folder.is_dir(),
        "the session files live in the named folder"
    );
    let exported: SessionDocument =
        serde_json::from_str(&run(&["sessions", "export", &id])).expect("a document");
    assert_eq!(exported.steps.len(), 2);
    let keys = run(&["keys", "create", "--tenant", "acme", "--user", "ann"]);
    assert!(last_line(&keys).starts_with("sw_"));
}

#[test]
fn serve_refuses_a_cleanup_time_that_is_not_hh_mm() {
    let sandbox = Sandbox::new();
    for bad in ["25:00", "3:30", "noon"] {
        let mut command = sandbox.command();
        command.args(["serve", "--cleanup-at", bad]);
        let out = command.output().expect("run stepwise");
        assert!(!out.status.success(), "{bad} was accepted");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("is not a time of day: give HH:MM, UTC"),
            "{bad}: {stderr}"
        );
    }
}
