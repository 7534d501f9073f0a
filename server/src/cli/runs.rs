//! `gradless runs`: the recorded runs and experiments, read from the database a server writes.

use std::io::Write;

use anyhow::{bail, Context, Result};
use protocol::format_bytes;

use super::{print_json, print_report};
use crate::config::RunsCommand;
use crate::export::{export, Format};
use crate::store::Store;

/// `gradless runs list|show|export`: the recorded results, from the same database file the
/// server writes (it may be serving at the same time: the file is in WAL mode).
pub fn runs(cmd: RunsCommand) -> Result<()> {
    let open = |db: &crate::config::DbArg| -> Result<Store> {
        let path = db.path();
        if path.as_os_str() != ":memory:" && !path.exists() {
            bail!("no run database at {} (a server creates it on first start; choose another with --db)", path.display());
        }
        Store::open(&path)
    };
    let find = |store: &Store, id: &str| -> Result<protocol::Record> {
        store.get(id)?.with_context(|| {
            format!(
                "no recorded run or experiment with id `{id}` in {}",
                store.path().display()
            )
        })
    };
    match cmd {
        RunsCommand::List {
            db,
            kind,
            limit,
            json,
        } => {
            let list = open(&db)?.list(kind, limit)?;
            if json {
                return print_json(&list);
            }
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "{:<16}  {:<7}  {:<20}  {:<44}  {:>12}  {:>12}  device",
                "id", "kind", "measured at", "what", "p50", "peak above"
            )?;
            for s in &list {
                let p50 = s.p50_ms.map(|v| format!("{v:.3} ms")).unwrap_or_else(|| {
                    match s.verdict {
                        Some(v) => v.as_str().to_string(),
                        // `interrupted` or `running`: no figures.
                        None => s.status.as_str().to_string(),
                    }
                });
                let peak = s
                    .peak_above_baseline_bytes
                    .map(format_bytes)
                    .unwrap_or_default();
                writeln!(
                    out,
                    "{:<16}  {:<7}  {:<20}  {:<44}  {:>12}  {:>12}  {}",
                    s.id,
                    s.kind.as_str(),
                    s.measured_at,
                    s.label,
                    p50,
                    peak,
                    s.device_name
                )?;
            }
            if list.is_empty() {
                writeln!(out, "(nothing recorded yet)")?;
            }
            Ok(())
        }
        RunsCommand::Show { id, db, json } => {
            let record = find(&open(&db)?, &id)?;
            if json {
                return print_json(&record);
            }
            match &record.body {
                protocol::RecordBody::Run(r) => print_report(r),
                protocol::RecordBody::Pitfall(p) => {
                    println!("{} — {}\n{}", p.id, p.verdict.as_str(), p.reason);
                    println!(
                        "measured on {} ({}), libtorch {}, {}",
                        p.env.device_name,
                        p.env.device.as_str(),
                        p.env.libtorch_version,
                        p.env.measured_at
                    );
                    for f in &p.figures {
                        println!("  {:<48} {}", f.name, f.display());
                    }
                    Ok(())
                }
                protocol::RecordBody::Unfinished(u) => {
                    println!("{} — {}\n{}", record.id, u.status.as_str(), u.message);
                    Ok(())
                }
            }
        }
        RunsCommand::Export {
            id,
            db,
            format,
            output,
        } => {
            let format: Format = format.parse().map_err(anyhow::Error::msg)?;
            let record = find(&open(&db)?, &id)?;
            let file = export(&record, format).map_err(anyhow::Error::msg)?;
            match output {
                Some(path) => {
                    std::fs::write(&path, file.body)
                        .with_context(|| format!("could not write {}", path.display()))?;
                    eprintln!("wrote {}", path.display());
                    Ok(())
                }
                None => {
                    std::io::stdout().lock().write_all(file.body.as_bytes())?;
                    Ok(())
                }
            }
        }
    }
}

