//! The Generate page's results column: the live charts of the shown generation (or of a
//! comparison's runs, overlaid), what a comparison shows in words, one sentence per run
//! with its figures (each run links to its permalink below), the shown run's figures labelled with which run they are, and its record links. The page
//! and its settings are in [`crate::generate`].

use leptos::prelude::*;
use protocol::{format_bytes, GenPhase, KvCacheKind, Report};

#[cfg(feature = "hydrate")]
use crate::charts::{prefill_decode_chart, step_latency_chart, step_memory_chart, GenRun};
use crate::run_view::RunView;
use crate::widgets::provenance;

mod compare;
pub use compare::{comparison_reading, Row};

/// A run's name in an overlay and a comparison: what differs in a comparison.
pub fn run_name(r: &Report) -> String {
    let g = r.generation.as_ref();
    format!(
        "{} cache · {}",
        g.map_or("?", |g| g.cache.as_str()),
        r.spec.grad.as_str()
    )
}

/// What run `r` ran, against the page's defaults on its device: every setting that differs,
/// in the controls' words ("Quantized linear layers: int4, …; KV cache dtype: bf16"), or
/// "the default settings".
pub fn ran_with(r: &Report) -> String {
    let default = crate::gen_settings::default_on(r.env.device, r.spec.device);
    let differences = protocol::settings::differences(protocol::settings::SETTINGS, protocol::settings::Page::Generate, &r.spec, &default);
    match differences.is_empty() {
        true => "the default settings".into(),
        false => differences.join("; "),
    }
}

#[component]
pub fn GenResults(
    view_state: RwSignal<RunView>,
    finished: RwSignal<Vec<(String, Report)>>,
    compared: RwSignal<Vec<(String, Report)>>,
) -> impl IntoView {
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let live = view_state.with(|v| v.steps.clone());
        let baseline = view_state.with(|v| v.baseline_bytes);
        let rows = compared.get();
        let mut names: Vec<String> = rows.iter().map(|(_, r)| run_name(r)).collect();
        let mut steps: Vec<(Vec<protocol::GenStep>, Option<u64>)> = rows
            .iter()
            .map(|(_, r)| (r.generation.as_ref().map(|g| g.steps.clone()).unwrap_or_default(), Some(r.memory.baseline_bytes)))
            .collect();
        let live_is_listed = view_state.with(|v| v.report.is_some()) && !rows.is_empty();
        if !live_is_listed && !live.is_empty() {
            names.push(view_state.with(|v| v.report.as_ref().map(run_name)).unwrap_or_else(|| "this run".into()));
            steps.push((live, baseline));
        }
        if steps.is_empty() {
            return;
        }
        let runs: Vec<GenRun<'_>> = names
            .iter()
            .zip(&steps)
            .map(|(n, (s, b))| GenRun { name: n, steps: s, baseline: *b })
            .collect();
        crate::charts::render("gen-latency-chart", step_latency_chart(&runs));
        crate::charts::render("gen-memory-chart", step_memory_chart(&runs));
        crate::charts::render("gen-prefill-chart", prefill_decode_chart(&runs));
    });
    let comparison = move || {
        let rows: Vec<Row> = compared.with(|c| c.iter().filter_map(|(_, r)| Row::of(r)).collect());
        let reading = comparison_reading(&rows);
        (!reading.is_empty()).then(|| {
            view! {
                <section class="gen-comparison" data-testid="gen-comparison">
                    <h2>"What the comparison shows"</h2>
                    {reading.into_iter().map(|s| view! { <p class="reading" data-testid="gen-reading">{s}</p> }).collect_view()}
                </section>
            }
        })
    };
    let figures = move || {
        view_state.with(|v| {
            // Which run: after a comparison, its last, whatever the settings say.
            v.report.as_ref().map(|r| figures_view(r, format!("Figures of the run shown: {} · {}", r.spec.model.display_name(), ran_with(r))))
        })
    };
    // A refused run draws nothing: the charts still hold the run before it, and say so.
    let previous = move || {
        let refused = view_state.with(|v| matches!(v.phase, crate::run_view::Phase::Failed(_)));
        let last = finished.with(|f| f.last().map(|(_, r)| format!("{} · {}", r.spec.model.display_name(), ran_with(r))));
        refused.then_some(last).flatten().map(|last| {
            view! { <p class="note previous" data-testid="gen-previous">{format!("This run did not start: the charts below are still the previous run's ({last}).")}</p> }
        })
    };
    let progress = move || format!("{:.0}%", view_state.with(|v| v.progress()) * 100.0);
    let steps_shown = move || view_state.with(|v| v.steps.len());
    // After the last step, a long part (the quality measurement) says what it does; the
    // bar above follows its parts.
    let working = move || {
        view_state.with(|v| match &v.phase {
            crate::run_view::Phase::Working { what, .. } => format!(" · {what}"),
            _ => String::new(),
        })
    };
    let links = move || {
        let rows = finished.get();
        let ids: Vec<String> = rows.iter().rev().take(5).map(|(id, _)| id.clone()).collect();
        (!ids.is_empty()).then(|| {
            let last = ids[0].clone();
            view! {
                <p class="record-links">
                    <a href=format!("/runs/{last}") data-testid="gen-permalink">"Permalink of this generation"</a>
                    " · "
                    <a href=format!("/api/records/{last}/export/json") rel="external">"JSON"</a>
                    " · "
                    <a href=format!("/api/records/{last}/export/csv") rel="external">"CSV"</a>
                    " · "
                    <a href=format!("/api/records/{last}/export/py") rel="external">"the script"</a>
                    {(ids.len() > 1).then(|| view! { " · " <a href=format!("/compare?runs={}", ids.join(",")) data-testid="gen-compare-link">"Compare side by side"</a> })}
                </p>
            }
        })
    };
    view! {
        <section class="results" id="gen-results" aria-label="Measured generation">
            <div class="progress" aria-hidden="true"><div class="bar" style:width=progress></div></div>
            <p class="steps-count" id="gen-top" data-testid="gen-steps">{move || format!("{} steps streamed{}", steps_shown(), working())}</p>
            {previous}
            <div id="gen-latency-chart" class="chart" data-testid="gen-latency-chart"></div>
            <div id="gen-memory-chart" class="chart" data-testid="gen-memory-chart"></div>
            <div id="gen-prefill-chart" class="chart chart-small" data-testid="gen-prefill-chart"></div>
            {comparison}
            {figures}
            {links}
        </section>
    }
}

/// A byte-level model's text as the steps stream: the prompt, then each step's token (the
/// first sequence's), decoded as UTF-8 so far. Shown while the run is the page's settings'
/// model and has a text prompt; after the run the figures show the report's text.
#[component]
pub fn GenText(view_state: RwSignal<RunView>, spec: Memo<protocol::RunSpec>) -> impl IntoView {
    move || {
        let running = view_state.with(|v| v.phase.busy());
        let (prompt, generated) = match running {
            true => {
                let s = spec.get();
                s.model.decoder().filter(|d| d.takes_text())?;
                let prompt = s.generate.as_ref().and_then(|g| g.prompt_text.clone())?;
                // Each step carries the text its token adds (decoded on the server, where the
                // tokenizer is).
                let generated: String = view_state.with(|v| v.steps.iter().filter(|st| st.phase == GenPhase::Decode || st.step == 0).filter_map(|st| st.text.clone()).collect());
                (prompt, generated)
            }
            false => view_state.with(|v| {
                let t = v.report.as_ref()?.generation.as_ref()?.text.clone()?;
                Some((t.prompt, t.generated.into_iter().next().unwrap_or_default()))
            })?,
        };
        Some(view! {
            <div class="gen-text" data-testid="gen-text" aria-live="polite">
                <pre><span class="prompt">{prompt}</span><span class="generated">{generated}</span>{running.then(|| view! { <span class="cursor">"▌"</span> })}</pre>
            </div>
        })
    }
}

/// The decode bandwidth against the device's: a bandwidth against a bandwidth (the
/// datasheet's, or the copy bandwidth measured on this device), never a compute peak.
fn bandwidth_line(g: &protocol::GenerationReport) -> Option<String> {
    let bw = g.decode_bandwidth_gb_s?;
    let against = match (g.decode_bandwidth_percent, g.bandwidth_source.as_deref()) {
        (Some(p), Some(s)) if s.starts_with("measured") => format!(" ({p:.1}% of the copy bandwidth measured on this device)"),
        (Some(p), Some(s)) => format!(" ({p:.1}% of the bandwidth in {s})"),
        _ => " (no device bandwidth known to compare it with)".to_string(),
    };
    Some(format!("{bw:.1} GB/s read (weights + KV cache per step){against}"))
}

/// The generation's headline figures, each with where it comes from; `which` says which
/// run they are (after a comparison, its last, not what the settings say).
pub fn figures_view(r: &Report, which: String) -> impl IntoView + use<> {
    let g = r.generation.clone();
    let env = provenance(&r.env);
    let source = r.memory.source.describe();
    g.map(|g| {
        let decode = g
            .decode_ms_per_token
            .as_ref()
            .map(|d| format!("p50 {:.2} ms · p95 {:.2} ms · p99 {:.2} ms", d.p50, d.p95, d.p99))
            .unwrap_or_else(|| "one token: no decode step".into());
        let kv_match = if g.kv_cache_bytes == g.kv_cache_formula_bytes { "equal to the byte" } else { "differs" };
        let sliding = g.kv_cache_by_layer_type.iter().any(|s| s.layer_type == protocol::decoder::LayerType::Sliding);
        let kv = if g.cache == KvCacheKind::Off {
            format!("{} kept: the cache is off, so every step feeds the whole sequence so far and recomputes its keys and values", format_bytes(g.kv_cache_bytes))
        } else if sliding {
            format!(
                "{} measured from its tensors; the formula per layer type (2 × layers × kv_heads × head_dim × positions × {} × {} B, a sliding layer's positions capped by its window) = {} ({kv_match}). A full layer holds {} positions",
                format_bytes(g.kv_cache_bytes), g.batch, g.kv_cache_element_bytes, format_bytes(g.kv_cache_formula_bytes),
                g.kv_cache_tokens
            )
        } else {
            format!(
                "{} measured from its tensors; formula 2 × layers × kv_heads × head_dim × {} positions × {} × {} B = {} ({kv_match}). {} positions: the prompt's {} + {} new tokens − 1, since the last token's keys and values are never needed; values kept in the keys' dtype, as transformers' caches keep them",
                format_bytes(g.kv_cache_bytes), g.kv_cache_tokens, g.batch, g.kv_cache_element_bytes, format_bytes(g.kv_cache_formula_bytes),
                g.kv_cache_tokens, g.prompt_len, g.new_tokens
            )
        };
        let bandwidth = bandwidth_line(&g);
        let graph = g.steps.last().map(|s| s.graph_bytes).unwrap_or(0);
        let attention = g.attention.as_ref().map(|a| {
            let replay = if g.decode_graph { "; decode steps replayed one CUDA graph" } else { "" };
            format!("{}{replay}", a.describe(r.env.device))
        });
        let random_weights = r.spec.model.decoder().is_none_or(|d| d.random_weights());
        let (weights, split, drift) = quant_lines(&g, random_weights);
        let quality = g.quality.clone().map(quality_view);
        let (kv_split, experts, expert_reads) = family_lines(&g);
        let prefill_steps = g.steps.iter().filter(|s| s.phase == GenPhase::Prefill).count();
        let quantized_prefill = r.spec.generate.as_ref().filter(|q| !q.weights.is_none()).map(|q| {
            let cpu = match r.env.device {
                protocol::DeviceKind::Cpu => " On a CPU the packed kernels unpack every weight for every prompt row, so an int8/int4 prefill can be many times slower than fp32's (whose matmul is a tuned BLAS GEMM).",
                protocol::DeviceKind::Cuda => "",
            };
            format!(
                "{} linear layers run PyTorch's packed weight-only kernels, built for decode's matrix-vector products (one token a step: fewer bytes read is faster); the prefill multiplies matrix by matrix, where reading fewer bytes saves little and unpacking costs.{cpu}",
                q.weights.as_str()
            )
        });
        let compute_peak = match (g.prefill_percent_of_peak, g.bandwidth_source.as_deref()) {
            (Some(p), Some(s)) if s.starts_with("measured") => format!(" ({p:.1}% of the matmul peak measured on this device)"),
            (Some(p), _) => format!(" ({p:.1}% of peak)"),
            (None, Some(_)) if quantized_prefill.is_some() => {
                " (not compared with the matmul peak: that is a dense matmul in the activations' dtype, and these linear layers ran packed quantized kernels)".to_string()
            }
            _ => String::new(),
        };
        view! {
            <table class="summary" data-testid="gen-summary">
                <caption data-testid="gen-summary-which">{which}</caption>
                <tr><th>"Time to first token (prefill)"</th><td data-testid="gen-prefill">{format!("{:.2} ms for {} × {} prompt tokens", g.prefill_ms, g.batch, g.prompt_len)}</td></tr>
                <tr><th>"Decode, per token"</th><td data-testid="gen-decode">{decode}</td></tr>
                <tr><th>"Tokens/s"</th><td>{format!("{:.1} per sequence, {:.1} in total", g.tokens_per_s, g.tokens_per_s_total)}</td></tr>
                <tr><th>"KV cache"</th><td data-testid="gen-kv">{kv}</td></tr>
                {kv_split.map(|k| view! { <tr><th>"KV cache by layer type"</th><td data-testid="gen-kv-split">{k}</td></tr> })}
                {experts.map(|e| view! { <tr><th>"Experts"</th><td data-testid="gen-experts">{e}</td></tr> })}
                {expert_reads.map(|e| view! { <tr><th>"Experts read per decode step"</th><td data-testid="gen-expert-reads">{e}</td></tr> })}
                <tr><th>"Memory"</th><td>{format!("weights + prompt {}, peak {}, after release {} ({source})", format_bytes(r.memory.baseline_bytes), format_bytes(r.memory.peak_allocated_bytes), format_bytes(r.memory.after_release_bytes))}</td></tr>
                {weights.map(|w| view! { <tr><th>"Weights"</th><td data-testid="gen-weights-split">{w}</td></tr> })}
                {split.map(|m| view! { <tr><th>"At the peak"</th><td data-testid="gen-memory-split">{m}</td></tr> })}
                {drift.map(|d| view! { <tr><th>"Drift from unquantized"</th><td data-testid="gen-drift">{d}</td></tr> })}
                {(graph > 0).then(|| view! { <tr><th>"Autograd graph"</th><td data-testid="gen-graph">{format!("{} held after the last step, on top of the cache", format_bytes(graph))}</td></tr> })}
                {bandwidth.map(|b| view! { <tr><th>"Decode bandwidth"</th><td data-testid="gen-bandwidth">{b}</td></tr> })}
                {attention.map(|a| view! { <tr><th>"Attention (SDPA backend)"</th><td data-testid="gen-attention">{a}</td></tr> })}
                <tr><th>"Prefill compute"</th><td>{format!("{:.3} TFLOP/s{compute_peak}", g.prefill_tflops)}</td></tr>
                {quantized_prefill.map(|n| view! { <tr><th>"Quantized prefill"</th><td data-testid="gen-quant-prefill">{n}</td></tr> })}
                {g.weights_source.clone().map(|w| view! { <tr><th>"Weights from"</th><td data-testid="gen-weights-source">{w}</td></tr> })}
                <tr><th>"Measured on"</th><td>{env}</td></tr>
            </table>
            <p class="explain">{format!("{} prefill step and {} decode steps; one warm-up generation ran first, outside the figures.", prefill_steps, g.steps.len() - prefill_steps)}</p>
            {quality}
        }
    })
}

/// The quality block: bits per byte on the held-out text per setting, the change from the
/// model as trained, and the two baselines on the same bytes.
fn quality_view(q: protocol::Quality) -> impl IntoView {
    let base = q.baseline().map(|b| b.bits_per_byte);
    let best = q.rows.iter().map(|r| r.bits_per_byte).fold(f64::INFINITY, f64::min);
    let beats = best < q.gzip_bits_per_byte;
    let rows = q
        .rows
        .iter()
        .map(|r| {
            let delta = base.map(|b| format!("{:+.4}", r.bits_per_byte - b)).unwrap_or_default();
            let mark = if r.this_run { " (this run)" } else { "" };
            view! {
                <tr class:this-run=r.this_run>
                    <th>{format!("{}{mark}", r.setting)}</th>
                    <td>{match r.perplexity {
                        Some(p) => format!("{:.4} (perplexity {p:.1})", r.bits_per_byte),
                        None => format!("{:.4}", r.bits_per_byte),
                    }}</td>
                    <td>{delta}</td>
                    <td>{format!("{:.1} s", r.seconds)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <section class="gen-quality" data-testid="gen-quality">
            <h3>"Quality on held-out text (bits per byte, lower is better)"</h3>
            <p class="explain">{format!("{} ({} bytes, SHA-256 {}…). {}.", q.text, q.bytes, &q.sha256[..12.min(q.sha256.len())], q.method)}</p>
            <table class="summary quality">
                <thead><tr><th scope="col">"Setting"</th><th scope="col">"bits/byte"</th><th scope="col">"vs as trained"</th><th scope="col">"took"</th></tr></thead>
                <tbody>
                {rows}
                <tr><th>"gzip -9 on the same bytes"</th><td data-testid="gen-quality-gzip">{format!("{:.4}", q.gzip_bits_per_byte)}</td><td></td><td></td></tr>
                {q.unigram_bits_per_byte.map(|u| view! { <tr><th>"unigram byte model (training text's byte frequencies)"</th><td>{format!("{u:.4}")}</td><td></td><td></td></tr> })}
                </tbody>
            </table>
            <p class="explain">{match beats {
                true => format!("The model compresses this text better than gzip -9 does ({best:.4} against {:.4} bits per byte): it has learned Python's regularities, not just repeats.", q.gzip_bits_per_byte),
                false => format!("gzip -9 compresses this text better than the model does ({:.4} against {best:.4}).", q.gzip_bits_per_byte),
            }}</p>
            {(!q.not_measured.is_empty()).then(|| view! { <p class="explain note">{format!("Not in the table: {}.", q.not_measured.join("; "))}</p> })}
        </section>
    }
}

/// A decoder family's lines: the cache by layer type beside the naive formula (when some
/// layers slide), a mixture of experts' parameters and bytes held, and what each decode
/// step read of them (`None` each where the run has none).
fn family_lines(g: &protocol::GenerationReport) -> (Option<String>, Option<String>, Option<String>) {
    let sliding = g.kv_cache_by_layer_type.iter().any(|s| s.layer_type == protocol::decoder::LayerType::Sliding);
    let kv = sliding.then(|| {
        let types: Vec<String> = g
            .kv_cache_by_layer_type
            .iter()
            .map(|s| {
                let equal = if s.bytes == s.formula_bytes { "= its formula" } else { "≠ its formula" };
                format!("{} layers: {} × {} positions, {} ({equal})", s.layer_type.label(), s.layers, s.positions, format_bytes(s.bytes))
            })
            .collect();
        format!(
            "{}. The naive formula, every layer at full length: {} ({:.1}× what is held): a sliding layer keeps only its window (a growing cache window − 1 between steps, as transformers' does; a static one the window, rolled)",
            types.join("; "),
            format_bytes(g.kv_cache_naive_bytes),
            g.kv_cache_naive_bytes as f64 / g.kv_cache_bytes.max(1) as f64
        )
    });
    let count = |n: u64| match n >= 1_000_000_000 {
        true => format!("{:.2} B", n as f64 / 1e9),
        false => format!("{:.1} M", n as f64 / 1e6),
    };
    let experts = g.moe.as_ref().map(|m| {
        format!(
            "{} parameters, {} active per token ({} of {} experts in each of {} layers); memory holds every expert: {} ({} each), whatever the router picks",
            count(m.total_parameters),
            count(m.active_parameters),
            m.num_experts_per_tok,
            m.num_experts,
            m.moe_layers,
            format_bytes(m.experts_bytes),
            format_bytes(m.expert_bytes)
        )
    });
    let reads = g.moe.as_ref().filter(|m| !m.steps.is_empty()).map(|m| {
        format!(
            "{:.1} distinct experts per layer on average (at most {}) for a batch of {}: {} of expert weights read per step, against {} for one token's top {}",
            m.distinct_experts_mean,
            m.distinct_experts_max,
            g.batch,
            format_bytes(m.expert_bytes_read_mean as u64),
            format_bytes(m.active_expert_bytes),
            m.num_experts_per_tok
        )
    });
    (kv, experts, reads)
}

/// The weights split (linear layers against the rest, beside the formula), memory at the
/// peak split by what holds it, and the drift from the unquantized model: the lines of a
/// generation that carries them (`None` each where it does not).
fn quant_lines(g: &protocol::GenerationReport, random_weights: bool) -> (Option<String>, Option<String>, Option<String>) {
    let weights = g.weights_breakdown.map(|b| {
        let formula = match g.weights_formula {
            Some(f) if f.linear_bytes == b.linear_bytes && f.other_bytes == b.other_bytes => "; both equal to their formula, to the byte".to_string(),
            Some(f) => format!("; the formula says {} and {}", format_bytes(f.linear_bytes), format_bytes(f.other_bytes)),
            None => String::new(),
        };
        let share = if b.linear_unquantized_bytes > 0 {
            format!(" ({:.3}× their {} unquantized)", b.linear_bytes as f64 / b.linear_unquantized_bytes as f64, format_bytes(b.linear_unquantized_bytes))
        } else {
            String::new()
        };
        let total = b.linear_bytes + b.other_bytes;
        let other_share = if total > 0 { 100.0 * b.other_bytes as f64 / total as f64 } else { 0.0 };
        format!(
            "the blocks' linear layers {}{share}; everything else {} ({other_share:.0}% of the weights: embeddings, norms, head, in the activation dtype){formula}",
            format_bytes(b.linear_bytes),
            format_bytes(b.other_bytes)
        )
    });
    let split = g.memory_peak.map(|m| {
        format!(
            "weights {}, KV cache {}, activations and logits {}",
            format_bytes(m.weights_bytes),
            format_bytes(m.kv_cache_bytes),
            format_bytes(m.activations_bytes)
        )
    });
    let drift = g.drift.as_ref().map(|d| {
        let mut line = format!(
            "max |Δ logit| {:.4} at the prefill (its largest |logit| {:.2}); the unquantized model picks the same greedy token for {:.1}% of {} tokens ({})",
            d.max_abs_logit_delta,
            d.max_abs_logit,
            100.0 * d.greedy_agreement,
            d.tokens_compared,
            d.reference
        );
        if let Some(low) = d.low_margin_share {
            line.push_str(&format!(
                ". At {:.1}% of those positions the unquantized model's top-1 margin (best logit minus second best) is below that max |Δ logit|: a perturbation that size can flip the pick there",
                100.0 * low
            ));
        }
        match (random_weights, g.quality.as_ref()) {
            (true, _) => line.push_str(
                ". These weights are random: their top-1 margins are small, so almost any perturbation flips greedy picks, and this agreement says little about a trained model's. The trained preset measures what quantization costs in bits per byte on held-out text",
            ),
            (false, Some(q)) => {
                if let (Some(run), Some(base)) = (q.this_run(), q.baseline()) {
                    line.push_str(&format!(
                        ". On held-out text this setting scores {:.4} bits per byte against {:.4} as trained ({:+.4})",
                        run.bits_per_byte,
                        base.bits_per_byte,
                        run.bits_per_byte - base.bits_per_byte
                    ));
                }
            }
            (false, None) => {}
        }
        line
    });
    (weights, split, drift)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A generation report read from JSON, its family figures as `extra` sets them.
    fn report(extra: serde_json::Value) -> protocol::GenerationReport {
        let mut v = serde_json::json!({
            "cache": "dynamic", "prompt_len": 40, "new_tokens": 12, "batch": 2, "prefill_ms": 1.0,
            "steps": [], "kv_cache_bytes": 210944, "kv_cache_formula_bytes": 210944, "kv_cache_tokens": 51,
            "kv_cache_element_bytes": 4, "decode_ms_per_token": null, "tokens_per_s": 0.0,
            "tokens_per_s_total": 0.0, "weights_bytes": 0, "decode_bandwidth_gb_s": null,
            "decode_bandwidth_percent": null, "bandwidth_source": null, "prefill_flops": 0,
            "prefill_tflops": 0.0, "prefill_percent_of_peak": null, "decode_flops_per_step": 0,
            "decode_intensity_flops_per_byte": 0.0, "warmup_ms": 0.0, "prompt_tokens": [], "tokens": []
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_sliding_window_run_reads_its_cache_by_layer_type_and_an_moe_its_experts() {
        let g = report(serde_json::json!({
            "kv_cache_naive_bytes": 313344,
            "kv_cache_by_layer_type": [
                {"layer_type": "full_attention", "layers": 1, "positions": 51, "bytes": 52224, "formula_bytes": 52224},
                {"layer_type": "sliding_attention", "layers": 5, "positions": 31, "bytes": 158720, "formula_bytes": 158720}
            ]
        }));
        let (kv, experts, reads) = family_lines(&g);
        let kv = kv.unwrap();
        assert!(kv.starts_with("full layers: 1 × 51 positions, 51.0 KiB (= its formula); sliding layers: 5 × 31 positions, 155.0 KiB (= its formula)"), "{kv}");
        assert!(kv.contains("306.0 KiB (1.5× what is held)"), "{kv}");
        assert!(experts.is_none() && reads.is_none());
        // A dense model without sliding layers adds no line.
        assert_eq!(family_lines(&report(serde_json::json!({}))), (None, None, None));

        let g = report(serde_json::json!({
            "moe": {"num_experts": 8, "num_experts_per_tok": 2, "moe_layers": 4, "total_parameters": 8006144,
                    "active_parameters": 5646848, "experts_bytes": 12582912, "expert_bytes": 393216,
                    "active_expert_bytes": 3145728,
                    "steps": [{"step": 1, "distinct_mean": 5.5, "distinct_max": 7, "expert_bytes_read": 8650752}],
                    "distinct_experts_mean": 5.5, "distinct_experts_max": 7, "expert_bytes_read_mean": 8650752.0}
        }));
        let (kv, experts, reads) = family_lines(&g);
        assert!(kv.is_none());
        assert_eq!(experts.unwrap(), "8.0 M parameters, 5.6 M active per token (2 of 8 experts in each of 4 layers); memory holds every expert: 12.0 MiB (384.0 KiB each), whatever the router picks");
        assert_eq!(reads.unwrap(), "5.5 distinct experts per layer on average (at most 7) for a batch of 2: 8.2 MiB of expert weights read per step, against 3.0 MiB for one token's top 2");
    }

}
