//! Pictures of recorded results, drawn by the server from the record: a run's latency and
//! memory per iteration with its headline figures, runs side by side, a pitfall
//! experiment's chart and verdict — each with its provenance line — as SVG ([`run_svg`],
//! [`compare_svg`], [`pitfall_svg`]) and as PNG ([`png`], resvg with the font compiled in,
//! so the same record gives the same bytes on every host). Also what a link to a result
//! says where it is pasted: Open Graph / Twitter-card tags and the oEmbed answer
//! ([`preview`]).
//!
//! Pure: no I/O, no clock, nothing from the device. The server calls in here off its async
//! threads. The browser build never links this crate (only `server` depends on it).

mod chart;
mod part;
mod picture;
pub mod preview;
mod raster;
mod svg;
pub mod text;

use std::collections::BTreeMap;

pub use part::run_chart_svg;
pub use picture::{compare_svg, pitfall_svg, run_svg};
pub use raster::png;

/// The drawing's own size: a picture is this, scaled to the requested width (the Open
/// Graph size, 1.91:1).
pub const VIEW_WIDTH: u32 = 1200;
pub const VIEW_HEIGHT: u32 = 630;

/// Widths a caller may ask for, in px (before `scale`).
pub const MIN_WIDTH: u32 = 300;
pub const MAX_WIDTH: u32 = 2400;

/// Heights a caller may ask for one chart alone (`?chart=...&height=N`), in px.
pub const MIN_HEIGHT: u32 = 150;
pub const MAX_HEIGHT: u32 = 1600;

/// Bumped whenever a picture's drawing changes, so caches (ETags) see new bytes as new.
pub const DRAWING_VERSION: u32 = 1;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Theme {
    #[default]
    Light,
    Dark,
}

impl Theme {
    pub fn as_str(self) -> &'static str {
        match self {
            Theme::Light => "light",
            Theme::Dark => "dark",
        }
    }
}

impl std::str::FromStr for Theme {
    type Err = String;
    fn from_str(s: &str) -> Result<Theme, String> {
        match s {
            "light" => Ok(Theme::Light),
            "dark" => Ok(Theme::Dark),
            other => Err(format!(
                "theme `{}` is not one of light, dark",
                other.chars().take(40).collect::<String>()
            )),
        }
    }
}

/// One chart of a recorded run alone, as the page lays it out (`?chart=`): what a page
/// shows in a chart's place until the chart library has come (the Lab's and Generate's
/// first view of a recorded run).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// Latency per iteration, warm-up shaded, p50 marked.
    Latency,
    /// Memory above the baseline per iteration.
    Memory,
    /// A generation's latency per decode step against the position.
    StepLatency,
    /// A generation's memory beyond the weights and prompt after each step.
    StepMemory,
    /// A generation's prefill beside all its decode steps.
    PrefillDecode,
}

impl Part {
    pub const ALL: [Part; 5] = [
        Part::Latency,
        Part::Memory,
        Part::StepLatency,
        Part::StepMemory,
        Part::PrefillDecode,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Part::Latency => "latency",
            Part::Memory => "memory",
            Part::StepLatency => "step-latency",
            Part::StepMemory => "step-memory",
            Part::PrefillDecode => "prefill-decode",
        }
    }
}

impl std::str::FromStr for Part {
    type Err = String;
    fn from_str(s: &str) -> Result<Part, String> {
        Part::ALL.into_iter().find(|p| p.as_str() == s).ok_or_else(|| {
            format!(
                "chart `{}` is not one of {}",
                s.chars().take(40).collect::<String>(),
                Part::ALL.map(Part::as_str).join(", ")
            )
        })
    }
}

/// How a picture is asked for: `?theme=light|dark&width=N&scale=1|2`, and for one chart
/// of a run alone `&chart=NAME&height=N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ImageOptions {
    pub theme: Theme,
    /// Width in CSS px, [`MIN_WIDTH`]..=[`MAX_WIDTH`]; the height follows (1.91:1).
    pub width: u32,
    /// Device pixels per CSS px of a PNG (1 or 2); an SVG is sharp at any scale.
    pub scale: u32,
    /// One chart alone instead of the whole picture.
    pub chart: Option<Part>,
    /// The height of that chart alone, [`MIN_HEIGHT`]..=[`MAX_HEIGHT`] (only with `chart`).
    pub chart_height: Option<u32>,
}

impl Default for ImageOptions {
    fn default() -> Self {
        ImageOptions {
            theme: Theme::Light,
            width: VIEW_WIDTH,
            scale: 1,
            chart: None,
            chart_height: None,
        }
    }
}

/// A query option that is not one this server takes: which, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionError {
    pub field: String,
    pub message: String,
}

impl ImageOptions {
    /// The options in a query string's pairs; other keys are left to the caller (`runs`).
    pub fn from_query(query: &BTreeMap<String, String>) -> Result<ImageOptions, OptionError> {
        let mut o = ImageOptions::default();
        let bad = |field: &str, message: String| OptionError {
            field: field.into(),
            message,
        };
        if let Some(t) = query.get("theme") {
            o.theme = t.parse().map_err(|m| bad("theme", m))?;
        }
        if let Some(w) = query.get("width") {
            o.width = w
                .parse::<u32>()
                .ok()
                .filter(|w| (MIN_WIDTH..=MAX_WIDTH).contains(w))
                .ok_or_else(|| {
                    bad(
                        "width",
                        format!(
                            "width `{}` must be a whole number of px from {MIN_WIDTH} to {MAX_WIDTH}",
                            w.chars().take(40).collect::<String>()
                        ),
                    )
                })?;
        }
        if let Some(s) = query.get("scale") {
            o.scale = match s.as_str() {
                "1" => 1,
                "2" => 2,
                other => {
                    return Err(bad(
                        "scale",
                        format!(
                            "scale `{}` must be 1 or 2",
                            other.chars().take(40).collect::<String>()
                        ),
                    ))
                }
            };
        }
        if let Some(c) = query.get("chart") {
            o.chart = Some(c.parse().map_err(|m| bad("chart", m))?);
        }
        if let Some(h) = query.get("height") {
            if o.chart.is_none() {
                return Err(bad(
                    "height",
                    "a height is taken with `chart` only: a whole picture's height follows its width (1.91:1)".into(),
                ));
            }
            o.chart_height = Some(
                h.parse::<u32>()
                    .ok()
                    .filter(|h| (MIN_HEIGHT..=MAX_HEIGHT).contains(h))
                    .ok_or_else(|| {
                        bad(
                            "height",
                            format!(
                                "height `{}` must be a whole number of px from {MIN_HEIGHT} to {MAX_HEIGHT}",
                                h.chars().take(40).collect::<String>()
                            ),
                        )
                    })?,
            );
        }
        Ok(o)
    }

    /// The picture's height in CSS px: a chart alone's as asked (else half its width),
    /// a whole picture's 1.91:1.
    pub fn height(&self) -> u32 {
        match self.chart {
            Some(_) => self
                .chart_height
                .unwrap_or((self.width / 2).clamp(MIN_HEIGHT, MAX_HEIGHT)),
            None => height_for(self.width),
        }
    }

    /// The query string that asks for these options (empty for the defaults), for links.
    pub fn to_query(&self) -> String {
        let mut parts = vec![];
        if self.theme != Theme::Light {
            parts.push(format!("theme={}", self.theme.as_str()));
        }
        if self.width != VIEW_WIDTH {
            parts.push(format!("width={}", self.width));
        }
        if self.scale != 1 {
            parts.push(format!("scale={}", self.scale));
        }
        if let Some(c) = self.chart {
            parts.push(format!("chart={}", c.as_str()));
        }
        if let Some(h) = self.chart_height {
            parts.push(format!("height={h}"));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("?{}", parts.join("&"))
        }
    }
}

/// The height of a picture `width` px wide.
pub fn height_for(width: u32) -> u32 {
    ((u64::from(width) * u64::from(VIEW_HEIGHT) + u64::from(VIEW_WIDTH) / 2)
        / u64::from(VIEW_WIDTH)) as u32
}

/// A picture could not be made (the SVG did not parse, or no pixmap of that size).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderError(pub String);

impl std::fmt::Display for RenderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RenderError {}

/// A latency as every page prints it: milliseconds with three decimals.
pub fn format_ms(ms: f64) -> String {
    format!("{ms:.3} ms")
}

/// `2026-11-30T14:02:11Z` as `2026-11-30 14:02 UTC`; anything else as it is.
pub fn short_date(rfc3339: &str) -> String {
    let b = rfc3339.as_bytes();
    let shaped = b.len() >= 16 && b[4] == b'-' && b[7] == b'-' && b[10] == b'T' && b[13] == b':';
    if shaped && (rfc3339.ends_with('Z') || rfc3339.ends_with("+00:00")) {
        format!("{} {} UTC", &rfc3339[..10], &rfc3339[11..16])
    } else {
        rfc3339.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn options_read_their_query_and_name_what_is_wrong() {
        let o = ImageOptions::from_query(&q(&[
            ("theme", "dark"),
            ("width", "600"),
            ("scale", "2"),
            ("v", "x"),
        ]))
        .unwrap();
        assert_eq!(
            (o.theme, o.width, o.height(), o.scale),
            (Theme::Dark, 600, 315, 2)
        );
        assert_eq!(o.to_query(), "?theme=dark&width=600&scale=2");
        assert_eq!(
            ImageOptions::from_query(&q(&[])).unwrap(),
            ImageOptions::default()
        );
        assert_eq!(ImageOptions::default().height(), 630);
        for (k, v) in [
            ("theme", "blue"),
            ("width", "99999"),
            ("width", "10"),
            ("width", "-1"),
            ("width", "1e3"),
            ("scale", "3"),
            ("chart", "pie"),
        ] {
            let e = ImageOptions::from_query(&q(&[(k, v)])).unwrap_err();
            assert_eq!(e.field, k, "{e:?}");
            assert!(e.message.contains(v), "{e:?}");
        }
    }

    #[test]
    fn one_chart_alone_takes_a_height_and_a_whole_picture_does_not() {
        let o = ImageOptions::from_query(&q(&[("chart", "memory"), ("width", "640"), ("height", "320")])).unwrap();
        assert_eq!((o.chart, o.width, o.height()), (Some(Part::Memory), 640, 320));
        assert_eq!(o.to_query(), "?width=640&chart=memory&height=320");
        // Without a height, half the width.
        let o = ImageOptions::from_query(&q(&[("chart", "latency"), ("width", "500")])).unwrap();
        assert_eq!(o.height(), 250);
        let e = ImageOptions::from_query(&q(&[("height", "320")])).unwrap_err();
        assert_eq!(e.field, "height");
        for h in ["149", "1601", "x"] {
            let e = ImageOptions::from_query(&q(&[("chart", "latency"), ("height", h)])).unwrap_err();
            assert_eq!(e.field, "height", "{e:?}");
        }
        for p in Part::ALL {
            assert_eq!(p.as_str().parse::<Part>(), Ok(p));
        }
    }

    #[test]
    fn dates_read_short() {
        assert_eq!(short_date("2026-11-30T14:02:11.5Z"), "2026-11-30 14:02 UTC");
        assert_eq!(short_date("yesterday"), "yesterday");
    }
}
