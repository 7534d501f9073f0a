//! Soak: hundreds of consecutive runs through one worker, cycling through every mode, with
//! the memory the worker holds checked after each: every run's allocated memory returns to
//! its baseline, and the worker's own leak check (cached weights only) never fails.
//! The figures are printed and written to `$CARGO_TARGET_DIR/gradless-soak[-cuda].json`.
//! Per device (see `common`): the CPU always, CUDA by hand on a GPU host (the GPU check
//! skips it: 300 runs do not fit its visit).

use crate::common;

use std::time::Instant;

use engine::{LabConfig, Worker, WorkerConfig};
use protocol::{Autocast, DeviceKind, GradMode, ModelId, RunSpec};

const RUNS: usize = 300;

per_device! {
fn hundreds_of_runs_leave_no_memory_behind(device) {
    let worker = Worker::start(WorkerConfig {
        lab: LabConfig {
            threads: 1,
            ..LabConfig::default()
        },
        queue_capacity: 4,
        ..WorkerConfig::default()
    })
    .unwrap();
    // What the worker held once its lab had started: on CUDA the meter reads the whole
    // process (the cuBLAS workspaces its lab primed, whatever earlier tests left), so what
    // the runs leave is read as a difference from this (`common::Bytes`), as the worker's
    // own leak check reads it.
    let bytes = common::bytes(device);
    let start = bytes.held(&worker);
    let started = Instant::now();
    let mut held_after = vec![];
    for i in 0..RUNS {
        // Every grad mode, train and eval, autocast on and off, a few batch sizes, and now
        // and then a convolutional model, so the model cache also turns over.
        let model = if i % 50 == 49 {
            ModelId::Resnet18
        } else {
            ModelId::TinyMlp
        };
        let spec = RunSpec {
            model,
            batch: [1, 3, 8, 16][i % 4],
            input_size: (model == ModelId::Resnet18).then_some(32),
            eval: i % 2 == 0,
            grad: GradMode::ALL[i % 3],
            autocast: if i % 7 == 3 {
                Autocast::Bf16
            } else {
                Autocast::Off
            },
            warmup: 1,
            iters: 2,
            device: common::choice(device),
            ..RunSpec::default()
        };
        let label = spec.label();
        let report = worker
            .measure(spec, |_| {})
            .unwrap_or_else(|e| panic!("run {i} ({label}): {e}"));
        assert_eq!(
            report.memory.leaked_bytes, 0,
            "run {i} ({label}) left memory above its baseline"
        );
        assert_eq!(
            report.memory.after_release_bytes, report.memory.baseline_bytes,
            "run {i} ({label})"
        );
        let health = worker.health();
        let cpu = health
            .last_checks
            .iter()
            .find(|c| c.device == device)
            .expect("a check of the run's device");
        assert!(
            cpu.ok,
            "after run {i} ({label}) the worker holds {} B, it expected {} B (what it started with and its models)",
            cpu.held_bytes, cpu.expected_bytes
        );
        held_after.push(cpu.held_bytes.saturating_sub(start));
    }
    let health = worker.health();
    assert_eq!(health.memory_check_failures, 0, "{health:?}");
    assert!(health.tasks >= RUNS as u64);
    let max_held = *held_after.iter().max().unwrap();
    let report = serde_json::json!({
        "runs": RUNS, "memory_checks": health.memory_checks, "failures": health.memory_check_failures,
        "held_above_start_bytes": {"min": held_after.iter().min(), "max": max_held, "last": held_after.last()},
        "wall_s": started.elapsed().as_secs_f64(),
    });
    println!("soak: {report}");
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        let _ = std::fs::write(
            std::path::Path::new(&dir).join(match device {
                DeviceKind::Cpu => "gradless-soak.json",
                DeviceKind::Cuda => "gradless-soak-cuda.json",
            }),
            report.to_string(),
        );
    }
}
}
