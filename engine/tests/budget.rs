//! The memory budget holds during a run (issue 10): a run that crosses it stops at the
//! allocation that crosses it, fails as out of memory, and leaves the process as it was.
//! Its own test binary, because it reads the process's resident memory.

use engine::{MeasureError, Worker, WorkerConfig};
use protocol::{Autocast, DeviceChoice, FailureKind, GradMode, ModelId, RunSpec};

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

#[test]
fn a_run_over_the_budget_stops_at_it_and_the_next_run_measures_as_before() {
    let budget: u64 = 160 << 20;
    let w = Worker::start(WorkerConfig {
        lab: engine::LabConfig {
            memory_limit_bytes: Some(budget),
            threads: 1,
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    let small = RunSpec {
        model: ModelId::TinyMlp,
        device: DeviceChoice::Cpu,
        batch: 4,
        warmup: 1,
        iters: 3,
        ..RunSpec::default()
    };
    let before = w.measure(small.clone(), |_| {}).unwrap();
    let peak_rss_before = rss_bytes();
    // ResNet-50 training at 448 px, batch 4: gigabytes of saved activations; at or below
    // the probe batch, so nothing refuses it up front: the budget must hold during the pass.
    let big = RunSpec {
        model: ModelId::Resnet50,
        batch: 4,
        input_size: Some(448),
        eval: false,
        grad: GradMode::Enabled,
        autocast: Autocast::Off,
        warmup: 0,
        iters: 1,
        ..small.clone()
    };
    match w.measure(big, |_| {}) {
        Err(MeasureError::Failed(f)) => {
            assert_eq!(f.kind, FailureKind::OutOfMemory, "{}", f.message);
            assert!(f.message.contains("budget"), "{}", f.message);
        }
        other => panic!("expected out of memory, got {other:?}"),
    }
    // The process never grew much past the budget (weights are inside it).
    let grew = rss_bytes().saturating_sub(peak_rss_before);
    assert!(
        grew < budget + (64 << 20),
        "peak resident memory grew by {} MiB with a {} MiB budget",
        grew >> 20,
        budget >> 20
    );
    let after = w.measure(small, |_| {}).unwrap();
    assert_eq!(before.memory.baseline_bytes, after.memory.baseline_bytes);
    assert_eq!(
        before.memory.peak_above_baseline_bytes,
        after.memory.peak_above_baseline_bytes
    );
    assert_eq!(after.memory.leaked_bytes, 0);
    let health = w.health();
    assert_eq!(health.memory_check_failures, 0, "{health:?}");
}
