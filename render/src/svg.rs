//! A small SVG writer: shapes and text with fixed-precision coordinates (so the same
//! picture is the same bytes), every text escaped, and the two themes' colours.

use std::fmt::Write;

use crate::Theme;

/// The colours of one theme (the page's own, from style/main.css).
#[derive(Clone, Copy, Debug)]
pub struct Palette {
    pub bg: &'static str,
    pub text: &'static str,
    pub muted: &'static str,
    pub border: &'static str,
    pub grid: &'static str,
    pub accent: &'static str,
    pub note: &'static str,
    /// Series colours, in order.
    pub series: [&'static str; 4],
    /// The warm-up band.
    pub shade: &'static str,
    /// confirmed, refuted, not applicable, inconclusive.
    pub verdict: [&'static str; 4],
}

impl Palette {
    pub fn of(theme: Theme) -> Palette {
        match theme {
            Theme::Light => Palette {
                bg: "#ffffff",
                text: "#1d1f23",
                muted: "#5b616b",
                border: "#d9dbe0",
                grid: "#eceef1",
                accent: "#c2410c",
                note: "#8a5a00",
                series: ["#2563eb", "#c2410c", "#0f766e", "#7c3aed"],
                shade: "#a0a0a0",
                verdict: ["#15803d", "#b91c1c", "#5b616b", "#b45309"],
            },
            Theme::Dark => Palette {
                bg: "#1c1f24",
                text: "#e7e9ec",
                muted: "#a2a8b3",
                border: "#30353d",
                grid: "#2a2e35",
                accent: "#fb923c",
                note: "#f5c26b",
                series: ["#60a5fa", "#fb923c", "#2dd4bf", "#c4b5fd"],
                shade: "#8a8f98",
                verdict: ["#4ade80", "#f87171", "#a2a8b3", "#fbbf24"],
            },
        }
    }
}

/// A coordinate with one decimal, never `-0.0`.
pub fn n(v: f64) -> String {
    let v = if v.is_finite() { v } else { 0.0 };
    let s = format!("{v:.1}");
    let s = s.strip_suffix(".0").map(str::to_string).unwrap_or(s);
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// `s` safe as XML text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // XML 1.0 has no place for other control characters.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => {}
            c => out.push(c),
        }
    }
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

impl Anchor {
    fn attr(self) -> &'static str {
        match self {
            Anchor::Start => "",
            Anchor::Middle => " text-anchor=\"middle\"",
            Anchor::End => " text-anchor=\"end\"",
        }
    }
}

/// How a piece of text is drawn.
#[derive(Clone, Copy, Debug)]
pub struct Font {
    pub size: f64,
    pub bold: bool,
    pub color: &'static str,
    pub anchor: Anchor,
}

impl Font {
    pub fn new(size: f64, color: &'static str) -> Font {
        Font {
            size,
            bold: false,
            color,
            anchor: Anchor::Start,
        }
    }
    pub fn bold(mut self) -> Font {
        self.bold = true;
        self
    }
    pub fn anchor(mut self, anchor: Anchor) -> Font {
        self.anchor = anchor;
        self
    }
}

/// An SVG document being written.
pub struct Svg {
    out: String,
}

impl Svg {
    /// A `width`×`height` px picture of a `view_w`×`view_h` drawing, with its accessible
    /// title and description, on the theme's background.
    pub fn new(
        width: u32,
        height: u32,
        view: (f64, f64),
        title: &str,
        desc: &str,
        bg: &str,
    ) -> Svg {
        let mut out = String::with_capacity(16 * 1024);
        let _ = write!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {} {}\" \
             role=\"img\" aria-labelledby=\"t d\" font-family=\"{}, Verdana, sans-serif\">\
             <title id=\"t\">{}</title><desc id=\"d\">{}</desc>\
             <rect width=\"{}\" height=\"{}\" fill=\"{bg}\"/>",
            n(view.0),
            n(view.1),
            crate::text::FAMILY,
            escape(title),
            escape(desc),
            n(view.0),
            n(view.1),
        );
        Svg { out }
    }

    /// A rectangle: `opacity` below 1 fades its fill, `rx` rounds its corners.
    #[allow(clippy::too_many_arguments)] // a rectangle's own attributes, each named
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, opacity: f64, rx: f64) {
        let _ = write!(
            self.out,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{fill}\"",
            n(x),
            n(y),
            n(w.max(0.0)),
            n(h.max(0.0))
        );
        if opacity < 1.0 {
            let _ = write!(self.out, " fill-opacity=\"{:.2}\"", opacity);
        }
        if rx > 0.0 {
            let _ = write!(self.out, " rx=\"{}\"", n(rx));
        }
        self.out.push_str("/>");
    }

    pub fn line(
        &mut self,
        from: (f64, f64),
        to: (f64, f64),
        stroke: &str,
        width: f64,
        dash: Option<&str>,
    ) {
        let _ = write!(
            self.out,
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{stroke}\" stroke-width=\"{}\"",
            n(from.0),
            n(from.1),
            n(to.0),
            n(to.1),
            n(width)
        );
        if let Some(d) = dash {
            let _ = write!(self.out, " stroke-dasharray=\"{d}\"");
        }
        self.out.push_str("/>");
    }

    pub fn polyline(
        &mut self,
        points: &[(f64, f64)],
        stroke: &str,
        width: f64,
        dash: Option<&str>,
    ) {
        if points.is_empty() {
            return;
        }
        let pts: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{},{}", n(*x), n(*y)))
            .collect();
        let _ = write!(
            self.out,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{stroke}\" stroke-width=\"{}\" stroke-linejoin=\"round\" stroke-linecap=\"round\"",
            pts.join(" "),
            n(width)
        );
        if let Some(d) = dash {
            let _ = write!(self.out, " stroke-dasharray=\"{d}\"");
        }
        self.out.push_str("/>");
    }

    pub fn circle(&mut self, c: (f64, f64), r: f64, fill: &str) {
        let _ = write!(
            self.out,
            "<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{fill}\"/>",
            n(c.0),
            n(c.1),
            n(r)
        );
    }

    /// `text` with its baseline at `y`.
    pub fn text(&mut self, x: f64, y: f64, font: Font, text: &str) {
        let weight = if font.bold {
            " font-weight=\"bold\""
        } else {
            ""
        };
        let _ = write!(
            self.out,
            "<text x=\"{}\" y=\"{}\" font-size=\"{}\" fill=\"{}\"{weight}{}>{}</text>",
            n(x),
            n(y),
            n(font.size),
            font.color,
            font.anchor.attr(),
            escape(text)
        );
    }

    pub fn finish(mut self) -> String {
        self.out.push_str("</svg>");
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_short_and_text_is_escaped() {
        assert_eq!(n(3.0), "3");
        assert_eq!(n(-0.01), "0");
        assert_eq!(n(2.26), "2.3");
        assert_eq!(n(f64::NAN), "0");
        assert_eq!(escape("a<b & \"c\"\u{1}"), "a&lt;b &amp; &quot;c&quot;");
    }
}
