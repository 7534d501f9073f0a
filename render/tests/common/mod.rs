//! Reports for the pictures' tests: well-formed, with samples shaped like a measured run's
//! (a slower first warm-up, noise around a median) from a fixed seed. Measured by nothing;
//! the tests check how figures are drawn and printed, not the figures.
#![allow(dead_code)]

use protocol::{PitfallReport, Report, Sample};

struct Lcg(u64);
impl Lcg {
    fn unit(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub fn run(grad: &str, batch: u32, median_ms: f64, peak_mib: f64, seed: u64) -> Report {
    let mut r = protocol::testing::report(grad, batch, vec![]);
    let mut rng = Lcg(seed);
    let baseline: u64 = 46 * 1024 * 1024;
    let sample = |i: u32, rng: &mut Lcg, slow: f64| {
        let latency = median_ms * (1.0 + 0.08 * (rng.unit() - 0.5)) * slow;
        let peak = baseline + (peak_mib * 1024.0 * 1024.0 * (1.0 + 0.002 * rng.unit())) as u64;
        Sample {
            iteration: i,
            latency_ms: latency,
            allocated_bytes: baseline
                + if grad == "enabled" {
                    (peak_mib * 0.6 * 1048576.0) as u64
                } else {
                    40_000
                },
            peak_bytes: peak,
            reserved_bytes: None,
        }
    };
    r.warmup = (0..3)
        .map(|i| sample(i, &mut rng, if i == 0 { 1.9 } else { 1.05 }))
        .collect();
    r.samples = (0..30).map(|i| sample(i, &mut rng, 1.0)).collect();
    let mut lat: Vec<f64> = r.samples.iter().map(|s| s.latency_ms).collect();
    lat.sort_by(f64::total_cmp);
    let q = |p: f64| lat[((lat.len() - 1) as f64 * p).round() as usize];
    r.latency_ms.p50 = q(0.5);
    r.latency_ms.p95 = q(0.95);
    r.latency_ms.p99 = q(0.99);
    r.latency_ms.min = lat[0];
    r.latency_ms.max = lat[lat.len() - 1];
    r.latency_ms.mean = lat.iter().sum::<f64>() / lat.len() as f64;
    r.throughput_per_s = f64::from(batch) * 1000.0 / r.latency_ms.mean;
    r.memory.baseline_bytes = baseline;
    let peak = r.samples.iter().map(|s| s.peak_bytes).max().unwrap();
    r.memory.peak_allocated_bytes = peak;
    r.memory.peak_above_baseline_bytes = peak - baseline;
    r.memory.after_release_bytes = baseline;
    r.env.device_name = "AMD EPYC 9654 (test)".into();
    r.env.measured_at = "2026-11-30T14:02:11Z".into();
    r.env.gradless_version = "0.1.0".into();
    r
}

pub fn pitfall() -> PitfallReport {
    serde_json::from_value(serde_json::json!({
        "id": "no-grad-memory",
        "claim": "torch.no_grad() lowers the memory a forward pass holds",
        "verdict": "confirmed",
        "reason": "peak above baseline fell from 98.0 MiB to 24.5 MiB (0.25×), past the 0.8× the rule asks for",
        "threshold": "confirmed when the peak with no_grad is below 0.8× the peak with grad",
        "figures": [
            {"name": "peak with grad", "value": 102760448.0, "unit": "bytes"},
            {"name": "peak with no_grad", "value": 25690112.0, "unit": "bytes"},
            {"name": "ratio", "value": 0.25, "unit": "ratio"},
            {"name": "p50 with grad", "value": 12.5, "unit": "ms"}
        ],
        "chart": "bar",
        "series": [
            {"name": "peak above baseline", "unit": "MiB", "x": ["grad", "no_grad", "inference_mode"], "y": [98.0, 24.5, 24.4]},
            {"name": "p50 latency", "unit": "ms", "x": ["grad", "no_grad", "inference_mode"], "y": [12.5, 10.1, 9.8]}
        ],
        "notes": [],
        "env": {"device": "cpu", "device_name": "AMD EPYC 9654 (test)", "device_total_memory_bytes": null, "driver_version": null,
                "cuda_version": null, "cudnn_version": null, "libtorch_version": "2.11.0", "cpu_model": "test cpu",
                "threads": 1, "measured_at": "2026-11-30T14:02:11Z", "gradless_version": "0.1.0"},
        "record_id": "0123456789abcdef"
    }))
    .unwrap()
}
