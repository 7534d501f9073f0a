//! Inside the forward pass: the [`Probe`] the built-in models mark at every module boundary
//! and the FLOP count from shapes. The one traced pass that records with it after a run's
//! timed iterations is the lab's (`crate::lab::traced_pass`).
//!
//! The timed iterations run the same forward code with [`Probe::off`]: every mark is then a
//! test of an `Option` and nothing else (no clock, no meter read, no FLOP arithmetic, no
//! string built), so tracing cannot touch the latency statistics. The traced pass is one
//! extra pass, reported apart.
//!
//! FLOPs are counted the way PyTorch's `torch.utils.flop_counter.FlopCounterMode` counts
//! them (checked by `bench/flops.py`): convolutions, linear layers and attention's two
//! matmuls, a multiply-add counting as 2, biases and element-wise ops (BatchNorm, ReLU,
//! additions, pooling) not counted.

use std::time::Instant;

use protocol::{DeviceKind, RunFailure, TracePoint};
use tch::{nn, Tensor};

use crate::device::Meter;
use crate::torch_call::{synchronize, torch_failure};

/// What a model's forward pass reports to at its module boundaries. Off for the timed
/// iterations, on (recording) for the traced pass.
pub struct Probe<'a> {
    recorder: Option<Recorder<'a>>,
    /// A values probe's points ([`Probe::values`]).
    values: Option<Vec<ValuePoint>>,
}

/// What a [`Probe::values`] probe saw in one module's output: how many elements were not
/// finite (inf or NaN) and the largest finite magnitude.
#[derive(Clone, Debug, PartialEq)]
pub struct ValuePoint {
    pub module: String,
    pub elements: u64,
    pub non_finite: u64,
    pub max_abs: f64,
}

struct Recorder<'a> {
    meter: &'a Meter<'a>,
    device: DeviceKind,
    /// Allocated bytes at the run's baseline, as the meter counts them (other holdings included).
    offset: u64,
    points: Vec<TracePoint>,
    since: Instant,
    error: Option<RunFailure>,
}

impl<'a> Probe<'a> {
    /// A probe that records nothing and costs nothing.
    pub fn off() -> Probe<'static> {
        Probe { recorder: None, values: None }
    }

    /// A probe that reads every marked output's values instead of time and memory (for the
    /// fp16 overflow experiment: where a pass first leaves a dtype's range). Each mark
    /// reads the output back, so it is for one untimed pass.
    pub fn values() -> Probe<'static> {
        Probe { recorder: None, values: Some(Vec::new()) }
    }

    /// A values probe's points, in pass order (empty for the other kinds).
    pub fn finish_values(self) -> Vec<ValuePoint> {
        self.values.unwrap_or_default()
    }

    /// A recording probe. `offset` is what the meter reads at the run's baseline; the meter's
    /// peak is reset here, so the first module's peak is its own.
    pub fn recording(
        meter: &'a Meter<'a>,
        device: DeviceKind,
        offset: u64,
    ) -> Result<Probe<'a>, RunFailure> {
        synchronize(device)?;
        meter.reset_peak().map_err(torch_failure)?;
        Ok(Probe {
            values: None,
            recorder: Some(Recorder {
                meter,
                device,
                offset,
                points: Vec::new(),
                since: Instant::now(),
                error: None,
            }),
        })
    }

    /// Marks the end of `module`, whose output is `out`; `flops` is asked only when recording.
    /// Time runs from the previous mark to this one (after synchronising on CUDA); the probe's
    /// own reading is left out of the next module's time.
    pub fn mark(&mut self, module: &str, out: &Tensor, flops: impl FnOnce() -> u64) {
        if let Some(points) = self.values.as_mut() {
            let wide = out.to_kind(tch::Kind::Float);
            let finite = wide.isfinite();
            let elements = out.numel() as u64;
            let non_finite = elements - finite.sum(tch::Kind::Int64).int64_value(&[]) as u64;
            let max_abs = if elements == 0 {
                0.0
            } else {
                wide.abs().where_scalarother(&finite, 0.0).max().double_value(&[])
            };
            points.push(ValuePoint { module: module.to_string(), elements, non_finite, max_abs });
            return;
        }
        let Some(r) = self.recorder.as_mut() else {
            return;
        };
        if r.error.is_some() {
            return;
        }
        if let Err(e) = synchronize(r.device) {
            r.error = Some(e);
            return;
        }
        let time_ms = r.since.elapsed().as_secs_f64() * 1000.0;
        let reading = match r.meter.read().and_then(|reading| {
            r.meter.reset_peak()?;
            Ok(reading)
        }) {
            Ok(reading) => reading,
            Err(e) => {
                r.error = Some(torch_failure(e));
                return;
            }
        };
        let shape = out.size();
        let output_bytes = out.numel() as u64 * out.kind().elt_size_in_bytes() as u64;
        r.points.push(TracePoint {
            module: module.to_string(),
            output_shape: shape,
            output_bytes,
            allocated_above_baseline_bytes: reading.allocated.saturating_sub(r.offset),
            peak_above_baseline_bytes: reading
                .peak_allocated
                .max(reading.allocated)
                .saturating_sub(r.offset),
            time_ms,
            flops: flops(),
        });
        r.since = Instant::now();
    }

    /// The recorded points, or the error a mark met.
    pub fn finish(self) -> Result<Vec<TracePoint>, RunFailure> {
        match self.recorder {
            None => Ok(vec![]),
            Some(r) => match r.error {
                Some(e) => Err(e),
                None => Ok(r.points),
            },
        }
    }
}

fn product(dims: &[i64]) -> u64 {
    dims.iter().map(|&d| d.max(0) as u64).product()
}

/// A convolution: 2 × output elements × (input channels per group × kernel area).
pub fn conv_flops(conv: &nn::Conv2D, out: &Tensor) -> u64 {
    2 * out.numel() as u64 * product(&conv.ws.size()[1..])
}

/// A linear layer: 2 × output elements × input features (the bias is not counted).
pub fn linear_flops(linear: &nn::Linear, out: &Tensor) -> u64 {
    2 * out.numel() as u64 * linear.ws.size().get(1).copied().unwrap_or(0).max(0) as u64
}

/// Scaled dot-product attention on `q` `[b, h, s, d]` and `k` `[b, h, s_k, d]`: the two
/// matmuls (q·kᵀ and the weights·v), 2 × b·h·s·s_k·d each; the softmax is not counted.
pub fn attention_flops(q: &Tensor, k: &Tensor) -> u64 {
    let (q, k) = (q.size(), k.size());
    if q.len() < 2 || k.len() < 2 {
        return 0;
    }
    let s_k = k[k.len() - 2].max(0) as u64;
    4 * product(&q) * s_k
}
