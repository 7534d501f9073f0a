//! "Inside the forward pass": the shown run's traced pass (memory through the pass, the
//! page's runs of the same model overlaid), the five modules that hold the most, what the
//! device's memory holds, how much of the device the run used, and its place under the
//! roofline. Everything comes from the report; nothing here measures or estimates except
//! what the report names as an estimate. A team model's report has no trace (TorchScript
//! hides its modules): the section then says so.

use leptos::prelude::*;
use protocol::{format_bytes, top_holders, Report};

use super::Runs;

/// The runs whose traces the charts overlay: the page's runs of the shown run's model,
/// batch and input size (their modules and shapes match), the shown one included, at most
/// six, oldest first. Labels number them as the page's run list does.
pub fn overlaid(shown: &Report, history: &[(String, Report)]) -> Vec<(String, Report)> {
    let same = |r: &Report| {
        r.spec.model == shown.spec.model
            && r.spec.batch == shown.spec.batch
            && r.spec.resolved_input_size() == shown.spec.resolved_input_size()
    };
    let mut out: Vec<(String, Report)> = history
        .iter()
        .enumerate()
        .filter(|(_, (_, r))| same(r) && !r.trace.is_empty())
        .map(|(i, (_, r))| (format!("#{} {}", i + 1, short(r)), r.clone()))
        .collect();
    if !history.iter().any(|(_, r)| r == shown) {
        out.push((format!("shown: {}", short(shown)), shown.clone()));
    }
    let skip = out.len().saturating_sub(6);
    out.split_off(skip)
}

/// A run's settings without the batch (the overlaid runs share it).
fn short(r: &Report) -> String {
    let label = r.spec.label();
    label
        .rsplit_once(" · batch")
        .map(|(a, _)| a.to_string())
        .unwrap_or(label)
}

/// The section under the Lab's summary.
#[component]
pub fn Inside(runs: Runs) -> impl IntoView {
    let Runs {
        view_state,
        current_id,
        ..
    } = runs;
    let shown = move || {
        view_state
            .with(|v| v.report.clone())
            .filter(|r| !r.trace.is_empty())
    };

    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let Some(r) = shown() else { return };
        let runs = runs.history.with(|h| overlaid(&r, h));
        let refs: Vec<(String, &Report)> = runs.iter().map(|(l, r)| (l.clone(), r)).collect();
        crate::charts::render("trace-chart", crate::charts::trace_chart(&refs));
        if let Some(b) = &r.memory_breakdown {
            crate::charts::render("breakdown-chart", crate::charts::breakdown_chart(b));
        }
        if let Some(c) = crate::charts::roofline_chart(&refs) {
            crate::charts::render("roofline-chart", c);
        }
    });

    move || {
        let Some(r) = shown() else {
            // A team model's TorchScript module marks nothing: say so rather than leave a
            // silent gap where the section stands for the built-in models.
            let team = view_state.with(|v| {
                v.report
                    .as_ref()
                    .is_some_and(|r| matches!(r.spec.model, protocol::ModelId::Team(_) | protocol::ModelId::Named(_)))
            });
            return team.then(|| {
                view! {
                    <section class="inside" data-testid="inside" aria-label="Inside the forward pass">
                        <h2>"Inside the forward pass"</h2>
                        <p class="explain" data-testid="inside-absent">
                            "Absent for a team model: its TorchScript module runs inside the interpreter, where the per-module trace cannot follow the forward pass. So there is no memory-through-the-pass chart, and the FLOP count, FLOP/s and roofline are absent, not zero. The latency and memory figures above are measured as for any model."
                        </p>
                    </section>
                }
                .into_any()
            });
        };
        let top: Vec<_> = top_holders(&r.trace, 5)
            .into_iter()
            .map(|p| {
                let shape: Vec<String> = p.output_shape.iter().map(|d| d.to_string()).collect();
                view! {
                    <tr>
                        <td><code>{p.module.clone()}</code></td>
                        <td>{shape.join("×")}</td>
                        <td class="num">{format_bytes(p.allocated_above_baseline_bytes)}</td>
                    </tr>
                }
            })
            .collect_view();
        let compute = r.flops.map(|flops| {
            let pct = r
                .percent_of_peak
                .map(|p| format!(", {p:.2}% of the device's peak"))
                .unwrap_or_default();
            view! {
                <p data-testid="achieved">
                    {format!(
                        "{:.3} GFLOPs per forward pass at batch {} (counted from the shapes of convolutions, linear layers and attention's matmuls; a multiply-add counts as 2 FLOPs, as PyTorch's FlopCounterMode counts it). Achieved {:.4} TFLOP/s at the p50 latency{pct}.",
                        flops as f64 / 1e9,
                        r.spec.batch,
                        r.achieved_tflops.unwrap_or(0.0)
                    )}
                </p>
                <p class="source">{r.peak_source.clone().map(|s| format!("Peak: {s}."))}</p>
            }
        });
        let downloads = current_id.get().map(|id| {
            view! {
                <p class="downloads">
                    <a href=format!("/api/records/{id}/export/trace") download rel="external" data-testid="export-trace">
                        "Download as a Chrome trace"
                    </a>
                    " (opens in Perfetto or chrome://tracing) · "
                    <a href=format!("/api/records/{id}/export/trace-csv") download rel="external" data-testid="export-trace-csv">
                        "the trace as CSV"
                    </a>
                </p>
            }
        });
        Some(view! {
            <section class="inside" data-testid="inside" aria-label="Inside the forward pass">
                <h2>"Inside the forward pass"</h2>
                <p class="explain">
                    "One extra forward pass after the timed ones (never in the statistics), read at every module boundary. With grad, each activation autograd saves stays until backward: the line climbs like a staircase. Without it, each activation is freed once the next module has used it: a low sawtooth."
                </p>
                <div class="inside-row">
                    <figure class="wide">
                        <div id="trace-chart" class="chart tall" data-testid="trace-chart" role="img" aria-label="Memory through one forward pass"></div>
                    </figure>
                    <table class="holders" data-testid="top-holders">
                        <caption>"The five modules that hold the most"</caption>
                        <thead><tr><th>"module"</th><th>"output"</th><th>"held after it"</th></tr></thead>
                        <tbody>{top}</tbody>
                    </table>
                </div>
                {downloads}
                <div class="charts">
                    <figure>
                        <div id="breakdown-chart" class="chart" data-testid="breakdown-chart" role="img" aria-label="What the memory holds"></div>
                    </figure>
                    <figure>
                        <div id="roofline-chart" class="chart" data-testid="roofline-chart" role="img" aria-label="Under the roofline"></div>
                    </figure>
                </div>
                {compute}
            </section>
        }
        .into_any())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(grad: &str, batch: u32, points: usize) -> Report {
        let trace = (0..points)
            .map(|i| protocol::testing::point(&format!("m{i}"), batch as i64, (i as u64 + 1) * 100, (i as u64 + 1) * 100, 0.1, 8))
            .collect();
        protocol::testing::report(grad, batch, trace)
    }

    #[test]
    fn runs_of_the_same_shapes_overlay_and_others_stay_out() {
        let grad = report("enabled", 2, 5);
        let no_grad = report("no_grad", 2, 5);
        let other_batch = report("no_grad", 4, 5);
        let history = vec![
            ("a".to_string(), grad.clone()),
            ("b".to_string(), other_batch),
            ("c".to_string(), no_grad.clone()),
        ];
        let o = overlaid(&no_grad, &history);
        let labels: Vec<&str> = o.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["#1 eval · enabled", "#3 eval · no_grad"]);
        // A recorded run not run on this page is added as the shown one.
        let recorded = report("inference_mode", 2, 5);
        let o = overlaid(&recorded, &history);
        assert_eq!(o.len(), 3);
        assert!(o[2].0.starts_with("shown"));
        let refs: Vec<(String, &Report)> = o.iter().map(|(l, r)| (l.clone(), r)).collect();
        let chart = crate::charts::trace_chart(&refs);
        assert_eq!(chart.0["series"].as_array().unwrap().len(), 3);
        assert_eq!(chart.0["xAxis"]["data"].as_array().unwrap().len(), 5);
        assert!(chart.description().unwrap().contains("#1 eval · enabled"));
    }
}
