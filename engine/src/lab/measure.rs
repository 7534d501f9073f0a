//! One run's measurement ([`Lab::measure`]), by the method docs/measuring.md ("The method")
//! and docs/ARCHITECTURE.md ("The measurement method") state: build or reuse the model, make
//! the input, synchronise, record the baseline and reset the peaks, warm up (reported apart),
//! time each iteration with synchronisation, then release the output and check that memory
//! returns to the baseline. Also the one timed pass ([`timed_forward`]) that the pitfall
//! experiments reuse; the pass itself is `forward`'s.
//!
//! The baseline is the run's weights and input themselves: what building the model and
//! making the input added to the device's allocated memory. Whatever else the worker holds
//! there (other cached models, the CUDA libraries' workspaces) is reported apart as
//! `other_held_bytes` and left out of every figure, so a spec reads the same whatever ran
//! before it.

use std::time::Instant;

use protocol::{
    DeviceKind, Event, FailureKind, MemoryBreakdown, OutputFacts,
    Report, RunFailure, RunSpec, Sample,
};
use tch::Tensor;

use super::forward::{forward, traced_pass};
use super::{held, make_input, memory_report, Lab, RunControl};
use crate::device::Meter;
use crate::torch_call::catch_torch;
use crate::input::Input;
use crate::models::Model;
use crate::peak::Precision;
use crate::spec::{CheckedSpec, ForwardRun, GenerateRun};
use crate::stats::latency_stats;
use crate::torch_call::{failure, synchronize, torch_failure};

impl Lab {
    /// Measures one run, emitting events as it goes. See the module docs for the method.
    /// Inside a task (see [`Lab::with_task`]) the task's limits apply too.
    pub fn measure(
        &mut self,
        checked: &CheckedSpec,
        control: &RunControl,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Report, RunFailure> {
        let control = match &self.task {
            Some(task) => control.within(task),
            None => control.clone(),
        };
        let device = checked.device();
        let budget = control
            .budget_bytes
            .or_else(|| self.budget(device).map(|b| b.bytes));
        let control = RunControl {
            budget_bytes: budget,
            ..control
        };
        let guard = self.guard(device, &control)?;
        let spec = checked.spec().clone();
        // One start (guard, budget) and one failure wording around either loop, then what
        // each kind of run adds after its guard: a measured peak allocates large matrices,
        // and a generation's drift and quality measure a second model.
        match checked {
            CheckedSpec::Generate(run) => {
                let result = self.generate_guarded(run, &control, emit);
                drop(guard);
                let report = result.map_err(|f| explain(f, &spec, device, budget))?;
                self.finish_generation(run, report, &control, budget, emit)
            }
            CheckedSpec::Forward(run) => {
                let result = self.measure_guarded(run, &control, emit);
                drop(guard);
                let (report, traffic) = result.map_err(|f| explain(f, &spec, device, budget))?;
                Ok(self.finish_forward(run, report, traffic))
            }
        }
    }

    /// A generation's figures after its guard: the device's peak (a generation with
    /// low-precision weights computes in them even without autocast), the drift from the
    /// unquantized model when the run quantized something, and what the spec asked for.
    fn finish_generation(
        &mut self,
        run: &GenerateRun,
        mut report: Report,
        control: &RunControl,
        budget: Option<u64>,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Report, RunFailure> {
        let (spec, g) = (run.spec(), run.generation());
        let precision = match spec.advanced.weights {
            protocol::WeightsDtype::Fp16 | protocol::WeightsDtype::Bf16 => Precision::Half,
            _ => Precision::of(spec.autocast),
        };
        let peak = self.device_peak(run.device(), precision, report.env.threads);
        if let Some(generated) = report.generation.as_ref() {
            if !(g.quant().is_none() && g.kv_dtype.is_default()) {
                match self.drift(run, generated, budget) {
                    Ok(d) => report.generation.as_mut().map(|g| g.drift = Some(d)),
                    Err(f) => {
                        tracing::warn!("the drift from the unquantized model was not measured: {}", f.message);
                        None
                    }
                };
            }
        }
        if g.prefill_logits {
            // Asked for: failing to produce them fails the run (a peer comparison would
            // otherwise read a missing field as a pass).
            if let Some(generated) = report.generation.as_ref() {
                let logits = self.prefill_logits(run, generated)?;
                if let Some(g) = report.generation.as_mut() {
                    g.prefill_logits = Some(logits);
                }
            }
        }
        if g.quality && report.generation.is_some() {
            // Asked for: like the logits, a missing block would read as a pass.
            // Tens of seconds after the last step: each setting is said as it begins.
            let quality = self.quality_reporting(spec, run.device(), control, None, &mut |what, done, total| {
                emit(Event::Progress { what: what.to_string(), done, total })
            })?;
            if let Some(g) = report.generation.as_mut() {
                g.quality = Some(quality);
            }
        }
        if let Some(g) = report.generation.as_mut() {
            super::generate::fill_rates(g, peak.as_ref(), !run.generation().quant().is_none());
        }
        Ok(report)
    }

    /// Forward passes' figures after their guard: FLOPs, the achieved rate and the
    /// roofline against the device's measured peak.
    fn finish_forward(&mut self, run: &ForwardRun, mut report: Report, traffic: Traffic) -> Report {
        let peak = self.device_peak(run.device(), Precision::of(run.spec().autocast), report.env.threads);
        let c = crate::peak::compute(
            &report.trace,
            report.latency_ms.p50,
            traffic.weights,
            traffic.input,
            peak.as_ref(),
        );
        // No count (0) when the steps cannot be looked inside (a TorchScript team model is
        // one opaque step): FLOPs and the roofline are then absent, not zero.
        report.flops = Some(c.flops).filter(|&f| f > 0 && !report.trace.is_empty());
        report.achieved_tflops = report.flops.map(|_| c.achieved_tflops);
        report.percent_of_peak = c.percent_of_peak.filter(|_| report.flops.is_some());
        report.peak_source = peak.map(|p| p.source);
        report.roofline = c.roofline.filter(|_| report.flops.is_some());
        report
    }

    fn measure_guarded(
        &mut self,
        checked: &ForwardRun,
        control: &RunControl,
        emit: &mut dyn FnMut(Event),
    ) -> Result<(Report, Traffic), RunFailure> {
        let spec = checked.spec().clone();
        let device = checked.device();
        let threads = spec.threads.unwrap_or(self.config.threads);
        tch::set_num_threads(threads as i32);
        control.check()?;

        let index =
            self.model_index_as(spec.model, device, checked.input_size(), &spec.advanced)?;
        let autocast = spec.autocast != protocol::Autocast::Off;
        catch_torch(|| self.models[index].lay_out_for_run(autocast))?;
        let weights = self.models[index].held_bytes;
        tch::manual_seed(self.config.seed);
        let meter = self.meter(device);
        // A compiled run's package, loaded before the baseline. Its own copy of the weights
        // (the package's constants) is not in any figure of the run: on the CPU they are
        // tensors held apart ("other"), like another cached model's; on CUDA AOTInductor
        // allocates them with its own cudaMalloc, outside the caching allocator, so
        // `memory_allocated` never sees them, and the driver's growth across the load is
        // reported instead (`CompiledFacts::load_device_bytes`).
        let compiled = match spec.advanced.compiled {
            // A minute or more before the first pass: each part is said as it begins.
            true => Some(super::compiled::prepare_reporting(
                &super::compiled::Job::for_run(&self.models[index], &spec, device, threads),
                self.config.python.as_deref(),
                control,
                &mut |what, done, total| emit(Event::Progress { what: what.to_string(), done, total }),
            )?),
            false => None,
        };
        let resident_before = crate::breakdown::resident_bytes();
        let before_input = held(&meter, device)?;
        let model = &self.models[index];
        // Where the input starts each iteration (device, pageable or pinned host memory) and
        // its dtype and format follow the advanced settings; a host-side input is copied to
        // the device inside every timed pass (see `forward`).
        let input = make_input(
            model,
            spec.batch,
            checked.input_size(),
            &spec.advanced,
            device,
        )?;

        synchronize(device)?;
        let at_baseline = meter.read().map_err(torch_failure)?.allocated;
        // Weights + input themselves; what else the device holds is reported apart and taken
        // out of every figure below.
        let baseline = weights + at_baseline.saturating_sub(before_input);
        let other = at_baseline.saturating_sub(baseline);
        let own = |bytes: u64| bytes.saturating_sub(other);
        meter.reset_peak().map_err(torch_failure)?;
        emit(Event::started(self.machine.stamp(device, threads).device_name, baseline, meter.source(), checked.warmup() + checked.iters()));

        // On CUDA the budget is checked after each pass (the CPU's is checked at every
        // allocation by the guard).
        let limit = control.budget_bytes.filter(|_| device == DeviceKind::Cuda);
        // The pass the run times: the model, or its compiled package on the same input
        // under the same grad mode.
        let run_pass = || match &compiled {
            Some(c) => c.forward(&input, &spec, device),
            None => forward(model, &input, &spec, device),
        };
        if let Some(c) = &compiled {
            check_compiled_input(c, &input)?;
        }
        let mut warmup = Vec::with_capacity(checked.warmup() as usize);
        for i in 0..checked.warmup() {
            control.check()?;
            let (sample, out, _) = timed_pass(run_pass, &spec, device, &meter, i, limit)?;
            drop(out);
            let sample = Sample {
                allocated_bytes: own(sample.allocated_bytes),
                peak_bytes: own(sample.peak_bytes),
                ..sample
            };
            emit(Event::Warmup {
                sample: sample.clone(),
            });
            warmup.push(sample);
        }

        // With CUDA graph replay the timed passes relaunch one pass captured here, after
        // the warm-up (see `super::cuda_graph`).
        let captured = match spec.advanced.cuda_graph {
            true => Some(super::cuda_graph::capture(model, &input, &spec, device)?),
            false => None,
        };

        // Peaks count from here: the statistics describe the steady state only. Each
        // iteration resets the counters and reports its own peak; the run's peak is the
        // highest of them.
        let mut samples = Vec::with_capacity(checked.iters() as usize);
        let mut peak_reserved: Option<u64> = None;
        let mut last: Option<Tensor> = None;
        for i in 0..checked.iters() {
            control.check()?;
            // The previous output (and its graph) must be gone before the next forward pass,
            // or the peak would count two iterations at once.
            drop(last.take());
            let pass = || match &captured {
                Some(graph) => graph.replay(),
                None => run_pass(),
            };
            let (sample, out, reserved) = timed_pass(pass, &spec, device, &meter, i, limit)?;
            peak_reserved = peak_reserved.max(reserved);
            let sample = Sample {
                allocated_bytes: own(sample.allocated_bytes),
                peak_bytes: own(sample.peak_bytes),
                ..sample
            };
            emit(Event::Sample {
                sample: sample.clone(),
            });
            samples.push(sample);
            last = Some(out);
        }
        let peak_allocated = samples
            .iter()
            .map(|s| s.peak_bytes)
            .max()
            .unwrap_or(baseline);
        let device_used = meter.device_used();
        let output = last
            .as_ref()
            .map(output_facts)
            .unwrap_or_else(|| OutputFacts {
                dtype: String::new(),
                shape: vec![],
                is_inference: false,
                requires_grad: false,
            });
        // A compiled run: the eager model's passes on the same input, timed the same way
        // after the compiled ones, and its output against the compiled output.
        let compiled_facts = match (&compiled, &last) {
            (Some(c), Some(out)) => {
                let mut eager = eager_beside(c, out, model, &input, &spec, device, &meter, checked, control, limit, &samples)?;
                // As the compiled passes' samples are counted: other cached models left out,
                // above the weights and the input.
                eager.eager_peak_above_baseline_bytes = own(eager.eager_peak_above_baseline_bytes).saturating_sub(baseline);
                Some(eager)
            }
            _ => None,
        };
        drop(last);
        // The graph's private pool goes back to the allocator before the checks below.
        drop(captured);
        drop(compiled);

        // One traced pass after the timed ones: never in the statistics above. A compiled
        // model is one opaque call: its eager twin's boundaries would not be its own.
        let trace = match spec.advanced.compiled {
            true => vec![],
            false => traced_pass(model, &input, &spec, device, &meter, at_baseline)?,
        };
        let memory_breakdown =
            breakdown(&meter, device, resident_before, baseline, other, &samples)?;
        let traffic = Traffic {
            weights: model.resident_bytes(),
            input: input.bytes(),
        };

        synchronize(device)?;
        let after_release = own(meter.read().map_err(torch_failure)?.allocated);
        if after_release > baseline {
            tracing::warn!(
                leaked = after_release - baseline,
                "memory did not return to the baseline after a run"
            );
        }

        let latencies: Vec<f64> = samples.iter().map(|s| s.latency_ms).collect();
        let latency_ms = latency_stats(&latencies)
            .ok_or_else(|| failure(FailureKind::Internal, "no timed samples"))?;
        let throughput_per_s = if latency_ms.mean > 0.0 {
            spec.batch as f64 * 1000.0 / latency_ms.mean
        } else {
            0.0
        };
        let report = Report {
            env: self.machine.stamp(device, threads),
            spec,
            latency_ms,
            throughput_per_s,
            memory: memory_report(
                &meter,
                baseline,
                peak_allocated,
                peak_reserved,
                after_release,
                device_used,
                other,
            ),
            output,
            warmup,
            samples,
            trace,
            flops: None,
            achieved_tflops: None,
            percent_of_peak: None,
            peak_source: None,
            roofline: None,
            memory_breakdown,
            generation: None,
            run_to_run: None,
            compiled: compiled_facts,
        };
        Ok((report, traffic))
    }
}

/// The package checks none of its inputs: a batch outside the range it was exported for is
/// refused here, before it reaches it.
fn check_compiled_input(c: &super::compiled::Compiled, input: &crate::input::Input) -> Result<(), RunFailure> {
    let batch = input.first().size().first().copied().unwrap_or(0);
    if batch < c.batch_min as i64 || batch > c.batch_max as i64 {
        return Err(failure(
            FailureKind::Invalid,
            format!("batch {batch} is outside {}..={}, the range the compiled package was exported for", c.batch_min, c.batch_max),
        ));
    }
    Ok(())
}

/// The eager model beside a compiled run: as many warm-up and timed passes as the compiled
/// model had, on the same input, the output compared with the compiled one.
#[allow(clippy::too_many_arguments)]
fn eager_beside(
    c: &super::compiled::Compiled,
    compiled_out: &Tensor,
    model: &crate::models::Model,
    input: &crate::input::Input,
    spec: &RunSpec,
    device: DeviceKind,
    meter: &crate::device::Meter,
    checked: &ForwardRun,
    control: &RunControl,
    limit: Option<u64>,
    compiled_samples: &[Sample],
) -> Result<protocol::CompiledFacts, RunFailure> {
    for i in 0..checked.warmup() {
        control.check()?;
        drop(timed_forward(model, input, spec, device, meter, i, limit)?);
    }
    let mut eager = Vec::with_capacity(checked.iters() as usize);
    let mut peak = 0u64;
    let mut out = None;
    for i in 0..checked.iters() {
        control.check()?;
        drop(out.take());
        let (sample, o, _) = timed_forward(model, input, spec, device, meter, i, limit)?;
        eager.push(sample.latency_ms);
        peak = peak.max(sample.peak_bytes);
        out = Some(o);
    }
    let eager_out = out.ok_or_else(|| failure(FailureKind::Internal, "no eager pass"))?;
    let (max_abs_diff, bitwise_equal) = catch_torch(|| {
        let a = compiled_out.to_kind(tch::Kind::Double);
        let b = eager_out.to_kind(tch::Kind::Double);
        let same_shape = compiled_out.size() == eager_out.size();
        let diff = if same_shape { (&a - &b).abs().max().double_value(&[]) } else { f64::INFINITY };
        (diff, same_shape && compiled_out.equal(&eager_out))
    })?;
    let median = |xs: &[f64]| latency_stats(xs).map_or(0.0, |s| s.p50);
    let eager_p50_ms = median(&eager);
    let compiled_p50 = median(&compiled_samples.iter().map(|s| s.latency_ms).collect::<Vec<_>>());
    let one_time = c.export_ms + c.compile_ms + c.load_ms;
    Ok(protocol::CompiledFacts {
        package: c.file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        package_bytes: c.package_bytes,
        cached: c.cached,
        export_ms: c.export_ms,
        compile_ms: c.compile_ms,
        build_ms: c.build_ms,
        subprocess_ms: c.subprocess_ms,
        load_ms: c.load_ms,
        batch_min: c.batch_min,
        batch_max: c.batch_max,
        eager_p50_ms,
        eager_iters: eager.len() as u32,
        // The caller takes out what other models hold and the baseline.
        eager_peak_above_baseline_bytes: peak,
        max_abs_diff,
        bitwise_equal,
        break_even_passes: (eager_p50_ms > compiled_p50).then(|| one_time / (eager_p50_ms - compiled_p50)),
        torch_version: c.torch_version.clone(),
        threads: c.threads,
        load_device_bytes: c.load_device_bytes,
    })
}

/// Bytes a forward pass reads besides its activations (for the roofline's estimate).
struct Traffic {
    weights: u64,
    input: u64,
}

/// The device's memory, part by part, right after the traced pass (weights and input
/// still alive). See `crate::breakdown`.
fn breakdown(
    meter: &Meter<'_>,
    device: DeviceKind,
    resident_before: Option<u64>,
    baseline: u64,
    other: u64,
    samples: &[Sample],
) -> Result<Option<MemoryBreakdown>, RunFailure> {
    synchronize(device)?;
    let reading = meter.read().map_err(torch_failure)?;
    Ok(match device {
        DeviceKind::Cpu => crate::breakdown::resident_bytes()
            .map(|after| crate::breakdown::cpu(resident_before, after, baseline, other)),
        DeviceKind::Cuda => meter.device_used().map(|driver_used| {
            let peak = samples
                .iter()
                .map(|s| s.peak_bytes)
                .max()
                .unwrap_or(baseline);
            crate::breakdown::cuda(&crate::breakdown::CudaReadings {
                driver_used,
                this_process: crate::breakdown::nvidia_smi_process_used(),
                reserved: reading.reserved.unwrap_or(reading.allocated),
                allocated: reading.allocated,
                run_tensors: baseline,
                peak_activations: peak.saturating_sub(baseline),
            })
        }),
    })
}

/// Adds the run's setting to a failure that stopped it at the budget.
fn explain(f: RunFailure, spec: &RunSpec, device: DeviceKind, budget: Option<u64>) -> RunFailure {
    if f.kind != FailureKind::OutOfMemory || f.message.contains(&format!("batch {}", spec.batch)) {
        return f;
    }
    let budget = budget
        .map(|b| format!(" (this server's budget is {})", protocol::format_bytes(b)))
        .unwrap_or_default();
    failure(
        FailureKind::OutOfMemory,
        format!(
            "out of memory on {}{budget}: batch {}, {}: {}",
            device.as_str(),
            spec.batch,
            spec.label(),
            f.message
        ),
    )
}

/// One forward pass under the spec's settings, timed with device synchronisation. Returns
/// the sample, the output, and the peak reserved bytes during the pass (CUDA only).
pub fn timed_forward(
    model: &Model,
    input: &Input,
    spec: &RunSpec,
    device: DeviceKind,
    meter: &Meter<'_>,
    iteration: u32,
    limit: Option<u64>,
) -> Result<(Sample, Tensor, Option<u64>), RunFailure> {
    timed_pass(|| forward(model, input, spec, device), spec, device, meter, iteration, limit)
}

/// [`timed_forward`] for any pass (an eager forward, a CUDA graph's replay).
fn timed_pass(
    pass: impl FnOnce() -> Result<Tensor, RunFailure>,
    spec: &RunSpec,
    device: DeviceKind,
    meter: &Meter<'_>,
    iteration: u32,
    limit: Option<u64>,
) -> Result<(Sample, Tensor, Option<u64>), RunFailure> {
    meter.reset_peak().map_err(torch_failure)?;
    let start = Instant::now();
    let out = pass()?;
    synchronize(device)?;
    let latency_ms = start.elapsed().as_secs_f64() * 1000.0;
    let reading = meter.read().map_err(torch_failure)?;
    if let Some(limit) = limit {
        if reading.peak_allocated > limit {
            return Err(failure(
                FailureKind::OutOfMemory,
                format!(
                    "out of memory: this run needed {} of {} memory, above the server's limit of {} (batch {}, {})",
                    protocol::format_bytes(reading.peak_allocated),
                    device.as_str(),
                    protocol::format_bytes(limit),
                    spec.batch,
                    spec.label()
                ),
            ));
        }
    }
    let sample = Sample {
        iteration,
        latency_ms,
        allocated_bytes: reading.allocated,
        peak_bytes: reading.peak_allocated,
        reserved_bytes: reading.reserved,
    };
    Ok((sample, out, reading.peak_reserved))
}

fn output_facts(t: &Tensor) -> OutputFacts {
    OutputFacts {
        dtype: format!("{:?}", t.kind()),
        shape: t.size(),
        is_inference: t.is_inference(),
        requires_grad: t.requires_grad(),
    }
}
