//! `stepwise serve --log-format json`: every stderr line is one JSON object, and the lines
//! of an HTTP request carry its request id; an API key sent with a request never appears.
//! `--metrics-listen` serves `/metrics` alone on a second address.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(30);

fn get(addr: &str, path: &str, headers: &[(&str, &str)]) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    answer
}

#[test]
fn json_logs_are_one_object_a_line_with_the_request_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_stepwise"))
        .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .arg("--database")
        .arg(format!("sqlite://{}", dir.path().join("s.db").display()))
        // Request lines are logged at debug.
        .env("STEPWISE_LOG", "info,stepwise_server=debug")
        .env_remove("STEPWISE_LISTEN")
        .env_remove("STEPWISE_DATABASE_URL")
        .env_remove("STEPWISE_LOG_FORMAT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start stepwise serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut out_lines = BufReader::new(stdout).lines();
    let mut addr = None;
    let metrics_addr = loop {
        let line = out_lines
            .next()
            .expect("serve printed its addresses")
            .expect("a line");
        if let Some(url) = line.strip_prefix("Stepwise listening on http://") {
            addr = Some(url.trim().to_string());
        }
        if let Some(url) = line.strip_prefix("Metrics on http://") {
            break url.trim().trim_end_matches("/metrics").to_string();
        }
    };
    let addr = addr.expect("the API address comes first");
    std::thread::spawn(move || for _ in out_lines {});
    let (tx, rx) = mpsc::channel::<String>();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let secret = "sw_test_secret_value_that_must_not_be_logged";
    let answer = get(
        &addr,
        "/v1/sessions",
        &[
            ("x-request-id", "logs-test-42"),
            ("Authorization", &format!("Bearer {secret}")),
        ],
    );
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("x-request-id: logs-test-42"),
        "{answer}"
    );

    // The separate metrics listener serves /metrics and nothing else.
    let metrics = get(&metrics_addr, "/metrics", &[]);
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(
        metrics.contains("stepwise_sessions_by_status{status=\"active\"}"),
        "{metrics}"
    );
    let other = get(&metrics_addr, "/v1/sessions", &[]);
    assert!(other.starts_with("HTTP/1.1 404"), "{other}");

    let mut seen = Vec::new();
    let deadline = Instant::now() + DEADLINE;
    let request_line = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = rx.recv_timeout(left) else {
            panic!(
                "no log line with the request id; lines seen:\n{}",
                seen.join("\n")
            );
        };
        let parsed: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(parsed["level"].is_string(), "{line}");
        assert!(parsed["timestamp"].is_string(), "{line}");
        assert!(!line.contains(secret), "the API key was logged: {line}");
        seen.push(line);
        if parsed["span"]["request_id"] == "logs-test-42" {
            break parsed;
        }
    };
    assert_eq!(
        request_line["span"]["path"], "/v1/sessions",
        "{request_line}"
    );

    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().expect("wait");
    assert!(status.success(), "serve exited with {status}");
    for line in rx.try_iter() {
        serde_json::from_str::<Value>(&line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(!line.contains(secret), "the API key was logged: {line}");
    }
}
