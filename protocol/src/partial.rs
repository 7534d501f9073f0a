//! What a run measured before it failed ([`PartialRun`]): the events it streamed, folded,
//! so a failed run's record keeps its figures so far (the samples and steps as measured,
//! never a report's statistics, which need the whole run).

use serde::{Deserialize, Serialize};

use crate::{format_bytes, Event, GenStep, MemorySource, Sample};

/// The figures a run streamed before its end: its start (device, baseline, how much was
/// planned), then each warm-up and timed pass (a forward run) or step (a generation).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PartialRun {
    /// From `started`: absent when it failed before timing began (building the model, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_source: Option<MemorySource>,
    /// How many warm-up and timed passes (or generations' steps) were planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warmup: Vec<Sample>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<Sample>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<GenStep>,
}

impl PartialRun {
    /// Folds one streamed event in (a terminal or queued one changes nothing).
    pub fn observe(&mut self, event: &Event) {
        match event {
            Event::Started { device_name, baseline_bytes, memory_source, total, .. } => {
                self.device_name = Some(device_name.clone());
                self.baseline_bytes = Some(*baseline_bytes);
                self.memory_source = Some(*memory_source);
                self.planned = Some(*total);
            }
            Event::Warmup { sample } => self.warmup.push(sample.clone()),
            Event::Sample { sample } => self.samples.push(sample.clone()),
            Event::Step { step } => self.steps.push(step.clone()),
            Event::Queued { .. } | Event::Progress { .. } | Event::Done { .. } | Event::Failed { .. } => {}
        }
    }

    /// Whether it measured anything at all (a start counts: the baseline was read).
    pub fn is_empty(&self) -> bool {
        self.device_name.is_none() && self.warmup.is_empty() && self.samples.is_empty() && self.steps.is_empty()
    }

    /// The events that streamed these figures, in order (`started` first): what a viewer
    /// of the recorded run replays before its `failed`.
    pub fn events(&self) -> Vec<Event> {
        let mut out = Vec::new();
        if let (Some(device_name), Some(baseline_bytes), Some(memory_source), Some(total)) =
            (&self.device_name, self.baseline_bytes, self.memory_source, self.planned)
        {
            out.push(Event::started(device_name.clone(), baseline_bytes, memory_source, total));
        }
        out.extend(self.warmup.iter().map(|s| Event::Warmup { sample: s.clone() }));
        out.extend(self.samples.iter().map(|s| Event::Sample { sample: s.clone() }));
        out.extend(self.steps.iter().map(|s| Event::Step { step: s.clone() }));
        out
    }

    /// What it measured, in a clause for people: "it measured 12 timed passes after 3
    /// warm-up passes (median 4.10 ms, peak +1.2 MiB above the baseline)".
    pub fn describe(&self) -> String {
        if self.is_empty() {
            return "nothing was measured before it failed".into();
        }
        let count = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let warm = count(self.warmup.len(), "warm-up pass", "warm-up passes");
        let (what, latencies, peaks): (String, Vec<f64>, Vec<u64>) = if !self.steps.is_empty() {
            (
                count(self.steps.len(), "generation step", "generation steps"),
                self.steps.iter().map(|s| s.latency_ms).collect(),
                self.steps.iter().map(|s| s.peak_bytes).collect(),
            )
        } else if !self.samples.is_empty() {
            (
                format!("{} after {warm}", count(self.samples.len(), "timed pass", "timed passes")),
                self.samples.iter().map(|s| s.latency_ms).collect(),
                self.samples.iter().map(|s| s.peak_bytes).collect(),
            )
        } else if !self.warmup.is_empty() {
            return format!("before it failed it measured {warm} and no timed pass");
        } else {
            return "it failed after its start (the baseline was read), before any pass".into();
        };
        let median = crate::stats::median(&latencies).unwrap_or(0.0);
        let mut figures = format!("median {median:.3} ms");
        if let (Some(base), Some(peak)) = (self.baseline_bytes, peaks.iter().max()) {
            figures.push_str(&format!(", peak +{} above the baseline", format_bytes(peak.saturating_sub(base))));
        }
        format!("before it failed it measured {what} ({figures})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(i: u32, ms: f64, peak: u64) -> Sample {
        Sample { iteration: i, latency_ms: ms, allocated_bytes: 100, peak_bytes: peak, reserved_bytes: None }
    }

    #[test]
    fn events_fold_into_the_figures_and_back() {
        let streamed = vec![
            Event::Queued { position: 0 },
            Event::started("cpu".into(), 1000, MemorySource::CpuTensorMemory, 4),
            Event::Warmup { sample: sample(0, 9.0, 3000) },
            Event::Sample { sample: sample(0, 2.0, 2048) },
            Event::Sample { sample: sample(1, 4.0, 3048) },
        ];
        let mut p = PartialRun::default();
        assert!(p.is_empty());
        assert_eq!(p.describe(), "nothing was measured before it failed");
        for e in &streamed {
            p.observe(e);
        }
        assert_eq!((p.warmup.len(), p.samples.len(), p.planned), (1, 2, Some(4)));
        // Replayed: everything but the queue position, in order.
        assert_eq!(p.events(), streamed[1..].to_vec());
        assert_eq!(
            p.describe(),
            "before it failed it measured 2 timed passes after 1 warm-up pass (median 3.000 ms, peak +2.0 KiB above the baseline)"
        );
        let back: PartialRun = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
    }
}
