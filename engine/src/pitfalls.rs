//! The pitfall experiments: one live experiment per lesson of DESIGN.md's catalogue, each
//! yielding figures and a verdict computed from them by a rule written down next to it
//! (`threshold`), never tuned after the fact. Everything runs on the device thread, on the
//! [`Lab`] (see [`crate::Worker::call`]).

use std::time::Instant;

use protocol::{
    Autocast, ChartKind, DeviceChoice, DeviceKind, Event, FailureKind, Figure, GradMode, Limits,
    ModelId, PitfallInfo, PitfallOptions, PitfallReport, Report, RunFailure, RunSpec, Series,
    Table, Verdict,
};
use tch::{Kind, Tensor};

use crate::lab::{catch_torch, failure, forward, synchronize, tch_device, Lab, RunControl};
use crate::models::Model;
use crate::spec::check_spec;
use crate::torch_ext::{self, InferenceModeGuard};

const MIB: f64 = 1024.0 * 1024.0;

struct Card {
    id: &'static str,
    title: &'static str,
    claim: &'static str,
    why: &'static str,
    source: &'static str,
    pitfall: &'static str,
    fix: &'static str,
    threshold: &'static str,
}

/// The catalogue, in the order the guided tour walks it.
const CARDS: [Card; 13] = [
    Card {
        id: "eval-not-nograd",
        title: "eval() does not switch autograd off",
        claim: "model.eval() does not switch autograd off: eval+grad keeps the activations that eval+no_grad frees.",
        why: "eval() only sets `training = False` on every module (Dropout, BatchNorm change behaviour). Whether ops record a graph is decided by grad mode, which eval() never touches.",
        source: "https://pytorch.org/docs/stable/notes/autograd.html#locally-disabling-gradient-computation",
        pitfall: "model.eval()\ny = model(x)  # graph recorded, activations kept",
        fix: "model.eval()\nwith torch.no_grad():\n    y = model(x)",
        threshold: "confirmed when eval+grad's peak above baseline exceeds eval+no_grad's by more than 20% (autograd must keep at least one activation per layer; 20% is far above run-to-run variation, which is zero for memory)",
    },
    Card {
        id: "nograd-not-eval",
        title: "no_grad() does not switch Dropout and BatchNorm to inference",
        claim: "torch.no_grad() leaves Dropout and BatchNorm in training behaviour: outputs are random, depend on batch-mates, and BatchNorm's running statistics change during \"inference\".",
        why: "no_grad only stops graph recording. Dropout and BatchNorm read `self.training`, which only train()/eval() set.",
        source: "https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.eval",
        pitfall: "with torch.no_grad():\n    y = model(x)  # model still in train mode",
        fix: "model.eval()\nwith torch.no_grad():\n    y = model(x)",
        threshold: "confirmed when, in train mode under no_grad, the same input twice differs by more than 1e-6 (Dropout), one sample's output changes with its batch-mates by more than 1e-6 (BatchNorm), and a running mean changes; float32 rounding alone stays far below 1e-6 for identical computations",
    },
    Card {
        id: "inference-vs-nograd",
        title: "inference_mode saves CPU overhead, not memory",
        claim: "torch.inference_mode() skips version counters and view tracking: it saves per-op CPU overhead, not memory, and its outputs cannot be saved for backward.",
        why: "Both modes record no graph, so both free activations as soon as they are used. inference_mode additionally creates 'inference tensors' without version counters; autograd refuses to save them later.",
        source: "https://pytorch.org/docs/stable/generated/torch.inference_mode.html",
        pitfall: "with torch.inference_mode():\n    feats = backbone(x)\nloss = head(feats).sum()  # RuntimeError: Inference tensors cannot be saved for backward",
        fix: "with torch.inference_mode():\n    feats = backbone(x)\nloss = head(feats.clone()).sum()  # clone outside the mode",
        threshold: "confirmed when inference_mode's peak memory is within 5% of no_grad's on every model tried, saving an inference tensor for backward raises libtorch's error, and the clone() fix works",
    },
    Card {
        id: "autocast",
        title: "autocast lowers the math, not the weights",
        claim: "Autocast runs matmul/conv/linear in fp16 or bf16 and keeps the fp32 weights (caching cast copies), at a small numerical cost.",
        why: "Autocast casts inputs of eligible ops on the fly; reductions, softmax and norms stay fp32. The weights stay fp32; their low-precision copies are cached while the outermost region is open. CPUs without fp16/bf16 units emulate, and get slower.",
        source: "https://pytorch.org/docs/stable/amp.html",
        pitfall: "model.half()  # weights lose precision for good",
        fix: "with torch.autocast(device_type=\"cuda\", dtype=torch.float16):\n    y = model(x)",
        threshold: "confirmed when every autocast output has the low-precision dtype, the weights are still float32 afterwards, and the output differs from fp32 by a non-zero amount below 10% of the fp32 output's largest magnitude",
    },
    Card {
        id: "batch-scaling",
        title: "Memory grows with the batch; grad mode moves the ceiling",
        claim: "Activation memory grows linearly with the batch, per-sample latency falls then flattens, and the largest batch that fits a memory budget is much smaller with grad enabled.",
        why: "Each sample brings its own activations; with grad they are all kept until the output is freed, without grad only about one layer's worth is alive at a time.",
        source: "https://pytorch.org/docs/stable/notes/cuda.html#memory-management",
        pitfall: "y = model(big_batch)  # OOM: autograd kept every activation",
        fix: "with torch.no_grad():\n    y = model(big_batch)",
        threshold: "confirmed when the peak above baseline is linear in the batch for both modes (R² > 0.95 over the measured powers of two) and the largest batch within the budget is larger under no_grad than with grad",
    },
    Card {
        id: "allocated-vs-reserved",
        title: "Reserved is not leaked",
        claim: "memory_reserved includes the caching allocator's pool: after the tensors are freed, allocated returns to baseline while reserved stays high — not a leak.",
        why: "PyTorch's CUDA caching allocator keeps freed blocks for reuse instead of returning them to the driver; nvidia-smi shows reserved plus the CUDA context.",
        source: "https://pytorch.org/docs/stable/notes/cuda.html#memory-management",
        pitfall: "print(torch.cuda.memory_reserved())  # \"it leaks!\"",
        fix: "print(torch.cuda.memory_allocated())  # what tensors hold",
        threshold: "CUDA only. Confirmed when, after the output is freed, allocated equals the baseline and reserved exceeds allocated",
    },
    Card {
        id: "empty-cache",
        title: "empty_cache() frees nothing you hold, and costs time",
        claim: "torch.cuda.empty_cache() frees no referenced tensor and makes the next allocations slow: per-request latency gets jittery.",
        why: "It only returns unused cached blocks to the driver; the next request must cudaMalloc them again.",
        source: "https://pytorch.org/docs/stable/generated/torch.cuda.empty_cache.html",
        pitfall: "y = model(x); torch.cuda.empty_cache()  # after every request",
        fix: "y = model(x)  # let the caching allocator reuse its blocks",
        threshold: "CUDA only. Confirmed when allocated memory is unchanged by empty_cache and p99 latency with it exceeds p99 without it",
    },
    Card {
        id: "output-lifetime",
        title: "Outputs kept on the device pile up — with their graph, fast",
        claim: "Outputs kept across requests grow memory request by request; kept with grad they keep their whole graph and grow much faster.",
        why: "A tensor that requires grad references its graph, which holds every saved activation of the forward pass that made it.",
        source: "https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory",
        pitfall: "results.append(model(x))  # grad on: graph kept alive",
        fix: "with torch.no_grad():\n    results.append(model(x).cpu())",
        threshold: "confirmed when, after one warm-up request, allocated memory grows every request for kept outputs, grows faster (more than 2× per request) when kept with grad, and does not grow at all when outputs are dropped",
    },
    Card {
        id: "warm-up",
        title: "The first iterations are not representative",
        claim: "The first iterations pay for allocation, kernel loading and autotuning; timing them skews the statistics.",
        why: "The first pass with a new model and input shape grows the allocator's pools, creates oneDNN/cuDNN primitives for that shape and (on GPU) loads kernels; later passes reuse them.",
        source: "https://pytorch.org/tutorials/recipes/recipes/benchmark.html",
        pitfall: "t0 = time.time(); model(x); print(time.time() - t0)",
        fix: "for _ in range(3): model(x)  # warm up, then time many runs",
        threshold: "confirmed when the first iteration of a freshly built model on an input shape this process has not run takes more than 1.5× the median of iterations 6–10 (run-to-run noise is well under 50%)",
    },
    Card {
        id: "sync-timing",
        title: "CUDA is asynchronous: synchronise before you stop the clock",
        claim: "Without synchronisation, a timer around a CUDA forward pass measures kernel launches, not the work.",
        why: "CUDA ops are queued and return immediately; only a synchronisation (or a value read back) waits for them.",
        source: "https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution",
        pitfall: "t0 = time.time(); y = model(x); dt = time.time() - t0",
        fix: "t0 = time.time(); y = model(x); torch.cuda.synchronize(); dt = time.time() - t0",
        threshold: "CUDA: confirmed when the naive p50 is below half the synchronised p50. On a CPU ops are synchronous: not_applicable, after checking that both timers agree within 25%",
    },
    Card {
        id: "item-sync",
        title: ".item() every batch stalls the GPU pipeline",
        claim: "Calling .item() on every batch of a validation loop forces a device sync each time; accumulating on the device and reading once is faster.",
        why: ".item() copies a value to the host, which must wait for all queued work; the CPU cannot queue the next batch meanwhile.",
        source: "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization",
        pitfall: "total += loss.item()  # every batch",
        fix: "total += loss.detach()  # on the device; total.item() once",
        threshold: "CUDA: confirmed when the per-batch .item() loop is more than 5% slower. On a CPU there is no device to wait for: not_applicable, with both loop times reported",
    },
    Card {
        id: "freeze-vs-nograd",
        title: "Freezing all parameters builds no graph; partial freezing is in between",
        claim: "requires_grad_(False) on every parameter records no graph (memory like no_grad); freezing only the backbone keeps activations for the unfrozen part.",
        why: "Autograd records an op only when one of its inputs requires grad; with every weight frozen and an input that does not require grad, nothing does.",
        source: "https://pytorch.org/docs/stable/notes/autograd.html#setting-requires-grad",
        pitfall: "for p in backbone.parameters(): p.requires_grad_(False)\ny = model(x)  # still a graph through the head",
        fix: "with torch.no_grad():\n    y = model(x)",
        threshold: "confirmed when all-frozen's peak is within 10% of no_grad's, and the partly frozen model's peak lies strictly between no_grad's and full grad's",
    },
    Card {
        id: "seed-table",
        title: "The classic table: which setting saves what",
        claim: "train, eval only, no_grad only, eval+no_grad and eval+no_grad+fp16 for ResNet-50 batch 32: eval alone saves no memory, no_grad saves most of it.",
        why: "The five rows separate the two switches people conflate (eval and grad mode) and add mixed precision.",
        source: "https://pytorch.org/docs/stable/notes/autograd.html#inference-mode",
        pitfall: "model.eval()  # \"inference mode on\"",
        fix: "model.eval()\nwith torch.inference_mode(), torch.autocast(\"cuda\", dtype=torch.float16):\n    y = model(x)",
        threshold: "confirmed when eval-only's peak is within 10% of train's and eval+no_grad's is below half of train's",
    },
];

/// Every card, in tour order.
pub fn catalogue() -> Vec<PitfallInfo> {
    CARDS
        .iter()
        .map(|c| PitfallInfo {
            id: c.id.into(),
            title: c.title.into(),
            claim: c.claim.into(),
            why: c.why.into(),
            source: c.source.into(),
            python_pitfall: c.pitfall.into(),
            python_fix: c.fix.into(),
            threshold: c.threshold.into(),
        })
        .collect()
}

/// Whether `id` names a card.
pub fn exists(id: &str) -> bool {
    CARDS.iter().any(|c| c.id == id)
}

/// What one experiment produced, before the common fields are added.
struct Outcome {
    table: Option<Table>,
    verdict: Verdict,
    reason: String,
    figures: Vec<Figure>,
    chart: ChartKind,
    series: Vec<Series>,
    notes: Vec<String>,
}

fn fig(name: &str, value: f64, unit: &str) -> Figure {
    Figure {
        name: name.into(),
        value,
        unit: unit.into(),
    }
}

fn series(name: &str, unit: &str, x: Vec<String>, y: Vec<f64>) -> Series {
    Series {
        name: name.into(),
        unit: unit.into(),
        x,
        y: y.into_iter().map(Some).collect(),
    }
}

fn mib(b: u64) -> f64 {
    (b as f64 / MIB * 1000.0).round() / 1000.0
}

/// Settings resolved for this device: small and quick on a CPU, full size on a GPU.
struct Ctx {
    device: DeviceKind,
    opts: PitfallOptions,
}

impl Ctx {
    fn cuda(&self) -> bool {
        self.device == DeviceKind::Cuda
    }

    /// A spec on this device; image models get small images on the CPU so cards run in seconds.
    fn spec(&self, model: ModelId, batch: u32, eval: bool, grad: GradMode) -> RunSpec {
        let image = matches!(
            model,
            ModelId::Resnet18 | ModelId::Resnet50 | ModelId::MobilenetV2
        );
        RunSpec {
            model,
            device: if self.cuda() {
                DeviceChoice::Cuda
            } else {
                DeviceChoice::Cpu
            },
            batch,
            input_size: (image && !self.cuda()).then_some(96),
            eval,
            grad,
            autocast: Autocast::Off,
            warmup: if self.cuda() { 3 } else { 1 },
            iters: if self.cuda() { 10 } else { 3 },
            threads: None,
        }
    }

    fn model(&self, default: ModelId) -> ModelId {
        self.opts.model.unwrap_or(default)
    }

    fn batch(&self, cpu: u32, cuda: u32) -> u32 {
        self.opts
            .batch
            .unwrap_or(if self.cuda() { cuda } else { cpu })
    }
}

/// The model, batch and spec an experiment runs, with its input size resolved.
struct Setup {
    model: ModelId,
    batch: u32,
    size: u32,
    spec: RunSpec,
}

impl Setup {
    fn new(
        ctx: &Ctx,
        default: ModelId,
        (cpu_batch, cuda_batch): (u32, u32),
        grad: GradMode,
    ) -> Setup {
        let model = ctx.model(default);
        let batch = ctx.batch(cpu_batch, cuda_batch);
        let spec = ctx.spec(model, batch, true, grad);
        Setup {
            model,
            batch,
            size: spec.resolved_input_size(),
            spec,
        }
    }

    /// The lab's cached model for this setup (its index in the lab).
    fn cached(&self, lab: &mut Lab, ctx: &Ctx) -> Result<usize, RunFailure> {
        lab.model_index(self.model, ctx.device, self.size)
    }

    /// A freshly built model, for experiments that change it (or need it cold).
    fn fresh(&self, lab: &Lab, ctx: &Ctx) -> Result<Model, RunFailure> {
        tch::manual_seed(lab.config().seed);
        catch_torch(|| Model::build(self.model, tch_device(ctx.device), self.size))
    }

    fn input(&self, model: &Model, ctx: &Ctx) -> Result<Tensor, RunFailure> {
        catch_torch(|| model.input(self.batch, self.size, tch_device(ctx.device)))
    }
}

fn measure(lab: &mut Lab, spec: RunSpec) -> Result<Report, RunFailure> {
    let limits = Limits {
        max_batch: u32::MAX,
        ..Limits::default()
    };
    let checked = check_spec(spec, &limits, lab.machine())
        .map_err(|e| failure(FailureKind::Invalid, e.to_string()))?;
    let result = lab.measure(&checked, &RunControl::default(), &mut |_: Event| {});
    if result.is_err() {
        lab.recover(checked.device());
    }
    result
}

/// Runs the experiment `id` on the lab's device.
pub fn run(lab: &mut Lab, id: &str, opts: PitfallOptions) -> Result<PitfallReport, RunFailure> {
    let card = CARDS.iter().find(|c| c.id == id).ok_or_else(|| {
        let known: Vec<_> = CARDS.iter().map(|c| c.id).collect();
        failure(
            FailureKind::Invalid,
            format!("unknown pitfall `{id}`; known: {}", known.join(", ")),
        )
    })?;
    let device = match opts.device {
        DeviceChoice::Cpu => DeviceKind::Cpu,
        DeviceChoice::Cuda if lab.machine().has_cuda() => DeviceKind::Cuda,
        DeviceChoice::Cuda => {
            return Err(failure(
                FailureKind::Invalid,
                "this server has no CUDA device",
            ))
        }
        DeviceChoice::Auto if lab.machine().has_cuda() => DeviceKind::Cuda,
        DeviceChoice::Auto => DeviceKind::Cpu,
    };
    let ctx = Ctx { device, opts };
    let threads = lab.config().threads;
    tch::set_num_threads(threads as i32);
    let outcome = match card.id {
        "eval-not-nograd" => eval_not_nograd(lab, &ctx),
        "nograd-not-eval" => nograd_not_eval(lab, &ctx),
        "inference-vs-nograd" => inference_vs_nograd(lab, &ctx),
        "autocast" => autocast(lab, &ctx),
        "batch-scaling" => batch_scaling(lab, &ctx),
        "allocated-vs-reserved" => allocated_vs_reserved(lab, &ctx),
        "empty-cache" => empty_cache(lab, &ctx),
        "output-lifetime" => output_lifetime(lab, &ctx),
        "warm-up" => warm_up(lab, &ctx),
        "sync-timing" => sync_timing(lab, &ctx),
        "item-sync" => item_sync(lab, &ctx),
        "freeze-vs-nograd" => freeze_vs_nograd(lab, &ctx),
        "seed-table" => seed_table(lab, &ctx),
        _ => unreachable!("every card has an experiment"),
    }?;
    Ok(PitfallReport {
        id: card.id.into(),
        claim: card.claim.into(),
        verdict: outcome.verdict,
        reason: outcome.reason,
        threshold: card.threshold.into(),
        figures: outcome.figures,
        chart: outcome.chart,
        series: outcome.series,
        notes: outcome.notes,
        table: outcome.table,
        env: lab.machine().stamp(device, threads),
        record_id: None,
    })
}

fn not_on_cpu(what: &str) -> Outcome {
    Outcome {
        table: None,
        verdict: Verdict::NotApplicable,
        reason: format!("{what} Run this card on a server with a GPU to see the effect."),
        figures: vec![],
        chart: ChartKind::Bar,
        series: vec![],
        notes: vec![],
    }
}

fn eval_not_nograd(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let model = ctx.model(ModelId::Resnet18);
    let b = ctx.batch(8, 64);
    let grad = measure(lab, ctx.spec(model, b, true, GradMode::Enabled))?;
    let nograd = measure(lab, ctx.spec(model, b, true, GradMode::NoGrad))?;
    let (g, n) = (
        grad.memory.peak_above_baseline_bytes,
        nograd.memory.peak_above_baseline_bytes,
    );
    let ratio = g as f64 / n.max(1) as f64;
    let verdict = if ratio > 1.2 {
        Verdict::Confirmed
    } else {
        Verdict::Refuted
    };
    Ok(Outcome {
        table: None,
        verdict,
        reason: format!(
            "eval()+grad peaked {:.1} MiB above baseline, eval()+no_grad {:.1} MiB: {ratio:.2}× ({}).",
            mib(g),
            mib(n),
            if verdict == Verdict::Confirmed { "eval() alone left autograd on" } else { "no meaningful difference here" }
        ),
        figures: vec![
            fig("eval+grad peak above baseline", g as f64, "bytes"),
            fig("eval+no_grad peak above baseline", n as f64, "bytes"),
            fig("memory ratio grad / no_grad", ratio, "ratio"),
            fig("eval+grad p50", grad.latency_ms.p50, "ms"),
            fig("eval+no_grad p50", nograd.latency_ms.p50, "ms"),
        ],
        chart: ChartKind::Bar,
        series: vec![
            series("peak above baseline (MiB)", "MiB", vec!["eval + grad".into(), "eval + no_grad".into()], vec![mib(g), mib(n)]),
            series(
                "p50 latency (ms)",
                "ms",
                vec!["eval + grad".into(), "eval + no_grad".into()],
                vec![grad.latency_ms.p50, nograd.latency_ms.p50],
            ),
        ],
        notes: vec![format!("{} batch {b} on {}", model.display_name(), grad.env.device_name)],
    })
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a.to_kind(Kind::Float) - b.to_kind(Kind::Float))
        .abs()
        .max()
        .double_value(&[])
}

fn nograd_not_eval(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let device = tch_device(ctx.device);
    let size = ModelId::TinyMlp.input().default;
    // A fresh model: train-mode passes change BatchNorm's running statistics, and the lab's
    // cached models must stay as other runs left them.
    tch::manual_seed(lab.config().seed);
    let model = catch_torch(|| Model::build(ModelId::TinyMlp, device, size))?;
    let x = Tensor::randn([16, size as i64], (Kind::Float, device));
    let mates = x.copy();
    let _ = mates
        .narrow(0, 1, 15)
        .copy_(&Tensor::randn([15, size as i64], (Kind::Float, device)));
    let spec = |eval| RunSpec {
        eval,
        grad: GradMode::NoGrad,
        ..RunSpec::default()
    };
    let run = |x: &Tensor, eval: bool| forward(&model, x, &spec(eval), ctx.device);

    let dropout_train = max_abs_diff(&run(&x, false)?, &run(&x, false)?);
    let dropout_eval = max_abs_diff(&run(&x, true)?, &run(&x, true)?);
    // Batch-mates: compare sample 0 with Dropout out of the way (the same seed for both
    // passes), so only BatchNorm's batch statistics can make them differ.
    let first = |x: &Tensor, eval: bool| -> Result<Tensor, RunFailure> {
        tch::manual_seed(7);
        Ok(run(x, eval)?.get(0))
    };
    let mates_train = max_abs_diff(&first(&x, false)?, &first(&mates, false)?);
    let mates_eval = max_abs_diff(&first(&x, true)?, &first(&mates, true)?);
    let running_mean = model
        .vs
        .variables()
        .into_iter()
        .find(|(n, _)| n.ends_with("running_mean"))
        .map(|(_, t)| t)
        .ok_or_else(|| {
            failure(
                FailureKind::Internal,
                "the MLP has no BatchNorm running mean",
            )
        })?;
    let before = running_mean.copy();
    drop(run(&x, false)?);
    let stats_train = max_abs_diff(&before, &running_mean);
    let before = running_mean.copy();
    drop(run(&x, true)?);
    let stats_eval = max_abs_diff(&before, &running_mean);

    let tol = 1e-6;
    let confirmed = dropout_train > tol && mates_train > tol && stats_train > 0.0;
    let labels = vec![
        "same input twice (Dropout)".to_string(),
        "sample 0, other batch-mates (BatchNorm)".into(),
        "running mean change".into(),
    ];
    Ok(Outcome {
        table: None,
        verdict: if confirmed { Verdict::Confirmed } else { Verdict::Refuted },
        reason: format!(
            "Under no_grad in train mode: same input twice differed by {dropout_train:.3e}, sample 0 changed by {mates_train:.3e} with other batch-mates, BatchNorm's running mean moved by {stats_train:.3e}. In eval mode: {dropout_eval:.1e}, {mates_eval:.1e}, {stats_eval:.1e}."
        ),
        figures: vec![
            fig("train+no_grad: max |Δ| same input twice", dropout_train, "abs"),
            fig("eval+no_grad: max |Δ| same input twice", dropout_eval, "abs"),
            fig("train+no_grad: max |Δ| sample 0 with other batch-mates", mates_train, "abs"),
            fig("eval+no_grad: max |Δ| sample 0 with other batch-mates", mates_eval, "abs"),
            fig("train+no_grad: running mean change", stats_train, "abs"),
            fig("eval+no_grad: running mean change", stats_eval, "abs"),
        ],
        chart: ChartKind::Bar,
        series: vec![
            series("train + no_grad", "max |Δ|", labels.clone(), vec![dropout_train, mates_train, stats_train]),
            series("eval + no_grad", "max |Δ|", labels, vec![dropout_eval, mates_eval, stats_eval]),
        ],
        notes: vec!["Tiny MLP (BatchNorm + Dropout), batch 16, a fresh model so the cached one keeps its statistics.".into()],
    })
}

fn inference_vs_nograd(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let mut figures = vec![];
    let mut labels = vec![];
    let (mut p50_ng, mut p50_im) = (vec![], vec![]);
    let mut memory_equal = true;
    for (model, batch) in [
        (ModelId::TinyMlp, 1),
        (ctx.model(ModelId::Resnet18), ctx.batch(4, 32)),
    ] {
        let mut ng_spec = ctx.spec(model, batch, true, GradMode::NoGrad);
        // Per-op overhead shows with many short iterations.
        ng_spec.iters = if model == ModelId::TinyMlp {
            200
        } else {
            ng_spec.iters
        };
        let im_spec = RunSpec {
            grad: GradMode::InferenceMode,
            ..ng_spec.clone()
        };
        let ng = measure(lab, ng_spec)?;
        let im = measure(lab, im_spec)?;
        let (a, b) = (
            ng.memory.peak_above_baseline_bytes as f64,
            im.memory.peak_above_baseline_bytes as f64,
        );
        if (a - b).abs() > 0.05 * a.max(b) {
            memory_equal = false;
        }
        let name = format!("{} b{batch}", model.as_str());
        figures.push(fig(&format!("{name} no_grad p50"), ng.latency_ms.p50, "ms"));
        figures.push(fig(
            &format!("{name} inference_mode p50"),
            im.latency_ms.p50,
            "ms",
        ));
        figures.push(fig(
            &format!("{name} latency ratio inference_mode / no_grad"),
            im.latency_ms.p50 / ng.latency_ms.p50,
            "ratio",
        ));
        figures.push(fig(
            &format!("{name} no_grad peak above baseline"),
            a,
            "bytes",
        ));
        figures.push(fig(
            &format!("{name} inference_mode peak above baseline"),
            b,
            "bytes",
        ));
        labels.push(name);
        p50_ng.push(ng.latency_ms.p50);
        p50_im.push(im.latency_ms.p50);
    }
    // The live error, and the fix.
    let device = tch_device(ctx.device);
    let x = {
        let _g = InferenceModeGuard::enter().map_err(|e| failure(FailureKind::Torch, e.0))?;
        Tensor::ones([2, 2], (Kind::Float, device)) * 3
    };
    let w = Tensor::ones([2, 2], (Kind::Float, device)).set_requires_grad(true);
    let error = x
        .f_matmul(&w)
        .err()
        .map(|e| crate::first_line(&e.to_string()));
    let fixed = x.copy().f_matmul(&w).is_ok();
    let raised = error
        .as_deref()
        .is_some_and(|e| e.contains("Inference tensors cannot be saved for backward"));
    let confirmed = memory_equal && raised && fixed;
    let reason = if confirmed {
        "Memory within 5% of no_grad on both models; saving an inference tensor for backward raised libtorch's error and clone() fixed it. Latency ratios are in the figures: the saving is per-op CPU overhead, largest on tiny models.".to_string()
    } else if !memory_equal {
        "inference_mode's peak memory differed from no_grad's by more than 5% here.".to_string()
    } else {
        "The inference-tensor error did not behave as documented here.".to_string()
    };
    let mut notes = vec![match &error {
        Some(e) => format!("libtorch said: {e}"),
        None => "no error was raised when saving an inference tensor for backward".into(),
    }];
    notes.push(format!(
        "x.clone() outside the mode, then the same op: {}",
        if fixed { "works" } else { "fails" }
    ));
    figures.push(fig("error raised", f64::from(u8::from(raised)), "bool"));
    figures.push(fig("clone() fix works", f64::from(u8::from(fixed)), "bool"));
    Ok(Outcome {
        table: None,
        verdict: if confirmed {
            Verdict::Confirmed
        } else {
            Verdict::Refuted
        },
        reason,
        figures,
        chart: ChartKind::Bar,
        series: vec![
            series("no_grad p50 (ms)", "ms", labels.clone(), p50_ng),
            series("inference_mode p50 (ms)", "ms", labels, p50_im),
        ],
        notes,
    })
}

fn autocast(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let model_id = ctx.model(ModelId::Resnet18);
    let b = ctx.batch(4, 64);
    let base = ctx.spec(model_id, b, true, GradMode::NoGrad);
    let fp32 = measure(lab, base.clone())?;
    // Output comparison on one fixed input through the cached model.
    let size = base.resolved_input_size();
    let i = lab.model_index(model_id, ctx.device, size)?;
    let model = lab.model(i);
    tch::manual_seed(1);
    let x = catch_torch(|| model.input(b, size, tch_device(ctx.device)))?;
    let reference = forward(model, &x, &base, ctx.device)?;
    let scale = reference.abs().max().double_value(&[]);
    let mut figures = vec![
        fig("fp32 p50", fp32.latency_ms.p50, "ms"),
        fig(
            "fp32 peak above baseline",
            fp32.memory.peak_above_baseline_bytes as f64,
            "bytes",
        ),
    ];
    let mut labels = vec!["fp32".to_string()];
    let (mut p50, mut peak) = (
        vec![fp32.latency_ms.p50],
        vec![mib(fp32.memory.peak_above_baseline_bytes)],
    );
    let mut notes = vec![];
    let mut ok = true;
    for autocast in [Autocast::Fp16, Autocast::Bf16] {
        let support = lab
            .machine()
            .autocast_support(ctx.device)
            .into_iter()
            .find(|s| s.autocast == autocast);
        if let Some(s) = support.as_ref().filter(|s| !s.supported) {
            notes.push(format!("{} skipped: {}", autocast.as_str(), s.note));
            continue;
        }
        if let Some(s) = support.filter(|s| !s.note.is_empty()) {
            notes.push(format!("{}: {}", autocast.as_str(), s.note));
        }
        let spec = RunSpec {
            autocast,
            ..base.clone()
        };
        let model = lab.model(i);
        let out = forward(model, &x, &spec, ctx.device)?;
        let diff = max_abs_diff(&out, &reference);
        let dtype_ok = out.kind()
            == if autocast == Autocast::Fp16 {
                Kind::Half
            } else {
                Kind::BFloat16
            };
        ok &= dtype_ok && diff > 0.0 && diff < 0.1 * scale;
        drop(out);
        let r = measure(lab, spec)?;
        figures.push(fig(
            &format!("{} p50", autocast.as_str()),
            r.latency_ms.p50,
            "ms",
        ));
        figures.push(fig(
            &format!("{} peak above baseline", autocast.as_str()),
            r.memory.peak_above_baseline_bytes as f64,
            "bytes",
        ));
        figures.push(fig(
            &format!("{} max |output - fp32 output|", autocast.as_str()),
            diff,
            "abs",
        ));
        figures.push(fig(
            &format!("{} latency vs fp32", autocast.as_str()),
            r.latency_ms.p50 / fp32.latency_ms.p50,
            "ratio",
        ));
        notes.push(format!(
            "{} output dtype: {}",
            autocast.as_str(),
            r.output.dtype
        ));
        labels.push(autocast.as_str().into());
        p50.push(r.latency_ms.p50);
        peak.push(mib(r.memory.peak_above_baseline_bytes));
    }
    let weights_fp32 = lab
        .model(i)
        .vs
        .trainable_variables()
        .iter()
        .all(|t| t.kind() == Kind::Float);
    ok &= weights_fp32;
    figures.push(fig(
        "weights still float32",
        f64::from(u8::from(weights_fp32)),
        "bool",
    ));
    figures.push(fig("fp32 output max |value|", scale, "abs"));
    Ok(Outcome {
        table: None,
        verdict: if ok && labels.len() > 1 {
            Verdict::Confirmed
        } else if labels.len() == 1 {
            Verdict::NotApplicable
        } else {
            Verdict::Refuted
        },
        reason: if ok {
            "Autocast outputs came out in fp16/bf16 with small differences from fp32, and the weights stayed float32. Latency depends on the hardware: see the figures.".into()
        } else {
            "An autocast output had an unexpected dtype or difference, or the weights changed dtype.".into()
        },
        figures,
        chart: ChartKind::Bar,
        series: vec![
            series("p50 latency (ms)", "ms", labels.clone(), p50),
            series("peak above baseline (MiB)", "MiB", labels, peak),
        ],
        notes,
    })
}

/// Least-squares fit y = a + b·x; returns (b, R²).
fn linear_fit(xs: &[f64], ys: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    if xs.len() < 2 {
        return (0.0, 0.0);
    }
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
    let syy: f64 = ys.iter().map(|y| (y - my).powi(2)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let r2 = if sxx > 0.0 && syy > 0.0 {
        sxy * sxy / (sxx * syy)
    } else {
        0.0
    };
    (slope, r2)
}

fn batch_scaling(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let model = ctx.model(ModelId::Resnet18);
    let budget = ctx.opts.budget_bytes.unwrap_or_else(|| {
        if ctx.cuda() {
            torch_ext::cuda_mem_info(0)
                .map(|(free, _)| free)
                .unwrap_or(16 << 30)
        } else {
            // A CPU default that keeps the sweep to seconds; pass a budget to go further.
            160 << 20
        }
    });
    let max_batch = if ctx.cuda() { 4096 } else { 256 };
    let mut labels: Vec<String> = vec![];
    let mut series_out = vec![];
    let mut figures = vec![fig("memory budget", budget as f64, "bytes")];
    let mut fits = vec![];
    let mut linear = true;
    let mut notes = vec![];
    for (name, grad) in [
        ("grad enabled", GradMode::Enabled),
        ("no_grad", GradMode::NoGrad),
    ] {
        let mut xs = vec![];
        let mut peaks = vec![];
        let mut totals = vec![];
        let mut per_sample = vec![];
        let mut largest = 0u32;
        let mut b = 1u32;
        while b <= max_batch {
            let mut spec = ctx.spec(model, b, true, grad);
            spec.iters = 2;
            spec.warmup = 1;
            match measure(lab, spec) {
                Ok(r) => {
                    let total = r.memory.peak_allocated_bytes;
                    xs.push(b as f64);
                    peaks.push(r.memory.peak_above_baseline_bytes as f64);
                    totals.push(mib(total));
                    per_sample.push(r.latency_ms.p50 / b as f64);
                    if total <= budget {
                        largest = b;
                    } else {
                        notes.push(format!(
                            "{name}: batch {b} needs {:.1} MiB, above the budget",
                            mib(total)
                        ));
                        break;
                    }
                }
                Err(f) if f.kind == FailureKind::OutOfMemory => {
                    notes.push(format!(
                        "{name}: out of memory at batch {b} — a data point, not a crash"
                    ));
                    break;
                }
                Err(f) => return Err(f),
            }
            b *= 2;
        }
        let (slope, r2) = linear_fit(&xs, &peaks);
        linear &= r2 > 0.95;
        fits.push(largest);
        figures.push(fig(
            &format!("{name}: largest batch within budget"),
            largest as f64,
            "count",
        ));
        figures.push(fig(
            &format!("{name}: memory per sample (slope)"),
            slope,
            "bytes",
        ));
        figures.push(fig(&format!("{name}: linearity R²"), r2, "ratio"));
        if xs.len() > labels.len() {
            labels = xs.iter().map(|x| format!("{x}")).collect();
        }
        // Total allocated, so that it compares with the budget line.
        series_out.push(series(
            &format!("{name}: peak allocated (MiB)"),
            "MiB",
            vec![],
            totals,
        ));
        series_out.push(series(
            &format!("{name}: ms per sample"),
            "ms",
            vec![],
            per_sample,
        ));
    }
    series_out.push(series(
        "memory budget (MiB)",
        "MiB",
        vec![],
        vec![mib(budget); labels.len()],
    ));
    for s in &mut series_out {
        s.x = labels.clone();
        s.y.resize(labels.len(), None);
    }
    let confirmed = linear && fits[1] > fits[0];
    Ok(Outcome {
        table: None,
        verdict: if confirmed { Verdict::Confirmed } else { Verdict::Refuted },
        reason: format!(
            "Largest batch within {:.0} MiB: {} with grad, {} with no_grad; memory {} linear in the batch.",
            mib(budget),
            fits[0],
            fits[1],
            if linear { "is" } else { "is not" }
        ),
        figures,
        chart: ChartKind::Line,
        series: series_out,
        notes,
    })
}

fn allocated_vs_reserved(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    if !ctx.cuda() {
        return Ok(not_on_cpu(
            "The CPU allocator keeps no cache of its own: freed tensors go straight back, so there is no reserved figure to compare.",
        ));
    }
    let r = measure(
        lab,
        ctx.spec(
            ctx.model(ModelId::Resnet50),
            ctx.batch(8, 64),
            true,
            GradMode::Enabled,
        ),
    )?;
    let reading = lab
        .meter(DeviceKind::Cuda)
        .read()
        .map_err(|e| failure(FailureKind::Torch, e.0))?;
    let reserved = reading.reserved.unwrap_or(0);
    let used = lab.meter(DeviceKind::Cuda).device_used().unwrap_or(0);
    let confirmed =
        r.memory.after_release_bytes == r.memory.baseline_bytes && reserved > reading.allocated;
    let labels = vec![
        "allocated".to_string(),
        "reserved".into(),
        "device used (driver)".into(),
    ];
    Ok(Outcome {
        table: None,
        verdict: if confirmed { Verdict::Confirmed } else { Verdict::Refuted },
        reason: format!(
            "After the output was freed: allocated {:.1} MiB (baseline {:.1} MiB), reserved {:.1} MiB, device-level {:.1} MiB.",
            mib(reading.allocated),
            mib(r.memory.baseline_bytes),
            mib(reserved),
            mib(used)
        ),
        figures: vec![
            fig("allocated after release", reading.allocated as f64, "bytes"),
            fig("reserved after release", reserved as f64, "bytes"),
            fig("peak reserved during the run", r.memory.peak_reserved_bytes.unwrap_or(0) as f64, "bytes"),
            fig("device used (driver, includes the CUDA context)", used as f64, "bytes"),
        ],
        chart: ChartKind::Bar,
        series: vec![series("after the run (MiB)", "MiB", labels, vec![mib(reading.allocated), mib(reserved), mib(used)])],
        notes: vec![],
    })
}

fn empty_cache(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    if !ctx.cuda() {
        return Ok(not_on_cpu(
            "empty_cache() acts on the CUDA caching allocator; a CPU has none.",
        ));
    }
    let setup = Setup::new(ctx, ModelId::Resnet50, (8, 32), GradMode::NoGrad);
    let spec = setup.spec.clone();
    let i = setup.cached(lab, ctx)?;
    let model = lab.model(i);
    let x = setup.input(model, ctx)?;
    let mut times = [vec![], vec![]];
    let mut allocated_change = 0i64;
    for _ in 0..3 {
        drop(forward(model, &x, &spec, DeviceKind::Cuda)?);
    }
    for request in 0..60 {
        let variant = request % 2;
        let t = Instant::now();
        let out = forward(model, &x, &spec, DeviceKind::Cuda)?;
        synchronize(DeviceKind::Cuda)?;
        times[variant].push(t.elapsed().as_secs_f64() * 1000.0);
        drop(out);
        if variant == 1 {
            let before = torch_ext::cuda_memory_stats(0)
                .map(|s| s.allocated.current)
                .unwrap_or(0) as i64;
            torch_ext::cuda_empty_cache().map_err(|e| failure(FailureKind::Torch, e.0))?;
            let after = torch_ext::cuda_memory_stats(0)
                .map(|s| s.allocated.current)
                .unwrap_or(0) as i64;
            allocated_change += after - before;
        }
    }
    let without = crate::stats::latency_stats(&times[0]).expect("samples");
    let with = crate::stats::latency_stats(&times[1]).expect("samples");
    let confirmed = allocated_change == 0 && with.p99 > without.p99;
    Ok(Outcome {
        table: None,
        verdict: if confirmed { Verdict::Confirmed } else { Verdict::Refuted },
        reason: format!(
            "p99 {:.3} ms with empty_cache() after every request vs {:.3} ms without; allocated memory changed by {allocated_change} bytes.",
            with.p99, without.p99
        ),
        figures: vec![
            fig("p50 without empty_cache", without.p50, "ms"),
            fig("p99 without empty_cache", without.p99, "ms"),
            fig("p50 with empty_cache", with.p50, "ms"),
            fig("p99 with empty_cache", with.p99, "ms"),
            fig("allocated change from empty_cache", allocated_change as f64, "bytes"),
        ],
        chart: ChartKind::Line,
        series: vec![
            series("without (ms)", "ms", (1..=times[0].len()).map(|i| i.to_string()).collect(), times[0].clone()),
            series("with empty_cache (ms)", "ms", (1..=times[1].len()).map(|i| i.to_string()).collect(), times[1].clone()),
        ],
        notes: vec!["Requests alternate between the two variants so both see the same conditions.".into()],
    })
}

fn output_lifetime(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let setup = Setup::new(ctx, ModelId::Resnet18, (2, 16), GradMode::NoGrad);
    let spec = setup.spec.clone();
    let i = setup.cached(lab, ctx)?;
    let requests = 8;
    let variants: [(&str, GradMode, bool); 4] = [
        ("dropped", GradMode::NoGrad, false),
        ("kept on device (no_grad)", GradMode::NoGrad, true),
        ("kept with grad (graph alive)", GradMode::Enabled, true),
        ("moved to CPU (no_grad)", GradMode::NoGrad, true),
    ];
    let labels: Vec<String> = (1..=requests).map(|r| r.to_string()).collect();
    let mut out_series = vec![];
    let mut growth = vec![];
    for (name, grad, keep) in variants {
        let model = lab.model(i);
        let meter = lab.meter(ctx.device);
        let x = setup.input(model, ctx)?;
        let s = RunSpec {
            grad,
            ..spec.clone()
        };
        // One pass first, so one-time caches (oneDNN primitives, allocator pools) are not
        // mistaken for growth.
        drop(forward(model, &x, &s, ctx.device)?);
        synchronize(ctx.device)?;
        let start = meter
            .read()
            .map_err(|e| failure(FailureKind::Torch, e.0))?
            .allocated;
        let mut kept = vec![];
        let mut ys = vec![];
        for _ in 0..requests {
            let mut out = forward(model, &x, &s, ctx.device)?;
            if name.starts_with("moved") {
                out = catch_torch(|| out.to_device(tch::Device::Cpu))?;
            }
            if keep {
                kept.push(out);
            } else {
                drop(out);
            }
            synchronize(ctx.device)?;
            let now = meter
                .read()
                .map_err(|e| failure(FailureKind::Torch, e.0))?
                .allocated;
            ys.push(mib(now.saturating_sub(start)));
        }
        drop(kept);
        let per_request = ys.last().copied().unwrap_or(0.0) / requests as f64;
        growth.push(per_request);
        out_series.push(series(
            &format!("{name} (MiB above start)"),
            "MiB",
            labels.clone(),
            ys,
        ));
    }
    let (dropped, kept, with_grad, moved) = (growth[0], growth[1], growth[2], growth[3]);
    let confirmed = dropped == 0.0 && kept > 0.0 && with_grad > 2.0 * kept;
    let mut notes = vec![];
    if !ctx.cuda() {
        notes.push(
            "On a CPU, \"moved to CPU\" stays in the same memory; on a GPU it frees the device."
                .into(),
        );
    }
    Ok(Outcome {
        table: None,
        verdict: if confirmed { Verdict::Confirmed } else { Verdict::Refuted },
        reason: format!(
            "Per request: dropped {dropped:.3} MiB, kept {kept:.3} MiB, kept with grad {with_grad:.3} MiB, moved to CPU {moved:.3} MiB (device memory)."
        ),
        figures: vec![
            fig("growth per request, dropped", dropped * MIB, "bytes"),
            fig("growth per request, kept on device", kept * MIB, "bytes"),
            fig("growth per request, kept with grad", with_grad * MIB, "bytes"),
            fig("growth per request, moved to CPU", moved * MIB, "bytes"),
        ],
        chart: ChartKind::Line,
        series: out_series,
        notes,
    })
}

fn warm_up(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    // What a new process pays: a freshly built model and an input shape this process has not
    // run yet (oneDNN and cuDNN create and cache their kernels per shape, so a shape seen
    // before would start warm). Each call takes the next batch size.
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let mut setup = Setup::new(ctx, ModelId::Resnet18, (4, 32), GradMode::NoGrad);
    setup.batch += 1 + CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 64;
    setup.spec.batch = setup.batch;
    let spec = setup.spec.clone();
    let model = setup.fresh(lab, ctx)?;
    let x = setup.input(&model, ctx)?;
    let mut times = vec![];
    for _ in 0..10 {
        let t = Instant::now();
        let out = forward(&model, &x, &spec, ctx.device)?;
        synchronize(ctx.device)?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        drop(out);
    }
    let mut later = times[5..].to_vec();
    later.sort_by(|a, b| a.total_cmp(b));
    let median = crate::stats::percentile(&later, 50.0);
    let ratio = times[0] / median;
    Ok(Outcome {
        table: None,
        verdict: if ratio > 1.5 {
            Verdict::Confirmed
        } else {
            Verdict::Refuted
        },
        reason: format!(
            "First iteration {:.3} ms, median of iterations 6–10 {median:.3} ms: {ratio:.2}×.",
            times[0]
        ),
        figures: vec![
            fig("first iteration", times[0], "ms"),
            fig("median of iterations 6-10", median, "ms"),
            fig("first / steady", ratio, "ratio"),
        ],
        chart: ChartKind::Line,
        series: vec![series(
            "latency (ms)",
            "ms",
            (1..=times.len()).map(|i| i.to_string()).collect(),
            times,
        )],
        notes: vec![format!(
            "{} batch {} (a shape new to this process), built fresh for this experiment",
            setup.model.display_name(),
            setup.batch
        )],
    })
}

fn sync_timing(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let setup = Setup::new(ctx, ModelId::Resnet18, (4, 64), GradMode::NoGrad);
    let spec = setup.spec.clone();
    let i = setup.cached(lab, ctx)?;
    let model = lab.model(i);
    let x = setup.input(model, ctx)?;
    for _ in 0..2 {
        drop(forward(model, &x, &spec, ctx.device)?);
    }
    synchronize(ctx.device)?;
    let (mut naive, mut synced) = (vec![], vec![]);
    for _ in 0..10 {
        let t = Instant::now();
        let out = forward(model, &x, &spec, ctx.device)?;
        naive.push(t.elapsed().as_secs_f64() * 1000.0);
        synchronize(ctx.device)?;
        drop(out);
        let t = Instant::now();
        let out = forward(model, &x, &spec, ctx.device)?;
        synchronize(ctx.device)?;
        synced.push(t.elapsed().as_secs_f64() * 1000.0);
        drop(out);
    }
    let n = crate::stats::latency_stats(&naive).expect("samples").p50;
    let s = crate::stats::latency_stats(&synced).expect("samples").p50;
    let ratio = n / s;
    let (verdict, reason) = if ctx.cuda() {
        if ratio < 0.5 {
            (Verdict::Confirmed, format!("The naive timer read {n:.3} ms, the synchronised one {s:.3} ms: it measured only the launches."))
        } else {
            (Verdict::Refuted, format!("The naive timer read {n:.3} ms against {s:.3} ms synchronised: close, on this GPU and model."))
        }
    } else if (ratio - 1.0).abs() <= 0.25 {
        (
            Verdict::NotApplicable,
            format!("CPU ops are synchronous: both timers agree ({n:.3} vs {s:.3} ms). The pitfall needs an asynchronous device."),
        )
    } else {
        (Verdict::Refuted, format!("On this CPU the two timers disagreed: {n:.3} vs {s:.3} ms — more than noise should allow."))
    };
    Ok(Outcome {
        table: None,
        verdict,
        reason,
        figures: vec![
            fig("naive p50", n, "ms"),
            fig("synchronised p50", s, "ms"),
            fig("naive / synchronised", ratio, "ratio"),
        ],
        chart: ChartKind::Line,
        series: vec![
            series(
                "naive timer (ms)",
                "ms",
                (1..=10).map(|i| i.to_string()).collect(),
                naive,
            ),
            series(
                "synchronised timer (ms)",
                "ms",
                (1..=10).map(|i| i.to_string()).collect(),
                synced,
            ),
        ],
        notes: vec!["The two timers alternate on the same model and input.".into()],
    })
}

fn item_sync(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let setup = Setup::new(ctx, ModelId::TinyMlp, (64, 256), GradMode::NoGrad);
    let spec = setup.spec.clone();
    let i = setup.cached(lab, ctx)?;
    let model = lab.model(i);
    let batches = (0..20)
        .map(|_| setup.input(model, ctx))
        .collect::<Result<Vec<Tensor>, RunFailure>>()?;
    let loop_time = |per_batch_item: bool| -> Result<f64, RunFailure> {
        synchronize(ctx.device)?;
        let t = Instant::now();
        let mut host_total = 0.0;
        let mut device_total = Tensor::zeros([], (Kind::Float, tch_device(ctx.device)));
        for x in &batches {
            let loss = forward(model, x, &spec, ctx.device)?.mean(Kind::Float);
            if per_batch_item {
                host_total += loss.double_value(&[]);
            } else {
                device_total += loss;
            }
        }
        host_total += device_total.double_value(&[]);
        std::hint::black_box(host_total);
        Ok(t.elapsed().as_secs_f64() * 1000.0)
    };
    loop_time(false)?;
    let (mut item, mut acc) = (vec![], vec![]);
    for _ in 0..5 {
        item.push(loop_time(true)?);
        acc.push(loop_time(false)?);
    }
    let item_ms = crate::stats::latency_stats(&item).expect("samples").p50;
    let acc_ms = crate::stats::latency_stats(&acc).expect("samples").p50;
    let ratio = item_ms / acc_ms;
    let (verdict, reason) = if ctx.cuda() {
        if ratio > 1.05 {
            (Verdict::Confirmed, format!("The loop with .item() per batch took {item_ms:.3} ms, accumulating on the device {acc_ms:.3} ms ({ratio:.2}×)."))
        } else {
            (
                Verdict::Refuted,
                format!("No measurable cost here: {item_ms:.3} vs {acc_ms:.3} ms."),
            )
        }
    } else {
        (
            Verdict::NotApplicable,
            format!("On a CPU, .item() has no device to wait for: {item_ms:.3} vs {acc_ms:.3} ms ({ratio:.2}×), only bookkeeping differs."),
        )
    };
    Ok(Outcome {
        table: None,
        verdict,
        reason,
        figures: vec![
            fig("loop with .item() per batch", item_ms, "ms"),
            fig("loop accumulating on device", acc_ms, "ms"),
            fig("ratio", ratio, "ratio"),
        ],
        chart: ChartKind::Bar,
        series: vec![series(
            "20-batch loop (ms)",
            "ms",
            vec![
                ".item() per batch".into(),
                "accumulate, .item() once".into(),
            ],
            vec![item_ms, acc_ms],
        )],
        notes: vec![format!(
            "{} batch {}, 20 batches, median of 5 loops each (alternating)",
            setup.model.display_name(),
            setup.batch
        )],
    })
}

fn freeze_vs_nograd(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let setup = Setup::new(ctx, ModelId::Resnet18, (8, 64), GradMode::Enabled);
    let spec = setup.spec.clone();
    // A fresh model: freezing changes requires_grad, which the cached model must keep.
    let mut model = setup.fresh(lab, ctx)?;
    let x = setup.input(&model, ctx)?;
    let peak_of = |model: &Model, grad: GradMode| -> Result<u64, RunFailure> {
        let s = RunSpec {
            grad,
            ..spec.clone()
        };
        drop(forward(model, &x, &s, ctx.device)?);
        let meter = lab.meter(ctx.device);
        synchronize(ctx.device)?;
        let base = meter
            .read()
            .map_err(|e| failure(FailureKind::Torch, e.0))?
            .allocated;
        meter
            .reset_peak()
            .map_err(|e| failure(FailureKind::Torch, e.0))?;
        let out = forward(model, &x, &s, ctx.device)?;
        synchronize(ctx.device)?;
        let peak = meter
            .read()
            .map_err(|e| failure(FailureKind::Torch, e.0))?
            .peak_allocated;
        drop(out);
        Ok(peak.saturating_sub(base))
    };
    let full = peak_of(&model, GradMode::Enabled)?;
    let nograd = peak_of(&model, GradMode::NoGrad)?;
    // The last stage and the classifier stay trainable: a common fine-tuning setup.
    let trainable = |name: &str| {
        name.starts_with("layer4") || name.starts_with("fc") || name.starts_with("classifier")
    };
    for (name, t) in model.vs.variables() {
        // Only parameters: BatchNorm's running statistics are buffers and never require grad.
        if t.requires_grad() {
            let _ = t.set_requires_grad(trainable(&name));
        }
    }
    let partial = peak_of(&model, GradMode::Enabled)?;
    model.vs.freeze();
    let frozen = peak_of(&model, GradMode::Enabled)?;
    let close = (frozen as f64 - nograd as f64).abs() <= 0.10 * nograd.max(1) as f64;
    let between = nograd < partial && partial < full;
    let labels = vec![
        "all trainable".to_string(),
        "backbone frozen".into(),
        "all frozen".into(),
        "no_grad".into(),
    ];
    Ok(Outcome {
        table: None,
        verdict: if close && between { Verdict::Confirmed } else { Verdict::Refuted },
        reason: format!(
            "Peak above the weights and input: all trainable {:.1} MiB, backbone frozen {:.1} MiB, all frozen {:.1} MiB, no_grad {:.1} MiB.",
            mib(full),
            mib(partial),
            mib(frozen),
            mib(nograd)
        ),
        figures: vec![
            fig("all trainable", full as f64, "bytes"),
            fig("backbone frozen (last stage + head trainable)", partial as f64, "bytes"),
            fig("all frozen", frozen as f64, "bytes"),
            fig("no_grad", nograd as f64, "bytes"),
        ],
        chart: ChartKind::Bar,
        series: vec![series("peak above baseline (MiB)", "MiB", labels, vec![mib(full), mib(partial), mib(frozen), mib(nograd)])],
        notes: vec![format!("{} batch {}, a fresh model", setup.model.display_name(), setup.batch)],
    })
}

fn seed_table(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let model = ctx.model(ModelId::Resnet50);
    let b = ctx.batch(4, 32);
    let autocast = if ctx.cuda() {
        Autocast::Fp16
    } else {
        Autocast::Bf16
    };
    let rows: [(&str, bool, GradMode, Autocast); 5] = [
        ("train", false, GradMode::Enabled, Autocast::Off),
        ("eval only", true, GradMode::Enabled, Autocast::Off),
        ("no_grad only", false, GradMode::NoGrad, Autocast::Off),
        ("eval + no_grad", true, GradMode::NoGrad, Autocast::Off),
        (
            if ctx.cuda() {
                "eval + no_grad + fp16"
            } else {
                "eval + no_grad + bf16"
            },
            true,
            GradMode::NoGrad,
            autocast,
        ),
    ];
    let mut reports = vec![];
    for (_, eval, grad, ac) in rows {
        let mut spec = RunSpec {
            autocast: ac,
            ..ctx.spec(model, b, eval, grad)
        };
        if !ctx.cuda() {
            spec.iters = 2;
        }
        reports.push(measure(lab, spec)?);
    }
    let labels: Vec<String> = rows.iter().map(|r| r.0.to_string()).collect();
    let first_peak = reports[0].memory.peak_above_baseline_bytes as f64;
    let first_p50 = reports[0].latency_ms.p50;
    let mut figures = vec![];
    for (label, r) in labels.iter().zip(&reports) {
        figures.push(fig(
            &format!("{label}: peak above baseline"),
            r.memory.peak_above_baseline_bytes as f64,
            "bytes",
        ));
        figures.push(fig(&format!("{label}: p50"), r.latency_ms.p50, "ms"));
        figures.push(fig(
            &format!("{label}: memory vs train"),
            r.memory.peak_above_baseline_bytes as f64 / first_peak,
            "ratio",
        ));
        figures.push(fig(
            &format!("{label}: latency vs train"),
            r.latency_ms.p50 / first_p50,
            "ratio",
        ));
    }
    let change = |x: f64, first: f64| format!("{:+.0}%", 100.0 * (x - first) / first);
    let table = Table {
        columns: [
            "setting",
            "peak above baseline",
            "vs train",
            "p50",
            "vs train",
            "output",
        ]
        .map(String::from)
        .to_vec(),
        rows: labels
            .iter()
            .zip(&reports)
            .map(|(label, r)| {
                let peak = r.memory.peak_above_baseline_bytes as f64;
                vec![
                    label.clone(),
                    protocol::format_bytes(r.memory.peak_above_baseline_bytes),
                    change(peak, first_peak),
                    format!("{:.2} ms", r.latency_ms.p50),
                    change(r.latency_ms.p50, first_p50),
                    r.output.dtype.clone(),
                ]
            })
            .collect(),
    };
    let eval_only = reports[1].memory.peak_above_baseline_bytes as f64;
    let eval_nograd = reports[3].memory.peak_above_baseline_bytes as f64;
    let confirmed =
        (eval_only - first_peak).abs() <= 0.10 * first_peak && eval_nograd < 0.5 * first_peak;
    let mut notes = vec![format!(
        "{} batch {b}{} on {}",
        model.display_name(),
        reports[0]
            .spec
            .input_size
            .map(|s| format!(", {s}×{s} images"))
            .unwrap_or_default(),
        reports[0].env.device_name
    )];
    if !ctx.cuda() {
        notes.push("On a CPU the low-precision row uses bf16 (autocast's CPU default); without bf16 units it is emulated and slow.".into());
    }
    Ok(Outcome {
        table: Some(table),
        verdict: if confirmed {
            Verdict::Confirmed
        } else {
            Verdict::Refuted
        },
        reason: format!(
            "eval only: {:.0}% of train's peak memory; eval + no_grad: {:.0}%.",
            100.0 * eval_only / first_peak,
            100.0 * eval_nograd / first_peak
        ),
        figures,
        chart: ChartKind::Bar,
        series: vec![
            series(
                "peak above baseline (MiB)",
                "MiB",
                labels.clone(),
                reports
                    .iter()
                    .map(|r| mib(r.memory.peak_above_baseline_bytes))
                    .collect(),
            ),
            series(
                "p50 latency (ms)",
                "ms",
                labels,
                reports.iter().map(|r| r.latency_ms.p50).collect(),
            ),
        ],
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_fit_recovers_a_line() {
        let (slope, r2) = linear_fit(&[1.0, 2.0, 4.0, 8.0], &[3.0, 5.0, 9.0, 17.0]);
        assert!((slope - 2.0).abs() < 1e-12 && (r2 - 1.0).abs() < 1e-12);
    }

    #[test]
    fn the_catalogue_has_every_card_once() {
        let ids: Vec<_> = CARDS.iter().map(|c| c.id).collect();
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 13);
        assert!(exists("seed-table") && !exists("nope"));
    }
}
