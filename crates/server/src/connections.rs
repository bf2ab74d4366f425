//! The HTTP/1 connections: an accept loop over hyper with what `axum::serve` lacks.
//!
//! - **Header timeout**: a connection must send a request's complete headers within
//!   `header_timeout` of opening (or of its first byte after a finished request); one that
//!   sends nothing or half a request line is closed.
//! - **Body timeout**: a request body must arrive in full within `body_timeout` of its
//!   headers; otherwise the answer is 408 `request_timeout` and the connection closes.
//! - **Idle timeout**: a keep-alive connection with no request in flight is closed after
//!   `idle_timeout`. It applies between requests only: a long-lived response (an event
//!   stream) is a request in flight, never cut.
//! - **Connection cap**: at `max_connections` open connections, a new connection makes room
//!   by closing the open connection that has waited longest without a request in flight
//!   (a stalled or idle one); when every connection has a request in flight (event streams),
//!   the new one gets a canned 503 and is closed at once. Both are logged at warn, at most
//!   every 10 s. Running out of file descriptors (EMFILE) makes room the same way. So
//!   stalled clients cannot take the server from everyone else.
//! - **Bounded buffers**: hyper's read and write buffers are capped at [`MAX_BUF`] per
//!   connection; a response body (an event stream) is only polled when the buffer has
//!   room, so a client that does not read holds at most that much (plus one frame).
//! - hyper's own automatic answers to unparsable requests (400, 414, 431 with an empty
//!   body) are rewritten into the API's JSON error shape.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::response::IntoResponse;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

use crate::error::ApiError;
use crate::listeners::{Listener, Peer, Stream};

/// `stepwise serve`'s defaults.
pub const DEFAULT_HEADER_TIMEOUT_SECS: u64 = 10;
pub const DEFAULT_BODY_TIMEOUT_SECS: u64 = 60;
pub const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 75;
/// File descriptors kept back from the open-file limit for the database, logs and the
/// other listeners when the connection cap is derived from that limit.
pub const FD_RESERVE: usize = 256;

/// hyper's per-connection read and write buffer cap: also the largest request head
/// accepted (larger is 431).
pub const MAX_BUF: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    /// Open connections at most; 0 = no limit.
    pub max_connections: usize,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        ConnectionConfig {
            header_timeout: Duration::from_secs(DEFAULT_HEADER_TIMEOUT_SECS),
            body_timeout: Duration::from_secs(DEFAULT_BODY_TIMEOUT_SECS),
            idle_timeout: Duration::from_secs(DEFAULT_IDLE_TIMEOUT_SECS),
            max_connections: default_max_connections(),
        }
    }
}

/// The default connection cap: the process's open-file soft limit minus [`FD_RESERVE`]
/// (at least 64); 10,000 when the limit cannot be read or is unlimited.
pub fn default_max_connections() -> usize {
    match open_file_limit() {
        Some(limit) => limit.saturating_sub(FD_RESERVE).max(64),
        None => 10_000,
    }
}

/// The soft `RLIMIT_NOFILE`, from `/proc/self/limits` (Linux).
fn open_file_limit() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

static OPEN: AtomicUsize = AtomicUsize::new(0);
static SHED: AtomicU64 = AtomicU64::new(0);
static EVICTED: AtomicU64 = AtomicU64::new(0);
static TIMED_OUT: AtomicU64 = AtomicU64::new(0);

/// Connection counters (for `/metrics`).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionCounts {
    /// Open HTTP connections now.
    pub open: usize,
    /// New connections refused (503) at the cap, since start.
    pub shed: u64,
    /// Waiting connections closed to make room for new ones, since start.
    pub evicted: u64,
    /// Connections closed by a header, body or idle timeout, since start.
    pub timed_out: u64,
}

pub fn connection_counts() -> ConnectionCounts {
    ConnectionCounts {
        open: OPEN.load(Ordering::Relaxed),
        shed: SHED.load(Ordering::Relaxed),
        evicted: EVICTED.load(Ordering::Relaxed),
        timed_out: TIMED_OUT.load(Ordering::Relaxed),
    }
}

/// The open connections, to pick one to close when there is no room.
#[derive(Default)]
struct Registry {
    next: AtomicU64,
    open: Mutex<std::collections::HashMap<u64, Arc<Shared>>>,
}

impl Registry {
    fn map(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, Arc<Shared>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn len(&self) -> usize {
        self.map().len()
    }

    /// Closes the connection that has waited longest with no request in flight; false
    /// when every connection has one.
    fn evict_one(&self) -> bool {
        let map = self.map();
        let victim = map
            .values()
            .filter(|shared| !shared.evicted.load(Ordering::Relaxed))
            .filter_map(|shared| shared.waiting_since().map(|since| (since, shared)))
            .min_by_key(|(since, _)| *since)
            .map(|(_, shared)| shared.clone());
        drop(map);
        match victim {
            Some(shared) => {
                shared.evicted.store(true, Ordering::Relaxed);
                shared.changed.notify_one();
                EVICTED.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }
}

/// A connection's place in the registry while its task lives.
struct Registered {
    registry: Arc<Registry>,
    id: u64,
}

impl Registered {
    fn new(registry: Arc<Registry>, shared: Arc<Shared>) -> Self {
        let id = registry.next.fetch_add(1, Ordering::Relaxed);
        registry.map().insert(id, shared);
        OPEN.fetch_add(1, Ordering::Relaxed);
        Registered { registry, id }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.map().remove(&self.id);
        OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves `router` on `listeners` until `shutdown` resolves; then stops accepting, lets
/// requests in flight finish and returns when every connection has closed. The connection
/// cap counts the connections of every listener together.
pub async fn serve(
    listeners: Vec<Listener>,
    router: Router,
    config: ConnectionConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let config = Arc::new(config);
    let registry = Arc::new(Registry::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let shed_log = Throttled::default();
    let evict_log = Throttled::default();
    let accept_log = Throttled::default();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            accepted = crate::listeners::accept(&listeners) => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // Out of file descriptors (EMFILE/ENFILE) or memory: close a waiting
                // connection if there is one, and wait a little rather than spin.
                let open_now = registry.len();
                let evicted = registry.evict_one();
                accept_log.warn(|skipped| {
                    tracing::warn!(error = %e, open = open_now, closing_a_waiting_connection = evicted, repeated = skipped, "cannot accept connections; set --max-connections below the open-file limit (ulimit -n)");
                });
                tokio::select! {
                    _ = &mut shutdown => break,
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
                continue;
            }
        };
        let open_now = registry.len();
        if config.max_connections > 0 && open_now >= config.max_connections {
            if registry.evict_one() {
                evict_log.warn(|skipped| {
                    tracing::warn!(
                        open = open_now,
                        max_connections = config.max_connections,
                        closed = skipped + 1,
                        "connection limit reached: closing the connections that wait longest without a request to make room (see --max-connections and the header and idle timeouts)"
                    );
                });
            } else {
                SHED.fetch_add(1, Ordering::Relaxed);
                shed_log.warn(|skipped| {
                    tracing::warn!(
                        open = open_now,
                        max_connections = config.max_connections,
                        shed = skipped + 1,
                        "connection limit reached and every connection has a request in flight: new connections get 503 and are closed (see --max-connections)"
                    );
                });
                shed(stream);
                continue;
            }
        }
        let shared = Arc::new(Shared::new());
        let registered = Registered::new(registry.clone(), shared.clone());
        tokio::spawn(connection(
            stream,
            peer,
            router.clone(),
            config.clone(),
            shared,
            registered,
            stop_rx.clone(),
        ));
    }
    drop(listeners);
    drop(stop_rx);
    let _ = stop_tx.send(true);
    // Every connection task holds a receiver: this returns when the last one ends.
    stop_tx.closed().await;
    Ok(())
}

/// Errors of one connection that do not mean the listener is in trouble.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

const SHED_BODY: &str = r#"{"error":{"code":"too_many_connections","message":"the server has as many open connections as it accepts; try again","field":null}}"#;

/// Answers 503 without reading the request (best effort: one non-blocking write) and closes.
fn shed(stream: Stream) {
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{SHED_BODY}",
        SHED_BODY.len()
    );
    let _ = stream.try_write(response.as_bytes());
    drop(stream);
}

/// A warning logged at most every 10 s, with the number of events in between.
#[derive(Default)]
struct Throttled {
    last: Mutex<Option<Instant>>,
    skipped: AtomicU64,
}

impl Throttled {
    fn warn(&self, log: impl FnOnce(u64)) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if last.is_some_and(|at| now.duration_since(at) < Duration::from_secs(10)) {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(now);
        log(self.skipped.swap(0, Ordering::Relaxed));
    }
}

/// What a connection is doing, for its timeouts.
struct Activity {
    /// Requests whose response has not been fully handed to hyper yet.
    in_flight: usize,
    /// At least one request was answered (then the idle timeout applies between requests).
    served: bool,
    /// When the connection opened or its last response finished.
    idle_since: Instant,
    /// The first byte read since then: a request has started arriving.
    first_byte: Option<Instant>,
}

struct Shared {
    activity: Mutex<Activity>,
    /// Woken when a request starts or ends, so the deadline is recomputed, or when the
    /// connection is to be closed to make room.
    changed: Notify,
    evicted: AtomicBool,
}

impl Shared {
    fn new() -> Self {
        Shared {
            activity: Mutex::new(Activity {
                in_flight: 0,
                served: false,
                idle_since: Instant::now(),
                first_byte: None,
            }),
            changed: Notify::new(),
            evicted: AtomicBool::new(false),
        }
    }

    /// Since when the connection has waited for a request; `None` while one is in flight.
    fn waiting_since(&self) -> Option<Instant> {
        let activity = self.activity();
        (activity.in_flight == 0).then(|| activity.first_byte.unwrap_or(activity.idle_since))
    }

    fn activity(&self) -> std::sync::MutexGuard<'_, Activity> {
        // Nothing in here can be left half-changed by a panic.
        self.activity.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bytes_read(&self) {
        let mut activity = self.activity();
        if activity.in_flight == 0 && activity.first_byte.is_none() {
            activity.first_byte = Some(Instant::now());
        }
    }

    fn request_started(self: &Arc<Self>) -> InFlight {
        let mut activity = self.activity();
        activity.in_flight += 1;
        activity.first_byte = None;
        drop(activity);
        self.changed.notify_one();
        InFlight(self.clone())
    }

    /// When the connection must be closed, and why; `None` while a request is in flight.
    fn deadline(&self, config: &ConnectionConfig) -> Option<(Instant, &'static str)> {
        let activity = self.activity();
        if activity.in_flight > 0 {
            None
        } else if let Some(first) = activity.first_byte {
            Some((
                first + config.header_timeout,
                "request headers not received in time",
            ))
        } else if activity.served {
            Some((
                activity.idle_since + config.idle_timeout,
                "idle keep-alive connection",
            ))
        } else {
            Some((
                activity.idle_since + config.header_timeout,
                "no request received in time",
            ))
        }
    }
}

/// A request in flight on a connection: ends when hyper drops the response body.
struct InFlight(Arc<Shared>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut activity = self.0.activity();
        activity.in_flight = activity.in_flight.saturating_sub(1);
        if activity.in_flight == 0 {
            activity.idle_since = Instant::now();
            activity.served = true;
            activity.first_byte = None;
        }
        drop(activity);
        self.0.changed.notify_one();
    }
}

async fn connection(
    stream: Stream,
    peer: Peer,
    router: Router,
    config: Arc<ConnectionConfig>,
    shared: Arc<Shared>,
    _registered: Registered,
    mut stop: watch::Receiver<bool>,
) {
    let io = TokioIo::new(Watched {
        io: stream,
        shared: shared.clone(),
        pending: None,
    });
    let service = {
        let shared = shared.clone();
        let config = config.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let in_flight = shared.request_started();
            let router = router.clone();
            let body_timeout = config.body_timeout;
            async move {
                let timed_out = Arc::new(AtomicBool::new(false));
                let request = request
                    .map(|body| Body::new(TimedBody::new(body, body_timeout, timed_out.clone())));
                let response = match router.oneshot(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                let response = if timed_out.load(Ordering::Relaxed) {
                    TIMED_OUT.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%peer, "request body not received in time");
                    let request_id = response.headers().get(crate::REQUEST_ID_HEADER).cloned();
                    let mut response = ApiError::new(
                        StatusCode::REQUEST_TIMEOUT,
                        "request_timeout",
                        "the request body did not arrive in time",
                    )
                    .into_response();
                    response
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                    if let Some(id) = request_id {
                        response.headers_mut().insert(crate::REQUEST_ID_HEADER, id);
                    }
                    response
                } else {
                    response
                };
                Ok::<_, Infallible>(response.map(|body| Tracked {
                    body,
                    _in_flight: in_flight,
                }))
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .max_buf_size(MAX_BUF)
        .max_header_size(MAX_BUF)
        // The watchdog below does the header timeout (hyper's needs a timer and would
        // also cut idle keep-alive connections at the header timeout).
        .header_read_timeout(None);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        let deadline = shared.deadline(&config);
        // While a request is in flight there is no deadline: wait for it to end.
        let wake = deadline.map_or_else(
            || Instant::now() + config.idle_timeout.max(config.header_timeout),
            |(at, _)| at,
        );
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                break;
            }
            _ = shared.changed.notified() => {
                if shared.evicted.load(Ordering::Relaxed) && shared.waiting_since().is_some() {
                    tracing::debug!(%peer, "closing a waiting connection to make room");
                    break;
                }
            }
            _ = tokio::time::sleep_until(wake) => {
                if let Some((at, why)) = shared.deadline(&config)
                    && at <= Instant::now()
                {
                    TIMED_OUT.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%peer, reason = why, "closing a connection");
                    break;
                }
            }
            _ = stop.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// The socket, watched: reads mark the start of a request; hyper's empty automatic error
/// answers are replaced by the JSON error shape.
struct Watched {
    io: Stream,
    shared: Arc<Shared>,
    /// A replacement answer still being written, and how much of it is written.
    pending: Option<(Vec<u8>, usize)>,
}

impl Watched {
    /// Writes what is left of a replacement answer; ready when nothing is left.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.pending {
            if *written >= bytes.len() {
                self.pending = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            this.shared.bytes_read();
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        if let Some(answer) = json_error_for(buf) {
            this.pending = Some((answer, 0));
            let _ = this.poll_pending(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        if let Some(first) = bufs.iter().find(|b| !b.is_empty())
            && let Some(answer) = json_error_for(first)
        {
            this.pending = Some((answer, 0));
            let _ = this.poll_pending(cx)?;
            return Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()));
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

/// hyper answers a request it cannot parse itself, with an empty body and no content type:
/// 400 (malformed), 414 (URI too long) or 431 (head larger than [`MAX_BUF`]). Every answer
/// of the router has a content type, so such a head is hyper's; this gives the JSON answer
/// to write instead.
fn json_error_for(head: &[u8]) -> Option<Vec<u8>> {
    let (status, code, message) = if head.starts_with(b"HTTP/1.1 431 ") {
        (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "request_header_fields_too_large",
            format!(
                "the request line and headers are larger than this server accepts ({} KiB)",
                MAX_BUF / 1024
            ),
        )
    } else if head.starts_with(b"HTTP/1.1 414 ") {
        (
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            "the request URI is longer than this server accepts".to_string(),
        )
    } else if head.starts_with(b"HTTP/1.1 400 ") {
        (
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the request is not valid HTTP/1.1".to_string(),
        )
    } else {
        return None;
    };
    let end = head.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head_text = String::from_utf8_lossy(&head[..end]).to_ascii_lowercase();
    if head_text.contains("\r\ncontent-type:") || !head_text.contains("\r\ncontent-length: 0") {
        return None;
    }
    let body =
        serde_json::json!({"error": {"code": code, "message": message, "field": null}}).to_string();
    let reason = status.canonical_reason().unwrap_or("");
    Some(
        format!(
            "HTTP/1.1 {} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            status.as_u16(),
            body.len()
        )
        .into_bytes(),
    )
}

/// A request body that must end before a deadline; after it, an error (and the flag set,
/// so the answer becomes 408).
struct TimedBody {
    inner: Incoming,
    deadline: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
    timed_out: Arc<AtomicBool>,
}

impl TimedBody {
    fn new(inner: Incoming, timeout: Duration, timed_out: Arc<AtomicBool>) -> Self {
        TimedBody {
            inner,
            deadline: Instant::now() + timeout,
            sleep: None,
            timed_out,
        }
    }
}

#[derive(Debug)]
struct BodyTimeout;

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTimeout {}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        ready!(sleep.as_mut().poll(cx));
        this.timed_out.store(true, Ordering::Relaxed);
        Poll::Ready(Some(Err(Box::new(BodyTimeout))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that keeps its request in flight until hyper drops it.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
