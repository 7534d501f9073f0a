//! What several test crates of the server share: reading the event stream the API sends.

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
