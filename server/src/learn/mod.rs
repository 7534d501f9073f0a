//! Onboarding paths and what their learners predicted (issue 34's paths and answers).
//!
//! - [`paths`]: a path's TOML (the shipped one, the `paths/` folder, `/learn/new`), checked
//!   with errors naming file and field;
//! - [`answers`]: the anonymous answers table and the composed paths, in `learn.sqlite3`;
//!
//! [`Learn`] is the state they share, one per server (`AppState::learn`). The handlers that
//! run steps and serve `/api/learn/...` are `crate::learn_api`'s (this module imports no
//! handler or state, so the state can hold it).

pub mod answers;
pub mod paths;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::Result;
use protocol::learn::{LearnPath, PathSummary};

use answers::LearnDb;

/// Answers one client may have kept per minute (in memory only: nothing about a client is
/// stored). Past it a step still may not run with a prediction: 429.
pub const ANSWERS_PER_MINUTE: u32 = 30;

/// Clients the limiter remembers before it forgets those whose minute is over.
const LIMITER_KEYS: usize = 10_000;

pub struct Learn {
    /// The shipped path, the folder's, then the composed ones, in that order.
    paths: RwLock<Vec<Arc<LearnPath>>>,
    pub db: Arc<LearnDb>,
    limiter: Mutex<HashMap<Option<IpAddr>, (Instant, u32)>>,
}

impl Learn {
    /// The shipped path only, answers in memory (tests; a server before [`Learn::open`]).
    pub fn ephemeral() -> Learn {
        let db = LearnDb::open(Path::new(":memory:")).expect("an in-memory SQLite database opens");
        Learn::with(shipped(), Arc::new(db))
    }

    fn with(paths: Vec<Arc<LearnPath>>, db: Arc<LearnDb>) -> Learn {
        Learn { paths: RwLock::new(paths), db, limiter: Mutex::new(HashMap::new()) }
    }

    /// The shipped path, every `*.toml` of `dir` (an error names the file and the field,
    /// and stops the start: a typo in a lead's file is said at once) and the paths composed
    /// earlier, kept in the database at `db`.
    pub fn open(dir: Option<&Path>, db: &Path, catalog: &protocol::Catalog) -> Result<Learn> {
        // Paths are checked against the cards' ids and questions, the same on every device.
        let cards = engine::pitfalls::catalogue(protocol::DeviceKind::Cpu);
        let mut all = shipped();
        if let Some(dir) = dir {
            for p in paths::load_dir(dir, &cards, catalog)? {
                if all.iter().any(|q| q.id == p.id) {
                    anyhow::bail!("{}: `id`: a path `{}` exists already", p.source, p.id);
                }
                tracing::info!(path = %p.id, steps = p.steps.len(), "onboarding path served from {}", p.source);
                all.push(Arc::new(p));
            }
        }
        let db = Arc::new(LearnDb::open(db)?);
        for text in db.paths()? {
            match paths::parse(&text, &cards, "composed", catalog) {
                Ok(p) if !all.iter().any(|q| q.id == p.id) => all.push(Arc::new(p)),
                Ok(p) => tracing::warn!("the composed path `{}` is not served: a file's path has its id", p.id),
                Err(e) => tracing::warn!("a composed path is not served any more: {e}"),
            }
        }
        Ok(Learn::with(all, db))
    }

    pub fn get(&self, id: &str) -> Option<Arc<LearnPath>> {
        self.paths.read().unwrap_or_else(|e| e.into_inner()).iter().find(|p| p.id == id).cloned()
    }

    pub fn list(&self) -> Vec<PathSummary> {
        self.paths
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|p| PathSummary { id: p.id.clone(), title: p.title.clone(), steps: p.steps.len(), source: p.source.clone() })
            .collect()
    }

    /// Serves `path` from now on, unless its id is taken (`false`).
    pub fn insert_composed(&self, path: LearnPath) -> bool {
        let mut all = self.paths.write().unwrap_or_else(|e| e.into_inner());
        if all.iter().any(|p| p.id == path.id) {
            return false;
        }
        all.push(Arc::new(path));
        true
    }

    /// Counts one answer of `client`; `Err(seconds to wait)` past [`ANSWERS_PER_MINUTE`].
    pub fn admit_answer(&self, client: Option<IpAddr>) -> Result<(), Duration> {
        let now = Instant::now();
        let mut seen = self.limiter.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() > LIMITER_KEYS {
            seen.retain(|_, (since, _)| now.duration_since(*since) < Duration::from_secs(60));
        }
        let entry = seen.entry(client).or_insert((now, 0));
        if now.duration_since(entry.0) >= Duration::from_secs(60) {
            *entry = (now, 0);
        }
        if entry.1 >= ANSWERS_PER_MINUTE {
            return Err(Duration::from_secs(60).saturating_sub(now.duration_since(entry.0)).max(Duration::from_secs(1)));
        }
        entry.1 += 1;
        Ok(())
    }
}

fn shipped() -> Vec<Arc<LearnPath>> {
    let path = paths::parse(paths::SHIPPED, &engine::pitfalls::catalogue(protocol::DeviceKind::Cpu), "shipped", &protocol::Catalog::built_in())
        .expect("the shipped path is valid (tested in learn::paths)");
    vec![Arc::new(path)]
}

/// The learn database beside the run database `db` (`:memory:` beside `:memory:`).
pub fn db_beside(db: &Path) -> std::path::PathBuf {
    if db == Path::new(":memory:") {
        return db.to_path_buf();
    }
    db.with_file_name("learn.sqlite3")
}

/// Seconds since 1970.
pub fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_limit_is_per_client_and_per_minute() {
        let learn = Learn::ephemeral();
        let a: Option<IpAddr> = Some("10.0.0.1".parse().unwrap());
        for _ in 0..ANSWERS_PER_MINUTE {
            assert!(learn.admit_answer(a).is_ok());
        }
        let wait = learn.admit_answer(a).unwrap_err();
        assert!(wait <= Duration::from_secs(60) && wait >= Duration::from_secs(1));
        assert!(learn.admit_answer(Some("10.0.0.2".parse().unwrap())).is_ok());
    }

    #[test]
    fn a_server_starts_with_the_shipped_path() {
        let learn = Learn::ephemeral();
        assert!(learn.get("inference-settings").is_some());
        assert_eq!(learn.list().len(), 1);
        assert_eq!(db_beside(Path::new("/data/runs.sqlite3")), Path::new("/data/learn.sqlite3"));
    }
}
