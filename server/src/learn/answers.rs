//! The answers learners locked in, and the paths composed on `/learn/new`: one SQLite file
//! (`learn.sqlite3` beside the run database; `:memory:` with it).
//!
//! An answer row is the path, the step, the question, the prediction, the measured value,
//! right or wrong, and the time: no name, address, user agent, cookie, record id or any other
//! identifier (`server/tests/api/learn.rs` reads the columns). At most
//! [`MAX_ANSWERS_PER_PATH`] are kept per path; a new one drops the oldest.

use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, Result};
use protocol::learn::Answer;
use protocol::Prediction;
use rusqlite::{params, Connection};

/// Answers kept per path; past it the oldest are dropped.
pub const MAX_ANSWERS_PER_PATH: usize = 2000;

/// The columns of the answers table, in order: everything a row holds.
pub const ANSWER_COLUMNS: [&str; 7] = ["path", "step", "question", "prediction", "measured", "right", "at_s"];

pub struct LearnDb(Mutex<Connection>);

impl LearnDb {
    pub fn open(path: &Path) -> Result<LearnDb> {
        // Beside the run database, whose folder may not exist yet: a fleet front keeps its
        // runs in PostgreSQL and has never made it.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && path != Path::new(":memory:")) {
            std::fs::create_dir_all(dir).with_context(|| format!("could not create the folder {}", dir.display()))?;
        }
        let conn = Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS answers (
                path TEXT NOT NULL,
                step INTEGER NOT NULL,
                question TEXT NOT NULL,
                prediction TEXT NOT NULL,
                measured REAL NOT NULL,
                right INTEGER NOT NULL,
                at_s INTEGER NOT NULL
            );
            CREATE INDEX IF NOT EXISTS answers_path ON answers (path);
            CREATE TABLE IF NOT EXISTS paths (
                id TEXT PRIMARY KEY,
                toml TEXT NOT NULL,
                at_s INTEGER NOT NULL
            );",
        )
        .context("creating the learn tables")?;
        Ok(LearnDb(Mutex::new(conn)))
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `answer` for `path`, dropping the oldest past [`MAX_ANSWERS_PER_PATH`].
    pub fn add(&self, path: &str, answer: &Answer) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT INTO answers (path, step, question, prediction, measured, right, at_s) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                path,
                answer.step as i64,
                answer.question,
                serde_json::to_string(&answer.prediction)?,
                answer.measured,
                answer.right,
                answer.at_s
            ],
        )?;
        tx.execute(
            "DELETE FROM answers WHERE path = ?1 AND rowid NOT IN
                (SELECT rowid FROM answers WHERE path = ?1 ORDER BY rowid DESC LIMIT ?2)",
            params![path, MAX_ANSWERS_PER_PATH as i64],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// The answers kept for `path`, oldest first.
    pub fn answers(&self, path: &str) -> Result<Vec<Answer>> {
        let conn = self.conn();
        let mut q = conn.prepare("SELECT step, question, prediction, measured, right, at_s FROM answers WHERE path = ?1 ORDER BY rowid")?;
        let rows = q.query_map(params![path], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, f64>(3)?, r.get::<_, bool>(4)?, r.get::<_, i64>(5)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (step, question, prediction, measured, right, at_s) = row?;
            // A row this version cannot read is left out rather than failing the page.
            let Ok(prediction) = serde_json::from_str::<Prediction>(&prediction) else { continue };
            out.push(Answer { step: step as usize, question, prediction, measured, right, at_s });
        }
        Ok(out)
    }

    /// The columns of the answers table as SQLite reports them.
    pub fn answer_columns(&self) -> Result<Vec<String>> {
        let conn = self.conn();
        let mut q = conn.prepare("SELECT name FROM pragma_table_info('answers') ORDER BY cid")?;
        let names = q.query_map([], |r| r.get::<_, String>(0))?.collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(names)
    }

    /// Keeps a composed path's TOML; `false` when its id is taken.
    pub fn add_path(&self, id: &str, toml: &str, at_s: i64) -> Result<bool> {
        let n = self.conn().execute("INSERT OR IGNORE INTO paths (id, toml, at_s) VALUES (?1, ?2, ?3)", params![id, toml, at_s])?;
        Ok(n == 1)
    }

    /// The composed paths' TOML, oldest first.
    pub fn paths(&self) -> Result<Vec<String>> {
        let conn = self.conn();
        let mut q = conn.prepare("SELECT toml FROM paths ORDER BY at_s, id")?;
        let texts = q.query_map([], |r| r.get::<_, String>(0))?.collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(texts)
    }
}

/// The answers as CSV: one row each, the table's columns but the path.
pub fn csv(path: &str, answers: &[Answer]) -> String {
    let field = |s: &str| {
        if s.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s.to_string()
        }
    };
    let mut out = String::from("path,step,question,prediction,measured,right,at_s\n");
    for a in answers {
        let prediction = match a.prediction {
            Prediction::Value(v) => v.to_string(),
            Prediction::Choice(c) => c.as_str().to_string(),
            Prediction::Skipped => "skipped".into(),
        };
        out += &format!(
            "{},{},{},{},{},{},{}\n",
            field(path),
            a.step,
            field(&a.question),
            field(&prediction),
            a.measured,
            a.right,
            a.at_s
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::Choice;

    fn answer(step: usize, right: bool) -> Answer {
        Answer { step, question: "q, \"quoted\"".into(), prediction: Prediction::Choice(Choice::Lower), measured: 0.5, right, at_s: 1 }
    }

    #[test]
    fn answers_read_back_per_path_and_the_oldest_go_first() {
        let db = LearnDb::open(Path::new(":memory:")).unwrap();
        db.add("a", &answer(1, true)).unwrap();
        db.add("b", &answer(2, false)).unwrap();
        assert_eq!(db.answers("a").unwrap(), [answer(1, true)]);
        for i in 0..MAX_ANSWERS_PER_PATH + 5 {
            db.add("a", &answer(i % 3 + 1, false)).unwrap();
        }
        let kept = db.answers("a").unwrap();
        assert_eq!(kept.len(), MAX_ANSWERS_PER_PATH);
        // The first (the only right one) was dropped; path b is untouched.
        assert!(kept.iter().all(|a| !a.right));
        assert_eq!(db.answers("b").unwrap().len(), 1);
        assert_eq!(db.answer_columns().unwrap(), ANSWER_COLUMNS);
    }

    #[test]
    fn the_csv_quotes_what_needs_it() {
        let text = csv("p", &[answer(1, true)]);
        assert_eq!(text.lines().nth(1), Some(r#"p,1,"q, ""quoted""",lower,0.5,true,1"#));
    }

    #[test]
    fn a_composed_path_id_is_taken_once() {
        let db = LearnDb::open(Path::new(":memory:")).unwrap();
        assert!(db.add_path("x", "id = \"x\"", 1).unwrap());
        assert!(!db.add_path("x", "other", 2).unwrap());
        assert_eq!(db.paths().unwrap(), ["id = \"x\""]);
    }
}
