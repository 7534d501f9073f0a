//! One measured number with its unit ([`Figure`]): what an experiment reports and what a
//! prediction is scored against. A leaf, so the pitfall reports and the predictions both
//! use it without importing each other.

use serde::{Deserialize, Serialize};

/// One measured number of an experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Figure {
    pub name: String,
    pub value: f64,
    /// `bytes`, `ms`, `ratio`, `count`, `bool` (1/0), ...
    pub unit: String,
}

impl Figure {
    /// The value as a person reads it, in its unit.
    pub fn display(&self) -> String {
        match self.unit.as_str() {
            "bytes" => crate::format_bytes(self.value.max(0.0) as u64),
            "ms" => format!("{:.3} ms", self.value),
            "ratio" => format!("{:.3}", self.value),
            "bool" => (if self.value > 0.0 { "yes" } else { "no" }).to_string(),
            "count" => format!("{}", self.value),
            _ => format!("{:.3e}", self.value),
        }
    }
}
