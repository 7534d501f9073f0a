//! What several test crates of the server share: reading the event stream the API sends,
//! and a small deterministic generator for generated requests.
// Each test crate uses the part it needs.
#![allow(dead_code)]

use protocol::Event;

/// Reads a Server-Sent Events stream as it arrives, chunk by chunk.
///
/// It keeps *bytes*, not text, between chunks: a network chunk may end inside a multi-byte
/// character (the `−` of a memory label is three bytes), and decoding each chunk on its own
/// turns both halves into U+FFFD, so the event's JSON no longer parses. Only a complete
/// message (up to its blank line) is decoded, and a complete message is whole UTF-8.
#[derive(Default)]
pub struct SseReader {
    buf: Vec<u8>,
    /// Where the search for the next blank line resumes: each byte is searched once, so a
    /// thousand viewers on two cores measure the server, not their own parsing.
    searched: usize,
}

impl SseReader {
    /// Adds a chunk; returns the `data:` payload of every message it completed, in order.
    pub fn push_data(&mut self, chunk: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(chunk);
        let (mut start, mut out) = (0, Vec::new());
        while let Some(at) = self.buf[self.searched..].windows(2).position(|w| w == b"\n\n") {
            let end = self.searched + at + 2;
            let message = std::str::from_utf8(&self.buf[start..end])
                .unwrap_or_else(|e| panic!("an SSE message that is not UTF-8 ({e})"));
            out.extend(message.lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_owned));
            (start, self.searched) = (end, end);
        }
        self.buf.drain(..start);
        // A blank line may straddle this chunk and the next: search its last byte again.
        self.searched = self.buf.len().saturating_sub(1);
        out
    }

    /// Adds a chunk; returns the events of every message it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Event> {
        self.push_data(chunk)
            .iter()
            .map(|j| serde_json::from_str::<Event>(j).unwrap_or_else(|e| panic!("event JSON ({e}): {j}")))
            .collect()
    }

    /// The bytes of a message not complete yet (an SSE stream that ended mid-message).
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }
}

/// The events of a whole SSE body already read.
pub fn events_in(body: &str) -> Vec<Event> {
    SseReader::default().push(body.as_bytes())
}

/// Sends a raw HTTP/1.1 `request` to 127.0.0.1:`port` and reads until `until` appears in
/// the answer (or the socket closes, or `timeout` passes between reads). Bytes are kept
/// until the end and decoded once, for the reason `SseReader` gives.
pub fn exchange(port: u16, request: &str, until: &str, timeout: std::time::Duration) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(timeout)).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let (mut out, mut buf) = (Vec::new(), [0u8; 4096]);
    while !out.windows(until.len().max(1)).any(|w| w == until.as_bytes()) {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A small deterministic generator, so a failure names a reproducible case.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.next_u64() as usize % items.len()]
    }
}

#[cfg(test)]
mod reader_tests {
    use super::SseReader;

    /// A character split across two chunks, at every split point of a real message: the
    /// event comes out whole, once, exactly when its blank line has arrived.
    #[test]
    fn a_character_split_across_chunks_is_kept_whole() {
        let message = "data: {\"type\":\"queued\",\"position\":0,\"note\":\"\u{2212}1.5 MiB\"}\n\n";
        let bytes = message.as_bytes();
        let minus = message.find('\u{2212}').unwrap();
        for split in 1..bytes.len() {
            let mut reader = SseReader::default();
            let first = reader.push_data(&bytes[..split]);
            let second = reader.push_data(&bytes[split..]);
            assert!(first.is_empty(), "split at {split}: a message before its blank line: {first:?}");
            let all: Vec<String> = first.into_iter().chain(second).collect();
            assert_eq!(all.len(), 1, "split at {split}");
            assert!(all[0].contains("\u{2212}1.5 MiB"), "split at {split} (the minus at {minus}): {}", all[0]);
            assert!(reader.pending().is_empty());
        }
    }

    /// Byte by byte, two messages: both come out, in order, nothing left over.
    #[test]
    fn one_byte_at_a_time() {
        let text = "data: a\u{2212}b\n\n: comment\n\ndata: c\n\n";
        let mut reader = SseReader::default();
        let got: Vec<String> = text.as_bytes().iter().flat_map(|b| reader.push_data(&[*b])).collect();
        assert_eq!(got, ["a\u{2212}b", "c"]);
    }
}
