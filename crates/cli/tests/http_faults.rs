//! Hostile and broken HTTP clients against the real `stepwise serve` binary, over loopback:
//! connections that stall in their headers, body or between requests are closed by the
//! timeouts while an event stream older than all of them keeps getting events; at the
//! connection cap a waiting connection makes room for a new one, and when every connection
//! has a request in flight new ones get a 503 while the old ones keep working; hyper's own
//! 431 and a UTF-16 body get the JSON error shape; and 150 event streams that never read,
//! on a session with a long history, leave the server's memory far below what buffering
//! that history per stream would take.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(60);

struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(db: &Path, args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_stepwise"))
            .args(["serve", "--listen", "127.0.0.1:0", "--workers", "2"])
            .args(["--rate-limit-per-sec", "0", "--max-sse-per-tenant", "0"])
            .arg("--database")
            .arg(format!("sqlite://{}", db.display()))
            .args(args)
            .env("STEPWISE_DEMO_STEP_MS", "0")
            .env("STEPWISE_LOG", "warn")
            .env_remove("STEPWISE_LISTEN")
            .env_remove("STEPWISE_DATABASE_URL")
            .env_remove("STEPWISE_CONFIG")
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
        std::thread::spawn(move || for _ in lines {});
        Server { child, addr }
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(&self.addr).expect("connect");
        stream
            .set_read_timeout(Some(DEADLINE))
            .expect("read timeout");
        stream
    }

    fn request(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let (status, _, body) = self.raw(&format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ));
        (status, body)
    }

    /// Sends `request` on a new connection and reads the answer to the end.
    fn raw(&self, request: &str) -> (u16, String, Value) {
        let mut stream = self.connect();
        stream.write_all(request.as_bytes()).expect("write");
        read_answer(&mut stream)
    }

    fn metric(&self, name: &str) -> f64 {
        let (_, head, _) =
            self.raw("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        head.lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(f64::NAN)
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("read /proc/PID/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS")
    }

    fn session(&self) -> String {
        let (status, session) = self.request("POST", "/v1/sessions", Some(json!({"title": "t"})));
        assert_eq!(status, 201, "{session}");
        session["id"].as_str().expect("id").to_string()
    }

    /// Opens an event stream and reads its response head.
    fn events(&self, session: &str) -> BufReader<TcpStream> {
        let mut stream = self.connect();
        write!(
            stream,
            "GET /v1/sessions/{session}/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
        )
        .expect("write");
        let mut reader = BufReader::new(stream);
        let mut status = String::new();
        reader.read_line(&mut status).expect("status line");
        assert!(status.contains(" 200 "), "{status}");
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("header");
            if line == "\r\n" {
                break reader;
            }
        }
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(15) {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
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

/// Reads an HTTP answer to the end of the connection: status, head and JSON body.
fn read_answer(stream: &mut TcpStream) -> (u16, String, Value) {
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    let json = serde_json::from_str(&body).unwrap_or(Value::Null);
    // For /metrics (text), the caller reads the body through `head`'s second part.
    (status, format!("{head}\r\n\r\n{body}"), json)
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// True when the server closed the connection (end of stream or reset) before the deadline.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// Reads SSE lines until an `event: <name>` line; panics at the deadline.
fn wait_for_event(reader: &mut BufReader<TcpStream>, name: &str) {
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < DEADLINE, "no {name} event");
        let mut line = String::new();
        let n = reader.read_line(&mut line).expect("read the event stream");
        assert!(n > 0, "the event stream ended before {name}");
        if line.trim_end() == format!("event: {name}") {
            return;
        }
    }
}

#[test]
fn stalled_connections_time_out_and_event_streams_do_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(
        &dir.path().join("t.db"),
        &[
            "--header-timeout-secs",
            "1",
            "--body-timeout-secs",
            "1",
            "--idle-timeout-secs",
            "2",
        ],
    );
    let session = server.session();
    // An event stream opened before everything else: older than every timeout below.
    let mut events = server.events(&session);

    // Nothing sent at all.
    let mut silent = server.connect();
    // Half a request line.
    let mut half = server.connect();
    half.write_all(b"GET /healthz HT").expect("write");
    // Complete headers, a third of the body.
    let mut partial = server.connect();
    partial
        .write_all(
            b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 30\r\n\r\n{\"title\"",
        )
        .expect("write");
    // One request answered, then idle on a keep-alive connection.
    let mut idle = server.connect();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    let mut head = [0u8; 12];
    idle.read_exact(&mut head).expect("an answer");
    assert_eq!(&head, b"HTTP/1.1 200");

    assert!(
        closed_by_server(&mut silent),
        "a silent connection stays open"
    );
    assert!(
        closed_by_server(&mut half),
        "half a request line stays open"
    );
    let (status, _, body) = read_answer(&mut partial);
    assert_eq!(status, 408, "a partial body: {body}");
    assert_eq!(body["error"]["code"], "request_timeout");
    assert!(closed_by_server(&mut idle), "an idle keep-alive stays open");

    // The stream, now older than the header, body and idle timeouts, still gets events.
    let (status, answer) = server.request(
        "POST",
        &format!("/v1/sessions/{session}/messages"),
        Some(json!({"content": "still there?"})),
    );
    assert_eq!(status, 202, "{answer}");
    wait_for_event(&mut events, "message.created");
    wait_for_event(&mut events, "execution.completed");
    server.stop();
}

#[test]
fn at_the_connection_cap_waiting_connections_make_room_and_busy_ones_are_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("t.db"), &["--max-connections", "3"]);
    let session = server.session();

    // Three connections that send nothing fill the cap: a normal request still gets through,
    // closing the one that waited longest.
    let mut stalled: Vec<TcpStream> = (0..3).map(|_| server.connect()).collect();
    let (status, _) = server.request("GET", "/healthz", None);
    assert_eq!(status, 200);
    assert!(
        closed_by_server(&mut stalled[0]),
        "the oldest waiting connection was kept"
    );
    drop(stalled);

    // Three event streams (requests in flight) fill the cap: a new connection gets 503 with
    // the JSON error shape and is closed, and the streams keep working.
    let mut streams: Vec<_> = (0..3).map(|_| server.events(&session)).collect();
    let mut refused = None;
    let start = Instant::now();
    while refused.is_none() {
        assert!(
            start.elapsed() < DEADLINE,
            "a fourth connection was never refused"
        );
        // The stalled connections above may take a moment to be counted closed.
        let (status, _, body) =
            server.raw("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        if status == 503 {
            refused = Some(body);
        } else {
            assert_eq!(status, 200);
        }
    }
    let body = refused.expect("refused");
    assert_eq!(body["error"]["code"], "too_many_connections", "{body}");
    // A stream closed makes room again, and the streams that were there all along still
    // get events.
    streams.truncate(2);
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < DEADLINE, "no room after a stream closed");
        let (status, _, _) =
            server.raw("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        if status == 200 {
            break;
        }
    }
    drop(server_message(&server, &session));
    for stream in &mut streams {
        wait_for_event(stream, "message.created");
    }
    assert!(server.metric("stepwise_http_connections_refused_total") >= 1.0);
    assert!(server.metric("stepwise_http_connections_evicted_total") >= 1.0);
    server.stop();
}

fn server_message(server: &Server, session: &str) -> Value {
    let (status, answer) = server.request(
        "POST",
        &format!("/v1/sessions/{session}/messages"),
        Some(json!({"content": "hello"})),
    );
    assert_eq!(status, 202, "{answer}");
    answer
}

#[test]
fn oversized_headers_and_foreign_charsets_get_the_json_error_shape() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("t.db"), &[]);

    // A 1 MB header: 431 with the error shape (the server stops reading; the client may
    // see the answer or a reset while still sending, so it sends from a thread).
    let mut stream = server.connect();
    let mut writer = stream.try_clone().expect("clone");
    let sender = std::thread::spawn(move || {
        let big = format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "a".repeat(1 << 20)
        );
        let _ = writer.write_all(big.as_bytes());
    });
    let (status, head, body) = read_answer(&mut stream);
    let _ = sender.join();
    assert_eq!(status, 431, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json")
    );
    assert_eq!(
        body["error"]["code"], "request_header_fields_too_large",
        "{body}"
    );
    assert!(body["error"]["message"].is_string());
    assert!(body["error"].get("field").is_some());

    // A request line hyper cannot parse: 400 with the error shape.
    let (status, _, body) = server.raw("NOT HTTP AT ALL\r\n\r\n");
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "invalid_request", "{body}");

    // JSON is UTF-8: another charset is 415; utf-8 in any case is accepted.
    let payload = json!({"title": "charset"}).to_string();
    for (charset, expected) in [
        ("utf-16", 415),
        ("ISO-8859-1", 415),
        ("UTF-8", 201),
        ("\"utf-8\"", 201),
    ] {
        let (status, _, body) = server.raw(&format!(
            "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json; charset={charset}\r\nContent-Length: {}\r\n\r\n{payload}",
            payload.len()
        ));
        assert_eq!(status, expected, "charset={charset}: {body}");
        if expected == 415 {
            assert_eq!(body["error"]["code"], "unsupported_media_type");
        }
    }
    server.stop();
}

#[test]
fn non_reading_event_streams_on_a_long_history_keep_memory_bounded() {
    const MESSAGES: usize = 60;
    const STREAMS: usize = 150;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("t.db");
    let server = Server::start(&db, &[]);
    let session = server.session();
    let content = "x".repeat(64 * 1024);
    for _ in 0..MESSAGES {
        let (status, answer) = server.request(
            "POST",
            &format!("/v1/sessions/{session}/messages"),
            Some(json!({"content": content})),
        );
        assert_eq!(status, 202, "{answer}");
    }
    // Wait for every run to finish, then read the history's size from the stream itself.
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < DEADLINE * 2, "runs did not finish");
        let (_, list) = server.request(
            "GET",
            &format!("/v1/sessions/{session}/executions?limit=500"),
            None,
        );
        let items = list["items"].as_array().expect("items");
        if items.len() == MESSAGES
            && items
                .iter()
                .all(|e| matches!(e["status"].as_str(), Some("completed" | "failed")))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    server.stop();

    // A fresh process: nothing of the history is in memory.
    let server = Server::start(&db, &[]);
    let history = {
        let mut stream = server.connect();
        write!(
            stream,
            "GET /v1/sessions/{session}/events HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        .expect("write");
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        // Reads until the stream goes quiet (the keep-alive comment comes after 10 s).
        let mut total = 0usize;
        let mut buf = vec![0u8; 256 * 1024];
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    };
    assert!(history > 8 << 20, "the history is only {history} bytes");
    let start = Instant::now();
    while server.metric("stepwise_sse_subscribers") != 0.0 {
        assert!(
            start.elapsed() < DEADLINE,
            "the reading stream did not close"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let baseline = server.rss_kib();

    // Streams that never read a byte.
    let streams: Vec<TcpStream> = (0..STREAMS)
        .map(|_| {
            let mut stream = server.connect();
            write!(
                stream,
                "GET /v1/sessions/{session}/events HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            .expect("write");
            stream
        })
        .collect();
    let start = Instant::now();
    let mut peak = baseline;
    while server.metric("stepwise_sse_subscribers") < STREAMS as f64 {
        assert!(start.elapsed() < DEADLINE, "the streams did not open");
        peak = peak.max(server.rss_kib());
    }
    // Each stream sends until the socket buffers are full; watch memory meanwhile.
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(5) {
        peak = peak.max(server.rss_kib());
        std::thread::sleep(Duration::from_millis(20));
    }
    let growth = (peak.saturating_sub(baseline) * 1024) as usize;
    // Buffering the history per stream would take STREAMS x history; bounded pages take
    // well under a tenth of one history per stream.
    assert!(
        growth < STREAMS * history / 10,
        "{STREAMS} non-reading streams on a {history}-byte history grew the server by {growth} bytes"
    );
    drop(streams);
    let start = Instant::now();
    while server.metric("stepwise_sse_subscribers") != 0.0 {
        assert!(start.elapsed() < DEADLINE, "the streams did not close");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.stop();
}
