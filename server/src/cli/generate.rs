//! `gradless generate`: a generation's report as text, its tokens, rates, cache and quality
//! block, from the same spec and worker the Generate page uses.

use std::io::Write;

use anyhow::{bail, Result};
use engine::Worker;
use protocol::{format_bytes, Report};

use super::{print_json, run, spec_of};
use crate::config::GenerateArgs;

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
