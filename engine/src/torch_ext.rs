//! The border with the C++ extension (`csrc/gradless_ext.cpp`): the only `unsafe` code in
//! Gradless. Every function here returns plain Rust values; every C++ exception arrives as a
//! [`ExtError`]. Guards are `!Send` because the state they restore is thread-local in
//! libtorch.

use std::ffi::{c_char, c_void, CStr};
use std::marker::PhantomData;

use protocol::DeviceKind;

/// An error raised by libtorch inside the extension, with its message (no C++ backtrace).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ExtError(pub String);

type Result<T> = std::result::Result<T, ExtError>;

mod ffi {
    use std::ffi::{c_char, c_void};
    extern "C" {
        pub fn gl_free_error(error: *mut c_char);
        pub fn gl_inference_mode_enter(guard: *mut *mut c_void) -> *mut c_char;
        pub fn gl_inference_mode_exit(guard: *mut c_void) -> *mut c_char;
        pub fn gl_autocast_enter(
            device: i32,
            dtype: i32,
            prev_enabled: *mut i32,
            prev_dtype: *mut i32,
        ) -> *mut c_char;
        pub fn gl_autocast_exit(device: i32, prev_enabled: i32, prev_dtype: i32) -> *mut c_char;
        pub fn gl_cpu_memory_install() -> *mut c_char;
        pub fn gl_cpu_memory_stats(current: *mut i64, peak: *mut i64) -> *mut c_char;
        pub fn gl_cpu_memory_reset_peak() -> *mut c_char;
        pub fn gl_cuda_available(out: *mut i32) -> *mut c_char;
        pub fn gl_cuda_memory_stats(
            device: i32,
            allocated: *mut i64,
            allocated_peak: *mut i64,
            reserved: *mut i64,
            reserved_peak: *mut i64,
        ) -> *mut c_char;
        pub fn gl_cuda_reset_peak(device: i32) -> *mut c_char;
        pub fn gl_cuda_empty_cache() -> *mut c_char;
        pub fn gl_cuda_mem_info(
            device: i32,
            free_bytes: *mut i64,
            total_bytes: *mut i64,
        ) -> *mut c_char;
        pub fn gl_cuda_versions(cudart: *mut i64, cudnn: *mut i64) -> *mut c_char;
    }
}

/// Turns the extension's error convention (null: success; else a heap string) into a Result.
fn check(error: *mut c_char) -> Result<()> {
    if error.is_null() {
        return Ok(());
    }
    // SAFETY: a non-null return is a NUL-terminated string malloc'd by the extension, which
    // we own and free exactly once here.
    let message = unsafe { CStr::from_ptr(error) }
        .to_string_lossy()
        .into_owned();
    unsafe { ffi::gl_free_error(error) };
    Err(ExtError(message))
}

fn device_code(device: DeviceKind) -> i32 {
    match device {
        DeviceKind::Cpu => 0,
        DeviceKind::Cuda => 1,
    }
}

/// `c10::InferenceMode` for as long as the guard lives: `with torch.inference_mode():`.
pub struct InferenceModeGuard {
    raw: *mut c_void,
}

impl InferenceModeGuard {
    pub fn enter() -> Result<Self> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: the extension writes a fresh heap pointer into `raw` on success.
        check(unsafe { ffi::gl_inference_mode_enter(&mut raw) })?;
        Ok(InferenceModeGuard { raw })
    }
}

impl Drop for InferenceModeGuard {
    fn drop(&mut self) {
        // SAFETY: `raw` came from gl_inference_mode_enter on this thread (the guard is !Send
        // through the raw pointer) and is released once.
        if let Err(e) = check(unsafe { ffi::gl_inference_mode_exit(self.raw) }) {
            tracing::error!("leaving inference mode failed: {e}");
        }
    }
}

/// The reduced precision autocast runs matmul and convolution in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LowPrecision {
    Fp16,
    Bf16,
}

/// `with torch.autocast(device, dtype):` for as long as the guard lives. Leaving the
/// outermost region clears the cache of cast weights, as PyTorch does.
pub struct AutocastGuard {
    device: i32,
    prev_enabled: i32,
    prev_dtype: i32,
    _thread_bound: PhantomData<*const ()>,
}

impl AutocastGuard {
    pub fn enter(device: DeviceKind, dtype: LowPrecision) -> Result<Self> {
        let device = device_code(device);
        let dtype = match dtype {
            LowPrecision::Fp16 => 0,
            LowPrecision::Bf16 => 1,
        };
        let (mut prev_enabled, mut prev_dtype) = (0, 0);
        // SAFETY: plain out-parameters.
        check(unsafe {
            ffi::gl_autocast_enter(device, dtype, &mut prev_enabled, &mut prev_dtype)
        })?;
        Ok(AutocastGuard {
            device,
            prev_enabled,
            prev_dtype,
            _thread_bound: PhantomData,
        })
    }
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        // SAFETY: restores the state captured by `enter` on the same thread.
        if let Err(e) =
            check(unsafe { ffi::gl_autocast_exit(self.device, self.prev_enabled, self.prev_dtype) })
        {
            tracing::error!("leaving autocast failed: {e}");
        }
    }
}

/// Current and peak bytes of one memory statistic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counter {
    pub current: u64,
    pub peak: u64,
}

fn to_u64(v: i64) -> u64 {
    v.max(0) as u64
}

/// Counts CPU tensor memory allocated on this thread (and on intra-op threads working for
/// it), from libtorch's own allocation reports. Install once per thread; the handle is
/// `!Send` because the counter is thread-local.
pub struct CpuMemoryCounter {
    _thread_bound: PhantomData<*const ()>,
}

impl CpuMemoryCounter {
    /// Installs the counter on the calling thread. It sees only allocations made after this.
    pub fn install() -> Result<Self> {
        // SAFETY: no arguments; idempotent per thread.
        check(unsafe { ffi::gl_cpu_memory_install() })?;
        Ok(CpuMemoryCounter {
            _thread_bound: PhantomData,
        })
    }

    pub fn read(&self) -> Result<Counter> {
        let (mut current, mut peak) = (0i64, 0i64);
        // SAFETY: plain out-parameters.
        check(unsafe { ffi::gl_cpu_memory_stats(&mut current, &mut peak) })?;
        Ok(Counter {
            current: to_u64(current),
            peak: to_u64(peak),
        })
    }

    /// Makes the peak equal the current value, as `torch.cuda.reset_peak_memory_stats` does.
    pub fn reset_peak(&self) -> Result<()> {
        // SAFETY: no arguments.
        check(unsafe { ffi::gl_cpu_memory_reset_peak() })
    }
}

/// Whether libtorch can reach a CUDA device.
pub fn cuda_available() -> bool {
    let mut out = 0;
    // SAFETY: plain out-parameter.
    check(unsafe { ffi::gl_cuda_available(&mut out) })
        .map(|_| out != 0)
        .unwrap_or(false)
}

/// The CUDA caching allocator's statistics for one device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CudaMemoryStats {
    pub allocated: Counter,
    pub reserved: Counter,
}

pub fn cuda_memory_stats(device: i32) -> Result<CudaMemoryStats> {
    let (mut a, mut ap, mut r, mut rp) = (0i64, 0i64, 0i64, 0i64);
    // SAFETY: plain out-parameters.
    check(unsafe { ffi::gl_cuda_memory_stats(device, &mut a, &mut ap, &mut r, &mut rp) })?;
    Ok(CudaMemoryStats {
        allocated: Counter {
            current: to_u64(a),
            peak: to_u64(ap),
        },
        reserved: Counter {
            current: to_u64(r),
            peak: to_u64(rp),
        },
    })
}

pub fn cuda_reset_peak(device: i32) -> Result<()> {
    // SAFETY: plain argument.
    check(unsafe { ffi::gl_cuda_reset_peak(device) })
}

/// `torch.cuda.empty_cache()`: returns unused cached blocks to the driver.
pub fn cuda_empty_cache() -> Result<()> {
    // SAFETY: no arguments.
    check(unsafe { ffi::gl_cuda_empty_cache() })
}

/// Device-level (free, total) bytes as the driver reports them, CUDA context included.
pub fn cuda_mem_info(device: i32) -> Result<(u64, u64)> {
    let (mut free, mut total) = (0i64, 0i64);
    // SAFETY: plain out-parameters.
    check(unsafe { ffi::gl_cuda_mem_info(device, &mut free, &mut total) })?;
    Ok((to_u64(free), to_u64(total)))
}

/// CUDA runtime and cuDNN versions as libtorch reports them (cuDNN 0: not available).
pub fn cuda_versions() -> Result<(i64, i64)> {
    let (mut cudart, mut cudnn) = (0i64, 0i64);
    // SAFETY: plain out-parameters.
    check(unsafe { ffi::gl_cuda_versions(&mut cudart, &mut cudnn) })?;
    Ok((cudart, cudnn))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind, Tensor};

    #[test]
    fn errors_from_cpp_become_typed_errors_not_aborts() {
        // Without a GPU, asking the CUDA allocator must fail politely; with one, succeed.
        match cuda_memory_stats(0) {
            Ok(_) => assert!(cuda_available()),
            Err(ExtError(msg)) => assert!(!msg.is_empty()),
        }
    }

    #[test]
    fn cpu_counter_sees_allocations_and_frees() {
        let counter = CpuMemoryCounter::install().unwrap();
        let before = counter.read().unwrap();
        counter.reset_peak().unwrap();
        let t = Tensor::zeros([1024, 1024], (Kind::Float, Device::Cpu));
        let during = counter.read().unwrap();
        assert!(during.current >= before.current + 4 * 1024 * 1024);
        drop(t);
        let after = counter.read().unwrap();
        assert_eq!(after.current, before.current);
        assert!(after.peak >= before.current + 4 * 1024 * 1024);
    }

    #[test]
    fn inference_mode_makes_inference_tensors_and_restores_on_drop() {
        let x = Tensor::ones([2, 2], (Kind::Float, Device::Cpu));
        {
            let _g = InferenceModeGuard::enter().unwrap();
            assert!((&x * 2).is_inference());
        }
        assert!(!(&x * 2).is_inference());
    }

    #[test]
    fn autocast_bf16_on_cpu_lowers_matmul_and_restores() {
        let a = Tensor::ones([4, 4], (Kind::Float, Device::Cpu));
        {
            let _g = AutocastGuard::enter(DeviceKind::Cpu, LowPrecision::Bf16).unwrap();
            assert_eq!(a.matmul(&a).kind(), Kind::BFloat16);
        }
        assert_eq!(a.matmul(&a).kind(), Kind::Float);
    }
}
