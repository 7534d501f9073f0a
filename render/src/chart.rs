//! The charts inside a picture: values over categories (iterations, batch sizes, ...), as
//! lines or grouped bars, on one or two value axes with round ticks, a shaded band (the
//! warm-up) and labelled horizontal marks (p50). Drawn from the figures given, nothing else.

use crate::svg::{Anchor, Font, Palette, Svg};
use crate::text;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Line,
    Bar,
}

/// One series: a value per category (`None`: not measured, drawn as a gap).
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub values: Vec<Option<f64>>,
    /// 0: the left axis, 1: the right one.
    pub axis: usize,
    pub color: &'static str,
    pub dash: Option<&'static str>,
    pub markers: bool,
}

/// A value axis: its unit, and whether it may start away from zero (then only when every
/// value lies in the upper half of the range, as the page's charts do).
#[derive(Clone, Debug)]
pub struct Axis {
    pub unit: String,
    pub may_zoom: bool,
}

/// A horizontal line at `value` on the left axis, labelled.
#[derive(Clone, Debug)]
pub struct Mark {
    pub label: String,
    pub value: f64,
    pub color: &'static str,
}

#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub kind: Kind,
    pub categories: Vec<String>,
    pub axes: Vec<Axis>,
    pub series: Vec<Series>,
    pub marks: Vec<Mark>,
    /// Categories `start..=end` shaded, with a label (the warm-up).
    pub shade: Option<(usize, usize, String)>,
    pub legend: bool,
}

/// Where something is drawn.
#[derive(Clone, Copy, Debug)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

/// Round tick values covering `lo..hi`, about `target` of them.
pub fn ticks(lo: f64, hi: f64, target: usize) -> (Vec<f64>, usize) {
    let (lo, hi) = if hi > lo {
        (lo, hi)
    } else {
        (
            lo - 0.5_f64.max(lo.abs() * 0.1),
            hi + 0.5_f64.max(hi.abs() * 0.1),
        )
    };
    let raw = (hi - lo) / target.max(1) as f64;
    if !(raw.is_finite() && raw > 0.0) {
        // Figures no axis can step through (beyond f64's range): the two ends alone.
        return (vec![lo, hi], 0);
    }
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let start = (lo / step).floor() * step;
    let mut out = vec![];
    for k in 0..20 {
        let v = start + k as f64 * step;
        out.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
        if v >= hi - step * 1e-9 {
            break;
        }
    }
    let mut decimals = (-step.log10().floor()).max(0.0) as usize;
    if (step / 10f64.powi(-(decimals as i32)) - 2.5).abs() < 1e-9 {
        decimals += 1;
    }
    (out, decimals.min(6))
}

/// A tick label: `decimals` places, thousands left as they are.
fn tick_label(v: f64, decimals: usize) -> String {
    format!("{v:.decimals$}")
}

struct Scale {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    decimals: usize,
    zoomed: bool,
}

impl Scale {
    fn of(values: &[f64], may_zoom: bool) -> Scale {
        let (lo, hi) = values
            .iter()
            .copied()
            .filter(|v| v.is_finite())
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
        let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) };
        let zoomed = may_zoom && lo > 0.0 && lo > hi / 2.0;
        let from = if zoomed { lo } else { lo.min(0.0) };
        let (ticks, decimals) = ticks(from, hi.max(from), 4);
        let lo = ticks.first().copied().unwrap_or(from);
        let hi = ticks.last().copied().unwrap_or(hi).max(lo + f64::EPSILON);
        Scale {
            lo,
            hi,
            ticks,
            decimals,
            zoomed,
        }
    }

    fn y(&self, v: f64, plot: Rect) -> f64 {
        plot.y + plot.h - (v - self.lo) / (self.hi - self.lo) * plot.h
    }
}

impl Chart {
    /// Draws the chart into `frame`; says whether an axis does not start at zero.
    pub fn draw(&self, svg: &mut Svg, frame: Rect, pal: &Palette) -> bool {
        let title_font = Font::new(22.0, pal.text).bold();
        let tick_font = Font::new(17.0, pal.muted);
        let scales: Vec<Scale> = (0..self.axes.len().max(1))
            .map(|a| {
                let mut values: Vec<f64> = self
                    .series
                    .iter()
                    .filter(|s| s.axis == a)
                    .flat_map(|s| s.values.iter().flatten().copied())
                    .collect();
                if a == 0 {
                    values.extend(self.marks.iter().map(|m| m.value));
                }
                let may_zoom =
                    self.kind == Kind::Line && self.axes.get(a).is_some_and(|x| x.may_zoom);
                Scale::of(&values, may_zoom)
            })
            .collect();
        let zoomed = scales.iter().any(|s| s.zoomed);
        let mut title = self.title.clone();
        if zoomed {
            title.push_str(" (axis not from 0)");
        }
        // No title: the plot starts at the top of the frame.
        let frame = if title.is_empty() {
            Rect {
                y: frame.y - 28.0,
                h: frame.h + 28.0,
                ..frame
            }
        } else {
            let title = text::fit(&title, title_font.size, true, frame.w);
            svg.text(frame.x, frame.y + 22.0, title_font, &title);
            frame
        };

        // Axis labels' widths decide the plot's left and right edges.
        let label_width = |s: &Scale| {
            s.ticks
                .iter()
                .map(|t| text::width(&tick_label(*t, s.decimals), tick_font.size, false))
                .fold(0.0, f64::max)
        };
        let left = frame.x + label_width(&scales[0]) + 10.0;
        let right = if scales.len() > 1 {
            frame.x + frame.w - label_width(&scales[1]) - 10.0
        } else {
            frame.x + frame.w - 8.0
        };
        let units_y = frame.y + 50.0;
        let legend_h = if self.legend { 30.0 } else { 0.0 };
        let plot = Rect {
            x: left,
            y: units_y + 14.0,
            w: (right - left).max(10.0),
            h: (frame.y + frame.h - legend_h - 30.0 - (units_y + 14.0)).max(10.0),
        };
        // Units above each axis.
        if let Some(a) = self.axes.first() {
            svg.text(frame.x, units_y, tick_font, &a.unit);
        }
        if let Some(a) = self.axes.get(1) {
            svg.text(
                frame.x + frame.w,
                units_y,
                tick_font.anchor(Anchor::End),
                &a.unit,
            );
        }
        let count = self.categories.len().max(1);
        let slot = plot.w / count as f64;
        let cx = |i: usize| plot.x + (i as f64 + 0.5) * slot;

        if let Some((start, end, label)) = &self.shade {
            if *start < count && start <= end {
                let x0 = plot.x + *start as f64 * slot;
                let x1 = plot.x + (*end.min(&(count - 1)) + 1) as f64 * slot;
                svg.rect(x0, plot.y, x1 - x0, plot.h, pal.shade, 0.18, 0.0);
                // Its name inside the band, where it fits.
                for size in [15.0, 13.0, 11.0] {
                    if text::width(label, size, false) + 2.0 <= x1 - x0 {
                        let f = Font::new(size, pal.muted).anchor(Anchor::Middle);
                        svg.text((x0 + x1) / 2.0, plot.y + size + 3.0, f, label);
                        break;
                    }
                }
            }
        }
        // Grid and ticks of the left axis; the right axis's labels at the same heights
        // only when they share them, else at their own.
        for t in &scales[0].ticks {
            let y = scales[0].y(*t, plot);
            svg.line((plot.x, y), (plot.x + plot.w, y), pal.grid, 1.0, None);
            svg.text(
                left - 8.0,
                y + 6.0,
                tick_font.anchor(Anchor::End),
                &tick_label(*t, scales[0].decimals),
            );
        }
        if let Some(s) = scales.get(1) {
            for t in &s.ticks {
                let y = s.y(*t, plot);
                svg.text(right + 8.0, y + 6.0, tick_font, &tick_label(*t, s.decimals));
            }
        }
        svg.line(
            (plot.x, plot.y + plot.h),
            (plot.x + plot.w, plot.y + plot.h),
            pal.border,
            1.5,
            None,
        );

        // Category labels: as many as fit without touching.
        let widest = self
            .categories
            .iter()
            .map(|c| text::width(c, tick_font.size, false))
            .fold(0.0, f64::max)
            + 14.0;
        let every = ((widest / slot).ceil() as usize).max(1);
        for (i, c) in self.categories.iter().enumerate() {
            if i % every == 0 || (i + 1 == count && every == 1) {
                let label = text::fit(c, tick_font.size, false, slot * every as f64 - 4.0);
                svg.text(
                    cx(i),
                    plot.y + plot.h + 22.0,
                    tick_font.anchor(Anchor::Middle),
                    &label,
                );
            }
        }

        match self.kind {
            Kind::Line => {
                for s in &self.series {
                    let scale = &scales[s.axis.min(scales.len() - 1)];
                    let mut run: Vec<(f64, f64)> = vec![];
                    let mut segments: Vec<Vec<(f64, f64)>> = vec![];
                    for (i, v) in s.values.iter().enumerate() {
                        match v {
                            Some(v) if v.is_finite() => run.push((cx(i), scale.y(*v, plot))),
                            _ => {
                                if !run.is_empty() {
                                    segments.push(std::mem::take(&mut run));
                                }
                            }
                        }
                    }
                    if !run.is_empty() {
                        segments.push(run);
                    }
                    for seg in &segments {
                        svg.polyline(seg, s.color, 3.0, s.dash);
                        if s.markers && count <= 60 {
                            for p in seg {
                                svg.circle(*p, 4.0, s.color);
                            }
                        }
                    }
                }
            }
            Kind::Bar => {
                let group = self.series.len().max(1);
                let bar = (slot * 0.8 / group as f64).min(60.0);
                let label_font = Font::new(15.0, pal.text).anchor(Anchor::Middle);
                let labels = count * group <= 16;
                for (k, s) in self.series.iter().enumerate() {
                    let scale = &scales[s.axis.min(scales.len() - 1)];
                    let base = scale.y(scale.lo.max(0.0).min(scale.hi), plot);
                    for (i, v) in s.values.iter().enumerate() {
                        let Some(v) = v.filter(|v| v.is_finite()) else {
                            continue;
                        };
                        let x = cx(i) - bar * group as f64 / 2.0 + k as f64 * bar;
                        let y = scale.y(v, plot);
                        svg.rect(
                            x + 1.0,
                            y.min(base),
                            bar - 2.0,
                            (base - y).abs(),
                            s.color,
                            1.0,
                            2.0,
                        );
                        if labels {
                            svg.text(
                                x + bar / 2.0,
                                y.min(base) - 5.0,
                                label_font,
                                &short_number(v),
                            );
                        }
                    }
                }
            }
        }
        for m in &self.marks {
            let y = scales[0].y(m.value, plot);
            svg.line((plot.x, y), (plot.x + plot.w, y), m.color, 2.0, Some("8 5"));
            let f = Font::new(16.0, m.color).bold().anchor(Anchor::End);
            svg.rect(
                plot.x + plot.w - text::width(&m.label, 16.0, true) - 10.0,
                y - 22.0,
                text::width(&m.label, 16.0, true) + 8.0,
                19.0,
                pal.bg,
                0.85,
                3.0,
            );
            svg.text(plot.x + plot.w - 6.0, y - 7.0, f, &m.label);
        }

        if self.legend {
            let f = Font::new(16.0, pal.muted);
            let mut x = frame.x;
            let y = frame.y + frame.h - 8.0;
            for s in &self.series {
                if x > frame.x + frame.w - 40.0 {
                    break;
                }
                match self.kind {
                    Kind::Line => svg.line((x, y - 6.0), (x + 28.0, y - 6.0), s.color, 3.0, s.dash),
                    Kind::Bar => svg.rect(x, y - 14.0, 22.0, 14.0, s.color, 1.0, 2.0),
                }
                let room = frame.x + frame.w - x - 36.0;
                let label = text::fit(&s.name, f.size, false, room);
                svg.text(x + 36.0, y, f, &label);
                x += 36.0 + text::width(&label, f.size, false) + 22.0;
            }
        }
        zoomed
    }
}

/// A value for a bar's label: three significant digits at most.
pub fn short_number(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        let (t, d) = ticks(0.0, 9.3, 4);
        assert_eq!(t, [0.0, 2.5, 5.0, 7.5, 10.0]);
        assert_eq!(d, 1);
        let (t, _) = ticks(10.8, 21.3, 4);
        assert_eq!(
            t,
            [10.0, 15.0, 20.0, 25.0],
            "the top tick covers the largest value"
        );
        let (t, d) = ticks(0.0, 130.0, 4);
        assert_eq!(t.first(), Some(&0.0));
        assert!(*t.last().unwrap() >= 130.0 && d == 0, "{t:?}");
        let (t, _) = ticks(5.0, 5.0, 4);
        assert!(t.len() >= 2, "a flat series still gets an axis: {t:?}");
        let (t, _) = ticks(-f64::MAX, f64::MAX, 4);
        assert_eq!(t.len(), 2, "no panic, no endless loop at the ends of f64");
    }
}
