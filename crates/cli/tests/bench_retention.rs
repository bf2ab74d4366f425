//! `stepwise bench retention` runs end to end on a small count and reports exactly the
//! sessions it created as deleted, with every row that belonged to them (no timing asserted).

use std::process::Command;

use serde_json::Value;

#[test]
fn bench_retention_deletes_every_session_it_created() {
    let output = Command::new(env!("CARGO_BIN_EXE_stepwise"))
        .args([
            "bench",
            "retention",
            "--sessions",
            "200",
            "--baseline-secs",
            "1",
            "--clients",
            "2",
        ])
        .env_remove("STEPWISE_DATABASE_URL")
        .env("STEPWISE_LOG", "warn")
        .output()
        .expect("run stepwise bench retention");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "failed: {stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    });
    assert_eq!(report["sessions"], 200, "{report}");
    assert_eq!(report["deleted"]["sessions"], 200, "{report}");
    assert_eq!(report["deleted"]["executions"], 200, "{report}");
    assert_eq!(report["deleted"]["messages"], 200, "{report}");
    assert_eq!(report["deleted"]["events"], 200, "{report}");
    assert_eq!(report["deleted"]["steps"], 600, "{report}");
    assert_eq!(report["expired_sessions_left"], 0, "{report}");
    // The clients' own sessions are fresh: nothing of theirs is touched.
    assert_eq!(report["marked_abandoned"], 0, "{report}");
    for phase in ["before", "during"] {
        assert!(
            report[phase]["requests"].as_u64().unwrap_or(0) > 0,
            "{phase}: {report}"
        );
        for figure in ["p50_ms", "p99_ms", "max_ms"] {
            assert!(
                report[phase][figure].is_number(),
                "{phase}.{figure}: {report}"
            );
        }
    }
    assert!(report["delete_secs"].is_number(), "{report}");
    assert!(report["deletes_per_sec"].is_number(), "{report}");
}
