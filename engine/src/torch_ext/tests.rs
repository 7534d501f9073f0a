//! The extension's border, tested on the CPU (CUDA calls must fail politely there).

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
fn the_run_guard_stops_the_allocation_that_crosses_the_budget_and_restores() {
    let counter = CpuMemoryCounter::install().unwrap();
    let before = counter.read().unwrap().current;
    let held = before;
    {
        let _g = RunGuard::arm(
            &counter,
            GuardSettings {
                limit_bytes: Some(held + (1 << 20)),
                ..Default::default()
            },
        )
        .unwrap();
        // 256 KiB fits; 4 MiB would cross the budget and fails without allocating.
        let small = Tensor::f_zeros([64 * 1024], (Kind::Float, Device::Cpu)).unwrap();
        let err = Tensor::f_zeros([1 << 20], (Kind::Float, Device::Cpu))
            .unwrap_err()
            .to_string();
        assert_eq!(guard_stop(&err), Some(GuardStop::OutOfMemory), "{err}");
        assert!(err.to_lowercase().contains("out of memory"), "{err}");
        drop(small);
        // An op whose output would cross the budget fails and leaves nothing behind.
        let x = Tensor::f_ones([512, 384], (Kind::Float, Device::Cpu)).unwrap();
        let err = x.f_mm(&x.tr()).unwrap_err().to_string();
        assert_eq!(guard_stop(&err), Some(GuardStop::OutOfMemory), "{err}");
        drop(x);
        assert_eq!(counter.read().unwrap().current, before);
    }
    // Disarmed: the same allocation succeeds.
    assert!(Tensor::f_zeros([1 << 20], (Kind::Float, Device::Cpu)).is_ok());
    assert_eq!(counter.read().unwrap().current, before);
}

#[test]
fn the_run_guard_stops_at_the_deadline_and_on_cancel() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let counter = CpuMemoryCounter::install().unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    {
        let _g = RunGuard::arm(
            &counter,
            GuardSettings {
                cancel: Some(cancel.clone()),
                ..Default::default()
            },
        )
        .unwrap();
        assert!(Tensor::f_zeros([16], (Kind::Float, Device::Cpu)).is_ok());
        cancel.store(true, Ordering::Relaxed);
        let err = Tensor::f_zeros([16], (Kind::Float, Device::Cpu))
            .unwrap_err()
            .to_string();
        assert_eq!(guard_stop(&err), Some(GuardStop::Cancelled), "{err}");
    }
    {
        let _g = RunGuard::arm(
            &counter,
            GuardSettings {
                deadline: Some(std::time::Instant::now()),
                ..Default::default()
            },
        )
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let err = Tensor::f_zeros([16], (Kind::Float, Device::Cpu))
            .unwrap_err()
            .to_string();
        assert_eq!(guard_stop(&err), Some(GuardStop::Deadline), "{err}");
    }
    assert!(Tensor::f_zeros([16], (Kind::Float, Device::Cpu)).is_ok());
}

#[test]
fn backend_flags_are_set_and_restored() {
    let _flags = super::backend_flags_lock();
    let before = BackendFlags::read().unwrap();
    let flipped = BackendFlags {
        tf32_matmul: !before.tf32_matmul,
        tf32_cudnn: !before.tf32_cudnn,
        cudnn_benchmark: !before.cudnn_benchmark,
    };
    {
        let _g = BackendFlagsGuard::enter(flipped).unwrap();
        assert_eq!(BackendFlags::read().unwrap(), flipped);
    }
    assert_eq!(BackendFlags::read().unwrap(), before);
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

#[test]
fn sdp_choice_names_the_cpu_backend_and_the_switches_restore() {
    let q = Tensor::randn([1, 8, 4, 32], (Kind::Float, Device::Cpu));
    let kv = Tensor::randn([1, 2, 4, 32], (Kind::Float, Device::Cpu));
    let choice = sdp_choice(&q, &kv, &kv, None, 0.0, true, true).unwrap();
    // The CPU has two: its flash kernel and the math one.
    assert!(
        matches!(choice, Some(protocol::SdpBackend::Flash | protocol::SdpBackend::Math)),
        "{choice:?}"
    );
    // Mixed dtypes are what autocast hands SDPA: the choice casts them as the call would.
    let v16 = kv.to_kind(Kind::BFloat16);
    {
        let _g = AutocastGuard::enter(DeviceKind::Cpu, LowPrecision::Bf16).unwrap();
        assert!(sdp_choice(&q, &kv, &v16, None, 0.0, true, true).unwrap().is_some());
    }
    // Without autocast the same tensors are what SDPA itself would refuse: the choice
    // answers (math, or an error) without crashing.
    let _ = sdp_choice(&q, &kv, &v16, None, 0.0, true, true);
    let before = SdpFlags::read().unwrap();
    {
        let _g = SdpFlagsGuard::enter(SdpFlags { cudnn: false, flash: false, ..before }).unwrap();
        assert!(!SdpFlags::read().unwrap().flash);
        // With the CPU flash kernel switched off, math runs.
        let c = sdp_choice(&q, &kv, &kv, None, 0.0, true, true).unwrap();
        assert_eq!(c, Some(protocol::SdpBackend::Math));
    }
    assert_eq!(SdpFlags::read().unwrap(), before);
}

#[test]
fn the_one_op_rms_norm_is_libtorchs_rms_norm_and_grad_mode_reads_back() {
    let _no_grad = tch::no_grad_guard();
    tch::manual_seed(7);
    let close = |a: &Tensor, b: &Tensor| {
        let diff = (a - b).abs().max().double_value(&[]);
        let scale = b.abs().max().double_value(&[]).max(1.0);
        assert!(diff <= 2e-6 * scale, "max |Δ| {diff:e} against values up to {scale}");
    };
    // One weight; rows of several widths, a row count past the parallel grain, and a
    // non-contiguous input (the transposed view a decoder hands it).
    for (shape, width) in [(vec![1, 1, 256], 256), (vec![3, 70, 64], 64), (vec![2, 5, 33], 33)] {
        let x = Tensor::randn(shape.as_slice(), (Kind::Float, Device::Cpu)) * 3.0;
        let w = Tensor::randn([width], (Kind::Float, Device::Cpu));
        let want = x.rms_norm([width], Some(&w), 1e-6);
        close(&rms_norm_f32(&x, &w, None, 1e-6, false).unwrap(), &want);
        // Gemma's 1 + weight.
        let gemma = x.rms_norm([width], Some(&(&w + 1.0)), 1e-6);
        close(&rms_norm_f32(&x, &w, None, 1e-6, true).unwrap(), &gemma);
    }
    let x = Tensor::randn([2, 7, 3, 64], (Kind::Float, Device::Cpu)).transpose(1, 2);
    assert!(!x.is_contiguous());
    let w = Tensor::randn([64], (Kind::Float, Device::Cpu));
    let y = rms_norm_f32(&x, &w, None, 1e-5, false).unwrap();
    assert_eq!(y.size(), x.size());
    close(&y, &x.rms_norm([64], Some(&w), 1e-5));
    // Two weights by head: q's for the first 8 of 10 heads, k's for the last 2, read in place
    // from the columns of one projection (rows not evenly spaced).
    let qkv = Tensor::randn([2, 3, 12 * 16], (Kind::Float, Device::Cpu));
    let qk = qkv.narrow(2, 0, 10 * 16).view([2, 3, 10, 16]);
    assert!(!qk.is_contiguous());
    let (qw, kw) = (Tensor::randn([16], (Kind::Float, Device::Cpu)), Tensor::randn([16], (Kind::Float, Device::Cpu)));
    let y = rms_norm_f32(&qk, &qw, Some((&kw, 8, 10)), 1e-6, false).unwrap();
    close(&y.narrow(2, 0, 8), &qk.narrow(2, 0, 8).rms_norm([16], Some(&qw), 1e-6));
    close(&y.narrow(2, 8, 2), &qk.narrow(2, 8, 2).rms_norm([16], Some(&kw), 1e-6));
    // Bad input is an error, not a crash.
    let half = x.to_kind(Kind::Half);
    assert!(rms_norm_f32(&half, &w, None, 1e-6, false).is_err());
    assert!(rms_norm_f32(&x, &Tensor::ones([3], (Kind::Float, Device::Cpu)), None, 1e-6, false).is_err());
    // grad_enabled tells the decoder when it may use it.
    assert!(!grad_enabled());
    assert!(tch::with_grad(grad_enabled));
}
