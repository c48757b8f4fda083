//! A minimal reader of server-sent events (the `text/event-stream` format of the HTML
//! standard): enough for the broker's task event stream, which sends `event:` and `data:`
//! lines and comments as keep-alives.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field; `message` when absent.
    pub event: String,
    /// The `data:` lines joined by newlines.
    pub data: String,
}

/// Turns chunks of bytes into events. Lines may be split across chunks anywhere.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    buf: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    /// Feeds a chunk; returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = self.buf.drain(..=nl).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8_lossy(&line);
            if let Some(ev) = self.line(&line) {
                out.push(ev);
            }
        }
        out
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let data = self.data.take();
            let event = self.event.take();
            return data.map(|data| SseEvent {
                event: event.unwrap_or_else(|| "message".to_owned()),
                data,
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_split_chunks_comments_and_multiline_data() {
        let mut p = SseParser::default();
        let mut got = p.push(b": keep-alive\n\nevent: sta");
        assert!(got.is_empty());
        got.extend(p.push(b"tus\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\ndata:x\n"));
        got.extend(p.push(b"\n"));
        assert_eq!(
            got,
            vec![
                SseEvent {
                    event: "status".into(),
                    data: "{\"a\":\n1}".into()
                },
                SseEvent {
                    event: "message".into(),
                    data: "x".into()
                }
            ]
        );
    }
}
