//! Memory budgets and admission: where each device's budget comes from ([`Budget`]), the
//! profile of a model and mode measured at two small batches ([`Profile`], [`Lab::admit`]),
//! and the up-front refusal of a run predicted not to fit the budget or the deadline
//! ([`refusal`]), shared with the worker so a submission can be refused before it is queued.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protocol::{Autocast, DeviceKind, FailureKind, GradMode, ModelId, Report, RunFailure, SdpBackend};

use super::{held, Lab, LabConfig, RunControl};
use crate::device::{meminfo_field, total_ram, Machine};
use crate::spec::{CheckedSpec, ForwardRun};
use crate::torch_call::{failure, tch_device};
use crate::torch_ext;

/// The share of the memory available at start-up (`MemAvailable` in /proc/meminfo) that a
/// CPU worker may hold when no `--memory-limit-mib` is given: leaves the rest to the server,
/// the OS and whatever else runs on the machine.
pub const CPU_BUDGET_FRACTION: f64 = 0.5;

/// Predicted activation memory is multiplied by this before it is compared with the budget:
/// the prediction is a straight line through two small batches, and allocator rounding,
/// oneDNN's reorders and the order of frees move the real peak by a few percent.
pub const PREDICTION_MARGIN: f64 = 1.25;

/// Batches at or below this run without a prediction: probing would cost as much as the run.
pub const PROBE_BATCH: u32 = 4;

/// One device's memory budget and where it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    pub bytes: u64,
    /// In words, for /api/info and error messages ("--memory-limit-mib", "half the memory
    /// available at start-up", ...).
    pub source: String,
}

/// What a model in one mode needs, measured at two small batches (see [`Lab::admit`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Profile {
    /// Peak above the baseline at batch 1, and its growth per extra sample.
    pub above_at_1: u64,
    pub above_per_sample: u64,
    /// Input bytes per sample.
    pub input_per_sample: u64,
    /// What the model's weights hold on the device.
    pub weights: u64,
    /// One forward pass at batch 1 (fastest of the timed passes), and its growth per sample.
    pub pass_at_1: Duration,
    pub pass_per_sample: Duration,
}

impl Profile {
    /// Weights + input + predicted activations (with [`PREDICTION_MARGIN`]) at `batch`.
    pub fn predicted_bytes(&self, batch: u32) -> u64 {
        let b = batch.max(1) as u64;
        let above = self.above_at_1 + self.above_per_sample * (b - 1);
        self.weights + self.input_per_sample * b + (above as f64 * PREDICTION_MARGIN) as u64
    }

    /// The largest batch whose prediction fits in `budget` (0: not even batch 1).
    pub fn largest_batch(&self, budget: u64) -> u64 {
        if self.predicted_bytes(1) > budget {
            return 0;
        }
        let per = self.input_per_sample as f64 + self.above_per_sample as f64 * PREDICTION_MARGIN;
        if per <= 0.0 {
            return u64::MAX;
        }
        let spare = (budget - self.predicted_bytes(1)) as f64;
        1 + (spare / per).floor() as u64
    }

    /// One pass at `batch`, from the straight line through the two probes.
    pub fn predicted_pass(&self, batch: u32) -> Duration {
        self.pass_at_1 + self.pass_per_sample * (batch.max(1) - 1)
    }
}

/// Profiles are per model, device, mode and input size.
pub type ProfileKey = (ModelId, DeviceKind, bool, GradMode, Autocast, u32);

/// The profiles measured so far, shared with the worker so that a submission can be
/// refused before it is queued once its model and mode have been seen.
pub type Profiles = Arc<Mutex<HashMap<ProfileKey, Profile>>>;

pub fn profile_key(checked: &CheckedSpec) -> ProfileKey {
    let s = checked.spec();
    (
        s.model,
        checked.device(),
        s.eval,
        s.grad,
        s.autocast,
        checked.input_size(),
    )
}

/// The profile of `checked`'s model and mode, if it has been measured.
pub fn known_profile(profiles: &Profiles, checked: &CheckedSpec) -> Option<Profile> {
    profiles
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&profile_key(checked))
        .copied()
}

/// Whether a profile says `checked` cannot fit `budget` (weights + input + predicted
/// activations, other cached models not counted: they are evicted first) or cannot finish
/// one pass in `time_left`. The message says why, with the numbers.
pub fn refusal(
    checked: &CheckedSpec,
    profile: &Profile,
    budget: Option<&Budget>,
    time_left: Option<Duration>,
) -> Option<String> {
    let spec = checked.spec();
    let device = checked.device().as_str();
    if let Some(budget) = budget {
        let need = profile.predicted_bytes(spec.batch);
        if need > budget.bytes {
            let largest = profile.largest_batch(budget.bytes);
            return Some(format!(
                "out of memory (refused before it started): batch {} of {} ({}) would need about {} of {device} memory (weights, input and {PREDICTION_MARGIN}x the activations predicted from batches 1 and {PROBE_BATCH}), above this server's budget of {} ({}); {}",
                spec.batch,
                spec.model,
                spec.label(),
                protocol::format_bytes(need),
                protocol::format_bytes(budget.bytes),
                budget.source,
                if largest == 0 {
                    "not even batch 1 fits".to_string()
                } else {
                    format!("the largest batch that fits is about {largest}")
                },
            ));
        }
    }
    if let Some(left) = time_left {
        let pass = profile.predicted_pass(spec.batch);
        if pass > left {
            return Some(format!(
                "refused before it started: one forward pass at batch {} ({}) is predicted to take {:.1} s (from batches 1 and {PROBE_BATCH}), longer than the {:.1} s this run may take",
                spec.batch,
                spec.label(),
                pass.as_secs_f64(),
                left.as_secs_f64(),
            ));
        }
    }
    None
}

/// A decoder run's memory, computed from its config before anything is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    pub weights: u64,
    /// The KV cache at full length (prompt + new tokens).
    pub kv_cache: u64,
    /// The largest step's activations: the prefill's layer temporaries and logits, and with
    /// grad enabled what autograd saves for every step of the generation.
    pub activations: u64,
}

impl Footprint {
    pub fn total(&self) -> u64 {
        self.weights + self.kv_cache + self.activations
    }
}

/// The footprint of a run on a decoder (`None` for other models).
pub fn decoder_footprint(spec: &protocol::RunSpec) -> Option<Footprint> {
    let d = spec.model.decoder()?;
    let c = &d.config;
    let elt = spec.advanced.weights.element().bytes();
    let b = spec.batch as u64;
    let p = spec.resolved_input_size() as u64;
    let n = spec.generate.as_ref().map_or(0, |g| g.new_tokens as u64);
    let cache = spec
        .generate
        .as_ref()
        .map_or(protocol::KvCacheKind::Off, |g| g.cache);
    // The cache keeps keys and values in the keys' dtype, the hidden states' (RoPE's cos
    // and sin are cast to it): the weights' dtype, autocast or not.
    let kv_elt = spec
        .generate
        .as_ref()
        .map_or(elt, |g| g.kv_dtype.element(spec.advanced.weights).bytes());
    // A sliding layer holds its window at most (a dynamic cache window − 1 between steps,
    // the window during one), except in the masked static cache of CUDA graph replay.
    let kv_cache = match cache {
        protocol::KvCacheKind::Off => 0,
        _ if spec.advanced.cuda_graph => c.kv_cache_bytes(p + n, b, kv_elt),
        _ => c.kv_cache_held_bytes(p + n, b, kv_elt, protocol::decoder::SlidingHold::Rolled),
    };
    let (h, i, heads, layers, vocab) = (
        c.hidden_size as u64,
        c.intermediate_size as u64,
        c.num_attention_heads as u64,
        c.num_hidden_layers as u64,
        c.vocab_size as u64,
    );
    let ctx = p + n;
    // The widest step: every position of the longest pass through one layer (hidden
    // copies, the MLP's three intermediate-wide tensors, the attention scores when a kernel
    // materialises them), and fp32 logits (all positions for a forward run, one otherwise).
    let longest = if cache == protocol::KvCacheKind::Off { ctx } else { p };
    let logits = if spec.generate.is_some() { b * vocab * 4 } else { b * p * vocab * 4 };
    // The scores `[batch, heads, queries, keys]` exist only where the math backend runs:
    // flash, memory-efficient and cuDNN attention tile them and never hold them whole.
    let scores = match prefill_backend(spec).materialises_scores() {
        true => b * heads * longest * longest * 4,
        false => 0,
    };
    let layer = b * longest * (6 * h + 3 * i) * elt + scores;
    // With grad enabled, autograd keeps every layer's inputs of every step alive.
    let saved = match spec.grad {
        GradMode::Enabled => layers * b * ctx * (8 * h + 3 * i) * elt,
        _ => 0,
    };
    // Quantized linear layers count at their packed bytes with their scales (and zeros).
    let quant = spec.generate.as_ref().map_or(protocol::LinearQuant::NONE, |g| g.quant());
    let w = protocol::weights_formula(c, quant, elt);
    Some(Footprint {
        weights: w.linear_bytes + w.other_bytes,
        kv_cache,
        activations: layer + logits + saved,
    })
}

/// The SDPA backend the prefill (or, without a cache, every step's pass over the whole
/// sequence) of `spec` will run, predicted from libtorch's documented constraints without
/// touching a device (admission runs off the device thread, before anything exists):
/// on the CPU its flash kernel takes any float dtype without dropout, math takes dropout; on
/// CUDA flash takes fp16/bf16 and memory-efficient fp32 for head dims that are multiples of
/// 8 up to 256. The run reports what libtorch actually chose (`attention`); tests hold this
/// prediction to libtorch's `_fused_sdp_choice` for the same shapes.
pub fn prefill_backend(spec: &protocol::RunSpec) -> SdpBackend {
    let Some(d) = spec.model.decoder() else {
        return SdpBackend::Math;
    };
    let c = &d.config;
    let dropout = !spec.eval && c.attention_dropout > 0.0;
    let low = spec.autocast != Autocast::Off || spec.advanced.weights != protocol::WeightsDtype::Fp32;
    let head_ok = c.head_dim % 8 == 0 && c.head_dim <= 256;
    match spec.device {
        protocol::DeviceChoice::Cuda if head_ok && low => SdpBackend::Flash,
        protocol::DeviceChoice::Cuda if head_ok => SdpBackend::MemoryEfficient,
        protocol::DeviceChoice::Cuda => SdpBackend::Math,
        _ if dropout => SdpBackend::Math,
        _ => SdpBackend::Flash,
    }
}

/// Why a decoder run cannot fit `budget`, with the figures; `None` when it fits.
pub fn decoder_refusal(spec: &protocol::RunSpec, budget: &Budget) -> Option<String> {
    let f = decoder_footprint(spec)?;
    if f.total() <= budget.bytes {
        return None;
    }
    let b = protocol::format_bytes;
    Some(format!(
        "out of memory (refused before it started): {} ({}) needs about {} of memory: weights {}, KV cache at full length {}, activations {}; above this server's budget of {} ({})",
        spec.model,
        spec.label(),
        b(f.total()),
        b(f.weights),
        b(f.kv_cache),
        b(f.activations),
        b(budget.bytes),
        budget.source
    ))
}

impl Lab {
    /// Refuses `checked` before it starts when its profile (measured here at batches 1 and
    /// [`PROBE_BATCH`] the first time its model and mode are seen, then cached) predicts
    /// that it cannot fit the budget or finish one pass before the deadline; evicts the
    /// other cached models on the device when the run fits only without them. Batches up to
    /// [`PROBE_BATCH`] are admitted without a prediction (the guard still holds them).
    pub fn admit(&mut self, checked: &CheckedSpec, control: &RunControl) -> Result<(), RunFailure> {
        let spec = checked.spec();
        let device = checked.device();
        // A decoder's footprint is computed from its config, not probed: probing the 8B shape
        // on a CPU would allocate the very memory the refusal is meant to spare.
        if spec.model.is_decoder() {
            if let Some(reason) = control
                .budget_bytes
                .map(|bytes| Budget {
                    bytes,
                    source: "this task's budget".into(),
                })
                .or_else(|| self.budget(device).cloned())
                .and_then(|budget| decoder_refusal(spec, &budget))
            {
                return Err(failure(FailureKind::OutOfMemory, reason));
            }
            return Ok(());
        }
        // Only decoders generate, and their footprint is computed above: what is left is
        // forward passes, which a profile predicts.
        let CheckedSpec::Forward(run) = checked else {
            return Ok(());
        };
        if spec.batch <= PROBE_BATCH {
            return Ok(());
        }
        let key = profile_key(checked);
        let profile = match known_profile(&self.profiles, checked) {
            Some(p) => p,
            None => {
                let p = self.probe(run, control).map_err(|f| match f.kind {
                    FailureKind::OutOfMemory => failure(
                        FailureKind::OutOfMemory,
                        format!(
                            "out of memory (refused before it started): even batches 1 and {PROBE_BATCH} cross this server's memory budget (batch {}, {}): {}",
                            spec.batch,
                            spec.label(),
                            f.message
                        ),
                    ),
                    _ => f,
                })?;
                self.profiles
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, p);
                p
            }
        };
        let budget = control
            .budget_bytes
            .map(|bytes| Budget {
                bytes,
                source: self
                    .budget(device)
                    .filter(|b| b.bytes == bytes)
                    .map(|b| b.source.clone())
                    .unwrap_or_else(|| "this task's budget".into()),
            })
            .or_else(|| self.budget(device).cloned());
        if let Some(reason) = refusal(checked, &profile, budget.as_ref(), control.time_left()) {
            let kind = if reason.starts_with("out of memory") {
                FailureKind::OutOfMemory
            } else {
                FailureKind::Timeout
            };
            return Err(failure(kind, reason));
        }
        // It fits on its own; make room if the other cached models are in the way.
        if let Some(budget) = budget {
            let held_now = held(&self.meter(device), device)?;
            let need = profile.predicted_bytes(spec.batch);
            if held_now.saturating_sub(profile.weights) + need > budget.bytes {
                if let Some(i) = self.models.iter().position(|m| {
                    m.id == spec.model
                        && m.vs.device() == tch_device(device)
                        && m.fits(checked.input_size())
                }) {
                    self.evict_others(i, device);
                } else {
                    self.models.retain(|m| m.vs.device() != tch_device(device));
                }
                self.recover(device);
            }
        }
        Ok(())
    }

    /// Measures `checked`'s model and mode at batches 1 and [`PROBE_BATCH`].
    fn probe(
        &mut self,
        checked: &ForwardRun,
        control: &RunControl,
    ) -> Result<Profile, RunFailure> {
        let at = |batch: u32| -> Result<CheckedSpec, RunFailure> { Ok(checked.probe(batch, 1, 2)) };
        // In train mode a BatchNorm over one sample has one value per channel: PyTorch's
        // refuses it (a team script's does too), and ATen's, which the built-in models call,
        // divides by n − 1 = 0 and writes NaN into the running variance, which every later
        // pass of the cached model would read. So a train-mode probe starts at 2, and the
        // line is extrapolated back to 1.
        let first = if !checked.spec().eval { 2 } else { 1 };
        let one = self.measure(&at(first)?, control, &mut |_| {})?;
        let four = self.measure(&at(PROBE_BATCH)?, control, &mut |_| {})?;
        let steps = (PROBE_BATCH - first) as u64;
        let input = |r: &Report| r.memory.baseline_bytes;
        let index =
            self.model_index(checked.spec().model, checked.device(), checked.input_size())?;
        let weights = self.models[index].held_bytes;
        let fastest = |r: &Report| Duration::from_secs_f64(r.latency_ms.min / 1000.0);
        let (t1, t4) = (fastest(&one), fastest(&four));
        let above_per_sample = four
            .memory
            .peak_above_baseline_bytes
            .saturating_sub(one.memory.peak_above_baseline_bytes)
            / steps;
        let pass_per_sample = t4.saturating_sub(t1) / steps as u32;
        let back = (first - 1) as u64;
        let profile = Profile {
            above_at_1: one
                .memory
                .peak_above_baseline_bytes
                .saturating_sub(above_per_sample * back),
            above_per_sample,
            input_per_sample: input(&four).saturating_sub(input(&one)) / steps,
            weights,
            pass_at_1: t1.saturating_sub(pass_per_sample * back as u32),
            pass_per_sample,
        };
        tracing::debug!(?profile, spec = %checked.spec().label(), "profiled");
        Ok(profile)
    }
}

/// The budgets of both devices: `--memory-limit-mib` when given, otherwise derived from the
/// device at start-up.
pub(super) fn budgets(config: &LabConfig, machine: &Machine) -> (Budget, Option<Budget>) {
    let explicit = config.memory_limit_bytes.map(|bytes| Budget {
        bytes,
        source: "the server's --memory-limit-mib".into(),
    });
    let cpu = explicit.clone().unwrap_or_else(|| {
        let available = mem_available().or_else(total_ram).unwrap_or(u64::MAX / 2);
        Budget {
            bytes: (available as f64 * CPU_BUDGET_FRACTION) as u64,
            source: format!(
                "{}% of the memory available when the server started",
                (CPU_BUDGET_FRACTION * 100.0).round()
            ),
        }
    });
    let cuda = machine.has_cuda().then(|| {
        explicit.unwrap_or_else(|| {
            let free = torch_ext::cuda_mem_info(0)
                .map(|(free, _)| free)
                .unwrap_or(u64::MAX / 2);
            // What the device has free once the CUDA context and the libraries' workspaces
            // are in place: the worker's own workspaces count against it too, which errs
            // on the safe side by their few MiB.
            Budget {
                bytes: free,
                source: "the GPU's free memory when the server started".into(),
            }
        })
    });
    (cpu, cuda)
}

fn mem_available() -> Option<u64> {
    meminfo_field("MemAvailable:")
}
