//! What the page knows about the run it is showing, folded from the streamed events.
//! Pure, so the folding is tested natively.

use protocol::{Event, GenStep, MemorySource, Report, Sample};

/// Where a run stands, as the page shows it.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Phase {
    #[default]
    Idle,
    /// The request is on its way.
    Submitting,
    /// Waiting for the device; `0` means next.
    Queued(u32),
    Running {
        done: u32,
        total: u32,
    },
    /// A long part outside the passes (a compile ahead of time, the quality measurement):
    /// what it is and its part now, `done` of `total` parts finished.
    Working {
        what: String,
        done: u32,
        total: u32,
    },
    Done,
    Failed(String),
}

impl Phase {
    pub fn busy(&self) -> bool {
        matches!(
            self,
            Phase::Submitting | Phase::Queued(_) | Phase::Running { .. } | Phase::Working { .. }
        )
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunView {
    pub phase: Phase,
    pub device_name: Option<String>,
    pub memory_source: Option<MemorySource>,
    pub baseline_bytes: Option<u64>,
    pub warmup: Vec<Sample>,
    pub samples: Vec<Sample>,
    /// A generate run's steps (the prefill, then each decode step) as they stream.
    pub steps: Vec<GenStep>,
    pub report: Option<Report>,
}

impl RunView {
    pub fn submitting() -> RunView {
        RunView {
            phase: Phase::Submitting,
            ..RunView::default()
        }
    }

    /// Folds one streamed event into the view.
    pub fn apply(&mut self, event: Event) {
        match event {
            Event::Queued { position } => self.phase = Phase::Queued(position),
            Event::Started {
                device_name,
                baseline_bytes,
                memory_source,
                total,
                ..
            } => {
                self.phase = Phase::Running { done: 0, total };
                self.device_name = Some(device_name);
                self.baseline_bytes = Some(baseline_bytes);
                self.memory_source = Some(memory_source);
            }
            Event::Warmup { sample } => {
                self.warmup.push(sample);
                self.advance();
            }
            Event::Sample { sample } => {
                self.samples.push(sample);
                self.advance();
            }
            Event::Step { step } => {
                self.steps.push(step);
                self.advance();
            }
            Event::Progress { what, done, total } => self.phase = Phase::Working { what, done, total },
            Event::Done { report } => {
                self.phase = Phase::Done;
                self.report = Some(*report);
            }
            Event::Failed { failure } => self.phase = Phase::Failed(failure.message),
        }
    }

    fn advance(&mut self) {
        if let Phase::Running { done, .. } = &mut self.phase {
            *done += 1;
        }
    }

    /// Progress in 0..=1 for the progress bar.
    pub fn progress(&self) -> f64 {
        match self.phase {
            Phase::Running { done, total } | Phase::Working { done, total, .. } if total > 0 => done as f64 / total as f64,
            Phase::Done => 1.0,
            _ => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::{FailureKind, RunFailure};

    fn sample(i: u32) -> Sample {
        Sample {
            iteration: i,
            latency_ms: 1.0,
            allocated_bytes: 10,
            peak_bytes: 20,
            reserved_bytes: None,
        }
    }

    #[test]
    fn events_fold_into_progress_and_samples() {
        let mut v = RunView::submitting();
        v.apply(Event::Queued { position: 1 });
        assert_eq!(v.phase, Phase::Queued(1));
        assert!(v.phase.busy());
        v.apply(Event::started("cpu".into(), 5, MemorySource::CpuTensorMemory, 4));
        v.apply(Event::Warmup { sample: sample(0) });
        v.apply(Event::Sample { sample: sample(0) });
        assert_eq!(v.phase, Phase::Running { done: 2, total: 4 });
        assert_eq!(v.progress(), 0.5);
        assert_eq!((v.warmup.len(), v.samples.len()), (1, 1));
        v.apply(Event::Failed {
            failure: RunFailure {
                kind: FailureKind::OutOfMemory,
                message: "OOM at batch 9".into(),
            },
        });
        assert_eq!(v.phase, Phase::Failed("OOM at batch 9".into()));
        assert!(!v.phase.busy());
    }

    /// A compile before the passes and a quality measurement after the steps each say what
    /// they are doing and move the bar (issue 68: an empty bar under "Queued", then a full
    /// one under "64 steps streamed").
    #[test]
    fn a_long_part_outside_the_passes_names_itself_and_moves() {
        let mut v = RunView::submitting();
        v.apply(Event::Queued { position: 0 });
        v.apply(Event::Progress { what: "Compiling ahead of time (AOTInductor): export (torch.export)".into(), done: 1, total: 5 });
        assert!(v.phase.busy());
        assert_eq!(v.progress(), 0.2);
        assert!(matches!(&v.phase, Phase::Working { what, .. } if what.contains("export")));
        v.apply(Event::started("cpu".into(), 5, MemorySource::CpuTensorMemory, 1));
        v.apply(Event::Sample { sample: sample(0) });
        assert_eq!(v.progress(), 1.0);
        v.apply(Event::Progress { what: "Measuring quality: setting 3 of 9 (fp32)".into(), done: 2, total: 9 });
        assert!(v.phase.busy());
        assert!((v.progress() - 2.0 / 9.0).abs() < 1e-12);
        assert_eq!(v.samples.len(), 1, "the figures streamed so far stay");
    }
}

