//! A generate run's loop ([`Lab::generate_guarded`]): the same start and finish as a forward
//! run (the guard, the budget, the baseline, the peak resets, the leak check, the
//! environment stamp; see `measure`), around greedy decoding instead of timed passes:
//!
//! 1. build or reuse the decoder, make the prompt (random seeded ids), record the baseline
//!    (weights + prompt);
//! 2. one short warm-up generation (at most [`WARMUP_TOKENS`] tokens), reported apart;
//! 3. the measured generation, inside the spec's grad mode and autocast region as a
//!    hand-written loop would be: the prefill (one pass over the prompt, which yields the
//!    first new token), then one decode step per further token, each synchronised and timed,
//!    its peak reset, streamed as a `step` event with the allocated memory after it and the
//!    KV cache's bytes measured from the cache's tensors;
//! 4. the cache and the tokens released, memory checked against the baseline.
//!
//! The cache is created here and owned by the loop, never by the cached model. With CUDA
//! graph replay (`advanced.cuda_graph`, static cache, CUDA only) the cache is the masked
//! static one (the whole capacity attended under a mask) and, after the prefill, the decode
//! step is captured once and replayed for every token (`super::cuda_graph::DecodeGraph`).
//! On CUDA the decode steps run with cuDNN attention switched off: it builds a plan for
//! every new key length, i.e. every step; which backend each phase ran is reported.

use std::time::Instant;

use protocol::{
    AttentionBackends, DeviceKind, Event, FailureKind, GenPhase, GenStep, GenerationReport,
    KvCacheKind, MemorySplit, OutputFacts, Report, RunFailure, Sample, SdpBackend,
    WeightsBreakdown,
};
use tch::Tensor;

use super::cuda_graph::DecodeGraph;
use super::{held, memory_report, Lab, RunControl};

mod rates;
mod run;

pub use rates::{decode_bytes_read, fill_rates};
use crate::device::{allocated_for, Meter};
use crate::models::decoder::{Decoder, KvCache, Logits, Position};
use crate::torch_ext::{SdpFlags, SdpFlagsGuard};
use crate::spec::{CheckedSpec, GenerateRun};
use crate::stats::latency_stats;
use crate::torch_call::{catch_torch, failure, synchronize, tch_device, torch_failure};
use crate::trace::Probe;

/// New tokens of the warm-up generation (fewer when the run asks for fewer): enough to run
/// the prefill and the decode step's kernels once each.
pub const WARMUP_TOKENS: u32 = 4;

/// What one generation produced.
pub struct Generated {
    pub steps: Vec<GenStep>,
    /// `[batch, new_tokens]` int64 on the CPU.
    pub tokens: Tensor,
    pub kv_bytes: u64,
    pub kv_positions: i64,
    /// Bytes per element of the keys and of the values.
    pub kv_element_bytes: (u64, u64),
    pub peak_reserved: Option<u64>,
    pub attention: Option<AttentionBackends>,
    /// Each layer's cache bytes and positions after the last step.
    pub kv_per_layer: Vec<(u64, i64)>,
    /// A mixture of experts' reads per decode step.
    pub moe_steps: Vec<protocol::decoder::MoeStep>,
}

/// Settings of one generation.
pub struct GenerateArgs<'a> {
    pub decoder: &'a Decoder,
    pub prompt: &'a Tensor,
    pub new_tokens: u32,
    pub cache: KvCacheKind,
    /// The dtype the cache stores keys and values in when not the activations' ([`kv_store`]).
    pub kv_store: Option<tch::Kind>,
    pub spec: &'a protocol::RunSpec,
    pub device: DeviceKind,
    /// The run's baseline: its weights and prompt.
    pub baseline: u64,
    /// What else the device held at the baseline (other cached models, libraries'
    /// workspaces): left out of every figure.
    pub other: u64,
    /// CUDA only: the budget checked after each step (the CPU's guard checks every
    /// allocation).
    pub limit: Option<u64>,
    /// Enter the autocast region around each step instead of around the whole loop (the
    /// `autocast-decode` card: the cast copies of the weights live only as long as the
    /// outermost region).
    pub autocast_per_step: bool,
    /// Replay a captured CUDA graph for the decode steps (the spec's `advanced.cuda_graph`).
    pub graph: bool,
}

/// Runs one greedy generation, calling `on_step` after each step. Opens the spec's grad mode
/// and autocast region around the whole loop, as `with torch.no_grad(): for ...` would.
pub fn generate(
    args: &GenerateArgs<'_>,
    meter: &Meter<'_>,
    control: &RunControl,
    on_step: &mut dyn FnMut(&GenStep),
) -> Result<Generated, RunFailure> {
    let spec = args.spec;
    let outer = protocol::RunSpec {
        autocast: if args.autocast_per_step {
            protocol::Autocast::Off
        } else {
            spec.autocast
        },
        ..spec.clone()
    };
    let _regions = super::forward::enter_regions(&outer, args.device)?;
    // The CUDA math switches (TF32, cudnn.benchmark), as around a forward run's passes:
    // the prefill, every decode step and a decode graph's capture run under them.
    let _flags = super::backend_guard(&spec.advanced, args.device)?;
    let per_step = protocol::RunSpec {
        grad: protocol::GradMode::Enabled,
        ..spec.clone()
    };
    let prompt_len = args.prompt.size()[1];
    let n = args.new_tokens as i64;
    let layers = args.decoder.config().num_hidden_layers as usize;
    let mut cache = match args.graph {
        true => KvCache::static_masked(layers, prompt_len + n),
        false => KvCache::new(args.cache, layers, prompt_len + n).storing(args.kv_store),
    };
    let mut tokens: Vec<Tensor> = Vec::with_capacity(n as usize);
    // Without a cache every step feeds the whole sequence so far.
    let mut sequence = args.prompt.shallow_clone();
    let mut last: Option<Tensor> = None;
    let mut steps = Vec::with_capacity(n as usize);
    let mut peak_reserved: Option<u64> = None;
    let mut graph: Option<DecodeGraph> = None;
    // cuDNN attention off for the decode steps on CUDA, from the first one to the end.
    let mut decode_switches: Option<SdpFlagsGuard> = None;
    let (mut sdp_prefill, mut sdp_decode): (Option<SdpBackend>, Option<SdpBackend>) = (None, None);
    let train = !spec.eval;
    let expert_log = super::decoder_figures::ExpertLog::start(args.decoder);
    let mut moe_steps = Vec::new();
    for step in 0..n {
        control.check()?;
        if step == 1 && args.device == DeviceKind::Cuda {
            let flags = SdpFlags::read().map_err(torch_failure)?;
            decode_switches = Some(
                SdpFlagsGuard::enter(SdpFlags { cudnn: false, ..flags }).map_err(torch_failure)?,
            );
        }
        if let (1, true, Some(first)) = (step, args.graph, last.as_ref()) {
            // Captured before the first decode step's clock starts: the warm-up pass on the
            // side stream, then the capture; every decode step replays it.
            let position = prompt_len;
            graph = Some(
                DecodeGraph::capture(args.decoder, &mut cache, first, position, train, &mut sdp_decode)
                    .map_err(|f| at_step(f, step, n))?,
            );
        }
        let (fed, position) = match (&last, args.cache) {
            (None, _) => (args.prompt.shallow_clone(), 0),
            (Some(_), KvCacheKind::Off) => (sequence.shallow_clone(), 0),
            (Some(t), _) => (t.shallow_clone(), prompt_len + step - 1),
        };
        let tokens_in = fed.size()[1];
        // The backend of each phase, asked with the phase's own tensors (the prefill, and
        // the first decode step: every later one has the same shapes but one key more).
        let ask = match step {
            0 => Some(&mut sdp_prefill),
            1 if graph.is_none() => Some(&mut sdp_decode),
            _ => None,
        };
        meter.reset_peak().map_err(torch_failure)?;
        let start = Instant::now();
        // Only autocast, and only when asked: the grad mode stays the loop's.
        let step_region = match args.autocast_per_step {
            true => Some(super::forward::enter_regions(&per_step, args.device)?),
            false => None,
        };
        let next = match graph.as_mut() {
            Some(g) => g.step(),
            None => catch_torch(|| {
                let at = Position::At(position);
                let logits = args.decoder.forward_at(
                    &fed,
                    at,
                    &mut cache,
                    train,
                    Logits::Last,
                    &mut Probe::off(),
                    ask,
                );
                logits.argmax(-1, false)
            }),
        }
        .map_err(|f| at_step(f, step, n))?;
        drop(step_region);
        synchronize(args.device)?;
        let latency_ms = start.elapsed().as_secs_f64() * 1000.0;
        if expert_log.is_some() {
            let log = args.decoder.take_expert_log();
            if step > 0 {
                moe_steps.extend(super::decoder_figures::moe_step(args.decoder, step as u32, &log));
            }
        }
        drop(fed);
        if args.cache == KvCacheKind::Off {
            sequence = catch_torch(|| Tensor::cat(&[&sequence, &next], 1))?;
        }
        // The first sequence's new token, read after the step's time was taken (the step
        // is synchronised already): a page shows a byte model's text as it comes.
        let token = catch_torch(|| next.int64_value(&[0, 0])).ok();
        tokens.push(next.shallow_clone());
        last = Some(next);
        let reading = meter.read().map_err(torch_failure)?;
        peak_reserved = peak_reserved.max(reading.peak_reserved);
        if let Some(limit) = args.limit {
            if reading.peak_allocated > limit {
                return Err(at_step(
                    failure(
                        FailureKind::OutOfMemory,
                        format!(
                            "out of memory: this generation needed {} of {} memory, above the server's limit of {}",
                            protocol::format_bytes(reading.peak_allocated),
                            args.device.as_str(),
                            protocol::format_bytes(limit)
                        ),
                    ),
                    step,
                    n,
                ));
            }
        }
        let kv = cache.bytes();
        // What the cache and the loop itself hold, each tensor as the device's allocator
        // holds it (CUDA: whole 512 B blocks): the new tokens (int64), without a cache the
        // sequence so far (a copy of the prompt and the tokens; the prompt itself is in the
        // baseline until the first step replaces it), with graph replay its input and
        // output buffers.
        let held_by = |t: &Tensor| allocated_for(args.device, t.numel() as u64 * t.kind().elt_size_in_bytes() as u64);
        let cache_held: u64 = cache.tensors().map(held_by).sum();
        let mut loop_held: u64 = tokens.iter().map(held_by).sum();
        if args.cache == KvCacheKind::Off {
            loop_held += held_by(&sequence);
        }
        if let Some(g) = &graph {
            loop_held += g.buffers().iter().map(|t| held_by(t)).sum::<u64>();
        }
        let own = |b: u64| b.saturating_sub(args.other);
        let allocated = own(reading.allocated);
        let expected = args.baseline + cache_held + loop_held;
        if allocated < expected {
            // Less than the loop's own tensors: the accounting above is wrong, not the run.
            tracing::warn!(allocated, expected, step, "a generation step held less than its cache and tokens");
        }
        let step_record = GenStep {
            step: step as u32,
            phase: if step == 0 {
                GenPhase::Prefill
            } else {
                GenPhase::Decode
            },
            position: (prompt_len + step - 1) as u32,
            tokens_in: tokens_in as u32,
            latency_ms,
            allocated_bytes: allocated,
            peak_bytes: own(reading.peak_allocated),
            kv_cache_bytes: kv,
            graph_bytes: allocated.saturating_sub(expected),
            token,
            text: None,
        };
        on_step(&step_record);
        steps.push(step_record);
    }
    drop(decode_switches);
    let note = match args.device {
        DeviceKind::Cuda if n > 1 => "cuDNN attention was switched off for the decode steps: it builds a plan for every new key length, i.e. every step".to_string(),
        _ => String::new(),
    };
    let attention = sdp_prefill.map(|prefill| AttentionBackends {
        prefill,
        decode: sdp_decode,
        note,
    });
    drop(graph);
    drop(expert_log);
    let tokens = catch_torch(|| Tensor::cat(&tokens, 1).to_device(tch::Device::Cpu))?;
    Ok(Generated {
        steps,
        tokens,
        kv_bytes: cache.bytes(),
        kv_positions: cache.positions(),
        kv_element_bytes: cache.element_bytes(),
        peak_reserved,
        attention,
        kv_per_layer: cache.per_layer(),
        moe_steps,
    })
}

/// The dtype a KV cache of `kv` stores keys and values in with `weights`, when not the
/// activations'. The element type is the one admission counts (`KvDtype::element`); fp8
/// stores one byte per element and a per-tensor scale per layer (`KvCache::storing`).
pub fn kv_store(kv: protocol::KvDtype, weights: protocol::WeightsDtype) -> Option<tch::Kind> {
    (!kv.is_default()).then(|| super::advanced::kind(kv.element(weights)))
}

/// Adds the step a failure stopped at ("out of memory at step 37 of 64").
fn at_step(f: RunFailure, step: i64, n: i64) -> RunFailure {
    let phase = if step == 0 { "the prefill" } else { "a decode step" };
    RunFailure {
        message: format!("{} (at step {} of {n}, {phase})", f.message, step + 1),
        ..f
    }
}

/// A text prompt's ids (`[BOS] + its UTF-8 bytes` for the byte model, `tokenizer(text)` for a
/// tokenized one); `None` for a prompt of random ids.
pub fn text_prompt(model: protocol::ModelId, g: &protocol::GenerateSpec) -> Result<Option<Vec<i64>>, String> {
    let Some(text) = g.prompt_text.as_ref() else {
        return Ok(None);
    };
    let decoder = model.decoder().ok_or_else(|| format!("{model} is not a decoder served here"))?;
    crate::models::decoder::text::prompt_ids(&decoder, text).map(Some)
}

/// The config of the spec's decoder.
fn decoder_config(spec: &protocol::RunSpec) -> Result<protocol::decoder::DecoderConfig, RunFailure> {
    spec.model
        .decoder()
        .map(|d| d.config.clone())
        .ok_or_else(|| failure(FailureKind::Invalid, format!("{} is not a decoder served here", spec.model)))
}

/// A `[rows, cols]` int64 tensor's values, row by row.
fn tensor_rows(t: &Tensor) -> Result<Vec<Vec<i64>>, RunFailure> {
    catch_torch(|| {
        let rows = t.size()[0];
        (0..rows)
            .map(|r| Vec::<i64>::try_from(t.get(r)).unwrap_or_default())
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use protocol::{Advanced, GenerateSpec, RunSpec};
    use tch::Kind;

    use super::*;
    use crate::torch_ext::{BackendFlags, CpuMemoryCounter};

    /// Issue 54, defect 4: a generation ran its steps without the spec's CUDA math
    /// switches (`advanced.tf32`, `advanced.cudnn_benchmark`), which a forward run sets
    /// around every pass. The loop now enters them as the forward pass does: every step,
    /// warm-up and measured alike, reads them set, and they are restored after the loop.
    /// On a CPU the spec check refuses both (libtorch keeps the switches on a CPU build
    /// too, which is what lets this test call the loop with them on).
    #[test]
    fn a_generation_runs_every_step_under_the_specs_math_switches() {
        let _flags = crate::torch_ext::backend_flags_lock();
        let counter = CpuMemoryCounter::install().unwrap();
        let meter = Meter::Cpu(&counter);
        let id: protocol::ModelId = protocol::decoder::CPU_PRESET.parse().unwrap();
        tch::manual_seed(0);
        let model = crate::models::Model::build_in(id, tch::Device::Cpu, 8, protocol::WeightsDtype::Fp32);
        let decoder = model.net.as_decoder().unwrap();
        let vocab = decoder.config().vocab_size as i64;
        let prompt = Tensor::randint(vocab, [1, 8], (Kind::Int64, tch::Device::Cpu));
        let before = BackendFlags::read().unwrap();
        for (tf32, cudnn_benchmark) in [(true, false), (false, true), (true, true)] {
            let spec = RunSpec {
                model: id,
                device: protocol::DeviceChoice::Cpu,
                batch: 1,
                input_size: Some(8),
                grad: protocol::GradMode::NoGrad,
                advanced: Advanced { tf32, cudnn_benchmark, ..Advanced::default() },
                generate: Some(GenerateSpec { new_tokens: 3, ..Default::default() }),
                ..RunSpec::default()
            };
            for cache in [KvCacheKind::Dynamic, KvCacheKind::Static, KvCacheKind::Off] {
                let args = GenerateArgs {
                    decoder,
                    prompt: &prompt,
                    new_tokens: 3,
                    cache,
                    kv_store: None,
                    spec: &spec,
                    device: DeviceKind::Cpu,
                    baseline: 0,
                    other: 0,
                    limit: None,
                    autocast_per_step: false,
                    graph: false,
                };
                let mut seen = vec![];
                generate(&args, &meter, &RunControl::default(), &mut |_| seen.push(BackendFlags::read().unwrap())).unwrap();
                let want = BackendFlags { tf32_matmul: tf32, tf32_cudnn: tf32, cudnn_benchmark };
                assert_eq!(seen, vec![want; 3], "{cache:?}, tf32 {tf32}, cudnn_benchmark {cudnn_benchmark}");
                assert_eq!(BackendFlags::read().unwrap(), before, "restored after the loop");
            }
        }
    }
}
