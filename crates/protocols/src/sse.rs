//! The Server-Sent Events of the front-end protocols: a frame, frames rendered once for
//! every viewer (of a live event, [`shared_frame`]; of a step, [`for_step`]), and the one
//! streaming response every protocol answers with ([`respond`]).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, RwLock};

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use stepwise_core::{Event, Step};
use stepwise_server::SubscriberSlot;
use stepwise_store::Store;

use crate::follower::{RunFollower, RunItem};
use crate::render::{Protocol, TurnFrames};

/// The frames of a front-end stream being written: each part as an SSE `data:` line, or
/// bytes rendered before (shared by every viewer).
#[derive(Debug, Default)]
pub(crate) struct Out(Vec<u8>);

impl Out {
    /// One part: `data: <json>` and a blank line.
    pub(crate) fn push(&mut self, part: Value) {
        write_frame(&mut self.0, &part);
    }

    /// Frames rendered before.
    pub(crate) fn raw(&mut self, frames: &[u8]) {
        self.0.extend_from_slice(frames);
    }

    pub(crate) fn bytes(self) -> Bytes {
        Bytes::from(self.0)
    }
}

/// Frames of recently streamed steps, per protocol: a step is one `Arc` for every viewer of
/// its run (`stepwise_server::step_cache`), so its parts are rendered once.
pub(crate) type StepCache<T> = RwLock<VecDeque<(Arc<Step>, Arc<T>)>>;

/// How many steps keep their rendered frames.
const RECENT_STEPS: usize = 32;

/// `build()` of `step`, made once for all its viewers.
pub(crate) fn for_step<T>(
    cache: &'static StepCache<T>,
    step: &Arc<Step>,
    build: impl FnOnce() -> T,
) -> Arc<T> {
    let find = |list: &VecDeque<(Arc<Step>, Arc<T>)>| {
        list.iter()
            .rev()
            .find(|(s, _)| Arc::ptr_eq(s, step))
            .map(|(_, built)| built.clone())
    };
    if let Some(built) = find(&cache.read().unwrap_or_else(|e| e.into_inner())) {
        return built;
    }
    let built = Arc::new(build());
    let mut list = cache.write().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = find(&list) {
        return found;
    }
    if list.len() >= RECENT_STEPS {
        list.pop_front();
    }
    list.push_back((step.clone(), built.clone()));
    built
}

/// How many recent live events keep their rendered frames in [`RENDERED`].
const RECENT_FRAMES: usize = 64;

/// The frames of recent live events that render the same for every viewer (the
/// `data-stepwise-*` parts and `CUSTOM` events of other events): a live event is one `Arc`
/// for every subscriber of its session, so the first stream renders it and the others send
/// the same bytes. Holding the `Arc` keeps the pointer from being reused while it is here.
static RENDERED: RwLock<VecDeque<(Arc<Event>, &'static str, Bytes)>> = RwLock::new(VecDeque::new());

/// `render()` of a live event for `protocol`, rendered once for all its viewers; an event
/// read back from the store (no other holder) is rendered for this viewer alone.
pub(crate) fn shared_frame(
    event: &Arc<Event>,
    protocol: &'static str,
    render: impl FnOnce() -> Bytes,
) -> Bytes {
    if Arc::strong_count(event) < 2 {
        return render();
    }
    let find = |list: &VecDeque<(Arc<Event>, &'static str, Bytes)>| {
        list.iter()
            .rev()
            .find(|(e, p, _)| Arc::ptr_eq(e, event) && *p == protocol)
            .map(|(_, _, frame)| frame.clone())
    };
    if let Some(frame) = find(&RENDERED.read().unwrap_or_else(|e| e.into_inner())) {
        return frame;
    }
    let frame = render();
    let mut list = RENDERED.write().unwrap_or_else(|e| e.into_inner());
    if let Some(frame) = find(&list) {
        return frame;
    }
    if list.len() >= RECENT_FRAMES {
        list.pop_front();
    }
    list.push_back((event.clone(), protocol, frame.clone()));
    frame
}

/// `data: <json>` and a blank line, written to `out`.
fn write_frame(out: &mut Vec<u8>, part: &Value) {
    out.extend_from_slice(b"data: ");
    if serde_json::to_writer(&mut *out, part).is_err() {
        out.extend_from_slice(b"{}");
    }
    out.extend_from_slice(b"\n\n");
}

/// One frame: `data: <json>` and a blank line.
pub(crate) fn frame(part: &Value) -> Bytes {
    let mut out = Vec::with_capacity(128);
    write_frame(&mut out, part);
    Bytes::from(out)
}

/// Frames of each part, in order.
pub(crate) fn frames(parts: &[Value]) -> Bytes {
    let mut out = Vec::new();
    for part in parts {
        write_frame(&mut out, part);
    }
    Bytes::from(out)
}

/// A turn being streamed to one viewer: its follower, the protocol's frames of it, and the
/// viewer's place among the session's streams (given back when the stream ends).
pub(crate) type Following<S, P> = (RunFollower<S>, TurnFrames<P>, SubscriberSlot);

/// The streaming answer of every protocol: `first` (frames already rendered), then the
/// turn's frames while it is followed, then the protocol's [`Protocol::END`].
pub(crate) fn respond<S: Store, P: Protocol + Send + 'static>(
    first: Bytes,
    follow: Option<Following<S, P>>,
) -> Response {
    let rest = futures_util::stream::unfold(follow, |follow| async move {
        let (mut follower, mut view, slot) = follow?;
        let Some(item) = follower.next().await else {
            drop(slot);
            return (!P::END.is_empty()).then(|| (Bytes::from_static(P::END), None));
        };
        let bytes = match &item {
            RunItem::KeepAlive => Bytes::from_static(KEEP_ALIVE_FRAME),
            RunItem::Other(event) => shared_frame(event, P::NAME, || frame(&P::other_event(event))),
            _ => view.frames(item).bytes(),
        };
        Some((bytes, Some((follower, view, slot))))
    });
    let body = futures_util::StreamExt::map(
        futures_util::StreamExt::chain(futures_util::stream::once(async move { first }), rest),
        Ok::<_, Infallible>,
    );
    let mut response = (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(body),
    )
        .into_response();
    if let Some((name, value)) = P::HEADER {
        response.headers_mut().insert(
            header::HeaderName::from_static(name),
            header::HeaderValue::from_static(value),
        );
    }
    response
}

/// A keep-alive comment: nothing happened for a while, and proxies must not close.
const KEEP_ALIVE_FRAME: &[u8] = b":\n\n";
