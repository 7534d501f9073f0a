//! The experiment path: a pitfall experiment is checked (its id, batch ceiling, device and
//! budget) and queued like a run, so it gets the same guarantees; its report goes to a reply
//! on the device thread, or back to a blocking caller.

use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc};

use protocol::{DeviceChoice, DeviceKind, PitfallOptions, PitfallReport, RunFailure, SpecError};

use super::queue::Task;
use super::{ExperimentReply, RunTicket, Worker};
use crate::error::EngineError;

/// A queued experiment: its ticket (to cancel it) and its place in the queue.
#[derive(Clone, Debug)]
pub struct ExperimentTicket {
    pub ticket: RunTicket,
    /// Tasks ahead of it when it was queued.
    pub position: u32,
}

/// Why [`Worker::run_experiment`] gave no report.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// Refused before it was queued (unknown id, bad options, full queue, ...).
    #[error(transparent)]
    Rejected(EngineError),
    /// It ran and failed.
    #[error("{}", .0.message)]
    Failed(RunFailure),
}

impl Worker {
    /// Checks an experiment's id and options and queues it like a run: the same batch
    /// ceiling, queue bound, cancellation, deadline, budget and panic barrier. `reply` gets
    /// its report (or why it failed) on the device thread. Unknown ids are
    /// [`EngineError::UnknownPitfall`]; bad options are [`EngineError::InvalidSpec`] naming
    /// the field.
    pub fn experiment(
        &self,
        id: &str,
        options: PitfallOptions,
        reply: ExperimentReply,
    ) -> Result<ExperimentTicket, EngineError> {
        let options = self.check_experiment(id, options)?;
        let cancel = Arc::new(AtomicBool::new(false));
        let mut position = 0;
        let task = Task::Experiment {
            id: id.to_string(),
            options,
            reply,
            cancel: cancel.clone(),
        };
        self.enqueue(task, |_, p| position = p)?;
        Ok(ExperimentTicket {
            ticket: RunTicket { cancel },
            position,
        })
    }

    /// [`Worker::experiment`], waiting for the report: the CLI's and the server's blocking
    /// path.
    pub fn run_experiment(
        &self,
        id: &str,
        options: PitfallOptions,
    ) -> Result<PitfallReport, ExperimentError> {
        let (tx, rx) = mpsc::channel();
        self.experiment(id, options, Box::new(move |r| drop(tx.send(r))))
            .map_err(ExperimentError::Rejected)?;
        match rx.recv() {
            Ok(Ok(report)) => Ok(report),
            Ok(Err(f)) => Err(ExperimentError::Failed(f)),
            Err(_) => Err(ExperimentError::Rejected(EngineError::WorkerGone)),
        }
    }

    /// The checks [`Worker::experiment`] makes, with the device resolved.
    pub fn check_experiment(
        &self,
        id: &str,
        mut options: PitfallOptions,
    ) -> Result<PitfallOptions, EngineError> {
        if !crate::pitfalls::exists(id) {
            return Err(EngineError::UnknownPitfall {
                id: id.to_string(),
                known: crate::pitfalls::ids(),
            });
        }
        let invalid = |field: &str, message: String| {
            EngineError::InvalidSpec(SpecError {
                field: field.into(),
                message,
            })
        };
        if let (Some(p), Some(card)) = (&options.prediction, crate::pitfalls::card(id)) {
            card.question.check(p).map_err(|m| invalid("prediction", m))?;
        }
        let device = match options.device {
            DeviceChoice::Cuda if !self.machine.has_cuda() => {
                return Err(invalid(
                    "device",
                    "this server has no CUDA device (libtorch found none); use cpu or auto".into(),
                ))
            }
            DeviceChoice::Cpu => DeviceKind::Cpu,
            choice => choice
                .resolve(self.machine.has_cuda())
                .unwrap_or(DeviceKind::Cpu),
        };
        let catalog = &self.config.catalog;
        options.model = options.model.map(|m| catalog.resolve(m));
        if let Some(protocol::ModelId::Named(name)) = options.model {
            return Err(invalid("model", catalog.unknown_message(&name)));
        }
        if let Some(batch) = options.batch {
            if batch == 0 {
                return Err(invalid("batch", "batch must be at least 1".into()));
            }
            if batch > self.config.limits.max_batch {
                return Err(invalid(
                    "batch",
                    format!(
                        "batch {batch} is above this server's limit of {}",
                        self.config.limits.max_batch
                    ),
                ));
            }
        }
        if let (Some(asked), Some(budget)) = (options.budget_bytes, self.memory_budget(device)) {
            if asked > budget.bytes {
                return Err(invalid(
                    "budget_bytes",
                    format!(
                        "budget_bytes {} is above this server's memory budget of {} ({})",
                        protocol::format_bytes(asked),
                        protocol::format_bytes(budget.bytes),
                        budget.source
                    ),
                ));
            }
        }
        Ok(PitfallOptions {
            device: match device {
                DeviceKind::Cpu => DeviceChoice::Cpu,
                DeviceKind::Cuda => DeviceChoice::Cuda,
            },
            ..options
        })
    }
}
