//! Turning a [`RunSpec`] from outside into a [`CheckedSpec`] that can run on this machine.
//! After this point no code sees an invalid spec.

use protocol::settings::SettingId;
use protocol::{DeviceChoice, DeviceKind, GenerateSpec, Limits, RunSpec, SpecError};

use crate::device::Machine;

/// A spec that passed every check, with `device` and `input_size` resolved: timed forward
/// passes or a generation, two kinds of run that share the five switches and little else.
/// The wire format stays one [`RunSpec`] with an optional `generate` block; from here on
/// the code that runs one kind cannot ask for the other's settings (a generation has no
/// `iters` or `warmup`: its counts are the prefill and `new_tokens` steps).
#[derive(Clone, Debug, PartialEq)]
pub enum CheckedSpec {
    Forward(ForwardRun),
    Generate(GenerateRun),
}

/// Timed forward passes: `warmup` untimed, then `iters` timed.
#[derive(Clone, Debug, PartialEq)]
pub struct ForwardRun {
    spec: RunSpec,
    device: DeviceKind,
}

/// A generation on a decoder: one untimed warm-up generation step, then the prefill and
/// `new_tokens` decode steps, each timed.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateRun {
    spec: RunSpec,
    generation: GenerateSpec,
    device: DeviceKind,
}

impl CheckedSpec {
    fn new(spec: RunSpec, device: DeviceKind) -> CheckedSpec {
        match spec.generate.clone() {
            Some(generation) => CheckedSpec::Generate(GenerateRun {
                spec,
                generation,
                device,
            }),
            None => CheckedSpec::Forward(ForwardRun { spec, device }),
        }
    }

    /// The spec as it will run (`device` is `cpu` or `cuda`, `input_size` is set), as the
    /// report echoes it.
    pub fn spec(&self) -> &RunSpec {
        match self {
            CheckedSpec::Forward(r) => &r.spec,
            CheckedSpec::Generate(r) => &r.spec,
        }
    }

    pub fn device(&self) -> DeviceKind {
        match self {
            CheckedSpec::Forward(r) => r.device,
            CheckedSpec::Generate(r) => r.device,
        }
    }

    /// The input size (a decoder's prompt length) the run uses.
    pub fn input_size(&self) -> u32 {
        self.spec().resolved_input_size()
    }
}

impl ForwardRun {
    pub fn spec(&self) -> &RunSpec {
        &self.spec
    }

    pub fn device(&self) -> DeviceKind {
        self.device
    }

    pub fn input_size(&self) -> u32 {
        self.spec.resolved_input_size()
    }

    /// Untimed passes before the timed ones.
    pub fn warmup(&self) -> u32 {
        self.spec.warmup
    }

    /// Timed passes.
    pub fn iters(&self) -> u32 {
        self.spec.iters
    }

    /// The same run at another batch with other counts (admission's probes): the caller
    /// keeps the batch within what was checked or below.
    pub(crate) fn probe(&self, batch: u32, warmup: u32, iters: u32) -> CheckedSpec {
        let mut spec = self.spec.clone();
        spec.batch = batch;
        spec.warmup = warmup;
        spec.iters = iters;
        // A probe measures the eager model: compiling belongs to the run itself (its cost is
        // one of the run's figures), and the eager pass's memory bounds the admission.
        spec.advanced.compiled = false;
        CheckedSpec::Forward(ForwardRun {
            spec,
            device: self.device,
        })
    }
}

impl GenerateRun {
    pub fn spec(&self) -> &RunSpec {
        &self.spec
    }

    pub fn device(&self) -> DeviceKind {
        self.device
    }

    /// The prompt length in tokens (a text prompt's bytes plus its BOS).
    pub fn input_size(&self) -> u32 {
        self.spec.resolved_input_size()
    }

    /// What to generate and how.
    pub fn generation(&self) -> &GenerateSpec {
        &self.generation
    }
}

/// The logical CPUs libtorch may use: more intra-op threads than that only slow a run down
/// and leave idle OS threads behind.
pub fn cpu_count() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1)
}

/// Resolves `spec`'s model in `catalog` and checks it against the limits and against what
/// this machine can do.
pub fn check_spec(
    mut spec: RunSpec,
    catalog: &protocol::Catalog,
    limits: &Limits,
    machine: &Machine,
) -> Result<CheckedSpec, SpecError> {
    spec.model = catalog.resolve(spec.model);
    let spec = count_prompt_tokens(spec)?;
    spec.check(catalog, limits)?;
    if let Some(t) = spec.threads {
        let cpus = cpu_count();
        if t > cpus {
            return Err(SpecError {
                field: SettingId::Threads.into(),
                message: format!(
                    "threads {t} is more than this machine's {cpus} CPUs; use 1..={cpus} (or leave it out for the server's default)"
                ),
            });
        }
    }
    let device = match spec.device {
        DeviceChoice::Cpu => DeviceKind::Cpu,
        DeviceChoice::Cuda if machine.has_cuda() => DeviceKind::Cuda,
        DeviceChoice::Cuda => {
            return Err(SpecError {
                field: SettingId::Device.into(),
                message: "this server has no CUDA device (libtorch found none); use cpu or auto"
                    .into(),
            })
        }
        DeviceChoice::Auto => DeviceChoice::Auto
            .resolve(machine.has_cuda())
            .unwrap_or(DeviceKind::Cpu),
    };
    check_device(&spec, device, machine.compute_capability())?;
    if spec.advanced.cuda_graph {
        if let Some(message) = cuda_graph_refusal(&spec) {
            return Err(SpecError {
                field: SettingId::CudaGraph.into(),
                message,
            });
        }
    }
    if let Some(s) = machine
        .autocast_support(device)
        .into_iter()
        .find(|s| s.autocast == spec.autocast)
    {
        if !s.supported {
            return Err(SpecError {
                field: SettingId::Autocast.into(),
                message: format!(
                    "autocast {} cannot run on this {}: {}",
                    spec.autocast.as_str(),
                    device.as_str(),
                    s.note
                ),
            });
        }
    }
    let mut spec = spec;
    spec.device = match device {
        DeviceKind::Cpu => DeviceChoice::Cpu,
        DeviceKind::Cuda => DeviceChoice::Cuda,
    };
    spec.input_size = Some(spec.resolved_input_size());
    Ok(CheckedSpec::new(spec, device))
}

/// The checks of `spec` that depend on the device it runs on and nothing else of the
/// machine (`cc`: a GPU's compute capability, major × 10 + minor): the CUDA-only switches
/// on a CPU, a generation's fp8 cache, int4 on CUDA. A pure function: the quality table
/// checks its rows with it before building them, and tests check CUDA specs with it on a
/// machine without CUDA.
pub fn check_device(spec: &RunSpec, device: DeviceKind, cc: Option<u32>) -> Result<(), SpecError> {
    if let Some(e) = spec.advanced.unsupported_on(device) {
        return Err(e);
    }
    if let Some(g) = &spec.generate {
        check_generation(spec, g, device, cc)?;
    }
    Ok(())
}

/// The checks of a generation that depend on the device: an fp8 cache, int4 on CUDA.
fn check_generation(
    spec: &RunSpec,
    g: &GenerateSpec,
    device: DeviceKind,
    cc: Option<u32>,
) -> Result<(), SpecError> {
    // fp8 where the hardware has it (Ada, Hopper and later): elsewhere an fp8 cache is a
    // lesson about bytes only, and the page says so instead of running it.
    let fp8 = g.kv_dtype == protocol::KvDtype::Fp8E4m3;
    if fp8 && (device == DeviceKind::Cpu || cc.is_some_and(|cc| cc < 89)) {
        return Err(SpecError {
            field: SettingId::KvDtype.into(),
            message: match device {
                DeviceKind::Cpu => "fp8_e4m3 is not applicable on the CPU: an fp8 cache needs a CUDA device with fp8 (compute capability 8.9 or later); on the CPU choose bf16 or fp16".into(),
                DeviceKind::Cuda => format!(
                    "fp8_e4m3 needs a CUDA device with fp8 (compute capability 8.9 or later); this one is {}.{}; choose bf16 or fp16",
                    cc.unwrap_or(0) / 10,
                    cc.unwrap_or(0) % 10
                ),
            },
        });
    }
    if weights_for(device, g.weights, spec.advanced.weights) != spec.advanced.weights {
        return Err(SpecError {
            field: SettingId::Quant.into(),
            message: format!(
                "int4 linear layers on CUDA run PyTorch's tinygemm kernel (torch._weight_int4pack_mm), which takes bf16 activations only; set advanced.dtype to bf16, not {}",
                spec.advanced.weights.as_str()
            ),
        });
    }
    Ok(())
}

/// The weights' dtype a generation whose linear layers are quantized as `quant` runs in on
/// `device`, when `asked` was asked for: int4 on CUDA runs PyTorch's tinygemm kernel
/// (`torch._weight_int4pack_mm`), which takes bf16 activations (and bf16 scales and zeros)
/// only, so there it is bf16 whatever was asked; everywhere else what was asked. The spec
/// check refuses a generation whose dtype is not this one; the quality table
/// (`lab::quality`) and the cards build their int4 rows and runs with it.
pub fn weights_for(
    device: DeviceKind,
    quant: protocol::WeightQuant,
    asked: protocol::WeightsDtype,
) -> protocol::WeightsDtype {
    match (device, quant) {
        (DeviceKind::Cuda, protocol::WeightQuant::Int4) => protocol::WeightsDtype::Bf16,
        _ => asked,
    }
}

/// Why a graph cannot be captured for `spec`, in words for the spec's checks; `None` when
/// it can (the device is checked by the caller: graphs are CUDA-only).
fn cuda_graph_refusal(spec: &RunSpec) -> Option<String> {
    if let Err(why) = crate::torch_ext::cuda_graphs_built() {
        return Some(format!("CUDA graph capture is not available in this build: {why}"));
    }
    if spec.grad == protocol::GradMode::Enabled {
        return Some(
            "a CUDA graph here captures an inference pass: turn on no_grad or inference_mode \
             (capturing autograd's backward as well is torch.cuda.make_graphed_callables' job)"
                .to_string(),
        );
    }
    // A generation's decode step is captured over the static cache (the protocol's check
    // refuses the others); its attention dropout in train mode is not captured.
    let dropout = spec.model.decoder().map_or(0.0, |d| d.config.attention_dropout);
    (spec.generate.is_some() && !spec.eval && dropout > 0.0).then(|| {
        format!(
            "{} has attention dropout {dropout} and train mode turns it on; the decode step's graph is captured without dropout: use eval mode",
            spec.model
        )
    })
}

/// A tokenized model's text prompt, encoded by its tokenizer: its length in tokens becomes
/// `input_size`, and must leave `new_tokens` room in the model's context. Refused naming
/// `generate.prompt_text` past it (the byte model's prompt is checked by its bytes in
/// [`RunSpec::check`]).
fn count_prompt_tokens(mut spec: RunSpec) -> Result<RunSpec, SpecError> {
    let err = |field: SettingId, message: String| SpecError { field: field.into(), message };
    let Some(g) = spec.generate.as_ref() else {
        return Ok(spec);
    };
    let (Some(text), Some(decoder)) = (g.prompt_text.as_ref(), spec.model.decoder()) else {
        return Ok(spec);
    };
    let Some(tokenizer) = decoder.tokenizer() else {
        return Ok(spec);
    };
    if text.is_empty() || text.len() > protocol::MAX_TOKENIZED_TEXT_BYTES as usize {
        // RunSpec::check words these.
        return Ok(spec);
    }
    let ids = crate::models::decoder::text::prompt_ids(&decoder, text).map_err(|e| err(SettingId::PromptText, e))?;
    let n = ids.len() as u32;
    let context = decoder.config.max_position_embeddings;
    let room = context.saturating_sub(g.new_tokens);
    if n == 0 {
        return Err(err(SettingId::PromptText, "the prompt text encodes to no tokens".into()));
    }
    if n > room {
        return Err(err(
            SettingId::PromptText,
            format!(
                "the prompt text is {n} tokens ({}'s {}), and {} new tokens leave room for {room} in its context of {context}",
                spec.model,
                tokenizer.describe(),
                g.new_tokens
            ),
        ));
    }
    if let Some(given) = spec.input_size.filter(|&given| given != n) {
        return Err(err(
            SettingId::InputSize,
            format!("the prompt text sets the prompt's length ({n} tokens by its tokenizer), not {given}: leave input_size out"),
        ));
    }
    spec.input_size = Some(n);
    Ok(spec)
}

