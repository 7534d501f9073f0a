//! The command-line side of the binary: `measure`, `compare`, `generate` and `models` here,
//! the pitfall cards in `pitfall.rs`, the recorded runs in `runs.rs`. They drive the same
//! [`engine::Worker`] as the web server, so a number printed here is measured exactly as the
//! page measures it.

mod pitfall;
mod runs;

use std::io::Write;

use anyhow::{bail, Result};
use engine::{MeasureError, Worker};
use protocol::{format_bytes, Report, RunSpec};
use serde::Serialize;

use crate::config::{CompareArgs, GenerateArgs, MeasureArgs, RunArgs};

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

/// `gradless generate`: the same spec the Generate page sends, through the same worker.
pub fn generate(worker: &Worker, args: &GenerateArgs) -> Result<()> {
    let report = run(worker, spec_of(worker, &args.run)?)?;
    if args.json {
        return print_json(&report);
    }
    print_generation(&report)
}

fn print_generation(r: &Report) -> Result<()> {
    let Some(g) = &r.generation else {
        bail!("the report has no generation section");
    };
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{} on {} ({}), libtorch {}",
        r.spec.model.display_name(),
        r.env.device_name,
        r.env.device.as_str(),
        r.env.libtorch_version
    )?;
    if let Some(d) = r.spec.model.decoder() {
        writeln!(out, "model         {}", d.provenance())?;
    }
    writeln!(out, "settings      {}, {} thread{}", r.spec.label(), r.env.threads, if r.env.threads == 1 { "" } else { "s" })?;
    writeln!(
        out,
        "prefill       {:.3} ms for {} prompt tokens × {} (time to first token); {:.3} TFLOP/s{}",
        g.prefill_ms,
        g.prompt_len,
        g.batch,
        g.prefill_tflops,
        g.prefill_percent_of_peak
            .map(|p| format!(" ({p:.1}% of peak)"))
            .unwrap_or_default()
    )?;
    if let Some(d) = &g.decode_ms_per_token {
        writeln!(
            out,
            "decode (ms)   per token p50 {:.3}  p95 {:.3}  p99 {:.3}  over {} steps",
            d.p50,
            d.p95,
            d.p99,
            g.steps.len() - 1
        )?;
    }
    writeln!(
        out,
        "tokens/s      {:.1} per sequence, {:.1} in total",
        g.tokens_per_s, g.tokens_per_s_total
    )?;
    if let Some(bw) = g.decode_bandwidth_gb_s {
        writeln!(
            out,
            "bandwidth     decode reads {:.1} GB/s (weights + KV cache per step){}",
            bw,
            match (g.decode_bandwidth_percent, &g.bandwidth_source) {
                (Some(p), Some(src)) => format!(", {p:.1}% of {src}"),
                _ => String::new(),
            }
        )?;
    }
    if let Some(a) = &g.attention {
        writeln!(out, "attention     {}", a.describe(r.env.device))?;
    }
    if g.decode_graph {
        writeln!(out, "CUDA graph    every decode step replayed one captured graph (static cache, whole capacity under a mask)")?;
    }
    writeln!(out, "memory        {}", r.memory.source.describe())?;
    writeln!(
        out,
        "              weights + prompt {}, peak {}, after release {}",
        format_bytes(r.memory.baseline_bytes),
        format_bytes(r.memory.peak_allocated_bytes),
        format_bytes(r.memory.after_release_bytes)
    )?;
    writeln!(
        out,
        "KV cache      {} measured, {} by the formula ({} positions × {} B)",
        format_bytes(g.kv_cache_bytes),
        format_bytes(g.kv_cache_formula_bytes),
        g.kv_cache_tokens,
        g.kv_cache_element_bytes
    )?;
    if g.kv_cache_by_layer_type.iter().any(|s| s.layer_type == protocol::decoder::LayerType::Sliding) {
        let split: Vec<String> = g
            .kv_cache_by_layer_type
            .iter()
            .map(|s| format!("{} {} layers × {} positions {}", s.layer_type.label(), s.layers, s.positions, format_bytes(s.bytes)))
            .collect();
        writeln!(
            out,
            "KV by layer   {}; the naive formula (every layer at full length) {}",
            split.join(", "),
            format_bytes(g.kv_cache_naive_bytes)
        )?;
    }
    if let Some(m) = &g.moe {
        let count = |n: u64| match n >= 1_000_000_000 {
            true => format!("{:.2} B", n as f64 / 1e9),
            false => format!("{:.1} M", n as f64 / 1e6),
        };
        writeln!(
            out,
            "experts       {} of {} per token in {} layers: {} parameters, {} active per token; every expert held: {}",
            m.num_experts_per_tok,
            m.num_experts,
            m.moe_layers,
            count(m.total_parameters),
            count(m.active_parameters),
            format_bytes(m.experts_bytes)
        )?;
        writeln!(
            out,
            "expert reads  per decode step {:.1} distinct experts per layer (max {}), {} of expert weights read (one token's top-k: {})",
            m.distinct_experts_mean,
            m.distinct_experts_max,
            format_bytes(m.expert_bytes_read_mean as u64),
            format_bytes(m.active_expert_bytes)
        )?;
    }
    if let Some(w) = &g.weights_breakdown {
        writeln!(
            out,
            "weights       linear layers {} ({} unquantized), embedding + norms + head {}",
            format_bytes(w.linear_bytes),
            format_bytes(w.linear_unquantized_bytes),
            format_bytes(w.other_bytes)
        )?;
    }
    for (name, split) in [("peak", &g.memory_peak), ("steady", &g.memory_steady)] {
        if let Some(m) = split {
            writeln!(
                out,
                "{name:<14}weights {} + KV cache {} + activations {}",
                format_bytes(m.weights_bytes),
                format_bytes(m.kv_cache_bytes),
                format_bytes(m.activations_bytes)
            )?;
        }
    }
    if let Some(d) = &g.drift {
        writeln!(
            out,
            "drift         max |Δ logit| {:.4} at the prefill (largest |logit| {:.2}); {:.1}% of {} greedy tokens agree, vs {}",
            d.max_abs_logit_delta,
            d.max_abs_logit,
            100.0 * d.greedy_agreement,
            d.tokens_compared,
            d.reference
        )?;
        if let Some(low) = d.low_margin_share {
            let random = r.spec.model.decoder().is_none_or(|m| m.random_weights());
            writeln!(
                out,
                "              {:.1}% of those positions have a top-1 margin below that |Δ logit|{}",
                100.0 * low,
                if random { " (random weights: small margins, so agreement here says little about a trained model)" } else { "" }
            )?;
        }
    }
    if let Some(w) = &g.weights_source {
        writeln!(out, "weights       {w}")?;
    }
    if let Some(t) = &g.text {
        writeln!(out, "prompt text   {:?}", t.prompt)?;
        writeln!(out, "generated     {:?}", t.generated.first().cloned().unwrap_or_default())?;
    }
    if let Some(q) = &g.quality {
        writeln!(out, "quality       bits per byte on {} (lower is better)", q.text)?;
        let base = q.baseline().map(|b| b.bits_per_byte);
        for row in &q.rows {
            writeln!(
                out,
                "  {:<34}{:.4}  {}{}{}",
                row.setting,
                row.bits_per_byte,
                base.map(|b| format!("{:+.4}", row.bits_per_byte - b)).unwrap_or_default(),
                row.perplexity.map(|p| format!("  perplexity {p:.2}")).unwrap_or_default(),
                if row.this_run { "  (this run)" } else { "" }
            )?;
        }
        writeln!(out, "  {:<34}{:.4}", "gzip -9", q.gzip_bits_per_byte)?;
        if let Some(u) = q.unigram_bits_per_byte {
            writeln!(out, "  {:<34}{:.4}", "unigram bytes", u)?;
        }
    }
    if let Some(last) = g.steps.last() {
        if last.graph_bytes > 0 {
            writeln!(
                out,
                "graph         {} held by autograd after the last step (grad is enabled)",
                format_bytes(last.graph_bytes)
            )?;
        }
    }
    if let Some(first) = g.tokens.first() {
        let shown: Vec<String> = first.iter().take(16).map(|t| t.to_string()).collect();
        writeln!(
            out,
            "tokens        {}{}",
            shown.join(" "),
            if first.len() > 16 { " ..." } else { "" }
        )?;
    }
    Ok(())
}

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

/// `gradless models`.
pub fn models(worker: &Worker, json: bool) -> Result<()> {
    let infos = model_infos(worker)?;
    if json {
        return print_json(&infos);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<14} {:>12}  {:<42} input_size",
        "model", "parameters", "architecture"
    )?;
    for m in infos {
        writeln!(
            out,
            "{:<14} {:>12}  {:<42} {} (default {})",
            m.id.as_str(),
            group_thousands(m.parameters),
            m.name,
            m.input_meaning,
            m.default_input_size
        )?;
        // Where a decoder's weights come from: its files, or random seeded weights.
        if let Some(d) = m.id.decoder() {
            writeln!(out, "{:<14} weights: {}", "", d.provenance())?;
        }
    }
    Ok(())
}

/// `gradless models --load MODEL`: builds a decoder on the CPU with its weights read from its
/// folder, timed, and prints how long it took and what the model holds.
pub fn load_weights(catalog: &protocol::Catalog, args: &crate::config::ModelsArgs) -> Result<()> {
    let name = args.load.as_deref().unwrap_or_default();
    let id = catalog.parse(name).map_err(|e| anyhow::anyhow!(e))?;
    let decoder = id.decoder().ok_or_else(|| anyhow::anyhow!("`{name}` is not a decoder: --load reads a decoder's weights"))?;
    let weights: protocol::WeightsDtype = args
        .load_dtype
        .parse()
        .map_err(|_| anyhow::anyhow!("--load-dtype `{}`: use fp32, bf16 or fp16", args.load_dtype))?;
    let start = std::time::Instant::now();
    let device = engine::torch_call::tch_device(protocol::DeviceKind::Cpu);
    let built = engine::torch_call::catch_torch(|| engine::models::Model::build_in(id, device, 0, weights));
    let load_ms = start.elapsed().as_secs_f64() * 1000.0;
    let model = built.map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let report = serde_json::json!({
        "model": name,
        "weights_dtype": weights.as_str(),
        "load_ms": load_ms,
        "held_bytes": model.held_bytes,
        "weights_source": decoder.provenance(),
        "stored_bytes": match &decoder.source {
            protocol::decoder::DecoderSource::Team { stored: Some(s), .. } => Some(s.bytes()),
            _ => None,
        },
    });
    if args.json {
        return print_json(&report);
    }
    println!(
        "{name}: built in {load_ms:.0} ms on the CPU, {} of {} weights held\n  weights: {}",
        format_bytes(model.held_bytes),
        weights.as_str(),
        decoder.provenance()
    );
    Ok(())
}

pub use crate::model_counts::model_infos;
pub use pitfall::{pitfall, pitfall_all, pitfall_list};
pub use runs::runs;

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

fn group_thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_are_grouped() {
        assert_eq!(super::group_thousands(11_689_512), "11,689,512");
        assert_eq!(super::group_thousands(999), "999");
    }
}
