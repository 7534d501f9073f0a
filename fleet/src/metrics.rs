//! Prometheus metrics, in the text exposition format, for all three roles: the
//! single-process server, fleet fronts and fleet workers each serve `GET /metrics` from the
//! one registry of their process. A handful of counters and one histogram do not need a
//! metrics library: atomics and a mutex-guarded map, rendered on scrape.
//!
//! Names (every one prefixed `gradless_`):
//! - `runs_started_total`, `runs_finished_total`, `runs_failed_total{reason}`: runs measured
//!   by this process's device (the single-process server, a worker);
//! - `run_duration_seconds` (histogram): from `started` to `done`/`failed`;
//! - `runs_submitted_total{worker}`: runs a front handed to a worker;
//! - `queue_depth{worker}`: runs waiting for a device (the process's own queue, or on a front
//!   each live worker's, as it last announced it);
//! - `device_memory_bytes{device}`: memory the device holds after the last task (CPU tensor
//!   memory, or the CUDA caching allocator's allocated bytes);
//! - `sse_viewers`: event streams open now;
//! - `workers_live`: on a front, the workers whose heartbeat is current.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use protocol::Event;

/// Upper bounds of the run-duration buckets, in seconds: a tiny MLP on a GPU to a large
/// batch on two CPU cores.
const DURATION_BUCKETS: [f64; 10] = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

#[derive(Default)]
pub struct Metrics {
    started: AtomicU64,
    finished: AtomicU64,
    failed: Mutex<BTreeMap<String, u64>>,
    submitted: Mutex<BTreeMap<String, u64>>,
    duration: Mutex<Histogram>,
    viewers: AtomicI64,
    queue_depth: Mutex<BTreeMap<String, u64>>,
    device_memory: Mutex<BTreeMap<String, u64>>,
    workers_live: Mutex<Option<u64>>,
}

#[derive(Default)]
struct Histogram {
    counts: [u64; DURATION_BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// This process's registry.
pub fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::default)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Follows one run's events and counts them once: started, then finished or failed with
/// the duration between.
#[derive(Default)]
pub struct RunMeter {
    started: Option<Instant>,
    ended: bool,
}

impl RunMeter {
    pub fn observe(&mut self, event: &Event) {
        let m = global();
        match event {
            Event::Started { .. } if self.started.is_none() => {
                self.started = Some(Instant::now());
                m.started.fetch_add(1, Ordering::Relaxed);
            }
            Event::Done { .. } | Event::Failed { .. } if !self.ended => {
                self.ended = true;
                if let Event::Failed { failure } = event {
                    let reason = serde_json::to_value(failure.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_else(|| "unknown".into());
                    *lock(&m.failed).entry(reason).or_default() += 1;
                } else {
                    m.finished.fetch_add(1, Ordering::Relaxed);
                }
                if let Some(t) = self.started {
                    m.observe_duration(t.elapsed().as_secs_f64());
                }
            }
            _ => {}
        }
    }
}

impl Metrics {
    fn observe_duration(&self, seconds: f64) {
        let mut h = lock(&self.duration);
        for (i, bound) in DURATION_BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                h.counts[i] += 1;
            }
        }
        h.count += 1;
        h.sum += seconds;
    }

    /// A failure counted without a run meter (a run that expired in a queue, a worker
    /// that went away), by reason.
    pub fn count_failure(&self, reason: &str) {
        *lock(&self.failed).entry(reason.to_string()).or_default() += 1;
    }

    pub fn count_submitted(&self, worker: &str) {
        *lock(&self.submitted).entry(worker.to_string()).or_default() += 1;
    }

    /// An event stream opened; the guard closes it.
    pub fn viewer(&'static self) -> ViewerCount {
        self.viewers.fetch_add(1, Ordering::Relaxed);
        ViewerCount(self)
    }

    /// Replaces the queue depths (one per worker, or one for this process's device).
    pub fn set_queue_depths(&self, depths: impl IntoIterator<Item = (String, u64)>) {
        *lock(&self.queue_depth) = depths.into_iter().collect();
    }

    pub fn set_device_memory(&self, memory: impl IntoIterator<Item = (String, u64)>) {
        *lock(&self.device_memory) = memory.into_iter().collect();
    }

    pub fn set_workers_live(&self, n: u64) {
        *lock(&self.workers_live) = Some(n);
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP gradless_{name} {help}\n# TYPE gradless_{name} counter\ngradless_{name} {value}");
        };
        counter(&mut out, "runs_started_total", "Runs whose timing started on this process's device.", self.started.load(Ordering::Relaxed));
        counter(&mut out, "runs_finished_total", "Runs that finished with a report on this process's device.", self.finished.load(Ordering::Relaxed));
        labelled(&mut out, "runs_failed_total", "counter", "Runs that failed, by reason.", "reason", &lock(&self.failed));
        labelled(&mut out, "runs_submitted_total", "counter", "Runs this front handed to a worker.", "worker", &lock(&self.submitted));
        labelled(&mut out, "queue_depth", "gauge", "Runs waiting for a device.", "worker", &lock(&self.queue_depth));
        labelled(&mut out, "device_memory_bytes", "gauge", "Memory the device holds after the last task.", "device", &lock(&self.device_memory));
        let _ = writeln!(out, "# HELP gradless_sse_viewers Event streams open now.\n# TYPE gradless_sse_viewers gauge\ngradless_sse_viewers {}", self.viewers.load(Ordering::Relaxed).max(0));
        if let Some(n) = *lock(&self.workers_live) {
            let _ = writeln!(out, "# HELP gradless_workers_live Workers whose heartbeat is current.\n# TYPE gradless_workers_live gauge\ngradless_workers_live {n}");
        }
        let h = lock(&self.duration);
        let _ = writeln!(out, "# HELP gradless_run_duration_seconds From a run's start to its end.\n# TYPE gradless_run_duration_seconds histogram");
        for (bound, count) in DURATION_BUCKETS.iter().zip(h.counts) {
            let _ = writeln!(out, "gradless_run_duration_seconds_bucket{{le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "gradless_run_duration_seconds_bucket{{le=\"+Inf\"}} {}\ngradless_run_duration_seconds_sum {}\ngradless_run_duration_seconds_count {}", h.count, h.sum, h.count);
        out
    }
}

fn labelled(out: &mut String, name: &str, kind: &str, help: &str, label: &str, values: &BTreeMap<String, u64>) {
    let _ = writeln!(out, "# HELP gradless_{name} {help}\n# TYPE gradless_{name} {kind}");
    for (k, v) in values {
        let _ = writeln!(out, "gradless_{name}{{{label}=\"{}\"}} {v}", escape(k));
    }
}

/// A label value as the exposition format wants it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// One open event stream; counted until dropped.
pub struct ViewerCount(&'static Metrics);

impl Drop for ViewerCount {
    fn drop(&mut self) {
        self.0.viewers.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::{FailureKind, RunFailure};

    #[test]
    fn a_run_is_counted_once_and_its_duration_observed() {
        let m = global();
        let before = m.render();
        let mut meter = RunMeter::default();
        let started = Event::Queued { position: 0 };
        meter.observe(&started);
        let failed = Event::Failed {
            failure: RunFailure { kind: FailureKind::Timeout, message: "t".into() },
        };
        meter.observe(&failed);
        meter.observe(&failed);
        let after = m.render();
        let count = |text: &str, line: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(line).map(|v| v.trim().parse::<f64>().unwrap()))
                .unwrap_or(0.0)
        };
        assert_eq!(
            count(&after, "gradless_runs_failed_total{reason=\"timeout\"}")
                - count(&before, "gradless_runs_failed_total{reason=\"timeout\"}"),
            1.0
        );
        // Never started: no duration.
        assert_eq!(
            count(&after, "gradless_run_duration_seconds_count"),
            count(&before, "gradless_run_duration_seconds_count")
        );
        assert!(m.render().contains("# TYPE gradless_run_duration_seconds histogram"));
    }
}
