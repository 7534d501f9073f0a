//! Gradless's measurement engine: runs PyTorch models through libtorch (tch) under the
//! settings people get wrong — train/eval, grad mode, autocast, batch size — and measures
//! latency and memory the way PyTorch's own experts do. Plain Rust API, no web code: the
//! server and the CLI both drive it through [`Worker`].
//!
//! - [`torch_ext`]: the C++ extension's safe wrapper (the only `unsafe` code).
//! - [`torch_call`]: calling libtorch: its errors as run failures, device synchronisation.
//! - [`lab`]: the device thread's state and the measurement of one run.
//! - [`worker`]: the thread that owns the device, and its bounded queue.
//! - [`pitfalls`]: one live experiment per pitfall card, each with a measured verdict.
//! - [`input`]: the forward pass's inputs (several for some team models).
//! - [`python_package`]: the Python package `python/gradless/`, compiled in.
//! - [`models`], [`device`], [`spec`], [`stats`]: the model zoo, the hardware, spec
//!   checking and latency statistics.

pub mod breakdown;
pub mod device;
pub mod error;
pub mod input;
pub mod lab;
pub mod models;
pub mod peak;
pub mod pitfalls;
pub mod python_package;
pub mod spec;
pub mod stats;
pub mod team;
pub mod torch_call;
pub mod torch_ext;
pub mod trace;
pub mod worker;

pub use device::{Machine, LIBTORCH_VERSION};
pub use error::EngineError;
pub use lab::{Budget, Lab, LabConfig, RunControl};
pub use spec::{check_spec, CheckedSpec, ForwardRun, GenerateRun};
pub use worker::{
    ExperimentError, ExperimentReply, ExperimentTicket, MeasureError, RunTicket, Sink, Worker,
    WorkerConfig,
};
