//! Every write to the record store, on a thread of its own: a run's start (its intent,
//! `running`), its end (the report, or `failed` with the reason and what it measured
//! before) and experiments' reports. A run's events come
//! from a sink the device thread calls, which must not block: a SQLite write (a busy
//! database, a slow disk) would hold up every run behind it. The sink hands the record to
//! this writer instead, and the writer, once the save succeeded or failed, delivers the
//! run's final event: `done`, or `failed` with kind `storage` and the reason. Nothing is
//! lost silently.
//!
//! A plain thread and channel rather than `spawn_blocking`: [`Recorder::close`] must be
//! able to wait for the last write before the database file is closed at shutdown. One
//! thread also keeps a run's writes in the order they were handed over (its start before
//! its end).
//!
//! Each write runs in the tracing span it was handed over in (a run's, with its id), so
//! what it logs is found with the rest of that run's lines.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use protocol::{Event, FailureKind, PartialRun, Record, RecordBody, Report, RunFailure, RunSpec, Unfinished};

use crate::store::RecordStore;

type Job = Box<dyn FnOnce(&dyn RecordStore) + Send>;

pub struct Recorder {
    store: Arc<dyn RecordStore>,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Recorder {
    /// Starts the writer thread for `store`.
    pub fn start(store: Arc<dyn RecordStore>) -> Recorder {
        let (tx, rx) = mpsc::channel::<Job>();
        let writer = store.clone();
        let thread = std::thread::Builder::new()
            .name("gradless-recorder".into())
            .spawn(move || {
                for job in rx {
                    job(&*writer);
                }
            })
            .expect("spawning the recorder thread");
        Recorder {
            store,
            jobs: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        }
    }

    pub fn store(&self) -> &Arc<dyn RecordStore> {
        &self.store
    }

    /// Runs `job` on the writer thread; never blocks. If the recorder is closed, `job`
    /// is handed back so the caller can report that nothing was saved.
    pub fn submit(&self, job: impl FnOnce(&dyn RecordStore) + Send + 'static) -> Result<(), Job> {
        let span = tracing::Span::current();
        let job: Job = Box::new(move |store| span.in_scope(|| job(store)));
        match self.jobs.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(tx) => tx.send(job).map_err(|e| e.0),
            None => Err(job),
        }
    }

    /// Runs `write` on the writer thread; the future answers what it returned (an error
    /// when the recorder is closed).
    pub fn write<T: Send + 'static>(
        &self,
        write: impl FnOnce(&dyn RecordStore) -> anyhow::Result<T> + Send + 'static,
    ) -> impl std::future::Future<Output = anyhow::Result<T>> + Send + 'static {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let handed = self.submit(move |store| {
            let _ = tx.send(write(store));
        });
        async move {
            if handed.is_err() {
                anyhow::bail!("the server is shutting down");
            }
            rx.await.unwrap_or_else(|_| Err(anyhow::anyhow!("the recording thread stopped")))
        }
    }

    /// Saves `record` on the writer thread; the future says whether it was kept.
    pub fn save(&self, record: Record) -> impl std::future::Future<Output = anyhow::Result<()>> + Send + 'static {
        self.write(move |store| store.save(&record))
    }

    /// Records run `id`'s report, then hands `deliver` the run's final event: `done`, or
    /// `failed` with kind `storage` when the record could not be kept (a result that is
    /// gone on reload is not `done`). Never blocks: the device thread's sink calls it.
    pub fn finish_run(&self, id: &str, report: Box<Report>, deliver: impl FnOnce(Event) + Send + 'static) {
        let record = Record { id: id.to_string(), body: RecordBody::Run(report.clone()) };
        let deliver = std::sync::Arc::new(Mutex::new(Some(deliver)));
        let later = deliver.clone();
        let handed = self.submit(move |store| {
            let event = match store.save(&record) {
                Ok(()) => Event::Done { report },
                Err(e) => {
                    tracing::error!(run = %record.id, "could not record the run: {e:#}");
                    not_recorded(&format!("{}", e.root_cause()))
                }
            };
            if let Some(deliver) = later.lock().unwrap_or_else(|e| e.into_inner()).take() {
                deliver(event);
            }
        });
        if handed.is_err() {
            if let Some(deliver) = deliver.lock().unwrap_or_else(|e| e.into_inner()).take() {
                deliver(not_recorded("the server is shutting down"));
            }
        }
    }

    /// Records that run (or experiment) `id` failed with `failure`, having measured
    /// `measured` first, then hands `deliver` its `failed` event: a viewer told it failed
    /// finds the record saying so. Never blocks: the device thread's sink calls it.
    pub fn fail_run(&self, id: &str, failure: RunFailure, measured: PartialRun, deliver: impl FnOnce(Event) + Send + 'static) {
        let id = id.to_string();
        let event = Event::Failed { failure: failure.clone() };
        let deliver = Arc::new(Mutex::new(Some(deliver)));
        let later = deliver.clone();
        let last = event.clone();
        let handed = self.submit(move |store| {
            if let Err(e) = save_failure(store, &id, failure, measured) {
                tracing::error!(run = %id, "could not record the run's failure: {e:#}");
            }
            if let Some(deliver) = later.lock().unwrap_or_else(|e| e.into_inner()).take() {
                deliver(last);
            }
        });
        if handed.is_err() {
            if let Some(deliver) = deliver.lock().unwrap_or_else(|e| e.into_inner()).take() {
                deliver(event);
            }
        }
    }

    /// Records that a run (or experiment) was accepted, without waiting: its row says
    /// `running` until its end is saved, so a process killed before then leaves a trace
    /// the next start marks interrupted (see [`crate::store::interrupt_unfinished`]).
    pub fn started(&self, record: Record) {
        let _ = self.submit(move |store| {
            if let Err(e) = store.save(&record) {
                tracing::warn!(run = %record.id, "could not record the start of the run: {e:#}");
            }
        });
    }

    /// Removes the `running` row of a run that was never accepted (its submission was
    /// refused after the row was written), without waiting.
    pub fn discard(&self, id: &str) {
        let id = id.to_string();
        let _ = self.submit(move |store| {
            if let Err(e) = store.discard_running(&id) {
                tracing::warn!(run = %id, "could not discard the failed run's row: {e:#}");
            }
        });
    }

    /// Finishes the writes already handed over, then closes the database.
    pub fn close(&self) {
        drop(self.jobs.lock().unwrap_or_else(|e| e.into_inner()).take());
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
        self.store.close();
    }
}

/// Marks record `id` (written `running` when it was accepted) `failed` with `failure` and
/// what it measured before; a record already finished is left as it is (a row's status
/// only moves forward), and one that was never written stays unwritten.
pub fn save_failure(store: &dyn RecordStore, id: &str, failure: RunFailure, measured: PartialRun) -> anyhow::Result<()> {
    let Some(RecordBody::Unfinished(u)) = store.get(id)?.map(|r| r.body) else {
        return Ok(());
    };
    let failed = u.failed(engine::device::rfc3339_now(), failure, measured);
    store.save(&Record { id: id.to_string(), body: RecordBody::Unfinished(Box::new(failed)) })
}

/// The final event of a run that finished but whose record could not be saved, `why`.
pub fn not_recorded(why: &str) -> Event {
    Event::Failed {
        failure: RunFailure {
            kind: FailureKind::Storage,
            message: format!("the run finished but could not be recorded, so its figures are not kept: {why}"),
        },
    }
}

/// The record of run `id` accepted now with `spec`, before it has measured anything.
pub fn started_run(id: &str, spec: &RunSpec) -> Record {
    Record {
        id: id.to_string(),
        body: RecordBody::Unfinished(Box::new(Unfinished::run(spec.clone(), engine::device::rfc3339_now()))),
    }
}

/// The record of experiment `card` accepted now as `record_id`, before it has run.
pub fn started_pitfall(record_id: &str, card: &str) -> Record {
    Record {
        id: record_id.to_string(),
        body: RecordBody::Unfinished(Box::new(Unfinished::pitfall(card, engine::device::rfc3339_now()))),
    }
}
