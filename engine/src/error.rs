//! The engine's error type. Run failures that people see are [`protocol::RunFailure`];
//! this enum is for the engine's own API (starting the worker, submitting work).

use protocol::SpecError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The spec breaks a rule; the message names the field.
    #[error("invalid run spec: {0}")]
    InvalidSpec(#[from] SpecError),
    /// The run queue holds `capacity` runs already.
    #[error("the run queue is full ({capacity} runs waiting); try again shortly")]
    QueueFull { capacity: usize },
    /// The worker is shutting down or has stopped.
    #[error("the measurement worker has stopped")]
    WorkerGone,
    /// libtorch failed outside a run (for example while probing the device).
    #[error("libtorch: {0}")]
    Torch(String),
    /// No pitfall card has this id (a server answers 404).
    #[error("unknown pitfall `{id}`; known: {}", .known.join(", "))]
    UnknownPitfall { id: String, known: Vec<String> },
    /// A task given to [`crate::Worker::call`] panicked; the worker logged it and went on.
    #[error("the task failed with an internal error: {0}")]
    TaskPanicked(String),
}

impl From<crate::torch_ext::ExtError> for EngineError {
    fn from(e: crate::torch_ext::ExtError) -> Self {
        EngineError::Torch(e.0)
    }
}

impl From<tch::TchError> for EngineError {
    fn from(e: tch::TchError) -> Self {
        EngineError::Torch(crate::torch_call::first_line(&e.to_string()))
    }
}
