//! The top level of an ECharts option: only the fields the charts set, around charming's
//! components and series.
//!
//! Why not `charming::Chart`: its `Serialize` covers every ECharts component and all of
//! charming's 22 series types, and the compiler keeps all of that code whether or not a
//! field is ever set. That one function was the largest in the browser's wasm (72 KB of
//! 1.45 MB after `wasm-opt -Oz`). This container serializes to the same JSON for what the
//! charts use (`tests.rs` checks the shape), naming only the two series types drawn.

use charming::component::{Axis, Grid, Legend, Title};
use charming::element::Tooltip;
use charming::series::{Bar, Line};
use serde::{Serialize, Serializer};

/// The series the charts draw. Not boxed although a line is much larger than a bar: a
/// chart holds a handful, built once and serialized at once.
#[derive(Serialize)]
#[serde(untagged)]
#[allow(clippy::large_enum_variant)]
pub(super) enum Series {
    Line(Line),
    Bar(Bar),
}

impl From<Line> for Series {
    fn from(line: Line) -> Self {
        Series::Line(line)
    }
}

impl From<Bar> for Series {
    fn from(bar: Bar) -> Self {
        Series::Bar(bar)
    }
}

/// An ECharts option under construction, with charming's builder style: `title`, `grid`,
/// the axes and `series` add one more, the others set.
#[derive(Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Chart {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    title: Vec<Title>,
    #[serde(skip_serializing_if = "Option::is_none")]
    animation: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tooltip: Option<Tooltip>,
    #[serde(skip_serializing_if = "Option::is_none")]
    legend: Option<Legend>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    grid: Vec<Grid>,
    // One axis as an object, several as an array: what ECharts reads either way, and what
    // charming writes.
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "one_or_many")]
    x_axis: Vec<Axis>,
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "one_or_many")]
    y_axis: Vec<Axis>,
    #[serde(skip_serializing_if = "Option::is_none")]
    background_color: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    series: Vec<Series>,
}

fn one_or_many<S: Serializer>(axes: &[Axis], s: S) -> Result<S::Ok, S::Error> {
    match axes {
        [one] => one.serialize(s),
        many => many.serialize(s),
    }
}

impl Chart {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn title(mut self, title: Title) -> Self {
        self.title.push(title);
        self
    }

    pub fn animation(mut self, on: bool) -> Self {
        self.animation = Some(on);
        self
    }

    pub fn tooltip(mut self, tooltip: Tooltip) -> Self {
        self.tooltip = Some(tooltip);
        self
    }

    pub fn legend(mut self, legend: Legend) -> Self {
        self.legend = Some(legend);
        self
    }

    pub fn grid(mut self, grid: Grid) -> Self {
        self.grid.push(grid);
        self
    }

    pub fn x_axis(mut self, axis: Axis) -> Self {
        self.x_axis.push(axis);
        self
    }

    pub fn y_axis(mut self, axis: Axis) -> Self {
        self.y_axis.push(axis);
        self
    }

    pub fn background_color(mut self, colour: &'static str) -> Self {
        self.background_color = Some(colour);
        self
    }

    pub fn series(mut self, series: impl Into<Series>) -> Self {
        self.series.push(series.into());
        self
    }
}
