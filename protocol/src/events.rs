//! What a run streams while it runs ([`Event`]) and why a run can end without a report.

use serde::{Deserialize, Serialize};

use crate::*;

/// Why a run ended without a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The device ran out of memory, or the run exceeded the configured memory budget.
    OutOfMemory,
    /// The spec cannot run here (for example CUDA asked for on a machine without a GPU).
    Invalid,
    /// The person who asked for it went away before it ran.
    Cancelled,
    /// It ran past the server's time limit.
    Timeout,
    /// libtorch raised an error.
    Torch,
    /// A bug in Gradless.
    Internal,
    /// It ran, but its record could not be saved (disk full, read-only database): the
    /// message says why. The figures were measured but are not kept.
    Storage,
    /// The fleet worker running it went away (its heartbeat stopped) before it finished.
    WorkerGone,
    /// The server measuring it stopped before it finished (`kill -9`, a power cut, the OOM
    /// killer); the restarted server found it unfinished in the record store.
    Interrupted,
}

impl FailureKind {
    /// Its name as the JSON says it (`out_of_memory`, `timeout`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::OutOfMemory => "out_of_memory",
            FailureKind::Invalid => "invalid",
            FailureKind::Cancelled => "cancelled",
            FailureKind::Timeout => "timeout",
            FailureKind::Torch => "torch",
            FailureKind::Internal => "internal",
            FailureKind::Storage => "storage",
            FailureKind::WorkerGone => "worker_gone",
            FailureKind::Interrupted => "interrupted",
        }
    }
}

/// A run's failure, readable by a person.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunFailure {
    pub kind: FailureKind,
    pub message: String,
}

/// What a run streams, in order: `queued`* `started` `warmup`* then `sample`* (a forward
/// run) or `step`* (a generate run: the prefill, then one per decode step), then `done` or
/// `failed` (which may come at any point). `progress` says what a long part of the run
/// outside its passes is doing: a compile ahead of time (before `started`), a generation's
/// quality measurement (after its last `step`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// Waiting; `position` runs are ahead of this one (0: next).
    Queued {
        position: u32,
    },
    /// The worker has the model and input ready; timing starts. `total` counts what will
    /// stream: warm-up and timed passes for a forward run, warm-up generations and steps
    /// (prefill + decode steps) for a generate run.
    Started {
        device_name: String,
        baseline_bytes: u64,
        memory_source: MemorySource,
        total: u32,
    },
    Warmup {
        sample: Sample,
    },
    Sample {
        sample: Sample,
    },
    /// One step of a generation, as it happens.
    Step {
        step: GenStep,
    },
    /// A long part of the run outside its passes, as each of its parts begins: `what`
    /// names it and the part ("Compiling ahead of time (AOTInductor): export
    /// (torch.export)", "Measuring quality: setting 3 of 9 (int4 g64)"); `done` of its
    /// `total` parts are finished.
    Progress {
        what: String,
        done: u32,
        total: u32,
    },
    Done {
        report: Box<Report>,
    },
    Failed {
        failure: RunFailure,
    },
}

impl Event {
    /// A run's start (see [`Event::Started`]).
    pub fn started(device_name: String, baseline_bytes: u64, memory_source: MemorySource, total: u32) -> Event {
        Event::Started { device_name, baseline_bytes, memory_source, total }
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self, Event::Done { .. } | Event::Failed { .. })
    }
}
