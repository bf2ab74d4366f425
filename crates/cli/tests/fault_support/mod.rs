//! Shared by the fault suite (`faults_*.rs`): the real `stepwise serve` binary on a
//! loopback port, its log in a file, one-shot HTTP requests, polling with a deadline, and
//! a throwaway PostgreSQL cluster of the test's own (initdb + pg_ctl on a free port, never
//! the machine's cluster).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The longest any condition of the suite is waited for.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_stepwise")
}

/// A `stepwise serve` child; killed (SIGKILL) when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
    pub log: PathBuf,
}

/// How a `serve` start ended: listening, or exited (with its log).
pub enum Started {
    Listening(Server),
    Exited(ExitStatus, String),
}

/// `stepwise serve --listen 127.0.0.1:0 ARGS`, its stderr (logs) into `log`. Waits until
/// it prints its address or exits.
pub fn start_serve(args: &[&str], log: &Path, prefix: &[&str]) -> Started {
    let log_file = std::fs::File::create(log).expect("create the log file");
    let (program, mut pre): (&str, Vec<&str>) = match prefix.split_first() {
        Some((first, rest)) => (first, rest.to_vec()),
        None => (binary(), Vec::new()),
    };
    if !prefix.is_empty() {
        pre.push(binary());
    }
    let mut child = Command::new(program)
        .args(pre)
        .args(["serve", "--listen", "127.0.0.1:0", "--workers", "2"])
        .args(args)
        .env("STEPWISE_LOG", "info")
        .env_remove("STEPWISE_LISTEN")
        .env_remove("STEPWISE_DATABASE_URL")
        .env_remove("STEPWISE_DURABILITY")
        .env_remove("STEPWISE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file))
        .spawn()
        .expect("start stepwise serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(url) = line.strip_prefix("Stepwise listening on http://") {
                    break url.trim().to_string();
                }
            }
            _ => {
                let status = child.wait().expect("wait for serve");
                let text = std::fs::read_to_string(log).unwrap_or_default();
                return Started::Exited(status, text);
            }
        }
    };
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Started::Listening(Server {
        child,
        addr,
        log: log.to_path_buf(),
    })
}

/// Starts a server that must come up.
pub fn serve(args: &[&str], log: &Path) -> Server {
    match start_serve(args, log, &[]) {
        Started::Listening(server) => server,
        Started::Exited(status, text) => {
            panic!("serve exited ({status}) instead of listening:\n{text}")
        }
    }
}

impl Server {
    pub fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        request(&self.addr, method, path, body)
    }

    pub fn kill_9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then waits for the exit.
    pub fn stop(&mut self) -> ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        wait_for("the server to exit", || {
            self.child.try_wait().ok().flatten()
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A one-shot HTTP/1.1 request (Connection: close): the status and the JSON body (`Null`
/// when there is none or the server could not be reached: status 0).
pub fn request(addr: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let (status, text) = request_text(addr, method, path, body);
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

pub fn request_text(addr: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    if stream.write_all(head.as_bytes()).is_err() || stream.write_all(body.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut raw = Vec::new();
    if stream.read_to_end(&mut raw).is_err() && raw.is_empty() {
        return (0, String::new());
    }
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
    (status, payload)
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

/// Polls `check` every 25 ms until it answers `Some`, for at most [`DEADLINE`].
#[track_caller]
pub fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Creates a session and an external execution on it: (session id, execution id).
pub fn external_execution(addr: &str) -> (String, String) {
    let (status, session) = request(addr, "POST", "/v1/sessions", Some(&serde_json::json!({})));
    assert_eq!(status, 201, "create session: {session}");
    let session_id = session["id"].as_str().expect("session id").to_string();
    let (status, execution) = request(
        addr,
        "POST",
        &format!("/v1/sessions/{session_id}/executions"),
        Some(&serde_json::json!({"agent_type": "external", "input": {}})),
    );
    assert_eq!(status, 201, "create execution: {execution}");
    let execution_id = execution["id"].as_str().expect("execution id").to_string();
    (session_id, execution_id)
}

/// The body of step `n` for an external agent, with `filler` bytes of output text that
/// does not compress much (the store compresses large payloads).
pub fn step_body(n: u64, filler: usize) -> Value {
    serde_json::json!({
        "step_number": n,
        "kind": "action",
        "model_output": format!("step {n} {}", noise(n, filler)),
    })
}

/// `len` pseudo-random letters and digits, different for each `seed`.
pub fn noise(seed: u64, len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ALPHABET[(x % 64) as usize] as char
        })
        .collect()
}

/// Step numbers of an execution as stored (every page).
pub fn step_numbers(addr: &str, execution: &str) -> Vec<u64> {
    let mut numbers = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/executions/{execution}/steps?limit=500&cursor={c}"),
            None => format!("/v1/executions/{execution}/steps?limit=500"),
        };
        let (status, body) = request(addr, "GET", &path, None);
        assert_eq!(status, 200, "list steps: {body}");
        for step in body["items"].as_array().cloned().unwrap_or_default() {
            numbers.push(step["step_number"].as_u64().unwrap_or(0));
        }
        match body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return numbers,
        }
    }
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// A throwaway PostgreSQL cluster: `initdb` into a temporary directory and `pg_ctl` on a
/// port of its own, on 127.0.0.1 and a socket in that directory. Run as the `postgres`
/// user when the test runs as root (PostgreSQL refuses root). Stopped and removed on drop.
pub struct PgCluster {
    pub dir: tempfile::TempDir,
    pub port: u16,
    bin: PathBuf,
    as_postgres: bool,
}

impl PgCluster {
    /// `None` (with the reason printed) when no PostgreSQL binaries are installed; a
    /// panic under CI, where they must be.
    pub fn binaries() -> Option<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|bin| bin.join("initdb").is_file() && bin.join("pg_ctl").is_file())
            .collect();
        found.sort();
        let bin = found.pop();
        if bin.is_none() {
            let reason = "no initdb/pg_ctl under /usr/lib/postgresql/*/bin";
            if std::env::var_os("CI").is_some() {
                panic!("the PostgreSQL fault tests need PostgreSQL's server binaries: {reason}");
            }
            eprintln!("\n*** SKIPPED: {reason} ***\n");
        }
        bin
    }

    /// Initialises a cluster (not started yet).
    pub fn init(bin: &Path) -> PgCluster {
        let dir = tempfile::Builder::new()
            .prefix("stepwise-faults-pg-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let as_postgres = is_root();
        if as_postgres {
            let _ = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status();
        }
        let cluster = PgCluster {
            dir,
            port: free_port(),
            bin: bin.to_path_buf(),
            as_postgres,
        };
        let data = cluster.data();
        let status = cluster
            .command("initdb")
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
                "-D",
            ])
            .arg(&data)
            .stdout(Stdio::null())
            .status()
            .expect("run initdb");
        assert!(status.success(), "initdb failed");
        cluster
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self, tool: &str) -> Command {
        let path = self.bin.join(tool);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        }
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn start(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let status = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-o", &options, "-l"])
            .arg(self.dir.path().join("log"))
            .args(["-w", "-t", "60", "start"])
            .stdout(Stdio::null())
            .status()
            .expect("run pg_ctl start");
        assert!(status.success(), "pg_ctl start failed");
    }

    pub fn stop(&self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "fast", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        self.stop();
    }
}
