//! The three pictures, laid out on a 1200×630 drawing: a run (headline figures, latency
//! and memory per iteration), runs side by side (p50 and peak per run, with ratios against
//! the first, as `/compare` prints them) and a pitfall experiment (verdict, reason, its
//! chart and figures). Every text is the record's, formatted as the page formats it.
//! This module holds what the three share (the canvas, its kicker, title, headline figures
//! and provenance foot); each picture is in its own file.

mod compare;
mod pitfall;
mod run;

pub use compare::{compare_cells, compare_svg, compare_title};
pub use pitfall::{pitfall_svg, verdict_word};
pub(crate) use run::{latency_chart, memory_chart};
pub use run::{run_svg, run_title};


use crate::svg::{Font, Palette, Svg};
use crate::{short_date, text, ImageOptions};

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
