//! A pitfall experiment's picture: its verdict, reason, chart and figures.

use protocol::{ChartKind, PitfallReport, Verdict};

use super::{canvas, footer, kicker, provenance, title, MARGIN, W};
use crate::chart::{Axis, Chart, Kind, Rect, Series};
use crate::svg::{Font, Palette};
use crate::{text, ImageOptions};

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
