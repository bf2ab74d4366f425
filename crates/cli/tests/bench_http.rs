//! `stepwise bench http --url` loads a separately started `stepwise serve` from its own
//! process and reports the messages it accepted as JSON (no timing asserted).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::Value;

#[test]
fn bench_http_posts_messages_to_a_running_server_and_reports_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = Command::new(env!("CARGO_BIN_EXE_stepwise"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--rate-limit-per-sec",
            "0",
        ])
        .arg("--database")
        .arg(format!("sqlite://{}", dir.path().join("s.db").display()))
        .env("STEPWISE_LOG", "warn")
        .env_remove("STEPWISE_LISTEN")
        .env_remove("STEPWISE_DATABASE_URL")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start stepwise serve");
    let mut lines = BufReader::new(server.stdout.take().expect("stdout")).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("serve printed its address")
            .expect("line");
        if let Some(rest) = line.strip_prefix("Stepwise listening on ") {
            break rest.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let output = Command::new(env!("CARGO_BIN_EXE_stepwise"))
        .args([
            "bench",
            "http",
            "--url",
            &url,
            "--clients",
            "3",
            "--seconds",
            "1",
        ])
        .env("STEPWISE_LOG", "warn")
        .env_remove("STEPWISE_API_KEY")
        .output()
        .expect("run stepwise bench http");
    let _ = server.kill();
    let _ = server.wait();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "bench http failed: {stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    assert_eq!(report["benchmark"], "http", "{report}");
    assert_eq!(report["messages"]["clients"], 3, "{report}");
    assert_eq!(report["messages"]["errors"], 0, "{report}");
    assert!(
        report["messages"]["accepted"].as_u64().unwrap_or(0) > 0,
        "{report}"
    );
    assert!(
        report["messages"]["per_sec"].as_f64().unwrap_or(0.0) > 0.0,
        "{report}"
    );
}
