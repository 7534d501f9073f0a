//! Recorded results: every run and pitfall experiment is kept by the server (in its SQLite
//! file, or a fleet's PostgreSQL) under a permanent id, so a link shows exactly what was
//! measured, on which hardware and when, without measuring again.
//!
//! The intent is recorded first: a run is written as [`RecordBody::Unfinished`] (status
//! `running`, with its spec and start time) when it is accepted, and replaced by its report
//! when it finishes. A server that finds a `running` row at start-up was stopped in the
//! middle of it (`kill -9`, a power cut, the OOM killer) and marks it `interrupted`, so the
//! permalink says what happened instead of answering 404.

use serde::{Deserialize, Serialize};

use crate::{PartialRun, PitfallReport, Report, RunFailure, RunSpec, Verdict};

/// What was recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", content = "report", rename_all = "snake_case")]
pub enum RecordBody {
    /// A lab run (`POST /api/runs`).
    Run(Box<Report>),
    /// A pitfall experiment (`POST /api/pitfalls/{id}`).
    Pitfall(Box<PitfallReport>),
    /// A run or experiment that was started and has no report: still going, interrupted
    /// (its server stopped mid-way), or failed (out of memory, past its time limit,
    /// cancelled, a libtorch error: the reason and what it measured before are kept).
    /// Records written before this existed are always `run` or `pitfall`, so they read
    /// unchanged.
    Unfinished(Box<Unfinished>),
}

/// Where a record stands. Only [`RecordStatus::Completed`] records hold figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RecordStatus {
    /// Finished: a run's report or an experiment's.
    #[default]
    Completed,
    /// Accepted and not finished yet.
    Running,
    /// It never finished: the server (or fleet worker) measuring it stopped first.
    Interrupted,
    /// It ended without a report: the failure says why ([`Unfinished::failure`]).
    Failed,
}

impl RecordStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RecordStatus::Completed => "completed",
            RecordStatus::Running => "running",
            RecordStatus::Interrupted => "interrupted",
            RecordStatus::Failed => "failed",
        }
    }

    pub fn is_completed(&self) -> bool {
        *self == RecordStatus::Completed
    }
}

/// A run or experiment with no report yet, or never: what was asked for and when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Unfinished {
    /// What was started: a run or an experiment.
    pub of: RecordKind,
    /// `running`, `interrupted` or `failed` (never `completed`: that record holds a report).
    pub status: RecordStatus,
    /// The run's settings (runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<RunSpec>,
    /// The pitfall card (experiments only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pitfall: Option<String>,
    /// When it was accepted (RFC 3339, UTC).
    pub started_at: String,
    /// When its interruption was found: the restarted server's start, or the moment a
    /// fleet front saw the worker go (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_at: Option<String>,
    /// When it failed (RFC 3339, UTC): failed records only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<String>,
    /// Why it failed, as its viewers were told: failed records only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<RunFailure>,
    /// What a failed run measured before it failed (absent when nothing was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<PartialRun>,
    /// What happened, in a sentence for people (see [`Unfinished::interrupted`],
    /// [`Unfinished::failed`]).
    pub message: String,
}

impl Unfinished {
    /// A run accepted at `started_at`, now going.
    pub fn run(spec: RunSpec, started_at: String) -> Unfinished {
        Unfinished {
            of: RecordKind::Run,
            status: RecordStatus::Running,
            spec: Some(spec),
            pitfall: None,
            message: format!("started at {started_at} and not finished yet"),
            started_at,
            interrupted_at: None,
            failed_at: None,
            failure: None,
            measured: None,
        }
    }

    /// Experiment `card` accepted at `started_at`, now going.
    pub fn pitfall(card: &str, started_at: String) -> Unfinished {
        Unfinished {
            of: RecordKind::Pitfall,
            status: RecordStatus::Running,
            spec: None,
            pitfall: Some(card.to_string()),
            message: format!("started at {started_at} and not finished yet"),
            started_at,
            interrupted_at: None,
            failed_at: None,
            failure: None,
            measured: None,
        }
    }

    /// This one, interrupted as found at `at`: by a restart of the server that was
    /// measuring it (`cause` `None`), or by what `cause` says (a fleet worker gone).
    pub fn interrupted(mut self, at: String, cause: Option<&str>) -> Unfinished {
        let by = cause.unwrap_or("a server restart");
        self.message = format!(
            "interrupted by {by} at {at}; nothing was measured after it started at {}: no figures were kept",
            self.started_at
        );
        self.status = RecordStatus::Interrupted;
        self.interrupted_at = Some(at);
        self
    }

    /// This one, failed at `at` with `failure`, having measured `measured` first: kept
    /// so its permalink says what happened and what it got to.
    pub fn failed(mut self, at: String, failure: RunFailure, measured: PartialRun) -> Unfinished {
        let measured = (!measured.is_empty()).then_some(measured);
        let what = match (&measured, self.of) {
            (Some(m), _) => m.describe(),
            (None, RecordKind::Run) => "nothing was measured before it failed".into(),
            (None, RecordKind::Pitfall) => "the experiment keeps no figures of a failed run".into(),
        };
        self.message = format!(
            "failed at {at} ({}): {}; {what}. It was started at {}",
            failure.kind.as_str(),
            failure.message.trim_end_matches('.'),
            self.started_at
        );
        self.status = RecordStatus::Failed;
        self.failed_at = Some(at);
        self.failure = Some(failure);
        self.measured = measured;
        self
    }
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
    /// Its run settings (a run's report, an unfinished run's spec) as `catalog` serves their
    /// model: read from JSON, a team model's id is its name. (A record's method, so the
    /// catalog imports no record and protocol's modules import each other without a cycle:
    /// `scripts/check-imports.py`.)
    pub fn resolve(&mut self, catalog: &crate::Catalog) {
        match &mut self.body {
            RecordBody::Run(report) => catalog.resolve_spec(&mut report.spec),
            RecordBody::Unfinished(u) => {
                if let Some(spec) = &mut u.spec {
                    catalog.resolve_spec(spec);
                }
            }
            RecordBody::Pitfall(_) => {}
        }
    }

    /// What was recorded, finished or not.
    pub fn kind(&self) -> RecordKind {
        match &self.body {
            RecordBody::Run(_) => RecordKind::Run,
            RecordBody::Pitfall(_) => RecordKind::Pitfall,
            RecordBody::Unfinished(u) => u.of,
        }
    }

    pub fn status(&self) -> RecordStatus {
        match &self.body {
            RecordBody::Run(_) | RecordBody::Pitfall(_) => RecordStatus::Completed,
            RecordBody::Unfinished(u) => u.status,
        }
    }

    /// A finished run's report.
    pub fn run(&self) -> Option<&Report> {
        match &self.body {
            RecordBody::Run(r) => Some(r),
            _ => None,
        }
    }

    /// The record of a run or experiment that has not finished (or never will).
    pub fn unfinished(&self) -> Option<&Unfinished> {
        match &self.body {
            RecordBody::Unfinished(u) => Some(u),
            _ => None,
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
                status: RecordStatus::Completed,
                note: None,
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
                status: RecordStatus::Completed,
                note: None,
            },
            RecordBody::Unfinished(u) => RecordSummary {
                id: self.id.clone(),
                kind: u.of,
                label: match (&u.spec, &u.pitfall) {
                    (Some(spec), _) => format!("{} · {}", spec.model.as_str(), spec.label()),
                    (None, Some(card)) => format!("pitfall {card}"),
                    (None, None) => String::new(),
                },
                // Which device it was asked for; the hardware was never read.
                device_name: match u.spec.as_ref().map(|s| s.device) {
                    Some(crate::DeviceChoice::Cpu) => "cpu".into(),
                    Some(crate::DeviceChoice::Cuda) => "cuda".into(),
                    Some(crate::DeviceChoice::Auto) => "auto".into(),
                    None => String::new(),
                },
                measured_at: u.started_at.clone(),
                p50_ms: None,
                peak_above_baseline_bytes: None,
                verdict: None,
                status: u.status,
                note: Some(u.message.clone()),
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
    /// Absent for completed records (and in summaries written before it existed).
    #[serde(default, skip_serializing_if = "RecordStatus::is_completed")]
    pub status: RecordStatus,
    /// What happened to an unfinished one ([`Unfinished::message`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Whether `id` looks like one of ours (16 lowercase hex digits): anything else is refused
/// before it reaches the database.
pub fn is_record_id(id: &str) -> bool {
    id.len() == 16
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_record_says_why_and_what_it_measured() {
        use crate::{Event, FailureKind, MemorySource, Sample};
        let sample = |i, ms, peak| Sample { iteration: i, latency_ms: ms, allocated_bytes: 100, peak_bytes: peak, reserved_bytes: None };
        for kind in [FailureKind::OutOfMemory, FailureKind::Timeout, FailureKind::WorkerGone, FailureKind::Cancelled] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str(), "as_str is the JSON name");
        }
        let mut p = PartialRun::default();
        p.observe(&Event::started("cpu".into(), 0, MemorySource::CpuTensorMemory, 3));
        p.observe(&Event::Sample { sample: sample(0, 1.5, 1024) });
        let failure = RunFailure { kind: FailureKind::Timeout, message: "the run went past the server's time limit".into() };
        let u = Unfinished::run(crate::RunSpec::default(), "2026-12-01T10:00:00Z".into()).failed("2026-12-01T10:00:05Z".into(), failure.clone(), p.clone());
        assert_eq!(u.status, RecordStatus::Failed);
        assert_eq!((u.failure.as_ref(), u.measured.as_ref()), (Some(&failure), Some(&p)));
        assert_eq!(
            u.message,
            "failed at 2026-12-01T10:00:05Z (timeout): the run went past the server's time limit; before it failed it measured 1 timed pass after 0 warm-up passes (median 1.500 ms, peak +1.0 KiB above the baseline). It was started at 2026-12-01T10:00:00Z"
        );
        // Nothing measured: no figures kept, and it says so.
        let u = Unfinished::run(crate::RunSpec::default(), "S".into()).failed("T".into(), failure, PartialRun::default());
        assert!(u.measured.is_none() && u.message.contains("nothing was measured before it failed"), "{}", u.message);
    }
}
