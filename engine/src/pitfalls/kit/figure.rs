//! The figures and series a card reports, each named by a [`FigureName`]: a const defined
//! once, beside the card that reports it (or in [`crate::pitfalls::figures`] when several
//! cards share it), with its unit. The experiment builds its figures from the const
//! ([`fig`], [`fig_of`], [`series`]), its statements ([`crate::pitfalls::Said::run`]) and its
//! question ([`crate::pitfalls::ratio`], [`crate::pitfalls::value`]) name the same const,
//! so a misspelt figure does not compile:
//!
//! ```
//! use engine::pitfalls::kit::{fig, FigureName};
//! use engine::pitfalls::Said;
//! use protocol::Unit;
//!
//! const FIRST_ITERATION: FigureName = FigureName::new("first iteration", Unit::Ms);
//! const SAID: Said = Said::run("The first iteration is slow.", &[FIRST_ITERATION]);
//! assert_eq!(fig(FIRST_ITERATION, 12.0).name, "first iteration");
//! ```
//!
//! ```compile_fail
//! use engine::pitfalls::kit::FigureName;
//! use engine::pitfalls::Said;
//! use protocol::Unit;
//!
//! const FIRST_ITERATION: FigureName = FigureName::new("first iteration", Unit::Ms);
//! // Misspelt: no such figure, so no such const.
//! const SAID: Said = Said::run("The first iteration is slow.", &[FIRST_ITERATON]);
//! ```
//!
//! A figure reported once per row (per batch, per dtype, per mode) is a family: its name
//! holds `{}` where the row's label goes (`"batch {}: p50 eager"`), filled by [`fig_of`].
//! A statement or question names one member ([`FigureName::instance`]) or any member by
//! how its name ends ([`FigureName::ending`], `"*…"`); both are checked against the family
//! when the const is evaluated, so they do not compile when they cannot match:
//!
//! ```compile_fail
//! use engine::pitfalls::kit::FigureName;
//! use protocol::Unit;
//!
//! const P50_EAGER: FigureName = FigureName::new("batch {}: p50 eager", Unit::Ms);
//! const BATCH_1: FigureName = P50_EAGER.instance("batch 1: p50 eagre");
//! assert_eq!(BATCH_1.unit(), Unit::Ms);
//! ```

use std::fmt::Display;

use protocol::{Figure, Series, Unit};

pub const MIB: f64 = 1024.0 * 1024.0;

/// The name and unit of a figure (or a series) a card reports. A name holding `{}` is a
/// family, one figure per label ([`fig_of`]); a name beginning with `*` names any figure
/// whose name ends with the rest (what [`FigureName::ending`] makes, for statements and
/// questions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FigureName {
    name: &'static str,
    unit: Unit,
}

impl FigureName {
    pub const fn new(name: &'static str, unit: Unit) -> FigureName {
        FigureName { name, unit }
    }

    /// The name, as reports, statements and questions carry it.
    pub const fn name(self) -> &'static str {
        self.name
    }

    pub const fn unit(self) -> Unit {
        self.unit
    }

    /// Whether this is a family, one figure per label.
    pub const fn is_family(self) -> bool {
        find(self.name.as_bytes(), 0).is_some()
    }

    /// One member of this family, by its whole name: it must match the family's name with
    /// each `{}` standing for any text, or the const does not evaluate (does not compile).
    pub const fn instance(self, name: &'static str) -> FigureName {
        assert!(glob(self.name.as_bytes(), 0, name.as_bytes(), 0), "the name is no member of this figure's family");
        FigureName { name, unit: self.unit }
    }

    /// Any figure of this family whose name ends with `star` without its leading `*` (how
    /// a statement or a question names "the first figure whose name ends with ..."): the
    /// end must agree with the family's end after its last `{}`, or the const does not
    /// evaluate.
    pub const fn ending(self, star: &'static str) -> FigureName {
        let s = star.as_bytes();
        assert!(!s.is_empty() && s[0] == b'*', "an ending begins with `*`");
        let n = self.name.as_bytes();
        let mut tail = 0;
        while let Some(i) = find(n, tail) {
            tail = i + 2;
        }
        // One of the two ends with the other: `*16: peak above baseline` narrows
        // `{}: peak above baseline`, `* p50 replay` widens `batch {}: p50 replay`.
        let (a, b) = (s.len() - 1, n.len() - tail);
        let k = if a < b { a } else { b };
        let mut i = 0;
        while i < k {
            assert!(s[s.len() - 1 - i] == n[n.len() - 1 - i], "the ending does not agree with this figure's name");
            i += 1;
        }
        FigureName { name: star, unit: self.unit }
    }

    /// The name with each `{}` replaced by the next of `labels`, in order.
    pub fn label(self, labels: &[&dyn Display]) -> String {
        let mut out = String::with_capacity(self.name.len() + 16);
        let mut rest = self.name;
        let mut labels = labels.iter();
        while let Some(i) = rest.find("{}") {
            out.push_str(&rest[..i]);
            let label = labels.next().unwrap_or_else(|| panic!("`{}`: too few labels", self.name));
            out.push_str(&label.to_string());
            rest = &rest[i + 2..];
        }
        assert!(labels.next().is_none(), "`{}`: too many labels", self.name);
        out.push_str(rest);
        out
    }
}

/// The first `{}` in `s` at or after `from`.
const fn find(s: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + 1 < s.len() {
        if s[i] == b'{' && s[i + 1] == b'}' {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Whether `name[j..]` matches `pattern[i..]`, each `{}` of the pattern standing for any
/// text (at least one character).
const fn glob(pattern: &[u8], i: usize, name: &[u8], j: usize) -> bool {
    if i == pattern.len() {
        return j == name.len();
    }
    if i + 1 < pattern.len() && pattern[i] == b'{' && pattern[i + 1] == b'}' {
        let mut k = j + 1;
        while k <= name.len() {
            if glob(pattern, i + 2, name, k) {
                return true;
            }
            k += 1;
        }
        return false;
    }
    j < name.len() && pattern[i] == name[j] && glob(pattern, i + 1, name, j + 1)
}

/// The figure `name` (not a family) of `value`, in its unit.
pub fn fig(name: FigureName, value: f64) -> Figure {
    debug_assert!(!name.is_family() && !name.name.starts_with('*'), "`{}` names no one figure", name.name);
    Figure::new(name.name, value, name.unit)
}

/// The member of the family `name` for `labels` (see [`FigureName::label`]), of `value`.
pub fn fig_of(name: FigureName, labels: &[&dyn Display], value: f64) -> Figure {
    Figure::new(name.label(labels), value, name.unit)
}

/// The series `name` (its name and unit from the const).
pub fn series(name: FigureName, x: Vec<String>, y: Vec<f64>) -> Series {
    series_of(name, &[], x, y)
}

/// The series of the family `name` for `labels`.
pub fn series_of(name: FigureName, labels: &[&dyn Display], x: Vec<String>, y: Vec<f64>) -> Series {
    Series {
        name: name.label(labels),
        unit: name.unit.as_str().into(),
        x,
        y: y.into_iter().map(Some).collect(),
    }
}

/// "1", "2", ... "n": the x labels of a series of passes.
pub fn numbered(n: usize) -> Vec<String> {
    (1..=n).map(|i| i.to_string()).collect()
}

pub fn mib(b: u64) -> f64 {
    (b as f64 / MIB * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_fill_their_labels_and_check_their_members() {
        const P50: FigureName = FigureName::new("batch {}: p50 {}", Unit::Ms);
        assert_eq!(P50.label(&[&8, &"eager"]), "batch 8: p50 eager");
        assert_eq!(fig_of(P50, &[&1, &"replay"], 2.0), Figure::new("batch 1: p50 replay", 2.0, Unit::Ms));
        const ONE: FigureName = P50.instance("batch 1: p50 eager");
        assert_eq!((ONE.name(), ONE.unit()), ("batch 1: p50 eager", Unit::Ms));
        const ANY: FigureName = P50.ending("* eager");
        assert_eq!(ANY.name(), "* eager");
        assert!(P50.is_family() && !ONE.is_family());
        assert!(!glob(b"batch {}: p50", 0, b"batch : p50", 0), "a label is never empty");
    }
}
