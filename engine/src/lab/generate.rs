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

impl Lab {
    /// Measures one generate run, emitting `started`, one `warmup`, then one `step` per
    /// step. Called by [`Lab::measure`] inside the run's guard.
    pub(super) fn generate_guarded(
        &mut self,
        checked: &GenerateRun,
        control: &RunControl,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Report, RunFailure> {
        let per_step = self.autocast_per_step;
        self.generate_guarded_with(checked, control, emit, per_step)
    }

    fn generate_guarded_with(
        &mut self,
        checked: &GenerateRun,
        control: &RunControl,
        emit: &mut dyn FnMut(Event),
        autocast_per_step: bool,
    ) -> Result<Report, RunFailure> {
        let spec = checked.spec().clone();
        let g = checked.generation();
        let device = checked.device();
        let threads = spec.threads.unwrap_or(self.config.threads);
        tch::set_num_threads(threads as i32);
        control.check()?;
        let prompt_len = checked.input_size();
        let quant = g.quant();
        let index = self.model_index_quant(spec.model, device, prompt_len, &spec.advanced, quant)?;
        let autocast = spec.autocast != protocol::Autocast::Off;
        catch_torch(|| self.models[index].lay_out_for_run(autocast))?;
        let weights = self.models[index].held_bytes;
        tch::manual_seed(self.config.seed);
        let meter = self.meter(device);
        let before_prompt = held(&meter, device)?;
        let model = &self.models[index];
        let decoder = model
            .net
            .as_decoder()
            .ok_or_else(|| failure(FailureKind::Invalid, format!("{} is not a decoder", spec.model)))?;
        let prompt = match text_prompt(spec.model, g).map_err(|e| failure(FailureKind::Invalid, e))? {
            // The text's ids (the byte model's [BOS] + bytes, or what its tokenizer makes of
            // it), the same row for every sequence.
            Some(ids) => catch_torch(|| {
                Tensor::from_slice(&ids)
                    .view([1, ids.len() as i64])
                    .repeat([spec.batch as i64, 1])
                    .to_device(tch_device(device))
            })?,
            None => catch_torch(|| model.input(spec.batch, prompt_len, tch_device(device)))?
                .first()
                .shallow_clone(),
        };
        synchronize(device)?;
        let at_baseline = meter.read().map_err(torch_failure)?.allocated;
        let baseline = weights + at_baseline.saturating_sub(before_prompt);
        let other = at_baseline.saturating_sub(baseline);
        meter.reset_peak().map_err(torch_failure)?;
        emit(Event::started(self.machine.stamp(device, threads).device_name, baseline, meter.source(), 1 + g.new_tokens));
        let limit = control.budget_bytes.filter(|_| device == DeviceKind::Cuda);
        let args = |new_tokens| GenerateArgs {
            decoder,
            prompt: &prompt,
            new_tokens,
            cache: g.cache,
            kv_store: kv_store(g.kv_dtype, spec.advanced.weights),
            spec: &spec,
            device,
            baseline,
            other,
            limit,
            autocast_per_step,
            graph: spec.advanced.cuda_graph,
        };

        // The warm-up generation: the kernels of both phases run once before timing.
        let start = Instant::now();
        let warm = generate(&args(g.new_tokens.min(WARMUP_TOKENS)), &meter, control, &mut |_| {})?;
        let warmup_ms = start.elapsed().as_secs_f64() * 1000.0;
        let warm_peak = warm.steps.iter().map(|s| s.peak_bytes).max().unwrap_or(baseline);
        drop(warm);
        let warmup = vec![Sample {
            iteration: 0,
            latency_ms: warmup_ms,
            allocated_bytes: baseline,
            peak_bytes: warm_peak,
            reserved_bytes: None,
        }];
        emit(Event::Warmup {
            sample: warmup[0].clone(),
        });

        // The text each token adds, streamed with its step (a model that writes text).
        let served = spec.model.decoder();
        let mut streamer = served.as_deref().and_then(crate::models::decoder::text::Streamer::new);
        let generated = generate(&args(g.new_tokens), &meter, control, &mut |s| {
            let mut step = s.clone();
            if let (Some(streamer), Some(token)) = (streamer.as_mut(), s.token) {
                step.text = Some(streamer.push(token, s.step + 1 == g.new_tokens));
            }
            emit(Event::Step { step })
        })?;
        drop(streamer);
        let tokens = tensor_rows(&generated.tokens)?;
        let prompt_tokens = tensor_rows(&prompt.to_device(tch::Device::Cpu))?;
        let Generated {
            steps,
            kv_bytes,
            kv_positions,
            kv_element_bytes,
            peak_reserved,
            attention,
            tokens: token_tensor,
            kv_per_layer,
            moe_steps,
        } = generated;
        let output = OutputFacts {
            dtype: format!("{:?}", token_tensor.kind()),
            shape: token_tensor.size(),
            is_inference: token_tensor.is_inference(),
            requires_grad: false,
        };
        drop(token_tensor);
        drop(prompt);
        synchronize(device)?;
        // The prompt is gone too: what is left must be the weights alone.
        let after_release = meter
            .read()
            .map_err(torch_failure)?
            .allocated
            .saturating_sub(other)
            + baseline.saturating_sub(weights);
        if after_release > baseline {
            tracing::warn!(
                leaked = after_release - baseline,
                "memory did not return to the baseline after a generation"
            );
        }

        let decode: Vec<&GenStep> = steps.iter().filter(|s| s.phase == GenPhase::Decode).collect();
        let samples: Vec<Sample> = if decode.is_empty() { steps.iter().collect() } else { decode.clone() }
            .iter()
            .enumerate()
            .map(|(i, s)| Sample {
                iteration: i as u32,
                latency_ms: s.latency_ms,
                allocated_bytes: s.allocated_bytes,
                peak_bytes: s.peak_bytes,
                reserved_bytes: None,
            })
            .collect();
        let latencies: Vec<f64> = samples.iter().map(|s| s.latency_ms).collect();
        let latency_ms = latency_stats(&latencies)
            .ok_or_else(|| failure(FailureKind::Internal, "no steps were measured"))?;
        let decode_ms_per_token =
            latency_stats(&decode.iter().map(|s| s.latency_ms).collect::<Vec<_>>());
        let decode_mean = decode_ms_per_token.as_ref().map(|s| s.mean);
        let tokens_per_s = decode_mean.filter(|&m| m > 0.0).map_or(0.0, |m| 1000.0 / m);
        let config = decoder_config(&spec)?;
        let prefill_ms = steps.first().map_or(0.0, |s| s.latency_ms);
        let peak_allocated = steps.iter().map(|s| s.peak_bytes).max().unwrap_or(baseline);
        let batch = spec.batch as u64;
        // Keys and values each in their own dtype: half the formula's tensors are each.
        let (key_elt, value_elt) = kv_element_bytes;
        // Per layer type: a sliding layer holds its window at most (see KvCache).
        let hold = super::decoder_figures::sliding_hold(g.cache, spec.advanced.cuda_graph);
        // What a full layer holds: every position fed but the last token's (dynamic), the
        // capacity (static).
        let full_positions = match g.cache {
            KvCacheKind::Dynamic => prompt_len as u64 + g.new_tokens as u64 - 1,
            _ => prompt_len as u64 + g.new_tokens as u64,
        };
        let (kv_formula, kv_naive, kv_by_type) = super::decoder_figures::kv_figures(
            &config,
            &kv_per_layer,
            full_positions,
            batch,
            kv_element_bytes,
            hold,
        );
        let prefill_flops = config.forward_flops(batch, prompt_len as u64, prompt_len as u64, 1);
        let mid_context = prompt_len as u64 + g.new_tokens as u64 / 2;
        let decode_flops = match g.cache {
            KvCacheKind::Off => config.forward_flops(batch, mid_context, mid_context, 1),
            _ => config.forward_flops(batch, 1, mid_context, 1),
        };
        let (linear_bytes, other_bytes) = decoder.weights_breakdown();
        let act_bytes = spec.advanced.weights.element().bytes();
        let formula = protocol::weights_formula(&config, quant, act_bytes);
        let split = |s: &GenStep, total: u64| MemorySplit {
            weights_bytes: weights,
            kv_cache_bytes: s.kv_cache_bytes,
            activations_bytes: total.saturating_sub(weights + s.kv_cache_bytes),
        };
        let memory_peak = steps.iter().max_by_key(|s| s.peak_bytes).map(|s| split(s, s.peak_bytes));
        let memory_steady = steps.last().map(|s| split(s, s.allocated_bytes));
        let text = served.as_deref().filter(|d| d.takes_text()).map(|d| {
            use crate::models::decoder::text::{decode, until_eos};
            let cut: Vec<(&[i64], Option<u32>)> = tokens.iter().map(|t| until_eos(d, t)).collect();
            protocol::GeneratedText {
                prompt: g
                    .prompt_text
                    .clone()
                    .unwrap_or_else(|| prompt_tokens.first().and_then(|p| decode(d, p)).unwrap_or_default()),
                generated: cut.iter().map(|(ids, _)| decode(d, ids).unwrap_or_default()).collect(),
                eos_at: match cut.iter().any(|(_, eos)| eos.is_some()) {
                    true => cut.iter().map(|(_, eos)| *eos).collect(),
                    false => vec![],
                },
            }
        });
        let generation = GenerationReport {
            cache: g.cache,
            prompt_len,
            new_tokens: g.new_tokens,
            batch: spec.batch,
            prefill_ms,
            kv_cache_bytes: kv_bytes,
            kv_cache_formula_bytes: kv_formula,
            kv_cache_naive_bytes: kv_naive,
            kv_cache_by_layer_type: kv_by_type,
            moe: super::decoder_figures::moe_figures(decoder, moe_steps),
            kv_cache_tokens: kv_positions as u32,
            kv_cache_element_bytes: key_elt as u32,
            kv_cache_value_element_bytes: value_elt as u32,
            attention,
            prefill_logits: None,
            decode_graph: spec.advanced.cuda_graph,
            weights_source: spec.model.decoder().map(|d| d.provenance()),
            decode_ms_per_token,
            tokens_per_s,
            tokens_per_s_total: tokens_per_s * batch as f64,
            weights_bytes: protocol::decode_weight_bytes(&config, model.resident_bytes(), batch, act_bytes),
            decode_bandwidth_gb_s: None,
            decode_bandwidth_percent: None,
            bandwidth_source: None,
            prefill_flops,
            prefill_tflops: if prefill_ms > 0.0 {
                prefill_flops as f64 / (prefill_ms * 1e9)
            } else {
                0.0
            },
            prefill_percent_of_peak: None,
            decode_flops_per_step: decode_flops,
            decode_intensity_flops_per_byte: 0.0,
            warmup_ms,
            prompt_tokens,
            tokens,
            steps,
            weights_breakdown: Some(WeightsBreakdown {
                linear_bytes,
                other_bytes,
                linear_unquantized_bytes: formula.linear_unquantized_bytes,
            }),
            weights_formula: Some(formula),
            memory_peak,
            memory_steady,
            drift: None,
            text,
            quality: None,
        };
        Ok(Report {
            env: self.machine.stamp(device, threads),
            spec,
            throughput_per_s: generation.tokens_per_s_total,
            latency_ms,
            memory: memory_report(
                &meter,
                baseline,
                peak_allocated,
                peak_reserved,
                after_release,
                meter.device_used(),
                other,
            ),
            output,
            warmup,
            samples,
            trace: vec![],
            flops: None,
            achieved_tflops: None,
            percent_of_peak: None,
            peak_source: None,
            roofline: None,
            memory_breakdown: None,
            generation: Some(generation),
            run_to_run: None,
            compiled: None,
        })
    }
}

impl Lab {
    /// Measures `checked` (a generate run) with the autocast region entered around each
    /// step instead of around the loop: everything else as [`Lab::measure`].
    pub fn measure_autocast_per_step(
        &mut self,
        checked: &CheckedSpec,
        control: &RunControl,
    ) -> Result<Report, RunFailure> {
        self.with_autocast_per_step(|lab| lab.measure(checked, control, &mut |_| {}))
    }

    /// Runs `f` with the autocast region entered around each step. The switch goes back
    /// when `f` returns or panics (a panic caught by the device loop must not leave the
    /// next run measured per step).
    pub(super) fn with_autocast_per_step<R>(&mut self, f: impl FnOnce(&mut Lab) -> R) -> R {
        let mut lab = super::control::Scoped::set(self, |lab| &mut lab.autocast_per_step, true);
        f(&mut lab)
    }
}

/// The config of the spec's decoder.
/// A text prompt's ids (`[BOS] + its UTF-8 bytes` for the byte model, `tokenizer(text)` for a
/// tokenized one); `None` for a prompt of random ids.
pub fn text_prompt(model: protocol::ModelId, g: &protocol::GenerateSpec) -> Result<Option<Vec<i64>>, String> {
    let Some(text) = g.prompt_text.as_ref() else {
        return Ok(None);
    };
    let decoder = model.decoder().ok_or_else(|| format!("{model} is not a decoder served here"))?;
    crate::models::decoder::text::prompt_ids(&decoder, text).map(Some)
}

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

/// Fills the decode bandwidth and the prefill's share of the device's peak, from the
/// device's figures (datasheet or measured; `source` says which). Called after the run,
/// outside its guard: measuring a peak allocates large matrices.
///
/// The prefill's rate is compared with the device's matmul peak only when its linear layers
/// ran that kind of matmul: quantized ones run PyTorch's packed int8/int4 kernels, which the
/// peak (a dense GEMM in the activations' dtype) does not describe. On a CPU without bf16
/// instructions a bf16 GEMM is slower than the packed kernels, and the comparison read
/// "1,600% of peak".
pub fn fill_rates(g: &mut GenerationReport, peak: Option<&protocol::DevicePeak>, quantized: bool) {
    let decode: Vec<&GenStep> = g.steps.iter().filter(|s| s.phase == GenPhase::Decode).collect();
    let time_s: f64 = decode.iter().map(|s| s.latency_ms / 1000.0).sum();
    let bytes: f64 = decode.iter().map(|s| decode_bytes_read(g, s) as f64).sum();
    if time_s > 0.0 {
        let gb_s = bytes / time_s / 1e9;
        g.decode_bandwidth_gb_s = Some(gb_s);
        g.decode_intensity_flops_per_byte =
            g.decode_flops_per_step as f64 / (bytes / decode.len() as f64);
        if let Some(bw) = peak.and_then(|p| p.bandwidth_gb_s) {
            g.decode_bandwidth_percent = Some(100.0 * gb_s / bw);
        }
    }
    if let Some(p) = peak {
        g.bandwidth_source = Some(p.source.clone());
        if p.tflops > 0.0 && !quantized {
            g.prefill_percent_of_peak = Some(100.0 * g.prefill_tflops / p.tflops);
        }
    }
}

/// The bytes decode step `s` reads: every weight once, and the cache positions it attends
/// to (its own new one included): `position + 1` of them, a static cache's allocated
/// capacity beyond them never read; with graph replay the whole capacity, which the masked
/// kernel does read. Without a cache it reads the weights and recomputes the prefix.
///
/// A sliding layer attends to its window at most; a mixture of experts reads, of its
/// experts, only those the step's tokens were routed to (`moe.steps`).
pub fn decode_bytes_read(g: &GenerationReport, s: &GenStep) -> u64 {
    let weights = match &g.moe {
        Some(m) => {
            let read = m.steps.iter().find(|x| x.step == s.step).map_or(m.experts_bytes, |x| x.expert_bytes_read);
            g.weights_bytes.saturating_sub(m.experts_bytes) + read
        }
        None => g.weights_bytes,
    };
    let attended = |held: u64| match (g.cache, g.decode_graph) {
        (KvCacheKind::Off, _) => 0,
        (_, true) => held,
        _ => (s.position as u64 + 1).min(held),
    };
    let split = &g.kv_cache_by_layer_type;
    let sliding = split.iter().any(|t| t.layer_type == protocol::decoder::LayerType::Sliding);
    if !sliding || g.decode_graph {
        let per_position = match g.kv_cache_tokens {
            0 => 0,
            t => g.kv_cache_formula_bytes / t as u64,
        };
        return weights + per_position * attended(g.kv_cache_tokens as u64);
    }
    // Per layer type: a dynamic cache's sliding layers hold window − 1 and attend to one
    // more (the step's own); a static one's hold the window.
    let kv: u64 = split
        .iter()
        .map(|t| {
            let per_position = t.formula_bytes.checked_div(t.positions).unwrap_or(0);
            let window = match (t.layer_type, g.cache) {
                (protocol::decoder::LayerType::Sliding, KvCacheKind::Dynamic) => t.positions + 1,
                (protocol::decoder::LayerType::Sliding, _) => t.positions,
                _ => u64::MAX,
            };
            per_position * attended(window)
        })
        .sum();
    weights + kv
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
