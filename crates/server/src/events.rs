//! `GET /v1/sessions/{id}/events`: Server-Sent Events. Subscribe first, then replay the
//! stored events after the client's position, then forward live ones, skipping any that
//! the replay already sent: no gap and no duplicate, even while events are being produced.
//! A subscriber that falls more than the hub's buffer behind is disconnected (it comes back
//! with `Last-Event-ID`); the server never buffers without bound.
//!
//! Catch-up reads the store in small pages whose size adapts to the events' size (about
//! [`REPLAY_PAGE_BYTES`] a page), and reads the next page only when the previous one has
//! been handed to hyper, which polls the stream only when the connection's write buffer
//! has room (`connections::MAX_BUF`): a client that does not read costs about one page plus
//! one buffer, whatever the session's history.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use stepwise_core::{Event, EventType, Id};
use stepwise_store::{Store, Tenant};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiQuery, ApiResult, path_id};
use crate::limits::SubscriberSlot;

/// Keep-alive comments on idle streams (api.md: at least every 15 s).
pub const KEEP_ALIVE: Duration = Duration::from_secs(10);
/// The keep-alive comment (what `axum`'s `KeepAlive` sends).
const KEEP_ALIVE_FRAME: &[u8] = b":\n\n";
/// Events read from the store at once during catch-up: at most this many...
const REPLAY_PAGE_MAX: u32 = 32;
/// ...the first page (before the events' size is known)...
const REPLAY_PAGE_FIRST: u32 = 2;
/// ...and about this many bytes a page, counting each event as large as the largest this
/// stream has read so far (so a page of small events does not grow the next page into a
/// run of large ones).
pub const REPLAY_PAGE_BYTES: usize = 64 * 1024;
/// Catch-up reads running at once, over all streams: each is a blocking database read
/// (a thread and, for SQLite, a reader connection with its page cache), so a crowd of
/// streams opening at once queues here instead of each opening its own.
const REPLAY_READS_AT_ONCE: usize = 4;

static REPLAY_READS: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(REPLAY_READS_AT_ONCE);

static OPEN_STREAMS: AtomicUsize = AtomicUsize::new(0);

/// Event streams open now (for `/metrics`).
pub fn subscriber_count() -> usize {
    OPEN_STREAMS.load(Ordering::Relaxed)
}

/// Counts a stream while it lives.
struct OpenStream;

impl OpenStream {
    fn new() -> Self {
        OPEN_STREAMS.fetch_add(1, Ordering::Relaxed);
        OpenStream
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        OPEN_STREAMS.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct EventsQuery {
    pub after: Option<String>,
    /// `step`: `step.completed` events carry the whole Step in `metadata.step`.
    pub include: Option<String>,
}

pub async fn stream<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> ApiResult<Response> {
    let session_id = path_id(&id, "id")?;
    // Both are checked; the header wins when both are given.
    let from_query = match &query.after {
        Some(text) => parse_position(text, "after")?,
        None => 0,
    };
    let after = match headers.get("last-event-id") {
        Some(value) => parse_position(value.to_str().unwrap_or("x"), "Last-Event-ID")?,
        None => from_query,
    };
    let include_step = match query.include.as_deref() {
        None => false,
        Some("step") => true,
        Some(_) => {
            return Err(ApiError::invalid(
                "include",
                "include must be step (step.completed events then carry the whole Step in metadata.step)",
            ));
        }
    };
    let store = state.store().clone();
    store
        .get_session(&caller.tenant, session_id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))?;
    // Over the per-session or per-tenant limit of open streams: 429 before anything opens.
    let slot = state
        .limits
        .subscribers
        .acquire(caller.tenant.as_str(), session_id)?;
    // Subscribe before reading the store: anything committed after this point reaches
    // the receiver, anything before it is in the replay.
    let live = store.subscribe(&caller.tenant, session_id);
    let cursor = EventCursor {
        store,
        tenant: caller.tenant,
        session_id,
        last_sent: after,
        include_step,
        replaying: true,
        page: REPLAY_PAGE_FIRST,
        largest: 0,
        backlog: VecDeque::new(),
        live,
        shutdown: state.shutdown.clone(),
        keep_alive: Box::pin(tokio::time::sleep(KEEP_ALIVE)),
        _open: OpenStream::new(),
        _slot: slot,
    };
    // Each item is a whole SSE frame; a live event's frame is one `Bytes` shared by every
    // stream of its session (see [`live_frame`]), so sending it to a viewer copies nothing.
    let frames = futures_util::stream::unfold(cursor, |mut cursor| async move {
        let frame = cursor.next_frame().await?;
        Some((Ok::<_, Infallible>(frame), cursor))
    });
    let headers = [
        (header::CONTENT_TYPE, "text/event-stream"),
        (header::CACHE_CONTROL, "no-cache"),
    ];
    Ok((headers, Body::from_stream(frames)).into_response())
}

/// An event id to replay after: a non-negative integer (an empty value is refused too, as
/// the OpenAPI document says; a client with nothing to resume from sends no header).
fn parse_position(text: &str, field: &str) -> ApiResult<i64> {
    text.trim()
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| {
            ApiError::invalid(
                field,
                format!("{field} must be an event id (a non-negative integer)"),
            )
        })
}

struct EventCursor<S: Store> {
    store: S,
    tenant: Tenant,
    session_id: Id,
    last_sent: i64,
    /// `?include=step`: `step.completed` events carry their Step.
    include_step: bool,
    replaying: bool,
    /// Events to read in the next catch-up page.
    page: u32,
    /// The largest event read so far (rough bytes).
    largest: usize,
    backlog: VecDeque<Event>,
    live: broadcast::Receiver<Arc<Event>>,
    shutdown: CancellationToken,
    /// Fires after [`KEEP_ALIVE`] without a frame sent.
    keep_alive: Pin<Box<tokio::time::Sleep>>,
    _open: OpenStream,
    _slot: SubscriberSlot,
}

impl<S: Store> EventCursor<S> {
    /// The next frame to send: an event, or a keep-alive comment after [`KEEP_ALIVE`]
    /// without one; `None` ends the stream.
    async fn next_frame(&mut self) -> Option<Bytes> {
        let frame = match self.next().await? {
            Sent::Replayed(event) => match self.with_step(&event).await {
                Some(with_step) => render(&with_step),
                None => render(&event),
            },
            Sent::Live(event) => match self.with_step(&event).await {
                Some(with_step) => render(&with_step),
                None => live_frame(&event),
            },
            Sent::KeepAlive => Bytes::from_static(KEEP_ALIVE_FRAME),
        };
        self.keep_alive
            .as_mut()
            .reset(tokio::time::Instant::now() + KEEP_ALIVE);
        Some(frame)
    }

    /// With `?include=step`, a `step.completed` event with its Step as stored in
    /// `metadata.step` (`None` for any other event, or a step that cannot be read: the event
    /// goes as it is).
    async fn with_step(&self, event: &Event) -> Option<Event> {
        if !self.include_step || event.event_type != EventType::StepCompleted {
            return None;
        }
        let execution_id = event.execution_id?;
        let number = crate::step_cache::step_number(event)?;
        let step = crate::step_cache::stored_step(
            &self.store,
            &self.tenant,
            self.session_id,
            execution_id,
            number,
        )
        .await?;
        let mut with_step = event.clone();
        if let Some(map) = with_step.metadata.as_object_mut() {
            map.insert("step".into(), serde_json::to_value(&*step).ok()?);
        }
        Some(with_step)
    }

    /// The next event to send; `None` ends the stream.
    async fn next(&mut self) -> Option<Sent> {
        loop {
            if let Some(event) = self.backlog.pop_front() {
                self.last_sent = event.id;
                return Some(Sent::Replayed(event));
            }
            if self.replaying {
                let permit = tokio::select! {
                    _ = self.shutdown.cancelled() => return None,
                    permit = REPLAY_READS.acquire() => permit.ok(),
                };
                let read = self
                    .store
                    .list_events(&self.tenant, self.session_id, self.last_sent, self.page)
                    .await;
                drop(permit);
                match read {
                    Ok(page) if page.is_empty() => self.replaying = false,
                    Ok(page) => {
                        self.largest = page.iter().map(rough_size).fold(self.largest, usize::max);
                        self.page = page_size(self.largest);
                        self.backlog.extend(page);
                    }
                    Err(e) => {
                        tracing::warn!(session = %self.session_id, error = %e, "event replay failed; closing the stream");
                        return None;
                    }
                }
                continue;
            }
            let received = tokio::select! {
                _ = self.shutdown.cancelled() => return None,
                () = self.keep_alive.as_mut() => return Some(Sent::KeepAlive),
                received = self.live.recv() => received,
            };
            match received {
                Ok(event) if event.id == 0 => return Some(Sent::Live(event)),
                Ok(event) if event.id <= self.last_sent => continue,
                Ok(event) => {
                    if event.id > self.last_sent + 1 {
                        // Committed events arrive in order; a hole means some were
                        // committed before we subscribed and after the replay read.
                        // Read them from the store (they are there).
                        self.replaying = true;
                        self.backlog.clear();
                        continue;
                    }
                    self.last_sent = event.id;
                    return Some(Sent::Live(event));
                }
                Err(RecvError::Lagged(missed)) => {
                    // The client reads slower than events come: the live buffer moved on
                    // without it. Catch up from the store (where every stored event is),
                    // page by page at the client's pace, then go live again; nothing
                    // grows without bound. Only live-only deltas of the gap are lost.
                    tracing::debug!(session = %self.session_id, missed, "a slow event subscriber catches up from the store");
                    self.replaying = true;
                    self.backlog.clear();
                    continue;
                }
                Err(RecvError::Closed) => return None,
            }
        }
    }
}

/// An event's rough size: its content plus an allowance for the rest.
fn rough_size(event: &Event) -> usize {
    event.content.len() + 512
}

/// A catch-up page's size: about [`REPLAY_PAGE_BYTES`] of events as large as `largest`.
fn page_size(largest: usize) -> u32 {
    u32::try_from(REPLAY_PAGE_BYTES / largest.max(1))
        .unwrap_or(REPLAY_PAGE_MAX)
        .clamp(1, REPLAY_PAGE_MAX)
}

/// What goes to one client next: an event read back from the store, a live one (the same
/// `Arc` goes to every subscriber of the session), or a keep-alive comment.
enum Sent {
    Replayed(Event),
    Live(Arc<Event>),
    KeepAlive,
}

/// An event's SSE frame, exactly as `axum`'s `Sse` writes it: `event:`, one `data:` line
/// (JSON text has no raw line breaks), `id:` (not for live-only events, whose id is 0),
/// and a blank line. One allocation, the JSON encoded straight into it.
fn render(event: &Event) -> Bytes {
    let kind = event.event_type.as_str();
    let mut out = Vec::with_capacity(rough_size(event) + kind.len());
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    if serde_json::to_writer(&mut out, event).is_err() {
        out.extend_from_slice(b"{}");
    }
    out.push(b'\n');
    if event.id != 0 {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(event.id.to_string().as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
    Bytes::from(out)
}

/// How many recent live events keep their rendered frame.
const RECENT_LIVE: usize = 32;

/// Recent live events with their rendered SSE frame: a session's subscribers all get the
/// same `Arc<Event>`, so the first stream to send it renders it and the others send the same
/// bytes (a thousand viewers of one session cost one encoding an event, no copy per viewer).
/// Holding the `Arc` keeps the pointer from being reused while it is here. Streams look up
/// under a read lock, so viewers sending at once do not wait on each other.
static RECENT: RwLock<VecDeque<(Arc<Event>, Bytes)>> = RwLock::new(VecDeque::new());

fn live_frame(event: &Arc<Event>) -> Bytes {
    let find = |list: &VecDeque<(Arc<Event>, Bytes)>| {
        list.iter()
            .rev()
            .find(|(e, _)| Arc::ptr_eq(e, event))
            .map(|(_, frame)| frame.clone())
    };
    // Nothing in here can be left half-changed by a panic.
    if let Some(frame) = find(&RECENT.read().unwrap_or_else(|e| e.into_inner())) {
        return frame;
    }
    let frame = render(event);
    let mut list = RECENT.write().unwrap_or_else(|e| e.into_inner());
    // Another stream may have rendered it meanwhile: keep one copy.
    if let Some(frame) = find(&list) {
        return frame;
    }
    if list.len() >= RECENT_LIVE {
        list.pop_front();
    }
    list.push_back((event.clone(), frame.clone()));
    frame
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axum::response::sse::Event as SseEvent;
    use serde_json::json;
    use stepwise_core::{EventType, Timestamp};

    fn event(id: i64, content: &str) -> Event {
        Event {
            id,
            session_id: stepwise_core::new_id(),
            message_id: None,
            execution_id: None,
            event_type: EventType::StepCompleted,
            content: content.into(),
            metadata: json!({"step_number": 1, "text": "two\nlines"}),
            timestamp: Timestamp(1_700_000_000_000_000),
        }
    }

    /// What `axum`'s `Sse` would have written for the event (the wire format clients parse).
    fn axum_frame(event: &Event) -> Vec<u8> {
        use futures_util::StreamExt;
        let json = serde_json::to_string(event).unwrap();
        let mut sse = SseEvent::default()
            .event(event.event_type.as_str())
            .data(json);
        if event.id != 0 {
            sse = sse.id(event.id.to_string());
        }
        let body =
            axum::response::sse::Sse::new(futures_util::stream::iter([Ok::<_, Infallible>(sse)]));
        let response = body.into_response();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut stream = response.into_body().into_data_stream();
            let mut out = Vec::new();
            while let Some(chunk) = stream.next().await {
                out.extend_from_slice(&chunk.unwrap());
            }
            out
        })
    }

    #[test]
    fn frames_are_what_axum_writes() {
        for e in [
            event(7, "Completed step 1"),
            event(0, "a delta\nwith a break"),
        ] {
            assert_eq!(
                String::from_utf8(render(&e).to_vec()).unwrap(),
                String::from_utf8(axum_frame(&e)).unwrap()
            );
        }
    }

    #[test]
    fn a_live_event_is_rendered_once_for_every_stream() {
        let e = Arc::new(event(3, "shared"));
        let first = live_frame(&e);
        let second = live_frame(&e);
        assert_eq!(
            first.as_ptr(),
            second.as_ptr(),
            "the same bytes, not a copy"
        );
        let other = Arc::new(event(3, "shared"));
        assert_ne!(
            live_frame(&other).as_ptr(),
            first.as_ptr(),
            "another event (another Arc) gets its own frame"
        );
    }
}
