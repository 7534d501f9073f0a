//! What several test crates of the server share: reading the event stream the API sends,
//! and a small deterministic generator for generated requests.
// Each test crate uses the part it needs.
#![allow(dead_code)]

use protocol::Event;

/// Takes every complete SSE message out of `text` (what has arrived so far; an incomplete
/// last message stays for the next chunk) and returns the events their `data:` lines hold.
pub fn drain_events(text: &mut String) -> Vec<Event> {
    let mut events = Vec::new();
    while let Some(end) = text.find("\n\n") {
        let message: String = text.drain(..end + 2).collect();
        events.extend(
            message
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .map(|j| serde_json::from_str::<Event>(j).expect("event JSON")),
        );
    }
    events
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
