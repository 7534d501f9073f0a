//! The record store of a fleet's fronts: PostgreSQL, the same records as the SQLite file
//! ([`crate::store::Store`]) behind the same trait. Several fronts share one database:
//! `INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE` (a row's status only moves forward)
//! keeps one row per id, and the first report, however many fronts see a run's end, and the schema migrations run on a process's first connection under an
//! advisory lock, so fronts starting together migrate once (and a front may start before
//! its database).
//!
//! The blocking `postgres` client, like rusqlite: callers already keep store calls off the
//! async threads. A broken connection is dropped and re-opened on the next call, so the
//! front recovers by itself when the database returns.

use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result};
use postgres::{Client, NoTls};
use protocol::{Record, RecordKind, RecordSummary};

use crate::store::{read_record, read_summary, status_rank, RecordStore, Row};

/// The migrations, in order; the n-th brings the schema to version n. Never edit one that
/// has shipped: add the next.
const MIGRATIONS: &[&str] = &["CREATE TABLE records (
        seq          BIGSERIAL PRIMARY KEY,
        id           TEXT NOT NULL UNIQUE,
        kind         TEXT NOT NULL,
        label        TEXT NOT NULL,
        device_name  TEXT NOT NULL,
        measured_at  TEXT NOT NULL,
        summary      TEXT NOT NULL,
        body         TEXT NOT NULL,
        recorded_at  TIMESTAMPTZ NOT NULL DEFAULT now()
    );
    CREATE INDEX records_kind ON records(kind, seq);",
    // Runs are written when they are accepted (`running`), then completed or interrupted.
    "ALTER TABLE records ADD COLUMN status TEXT NOT NULL DEFAULT 'completed';
    CREATE INDEX records_status ON records(status);"];

/// An arbitrary key for `pg_advisory_lock`: "gradless" in ASCII, cut to 63 bits.
const MIGRATION_LOCK: i64 = 0x6772_6164_6c65_7373 & i64::MAX;

pub struct PgStore {
    url: String,
    client: Mutex<Option<Client>>,
    closed: std::sync::atomic::AtomicBool,
    /// Whether this process has brought the schema up to date (on its first connection).
    migrated: std::sync::atomic::AtomicBool,
}

impl PgStore {
    /// A store for `url`, without connecting: a malformed URL is an error now, an
    /// unreachable database only when a call needs it. The first connection brings the
    /// schema up to date before anything else runs on it, so a front may start before its
    /// database and serve pages meanwhile.
    pub fn open(url: &str) -> Result<PgStore> {
        let _: postgres::Config = url
            .parse()
            .with_context(|| format!("not a PostgreSQL URL: {}", redact(url)))?;
        Ok(PgStore {
            url: url.to_string(),
            client: Mutex::new(None),
            closed: Default::default(),
            migrated: Default::default(),
        })
    }

    /// Connects (and migrates) now, or says why it cannot.
    pub fn ready(&self) -> Result<()> {
        self.with(|_| Ok(()))
    }

    /// The URL without its password, for messages.
    pub fn describe(&self) -> String {
        redact(&self.url)
    }

    fn connect(&self) -> Result<Client> {
        let mut config: postgres::Config = self
            .url
            .parse()
            .with_context(|| format!("not a PostgreSQL URL: {}", redact(&self.url)))?;
        config.connect_timeout(Duration::from_secs(3));
        let mut client = config
            .connect(NoTls)
            .with_context(|| format!("connecting to PostgreSQL at {}", redact(&self.url)))?;
        if !self.migrated.load(std::sync::atomic::Ordering::Acquire) {
            migrate(&mut client)?;
            self.migrated.store(true, std::sync::atomic::Ordering::Release);
        }
        Ok(client)
    }

    /// Runs `f` on the connection, opening one if there is none. When the connection turns
    /// out broken (PostgreSQL restarted since it was opened), `f` runs once more on a fresh
    /// one, so the first request after the database returns does not fail for the old
    /// connection's sake. Every statement here may run twice: reads, and writes made
    /// idempotent by `ON CONFLICT (id) DO NOTHING`.
    fn with<T>(&self, f: impl Fn(&mut Client) -> Result<T>) -> Result<T> {
        if self.closed.load(std::sync::atomic::Ordering::Relaxed) {
            anyhow::bail!("the run database is closed (the server is shutting down)");
        }
        let mut guard = self.client.lock().unwrap_or_else(|e| e.into_inner());
        if guard.as_ref().is_none_or(|c| c.is_closed()) {
            *guard = Some(self.connect()?);
        }
        let client = guard.as_mut().expect("connected above");
        let result = f(client);
        if result.is_err() && client.is_closed() {
            *guard = None;
            let mut fresh = self.connect()?;
            let retried = f(&mut fresh);
            if !fresh.is_closed() {
                *guard = Some(fresh);
            }
            return retried;
        }
        result
    }
}

fn migrate(c: &mut Client) -> Result<()> {
    c.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])?;
    let result = (|| -> Result<()> {
        c.batch_execute(
            "CREATE TABLE IF NOT EXISTS gradless_migrations (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        )?;
        let done: i32 = c
            .query_one("SELECT COALESCE(MAX(version), 0) FROM gradless_migrations", &[])?
            .get(0);
        if done as usize > MIGRATIONS.len() {
            anyhow::bail!(
                "the run database was migrated by a newer Gradless (schema {done}, this build knows {})",
                MIGRATIONS.len()
            );
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(done as usize) {
            let version = i as i32 + 1;
            let mut tx = c.transaction()?;
            tx.batch_execute(sql)
                .with_context(|| format!("migration {version}"))?;
            tx.execute("INSERT INTO gradless_migrations (version) VALUES ($1)", &[&version])?;
            tx.commit()?;
            tracing::info!(version, "run database migrated");
        }
        Ok(())
    })();
    let _ = c.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]);
    result.context("migrating the run database")
}

impl RecordStore for PgStore {
    fn save(&self, record: &Record) -> Result<()> {
        let row = Row::of(record)?;
        let sql = format!(
            "INSERT INTO records (id, kind, status, label, device_name, measured_at, summary, body)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (id) DO UPDATE SET kind = EXCLUDED.kind, status = EXCLUDED.status,
                 label = EXCLUDED.label, device_name = EXCLUDED.device_name,
                 measured_at = EXCLUDED.measured_at, summary = EXCLUDED.summary, body = EXCLUDED.body
             WHERE {} < {}",
            status_rank("records"),
            status_rank("EXCLUDED")
        );
        self.with(|c| {
            c.execute(
                &sql,
                &[&record.id, &row.kind, &row.status, &row.label, &row.device_name, &row.measured_at, &row.summary, &row.body],
            )
            .context("saving the run")?;
            Ok(())
        })
    }

    fn running(&self) -> Result<Vec<Record>> {
        let rows = self.with(|c| Ok(c.query("SELECT id, body FROM records WHERE status = 'running' ORDER BY seq", &[])?))?;
        let mut out = Vec::new();
        for r in &rows {
            out.extend(read_record(r.get(0), Some(r.get(1)))?);
        }
        Ok(out)
    }

    fn discard_running(&self, id: &str) -> Result<()> {
        self.with(|c| {
            c.execute("DELETE FROM records WHERE id = $1 AND status = 'running'", &[&id])
                .context("discarding the unfinished run")?;
            Ok(())
        })
    }

    fn get(&self, id: &str) -> Result<Option<Record>> {
        let body: Option<String> = self.with(|c| {
            Ok(c.query_opt("SELECT body FROM records WHERE id = $1", &[&id])?
                .map(|r| r.get(0)))
        })?;
        read_record(id, body)
    }

    fn list(&self, kind: Option<RecordKind>, limit: usize) -> Result<Vec<RecordSummary>> {
        let kind = kind.map(|k| k.as_str());
        let rows = self.with(|c| {
            Ok(c.query(
                "SELECT summary FROM records WHERE ($1::TEXT IS NULL OR kind = $1) ORDER BY seq DESC LIMIT $2",
                &[&kind, &(limit as i64)],
            )?)
        })?;
        Ok(rows.iter().filter_map(|r| read_summary(r.get::<_, &str>(0))).collect())
    }

    fn count(&self) -> Result<u64> {
        self.with(|c| Ok(c.query_one("SELECT COUNT(*) FROM records", &[])?.get::<_, i64>(0) as u64))
    }

    fn ping(&self) -> Result<()> {
        self.with(|c| Ok(c.batch_execute("SELECT 1")?))
    }

    fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(c) = self.client.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = c.close();
        }
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
pub fn redact(url: &str) -> String {
    fleet::bus::redact(url, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact("postgres://g:s3cret@db:5432/gradless"), "postgres://g:***@db:5432/gradless");
        assert_eq!(redact("postgres://g@db/gradless"), "postgres://g@db/gradless");
        assert_eq!(redact("host=db user=g"), "host=db user=g");
    }
}
