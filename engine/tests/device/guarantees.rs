//! What every task gets from the worker (issue 10's engine side) and what the baseline means
//! (weights + input, whatever ran before): a panic barrier, checked experiment options, the
//! thread cap, deadlines that hold within a pass, refusal up front from a measured profile.
//! Per device where the behaviour is the device's (see `common`).

use crate::common;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::{EngineError, ExperimentError, MeasureError, RunControl, Worker, WorkerConfig};
use protocol::{
    Autocast, DeviceChoice, DeviceKind, FailureKind, GradMode, ModelId, PitfallOptions, Report,
    RunSpec,
};

fn spec(device: DeviceKind, model: ModelId, batch: u32, size: Option<u32>) -> RunSpec {
    RunSpec {
        model,
        device: common::choice(device),
        batch,
        input_size: size,
        eval: true,
        grad: GradMode::NoGrad,
        autocast: Autocast::Off,
        warmup: 1,
        iters: 2,
        threads: Some(1),
        advanced: Default::default(),
        generate: None,
    }
}

fn measure(w: &Worker, s: RunSpec) -> Report {
    w.measure(s, |_| {}).expect("run succeeds")
}

#[test]
fn a_panic_in_any_task_fails_that_task_and_the_worker_goes_on() {
    let _one_at_a_time = crate::common::cpu_lock();
    let w = Worker::start(WorkerConfig::default()).unwrap();
    match w.call(|_| -> u32 { panic!("injected for the test") }) {
        Err(EngineError::TaskPanicked(reason)) => {
            assert!(reason.contains("injected for the test"), "{reason}")
        }
        other => panic!("expected the panic as a task failure, got {other:?}"),
    }
    // The device thread lives: a run and a call after it work.
    let r = measure(&w, spec(DeviceKind::Cpu, ModelId::TinyMlp, 4, None));
    assert_eq!(r.memory.leaked_bytes, 0);
    assert_eq!(w.call(|_| 7).unwrap(), 7);
    assert!(w.health().tasks >= 3);
}

/// Issue 47: a task that panics leaves nothing of itself on the lab. The device loop catches
/// the panic and keeps the lab; the dead task's control (its deadline has passed, its
/// cancel flag is set) used to stay as the lab's task, and every measurement after it was
/// cancelled.
#[test]
fn a_panic_inside_a_task_leaves_no_deadline_or_cancel_flag_behind() {
    let _one_at_a_time = crate::common::cpu_lock();
    let w = Worker::start(WorkerConfig::default()).unwrap();
    let dead = RunControl {
        cancel: Arc::new(AtomicBool::new(true)),
        deadline: Some(Instant::now()),
        budget_bytes: None,
    };
    match w.call(move |lab| lab.with_task(dead, |_| -> u32 { panic!("injected inside the task") })) {
        Err(EngineError::TaskPanicked(reason)) => {
            assert!(reason.contains("injected inside the task"), "{reason}")
        }
        other => panic!("expected the panic as a task failure, got {other:?}"),
    }
    assert!(
        w.call(|lab| lab.task_control().is_none()).unwrap(),
        "the panicked task's control is still the lab's task"
    );
    // A normal run after it completes, under its own deadline only.
    let checked = w.check(spec(DeviceKind::Cpu, ModelId::TinyMlp, 4, None)).unwrap();
    let own = RunControl {
        deadline: Some(Instant::now() + Duration::from_secs(60)),
        ..Default::default()
    };
    let r = w
        .call(move |lab| lab.measure(&checked, &own, &mut |_| {}))
        .unwrap()
        .expect("a run after the panic completes under its own deadline");
    assert_eq!(r.memory.leaked_bytes, 0);
    // And one through the queue, under the worker's.
    let r = measure(&w, spec(DeviceKind::Cpu, ModelId::TinyMlp, 4, None));
    assert_eq!(r.memory.leaked_bytes, 0);
}

#[test]
fn threads_are_capped_at_the_cpu_count_naming_the_field() {
    let _one_at_a_time = crate::common::cpu_lock();
    let w = Worker::start(WorkerConfig::default()).unwrap();
    let cpus = engine::spec::cpu_count();
    let over = RunSpec {
        threads: Some(cpus + 1),
        ..spec(DeviceKind::Cpu, ModelId::TinyMlp, 2, None)
    };
    let err = w.check(over).unwrap_err();
    assert_eq!(err.field, "threads");
    assert!(err.message.contains(&cpus.to_string()), "{}", err.message);
    let at = RunSpec {
        threads: Some(cpus),
        ..spec(DeviceKind::Cpu, ModelId::TinyMlp, 2, None)
    };
    assert!(w.check(at).is_ok());
    let zero = w
        .check(RunSpec {
            batch: 0,
            ..RunSpec::default()
        })
        .unwrap_err();
    assert_eq!(zero.field, "batch");
}

#[test]
fn experiments_go_through_the_checked_path() {
    let _one_at_a_time = crate::common::cpu_lock();
    let w = Worker::start(WorkerConfig {
        limits: protocol::Limits {
            max_batch: 64,
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    let cpu = PitfallOptions {
        device: DeviceChoice::Cpu,
        ..Default::default()
    };
    match w.run_experiment("no-such-card", cpu.clone()) {
        Err(ExperimentError::Rejected(EngineError::UnknownPitfall { id, known })) => {
            assert_eq!(id, "no-such-card");
            assert!(known.iter().any(|k| k == "eval-and-autograd"));
        }
        other => panic!("expected an unknown pitfall, got {other:?}"),
    }
    for (batch, field) in [(200_000, "batch"), (0, "batch")] {
        match w.run_experiment(
            "eval-and-autograd",
            PitfallOptions {
                batch: Some(batch),
                ..cpu.clone()
            },
        ) {
            Err(ExperimentError::Rejected(EngineError::InvalidSpec(e))) => {
                assert_eq!(e.field, field, "batch {batch}")
            }
            other => panic!("batch {batch}: expected a refusal, got {other:?}"),
        }
    }
    if !engine::torch_ext::cuda_available() {
        match w.run_experiment(
            "eval-and-autograd",
            PitfallOptions {
                device: DeviceChoice::Cuda,
                ..Default::default()
            },
        ) {
            Err(ExperimentError::Rejected(EngineError::InvalidSpec(e))) => {
                assert_eq!(e.field, "device")
            }
            other => panic!("expected a refusal naming the device, got {other:?}"),
        }
    }
    // A valid one runs and answers its report.
    let report = w
        .run_experiment(
            "eval-and-autograd",
            PitfallOptions {
                model: Some(ModelId::TinyMlp),
                batch: Some(8),
                ..cpu
            },
        )
        .expect("the experiment runs");
    assert_eq!(report.id, "eval-and-autograd");
}

#[test]
fn experiments_have_the_run_deadline() {
    let _one_at_a_time = crate::common::cpu_lock();
    let w = Worker::start(WorkerConfig {
        run_timeout: Some(Duration::from_millis(1)),
        ..Default::default()
    })
    .unwrap();
    match w.run_experiment(
        "eval-and-autograd",
        PitfallOptions {
            device: DeviceChoice::Cpu,
            ..Default::default()
        },
    ) {
        Err(ExperimentError::Failed(f)) => {
            assert_eq!(f.kind, FailureKind::Timeout, "{}", f.message)
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[test]
fn a_cancelled_experiment_never_runs() {
    let _one_at_a_time = crate::common::cpu_lock();
    let w = Worker::start(WorkerConfig::default()).unwrap();
    common::with_device_busy(&w, |busy| {
        let (tx, rx) = std::sync::mpsc::channel();
        let queued = w
            .experiment(
                "eval-and-autograd",
                PitfallOptions::default(),
                Box::new(move |r| tx.send(r).unwrap()),
            )
            .unwrap();
        assert_eq!(queued.position, 0);
        queued.ticket.cancel();
        busy.release();
        match rx.recv().unwrap() {
            Err(f) => assert_eq!(f.kind, FailureKind::Cancelled),
            Ok(_) => panic!("a cancelled experiment ran"),
        }
    });
}

#[test]
fn a_run_past_its_deadline_stops_within_the_pass() {
    let _one_at_a_time = crate::common::cpu_lock();
    // ResNet-50 at 512 px, batch 4, one thread: one pass is tens of GFLOPs, seconds here.
    let timeout = Duration::from_millis(400);
    let w = Worker::start(WorkerConfig {
        run_timeout: Some(timeout),
        ..Default::default()
    })
    .unwrap();
    // Built outside any run, so the deadline covers the forward pass only.
    w.call(|lab| {
        lab.model_index(ModelId::Resnet50, DeviceKind::Cpu, 512)
            .map(|_| ())
    })
    .unwrap()
    .unwrap();
    let s = RunSpec {
        warmup: 0,
        iters: 1,
        ..spec(DeviceKind::Cpu, ModelId::Resnet50, 4, Some(512))
    };
    let started = Instant::now();
    let result = w.measure(s.clone(), |_| {});
    let took = started.elapsed();
    match result {
        Err(MeasureError::Failed(f)) => assert_eq!(f.kind, FailureKind::Timeout, "{}", f.message),
        Ok(r) => panic!(
            "a {:.0} ms pass was reported done with a {} ms limit",
            r.latency_ms.max,
            timeout.as_millis()
        ),
        Err(e) => panic!("{e}"),
    }
    // Without a deadline the same pass takes this long; the stop came well before its end.
    let free = Worker::start(WorkerConfig::default()).unwrap();
    let full = measure(&free, s);
    assert!(
        full.latency_ms.max > 2.0 * timeout.as_millis() as f64,
        "the pass ({:.0} ms) is too short to show the stop",
        full.latency_ms.max
    );
    assert!(
        took.as_secs_f64() * 1000.0 < full.latency_ms.max,
        "stopped after {took:?}; a whole pass takes {:.0} ms",
        full.latency_ms.max
    );
}

#[test]
fn a_pass_predicted_past_the_deadline_is_refused_up_front() {
    let _one_at_a_time = crate::common::cpu_lock();
    // 60 s: the small run below must finish on a busy 2-core machine (it failed once at 20 s
    // under a load of 7.7), while one batch-4096 pass at 224 px, minutes long on a CPU, is
    // still predicted far past it.
    let w = Worker::start(WorkerConfig {
        run_timeout: Some(Duration::from_secs(60)),
        ..Default::default()
    })
    .unwrap();
    // A run above the probe batch profiles its model and mode (batches 1 and 4) first.
    let small = spec(DeviceKind::Cpu, ModelId::Resnet18, 5, Some(224));
    let r = measure(&w, small.clone());
    // One pass at batch 4096 is predicted from the profile: far longer than a 1 s limit.
    let big = RunSpec {
        batch: 4096,
        ..small
    };
    let checked = w.check(big.clone()).unwrap();
    let refused = w
        .call(move |lab| {
            let control = engine::RunControl {
                deadline: Some(Instant::now() + Duration::from_secs(1)),
                budget_bytes: Some(u64::MAX),
                ..Default::default()
            };
            lab.admit(&checked, &control)
        })
        .unwrap();
    match refused {
        Err(f) => {
            assert_eq!(f.kind, FailureKind::Timeout, "{}", f.message);
            assert!(
                f.message.contains("refused before it started"),
                "{}",
                f.message
            );
        }
        Ok(()) => panic!(
            "admitted a batch-4096 pass with a 1 s limit (batch 5 took {:.0} ms)",
            r.latency_ms.p50
        ),
    }
    // The profile is cached: a submission predicted not to finish in the worker's 60 s
    // (or not to fit its budget) is refused before it is queued, naming the batch.
    match w.submit(big, Box::new(|_| {})) {
        Err(EngineError::InvalidSpec(e)) => {
            assert_eq!(e.field, "batch");
            assert!(e.message.contains("predicted"), "{}", e.message);
        }
        other => panic!("expected a refusal at submission, got {other:?}"),
    }
}

per_device! {
/// Issue 19: the baseline is the run's weights and input, whatever the worker holds besides.
fn the_same_spec_has_the_same_baseline_whatever_ran_before(device) {
    let a = spec(device, ModelId::TinyMlp, 4, None);
    let b = spec(device, ModelId::Resnet18, 1, Some(64));
    let w = Worker::start(WorkerConfig::default()).unwrap();
    let bytes = common::bytes(device);
    // B alone first, then A, B with A's weights cached, A again.
    let b0 = measure(&w, b.clone());
    let a1 = measure(&w, a.clone());
    let b1 = measure(&w, b.clone());
    let a2 = measure(&w, a);
    let a_size = a1.spec.resolved_input_size();
    let a_tensors: Vec<u64> = w
        .call(move |lab| {
            let i = lab.model_index(ModelId::TinyMlp, device, a_size).unwrap();
            lab.model(i).vs.variables().values().map(|t| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64).collect()
        })
        .unwrap();
    let a_weights = w
        .call(move |lab| {
            let i = lab.model_index(ModelId::TinyMlp, device, a_size).unwrap();
            lab.model(i).held_bytes
        })
        .unwrap();
    // The same spec on the same worker: the same baseline and peak (A's tensors are small:
    // on CUDA its blocks round alike).
    assert_eq!(a1.memory.baseline_bytes, a2.memory.baseline_bytes);
    bytes.assert_eq(a1.memory.peak_above_baseline_bytes, a2.memory.peak_above_baseline_bytes, bytes.slack(a_tensors.iter().copied()), "A's peak, before and after B");
    assert_eq!(b0.memory.baseline_bytes, b1.memory.baseline_bytes, "B alone and B with A cached");
    // B ran with A's weights cached: they are reported apart, not in B's baseline. What
    // else the device held is a process-wide figure on CUDA, so it is compared inside this
    // worker: B with A cached held exactly A's weights more than B alone.
    let (o0, o1) = (b0.memory.other_held_bytes.unwrap(), b1.memory.other_held_bytes.unwrap());
    assert!(o1 >= a1.memory.baseline_bytes / 2, "A's weights are held while B runs: {:?}", b1.memory);
    bytes.assert_eq(o1 - o0.min(o1), a_weights, bytes.slack(a_tensors.iter().copied()), "what B's run held besides, with A cached, less without");
    // Another worker builds B to the same baseline (a difference inside each worker: its
    // weights and input as its own meter counted them; on CUDA each built from whatever
    // blocks the process's allocator had cached, so within B's tensors' slack).
    let b_tensors: Vec<u64> = w
        .call(move |lab| {
            let i = lab.model_index(ModelId::Resnet18, device, 64).unwrap();
            lab.model(i).vs.variables().values().map(|t| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64).collect()
        })
        .unwrap();
    drop(w);
    let fresh = Worker::start(WorkerConfig::default()).unwrap();
    let b2 = measure(&fresh, b);
    bytes.assert_eq(b1.memory.baseline_bytes, b2.memory.baseline_bytes, bytes.slack(b_tensors.iter().copied().chain([64 * 64 * 3 * 4])), "B's baseline on two workers");
    // The baseline is at least the weights' element bytes plus the input's.
    let input = 64 * 64 * 3 * 4;
    assert!(b2.memory.baseline_bytes >= input);
}
}
