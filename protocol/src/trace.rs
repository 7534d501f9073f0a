//! What one traced forward pass shows from the inside: memory and time at every module
//! boundary ([`TracePoint`]), how much of the device the run used ([`DevicePeak`],
//! [`Roofline`]) and what the device's memory holds ([`MemoryBreakdown`]). The engine fills
//! them from one extra pass after the timed iterations, never part of the statistics.

use serde::{Deserialize, Serialize};

/// The state right after one module of the traced pass returned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TracePoint {
    /// The module's path, torchvision-style (`layer2.1.conv2`).
    pub module: String,
    pub output_shape: Vec<i64>,
    /// Bytes of the module's output tensor (elements × element size).
    pub output_bytes: u64,
    /// Allocated bytes above the run's baseline right after the module returned: what the
    /// forward pass holds at this point (saved activations with grad, the live ones without).
    pub allocated_above_baseline_bytes: u64,
    /// The highest allocated above the baseline while this module ran (its workspace and
    /// its input and output alive together).
    pub peak_above_baseline_bytes: u64,
    /// Time spent in this module (on CUDA between two device synchronisations).
    pub time_ms: f64,
    /// FLOPs of this module at the run's batch, counted from the shapes: convolutions,
    /// linear layers and attention matmuls, a multiply-add counting as 2. Element-wise ops
    /// (BatchNorm, ReLU, additions, pooling) count 0, as PyTorch's FlopCounterMode counts them.
    pub flops: u64,
}

/// Where a device's peak throughput comes from: the datasheet of a known GPU, or measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DevicePeak {
    /// Peak TFLOP/s for the dtype the run computed in.
    pub tflops: f64,
    /// Peak memory bandwidth in GB/s, if known (datasheet or measured by a large copy).
    pub bandwidth_gb_s: Option<f64>,
    /// e.g. `"datasheet: NVIDIA H100 SXM, fp32"` or `"measured matmul peak (fp32, 2048², at worker start)"`.
    pub source: String,
}

/// The run's place under the device's roofs. The arithmetic intensity is an estimate:
/// bytes moved are counted as weights read once plus every module's output written once
/// and read once, ignoring caches and workspaces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Roofline {
    /// FLOPs / estimated bytes moved.
    pub intensity_flops_per_byte: f64,
    pub bytes_moved_estimate: u64,
    pub peak_tflops: f64,
    pub bandwidth_gb_s: Option<f64>,
    pub achieved_tflops: f64,
}

/// One part of the device's memory, with the call that reads it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemoryPart {
    pub label: String,
    pub bytes: u64,
    /// The PyTorch call (or OS file) the figure is read from, e.g. `torch.cuda.memory_reserved`.
    pub read_by: String,
}

/// What the device's memory holds after a run, each part measured and named. On CUDA:
/// driver-used split into the context and libraries, the allocator's reserved memory (of
/// which allocated: weights, input, peak activations) and the rest; on the CPU the
/// process's resident memory against libtorch's tensor memory, with the gap named.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemoryBreakdown {
    /// The whole bar: driver-used on CUDA, the process's resident memory on the CPU.
    pub total_bytes: u64,
    pub total_label: String,
    /// The parts, bottom to top; they add up to `total_bytes`.
    pub parts: Vec<MemoryPart>,
}

/// One labelled traced pass: a pitfall card's row, drawn overlaid with the others.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NamedTrace {
    pub label: String,
    pub trace: Vec<TracePoint>,
}

/// Peak allocated above the baseline over the trace (the highest any module reached).
pub fn trace_peak(trace: &[TracePoint]) -> u64 {
    trace
        .iter()
        .map(|p| {
            p.peak_above_baseline_bytes
                .max(p.allocated_above_baseline_bytes)
        })
        .max()
        .unwrap_or(0)
}

/// The `n` points holding the most allocated memory, most first (ties keep model order).
pub fn top_holders(trace: &[TracePoint], n: usize) -> Vec<&TracePoint> {
    let mut points: Vec<&TracePoint> = trace.iter().collect();
    points.sort_by(|a, b| {
        b.allocated_above_baseline_bytes
            .cmp(&a.allocated_above_baseline_bytes)
    });
    points.truncate(n);
    points
}

/// Bytes each point added (or freed, negative) against the point before it.
pub fn added_bytes(trace: &[TracePoint]) -> Vec<i64> {
    let mut before = 0i64;
    trace
        .iter()
        .map(|p| {
            let now = p.allocated_above_baseline_bytes as i64;
            let added = now - before;
            before = now;
            added
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(module: &str, alloc: u64, peak: u64) -> TracePoint {
        TracePoint {
            module: module.into(),
            output_shape: vec![2, 3],
            output_bytes: 24,
            allocated_above_baseline_bytes: alloc,
            peak_above_baseline_bytes: peak,
            time_ms: 0.5,
            flops: 10,
        }
    }

    #[test]
    fn helpers_rank_difference_and_export() {
        let t = vec![point("a", 10, 12), point("b", 30, 40), point("c", 5, 31)];
        assert_eq!(trace_peak(&t), 40);
        let top: Vec<_> = top_holders(&t, 2)
            .iter()
            .map(|p| p.module.clone())
            .collect();
        assert_eq!(top, ["b", "a"]);
        assert_eq!(added_bytes(&t), [10, 20, -25]);
    }
}
