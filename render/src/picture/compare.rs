//! Runs side by side: p50 and peak per run, with ratios against the first, as `/compare`
//! prints them.

use protocol::{format_bytes, Report};

use super::run::run_title;
use super::{canvas, footer, kicker, title, MARGIN, W};
use crate::svg::{Font, Palette};
use crate::{format_ms, short_date, text, ImageOptions};

/// `#1 eval · no_grad · batch 8` (with the model when the runs' models differ).
fn compare_label(i: usize, r: &Report, with_model: bool) -> String {
    if with_model {
        format!(
            "#{} {} · {}",
            i + 1,
            r.spec.model.display_name(),
            r.spec.label()
        )
    } else {
        format!("#{} {}", i + 1, r.spec.label())
    }
}

fn ratio(x: f64, base: f64) -> String {
    if base > 0.0 {
        format!(" ({:.2}×)", x / base)
    } else {
        String::new()
    }
}

/// The compared runs' title.
pub fn compare_title(runs: &[&Report]) -> String {
    let same_model = runs.windows(2).all(|w| w[0].spec.model == w[1].spec.model);
    match runs.first() {
        Some(r) if same_model && runs.len() > 1 => {
            format!(
                "{}: {} runs side by side",
                r.spec.model.display_name(),
                runs.len()
            )
        }
        Some(r) if runs.len() == 1 => run_title(r),
        _ => format!("{} recorded runs side by side", runs.len()),
    }
}

/// Each run's p50 and peak as `/compare` prints them, ratios against #1.
pub fn compare_cells(runs: &[&Report]) -> Vec<(String, String)> {
    let Some(first) = runs.first() else {
        return vec![];
    };
    runs.iter()
        .map(|r| {
            (
                format!(
                    "{}{}",
                    format_ms(r.latency_ms.p50),
                    ratio(r.latency_ms.p50, first.latency_ms.p50)
                ),
                format!(
                    "{}{}",
                    format_bytes(r.memory.peak_above_baseline_bytes),
                    ratio(
                        r.memory.peak_above_baseline_bytes as f64,
                        first.memory.peak_above_baseline_bytes as f64
                    )
                ),
            )
        })
        .collect()
}

fn compare_provenance(runs: &[&Report]) -> String {
    let mut devices: Vec<String> = vec![];
    let mut torch: Vec<String> = vec![];
    let mut dates: Vec<String> = vec![];
    for r in runs {
        for (list, v) in [
            (&mut devices, r.env.device_label()),
            (&mut torch, format!("libtorch {}", r.env.libtorch_version)),
            (
                &mut dates,
                short_date(&r.env.measured_at).chars().take(10).collect(),
            ),
        ] {
            if !list.contains(&v) {
                list.push(v);
            }
        }
    }
    dates.sort();
    let date = match (dates.first(), dates.last()) {
        (Some(a), Some(b)) if a != b => format!("{a} to {b}"),
        (Some(a), _) => a.clone(),
        _ => String::new(),
    };
    let version = runs
        .first()
        .map(|r| r.env.gradless_version.clone())
        .unwrap_or_default();
    format!(
        "{} · {} · {date} · measured by Gradless {version}",
        devices.join(", "),
        torch.join(", ")
    )
}

/// Recorded runs side by side: one row per run, p50 and peak as bars with their figures
/// and ratios against the first.
pub fn compare_svg(runs: &[&Report], o: &ImageOptions) -> String {
    let pal = Palette::of(o.theme);
    let cells = compare_cells(runs);
    let same_model = runs.windows(2).all(|w| w[0].spec.model == w[1].spec.model);
    let labels: Vec<String> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| compare_label(i, r, !same_model))
        .collect();
    let desc = labels
        .iter()
        .zip(&cells)
        .map(|(l, (p50, peak))| format!("{l}: p50 {p50}, peak {peak} above baseline"))
        .collect::<Vec<_>>()
        .join("; ");
    let heading = compare_title(runs);
    let mut svg = canvas(
        o,
        &pal,
        &heading,
        &format!("{desc}. {}.", compare_provenance(runs)),
    );
    kicker(&mut svg, &pal, "GRADLESS · RECORDED RUNS SIDE BY SIDE");
    title(&mut svg, &pal, &heading, 96.0);

    let label_w = 400.0;
    let col_w = 330.0;
    let col_x = [
        MARGIN + label_w + 24.0,
        MARGIN + label_w + 24.0 + col_w + 20.0,
    ];
    let head = Font::new(18.0, pal.muted);
    svg.text(MARGIN, 146.0, head, "run");
    svg.text(col_x[0], 146.0, head, "p50 latency (× #1)");
    svg.text(col_x[1], 146.0, head, "peak above baseline (× #1)");
    svg.line((MARGIN, 158.0), (W - MARGIN, 158.0), pal.border, 1.0, None);

    let rows = runs.len().max(1) as f64;
    let row_h = ((566.0 - 166.0) / rows).min(100.0);
    let max_p50 = runs.iter().map(|r| r.latency_ms.p50).fold(0.0, f64::max);
    let max_peak = runs
        .iter()
        .map(|r| r.memory.peak_above_baseline_bytes as f64)
        .fold(0.0, f64::max);
    let value_size = (row_h * 0.32).clamp(16.0, 28.0);
    let bar_h = (row_h * 0.2).clamp(6.0, 14.0);
    for (i, r) in runs.iter().enumerate() {
        // Few rows sit in the middle of the space, not under the header.
        let y = 166.0 + ((566.0 - 166.0) - row_h * rows) / 2.0 + row_h * i as f64;
        if i % 2 == 1 {
            svg.rect(
                MARGIN - 12.0,
                y,
                W - 2.0 * MARGIN + 24.0,
                row_h,
                pal.grid,
                0.6,
                4.0,
            );
        }
        let text_y = y + row_h * 0.5 + value_size * 0.1;
        let (label, size) = text::shrink(&labels[i], value_size, 14.0, false, label_w);
        svg.text(
            MARGIN,
            text_y + bar_h * 0.5,
            Font::new(size, pal.text),
            &label,
        );
        let (p50, peak) = &cells[i];
        for (k, (value, frac, color)) in [
            (
                p50,
                r.latency_ms.p50 / max_p50.max(f64::MIN_POSITIVE),
                pal.series[0],
            ),
            (
                peak,
                r.memory.peak_above_baseline_bytes as f64 / max_peak.max(f64::MIN_POSITIVE),
                pal.series[1],
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let x = col_x[k];
            // A figure is never cut: smaller type instead.
            let (value, size) = text::shrink(value, value_size, 12.0, true, col_w);
            svg.text(x, text_y, Font::new(size, pal.text).bold(), &value);
            svg.rect(x, text_y + 7.0, col_w, bar_h, pal.grid, 1.0, bar_h / 2.0);
            svg.rect(
                x,
                text_y + 7.0,
                (col_w * frac.clamp(0.0, 1.0)).max(bar_h),
                bar_h,
                color,
                1.0,
                bar_h / 2.0,
            );
        }
    }
    footer(&mut svg, &pal, &compare_provenance(runs));
    svg.finish()
}
