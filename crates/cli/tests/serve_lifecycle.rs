//! The real `stepwise serve` binary: kill -9 in the middle of a 50-step run and restart on
//! the same database (the run completes with steps 1..50 exactly once); SIGTERM exits 0
//! and loses nothing; kill -9 while runs end and while workers complete leaves every end whole
//! or absent; a non-loopback address without API keys refuses to start.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The fake OpenAI-compatible server of the LLM crate's tests.
#[allow(unreachable_pub)]
#[path = "../../llm/tests/common/mod.rs"]
mod fake_model;

const DEADLINE: Duration = Duration::from_secs(60);

struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(db: &Path) -> Server {
        Server::start_with(db, &[])
    }

    fn start_with(db: &Path, env: &[(&str, &str)]) -> Server {
        Server::start_url(&format!("sqlite://{}", db.display()), env)
    }

    /// On the database at `url` (SQLite or PostgreSQL).
    fn start_url(url: &str, env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_stepwise"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--lease-secs",
                "2",
                "--workers",
                "2",
            ])
            .arg("--database")
            .arg(url)
            .env("STEPWISE_DEMO_STEP_MS", "40")
            .env("STEPWISE_LOG", "warn")
            .env_remove("STEPWISE_LISTEN")
            .env_remove("STEPWISE_DATABASE_URL")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start stepwise serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("serve printed its address")
                .expect("a line");
            if let Some(url) = line.strip_prefix("Stepwise listening on http://") {
                break url.trim().to_string();
            }
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server { child, addr }
    }

    fn request(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        request(&self.addr, method, path, body)
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "the server did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A one-shot HTTP/1.1 request (Connection: close), answering the status and JSON body.
fn request(addr: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    exchange(stream, addr, method, path, body)
}

/// [`request`] over a server's Unix socket.
fn request_unix(socket: &Path, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let stream = std::os::unix::net::UnixStream::connect(socket).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    exchange(stream, "localhost", method, path, body)
}

fn exchange(
    stream: impl Read + Write,
    addr: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    try_exchange(stream, addr, method, path, &[], body).expect("an HTTP exchange")
}

/// [`exchange`] with extra headers; an error where the connection failed (a killed server).
fn try_exchange(
    mut stream: impl Read + Write,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> std::io::Result<(u16, Value)> {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let extra: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let payload = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    Ok((
        status,
        serde_json::from_str(&payload).unwrap_or(Value::Null),
    ))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

fn wait_for<T>(mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "condition not met within {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn steps(server: &Server, execution: &str) -> Vec<u64> {
    let (status, body) = server.request(
        "GET",
        &format!("/v1/executions/{execution}/steps?limit=500"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    body["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|s| s["step_number"].as_u64().unwrap_or(0))
        .collect()
}

#[test]
fn kill_9_mid_run_then_restart_completes_with_every_step_exactly_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("stepwise.db");
    let server = Server::start(&db);
    let (status, accepted) = server.request(
        "POST",
        "/v1/messages",
        Some(json!({"content": "steps: 50"})),
    );
    assert_eq!(status, 202, "{accepted}");
    let execution = accepted["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    wait_for(|| (steps(&server, &execution).len() >= 10).then_some(()));
    server.signal("-KILL");
    drop(server);

    let server = Server::start(&db);
    let done = wait_for(|| {
        let (_, e) = server.request("GET", &format!("/v1/executions/{execution}"), None);
        matches!(e["status"].as_str(), Some("completed" | "failed")).then_some(e)
    });
    assert_eq!(done["status"], json!("completed"), "{done}");
    assert_eq!(done["output"], json!("Done: 50 steps"));
    let numbers = steps(&server, &execution);
    assert_eq!(
        numbers,
        (1..=51).collect::<Vec<u64>>(),
        "50 action steps and the final answer, each once"
    );
    assert!(done["attempts"].as_u64().unwrap_or(0) >= 2, "{done}");
}

/// kill -9 while runs are ending, three times at different moments, then a last restart:
/// every execution completes once, with one answer and one final snapshot. A run's end (its
/// answer, final snapshot, status and `execution.completed`) is one write, so a kill between
/// the answer and the status cannot leave an answer that the run, taken over, gives again.
#[test]
fn kill_9_while_runs_end_leaves_each_execution_one_answer_and_one_final_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("stepwise.db");
    kill_9_while_runs_end(&format!("sqlite://{}", db.display()));
}

/// The same on PostgreSQL, where the end is one batch of the session's writer task.
#[test]
fn on_postgres_kill_9_while_runs_end_leaves_each_execution_one_answer_and_one_final_snapshot() {
    let Some(database) = ScratchPostgres::create("runs_end") else {
        return;
    };
    kill_9_while_runs_end(&database.url);
}

/// A PostgreSQL database of its own for one test (created with `psql` on
/// `STEPWISE_TEST_POSTGRES_URL`, dropped after it); `None`, said loudly, when PostgreSQL
/// cannot be reached outside CI.
struct ScratchPostgres {
    admin: String,
    name: String,
    url: String,
}

impl ScratchPostgres {
    /// `tag` tells apart the databases of tests that run at once in this process.
    fn create(tag: &str) -> Option<ScratchPostgres> {
        let admin = std::env::var("STEPWISE_TEST_POSTGRES_URL")
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let name = format!("stepwise_{tag}_{}", std::process::id());
        let psql = |sql: &str| {
            Command::new("psql")
                .args([admin.as_str(), "-qAtc", sql])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        psql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        if !psql(&format!("CREATE DATABASE {name}")) {
            assert!(
                std::env::var_os("CI").is_none(),
                "PostgreSQL is required under CI ({admin})"
            );
            eprintln!("*** PostgreSQL kill test SKIPPED: cannot create a database with psql ***");
            return None;
        }
        let (base, query) = admin
            .split_once('?')
            .map_or((admin.as_str(), None), |(b, q)| (b, Some(q)));
        let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
        let url = match query {
            Some(q) => format!("{server}/{name}?{q}"),
            None => format!("{server}/{name}"),
        };
        Some(ScratchPostgres { admin, name, url })
    }
}

impl Drop for ScratchPostgres {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args([
                self.admin.as_str(),
                "-qAtc",
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// One execution's rows of a session export's `key` (`messages`, `snapshots`, ...).
fn export_rows(export: &Value, key: &str, execution: &str) -> Vec<Value> {
    export[key]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|row| row["execution_id"].as_str() == Some(execution))
        .collect()
}

fn kill_9_while_runs_end(url: &str) {
    let mut posted: Vec<(String, String, String)> = Vec::new();
    for (round, after) in [40u64, 120, 250].into_iter().enumerate() {
        let server = Server::start_url(url, &[]);
        for i in 0..12 {
            let content = format!("hello {round}.{i}");
            let (status, accepted) =
                server.request("POST", "/v1/messages", Some(json!({ "content": content })));
            assert_eq!(status, 202, "{accepted}");
            let text = |key: &str| accepted[key].as_str().unwrap_or_default().to_string();
            let execution = accepted["execution"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            posted.push((text("session_id"), execution, content));
        }
        std::thread::sleep(Duration::from_millis(after));
        server.signal("-KILL");
    }

    let server = Server::start_url(url, &[]);
    for (session, execution, content) in &posted {
        let done = wait_for(|| {
            let (_, e) = server.request("GET", &format!("/v1/executions/{execution}"), None);
            matches!(e["status"].as_str(), Some("completed" | "failed")).then_some(e)
        });
        assert_eq!(done["status"], json!("completed"), "{done}");
        let (status, export) =
            server.request("GET", &format!("/v1/sessions/{session}/export"), None);
        assert_eq!(status, 200, "{export}");
        let of_execution = |key: &str| export_rows(&export, key, execution);
        let answers: Vec<Value> = of_execution("messages")
            .iter()
            .filter(|m| m["role"] == json!("assistant"))
            .map(|m| m["content"].clone())
            .collect();
        assert_eq!(
            answers,
            vec![json!(format!("Echo: {content}"))],
            "execution {execution}: one answer"
        );
        let finals = of_execution("snapshots")
            .iter()
            .filter(|s| s["is_final"] == json!(true))
            .count();
        assert_eq!(finals, 1, "execution {execution}: one final snapshot");
    }
}

/// kill -9 while workers' `complete` requests, each carrying two new steps (one commit
/// with the end), are in flight: before any is answered, after the first answer, after
/// half of them; after each restart every execution is
/// whole or untouched by its end: completed with steps 1 and 2, one answer and one final
/// snapshot, or still running with some of its steps and no answer and no final snapshot.
/// The worker then claims the unfinished ones again and sends the same `complete`: every
/// execution ends completed once.
#[test]
fn kill_9_while_workers_complete_with_steps_leaves_each_end_whole_or_absent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("stepwise.db");
    kill_9_while_workers_complete(&format!("sqlite://{}", db.display()));
}

/// The same on PostgreSQL.
#[test]
fn on_postgres_kill_9_while_workers_complete_with_steps_leaves_each_end_whole_or_absent() {
    let Some(database) = ScratchPostgres::create("workers_complete") else {
        return;
    };
    kill_9_while_workers_complete(&database.url);
}

const WORKER_AGENT: &str = "kill-closer";

/// Claims up to `count` executions of [`WORKER_AGENT`]: (execution id, lease).
fn claim_all(server: &Server, count: usize) -> Vec<(String, String)> {
    let mut claimed = Vec::new();
    while claimed.len() < count {
        let (status, body) = server.request(
            "POST",
            "/v1/workers/claim",
            Some(
                json!({"worker_id": "kill-test", "agents": [{"type": WORKER_AGENT}],
                        "slots": count - claimed.len(), "wait_s": 20}),
            ),
        );
        assert_eq!(status, 200, "{body}");
        let items = body["items"].as_array().cloned().unwrap_or_default();
        assert!(!items.is_empty(), "nothing to claim: {body}");
        for item in items {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            claimed.push((text(&item["execution"]["id"]), text(&item["lease"])));
        }
    }
    claimed
}

/// The worker's `complete` of one execution, with its two steps; `None` where the
/// connection failed (the server was killed).
fn complete_with_two_steps(addr: &str, execution: &str, lease: &str) -> Option<(u16, Value)> {
    let stream = TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let body = json!({"output": "ok", "final_message": format!("done {execution}"),
        "steps": [{"step_number": 1, "model_output": "looked"}, {"step_number": 2, "model_output": "answered"}]});
    try_exchange(
        stream,
        addr,
        "POST",
        &format!("/v1/executions/{execution}/complete"),
        &[("Stepwise-Lease", lease)],
        Some(body),
    )
    .ok()
}

/// What an execution's end left: (status, steps, answers, final snapshots).
fn end_of(server: &Server, session: &str, execution: &str) -> (String, Vec<u64>, usize, usize) {
    let (_, e) = server.request("GET", &format!("/v1/executions/{execution}"), None);
    let (status, export) = server.request("GET", &format!("/v1/sessions/{session}/export"), None);
    assert_eq!(status, 200, "{export}");
    let of_execution = |key: &str| export_rows(&export, key, execution);
    let answers = of_execution("messages")
        .iter()
        .filter(|m| m["role"] == json!("assistant"))
        .count();
    let finals = of_execution("snapshots")
        .iter()
        .filter(|s| s["is_final"] == json!(true))
        .count();
    (
        e["status"].as_str().unwrap_or_default().to_string(),
        steps(server, execution),
        answers,
        finals,
    )
}

fn kill_9_while_workers_complete(url: &str) {
    let mut posted: Vec<(String, String)> = Vec::new();
    for answered_before_kill in [0usize, 1, 6] {
        let server = Server::start_url(url, &[]);
        let mut round = Vec::new();
        for i in 0..12 {
            let (status, accepted) = server.request(
                "POST",
                "/v1/messages",
                Some(json!({"content": format!("close {i}"), "agent": {"type": WORKER_AGENT, "wait": true}})),
            );
            assert_eq!(status, 202, "{accepted}");
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            round.push((
                text(&accepted["session_id"]),
                text(&accepted["execution"]["id"]),
            ));
        }
        let claimed = claim_all(&server, round.len());
        let (answered, answers) = std::sync::mpsc::channel();
        let senders: Vec<_> = claimed
            .into_iter()
            .map(|(execution, lease)| {
                let addr = server.addr.clone();
                let answered = answered.clone();
                std::thread::spawn(move || {
                    let answer = complete_with_two_steps(&addr, &execution, &lease);
                    let _ = answered.send(());
                    answer
                })
            })
            .collect();
        for _ in 0..answered_before_kill {
            answers
                .recv_timeout(DEADLINE)
                .expect("a complete is answered");
        }
        server.signal("-KILL");
        for sender in senders {
            let _ = sender.join();
        }
        drop(server);

        // Whole or absent, before anything runs again.
        let server = Server::start_url(url, &[]);
        for (session, execution) in &round {
            let (status, steps, answers, finals) = end_of(&server, session, execution);
            if status == "completed" {
                assert_eq!(
                    (steps, answers, finals),
                    (vec![1, 2], 1, 1),
                    "{execution}: a completed end is whole"
                );
            } else {
                assert!(
                    matches!(status.as_str(), "running" | "pending"),
                    "{execution}: {status}"
                );
                assert!(
                    [vec![], vec![1], vec![1, 2]].contains(&steps),
                    "{execution}: its steps are a prefix: {steps:?}"
                );
                assert_eq!((answers, finals), (0, 0), "{execution}: no part of the end");
            }
        }
        posted.extend(round);
        drop(server);
    }

    // The worker finishes what the kills interrupted: each execution ends completed once.
    let server = Server::start_url(url, &[]);
    let unfinished = posted
        .iter()
        .filter(|(session, execution)| end_of(&server, session, execution).0 != "completed")
        .count();
    if unfinished > 0 {
        for (execution, lease) in claim_all(&server, unfinished) {
            let (status, body) = complete_with_two_steps(&server.addr, &execution, &lease)
                .expect("the server answers");
            assert_eq!(status, 200, "{body}");
        }
    }
    for (session, execution) in &posted {
        assert_eq!(
            end_of(&server, session, execution),
            ("completed".to_string(), vec![1, 2], 1, 1),
            "{execution}"
        );
    }
}

#[test]
fn sigterm_exits_zero_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("stepwise.db");
    let mut server = Server::start(&db);
    let (_, accepted) = server.request(
        "POST",
        "/v1/messages",
        Some(json!({"content": "steps: 40"})),
    );
    let execution = accepted["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let session = accepted["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (_, queued) = server.request(
        "POST",
        &format!("/v1/sessions/{session}/messages"),
        Some(json!({"content": "hello"})),
    );
    let queued = queued["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let seen = wait_for(|| {
        let numbers = steps(&server, &execution);
        (numbers.len() >= 5).then_some(numbers.len())
    });
    server.signal("-TERM");
    let status = server.wait_exit();
    assert!(status.success(), "exit status {status:?}");
    drop(server);

    let server = Server::start(&db);
    let numbers = steps(&server, &execution);
    assert!(numbers.len() >= seen, "no acknowledged step is lost");
    for id in [&execution, &queued] {
        let done = wait_for(|| {
            let (_, e) = server.request("GET", &format!("/v1/executions/{id}"), None);
            matches!(e["status"].as_str(), Some("completed" | "failed")).then_some(e)
        });
        assert_eq!(done["status"], json!("completed"), "{done}");
    }
    assert_eq!(steps(&server, &execution), (1..=41).collect::<Vec<u64>>());
    let (_, messages) = server.request(
        "GET",
        &format!("/v1/sessions/{session}/messages?roles=assistant"),
        None,
    );
    let answers: Vec<Value> = messages["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(answers, vec![json!("Done: 40 steps"), json!("Echo: hello")]);
}

/// `serve` with these `--listen`s; the addresses it printed, in order.
fn serve_listening(db: &Path, listens: &[&str]) -> (Child, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stepwise"))
        .arg("serve")
        .args(listens.iter().flat_map(|l| ["--listen", l]))
        .arg("--database")
        .arg(format!("sqlite://{}", db.display()))
        .env("STEPWISE_LOG", "warn")
        .env_remove("STEPWISE_LISTEN")
        .env_remove("STEPWISE_DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start stepwise serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut addresses = Vec::new();
    while addresses.len() < listens.len() {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(address) = line.strip_prefix("Stepwise listening on ") {
                    addresses.push(address.trim().to_string());
                }
            }
            _ => break,
        }
    }
    std::thread::spawn(move || for _ in lines {});
    (child, addresses)
}

#[test]
fn a_unix_socket_and_a_tcp_port_serve_one_node_and_a_dead_servers_socket_is_replaced() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("stepwise.sock");
    let unix = format!("unix:{}", socket.display());
    let db = dir.path().join("stepwise.db");
    let (mut first, addresses) = serve_listening(&db, &[&unix, "127.0.0.1:0"]);
    assert_eq!(addresses.len(), 2, "{addresses:?}");
    assert_eq!(addresses[0], unix);
    let tcp = addresses[1]
        .strip_prefix("http://")
        .expect("a TCP address")
        .to_string();
    let mode = std::fs::metadata(&socket)
        .expect("socket")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "only the server's user may connect");

    // A session made over the socket is the same node's over TCP.
    let (status, created) = request_unix(
        &socket,
        "POST",
        "/v1/sessions",
        Some(json!({"name": "over-a-socket"})),
    );
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("id").to_string();
    let (status, got) = request(&tcp, "GET", &format!("/v1/sessions/{id}"), None);
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["name"], "over-a-socket");
    let (status, error) = request_unix(
        &socket,
        "GET",
        "/v1/sessions/00000000-0000-0000-0000-000000000000",
        None,
    );
    assert_eq!(status, 404);
    assert_eq!(error["error"]["code"], "not_found");

    // A second server on the live socket (another database) is refused and says why.
    let other = dir.path().join("other.db");
    let refused = Command::new(env!("CARGO_BIN_EXE_stepwise"))
        .args(["serve", "--listen", &unix])
        .arg("--database")
        .arg(format!("sqlite://{}", other.display()))
        .env("STEPWISE_LOG", "warn")
        .env_remove("STEPWISE_LISTEN")
        .output()
        .expect("run a second serve");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("another server is listening"), "{stderr}");
    let (status, _) = request_unix(&socket, "GET", &format!("/v1/sessions/{id}"), None);
    assert_eq!(status, 200, "the first server still answers on its socket");

    // Killed, the server leaves its socket file; the next one replaces it.
    first.kill().expect("kill -9");
    first.wait().expect("wait");
    assert!(
        std::fs::symlink_metadata(&socket)
            .expect("the dead server's socket file")
            .file_type()
            .is_socket()
    );
    let (mut second, addresses) = serve_listening(&db, &[&unix]);
    assert_eq!(addresses, vec![unix.clone()]);
    let (status, got) = request_unix(&socket, "GET", &format!("/v1/sessions/{id}"), None);
    assert_eq!(status, 200, "{got}");

    // A clean stop removes the socket file.
    let status = Command::new("kill")
        .args(["-TERM", &second.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = wait_for(|| second.try_wait().expect("wait"));
    assert!(exit.success());
    assert!(!socket.exists(), "a stopped server removes its socket");
}

#[test]
fn a_public_address_without_api_keys_refuses_to_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(env!("CARGO_BIN_EXE_stepwise"))
        .args(["serve", "--listen", "0.0.0.0:0"])
        .arg("--database")
        .arg(format!(
            "sqlite://{}",
            dir.path().join("stepwise.db").display()
        ))
        .env_remove("STEPWISE_INSECURE_NO_AUTH")
        .output()
        .expect("run stepwise serve");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("API key"), "{stderr}");
}

#[test]
fn insecure_no_auth_on_a_public_address_starts_with_a_warning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_stepwise"))
        .args(["serve", "--listen", "0.0.0.0:0", "--insecure-no-auth"])
        .arg("--database")
        .arg(format!(
            "sqlite://{}",
            dir.path().join("stepwise.db").display()
        ))
        .env("STEPWISE_LOG", "warn")
        .env_remove("STEPWISE_LISTEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start stepwise serve");
    let stdout = child.stdout.take().expect("stdout");
    let listening = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.starts_with("Stepwise listening on http://"));
    let _ = child.kill();
    let _ = child.wait();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    assert!(listening, "it starts: {stderr}");
    assert!(
        stderr.contains("WITHOUT AUTHENTICATION"),
        "and says it is open: {stderr}"
    );
}

/// The `tool-calling` agent in the real binary, pointed at a fake model over loopback:
/// the process is killed (SIGKILL) once step 3 of 6 is durable and the model has been
/// asked for turn 4; after a restart on the same database the model is asked for turns
/// 4, 5 and 6 only, and the recorded tool calls are not run again.
#[test]
fn llm_agent_killed_after_step_3_of_6_asks_the_model_for_steps_4_to_6_only() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let crashed = Arc::new(AtomicBool::new(false));
    let turns: Arc<Mutex<Vec<(bool, usize)>>> = Arc::default();
    let model = {
        let (crashed, turns) = (crashed.clone(), turns.clone());
        runtime.block_on(fake_model::FakeModel::start(move |request, _| {
            let turn = fake_model::tool_results(request).len() + 1;
            let after_crash = crashed.load(Ordering::SeqCst);
            turns.lock().expect("turns").push((after_crash, turn));
            if turn == 4 && !after_crash {
                // The process dies while the model is "thinking" about turn 4.
                fake_model::Reply::Hang
            } else if turn < 6 {
                fake_model::stream_tool_calls(&[(
                    &format!("call_{turn}"),
                    "calculator",
                    json!({"expression": format!("{turn}*10")}).to_string(),
                )])
            } else {
                fake_model::stream_answer("done after 6 steps")
            }
        }))
    };
    let env = [
        ("STEPWISE_LLM_BASE_URL", model.base_url.as_str()),
        ("STEPWISE_LLM_MODEL", "fake-model"),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("stepwise.db");

    let server = Server::start_with(&db, &env);
    let (status, accepted) = server.request(
        "POST",
        "/v1/messages",
        Some(json!({"content": "count to six"})),
    );
    assert_eq!(status, 202, "{accepted}");
    assert_eq!(accepted["execution"]["agent_type"], json!("tool-calling"));
    let execution = accepted["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    wait_for(|| {
        let asked = turns.lock().expect("turns").contains(&(false, 4));
        (asked && steps(&server, &execution).len() == 3).then_some(())
    });
    server.signal("-KILL");
    drop(server);
    crashed.store(true, Ordering::SeqCst);

    let server = Server::start_with(&db, &env);
    let done = wait_for(|| {
        let (_, e) = server.request("GET", &format!("/v1/executions/{execution}"), None);
        matches!(e["status"].as_str(), Some("completed" | "failed")).then_some(e)
    });
    assert_eq!(done["status"], json!("completed"), "{done}");
    assert_eq!(done["output"], json!("done after 6 steps"));
    let after: Vec<usize> = turns
        .lock()
        .expect("turns")
        .iter()
        .filter(|(after, _)| *after)
        .map(|(_, turn)| *turn)
        .collect();
    assert_eq!(
        after,
        [4, 5, 6],
        "only the unrecorded turns are asked again"
    );
    assert_eq!(steps(&server, &execution), (1..=6).collect::<Vec<u64>>());
    drop(server);
    drop(model);
}
