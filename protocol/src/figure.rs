//! One measured number with its unit ([`Figure`], [`Unit`]): what an experiment reports
//! and what a prediction is scored against. A leaf, so the pitfall reports and the
//! predictions both use it without importing each other.
//!
//! The unit travels as its string (`"bytes"`, `"ms"`, ...), as it always has, so records
//! written before read as before; [`Unit`] is the closed set of those strings, each with
//! its one way to be shown ([`Unit::display`]).

use serde::{Deserialize, Serialize};

/// One measured number of an experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Figure {
    pub name: String,
    pub value: f64,
    /// A [`Unit`]'s string: `bytes`, `ms`, `ratio`, `count`, `bool` (1/0), ...
    pub unit: String,
}

impl Figure {
    /// A figure named `name` of `value` in `unit`.
    pub fn new(name: impl Into<String>, value: f64, unit: Unit) -> Figure {
        Figure { name: name.into(), value, unit: unit.as_str().into() }
    }

    /// The figure's unit; `None` for a string no [`Unit`] has (a record from elsewhere).
    pub fn unit(&self) -> Option<Unit> {
        Unit::parse(&self.unit)
    }

    /// The value as a person reads it, in its unit.
    pub fn display(&self) -> String {
        match self.unit() {
            Some(unit) => unit.display(self.value),
            None => format!("{:.3e} {}", self.value, self.unit).trim_end().to_string(),
        }
    }
}

/// The unit of a figure or a series: every unit an experiment reports in. Serialised as
/// its string ([`Unit::as_str`]), the form records and the API have always carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Unit {
    /// Bytes, shown as KiB, MiB, GiB ([`crate::format_bytes`]).
    #[serde(rename = "bytes")]
    Bytes,
    #[serde(rename = "KiB")]
    Kib,
    #[serde(rename = "MiB")]
    Mib,
    /// Milliseconds.
    #[serde(rename = "ms")]
    Ms,
    /// One figure over another.
    #[serde(rename = "ratio")]
    Ratio,
    /// A number of things (passes, parameters, non-finite values).
    #[serde(rename = "count")]
    Count,
    /// 1 for yes, 0 for no.
    #[serde(rename = "bool")]
    Bool,
    /// An absolute difference between two outputs (tiny, so shown in scientific notation).
    #[serde(rename = "abs")]
    Abs,
    /// A dimensionless number without a unit of its own (a difference of outputs).
    #[serde(rename = "")]
    Plain,
    /// The size of the largest value (an activation's |x|).
    #[serde(rename = "magnitude")]
    Magnitude,
    /// `log10(1 + x)` of a magnitude, for a chart whose values span orders of magnitude.
    #[serde(rename = "log10")]
    Log10,
    /// A probability (a dropout's p).
    #[serde(rename = "p")]
    P,
    /// A fraction of a whole, 0 to 1.
    #[serde(rename = "share")]
    Share,
    /// A percentage, 0 to 100.
    #[serde(rename = "%")]
    Percent,
    /// The largest absolute difference between two outputs, element by element.
    #[serde(rename = "max |Δ|")]
    MaxAbsDelta,
    #[serde(rename = "bits/byte")]
    BitsPerByte,
    #[serde(rename = "FLOP/byte")]
    FlopPerByte,
    #[serde(rename = "GFLOP/s")]
    GflopPerS,
    #[serde(rename = "GB/s")]
    GbPerS,
    #[serde(rename = "tokens/s")]
    TokensPerS,
}

impl Unit {
    /// Every unit, each once.
    pub const ALL: [Unit; 20] = [
        Unit::Bytes,
        Unit::Kib,
        Unit::Mib,
        Unit::Ms,
        Unit::Ratio,
        Unit::Count,
        Unit::Bool,
        Unit::Abs,
        Unit::Plain,
        Unit::Magnitude,
        Unit::Log10,
        Unit::P,
        Unit::Share,
        Unit::Percent,
        Unit::MaxAbsDelta,
        Unit::BitsPerByte,
        Unit::FlopPerByte,
        Unit::GflopPerS,
        Unit::GbPerS,
        Unit::TokensPerS,
    ];

    /// The unit's string, as a [`Figure`] or a series carries it (and as serde writes it).
    pub const fn as_str(self) -> &'static str {
        match self {
            Unit::Bytes => "bytes",
            Unit::Kib => "KiB",
            Unit::Mib => "MiB",
            Unit::Ms => "ms",
            Unit::Ratio => "ratio",
            Unit::Count => "count",
            Unit::Bool => "bool",
            Unit::Abs => "abs",
            Unit::Plain => "",
            Unit::Magnitude => "magnitude",
            Unit::Log10 => "log10",
            Unit::P => "p",
            Unit::Share => "share",
            Unit::Percent => "%",
            Unit::MaxAbsDelta => "max |Δ|",
            Unit::BitsPerByte => "bits/byte",
            Unit::FlopPerByte => "FLOP/byte",
            Unit::GflopPerS => "GFLOP/s",
            Unit::GbPerS => "GB/s",
            Unit::TokensPerS => "tokens/s",
        }
    }

    /// The unit a string names; `None` for one no unit has.
    pub fn parse(s: &str) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.as_str() == s)
    }

    /// A value of this unit as a person reads it.
    pub fn display(self, v: f64) -> String {
        match self {
            Unit::Bytes => crate::format_bytes(v.max(0.0) as u64),
            Unit::Kib => format!("{v:.1} KiB"),
            Unit::Mib => format!("{v:.3} MiB"),
            Unit::Ms => format!("{v:.3} ms"),
            Unit::Ratio => format!("{v:.3}"),
            Unit::Count => format!("{v}"),
            Unit::Bool => (if v > 0.0 { "yes" } else { "no" }).to_string(),
            Unit::Abs | Unit::Plain | Unit::Magnitude => format!("{v:.3e}"),
            Unit::MaxAbsDelta => format!("max |Δ| {v:.3e}"),
            Unit::Percent => format!("{v:.1}%"),
            Unit::Log10 => format!("{v:.3}"),
            Unit::P => format!("p = {v}"),
            Unit::Share => format!("{:.1}%", 100.0 * v),
            Unit::BitsPerByte => format!("{v:.4} bits/byte"),
            Unit::FlopPerByte => format!("{v:.2} FLOP/byte"),
            Unit::GflopPerS => format!("{v:.1} GFLOP/s"),
            Unit::GbPerS => format!("{v:.1} GB/s"),
            Unit::TokensPerS => format!("{v:.1} tokens/s"),
        }
    }
}

impl std::fmt::Display for Unit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_travels_as_its_string_and_reads_back() {
        for u in Unit::ALL {
            let json = serde_json::to_string(&u).unwrap();
            assert_eq!(json, format!("\"{}\"", u.as_str()), "{u:?}");
            assert_eq!(serde_json::from_str::<Unit>(&json).unwrap(), u);
            assert_eq!(Unit::parse(u.as_str()), Some(u));
        }
        let mut strings: Vec<_> = Unit::ALL.iter().map(|u| u.as_str()).collect();
        strings.sort();
        strings.dedup();
        assert_eq!(strings.len(), Unit::ALL.len(), "two units share a string");
    }

    #[test]
    fn every_unit_has_its_own_display() {
        let shown = |u: Unit, v: f64| Figure::new("f", v, u).display();
        assert_eq!(shown(Unit::Bytes, 1536.0), "1.5 KiB");
        assert_eq!(shown(Unit::Ms, 1.5), "1.500 ms");
        assert_eq!(shown(Unit::Ratio, 0.25), "0.250");
        assert_eq!(shown(Unit::Bool, 1.0), "yes");
        assert_eq!(shown(Unit::Bool, 0.0), "no");
        assert_eq!(shown(Unit::Count, 12.0), "12");
        assert_eq!(shown(Unit::Abs, 0.00012), "1.200e-4");
        assert_eq!(shown(Unit::Plain, 0.0), "0.000e0");
        assert_eq!(shown(Unit::Mib, 2.5), "2.500 MiB");
        assert_eq!(shown(Unit::Kib, 2.5), "2.5 KiB");
        assert_eq!(shown(Unit::Share, 0.125), "12.5%");
        assert_eq!(shown(Unit::BitsPerByte, 2.0), "2.0000 bits/byte");
        assert_eq!(shown(Unit::FlopPerByte, 1.0), "1.00 FLOP/byte");
        assert_eq!(shown(Unit::GflopPerS, 3.0), "3.0 GFLOP/s");
        assert_eq!(shown(Unit::GbPerS, 3.0), "3.0 GB/s");
        assert_eq!(shown(Unit::TokensPerS, 30.0), "30.0 tokens/s");
        assert_eq!(shown(Unit::P, 0.1), "p = 0.1");
        assert_eq!(shown(Unit::Percent, 12.5), "12.5%");
        assert_eq!(shown(Unit::MaxAbsDelta, 0.5), "max |Δ| 5.000e-1");
        // A unit no figure of Gradless has (a record from elsewhere) still shows its number.
        let odd = Figure { name: "f".into(), value: 2.0, unit: "furlongs".into() };
        assert_eq!(odd.display(), "2.000e0 furlongs");
    }
}
