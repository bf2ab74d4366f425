//! The fault suite on PostgreSQL, with the real `stepwise serve` binary and a throwaway
//! cluster of the test's own (initdb + pg_ctl on a free port; never the machine's cluster):
//! - serve started before its database waits, logging each try, and comes up with it;
//! - with nothing listening and a short `--db-wait-secs`, it gives up with a clear message;
//! - PostgreSQL stopped mid-run: clear 503s and readiness down, then writes resume once it
//!   is back, every acknowledged step present exactly once.

mod fault_support;

use fault_support::*;
use serde_json::json;

#[test]
fn serve_gives_up_with_a_clear_message_when_nothing_listens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", free_port());
    match start_serve(
        &["--database", &url, "--db-wait-secs", "2"],
        &dir.path().join("serve.log"),
        &[],
    ) {
        Started::Listening(_) => panic!("serve started without a database"),
        Started::Exited(status, log) => {
            assert!(!status.success());
            let tries = log.matches("PostgreSQL is not reachable yet").count();
            assert!(tries >= 2, "each try is logged ({tries}):\n{log}");
            assert!(
                log.contains("cannot reach PostgreSQL") && log.contains("--db-wait-secs"),
                "the last line says what is wrong and what to change:\n{log}"
            );
        }
    }
}

/// A database that does not exist, or a user the server refuses, will not come by waiting:
/// serve says so at once, in PostgreSQL's words, without trying for `--db-wait-secs`.
#[test]
fn serve_refused_by_postgresql_says_why_at_once() {
    let Some(bin) = PgCluster::binaries() else {
        return;
    };
    let cluster = PgCluster::init(&bin);
    cluster.start();
    let dir = tempfile::tempdir().expect("tempdir");
    let base = cluster.url();
    let (prefix, _) = base.rsplit_once('/').expect("a database in the URL");
    let missing = format!("{prefix}/no_such_database");
    let stranger = missing
        .replacen("postgres@", "nobody_here@", 1)
        .replace("/no_such_database", "/postgres");
    for (url, why) in [(missing, "does not exist"), (stranger, "nobody_here")] {
        match start_serve(
            &["--database", &url, "--db-wait-secs", "20"],
            &dir.path().join("serve.log"),
            &[],
        ) {
            Started::Listening(_) => panic!("serve started on {url}"),
            Started::Exited(status, log) => {
                assert!(!status.success());
                assert!(log.contains(why), "PostgreSQL's reason is told:\n{log}");
                assert!(
                    !log.contains("PostgreSQL is not reachable yet"),
                    "a refusal is not tried again:\n{log}"
                );
            }
        }
    }
}

#[test]
fn serve_started_before_its_database_comes_up_with_it() {
    let Some(bin) = PgCluster::binaries() else {
        return;
    };
    let cluster = PgCluster::init(&bin);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("serve.log");
    let url = cluster.url();
    let starting = {
        let log = log.clone();
        std::thread::spawn(move || {
            start_serve(&["--database", &url, "--db-wait-secs", "60"], &log, &[])
        })
    };
    wait_for("serve to log a try", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("PostgreSQL is not reachable yet")
            .then_some(())
    });
    cluster.start();
    let server = match starting.join().expect("serve thread") {
        Started::Listening(server) => server,
        Started::Exited(status, log) => panic!("serve gave up ({status}):\n{log}"),
    };
    let (status, body) = server.request("POST", "/v1/sessions", Some(&json!({})));
    assert_eq!(status, 201, "{body}");
    let (status, _) = server.request("GET", "/readyz", None);
    assert_eq!(status, 200);
}

#[test]
fn postgres_stopped_mid_run_answers_503_then_recovers_with_every_acknowledged_step() {
    let Some(bin) = PgCluster::binaries() else {
        return;
    };
    let cluster = PgCluster::init(&bin);
    cluster.start();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = cluster.url();
    let server = serve(&["--database", &url], &dir.path().join("serve.log"));
    let (_, execution) = external_execution(&server.addr);
    let post = |n: u64| {
        server.request(
            "POST",
            &format!("/v1/executions/{execution}/steps"),
            Some(&step_body(n, 256)),
        )
    };
    for n in 1..=20 {
        let (status, body) = post(n);
        assert_eq!(status, 201, "{body}");
    }
    cluster.stop();
    let (status, body) = post(21);
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    let (status, _) = server.request("GET", "/readyz", None);
    assert_eq!(status, 503);

    cluster.start();
    // The pool reconnects: the same step (idempotent by number) goes in once.
    wait_for("writes to succeed again", || {
        let (status, _) = post(21);
        matches!(status, 200 | 201).then_some(())
    });
    let (status, body) = post(22);
    assert_eq!(status, 201, "{body}");
    let (status, _) = server.request("GET", "/readyz", None);
    assert_eq!(status, 200);
    assert_eq!(
        step_numbers(&server.addr, &execution),
        (1..=22).collect::<Vec<_>>()
    );
}
