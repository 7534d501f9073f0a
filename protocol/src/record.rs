//! Recorded results: every finished run and pitfall experiment is kept by the server (in
//! its SQLite file) under a permanent id, so a link shows exactly what was measured, on
//! which hardware and when, without measuring again.

use serde::{Deserialize, Serialize};

use crate::{PitfallReport, Report, Verdict};

/// What was recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", content = "report", rename_all = "snake_case")]
pub enum RecordBody {
    /// A lab run (`POST /api/runs`).
    Run(Box<Report>),
    /// A pitfall experiment (`POST /api/pitfalls/{id}`).
    Pitfall(Box<PitfallReport>),
}

/// The two kinds of record, for listings and filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    Run,
    Pitfall,
}

impl RecordKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Run => "run",
            RecordKind::Pitfall => "pitfall",
        }
    }
}

impl std::str::FromStr for RecordKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "run" => Ok(RecordKind::Run),
            "pitfall" => Ok(RecordKind::Pitfall),
            other => Err(format!("unknown record kind `{other}`; use run or pitfall")),
        }
    }
}

/// `GET /api/records/{id}`: one recorded result with its permanent id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Record {
    pub id: String,
    #[serde(flatten)]
    pub body: RecordBody,
}

impl Record {
    pub fn kind(&self) -> RecordKind {
        match self.body {
            RecordBody::Run(_) => RecordKind::Run,
            RecordBody::Pitfall(_) => RecordKind::Pitfall,
        }
    }

    pub fn run(&self) -> Option<&Report> {
        match &self.body {
            RecordBody::Run(r) => Some(r),
            RecordBody::Pitfall(_) => None,
        }
    }

    /// The one-line listing of this record.
    pub fn summary(&self) -> RecordSummary {
        match &self.body {
            RecordBody::Run(r) => RecordSummary {
                id: self.id.clone(),
                kind: RecordKind::Run,
                label: format!("{} · {}", r.spec.model.as_str(), r.spec.label()),
                device_name: r.env.device_name.clone(),
                measured_at: r.env.measured_at.clone(),
                p50_ms: Some(r.latency_ms.p50),
                peak_above_baseline_bytes: Some(r.memory.peak_above_baseline_bytes),
                verdict: None,
            },
            RecordBody::Pitfall(p) => RecordSummary {
                id: self.id.clone(),
                kind: RecordKind::Pitfall,
                label: format!("pitfall {}", p.id),
                device_name: p.env.device_name.clone(),
                measured_at: p.env.measured_at.clone(),
                p50_ms: None,
                peak_above_baseline_bytes: None,
                verdict: Some(p.verdict),
            },
        }
    }
}

/// A line of `GET /api/records` and `gradless runs list`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecordSummary {
    pub id: String,
    pub kind: RecordKind,
    pub label: String,
    pub device_name: String,
    /// When it was measured (RFC 3339, UTC).
    pub measured_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_above_baseline_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
}

/// Whether `id` looks like one of ours (16 lowercase hex digits): anything else is refused
/// before it reaches the database.
pub fn is_record_id(id: &str) -> bool {
    id.len() == 16
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}
