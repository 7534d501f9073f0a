//! The Lab's side of a generate run: [`Lab::generate_guarded`] (inside the run's guard, as
//! [`Lab::measure`] calls it) and the autocast-per-step switch the autocast card measures.

use super::*;

impl Lab {
    /// Measures one generate run, emitting `started`, one `warmup`, then one `step` per
    /// step. Called by [`Lab::measure`] inside the run's guard.
    pub(in crate::lab) fn generate_guarded(
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
        let hold = crate::lab::decoder_figures::sliding_hold(g.cache, spec.advanced.cuda_graph);
        // What a full layer holds: every position fed but the last token's (dynamic), the
        // capacity (static).
        let full_positions = match g.cache {
            KvCacheKind::Dynamic => prompt_len as u64 + g.new_tokens as u64 - 1,
            _ => prompt_len as u64 + g.new_tokens as u64,
        };
        let (kv_formula, kv_naive, kv_by_type) = crate::lab::decoder_figures::kv_figures(
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
            moe: crate::lab::decoder_figures::moe_figures(decoder, moe_steps),
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
    pub(in crate::lab) fn with_autocast_per_step<R>(&mut self, f: impl FnOnce(&mut Lab) -> R) -> R {
        let mut lab = crate::lab::control::Scoped::set(self, |lab| &mut lab.autocast_per_step, true);
        f(&mut lab)
    }
}
