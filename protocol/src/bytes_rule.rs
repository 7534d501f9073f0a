//! The one rule by which two byte figures of the same computation are compared, per device,
//! as that device's allocator reports them. The engine's device tests, the GPU check's
//! scripts (`scripts/gpu-check/server_client.py` keeps a copy of the constants, which
//! `engine/tests/gpu_check_script.rs` holds equal to these) and the tour-order test all
//! compare bytes through it, so a comparison cannot be stricter on one path than the
//! allocator allows.
//!
//! - The CPU: libtorch's own allocation reporting counts the bytes each allocation asked
//!   for, so two runs of the same computation agree to the byte.
//! - CUDA: the caching allocator rounds every block up to [`CUDA_BLOCK`] and, for a request
//!   above [`CUDA_SMALL`], may hand out a cached block up to [`CUDA_SMALL`] larger without
//!   splitting it (`should_split` in c10/cuda/CUDACachingAllocator.cpp); `memory_allocated`
//!   counts the whole block. cuDNN's and cuBLAS's workspaces come from the same large pool.
//!   A peak therefore moves by up to that remainder for each large block alive at it.

use crate::{DeviceKind, SAME_BYTES_WITHIN};

/// The CUDA caching allocator's granularity: every block is a whole number of 512 B
/// (`kMinBlockSize`).
pub const CUDA_BLOCK: u64 = 512;

/// Above this size (`kSmallSize`, 1 MiB) a request comes from the large pool, where a cached
/// block is handed out unsplit when at most this much of it would be left over.
pub const CUDA_SMALL: u64 = 1 << 20;

/// The least slack two CUDA peaks of the same computation are allowed: two large blocks
/// alive at the peak (a layer's input and its output, or an output and a cuDNN workspace),
/// each with an unsplit remainder of up to [`CUDA_SMALL`].
pub const CUDA_PEAK_FLOOR: u64 = 2 * CUDA_SMALL;

/// How far `device`'s allocator may move a figure that counts tensors of these sizes: nothing
/// on the CPU; on CUDA a block's rounding per small tensor, a large pool's unsplit remainder
/// (and its rounding) per large one.
pub fn slack(device: DeviceKind, sizes: impl IntoIterator<Item = u64>) -> u64 {
    match device {
        DeviceKind::Cpu => 0,
        DeviceKind::Cuda => sizes.into_iter().map(|s| if s <= CUDA_SMALL { CUDA_BLOCK } else { CUDA_SMALL + CUDA_BLOCK }).sum(),
    }
}

/// How far two peaks (or other figures counting an unknown number of live tensors) of the
/// same computation may lie apart on `device`: nothing on the CPU; on CUDA the larger of
/// [`SAME_BYTES_WITHIN`] of the larger figure and [`CUDA_PEAK_FLOOR`].
pub fn peak_slack(device: DeviceKind, a: u64, b: u64) -> u64 {
    match device {
        DeviceKind::Cpu => 0,
        DeviceKind::Cuda => ((a.max(b) as f64 * SAME_BYTES_WITHIN).ceil() as u64).max(CUDA_PEAK_FLOOR),
    }
}

/// Whether two peaks of the same computation agree on `device` ([`peak_slack`]).
pub fn same_peak(device: DeviceKind, a: u64, b: u64) -> bool {
    a.abs_diff(b) <= peak_slack(device, a, b)
}

/// Whether peak `a` is at most peak `b` on `device`, within [`peak_slack`].
pub fn peak_at_most(device: DeviceKind, a: u64, b: u64) -> bool {
    a <= b + peak_slack(device, a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_compares_to_the_byte_and_cuda_within_the_allocators_remainders() {
        assert!(same_peak(DeviceKind::Cpu, 1000, 1000));
        assert!(!same_peak(DeviceKind::Cpu, 1000, 1001));
        assert!(!peak_at_most(DeviceKind::Cpu, 1001, 1000));
        // A ResNet-18 batch-1 peak of ~20 MiB: one unsplit 1 MiB remainder is 5%, above
        // the share, below the floor.
        let p = 20 * CUDA_SMALL;
        assert!(same_peak(DeviceKind::Cuda, p, p + CUDA_SMALL));
        assert!(!same_peak(DeviceKind::Cuda, p, p + 3 * CUDA_SMALL));
        // A 4 GiB peak: the share decides (1% is about 41 MiB).
        let big = 4096 * CUDA_SMALL;
        assert!(same_peak(DeviceKind::Cuda, big, big + 40 * CUDA_SMALL));
        assert!(!same_peak(DeviceKind::Cuda, big, big + 42 * CUDA_SMALL));
        assert!(peak_at_most(DeviceKind::Cuda, p + CUDA_SMALL, p));
        assert_eq!(slack(DeviceKind::Cuda, [100, 2 * CUDA_SMALL]), CUDA_BLOCK + CUDA_SMALL + CUDA_BLOCK);
        assert_eq!(slack(DeviceKind::Cpu, [100, 2 * CUDA_SMALL]), 0);
    }
}
