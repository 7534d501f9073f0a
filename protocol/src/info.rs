//! What the server says about itself: its devices, models, limits and the worker's health.

use serde::{Deserialize, Serialize};

use crate::*;

/// A model as the server offers it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelInfo {
    pub id: ModelId,
    pub name: String,
    pub parameters: u64,
    pub input_meaning: String,
    pub default_input_size: u32,
    pub has_dropout: bool,
    pub has_batchnorm: bool,
    /// For a team model: its sidecar and what was measured when it was loaded (the browser's
    /// catalog is read from these: [`ServerInfo::catalog`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<crate::team::TeamModel>,
    /// For a decoder: its shape and where it comes from (the browser's catalog reads the team's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder: Option<crate::decoder::DecoderModel>,
    /// For a decoder: why the Generate page's default generation on it cannot fit this
    /// server's memory budget (admission's own sentence, with its figures); absent when it
    /// fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<String>,
}

impl ServerInfo {
    /// The catalog of the models this info lists: the team models and decoders it carries
    /// (what the browser knows of a server's models). Built once per page, not per use.
    pub fn catalog(&self) -> crate::Catalog {
        crate::Catalog::new(
            self.models.iter().filter_map(|m| m.team.clone()).collect(),
            self.models.iter().filter_map(|m| m.decoder.clone()).collect(),
            vec![],
        )
    }

    /// Resolves the listed ids in `catalog` (read from JSON, a team model's is a name).
    pub fn resolve(&mut self, catalog: &crate::Catalog) {
        for m in &mut self.models {
            m.id = catalog.resolve(m.id);
        }
    }
}

/// A device the server can run on, and what it can do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeviceInfo {
    pub kind: DeviceKind,
    pub name: String,
    pub total_memory_bytes: Option<u64>,
    /// Autocast settings this device runs, each with a note (empty when fine).
    pub autocast: Vec<AutocastSupport>,
    /// Why this CUDA device cannot capture CUDA graphs in this build; absent when it can
    /// (and on a CPU, where graphs mean nothing: see [`crate::cpu_reason`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_cuda_graphs: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AutocastSupport {
    pub autocast: Autocast,
    pub supported: bool,
    pub note: String,
}

/// `GET /api/info`: what this server offers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServerInfo {
    pub version: String,
    pub libtorch_version: String,
    pub devices: Vec<DeviceInfo>,
    pub models: Vec<ModelInfo>,
    pub limits: Limits,
    /// The pitfall cards, in guided-tour order.
    #[serde(default)]
    pub pitfalls: Vec<PitfallInfo>,
    /// Starting runs needs an access token (`Authorization: Bearer ...`); reading does not.
    #[serde(default)]
    pub auth_required: bool,
    /// On a fleet front, the live workers (their devices are in `devices` too); empty on a
    /// single-process server.
    #[serde(default)]
    pub workers: Vec<WorkerSummary>,
}

/// One live worker of a fleet, as the page lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerSummary {
    pub name: String,
    pub host: String,
    /// "H200 · gpu-host-3": its device and its name.
    pub label: String,
    pub devices: Vec<DeviceInfo>,
    /// Jobs waiting for it.
    pub queued: u64,
}

/// `GET /api/health`: the device worker's own bookkeeping. After every task the worker
/// checks that the memory it holds on each device is exactly its cached models' weights
/// and buffers: anything more would be a leak, and it is logged.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerHealth {
    /// Runs and experiments finished since the worker started.
    pub tasks: u64,
    /// Tasks waiting for the device now.
    pub queued: usize,
    pub memory_checks: u64,
    pub memory_check_failures: u64,
    /// The checks after the last task, one per device.
    pub last_checks: Vec<MemoryCheck>,
}

/// One leak check: what the worker holds on a device against what it should.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemoryCheck {
    pub device: DeviceKind,
    /// Allocated bytes on the device after the task (CPU tensor memory or the CUDA caching
    /// allocator's allocated bytes).
    pub held_bytes: u64,
    /// The cached models' weights and buffers on that device.
    pub expected_bytes: u64,
    pub ok: bool,
}

/// `POST /api/runs` answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunCreated {
    pub id: String,
    pub events_url: String,
    /// A secret only the submitter gets: following `events_url?cancel_token=<it>` makes that
    /// viewer the run's owner, whose leaving cancels the run while it still waits. Nobody
    /// else's viewers can cancel it. Absent from servers that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_token: Option<String>,
}
