//! `/compare?runs=a,b,...`: recorded runs side by side, with ratios against the first.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;
use protocol::{format_bytes, Report};

use super::{compare_ids, load, Loaded, RECORDS_ELEMENT};

/// `/compare?runs=a,b,...`: recorded runs side by side, each column linked to its permalink.
#[component]
pub fn ComparePage() -> impl IntoView {
    let (ids, ignored) = compare_ids(
        &use_query_map()
            .with_untracked(|q| q.get("runs"))
            .unwrap_or_default(),
    );
    let none = ids.is_empty();
    let ignored = ignored
        .into_iter()
        .map(|m| view! { <p class="error" role="alert" data-testid="compare-ignored">{m}</p> })
        .collect_view();
    let (state, json) = load(ids);
    let runs = Memo::new(move |_| {
        state.with(|s| {
            s.as_ref()
                .map(|v| {
                    v.iter()
                        .filter_map(|l| match l {
                            Loaded::Found(r) => r.run().map(|rep| (r.id.clone(), rep.clone())),
                            Loaded::Missing(_) => None,
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
    });
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let reports: Vec<Report> = runs.with(|r| r.iter().map(|(_, rep)| rep.clone()).collect());
        if !reports.is_empty() {
            crate::charts::render(
                "compare-chart",
                crate::charts::comparison_chart("Recorded runs side by side", &reports),
            );
            // The traced passes overlaid (runs of the first run's model; older records
            // have none).
            let labelled: Vec<(String, &Report)> = reports
                .iter()
                .enumerate()
                .map(|(i, r)| (format!("#{} {}", i + 1, r.spec.label()), r))
                .collect();
            crate::charts::render("compare-trace-chart", crate::charts::trace_chart(&labelled));
        }
    });
    let problems = move || {
        state.with(|s| {
            s.as_ref().map(|v| {
                v.iter()
                    .filter_map(|l| match l {
                        Loaded::Missing(m) => Some(m.clone()),
                        Loaded::Found(r) if r.run().is_none() => Some(format!(
                            "{} is a pitfall experiment, not a run: open /runs/{}",
                            r.id, r.id
                        )),
                        Loaded::Found(_) => None,
                    })
                    .map(|m| view! { <p class="error" role="alert">{m}</p> })
                    .collect_view()
            })
        })
    };
    view! {
        <script type="application/json" id=RECORDS_ELEMENT inner_html=json></script>
        <div class="record compare">
            <section class="panel">
                <h1>"Recorded runs side by side"</h1>
                {none.then(|| view! { <p class="explain">"Add runs with ?runs=ID,ID (from their permalinks), or use “Compare with another run” on a run's page."</p> })}
                {ignored}
                {problems}
                {move || runs.with(|r| (!r.is_empty()).then(|| compare_table(r)))}
            </section>
            <section class="panel"><div id="compare-chart" class="chart" data-testid="compare-chart"></div></section>
            <section class="panel"><div id="compare-trace-chart" class="chart tall" data-testid="compare-trace-chart"></div></section>
        </div>
    }
}

fn compare_table(runs: &[(String, Report)]) -> impl IntoView + use<> {
    let first = runs[0].1.clone();
    let ratio = |x: f64, base: f64| {
        if base > 0.0 {
            format!(" ({:.2}×)", x / base)
        } else {
            String::new()
        }
    };
    type Row = (&'static str, Box<dyn Fn(&Report) -> String>);
    let f = first.clone();
    let g = first.clone();
    let h = first.clone();
    let rows: Vec<Row> = vec![
        (
            "model",
            Box::new(|r: &Report| r.spec.model.display_name().to_string()),
        ),
        ("settings", Box::new(|r: &Report| r.spec.label())),
        (
            "device",
            Box::new(|r: &Report| r.env.device_label()),
        ),
        (
            "measured at",
            Box::new(|r: &Report| r.env.measured_at.clone()),
        ),
        (
            "libtorch · threads",
            Box::new(|r: &Report| format!("{} · {}", r.env.libtorch_version, r.env.threads)),
        ),
        (
            "p50 latency",
            Box::new(move |r: &Report| {
                format!(
                    "{:.3} ms{}",
                    r.latency_ms.p50,
                    ratio(r.latency_ms.p50, f.latency_ms.p50)
                )
            }),
        ),
        (
            "median latency against #1 (decided against run-to-run noise)",
            Box::new(move |r: &Report| {
                if r == &h {
                    return "—".to_string();
                }
                crate::explain::latency_change(r, &h)
                    .unwrap_or_else(|| "not comparable: no positive median".into())
            }),
        ),
        (
            "spread (IQR)",
            Box::new(|r: &Report| {
                crate::explain::spread(r).unwrap_or_else(|| "absent: under 4 iterations".into())
            }),
        ),
        (
            "p95 / p99",
            Box::new(|r: &Report| format!("{:.3} / {:.3} ms", r.latency_ms.p95, r.latency_ms.p99)),
        ),
        (
            "throughput",
            Box::new(|r: &Report| format!("{:.1} samples/s", r.throughput_per_s)),
        ),
        (
            "peak above baseline",
            Box::new(move |r: &Report| {
                let (x, b) = (
                    r.memory.peak_above_baseline_bytes as f64,
                    g.memory.peak_above_baseline_bytes as f64,
                );
                format!(
                    "{}{}",
                    format_bytes(r.memory.peak_above_baseline_bytes),
                    ratio(x, b)
                )
            }),
        ),
        (
            "baseline",
            Box::new(|r: &Report| format_bytes(r.memory.baseline_bytes)),
        ),
        (
            "peak reserved",
            Box::new(|r: &Report| {
                r.memory
                    .peak_reserved_bytes
                    .map(format_bytes)
                    .unwrap_or_else(|| "absent (CPU)".into())
            }),
        ),
        (
            "memory figures",
            Box::new(|r: &Report| r.memory.source.short().to_string()),
        ),
    ];
    // The fp16/bf16-on-a-CPU caveat travels with the figures: a row only where a run has one.
    let mut rows = rows;
    if runs.iter().any(|(_, r)| r.caveat().is_some()) {
        rows.push((
            "caveat",
            Box::new(|r: &Report| r.caveat().unwrap_or_else(|| "none".into())),
        ));
    }
    let head = runs
        .iter()
        .enumerate()
        .map(|(i, (id, _))| view! { <th><a href=format!("/runs/{id}") rel="external">{format!("#{} {id}", i + 1)}</a></th> })
        .collect_view();
    let body = rows
        .into_iter()
        .map(|(name, cell)| {
            let cells = runs
                .iter()
                .enumerate()
                .map(|(i, (_, r))| view! { <td data-label=format!("#{}", i + 1)>{cell(r)}</td> })
                .collect_view();
            view! { <tr class=if name == "caveat" { "caveat" } else { "" }><th>{name}</th>{cells}</tr> }
        })
        .collect_view();
    view! {
        <div class="table-scroll">
            <table class="summary side-by-side" data-testid="compare-table">
                <thead><tr><th>"ratios against #1"</th>{head}</tr></thead>
                <tbody>{body}</tbody>
            </table>
        </div>
    }
}
