//! A small server-sent-events parser: bytes in, the `data` of each event out. Only what
//! chat-completions streams use: `data:` lines (several are joined with `\n`), a blank
//! line ends an event, `:` lines are keep-alive comments, `event:`/`id:`/`retry:` are
//! ignored. Lines may end in `\n`, `\r\n` or `\r`, and may be split across network reads.

#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    data: Option<String>,
    /// The last byte was `\r`: a `\n` right after it ends nothing more.
    after_cr: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the data of every event they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        for &byte in bytes {
            if self.after_cr {
                self.after_cr = false;
                if byte == b'\n' {
                    continue;
                }
            }
            match byte {
                b'\n' => self.end_line(&mut events),
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(&mut events);
                }
                _ => self.line.push(byte),
            }
        }
        events
    }

    /// The stream ended: an event without its closing blank line still counts.
    pub fn finish(&mut self) -> Option<String> {
        let mut events = Vec::new();
        if !self.line.is_empty() {
            self.end_line(&mut events);
        }
        self.data.take().or_else(|| events.pop())
    }

    fn end_line(&mut self, events: &mut Vec<String>) {
        let line = String::from_utf8_lossy(&self.line).into_owned();
        self.line.clear();
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                events.push(data);
            }
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_str(), ""),
        };
        if field == "data" {
            match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere_reassemble() {
        let text = b"data: {\"a\":1}\n\n: keep-alive\n\ndata: two\r\ndata: lines\r\n\r\nevent: x\ndata: [DONE]\n\n";
        for split in 0..text.len() {
            let mut parser = SseParser::new();
            let mut events = parser.feed(&text[..split]);
            events.extend(parser.feed(&text[split..]));
            assert_eq!(
                events,
                vec!["{\"a\":1}", "two\nlines", "[DONE]"],
                "split at {split}"
            );
        }
    }

    #[test]
    fn an_unterminated_last_event_counts() {
        let mut parser = SseParser::new();
        assert!(parser.feed(b"data: last").is_empty());
        assert_eq!(parser.finish().as_deref(), Some("last"));
        assert_eq!(parser.finish(), None);
    }
}
