//! The one font, compiled in: DejaVu Sans (regular and bold, `fonts/`, Bitstream Vera
//! licence), and text measured with it, so lines are fitted and wrapped to the widths the
//! rasteriser will draw them at. No system font is ever read.

use std::sync::OnceLock;

pub(crate) static REGULAR: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
pub(crate) static BOLD: &[u8] = include_bytes!("../fonts/DejaVuSans-Bold.ttf");

/// The family name the SVG asks for (and the only one the rasteriser knows).
pub const FAMILY: &str = "DejaVu Sans";

struct Metrics {
    upem: f64,
    face: ttf_parser::Face<'static>,
}

fn metrics(bold: bool) -> Option<&'static Metrics> {
    static FACES: OnceLock<[Option<Metrics>; 2]> = OnceLock::new();
    let faces = FACES.get_or_init(|| {
        let load = |data: &'static [u8]| {
            ttf_parser::Face::parse(data, 0).ok().map(|face| Metrics {
                upem: f64::from(face.units_per_em()),
                face,
            })
        };
        [load(REGULAR), load(BOLD)]
    });
    faces[usize::from(bold)].as_ref()
}

/// How wide `text` is at `size` px (advances, no kerning: within a percent for Latin text).
pub fn width(text: &str, size: f64, bold: bool) -> f64 {
    let Some(m) = metrics(bold) else {
        return text.chars().count() as f64 * size * 0.6;
    };
    let units: f64 = text
        .chars()
        .map(|c| {
            m.face
                .glyph_index(c)
                .and_then(|g| m.face.glyph_hor_advance(g))
                .map(f64::from)
                .unwrap_or(m.upem * 0.6)
        })
        .sum();
    units * size / m.upem
}

/// `text` cut to fit `max` px at `size`, ending in "…" when cut.
pub fn fit(text: &str, size: f64, bold: bool, max: f64) -> String {
    if width(text, size, bold) <= max {
        return text.to_string();
    }
    let mut out: String = String::new();
    for c in text.chars() {
        let candidate = format!("{out}{c}…");
        if width(&candidate, size, bold) > max {
            break;
        }
        out.push(c);
    }
    format!("{}…", out.trim_end())
}

/// The largest size from `size` down to `min` at which `text` fits `max` px (then cut to
/// fit at `min` if it still does not).
pub fn shrink(text: &str, size: f64, min: f64, bold: bool, max: f64) -> (String, f64) {
    let mut s = size;
    while s > min && width(text, s, bold) > max {
        s -= 1.0;
    }
    (fit(text, s, bold, max), s)
}

/// `text` in lines of at most `max` px, at most `lines` of them (the last cut with "…"
/// when the text goes on). Words longer than a line are cut.
pub fn wrap(text: &str, size: f64, bold: bool, max: f64, lines: usize) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    let mut current = String::new();
    let words: Vec<&str> = text.split_whitespace().collect();
    for (i, word) in words.iter().enumerate() {
        let candidate = if current.is_empty() {
            word.to_string()
        } else {
            format!("{current} {word}")
        };
        if width(&candidate, size, bold) <= max || current.is_empty() {
            current = candidate;
            continue;
        }
        out.push(std::mem::take(&mut current));
        if out.len() == lines {
            let rest = words[i..].join(" ");
            let last = out.pop().unwrap_or_default();
            out.push(fit(&format!("{last} {rest}"), size, bold, max));
            return out;
        }
        current = word.to_string();
    }
    if !current.is_empty() {
        if out.len() == lines {
            let last = out.pop().unwrap_or_default();
            out.push(fit(&format!("{last} {current}"), size, bold, max));
        } else {
            out.push(current);
        }
    }
    out.into_iter().map(|l| fit(&l, size, bold, max)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_font_is_compiled_in_and_measures() {
        let w = width("12.345 ms", 20.0, false);
        assert!(w > 60.0 && w < 120.0, "{w}");
        assert!(width("12.345 ms", 20.0, true) > w);
    }

    #[test]
    fn lines_fit_and_wrap_within_their_width() {
        let long = "the quick brown fox jumps over the lazy dog ".repeat(6);
        let cut = fit(&long, 18.0, false, 300.0);
        assert!(
            cut.ends_with('…') && width(&cut, 18.0, false) <= 300.0,
            "{cut}"
        );
        let lines = wrap(&long, 18.0, false, 300.0, 3);
        assert_eq!(lines.len(), 3);
        assert!(
            lines.iter().all(|l| width(l, 18.0, false) <= 300.0),
            "{lines:?}"
        );
        assert!(lines[2].ends_with('…'));
        assert_eq!(wrap("short", 18.0, false, 300.0, 3), ["short"]);
        let (text, size) = shrink("a title that is rather long", 40.0, 20.0, true, 300.0);
        assert!(size < 40.0 && width(&text, size, true) <= 300.0);
    }
}
