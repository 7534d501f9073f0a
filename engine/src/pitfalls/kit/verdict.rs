//! The one verdict builder ([`Decision`]) and what an experiment returns ([`Outcome`]).

use protocol::stats::Side;
use protocol::{ChartKind, Figure, NamedTrace, Series, Table, Verdict};

use super::Shift;

/// A verdict and the reason for it, with the deciding numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub verdict: Verdict,
    pub reason: String,
}

impl Decision {
    /// The one place a rule becomes a verdict: confirmed when the rule `holds`, refuted
    /// otherwise, each with its own reason.
    pub fn rule(holds: bool, if_holds: impl Into<String>, if_not: impl Into<String>) -> Decision {
        if holds {
            Decision {
                verdict: Verdict::Confirmed,
                reason: if_holds.into(),
            }
        } else {
            Decision {
                verdict: Verdict::Refuted,
                reason: if_not.into(),
            }
        }
    }

    /// A latency rule on the ratio `slow / fast` of a [`Shift`]: confirmed when its whole
    /// 95% interval lies above `confirm_above`, refuted when it lies below `refute_below`
    /// (which may sit a little higher: "any cost is under 5%" refutes a claimed cost), and
    /// inconclusive otherwise, the reason saying how many more iterations would likely
    /// decide it.
    pub fn latency(
        shift: &Shift,
        confirm_above: f64,
        refute_below: f64,
        if_holds: impl Into<String>,
        if_not: impl Into<String>,
    ) -> Decision {
        if shift.side(confirm_above) == Side::Above {
            return Decision::rule(true, if_holds, "");
        }
        if shift.side(refute_below) == Side::Below {
            return Decision::rule(false, "", if_not);
        }
        let (lo, hi) = shift.bounds();
        Decision::inconclusive(format!(
            "{:.2}× ({lo:.2}–{hi:.2} at 95%): the interval is neither above {confirm_above} nor below {refute_below}, so the noise is too large to tell; {}.",
            shift.slow_p50 / shift.fast_p50,
            shift.more(&[confirm_above, refute_below])
        ))
    }

    /// The figures cannot decide the claim here; `why` says why and what would.
    pub fn inconclusive(why: impl Into<String>) -> Decision {
        Decision {
            verdict: Verdict::Inconclusive,
            reason: why.into(),
        }
    }

    /// The effect cannot show here; `why` says why and what would show it.
    pub fn not_applicable(why: impl Into<String>) -> Decision {
        Decision {
            verdict: Verdict::NotApplicable,
            reason: why.into(),
        }
    }
}

/// What one experiment produced, before the card's common fields are added.
pub struct Outcome {
    pub decision: Decision,
    /// What the figures were measured on (model, batch, input size; [`describe`]): the
    /// report's reason ends with it.
    pub setup: String,
    pub figures: Vec<Figure>,
    pub chart: ChartKind,
    pub series: Vec<Series>,
    pub notes: Vec<String>,
    pub table: Option<Table>,
    /// Each row's traced forward pass, for the cards about memory.
    pub traces: Vec<NamedTrace>,
}

impl Outcome {
    pub fn new(decision: Decision, setup: impl Into<String>, chart: ChartKind) -> Outcome {
        Outcome {
            decision,
            setup: setup.into(),
            figures: vec![],
            chart,
            series: vec![],
            notes: vec![],
            table: None,
            traces: vec![],
        }
    }

    pub fn traces(mut self, traces: Vec<NamedTrace>) -> Self {
        self.traces = traces;
        self
    }

    pub fn figures(mut self, figures: Vec<Figure>) -> Self {
        self.figures = figures;
        self
    }

    pub fn series(mut self, series: Vec<Series>) -> Self {
        self.series = series;
        self
    }

    pub fn notes(mut self, notes: Vec<String>) -> Self {
        self.notes = notes;
        self
    }

    pub fn table(mut self, table: Table) -> Self {
        self.table = Some(table);
        self
    }
}
