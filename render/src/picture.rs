//! The three pictures, laid out on a 1200×630 drawing: a run (headline figures, latency
//! and memory per iteration), runs side by side (p50 and peak per run, with ratios against
//! the first, as `/compare` prints them) and a pitfall experiment (verdict, reason, its
//! chart and figures). Every text is the record's, formatted as the page formats it.

use protocol::{format_bytes, ChartKind, PitfallReport, Report, Verdict};

use crate::chart::{Axis, Chart, Kind, Mark, Rect, Series};
use crate::svg::{Font, Palette, Svg};
use crate::{format_ms, short_date, text, ImageOptions};

const W: f64 = crate::VIEW_WIDTH as f64;
const H: f64 = crate::VIEW_HEIGHT as f64;
const MARGIN: f64 = 48.0;
const MIB: f64 = 1024.0 * 1024.0;

fn canvas(o: &ImageOptions, pal: &Palette, title: &str, desc: &str) -> Svg {
    let mut svg = Svg::new(o.width, o.height(), (W, H), title, desc, pal.bg);
    svg.rect(0.0, 0.0, W, 8.0, pal.accent, 1.0, 0.0);
    svg
}

/// The small line above the title: what the picture is.
fn kicker(svg: &mut Svg, pal: &Palette, what: &str) {
    svg.text(MARGIN, 50.0, Font::new(17.0, pal.accent).bold(), what);
}

fn title(svg: &mut Svg, pal: &Palette, title: &str, y: f64) {
    let (t, size) = text::shrink(title, 40.0, 28.0, true, W - 2.0 * MARGIN);
    svg.text(MARGIN, y, Font::new(size, pal.text).bold(), &t);
}

/// The provenance line at the foot, with a rule above it.
fn footer(svg: &mut Svg, pal: &Palette, line: &str) {
    svg.line((MARGIN, 584.0), (W - MARGIN, 584.0), pal.border, 1.0, None);
    let (t, size) = text::shrink(line, 18.0, 14.0, false, W - 2.0 * MARGIN);
    svg.text(MARGIN, 612.0, Font::new(size, pal.muted), &t);
}

/// One headline figure: a label over a large value.
fn figure(svg: &mut Svg, pal: &Palette, x: f64, width: f64, label: &str, value: &str) {
    svg.text(
        x,
        150.0,
        Font::new(18.0, pal.muted),
        &text::fit(label, 18.0, false, width),
    );
    let (v, size) = text::shrink(value, 46.0, 26.0, true, width);
    svg.text(x, 200.0, Font::new(size, pal.text).bold(), &v);
}

/// Where and when, as the pictures print it: device, libtorch, CUDA, threads, date.
fn provenance(env: &protocol::EnvStamp) -> String {
    let mut parts = vec![
        env.device_label(),
        format!("libtorch {}", env.libtorch_version),
    ];
    if let Some(c) = &env.cuda_version {
        parts.push(format!("CUDA {c}"));
    }
    parts.push(format!(
        "{} CPU thread{}",
        env.threads,
        if env.threads == 1 { "" } else { "s" }
    ));
    parts.push(short_date(&env.measured_at));
    parts.push(format!("measured by Gradless {}", env.gradless_version));
    parts.join(" · ")
}

/// The run's title: model and settings, as its page heads it.
pub fn run_title(r: &Report) -> String {
    format!("{} · {}", r.spec.model.display_name(), r.spec.label())
}

/// The sentence a screen reader reads for a run's picture.
pub fn run_description(r: &Report) -> String {
    format!(
        "{}: p50 latency {}, peak {} above the baseline of {}, {:.1} samples/s over {} timed iterations. {}.",
        run_title(r),
        format_ms(r.latency_ms.p50),
        format_bytes(r.memory.peak_above_baseline_bytes),
        format_bytes(r.memory.baseline_bytes),
        r.throughput_per_s,
        r.samples.len(),
        provenance(&r.env)
    )
}

/// A recorded run: headline figures, then latency and memory per iteration (warm-up
/// shaded), then where and when it was measured.
pub fn run_svg(r: &Report, o: &ImageOptions) -> String {
    let pal = Palette::of(o.theme);
    let mut svg = canvas(o, &pal, &run_title(r), &run_description(r));
    kicker(&mut svg, &pal, "GRADLESS · RECORDED RUN");
    title(&mut svg, &pal, &run_title(r), 96.0);
    let col = (W - 2.0 * MARGIN) / 3.0;
    figure(
        &mut svg,
        &pal,
        MARGIN,
        col - 24.0,
        "p50 latency",
        &format_ms(r.latency_ms.p50),
    );
    figure(
        &mut svg,
        &pal,
        MARGIN + col,
        col - 24.0,
        "peak above baseline",
        &format_bytes(r.memory.peak_above_baseline_bytes),
    );
    figure(
        &mut svg,
        &pal,
        MARGIN + 2.0 * col,
        col - 24.0,
        "throughput",
        &format!("{:.1} samples/s", r.throughput_per_s),
    );

    // A caveat travels with the figures (fp16 on a CPU); so does a leak.
    let mut notes = vec![];
    if let Some(c) = r.caveat() {
        notes.push(c);
    }
    if r.memory.leaked_bytes > 0 {
        notes.push(format!(
            "{} was not given back after the run.",
            format_bytes(r.memory.leaked_bytes)
        ));
    }
    let note_lines: Vec<String> = notes
        .iter()
        .flat_map(|n| text::wrap(n, 16.0, false, W - 2.0 * MARGIN, 2))
        .take(2)
        .collect();
    let bottom = 572.0 - 22.0 * note_lines.len() as f64;
    for (i, l) in note_lines.iter().enumerate() {
        svg.text(
            MARGIN,
            bottom + 20.0 + 22.0 * i as f64,
            Font::new(16.0, pal.note),
            l,
        );
    }

    let latency = latency_chart(r, &pal);
    let memory = memory_chart(r, &pal);
    let half = (W - 2.0 * MARGIN - 48.0) / 2.0;
    let top = 232.0;
    latency.draw(
        &mut svg,
        Rect {
            x: MARGIN,
            y: top,
            w: half,
            h: bottom - top,
        },
        &pal,
    );
    memory.draw(
        &mut svg,
        Rect {
            x: MARGIN + half + 48.0,
            y: top,
            w: half,
            h: bottom - top,
        },
        &pal,
    );
    footer(&mut svg, &pal, &provenance(&r.env));
    svg.finish()
}

/// A run's iterations as the page names them (`w1`.. for the warm-up, then 1..), and the
/// warm-up band.
fn iterations(r: &Report) -> (Vec<String>, Option<(usize, usize, String)>, Vec<&protocol::Sample>) {
    let warm = r.warmup.len();
    let categories: Vec<String> = (1..=warm)
        .map(|i| format!("w{i}"))
        .chain((1..=r.samples.len()).map(|i| i.to_string()))
        .collect();
    let shade = (warm > 0).then(|| (0, warm - 1, "warm-up".to_string()));
    let all: Vec<&protocol::Sample> = r.warmup.iter().chain(&r.samples).collect();
    (categories, shade, all)
}

/// Latency per iteration, warm-up shaded, p50 marked.
pub(crate) fn latency_chart(r: &Report, pal: &Palette) -> Chart {
    let (categories, shade, all) = iterations(r);
    Chart {
        title: "Latency per iteration".into(),
        kind: Kind::Line,
        categories,
        axes: vec![Axis {
            unit: "ms".into(),
            may_zoom: true,
        }],
        series: vec![Series {
            name: "latency (ms)".into(),
            values: all.iter().map(|s| Some(s.latency_ms)).collect(),
            axis: 0,
            color: pal.series[0],
            dash: None,
            markers: true,
        }],
        marks: vec![Mark {
            label: format!("p50 {}", format_ms(r.latency_ms.p50)),
            value: r.latency_ms.p50,
            color: pal.accent,
        }],
        shade,
        legend: false,
    }
}

/// Memory above the baseline per iteration: the pass's peak, what it left allocated and
/// (a caching allocator's) reserved.
pub(crate) fn memory_chart(r: &Report, pal: &Palette) -> Chart {
    let (categories, shade, all) = iterations(r);
    let base = r.memory.baseline_bytes as f64;
    let above = |b: u64| ((b as f64 - base).max(0.0)) / MIB;
    let mut memory_series = vec![
        Series {
            name: "peak during the pass".into(),
            values: all.iter().map(|s| Some(above(s.peak_bytes))).collect(),
            axis: 0,
            color: pal.series[1],
            dash: None,
            markers: true,
        },
        Series {
            name: "allocated after it".into(),
            values: all.iter().map(|s| Some(above(s.allocated_bytes))).collect(),
            axis: 0,
            color: pal.series[2],
            dash: Some("9 6"),
            markers: false,
        },
    ];
    if all.iter().any(|s| s.reserved_bytes.is_some()) {
        memory_series.push(Series {
            name: "reserved".into(),
            values: all.iter().map(|s| s.reserved_bytes.map(above)).collect(),
            axis: 0,
            color: pal.series[3],
            dash: Some("2 5"),
            markers: false,
        });
    }
    Chart {
        title: format!(
            "Memory above the {} baseline",
            format_bytes(r.memory.baseline_bytes)
        ),
        kind: Kind::Line,
        categories,
        axes: vec![Axis {
            unit: format!("MiB · {}", r.memory.source.short()),
            may_zoom: false,
        }],
        series: memory_series,
        marks: vec![],
        shade,
        legend: true,
    }
}

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

/// The words a verdict is shown with on the page.
pub fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Confirmed => "Confirmed",
        Verdict::Refuted => "Refuted here",
        Verdict::NotApplicable => "Not applicable here",
        Verdict::Inconclusive => "Inconclusive here",
    }
}

/// A pitfall experiment: the card's title and claim, the verdict with its reason, the
/// experiment's chart and its figures.
pub fn pitfall_svg(p: &PitfallReport, card_title: &str, o: &ImageOptions) -> String {
    let pal = Palette::of(o.theme);
    let word = verdict_word(p.verdict);
    let desc = format!(
        "{card_title}: {word} — {}. {}",
        p.reason.trim_end_matches('.'),
        provenance(&p.env)
    );
    let mut svg = canvas(o, &pal, &format!("{card_title}: {word}"), &desc);
    kicker(&mut svg, &pal, "GRADLESS · PITFALL EXPERIMENT");
    title(&mut svg, &pal, card_title, 96.0);
    let claim = text::wrap(&p.claim, 19.0, false, W - 2.0 * MARGIN, 1);
    for (i, l) in claim.iter().enumerate() {
        svg.text(
            MARGIN,
            128.0 + 24.0 * i as f64,
            Font::new(19.0, pal.muted),
            l,
        );
    }
    let colour = pal.verdict[match p.verdict {
        Verdict::Confirmed => 0,
        Verdict::Refuted => 1,
        Verdict::NotApplicable => 2,
        Verdict::Inconclusive => 3,
    }];
    let pill_w = text::width(word, 24.0, true) + 32.0;
    svg.rect(MARGIN, 148.0, pill_w, 44.0, colour, 0.16, 8.0);
    svg.text(MARGIN + 16.0, 179.0, Font::new(24.0, colour).bold(), word);
    let reason_x = MARGIN + pill_w + 20.0;
    let reason = text::wrap(&p.reason, 18.0, false, W - MARGIN - reason_x, 3);
    let reason_top = if reason.len() == 1 { 177.0 } else { 165.0 };
    for (i, l) in reason.iter().enumerate() {
        svg.text(
            reason_x,
            reason_top + 23.0 * i as f64,
            Font::new(18.0, pal.text),
            l,
        );
    }

    // The prediction locked before the run, beside what was measured.
    let top = match &p.prediction {
        Some(pr) => {
            let line = format!("Prediction: {}", pr.sentence());
            svg.text(MARGIN, 242.0, Font::new(17.0, pal.text).bold(), &text::fit(&line, 17.0, true, W - 2.0 * MARGIN));
            264.0
        }
        None => 240.0,
    };
    let drawable = p
        .series
        .iter()
        .any(|s| s.y.iter().any(|v| v.is_some_and(f64::is_finite)));
    let figures_x = if drawable { 800.0 } else { MARGIN };
    if drawable {
        let mut units: Vec<String> = vec![];
        for s in &p.series {
            if !units.contains(&s.unit) && units.len() < 2 {
                units.push(s.unit.clone());
            }
        }
        let series = p
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| Series {
                name: s.name.clone(),
                values: s.y.clone(),
                axis: units.iter().position(|u| *u == s.unit).unwrap_or(0),
                color: pal.series[i % pal.series.len()],
                dash: [None, Some("9 6"), Some("2 5"), None][i % 4],
                markers: true,
            })
            .collect();
        let chart = Chart {
            title: String::new(),
            kind: match p.chart {
                ChartKind::Line => Kind::Line,
                ChartKind::Bar => Kind::Bar,
            },
            categories: p.series.first().map(|s| s.x.clone()).unwrap_or_default(),
            axes: units
                .iter()
                .map(|u| Axis {
                    unit: u.clone(),
                    may_zoom: false,
                })
                .collect(),
            series,
            marks: vec![],
            shade: None,
            legend: true,
        };
        chart.draw(
            &mut svg,
            Rect {
                x: MARGIN,
                y: top,
                w: 720.0,
                h: 572.0 - top,
            },
            &pal,
        );
    }
    // The measured figures, as the card lists them.
    let fw = W - MARGIN - figures_x;
    let per_row = 48.0;
    let rows = ((572.0 - top) / per_row) as usize;
    let columns = if drawable { 1 } else { 2 };
    let col_w = fw / columns as f64;
    for (i, f) in p.figures.iter().take(rows * columns).enumerate() {
        let (c, row) = (i / rows, i % rows);
        let x = figures_x + c as f64 * col_w;
        let y = top + row as f64 * per_row;
        svg.text(
            x,
            y + 14.0,
            Font::new(15.0, pal.muted),
            &text::fit(&f.name, 15.0, false, col_w - 16.0),
        );
        let (value, size) = text::shrink(&f.display(), 21.0, 12.0, true, col_w - 16.0);
        svg.text(x, y + 38.0, Font::new(size, pal.text).bold(), &value);
    }
    footer(&mut svg, &pal, &provenance(&p.env));
    svg.finish()
}
