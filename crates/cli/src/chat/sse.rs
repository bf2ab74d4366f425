//! A small Server-Sent Events parser: bytes in, complete events out. Handles `id:`,
//! `event:` and (multi-line) `data:` fields, comment lines (keep-alives), and `\r\n`.

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `id:` field; live-only events (`message.delta`) have none.
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

#[derive(Debug, Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    current: SseEvent,
    has_field: bool,
}

impl SseParser {
    /// Feeds bytes as they arrive; returns the events they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(offset) = self.buffer[start..].iter().position(|b| *b == b'\n') {
            let end = start + offset;
            let mut line = &self.buffer[start..end];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            let line = String::from_utf8_lossy(line).into_owned();
            start = end + 1;
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        self.buffer.drain(..start);
        events
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            if !self.has_field {
                return None;
            }
            self.has_field = false;
            return Some(std::mem::take(&mut self.current));
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "id" => self.current.id = Some(value.to_string()),
            "event" => self.current.event = Some(value.to_string()),
            "data" => {
                if self.has_field && !self.current.data.is_empty() {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
            }
            _ => return None,
        }
        self.has_field = true;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_and_comments_are_skipped() {
        let mut parser = SseParser::default();
        assert!(
            parser
                .push(b": keep-alive\n\nid: 3\r\nevent: step.")
                .is_empty()
        );
        let events = parser
            .push(b"completed\ndata: {\"a\":\ndata: 1}\n\nevent: message.delta\ndata: hi\n\n");
        assert_eq!(
            events,
            vec![
                SseEvent {
                    id: Some("3".into()),
                    event: Some("step.completed".into()),
                    data: "{\"a\":\n1}".into(),
                },
                SseEvent {
                    id: None,
                    event: Some("message.delta".into()),
                    data: "hi".into(),
                },
            ]
        );
        assert!(parser.push(b"data: partial").is_empty());
    }
}
