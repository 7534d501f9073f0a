//! The record of runs and experiments: one SQLite file (created on first start), one row
//! per run. Permalinks, `GET /api/runs/{id}` after a restart, embeds of recorded GPU
//! numbers and `gradless runs ...` all read here.
//!
//! A row is written twice: as `running` when the run is accepted (its spec and start time:
//! the intent, written first), then completed with its report. A process killed in between
//! leaves the `running` row, which the next `gradless serve` on the file marks
//! `interrupted` ([`interrupt_unfinished`]), so the permalink says what happened. A run
//! that fails (out of memory, past its time limit, cancelled, a libtorch error) is kept as
//! `failed`, with the reason and what it measured before. A row's status only moves
//! forward (running → interrupted → completed or failed; see [`RecordStore::save`]).
//!
//! Each save is its own transaction in WAL mode, so a crash or a shutdown never leaves a
//! half-written row; [`Store::close`] checkpoints the log into the main file.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use protocol::{Record, RecordBody, RecordKind, RecordSummary};
use rusqlite::{params, Connection, OptionalExtension};

/// What the server needs of a record store: one SQLite file ([`Store`], the single-process
/// default) or PostgreSQL (`pg_store::PgStore`, for a fleet's fronts). Both keep
/// the same records. Calls block: callers use `spawn_blocking` or the recorder's thread.
pub trait RecordStore: Send + Sync {
    /// Writes `record` unless its id holds one as far along already: a `running` row is
    /// replaced by an `interrupted`, failed or completed one, an `interrupted` one by a
    /// failed or completed one, a completed or failed one never (so several fronts may
    /// each record a run's end, and the first end stays).
    fn save(&self, record: &Record) -> Result<()>;
    fn get(&self, id: &str) -> Result<Option<Record>>;
    /// The newest records first, at most `limit`, optionally of one kind (an unfinished
    /// run is of kind `run`).
    fn list(&self, kind: Option<RecordKind>, limit: usize) -> Result<Vec<RecordSummary>>;
    fn count(&self) -> Result<u64>;
    /// The records still `running`, oldest first.
    fn running(&self) -> Result<Vec<Record>>;
    /// Removes `id` if it is still `running`: the run was never accepted (its submission
    /// was refused after the row was written). A run that was accepted and failed is kept
    /// as `failed` instead (`recorder::save_failure`).
    fn discard_running(&self, id: &str) -> Result<()>;
    /// Whether the store answers now (a fleet front refuses new runs while it does not).
    fn ping(&self) -> Result<()> {
        self.count().map(|_| ())
    }
    /// Finishes and closes; later calls answer with an error.
    fn close(&self);
}

/// One server per database file: the `gradless serve` that holds this lock is the only
/// one that may mark the file's `running` rows interrupted (a second server on the same
/// file would otherwise mark the first one's live runs interrupted at its start-up).
///
/// An advisory lock (`flock`) on `DB.serving` beside the file, released by the kernel when
/// the process ends however it ends, so a killed server never leaves it behind; the file
/// names the holder (pid, address, start time) for the refusal's message. Readers (`gradless
/// runs`, a backup) take no lock: WAL lets them read while the server writes.
pub struct ServingLock {
    _file: std::fs::File,
}

impl ServingLock {
    /// Takes the lock for `db` (nothing to lock for `:memory:`), or says who holds it.
    pub fn acquire(db: &Path, serving_at: &str) -> Result<Option<ServingLock>> {
        use std::io::{Read, Seek, Write};
        if db.as_os_str() == ":memory:" {
            return Ok(None);
        }
        if let Some(dir) = db.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("could not create the folder {}", dir.display()))?;
        }
        let mut name = db.as_os_str().to_owned();
        name.push(".serving");
        let path = PathBuf::from(name);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("could not open {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {
                let holder = format!(
                    "pid {}, serving at http://{serving_at}, since {}",
                    std::process::id(),
                    engine::device::rfc3339_now()
                );
                file.set_len(0)?;
                file.rewind()?;
                file.write_all(holder.as_bytes())?;
                file.flush()?;
                Ok(Some(ServingLock { _file: file }))
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = if holder.trim().is_empty() { "another process".to_string() } else { format!("another gradless serve ({})", holder.trim()) };
                anyhow::bail!(
                    "the run database {} is in use by {holder}: one server per database file (a second one would mark the first one's running runs interrupted). Stop that server, or give this one another --db",
                    db.display()
                )
            }
            Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("could not lock {}", path.display())),
        }
    }
}

/// Marks every `running` record of `store` `interrupted` at `at` (RFC 3339) and returns
/// their ids. Only the process that would have finished them may call this: a single
/// server at start-up, before it accepts a run (nothing else writes its file's runs). A
/// fleet front never does: its runs live on workers that outlast it, and they are marked
/// one by one when their worker is seen gone (`dispatch::fleet`).
pub fn interrupt_unfinished(store: &dyn RecordStore, at: &str) -> Result<Vec<String>> {
    let mut ids = Vec::new();
    for record in store.running()? {
        let RecordBody::Unfinished(u) = record.body else { continue };
        let interrupted = Record {
            id: record.id,
            body: RecordBody::Unfinished(Box::new(u.interrupted(at.to_string(), None))),
        };
        store.save(&interrupted)?;
        ids.push(interrupted.id);
    }
    Ok(ids)
}

/// How far along a status is; a save never moves a row back (see [`RecordStore::save`]).
/// The same expression in both stores' SQL.
pub(crate) const STATUS_RANK: &str =
    "CASE {}status WHEN 'running' THEN 0 WHEN 'interrupted' THEN 1 WHEN 'failed' THEN 2 ELSE 2 END";

/// [`STATUS_RANK`] of the column of table (or alias) `table`.
pub(crate) fn status_rank(table: &str) -> String {
    STATUS_RANK.replace("{}", &format!("{table}."))
}

impl RecordStore for Store {
    fn save(&self, record: &Record) -> Result<()> {
        Store::save(self, record)
    }
    fn get(&self, id: &str) -> Result<Option<Record>> {
        Store::get(self, id)
    }
    fn list(&self, kind: Option<RecordKind>, limit: usize) -> Result<Vec<RecordSummary>> {
        Store::list(self, kind, limit)
    }
    fn count(&self) -> Result<u64> {
        Store::count(self)
    }
    fn running(&self) -> Result<Vec<Record>> {
        self.with(|c| {
            let mut stmt = c.prepare("SELECT id, body FROM records WHERE status = 'running' ORDER BY seq")?;
            let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
            let mut out = Vec::new();
            for row in rows {
                let (id, body) = row?;
                out.extend(read_record(&id, Some(body))?);
            }
            Ok(out)
        })
    }
    fn discard_running(&self, id: &str) -> Result<()> {
        self.with(|c| {
            c.execute("DELETE FROM records WHERE id = ?1 AND status = 'running'", [id])
                .context("discarding the unfinished run")?;
            Ok(())
        })
    }
    fn close(&self) {
        Store::close(self)
    }
}

/// A record as both stores write it: the columns they filter and order on, the summary
/// the listing answers, and the whole body, both as JSON.
pub(crate) struct Row {
    pub kind: &'static str,
    pub status: &'static str,
    pub label: String,
    pub device_name: String,
    pub measured_at: String,
    pub summary: String,
    pub body: String,
}

impl Row {
    pub(crate) fn of(record: &Record) -> Result<Row> {
        let summary = record.summary();
        Ok(Row {
            kind: summary.kind.as_str(),
            status: record.status().as_str(),
            summary: serde_json::to_string(&summary)?,
            body: serde_json::to_string(&record.body)?,
            label: summary.label,
            device_name: summary.device_name,
            measured_at: summary.measured_at,
        })
    }
}

/// Record `id` read back from its stored body, or why this build cannot read it.
pub(crate) fn read_record(id: &str, body: Option<String>) -> Result<Option<Record>> {
    body.map(|b| {
        let mut body = serde_json::from_str(&b).with_context(|| format!("record {id} cannot be read by this build"))?;
        // A card recorded under an id it has since lost (`engine::pitfalls::renamed`) reads
        // under today's, so its page finds the card's texts.
        if let RecordBody::Pitfall(p) = &mut body {
            p.id = engine::pitfalls::renamed::canonical_id(&p.id).to_string();
        }
        Ok(Record { id: id.to_string(), body })
    })
    .transpose()
}

/// A listed summary, or nothing when this build cannot read it: the rest still list. A
/// card's summary written under an old id is listed under today's.
pub(crate) fn read_summary(json: &str) -> Option<RecordSummary> {
    let mut summary: RecordSummary = serde_json::from_str(json).ok()?;
    if summary.kind == RecordKind::Pitfall {
        if let Some(old) = summary.label.strip_prefix("pitfall ") {
            summary.label = format!("pitfall {}", engine::pitfalls::renamed::canonical_id(old));
        }
    }
    Some(summary)
}

/// The schema version this build writes (`PRAGMA user_version`): 1 the records, 2 their
/// status (rows of version 1 were all completed).
const SCHEMA_VERSION: i32 = 2;

pub struct Store {
    conn: Mutex<Option<Connection>>,
    path: PathBuf,
}

impl Store {
    /// Opens (or creates) the database at `path`; `:memory:` keeps it in this process only.
    pub fn open(path: &Path) -> Result<Store> {
        let memory = path.as_os_str() == ":memory:";
        if !memory {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("could not create the folder {}", dir.display()))?;
            }
        }
        let conn = if memory {
            Connection::open_in_memory()
        } else {
            Connection::open(path)
        }
        .with_context(|| format!("could not open the run database {}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        if !memory {
            // WAL: readers (the CLI, another server) never block the writer, and a save is
            // atomic even if the process dies mid-way.
            conn.pragma_update(None, "journal_mode", "WAL")
                .context("enabling WAL")?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
        }
        let version: i32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version > SCHEMA_VERSION {
            anyhow::bail!(
                "the run database {} was written by a newer Gradless (schema {version}, this build knows {SCHEMA_VERSION})",
                path.display()
            );
        }
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS records (
                seq          INTEGER PRIMARY KEY AUTOINCREMENT,
                id           TEXT NOT NULL UNIQUE,
                kind         TEXT NOT NULL,
                label        TEXT NOT NULL,
                device_name  TEXT NOT NULL,
                measured_at  TEXT NOT NULL,
                summary      TEXT NOT NULL,
                body         TEXT NOT NULL
            );
            CREATE INDEX IF NOT EXISTS records_kind ON records(kind, seq);",
        )
        .context("creating the records table")?;
        if version < 2 {
            conn.execute_batch(
                "ALTER TABLE records ADD COLUMN status TEXT NOT NULL DEFAULT 'completed';
                 CREATE INDEX IF NOT EXISTS records_status ON records(status);",
            )
            .context("adding the records' status")?;
        }
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        Ok(Store {
            conn: Mutex::new(Some(conn)),
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn with<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let conn = guard
            .as_ref()
            .context("the run database is closed (the server is shutting down)")?;
        f(conn)
    }

    /// Records a result, or a run's start, or its interruption; a row's status only moves
    /// forward (see [`RecordStore::save`]).
    pub fn save(&self, record: &Record) -> Result<()> {
        let row = Row::of(record)?;
        let sql = format!(
            "INSERT INTO records (id, kind, status, label, device_name, measured_at, summary, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, status = excluded.status,
                 label = excluded.label, device_name = excluded.device_name,
                 measured_at = excluded.measured_at, summary = excluded.summary, body = excluded.body
             WHERE {} < {}",
            status_rank("records"),
            status_rank("excluded")
        );
        self.with(|c| {
            c.execute(
                &sql,
                params![record.id, row.kind, row.status, row.label, row.device_name, row.measured_at, row.summary, row.body],
            )
            .context("saving the run")?;
            Ok(())
        })
    }

    pub fn get(&self, id: &str) -> Result<Option<Record>> {
        let body: Option<String> = self.with(|c| {
            Ok(
                c.query_row("SELECT body FROM records WHERE id = ?1", [id], |r| r.get(0))
                    .optional()?,
            )
        })?;
        read_record(id, body)
    }

    /// The newest records first, at most `limit`, optionally of one kind.
    pub fn list(&self, kind: Option<RecordKind>, limit: usize) -> Result<Vec<RecordSummary>> {
        self.with(|c| {
            let mut stmt = c.prepare(
                "SELECT summary FROM records WHERE (?1 IS NULL OR kind = ?1) ORDER BY seq DESC LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![kind.map(|k| k.as_str()), limit as i64], |r| r.get::<_, String>(0))?;
            let mut out = Vec::new();
            for row in rows {
                out.extend(read_summary(&row?));
            }
            Ok(out)
        })
    }

    pub fn count(&self) -> Result<u64> {
        self.with(|c| {
            Ok(c.query_row("SELECT COUNT(*) FROM records", [], |r| r.get::<_, i64>(0))? as u64)
        })
    }

    /// Checkpoints the write-ahead log into the database file and closes it. Later calls
    /// answer "closed".
    pub fn close(&self) {
        let mut guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(conn) = guard.take() {
            if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);") {
                tracing::warn!("checkpointing the run database: {e}");
            }
            if let Err((_, e)) = conn.close() {
                tracing::warn!("closing the run database: {e}");
            }
        }
    }
}

/// The default database file: `$XDG_DATA_HOME/gradless/runs.sqlite3`, else
/// `~/.local/share/gradless/runs.sqlite3`, else `gradless-runs.sqlite3` here.
pub fn default_path() -> PathBuf {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")));
    match data {
        Some(d) => d.join("gradless").join("runs.sqlite3"),
        None => PathBuf::from("gradless-runs.sqlite3"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::{PitfallReport, RecordStatus, RunSpec, Unfinished};

    fn pitfall_record(id: &str) -> Record {
        let report: PitfallReport = serde_json::from_value(serde_json::json!({
            "id": "warm-up", "claim": "c", "verdict": "confirmed", "reason": "r", "threshold": "t",
            "figures": [], "chart": "line", "series": [], "notes": [],
            "env": {"device": "cpu", "device_name": "test cpu", "device_total_memory_bytes": null,
                    "driver_version": null, "cuda_version": null, "cudnn_version": null,
                    "libtorch_version": "2.11.0", "cpu_model": "x", "threads": 1,
                    "measured_at": "2026-11-30T10:00:00Z", "gradless_version": "0.1.0"}
        }))
        .unwrap();
        Record {
            id: id.into(),
            body: RecordBody::Pitfall(Box::new(report)),
        }
    }

    /// A card recorded before it was renamed (issue 68: ids no longer state the answer)
    /// reads, and lists, under today's id; other cards' ids are left as they were.
    #[test]
    fn a_card_recorded_under_an_old_id_reads_under_todays() {
        let store = Store::open(Path::new(":memory:")).unwrap();
        let mut old = pitfall_record("00000000000000b1");
        if let RecordBody::Pitfall(p) = &mut old.body {
            p.id = "eval-not-nograd".into();
        }
        store.save(&old).unwrap();
        store.save(&pitfall_record("00000000000000b2")).unwrap();
        let RecordBody::Pitfall(p) = store.get("00000000000000b1").unwrap().unwrap().body else { panic!("not a card") };
        assert_eq!(p.id, "eval-and-autograd");
        let RecordBody::Pitfall(p) = store.get("00000000000000b2").unwrap().unwrap().body else { panic!("not a card") };
        assert_eq!(p.id, "warm-up");
        let labels: Vec<String> = store.list(None, 10).unwrap().into_iter().map(|s| s.label).collect();
        assert_eq!(labels, ["pitfall warm-up", "pitfall eval-and-autograd"]);
    }

    #[test]
    fn records_survive_reopening_and_list_newest_first() {
        let dir = std::env::temp_dir().join(format!("gradless-store-{}", std::process::id()));
        let path = dir.join("nested").join("runs.sqlite3");
        let _ = std::fs::remove_dir_all(&dir);
        {
            let store = Store::open(&path).unwrap();
            store.save(&pitfall_record("00000000000000a1")).unwrap();
            store.save(&pitfall_record("00000000000000a2")).unwrap();
            store.save(&pitfall_record("00000000000000a1")).unwrap();
            store.close();
            assert!(
                store.get("00000000000000a1").is_err(),
                "a closed store answers with an error"
            );
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.count().unwrap(), 2);
        let got = store.get("00000000000000a2").unwrap().unwrap();
        assert_eq!(got, pitfall_record("00000000000000a2"));
        assert!(store.get("ffffffffffffffff").unwrap().is_none());
        let list = store.list(None, 10).unwrap();
        assert_eq!(
            list.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            ["00000000000000a2", "00000000000000a1"]
        );
        assert!(store.list(Some(RecordKind::Run), 10).unwrap().is_empty());
        assert_eq!(store.list(None, 1).unwrap().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn started(id: &str, body: Unfinished) -> Record {
        Record { id: id.into(), body: RecordBody::Unfinished(Box::new(body)) }
    }

    #[test]
    fn a_run_is_recorded_at_its_start_and_interrupted_when_its_server_dies() {
        let dir = std::env::temp_dir().join(format!("gradless-store-intent-{}", std::process::id()));
        let path = dir.join("runs.sqlite3");
        let _ = std::fs::remove_dir_all(&dir);
        let run = "00000000000000b1";
        let experiment = "00000000000000b2";
        let failed = "00000000000000b3";
        {
            let store = Store::open(&path).unwrap();
            store.save(&started(run, Unfinished::run(RunSpec::default(), "2026-12-01T10:00:00Z".into()))).unwrap();
            store.save(&started(experiment, Unfinished::pitfall("warm-up", "2026-12-01T10:00:01Z".into()))).unwrap();
            store.save(&started(failed, Unfinished::run(RunSpec::default(), "2026-12-01T10:00:02Z".into()))).unwrap();
            assert_eq!(store.get(run).unwrap().unwrap().status(), RecordStatus::Running);
            // The experiment finishes, the third run fails; then the process "dies"
            // (the store is dropped without anything marking the first run).
            store.save(&pitfall_record(experiment)).unwrap();
            store.discard_running(failed).unwrap();
            store.discard_running(experiment).unwrap();
            assert_eq!(store.get(experiment).unwrap().unwrap(), pitfall_record(experiment), "a completed record is never discarded");
            assert!(store.get(failed).unwrap().is_none(), "a failed run keeps no record");
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(interrupt_unfinished(&store, "2026-12-01T10:05:00Z").unwrap(), [run]);
        let record = store.get(run).unwrap().unwrap();
        assert_eq!(record.status(), RecordStatus::Interrupted);
        assert_eq!(record.kind(), RecordKind::Run);
        let u = record.unfinished().unwrap();
        assert_eq!(u.interrupted_at.as_deref(), Some("2026-12-01T10:05:00Z"));
        assert_eq!(u.spec.as_ref(), Some(&RunSpec::default()));
        assert!(
            u.message.starts_with("interrupted by a server restart at 2026-12-01T10:05:00Z; nothing was measured after it started at 2026-12-01T10:00:00Z"),
            "{}",
            u.message
        );
        // Listed as a run, saying so; a second start-up finds nothing more to mark.
        let list = store.list(Some(RecordKind::Run), 10).unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].status, RecordStatus::Interrupted);
        assert_eq!(list[0].note.as_deref(), Some(u.message.as_str()));
        assert!(interrupt_unfinished(&store, "2026-12-01T10:06:00Z").unwrap().is_empty());
        // A status never moves back: a late `running` write leaves the interruption.
        store.save(&started(run, Unfinished::run(RunSpec::default(), "2026-12-01T10:00:00Z".into()))).unwrap();
        assert_eq!(store.get(run).unwrap().unwrap().status(), RecordStatus::Interrupted);
        assert_eq!(store.count().unwrap(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_database_of_the_first_schema_reads_as_completed_records() {
        let dir = std::env::temp_dir().join(format!("gradless-store-v1-{}", std::process::id()));
        let path = dir.join("runs.sqlite3");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        {
            let conn = Connection::open(&path).unwrap();
            let record = pitfall_record("00000000000000c1");
            let row = Row::of(&record).unwrap();
            conn.execute_batch(
                "CREATE TABLE records (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
                 kind TEXT NOT NULL, label TEXT NOT NULL, device_name TEXT NOT NULL,
                 measured_at TEXT NOT NULL, summary TEXT NOT NULL, body TEXT NOT NULL);
                 PRAGMA user_version = 1;",
            )
            .unwrap();
            conn.execute(
                "INSERT INTO records (id, kind, label, device_name, measured_at, summary, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![record.id, row.kind, row.label, row.device_name, row.measured_at, row.summary, row.body],
            )
            .unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert!(store.running().unwrap().is_empty());
        let list = store.list(None, 10).unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].status, RecordStatus::Completed);
        assert_eq!(store.get("00000000000000c1").unwrap().unwrap(), pitfall_record("00000000000000c1"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
