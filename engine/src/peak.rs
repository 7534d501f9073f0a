//! How much of the device a run uses: the device's peak throughput and memory bandwidth for
//! the dtype a run computes in, and the run's achieved TFLOP/s, % of peak and place under
//! the roofline.
//!
//! A GPU in [`DATASHEET`] takes its peaks from NVIDIA's datasheet (dense figures: the
//! datasheets print tensor-core throughput "with sparsity", twice the dense one). A CPU, or a
//! GPU not in the table, gets its peak *measured*: the best of a few large matmuls, and the
//! bandwidth from a large copy, labelled as measured. The measurement runs after the run it
//! is for (never inside its timing) and is cached per device, dtype and thread count.

use std::time::Instant;

use protocol::{Autocast, DeviceKind, DevicePeak, Roofline, TracePoint};
use tch::{Device, Kind, Tensor};

use crate::torch_call::synchronize;

/// Which class of arithmetic a run's matmuls and convolutions use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    /// fp32 on the CUDA cores (cuDNN may still pick TF32 tensor cores for fp32 convolutions,
    /// whose peak is higher: a run can then read above 100% of this one).
    Fp32,
    /// fp16 or bf16 on tensor cores, fp32 accumulation (autocast).
    Half,
}

impl Precision {
    pub fn of(autocast: Autocast) -> Precision {
        match autocast {
            Autocast::Off => Precision::Fp32,
            Autocast::Fp16 | Autocast::Bf16 => Precision::Half,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Half => "fp16/bf16 tensor cores, fp32 accumulate",
        }
    }
}

/// One GPU's datasheet figures (dense, no sparsity).
pub struct Sheet {
    /// Matched against the device name (case-insensitive, all words present).
    pub matches: &'static [&'static str],
    /// Excluded if present (e.g. "PCIe" for the SXM line).
    pub unless: &'static [&'static str],
    pub fp32_tflops: f64,
    pub tf32_tflops: f64,
    pub half_tflops: f64,
    pub bandwidth_gb_s: f64,
    pub datasheet: &'static str,
}

/// Peaks of common GPUs, from the named datasheets (dense throughput; the datasheets' tensor
/// figures "with sparsity" halved). First match wins, so variants precede their family.
pub const DATASHEET: &[Sheet] = &[
    Sheet {
        matches: &["H200"],
        unless: &[],
        fp32_tflops: 67.0,
        tf32_tflops: 494.5,
        half_tflops: 989.5,
        bandwidth_gb_s: 4800.0,
        datasheet: "NVIDIA H200 Tensor Core GPU datasheet (SXM)",
    },
    Sheet {
        matches: &["H100", "PCIe"],
        unless: &[],
        fp32_tflops: 51.0,
        tf32_tflops: 378.0,
        half_tflops: 756.0,
        bandwidth_gb_s: 2000.0,
        datasheet: "NVIDIA H100 Tensor Core GPU datasheet (PCIe)",
    },
    Sheet {
        matches: &["H100", "NVL"],
        unless: &[],
        fp32_tflops: 60.0,
        tf32_tflops: 417.5,
        half_tflops: 835.0,
        bandwidth_gb_s: 3900.0,
        datasheet: "NVIDIA H100 Tensor Core GPU datasheet (NVL)",
    },
    Sheet {
        matches: &["H100"],
        unless: &[],
        fp32_tflops: 67.0,
        tf32_tflops: 494.5,
        half_tflops: 989.5,
        bandwidth_gb_s: 3350.0,
        datasheet: "NVIDIA H100 Tensor Core GPU datasheet (SXM)",
    },
    Sheet {
        matches: &["A100", "PCIe"],
        unless: &[],
        fp32_tflops: 19.5,
        tf32_tflops: 156.0,
        half_tflops: 312.0,
        bandwidth_gb_s: 1935.0,
        datasheet: "NVIDIA A100 Tensor Core GPU datasheet (80GB PCIe)",
    },
    Sheet {
        matches: &["A100"],
        unless: &[],
        fp32_tflops: 19.5,
        tf32_tflops: 156.0,
        half_tflops: 312.0,
        bandwidth_gb_s: 2039.0,
        datasheet: "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM)",
    },
    Sheet {
        matches: &["L4"],
        unless: &["L40"],
        fp32_tflops: 30.3,
        tf32_tflops: 60.0,
        half_tflops: 121.0,
        bandwidth_gb_s: 300.0,
        datasheet: "NVIDIA L4 Tensor Core GPU datasheet",
    },
    Sheet {
        matches: &["T4"],
        unless: &[],
        fp32_tflops: 8.1,
        tf32_tflops: 8.1,
        half_tflops: 65.0,
        bandwidth_gb_s: 320.0,
        datasheet: "NVIDIA T4 Tensor Core GPU datasheet (no TF32: fp32 shown)",
    },
    Sheet {
        matches: &["4090"],
        unless: &[],
        fp32_tflops: 82.6,
        tf32_tflops: 82.6,
        half_tflops: 165.2,
        bandwidth_gb_s: 1008.0,
        datasheet: "NVIDIA Ada GPU architecture whitepaper (GeForce RTX 4090)",
    },
    Sheet {
        matches: &["3090"],
        unless: &[],
        fp32_tflops: 35.6,
        tf32_tflops: 35.6,
        half_tflops: 71.0,
        bandwidth_gb_s: 936.0,
        datasheet: "NVIDIA Ampere GA102 GPU architecture whitepaper (GeForce RTX 3090)",
    },
];

/// The datasheet entry for a GPU name, if the table has it.
pub fn sheet_for(name: &str) -> Option<&'static Sheet> {
    let name = name.to_ascii_lowercase();
    let word = |w: &str| {
        let w = w.to_ascii_lowercase();
        // A whole word: "L4" must not match "L40S".
        name.split(|c: char| !c.is_ascii_alphanumeric())
            .any(|part| part == w || (w.len() > 3 && part.contains(&w)))
    };
    DATASHEET
        .iter()
        .find(|s| s.matches.iter().all(|m| word(m)) && !s.unless.iter().any(|u| word(u)))
}

/// The datasheet peak for `precision` on the GPU called `name`.
pub fn datasheet_peak(name: &str, precision: Precision) -> Option<DevicePeak> {
    let sheet = sheet_for(name)?;
    let tflops = match precision {
        Precision::Fp32 => sheet.fp32_tflops,
        Precision::Half => sheet.half_tflops,
    };
    Some(DevicePeak {
        tflops,
        bandwidth_gb_s: Some(sheet.bandwidth_gb_s),
        source: format!(
            "datasheet: {} ({}, dense)",
            sheet.datasheet,
            precision.label()
        ),
    })
}

/// Side of the square matmul the peak is measured with: large enough to be compute-bound
/// on a CPU and small enough to take well under a second on two cores.
const MATMUL_N: i64 = 1024;
/// Floats copied to measure bandwidth (64 MiB each way: beyond any CPU cache).
const COPY_ELEMENTS: i64 = 16 << 20;

/// Measures the peak on `device`: the best of five `MATMUL_N`² matmuls in the precision's
/// dtype, and the best of three large copies for the bandwidth.
pub fn measure_peak(device: DeviceKind, precision: Precision) -> Option<DevicePeak> {
    let dev = match device {
        DeviceKind::Cpu => Device::Cpu,
        DeviceKind::Cuda => Device::Cuda(0),
    };
    let kind = match (device, precision) {
        (_, Precision::Fp32) => Kind::Float,
        (DeviceKind::Cpu, Precision::Half) => Kind::BFloat16,
        (DeviceKind::Cuda, Precision::Half) => Kind::Half,
    };
    let n = MATMUL_N;
    let measured = crate::torch_call::catch_torch(|| {
        let a = Tensor::randn([n, n], (kind, dev));
        let b = Tensor::randn([n, n], (kind, dev));
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let _ = synchronize(device);
            let start = Instant::now();
            let c = a.matmul(&b);
            let _ = synchronize(device);
            best = best.min(start.elapsed().as_secs_f64());
            drop(c);
        }
        let src = Tensor::zeros([COPY_ELEMENTS], (Kind::Float, dev));
        let mut dst = Tensor::empty([COPY_ELEMENTS], (Kind::Float, dev));
        let mut best_copy = f64::INFINITY;
        for _ in 0..3 {
            let _ = synchronize(device);
            let start = Instant::now();
            dst.copy_(&src);
            let _ = synchronize(device);
            best_copy = best_copy.min(start.elapsed().as_secs_f64());
        }
        (best, best_copy)
    })
    .ok()?;
    let (seconds, copy_seconds) = measured;
    // NaN included.
    if seconds.is_nan() || seconds <= 0.0 {
        return None;
    }
    let flops = 2.0 * (n as f64).powi(3);
    let moved = 2.0 * COPY_ELEMENTS as f64 * 4.0;
    Some(DevicePeak {
        tflops: flops / seconds / 1e12,
        bandwidth_gb_s: (copy_seconds > 0.0).then(|| moved / copy_seconds / 1e9),
        source: format!(
            "measured matmul peak ({:?} {n}×{n}, best of 5) and copy bandwidth, on this {}",
            kind,
            device.as_str()
        ),
    })
}

/// The run's FLOPs, achieved throughput, % of peak and roofline, from its trace, its p50
/// latency, its weights and the device's peak.
pub struct Compute {
    pub flops: u64,
    pub achieved_tflops: f64,
    pub percent_of_peak: Option<f64>,
    pub roofline: Option<Roofline>,
}

/// `weights_bytes` and `input_bytes` are read once per pass; every module's output is
/// counted as written once and read once (the estimate the page names as one).
pub fn compute(
    trace: &[TracePoint],
    p50_ms: f64,
    weights_bytes: u64,
    input_bytes: u64,
    peak: Option<&DevicePeak>,
) -> Compute {
    let flops: u64 = trace.iter().map(|p| p.flops).sum();
    let achieved_tflops = if p50_ms > 0.0 {
        flops as f64 / (p50_ms / 1000.0) / 1e12
    } else {
        0.0
    };
    let moved = weights_bytes + input_bytes + 2 * trace.iter().map(|p| p.output_bytes).sum::<u64>();
    Compute {
        flops,
        achieved_tflops,
        percent_of_peak: peak
            .filter(|p| p.tflops > 0.0)
            .map(|p| 100.0 * achieved_tflops / p.tflops),
        roofline: peak.filter(|_| moved > 0).map(|p| Roofline {
            intensity_flops_per_byte: flops as f64 / moved as f64,
            bytes_moved_estimate: moved,
            peak_tflops: p.tflops,
            bandwidth_gb_s: p.bandwidth_gb_s,
            achieved_tflops,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_names_find_their_datasheet_and_families_do_not_mix() {
        let src = |n: &str| sheet_for(n).map(|s| s.datasheet);
        assert!(src("NVIDIA H200").unwrap().contains("H200"));
        assert!(src("NVIDIA H100 PCIe").unwrap().contains("PCIe"));
        assert!(src("NVIDIA H100 80GB HBM3").unwrap().contains("SXM"));
        assert!(src("NVIDIA L4").unwrap().contains("L4"));
        assert!(src("NVIDIA L40S").is_none(), "an L40S is not an L4");
        assert!(src("Tesla T4").unwrap().contains("T4"));
        assert!(src("NVIDIA GeForce RTX 4090").unwrap().contains("4090"));
        assert!(src("AMD EPYC").is_none());
        let half = datasheet_peak("NVIDIA A100-SXM4-80GB", Precision::Half).unwrap();
        let full = datasheet_peak("NVIDIA A100-SXM4-80GB", Precision::Fp32).unwrap();
        assert!(half.tflops > full.tflops && half.source.contains("A100"));
    }

    #[test]
    fn a_cpu_matmul_peak_is_measured_and_labelled() {
        let peak = measure_peak(DeviceKind::Cpu, Precision::Fp32).expect("measured");
        assert!(peak.tflops > 0.0 && peak.bandwidth_gb_s.unwrap() > 0.0);
        assert!(peak.source.starts_with("measured"));
    }
}
