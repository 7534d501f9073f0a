//! The border with the C++ extension (`csrc/gradless_ext.cpp`): the only `unsafe` code in
//! Gradless. Every function here returns plain Rust values; every C++ exception arrives as a
//! [`ExtError`]. Guards are `!Send` because the state they restore is thread-local in
//! libtorch. Its parts by concern: this file (the conventions, modes, memory, the run guard,
//! CUDA facts), `cuda_graph` (graph capture and the side stream), `attention` (which
//! backend scaled_dot_product_attention runs, and its switches), `aoti` (AOTInductor
//! packages: load, run, free).

mod aoti;
mod attention;
mod cuda_graph;

pub use aoti::AotiPackage;
pub use attention::{sdp_choice, SdpFlags, SdpFlagsGuard};
pub use cuda_graph::{cuda_graphs_built, CudaGraph, SideStream};

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
        pub fn gl_grad_enabled() -> i32;
        pub fn gl_rms_norm_f32(
            input: *const c_void,
            weight_a: *const c_void,
            weight_b: *const c_void,
            heads: i64,
            split: i64,
            eps: f64,
            plus_one: i32,
            out: *mut *mut c_void,
        ) -> *mut c_char;
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
            requested: *mut i64,
        ) -> *mut c_char;
        pub fn gl_cuda_reset_peak(device: i32) -> *mut c_char;
        pub fn gl_cuda_empty_cache() -> *mut c_char;
        pub fn gl_backend_flags_get(
            tf32_cublas: *mut i32,
            tf32_cudnn: *mut i32,
            benchmark: *mut i32,
        ) -> *mut c_char;
        pub fn gl_backend_flags_set(tf32_cublas: i32, tf32_cudnn: i32, benchmark: i32)
            -> *mut c_char;
        pub fn gl_cuda_mem_info(
            device: i32,
            free_bytes: *mut i64,
            total_bytes: *mut i64,
        ) -> *mut c_char;
        pub fn gl_cuda_versions(cudart: *mut i64, cudnn: *mut i64) -> *mut c_char;
        pub fn gl_cuda_device_facts(
            device: i32,
            name: *mut c_char,
            name_len: i32,
            cc_major: *mut i32,
            cc_minor: *mut i32,
            bus_id: *mut c_char,
            bus_len: i32,
        ) -> *mut c_char;
        pub fn gl_steady_now_ns(out: *mut i64) -> *mut c_char;
        pub fn gl_cuda_graphs_built(out: *mut i32, why: *mut c_char, why_len: i32)
            -> *mut c_char;
        pub fn gl_cuda_graph_new(device: i32, out: *mut *mut c_void) -> *mut c_char;
        pub fn gl_cuda_graph_capture_begin(graph: *mut c_void) -> *mut c_char;
        pub fn gl_cuda_graph_capture_end(graph: *mut c_void) -> *mut c_char;
        pub fn gl_cuda_graph_replay(graph: *mut c_void) -> *mut c_char;
        pub fn gl_cuda_graph_free(graph: *mut c_void) -> *mut c_char;
        pub fn gl_cuda_side_stream_enter(device: i32, out: *mut *mut c_void) -> *mut c_char;
        pub fn gl_cuda_side_stream_exit(saved: *mut c_void) -> *mut c_char;
        pub fn gl_sdp_choice(
            query: *const c_void,
            key: *const c_void,
            value: *const c_void,
            mask: *const c_void,
            dropout_p: f64,
            is_causal: i32,
            enable_gqa: i32,
            out: *mut i64,
        ) -> *mut c_char;
        pub fn gl_sdp_flags_get(
            flash: *mut i32,
            mem_efficient: *mut i32,
            math: *mut i32,
            cudnn: *mut i32,
        ) -> *mut c_char;
        pub fn gl_sdp_flags_set(flash: i32, mem_efficient: i32, math: i32, cudnn: i32)
            -> *mut c_char;
        pub fn gl_cpu_guard_set(limit: i64, deadline_ns: i64, cancel: *const u8) -> *mut c_char;
        pub fn gl_cpu_guard_get(
            limit: *mut i64,
            deadline_ns: *mut i64,
            cancel: *mut *const u8,
        ) -> *mut c_char;
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

/// The process-wide CUDA math switches: TF32 in cuBLAS matmuls and in cuDNN
/// convolutions, and `cudnn.benchmark`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendFlags {
    pub tf32_matmul: bool,
    pub tf32_cudnn: bool,
    pub cudnn_benchmark: bool,
}

impl BackendFlags {
    pub fn read() -> Result<BackendFlags> {
        let (mut a, mut b, mut c) = (0, 0, 0);
        // SAFETY: plain out-parameters.
        check(unsafe { ffi::gl_backend_flags_get(&mut a, &mut b, &mut c) })?;
        Ok(BackendFlags {
            tf32_matmul: a != 0,
            tf32_cudnn: b != 0,
            cudnn_benchmark: c != 0,
        })
    }

    fn write(self) -> Result<()> {
        // SAFETY: plain values.
        check(unsafe {
            ffi::gl_backend_flags_set(
                self.tf32_matmul.into(),
                self.tf32_cudnn.into(),
                self.cudnn_benchmark.into(),
            )
        })
    }
}

/// Sets the [`BackendFlags`] for as long as the guard lives, then restores the previous
/// ones (they are process-wide; the device thread is the only one running models).
pub struct BackendFlagsGuard {
    prev: BackendFlags,
    _thread_bound: PhantomData<*const ()>,
}

impl BackendFlagsGuard {
    pub fn enter(flags: BackendFlags) -> Result<Self> {
        let prev = BackendFlags::read()?;
        flags.write()?;
        Ok(BackendFlagsGuard {
            prev,
            _thread_bound: PhantomData,
        })
    }
}

impl Drop for BackendFlagsGuard {
    fn drop(&mut self) {
        if let Err(e) = self.prev.write() {
            tracing::error!("restoring the CUDA math switches failed: {e}");
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

/// Whether autograd records operations on this thread (`torch.is_grad_enabled()`): off under
/// `no_grad` and inside inference mode.
pub fn grad_enabled() -> bool {
    // SAFETY: no arguments; the C++ side reads a thread-local flag and cannot throw.
    unsafe { ffi::gl_grad_enabled() != 0 }
}

/// RMSNorm over the last dimension of an fp32 CPU tensor whose rows are contiguous (any
/// view of them, read in place) in one op, without autograd:
/// `x * rsqrt(mean(x²) + eps) * scale` per row, the scale `weight` (`[width]`), or, with
/// `second = Some((w, split, heads))`, `w` for rows whose head index (second-to-last, modulo
/// `heads`) is `split` or more; plus one when `plus_one` (Gemma's). The sum of squares is
/// accumulated in double, so values differ from libtorch's composite `rms_norm` in the last
/// bits.
pub fn rms_norm_f32(
    x: &tch::Tensor,
    weight: &tch::Tensor,
    second: Option<(&tch::Tensor, i64, i64)>,
    eps: f64,
    plus_one: bool,
) -> Result<tch::Tensor> {
    let raw = |t: &tch::Tensor| t.as_ptr() as *const c_void;
    let (b, split, heads) = match second {
        Some((w, split, heads)) => (raw(w), split, heads),
        None => (std::ptr::null(), i64::MAX, 1),
    };
    let mut out: *mut c_void = std::ptr::null_mut();
    // SAFETY: tch's handles are `at::Tensor*`, borrowed for the call and only read; on
    // success `out` is a fresh `new at::Tensor`, whose ownership passes to the returned
    // tch::Tensor (freed by its Drop, as tch's own results are).
    check(unsafe { ffi::gl_rms_norm_f32(raw(x), raw(weight), b, heads, split, eps, plus_one.into(), &mut out) })?;
    Ok(unsafe { tch::Tensor::from_ptr(out.cast()) })
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
    /// Whole blocks, as `torch.cuda.memory_allocated` reads them.
    pub allocated: Counter,
    pub reserved: Counter,
    /// The bytes client code asked for (`requested_bytes.all.current`): blocks round up to
    /// 512 B and may keep an unsplit tail, so this is what tensors really hold.
    pub requested: u64,
}

pub fn cuda_memory_stats(device: i32) -> Result<CudaMemoryStats> {
    let (mut a, mut ap, mut r, mut rp, mut q) = (0i64, 0i64, 0i64, 0i64, 0i64);
    // SAFETY: plain out-parameters.
    check(unsafe { ffi::gl_cuda_memory_stats(device, &mut a, &mut ap, &mut r, &mut rp, &mut q) })?;
    Ok(CudaMemoryStats {
        requested: to_u64(q),
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

/// What the driver says about one CUDA device, found by libtorch's device index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaDeviceFacts {
    pub name: String,
    /// Compute capability, major * 10 + minor.
    pub compute_capability: u32,
    /// "0000:3B:00.0": names the same GPU to nvidia-smi whatever CUDA_VISIBLE_DEVICES says.
    pub pci_bus_id: String,
}

/// The name, compute capability and PCI bus id of CUDA device `device` (libtorch's index,
/// so CUDA_VISIBLE_DEVICES is already applied), from the CUDA driver.
pub fn cuda_device_facts(device: i32) -> Result<CudaDeviceFacts> {
    let mut name = [0u8; 256];
    let mut bus = [0u8; 64];
    let (mut major, mut minor) = (0i32, 0i32);
    // SAFETY: the buffers outlive the call and their lengths are passed with them; the
    // driver writes NUL-terminated strings within them.
    check(unsafe {
        ffi::gl_cuda_device_facts(
            device,
            name.as_mut_ptr().cast(),
            name.len() as i32,
            &mut major,
            &mut minor,
            bus.as_mut_ptr().cast(),
            bus.len() as i32,
        )
    })?;
    let text = |b: &[u8]| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).trim().to_string()
    };
    Ok(CudaDeviceFacts {
        name: text(&name),
        compute_capability: (major.max(0) * 10 + minor.max(0)) as u32,
        pci_bus_id: text(&bus),
    })
}

/// What the run guard of this thread checks at every CPU allocation (see [`RunGuard`]).
#[derive(Clone, Debug, Default)]
pub struct GuardSettings {
    /// CPU tensor bytes this thread may hold (the counter's current value plus the new
    /// allocation must stay at or below it).
    pub limit_bytes: Option<u64>,
    /// When to stop.
    pub deadline: Option<std::time::Instant>,
    /// Stop when this becomes true.
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// Arms the run guard of the calling thread's [`CpuMemoryCounter`] for as long as it lives:
/// before every CPU allocation the measuring thread makes, libtorch's allocator (wrapped by
/// the extension) checks the cancel flag, the deadline and the budget, and fails that
/// allocation with a libtorch error ("gradless-guard: ...") when one is crossed: the op
/// unwinds and frees what it made, so the run stops within the op that crossed the line.
/// Dropping the guard restores the previous settings (guards nest).
pub struct RunGuard {
    previous: (i64, i64, *const u8),
    // Keeps the flag the extension reads alive while armed; `!Send` through the pointer.
    _cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl RunGuard {
    /// Arms the guard. Needs the counter installed on this thread.
    pub fn arm(_counter: &CpuMemoryCounter, settings: GuardSettings) -> Result<RunGuard> {
        let (mut limit, mut deadline, mut cancel) = (0i64, 0i64, std::ptr::null::<u8>());
        // SAFETY: plain out-parameters.
        check(unsafe { ffi::gl_cpu_guard_get(&mut limit, &mut deadline, &mut cancel) })?;
        let deadline_ns = match settings.deadline {
            None => -1,
            Some(at) => {
                let mut now = 0i64;
                // SAFETY: plain out-parameter.
                check(unsafe { ffi::gl_steady_now_ns(&mut now) })?;
                let left = at.saturating_duration_since(std::time::Instant::now());
                now.saturating_add(left.as_nanos().min(i64::MAX as u128) as i64)
            }
        };
        let limit_bytes = settings
            .limit_bytes
            .map(|b| b.min(i64::MAX as u64) as i64)
            .unwrap_or(-1);
        let flag = settings
            .cancel
            .as_ref()
            .map(|c| c.as_ptr() as *const u8)
            .unwrap_or(std::ptr::null());
        // SAFETY: `flag` points into an AtomicBool (one byte, same layout as u8) that this
        // guard keeps alive until it restores the previous settings.
        check(unsafe { ffi::gl_cpu_guard_set(limit_bytes, deadline_ns, flag) })?;
        Ok(RunGuard {
            previous: (limit, deadline, cancel),
            _cancel: settings.cancel,
        })
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        let (limit, deadline, cancel) = self.previous;
        // SAFETY: restores what `arm` read; an enclosing guard keeps its own flag alive.
        if let Err(e) = check(unsafe { ffi::gl_cpu_guard_set(limit, deadline, cancel) }) {
            tracing::error!("disarming the run guard failed: {e}");
        }
    }
}

/// What a libtorch error raised by the run guard means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardStop {
    OutOfMemory,
    Deadline,
    Cancelled,
}

/// Recognises the run guard's errors in a libtorch message.
pub fn guard_stop(message: &str) -> Option<GuardStop> {
    let rest = &message[message.find("gradless-guard: ")? + "gradless-guard: ".len()..];
    if rest.starts_with("out of memory") {
        Some(GuardStop::OutOfMemory)
    } else if rest.starts_with("deadline") {
        Some(GuardStop::Deadline)
    } else if rest.starts_with("cancelled") {
        Some(GuardStop::Cancelled)
    } else {
        None
    }
}

/// Held by every unit test that sets or reads the [`BackendFlags`]: they are process-wide,
/// and the test harness runs tests on several threads at once.
#[cfg(test)]
pub(crate) fn backend_flags_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;

/// Copies `data` (a tensor's bytes as stored, little-endian, `shape` of `kind`) into `dst`,
/// converting to `dst`'s dtype on the way, without an intermediate tensor: the bytes are read
/// where they lie (a checkpoint's memory-mapped shard). Data that is not aligned to its
/// element size is copied once into an aligned tensor first.
pub fn copy_from_bytes(dst: &mut tch::Tensor, data: &[u8], shape: &[i64], kind: tch::Kind) -> std::result::Result<(), tch::TchError> {
    let element = kind.elt_size_in_bytes();
    let elements: i64 = shape.iter().product();
    if data.len() as i64 != elements * element as i64 {
        return Err(tch::TchError::Shape(format!("{} bytes for {shape:?} of {kind:?}", data.len())));
    }
    if (data.as_ptr() as usize) % element != 0 {
        let src = tch::Tensor::f_from_data_size(data, shape, kind)?;
        return dst.f_copy_(&src);
    }
    // SAFETY: `data` is initialised, aligned to its element size and holds exactly `shape`'s
    // elements (checked above); the view borrows it only until `copy_` returns, and it is
    // only read.
    let view = unsafe { tch::Tensor::f_from_blob(data.as_ptr(), shape, &[], kind, tch::Device::Cpu)? };
    dst.f_copy_(&view)
}

