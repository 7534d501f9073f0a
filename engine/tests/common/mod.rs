//! Per-device tests, like candle's test_utils: one test body, run on the CPU always and on
//! CUDA under the `cuda-tests` feature (which `scripts/gpu-check.sh` builds and runs with
//! one test thread: the CUDA allocator's statistics are per process, so tests in parallel
//! would mix their peaks and baselines).
//!
//! `per_device! { fn name(device) { ... } }` makes a module `name` with the tests `cpu`
//! and (with the feature) `cuda`, each calling the body with its [`DeviceKind`].
#![allow(dead_code)]

use protocol::{DeviceChoice, DeviceKind};

/// The spec field that asks for `device`.
pub fn choice(device: DeviceKind) -> DeviceChoice {
    match device {
        DeviceKind::Cpu => DeviceChoice::Cpu,
        DeviceKind::Cuda => DeviceChoice::Cuda,
    }
}

/// A CUDA test on a machine without CUDA fails: it must not pass by doing nothing.
pub fn require(device: DeviceKind) {
    if device == DeviceKind::Cuda {
        assert!(
            engine::torch_ext::cuda_available(),
            "the cuda-tests feature is on but libtorch sees no CUDA device"
        );
    }
}

/// Held by each CUDA test for its whole body: the CUDA half runs one test at a time even
/// when the harness is given more threads (scripts/gpu-check.sh also passes
/// --test-threads=1, which covers tests outside `per_device!`).
pub fn cuda_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
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
                body(protocol::DeviceKind::Cpu)
            }
            #[cfg(feature = "cuda-tests")]
            #[test]
            fn cuda() {
                let _one_at_a_time = $crate::common::cuda_lock();
                $crate::common::require(protocol::DeviceKind::Cuda);
                body(protocol::DeviceKind::Cuda)
            }
        }
    };
}
