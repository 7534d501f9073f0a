//! The server's record of runs: each run's events in order, so that any number of viewers
//! can follow it over SSE from the start, whenever they connect. The device worker writes;
//! the SSE handlers read and wait for more.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use engine::RunTicket;
use protocol::{Event, Report};
use tokio::sync::watch;

/// One run's stream.
pub struct RunState {
    /// Each event with when it arrived from the worker (the load test measures delivery
    /// delay from it).
    events: Mutex<Vec<(Event, Instant)>>,
    /// Each event as the SSE message an event stream sends, with whether it ends the
    /// stream: made once by the first viewer that needs it and shared by the others (a
    /// reference-counted buffer). A thousand viewers of a run would otherwise serialise
    /// and copy every event, the final report with all its samples included, a thousand
    /// times.
    frames: Mutex<Vec<Option<(Bytes, bool)>>>,
    /// Number of events so far; viewers wait on changes.
    count: watch::Sender<usize>,
    ticket: Mutex<Option<RunTicket>>,
    viewers: AtomicUsize,
    /// The submitter's secret (see [`RunState::is_owner`]).
    secret: String,
    /// The run's tracing span, `run{id=...}`: whatever is logged about this run, on any
    /// thread, is logged inside it (see [`RunState::span`]).
    span: tracing::Span,
}

impl RunState {
    fn new(id: &str) -> Arc<RunState> {
        Arc::new(RunState {
            span: tracing::info_span!("run", id = %id),
            events: Mutex::new(Vec::new()),
            frames: Mutex::new(Vec::new()),
            count: watch::channel(0).0,
            ticket: Mutex::new(None),
            viewers: AtomicUsize::new(0),
            // 128 random bits from the OS-seeded generator: not guessable, not derived
            // from the run id.
            secret: format!("{:032x}", rand::random::<u128>()),
        })
    }

    /// A run that is over before anyone follows it: `last` is its only event (a run a
    /// restarted server found interrupted). Not registered with [`Runs`].
    pub fn ended(id: &str, last: Event) -> Arc<RunState> {
        RunState::replayed(id, [last])
    }

    /// A run not live here whose events are known (a recorded failure's figures and its
    /// `failed`): its stream replays them, the last one terminal.
    pub fn replayed(id: &str, events: impl IntoIterator<Item = Event>) -> Arc<RunState> {
        let run = RunState::new(id);
        for event in events {
            run.push(event);
        }
        run
    }

    /// The run's span. Submitting the run inside it makes the engine run it there (the
    /// engine's queue keeps each task's submitter's span), and the recorder writes its
    /// record there, so the device thread's and the writer's lines carry the run's id.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Appends an event (called on the device thread; never blocks for long).
    pub fn push(&self, event: Event) {
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        events.push((event, Instant::now()));
        let n = events.len();
        drop(events);
        self.count.send_replace(n);
    }

    /// The event at `index`, if it has happened.
    pub fn get(&self, index: usize) -> Option<Event> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(index)
            .map(|(e, _)| e.clone())
    }

    /// The event at `index` as an SSE message (`data: JSON\n\n`), and whether it ends the
    /// stream (see [`RunState::frames`]).
    pub fn frame(&self, index: usize) -> Option<(Bytes, bool)> {
        if let Some(Some(cached)) = self
            .frames
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(index)
        {
            return Some(cached.clone());
        }
        let (json, terminal) = {
            let events = self.events.lock().unwrap_or_else(|e| e.into_inner());
            let (event, _) = events.get(index)?;
            (
                serde_json::to_string(event).unwrap_or_else(|_| "{}".into()),
                event.is_terminal(),
            )
        };
        // Compact JSON has no raw newline (serde escapes them inside strings), so one
        // `data:` line carries the whole event.
        let mut message = Vec::with_capacity(json.len() + 8);
        message.extend_from_slice(b"data: ");
        message.extend_from_slice(json.as_bytes());
        message.extend_from_slice(b"\n\n");
        let mut cache = self.frames.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() <= index {
            cache.resize(index + 1, None);
        }
        // Two viewers may have made it at once: keep the first, the texts are equal.
        Some(cache[index].get_or_insert((message.into(), terminal)).clone())
    }

    /// The event at `index` as JSON (the `data` of its SSE message).
    pub fn json(&self, index: usize) -> Option<String> {
        let (message, _) = self.frame(index)?;
        let json = &message[b"data: ".len()..message.len() - 2];
        Some(String::from_utf8_lossy(json).into_owned())
    }

    /// Every event from `next` on that has happened, as SSE messages in one buffer (at
    /// most about `max_bytes`, at least one message): the index after the last one, and
    /// whether it ends the stream. A viewer behind by many events (a thousand viewers
    /// take turns on two cores) catches up with one write instead of one per event; a
    /// viewer that is not behind gets the shared message itself, uncopied.
    pub fn frames_from(&self, next: usize, max_bytes: usize) -> Option<(Bytes, usize, bool)> {
        let (first, terminal) = self.frame(next)?;
        if terminal {
            return Some((first, next + 1, true));
        }
        let Some(second) = self.frame(next + 1) else {
            return Some((first, next + 1, false));
        };
        let mut batch = Vec::with_capacity(first.len() + second.0.len());
        batch.extend_from_slice(&first);
        let (mut index, mut pending, mut terminal) = (next + 1, Some(second), false);
        while let Some((message, ends)) = pending {
            batch.extend_from_slice(&message);
            index += 1;
            terminal = ends;
            if ends || batch.len() >= max_bytes {
                break;
            }
            pending = self.frame(index);
        }
        Some((batch.into(), index, terminal))
    }

    /// When the event at `index` arrived from the worker.
    pub fn pushed_at(&self, index: usize) -> Option<Instant> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(index)
            .map(|(_, t)| *t)
    }

    /// Event streams following this run now.
    pub fn viewers(&self) -> usize {
        self.viewers.load(Ordering::SeqCst)
    }

    pub fn subscribe(&self) -> watch::Receiver<usize> {
        self.count.subscribe()
    }

    pub fn is_finished(&self) -> bool {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .is_some_and(|(e, _)| e.is_terminal())
    }

    pub fn has_started(&self) -> bool {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|(e, _)| matches!(e, Event::Started { .. }))
    }

    /// The report, once the run is done.
    pub fn report(&self) -> Option<Report> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .rev()
            .find_map(|(e, _)| match e {
                Event::Done { report } => Some((**report).clone()),
                _ => None,
            })
    }

    /// The terminal event, if any.
    pub fn outcome(&self) -> Option<Event> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .map(|(e, _)| e)
            .filter(|e| e.is_terminal())
            .cloned()
    }

    pub fn set_ticket(&self, ticket: RunTicket) {
        *self.ticket.lock().unwrap_or_else(|e| e.into_inner()) = Some(ticket);
    }

    /// The secret the submitter gets with the run's id.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// Whether `presented` is this run's secret (compared in constant time).
    pub fn is_owner(&self, presented: Option<&str>) -> bool {
        presented.is_some_and(|p| crate::access::secrets_equal(p, &self.secret))
    }

    /// A viewer connected; the returned guard tells us when it leaves. `owner`: it
    /// presented the run's secret.
    pub fn view(self: &Arc<Self>, owner: bool) -> ViewerGuard {
        self.viewers.fetch_add(1, Ordering::SeqCst);
        ViewerGuard {
            run: self.clone(),
            owner,
        }
    }
}

/// Held by each SSE stream. When the submitter's viewer is the last to leave a run that
/// has not started yet (a closed tab), the run is cancelled: nobody is left to see it.
/// A stranger's viewer never cancels: watching someone's run is not owning it.
pub struct ViewerGuard {
    run: Arc<RunState>,
    owner: bool,
}

impl Drop for ViewerGuard {
    fn drop(&mut self) {
        if self.run.viewers.fetch_sub(1, Ordering::SeqCst) == 1
            && self.owner
            && !self.run.has_started()
            && !self.run.is_finished()
        {
            if let Some(t) = self
                .run
                .ticket
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
            {
                let _in_run = self.run.span.enter();
                tracing::info!("the last viewer left before the run started: cancelling it");
                t.cancel();
            }
        }
    }
}

/// All runs this process knows, newest kept, oldest finished ones forgotten past `capacity`.
pub struct Runs {
    inner: Mutex<RunsInner>,
    capacity: usize,
    ids: RandomState,
    issued: AtomicUsize,
}

#[derive(Default)]
struct RunsInner {
    by_id: HashMap<String, Arc<RunState>>,
    order: VecDeque<String>,
}

impl Runs {
    pub fn new(capacity: usize) -> Runs {
        Runs {
            inner: Mutex::new(RunsInner::default()),
            capacity,
            ids: RandomState::new(),
            issued: AtomicUsize::new(0),
        }
    }

    /// A fresh id (16 hex digits, unguessable in practice): a keyed hash of a counter and
    /// the time. Run ids are permalinks, so they must not collide across restarts either.
    pub fn fresh_id(&self) -> String {
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        let mut h = self.ids.build_hasher();
        h.write_usize(n);
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        format!("{:016x}", h.finish())
    }

    /// Registers a new run and returns its id and state.
    pub fn create(&self) -> (String, Arc<RunState>) {
        let mut id = self.fresh_id();
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while inner.by_id.contains_key(&id) {
            id = self.fresh_id();
        }
        let state = RunState::new(&id);
        inner.by_id.insert(id.clone(), state.clone());
        inner.order.push_back(id.clone());
        // Forget the oldest finished runs beyond capacity; running ones are never dropped.
        let mut i = 0;
        while inner.order.len() > self.capacity && i < inner.order.len() {
            let finished = inner
                .by_id
                .get(&inner.order[i])
                .is_none_or(|r| r.is_finished());
            if finished {
                let old = inner.order.remove(i).expect("index in range");
                inner.by_id.remove(&old);
            } else {
                i += 1;
            }
        }
        (id, state)
    }

    /// The run `id` (created elsewhere: a fleet run submitted on another front), registered
    /// here if it was not yet; `true` when this call registered it.
    pub fn adopt(&self, id: &str) -> (Arc<RunState>, bool) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(run) = inner.by_id.get(id) {
            return (run.clone(), false);
        }
        let state = RunState::new(id);
        inner.by_id.insert(id.to_string(), state.clone());
        inner.order.push_back(id.to_string());
        (state, true)
    }

    pub fn get(&self, id: &str) -> Option<Arc<RunState>> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_id
            .get(id)
            .cloned()
    }

    pub fn remove(&self, id: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.by_id.remove(id);
        inner.order.retain(|x| x != id);
    }
}
