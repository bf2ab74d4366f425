//! The `data` of each event of a chat-completions stream, parsed by `eventsource-stream`.
//! Chat-completions streams use only `data:` lines (several are joined with `\n`); comments
//! are keep-alives and `event:`/`id:`/`retry:` are not used. Unlike a browser, an event the
//! stream ends without its closing blank line still counts: some servers end that way.

use eventsource_stream::{EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt, TryStreamExt};

/// A network chunk, or the blank line added after the last one.
enum Chunk<B> {
    Body(B),
    End,
}

impl<B: AsRef<[u8]>> AsRef<[u8]> for Chunk<B> {
    fn as_ref(&self) -> &[u8] {
        match self {
            Chunk::Body(bytes) => bytes.as_ref(),
            Chunk::End => b"\n\n",
        }
    }
}

/// The data of every event in `body` (a response's byte stream), in order. An error (the
/// transport's, or bytes that are not UTF-8) is the last item.
pub fn data_events<S, B, E>(body: S) -> impl Stream<Item = Result<String, String>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: std::fmt::Display,
{
    body.map_ok(Chunk::Body)
        .chain(futures_util::stream::once(async { Ok(Chunk::End) }))
        .eventsource()
        .map(|event| match event {
            Ok(event) => Ok(event.data),
            Err(EventStreamError::Transport(e)) => Err(e.to_string()),
            Err(e) => Err(e.to_string()),
        })
        // Nothing after an error: a cut-off event must not count as the last one.
        .scan(false, |failed, item| {
            let next = (!*failed).then_some(item);
            *failed = next.as_ref().is_some_and(Result::is_err);
            std::future::ready(next)
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use futures_util::stream;

    use super::*;

    async fn parse(chunks: Vec<&'static [u8]>) -> Vec<String> {
        let body = stream::iter(chunks.into_iter().map(Ok::<_, String>));
        data_events(body)
            .map(Result::unwrap)
            .collect::<Vec<_>>()
            .await
    }

    #[tokio::test]
    async fn events_split_anywhere_reassemble() {
        let text: &'static [u8] = b"data: {\"a\":1}\n\n: keep-alive\n\ndata: two\r\ndata: lines\r\n\r\nevent: x\ndata: [DONE]\n\n";
        for split in 0..text.len() {
            let events = parse(vec![&text[..split], &text[split..]]).await;
            assert_eq!(
                events,
                vec!["{\"a\":1}", "two\nlines", "[DONE]"],
                "split at {split}"
            );
        }
    }

    #[tokio::test]
    async fn an_unterminated_last_event_counts() {
        assert_eq!(
            parse(vec![b"data: one\n\ndata: last"]).await,
            ["one", "last"]
        );
        assert_eq!(parse(vec![b"data: last\r"]).await, ["last"]);
        assert_eq!(parse(vec![b"data: one\n\n"]).await, ["one"]);
    }

    #[tokio::test]
    async fn a_broken_transport_ends_with_its_error() {
        let body = stream::iter(vec![
            Ok::<&'static [u8], String>(b"data: one\n\ndata: cut"),
            Err("connection reset".to_string()),
        ]);
        let items: Vec<_> = data_events(body).collect().await;
        assert_eq!(
            items,
            vec![Ok("one".to_string()), Err("connection reset".to_string())]
        );
    }
}
