//! A session's event stream as the chat reads it: the response body parsed into events by
//! `eventsource-stream` (fields split across reads, multi-line `data`, comments as
//! keep-alives, `\r\n`). Reopening a broken stream from the last event id seen is the
//! caller's (`Chat::follow`, with `Last-Event-ID`).

use std::pin::Pin;

use anyhow::bail;
use eventsource_stream::{EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt, TryStreamExt};

/// One event. `id` is the stream's last event id: a live-only event (`message.delta`)
/// carries the id of the stored event before it, or is empty before the first one.
pub use eventsource_stream::Event;

type Events = Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<String>>> + Send>>;

pub struct EventStream {
    events: Events,
    /// The server, for error messages.
    base: String,
}

impl EventStream {
    /// The events of `body`, a response's bytes from the server at `base`.
    pub fn new<S, B, E>(body: S, base: &str) -> Self
    where
        S: Stream<Item = Result<B, E>> + Send + 'static,
        B: AsRef<[u8]> + Send + 'static,
        E: std::fmt::Display,
    {
        EventStream {
            events: Box::pin(body.map_err(|e| e.to_string()).eventsource()),
            base: base.to_string(),
        }
    }

    /// The next event; `None` when the server closed the stream.
    pub async fn next(&mut self) -> anyhow::Result<Option<Event>> {
        match self.events.next().await {
            Some(Ok(event)) => Ok(Some(event)),
            Some(Err(EventStreamError::Transport(e))) => {
                bail!("the event stream from {} broke: {e}", self.base)
            }
            Some(Err(e)) => bail!("the event stream from {} broke: {e}", self.base),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::stream;

    use super::*;

    fn stream_of(chunks: Vec<Result<&'static [u8], &'static str>>) -> EventStream {
        EventStream::new(stream::iter(chunks), "http://127.0.0.1:7777")
    }

    #[tokio::test]
    async fn events_split_across_chunks_and_comments_are_skipped() {
        let mut events = stream_of(vec![
            Ok(b": keep-alive\n\nid: 3\r\nevent: step."),
            Ok(b"completed\ndata: {\"a\":\ndata: 1}\n\nevent: message.delta\ndata: hi\n\n"),
            Ok(b"data: partial"),
        ]);
        let first = events.next().await.unwrap().unwrap();
        assert_eq!(
            (first.id.as_str(), first.event.as_str(), first.data.as_str()),
            ("3", "step.completed", "{\"a\":\n1}")
        );
        let delta = events.next().await.unwrap().unwrap();
        assert_eq!(
            (delta.event.as_str(), delta.data.as_str()),
            ("message.delta", "hi")
        );
        assert_eq!(delta.id, "3", "a live-only event keeps the last id");
        // An event the server did not finish is not one.
        assert!(events.next().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_broken_connection_is_an_error_naming_the_server() {
        let mut events = stream_of(vec![Ok(b"id: 1\ndata: {}\n\n"), Err("connection reset")]);
        assert_eq!(events.next().await.unwrap().unwrap().id, "1");
        let error = events.next().await.unwrap_err().to_string();
        assert_eq!(
            error,
            "the event stream from http://127.0.0.1:7777 broke: connection reset"
        );
    }
}
