//! The record of finished runs and experiments: one SQLite file (created on first start),
//! one row per result, written when the result is final. Permalinks, `GET /api/runs/{id}`
//! after a restart, embeds of recorded GPU numbers and `gradless runs ...` all read here.
//!
//! Each save is its own transaction in WAL mode, so a crash or a shutdown never leaves a
//! half-written row; [`Store::close`] checkpoints the log into the main file.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use protocol::{Record, RecordKind, RecordSummary};
use rusqlite::{params, Connection, OptionalExtension};

/// What the server needs of a record store: one SQLite file ([`Store`], the single-process
/// default) or PostgreSQL ([`crate::pg_store::PgStore`], for a fleet's fronts). Both keep
/// the same records, and a second save of an id keeps the first (so several fronts may
/// each try to record a run, and one row results). Calls block: callers use
/// `spawn_blocking` or the recorder's thread.
pub trait RecordStore: Send + Sync {
    fn save(&self, record: &Record) -> Result<()>;
    fn get(&self, id: &str) -> Result<Option<Record>>;
    /// The newest records first, at most `limit`, optionally of one kind.
    fn list(&self, kind: Option<RecordKind>, limit: usize) -> Result<Vec<RecordSummary>>;
    fn count(&self) -> Result<u64>;
    /// Whether the store answers now (a fleet front refuses new runs while it does not).
    fn ping(&self) -> Result<()> {
        self.count().map(|_| ())
    }
    /// Finishes and closes; later calls answer with an error.
    fn close(&self);
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
    fn close(&self) {
        Store::close(self)
    }
}

/// A record as both stores write it: the columns they filter and order on, the summary
/// the listing answers, and the whole body, both as JSON.
pub(crate) struct Row {
    pub kind: &'static str,
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
        let body = serde_json::from_str(&b).with_context(|| format!("record {id} cannot be read by this build"))?;
        Ok(Record { id: id.to_string(), body })
    })
    .transpose()
}

/// A listed summary, or nothing when this build cannot read it: the rest still list.
pub(crate) fn read_summary(json: &str) -> Option<RecordSummary> {
    serde_json::from_str(json).ok()
}

/// The schema version this build writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i32 = 1;

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

    /// Records a result. Saving the same id twice keeps the first.
    pub fn save(&self, record: &Record) -> Result<()> {
        let row = Row::of(record)?;
        self.with(|c| {
            c.execute(
                "INSERT OR IGNORE INTO records (id, kind, label, device_name, measured_at, summary, body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![record.id, row.kind, row.label, row.device_name, row.measured_at, row.summary, row.body],
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
    use protocol::{PitfallReport, RecordBody};

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
}
