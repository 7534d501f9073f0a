//! Per-device tests, like candle's test_utils: one test body, run on the CPU always and on
//! CUDA by `scripts/gpu-check.sh` on a GPU host. The CUDA halves are always compiled (so
//! CI type-checks them and the GPU check carries the very binary CI built) and marked
//! `#[ignore]`: the check runs them with `--ignored --test-threads=1` (the CUDA allocator's
//! statistics are per process, so tests in parallel would mix their peaks and baselines).
//!
//! `per_device! { fn name(device) { ... } }` makes a module `name` with the tests `cpu`
//! and `cuda` (ignored), each calling the body with its [`DeviceKind`];
//! `per_device!(a, b, ...)` calls the functions `a`, `b`, ... the same way from the tests
//! `cpu::a` and `cuda::a` (see the macro).
#![allow(dead_code)]

use protocol::{Autocast, DeviceChoice, DeviceKind, GradMode, ModelId, RunSpec};

/// The spec field that asks for `device`.
pub fn choice(device: DeviceKind) -> DeviceChoice {
    match device {
        DeviceKind::Cpu => DeviceChoice::Cpu,
        DeviceKind::Cuda => DeviceChoice::Cuda,
    }
}

/// A run of `model` on `device` that takes a fraction of a second on two cores: images at
/// 64 px, eval mode, one warm-up and three timed iterations on one thread.
pub fn small_run(device: DeviceKind, model: ModelId, batch: u32, grad: GradMode) -> RunSpec {
    RunSpec {
        model,
        device: choice(device),
        batch,
        input_size: model.is_image().then_some(64),
        eval: true,
        grad,
        autocast: Autocast::Off,
        warmup: 1,
        iters: 3,
        threads: Some(1),
        ..RunSpec::default()
    }
}

/// A CUDA test on a machine without CUDA fails: it must not pass by doing nothing.
pub fn require(device: DeviceKind) {
    if device == DeviceKind::Cuda {
        assert!(
            engine::torch_ext::cuda_available(),
            "a CUDA test ran (--ignored) but libtorch sees no CUDA device"
        );
    }
}

/// A worker with the default configuration. Its tests need no lock of their own: each
/// holds [`cpu_lock`] or [`cuda_lock`] for its whole body.
pub fn worker() -> engine::Worker {
    engine::Worker::start(engine::WorkerConfig::default()).expect("worker starts")
}

/// Held by each CPU test for its whole body: one test at a time builds models and runs
/// passes on the CPU. libtorch has one CPU random generator per process, and a model's
/// weights are drawn from it right after it is seeded; two tests at once draw each other's
/// numbers (or reseed it mid-build), so two builds of one seeded model could differ. The
/// drift test caught it: its quantized decoder and its unquantized reference, built from
/// the same seed while other tests ran, had different weights (max |Δ logit| 17 against
/// logits of 13, with int8).
pub fn cpu_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Held by each CUDA test for its whole body: the CUDA half runs one test at a time even
/// when the harness is given more threads (scripts/gpu-check.sh also passes
/// --test-threads=1, which covers tests outside `per_device!`).
pub fn cuda_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Holds `worker`'s device thread busy with a task that waits, so that what `body` submits
/// stays in the queue; `body` lets the thread go with [`Busy::release`] (or by dropping it,
/// so a failing assertion cannot leave the thread waiting).
pub fn with_device_busy<R>(worker: &engine::Worker, body: impl FnOnce(Busy) -> R) -> R {
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let (busy_tx, busy_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(|| {
            worker
                .call(move |_| {
                    busy_tx.send(()).unwrap();
                    let _ = release_rx.recv();
                })
                .unwrap()
        });
        busy_rx.recv().unwrap();
        body(Busy(release_tx))
    })
}

/// The device thread held by [`with_device_busy`].
pub struct Busy(std::sync::mpsc::Sender<()>);

impl Busy {
    /// Lets the device thread go on to the queued tasks.
    pub fn release(self) {
        let _ = self.0.send(());
    }
}

#[macro_export]
macro_rules! per_device {
    ($(#[$meta:meta])* fn $name:ident($device:ident) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn body($device: protocol::DeviceKind) $body
            #[test]
            fn cpu() {
                let _one_at_a_time = $crate::common::cpu_lock();
                body(protocol::DeviceKind::Cpu)
            }
            #[test]
            #[ignore = "needs a CUDA device: scripts/gpu-check.sh runs it on one"]
            fn cuda() {
                let _one_at_a_time = $crate::common::cuda_lock();
                $crate::common::require(protocol::DeviceKind::Cuda);
                body(protocol::DeviceKind::Cuda)
            }
        }
    };
    // The list form, for bodies that are functions of their own: the tests are named
    // `cpu::NAME` and `cuda::NAME`. The pitfall cards use it: their CUDA half takes
    // minutes, so scripts/gpu-check.sh skips `pitfalls::cuda::` and runs the cards on CUDA
    // through `gradless pitfall all` within its own time limit instead.
    ($($name:ident),+ $(,)?) => {
        mod cpu {
            $(#[test]
            fn $name() {
                let _one_at_a_time = $crate::common::cpu_lock();
                super::$name(protocol::DeviceKind::Cpu)
            })+
        }
        mod cuda {
            $(#[test]
            #[ignore = "needs a CUDA device: scripts/gpu-check.sh runs it on one"]
            fn $name() {
                let _one_at_a_time = $crate::common::cuda_lock();
                $crate::common::require(protocol::DeviceKind::Cuda);
                super::$name(protocol::DeviceKind::Cuda)
            })+
        }
    };
}
