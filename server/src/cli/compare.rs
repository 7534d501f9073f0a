//! `gradless compare`: the classic inference modes of one model side by side, each row's
//! latency and memory read against the first row's and its noise.

use std::io::Write;

use anyhow::{bail, Result};
use engine::Worker;
use protocol::{format_bytes, Report, RunSpec};
use serde::Serialize;

use super::{print_json, run, spec_of};
use crate::config::CompareArgs;

/// One row of `gradless compare`.
#[derive(Debug, Serialize)]
pub struct CompareRow {
    pub label: String,
    /// `None` when the row failed (for example out of memory); see `error`.
    pub report: Option<Report>,
    pub error: Option<String>,
    /// p50 latency relative to the first row (1.0 = same).
    pub latency_vs_first: Option<f64>,
    /// The 95% bootstrap interval of that ratio (medians of the per-iteration samples).
    pub latency_interval_vs_first: Option<[f64; 2]>,
    /// The ratio read against its noise: "1.31× faster (1.22–1.40)" or "no difference we
    /// can tell apart from noise ...".
    pub latency_reading: Option<String>,
    /// Peak above baseline relative to the first row.
    pub memory_vs_first: Option<f64>,
}

/// The classic rows ([`RunSpec::classic_modes`]) that this device can run.
pub fn classic_specs(base: &RunSpec, worker: &Worker) -> Vec<RunSpec> {
    base.classic_modes()
        .into_iter()
        .filter(|s| worker.check(s.clone()).is_ok())
        .collect()
}

/// `gradless compare`.
pub fn compare(worker: &Worker, args: &CompareArgs) -> Result<()> {
    let base = spec_of(worker, &args.run)?;
    worker
        .check(base.clone())
        .map_err(|e| anyhow::anyhow!("invalid run spec: {e}"))?;
    let mut rows: Vec<CompareRow> = Vec::new();
    for spec in classic_specs(&base, worker) {
        let label = spec.label();
        if !args.json {
            eprintln!("measuring {label} ...");
        }
        let (report, error) = match run(worker, spec) {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(e.to_string())),
        };
        rows.push(CompareRow {
            label,
            report,
            error,
            latency_vs_first: None,
            latency_interval_vs_first: None,
            latency_reading: None,
            memory_vs_first: None,
        });
    }
    let first = rows
        .first()
        .and_then(|r| r.report.as_ref())
        .map(|r| (r.latency_ms.p50, r.memory.peak_above_baseline_bytes as f64));
    let first_report = rows.first().and_then(|r| r.report.clone());
    for row in &mut rows {
        if let (Some(l0), Some(r)) = (first_report.as_ref(), row.report.as_ref()) {
            // Rows run one after another, not interleaved: decided against the run-to-run
            // noise measured here, as the pages decide.
            if let Some(c) = protocol::noise::Comparison::of_runs(r, l0) {
                row.latency_interval_vs_first = Some([c.ci.lo, c.ci.hi]);
                row.latency_reading = Some(c.latency_reading());
            }
        }
        if let (Some((lat0, mem0)), Some(r)) = (first, row.report.as_ref()) {
            row.latency_vs_first = (lat0 > 0.0).then(|| r.latency_ms.p50 / lat0);
            row.memory_vs_first =
                (mem0 > 0.0).then(|| r.memory.peak_above_baseline_bytes as f64 / mem0);
        }
    }
    if args.json {
        return print_json(&rows);
    }
    print_compare(&rows)
}

fn print_compare(rows: &[CompareRow]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if let Some(r) = rows.iter().find_map(|r| r.report.as_ref()) {
        writeln!(
            out,
            "{} batch {} on {} ({}); memory: {}",
            r.spec.model.display_name(),
            r.spec.batch,
            r.env.device_name,
            r.env.device.as_str(),
            r.memory.source.describe()
        )?;
    }
    writeln!(
        out,
        "{:<34} {:>10} {:>10} {:>9} {:>13} {:>14} {:>14} {:>9}  output",
        "settings", "p50 ms", "p95 ms", "vs first", "95% interval", "peak above", "peak alloc", "vs first"
    )?;
    for row in rows {
        match &row.report {
            Some(r) => writeln!(
                out,
                "{:<34} {:>10.3} {:>10.3} {:>9} {:>13} {:>14} {:>14} {:>9}  {}{}",
                row.label,
                r.latency_ms.p50,
                r.latency_ms.p95,
                ratio(row.latency_vs_first),
                row.latency_interval_vs_first
                    .map(|[lo, hi]| format!("{lo:.2}-{hi:.2}"))
                    .unwrap_or_else(|| "-".into()),
                format_bytes(r.memory.peak_above_baseline_bytes),
                format_bytes(r.memory.peak_allocated_bytes),
                ratio(row.memory_vs_first),
                r.output.dtype,
                if r.output.requires_grad {
                    " +graph"
                } else {
                    ""
                }
            )?,
            None => writeln!(
                out,
                "{:<34} failed: {}",
                row.label,
                row.error.as_deref().unwrap_or("unknown")
            )?,
        }
    }
    if rows.iter().all(|r| r.report.is_none()) {
        bail!("every row failed");
    }
    writeln!(out, "\nlatency against the first row (ratio of medians, 95% bootstrap interval):")?;
    for row in rows.iter().skip(1) {
        if let Some(reading) = &row.latency_reading {
            writeln!(out, "  {:<34} {reading}", row.label)?;
        }
    }
    for row in rows {
        if let Some(w) = row.report.as_ref().and_then(|r| r.noise_warning()) {
            writeln!(out, "WARNING {}: {w}", row.label)?;
        }
    }
    Ok(())
}

fn ratio(r: Option<f64>) -> String {
    r.map(|r| format!("{r:.2}x")).unwrap_or_else(|| "-".into())
}
