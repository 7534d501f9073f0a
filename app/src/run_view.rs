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
    Done,
    Failed(String),
}

impl Phase {
    pub fn busy(&self) -> bool {
        matches!(
            self,
            Phase::Submitting | Phase::Queued(_) | Phase::Running { .. }
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
    /// A generation's quality measurement to come after its steps, as the run's start said.
    pub quality: Option<protocol::QualityPlan>,
    pub report: Option<Report>,
}

impl RunView {
    pub fn submitting() -> RunView {
        RunView {
            phase: Phase::Submitting,
            ..RunView::default()
        }
    }

    /// The quality measurement still to come, with its time at the prefill rate this run
    /// measured (once the prefill has streamed): "Then quality: 11 settings × 2,950 tokens
    /// of … : about 4.2 s at this run's prefill rate (700 tokens/s)".
    pub fn quality_ahead(&self) -> Option<String> {
        let plan = self.quality.as_ref()?;
        let what = format!("Then quality: {} settings × {} tokens of {}", plan.settings, plan.tokens, plan.text);
        let prefill = self.steps.iter().find(|s| s.phase == protocol::GenPhase::Prefill && s.latency_ms > 0.0);
        Some(match prefill {
            Some(p) => {
                let rate = p.tokens_in as f64 / (p.latency_ms / 1000.0);
                match plan.estimate_ms(rate) {
                    Some(ms) => format!("{what}: about {} at this run's prefill rate ({rate:.0} tokens/s).", seconds(ms)),
                    None => format!("{what}."),
                }
            }
            None => format!("{what}: its time follows from the prefill's rate, measured next."),
        })
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
                quality,
            } => {
                self.phase = Phase::Running { done: 0, total };
                self.quality = quality;
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
            Phase::Running { done, total } if total > 0 => done as f64 / total as f64,
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

    /// A run with quality says what it will score when it starts, and its time once the
    /// prefill has measured a rate: settings × tokens at that rate.
    #[test]
    fn the_quality_ahead_is_timed_by_the_prefill_rate() {
        let mut v = RunView::submitting();
        assert_eq!(v.quality_ahead(), None);
        v.apply(Event::Started {
            device_name: "cpu".into(),
            baseline_bytes: 5,
            memory_source: MemorySource::CpuTensorMemory,
            total: 3,
            quality: Some(protocol::QualityPlan { settings: 10, tokens: 2000, text: "notes.txt".into(), text_bytes: 8000 }),
        });
        let before = v.quality_ahead().unwrap();
        assert!(before.contains("10 settings × 2000 tokens of notes.txt") && before.contains("measured next"), "{before}");
        // 100 tokens in 50 ms: 2,000 tokens/s, so 10 × 2,000 tokens take 10 s.
        let step: protocol::GenStep = serde_json::from_value(serde_json::json!({
            "step": 0, "phase": "prefill", "position": 0, "tokens_in": 100, "latency_ms": 50.0,
            "allocated_bytes": 0, "peak_bytes": 0, "kv_cache_bytes": 0, "graph_bytes": 0
        }))
        .unwrap();
        v.apply(Event::Step { step });
        let timed = v.quality_ahead().unwrap();
        assert!(timed.contains("about 10 s") && timed.contains("2000 tokens/s"), "{timed}");
    }

    #[test]
    fn events_fold_into_progress_and_samples() {
        let mut v = RunView::submitting();
        v.apply(Event::Queued { position: 1 });
        assert_eq!(v.phase, Phase::Queued(1));
        assert!(v.phase.busy());
        v.apply(Event::Started {
            device_name: "cpu".into(),
            baseline_bytes: 5,
            memory_source: MemorySource::CpuTensorMemory,
            total: 4,
            quality: None,
        });
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
}

/// A time for people: "0.4 s", "12 s", "3 min 20 s".
fn seconds(ms: f64) -> String {
    let s = ms / 1000.0;
    if s < 10.0 {
        format!("{s:.1} s")
    } else if s < 120.0 {
        format!("{s:.0} s")
    } else {
        format!("{} min {} s", (s / 60.0).floor(), (s % 60.0).round())
    }
}
