//! Per-device tests, like candle's test_utils: one test body, run on the CPU always and on
//! CUDA by `scripts/gpu-check.sh` on a GPU host. The CUDA halves are always compiled (so
//! CI type-checks them and the GPU check carries the very binary CI built) and marked
//! `#[ignore]`: the check runs them by exact name with `--ignored --test-threads=1` (the CUDA
//! allocator's statistics are per process, so tests in parallel would mix their peaks and
//! baselines), leaving out the statistical A/A test (`a_a::`), the soak (`soak::`) and the
//! cards (`pitfalls::cuda::`: its card steps run the cards by id, its tour step the
//! tour-order test).
//!
//! Byte figures are compared by ONE rule, [`Bytes`]: exact on the CPU, within the caching
//! allocator's granularity on CUDA, and a process-wide CUDA statistic only as a difference
//! inside one worker. Every CUDA half that compares bytes goes through it.
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

pub use protocol::bytes_rule::{CUDA_BLOCK, CUDA_SMALL};

/// How byte figures are compared on a device: ONE rule for every device test, the one in
/// `protocol::bytes_rule` (which the GPU check's scripts and the tour-order test use too).
///
/// - The CPU's counter sees the bytes each allocation asked for, on the measuring thread
///   only: a figure is exact, and compared exactly.
/// - CUDA's caching allocator rounds each tensor up to whole 512 B blocks, and may hand a
///   tensor over 1 MiB a cached block up to 1 MiB larger: a figure is compared within the
///   slack of the tensors it counts ([`Bytes::slack`]).
/// - CUDA's statistics are the whole process's (other workers' models, the cuBLAS and
///   cuBLASLt workspaces of every thread and stream, 32 MiB each on sm_90): such a figure
///   means something only as a difference between two reads inside one worker, after its
///   lab primed the workspaces ([`Bytes::held`]), never across workers.
#[derive(Clone, Copy, Debug)]
pub struct Bytes {
    pub device: DeviceKind,
}

/// The byte rule of `device`.
pub fn bytes(device: DeviceKind) -> Bytes {
    Bytes { device }
}

impl Bytes {
    /// How far the device's allocator may move a figure that counts tensors of these sizes:
    /// nothing on the CPU; on CUDA a block's rounding per small tensor, a large pool's
    /// unsplit remainder per large one.
    pub fn slack(&self, sizes: impl IntoIterator<Item = u64>) -> u64 {
        protocol::bytes_rule::slack(self.device, sizes)
    }

    /// Peak `a` is at most peak `b`: exactly on the CPU; on CUDA within the slack of two
    /// peaks of the same computation (`protocol::bytes_rule::peak_slack`).
    #[track_caller]
    pub fn assert_peak_le(&self, a: u64, b: u64, what: impl std::fmt::Display) {
        let slack = protocol::bytes_rule::peak_slack(self.device, a, b);
        assert!(protocol::bytes_rule::peak_at_most(self.device, a, b), "{what}: {a} B above {b} B (allowed: {slack} B)");
    }

    /// Two peaks of the same computation agree (`protocol::bytes_rule::same_peak`).
    #[track_caller]
    pub fn assert_same_peak(&self, a: u64, b: u64, what: impl std::fmt::Display) {
        let slack = protocol::bytes_rule::peak_slack(self.device, a, b);
        assert!(protocol::bytes_rule::same_peak(self.device, a, b), "{what}: {a} B against {b} B, {} B apart (allowed: {slack} B)", a.abs_diff(b));
    }

    /// The slack of `n` small tensors (each at most 1 MiB).
    pub fn blocks(&self, n: u64) -> u64 {
        self.slack(std::iter::repeat_n(CUDA_BLOCK, n as usize))
    }

    /// `measured` is `expected`: to the byte on the CPU, within `slack` on CUDA.
    #[track_caller]
    pub fn assert_eq(&self, measured: u64, expected: u64, slack: u64, what: impl std::fmt::Display) {
        match self.device {
            DeviceKind::Cpu => assert_eq!(measured, expected, "{what}"),
            DeviceKind::Cuda => assert!(
                measured.abs_diff(expected) <= slack,
                "{what}: {measured} B against {expected} B, {} B apart, more than the allocator's {slack} B",
                measured.abs_diff(expected)
            ),
        }
    }

    /// `a <= b`: exactly on the CPU, within `slack` on CUDA.
    #[track_caller]
    pub fn assert_le(&self, a: u64, b: u64, slack: u64, what: impl std::fmt::Display) {
        let slack = match self.device {
            DeviceKind::Cpu => 0,
            DeviceKind::Cuda => slack,
        };
        assert!(a <= b + slack, "{what}: {a} B above {b} B (allowed: {slack} B)");
    }

    /// What the device holds now as `worker`'s meter reads it, on its device thread after a
    /// synchronisation: on the CPU that thread's own allocations; on CUDA the whole
    /// process's, comparable only with another read of the same worker (its lab primed the
    /// cuBLAS and cuBLASLt workspaces when it started, so no later read adds them).
    pub fn held(&self, worker: &engine::Worker) -> u64 {
        let device = self.device;
        worker
            .call(move |lab| {
                engine::torch_call::synchronize(device).expect("synchronise");
                lab.meter(device).read().expect("the meter reads").allocated
            })
            .expect("worker alive")
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
    // `cpu::NAME` and `cuda::NAME`. The pitfall cards use it: their CUDA halves take
    // minutes, so scripts/gpu-check/cuda-tests.sh (the GPU check's cuda-tests step) names
    // none of `pitfalls::cuda::`; its card steps run the CUDA cards by id through `gradless
    // pitfall all --only`, and its tour step, of these tests,
    // `pitfalls::cuda::a_card_answers_the_same_wherever_it_sits_in_the_tour`.
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
