//! The command-line side of the binary: `measure` and the report printer here; `compare`,
//! `generate`, `models`, the pitfall cards and the recorded runs in their own modules. They drive the same
//! [`engine::Worker`] as the web server, so a number printed here is measured exactly as the
//! page measures it.

mod compare;
mod generate;
mod models;
mod pitfall;
mod runs;

use std::io::Write;

use anyhow::Result;
use engine::{MeasureError, Worker};
use protocol::{format_bytes, Report, RunSpec};
use serde::Serialize;

use crate::config::{MeasureArgs, RunArgs};

/// The model a command names: parsed once the models directory is loaded, so a team
/// model's name is known.
/// The model `--model` names. A file of `--models-dir` refused at load under this name
/// answers with its reason, even when a built-in model has the name: whoever named the
/// directory meant the file, and measuring another model in its place would print
/// figures for something they did not ask for.
pub(crate) fn model(catalog: &protocol::Catalog, name: &str) -> Result<protocol::ModelId> {
    if let Some(why) = catalog.refusal(name) {
        let builtin = protocol::team::is_built_in(name);
        let hint = if builtin {
            format!(" (without --models-dir, `{name}` is the built-in model)")
        } else {
            String::new()
        };
        anyhow::bail!("team model `{name}` is not served: {why}{hint}");
    }
    catalog.parse(name).map_err(anyhow::Error::msg)
}

/// The spec a command line asked for, its model resolved (team models are known now).
fn spec_of<C: crate::config::RunCommand>(worker: &Worker, args: &RunArgs<C>) -> Result<RunSpec> {
    Ok(RunSpec { model: model(worker.catalog(), &args.model)?, ..args.spec.clone() })
}

/// Runs one spec, turning engine failures into readable errors.
fn run(worker: &Worker, spec: RunSpec) -> Result<Report> {
    let label = spec.label();
    worker.measure(spec, |_| {}).map_err(|e| match e {
        MeasureError::Rejected(e) => anyhow::anyhow!("{e}"),
        MeasureError::Failed(f) => anyhow::anyhow!("{} failed: {}", label, f.message),
    })
}

/// `gradless measure`.
pub fn measure(worker: &Worker, args: &MeasureArgs) -> Result<()> {
    let report = run(worker, spec_of(worker, &args.run)?)?;
    if args.json {
        print_json(&report)
    } else {
        print_report(&report)?;
        if args.trace {
            print!("{}", crate::trace_export::trace_table(&report));
        }
        Ok(())
    }
}

pub use crate::model_counts::model_infos;
pub use pitfall::{pitfall, pitfall_all, pitfall_list};
pub use runs::runs;
pub use compare::{classic_specs, compare, CompareRow};
pub use generate::generate;
pub use models::{load_weights, models};

pub(crate) fn print_json<T: Serialize>(value: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

pub(crate) fn print_report(r: &Report) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let l = &r.latency_ms;
    let m = &r.memory;
    writeln!(
        out,
        "{} on {} ({}), libtorch {}",
        r.spec.model.display_name(),
        r.env.device_name,
        r.env.device.as_str(),
        r.env.libtorch_version
    )?;
    writeln!(
        out,
        "settings      {}, input_size {}, {} thread{}",
        r.spec.label(),
        r.spec.resolved_input_size(),
        r.env.threads,
        if r.env.threads == 1 { "" } else { "s" }
    )?;
    writeln!(
        out,
        "iterations    {} warm-up (not in the statistics), {} timed",
        r.warmup.len(),
        r.samples.len()
    )?;
    writeln!(out, "latency (ms)  p50 {:.3}  p95 {:.3}  p99 {:.3}  mean {:.3}  min {:.3}  max {:.3}  stddev {:.3}", l.p50, l.p95, l.p99, l.mean, l.min, l.max, l.stddev)?;
    if let Some(rel) = r.relative_iqr() {
        let warning = r
            .noise_warning()
            .map(|w| format!("  WARNING: {w}"))
            .unwrap_or_default();
        writeln!(
            out,
            "spread        IQR {:.3} ms ({:.0}% of the median){warning}",
            rel * l.p50,
            rel * 100.0
        )?;
    }
    writeln!(out, "throughput    {:.1} samples/s", r.throughput_per_s)?;
    if let Some(c) = &r.compiled {
        writeln!(
            out,
            "compiled      AOTInductor package {} ({}), batch {}..={}, kernels for {} thread{}, PyTorch {}{}",
            c.package,
            format_bytes(c.package_bytes),
            c.batch_min,
            c.batch_max,
            c.threads,
            if c.threads == 1 { "" } else { "s" },
            c.torch_version,
            if c.cached { ", from the cache (its compile times as measured when it was built)" } else { "" }
        )?;
        writeln!(
            out,
            "compile       once: export {:.0} ms + Inductor {:.0} ms + the C++ build {:.0} ms (the Python process {:.0} ms in all) + load {:.0} ms",
            c.export_ms, c.compile_ms - c.build_ms, c.build_ms, c.subprocess_ms, c.load_ms
        )?;
        writeln!(
            out,
            "eager beside  p50 {:.3} ms over {} passes on the same input (compiled p50 {:.3} ms: ×{:.2}); peak {} above baseline (compiled {}); {}",
            c.eager_p50_ms,
            c.eager_iters,
            l.p50,
            if l.p50 > 0.0 { c.eager_p50_ms / l.p50 } else { 0.0 },
            format_bytes(c.eager_peak_above_baseline_bytes),
            format_bytes(m.peak_above_baseline_bytes),
            match c.break_even_passes {
                Some(n) => format!("compiling pays for itself after {n:.0} passes"),
                None => "the compiled pass is not faster: compiling never pays for itself here".into(),
            }
        )?;
        writeln!(
            out,
            "output        largest |compiled − eager| {:.3e}{}",
            c.max_abs_diff,
            if c.bitwise_equal { " (equal bit for bit)" } else { "" }
        )?;
    }
    writeln!(out, "memory        {}", m.source.describe())?;
    writeln!(
        out,
        "  baseline            {}  (weights + input)",
        format_bytes(m.baseline_bytes)
    )?;
    writeln!(
        out,
        "  peak allocated      {}",
        format_bytes(m.peak_allocated_bytes)
    )?;
    writeln!(
        out,
        "  peak above baseline {}  (activations, graph, workspace)",
        format_bytes(m.peak_above_baseline_bytes)
    )?;
    match m.peak_reserved_bytes {
        Some(b) => writeln!(out, "  peak reserved       {}", format_bytes(b))?,
        None => writeln!(
            out,
            "  peak reserved       n/a (the CPU has no caching allocator pool)"
        )?,
    }
    writeln!(
        out,
        "  after release       {}{}",
        format_bytes(m.after_release_bytes),
        if m.leaked_bytes > 0 {
            format!("  LEAK: {} not returned", format_bytes(m.leaked_bytes))
        } else {
            "  (back at baseline)".into()
        }
    )?;
    writeln!(
        out,
        "output        {} {:?}{}{}",
        r.output.dtype,
        r.output.shape,
        if r.output.requires_grad {
            ", requires_grad (graph kept)"
        } else {
            ""
        },
        if r.output.is_inference {
            ", inference tensor"
        } else {
            ""
        }
    )?;
    write!(out, "{}", crate::trace_export::compute_lines(r))?;
    Ok(())
}
