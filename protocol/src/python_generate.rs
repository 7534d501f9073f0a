//! The Python for a generate run, in the two forms people meet: a hand-written greedy loop
//! over `model(...)` with an explicit cache ([`hand_written_loop`], what Gradless's engine
//! does step by step), and transformers' `model.generate(...)` ([`with_generate`]). Both run
//! as copied with PyTorch and transformers, offline: the model is built from its config, with
//! random weights, never downloaded.

use crate::{Autocast, DeviceChoice, GradMode, KvCacheKind, RunSpec, WeightsDtype};

/// Above this, a snippet's weights get a word of warning before they are built: more than
/// many laptops can spare.
const BIG_WEIGHTS_BYTES: u64 = 8 << 30;

/// For a decoder whose weights are large: how much memory building it takes and holds, as a
/// comment line (the snippet builds the model in fp32, then casts it to the spec's dtype).
/// `None` for a model that fits anywhere.
pub(crate) fn big_weights_note(spec: &RunSpec) -> Option<String> {
    let d = spec.model.decoder()?;
    let params = d.config.parameters();
    let fp32 = params * 4;
    if fp32 < BIG_WEIGHTS_BYTES {
        return None;
    }
    let kept = match spec.advanced.weights {
        WeightsDtype::Fp32 => String::new(),
        WeightsDtype::Fp16 | WeightsDtype::Bf16 => format!(
            ", then {} once cast to {}",
            crate::format_bytes(params * 2),
            spec.advanced.weights.as_str()
        ),
    };
    Some(format!(
        "# Note: {} has {:.2} B parameters: building it takes {} of fp32 weights{kept}. More memory than most laptops have.\n",
        d.display_name,
        params as f64 / 1e9,
        crate::format_bytes(fp32)
    ))
}

fn header(spec: &RunSpec) -> (String, u32, u32) {
    let device = match spec.device {
        DeviceChoice::Cuda => "\"cuda\"",
        DeviceChoice::Cpu => "\"cpu\"",
        DeviceChoice::Auto => "\"cuda\" if torch.cuda.is_available() else \"cpu\"",
    };
    let prompt = spec.resolved_input_size();
    let new_tokens = spec.generate.as_ref().map_or(1, |g| g.new_tokens);
    let vocab = spec.model.decoder().map_or(1, |d| d.config.vocab_size);
    let mut out = format!("# {}\nimport torch\nimport transformers\n\n", crate::settings::command_line(crate::settings::SETTINGS, spec));
    out.push_str(&format!("device = {device}\ntorch.manual_seed(0)\n"));
    if let Some(d) = spec.model.decoder() {
        out.push_str(&format!("# {}: {}\n", d.display_name, d.provenance()));
    }
    out.push_str(&big_weights_note(spec).unwrap_or_default());
    let trained = spec.model.decoder().and_then(|d| match &d.source {
        crate::decoder::DecoderSource::Trained { folder, bos, .. } => Some((folder.clone(), *bos)),
        _ => None,
    });
    let checkpoint = team_checkpoint(spec);
    match (&trained, &checkpoint) {
        // The folder this repository ships, as transformers loads it (run from its root).
        (Some((folder, _)), _) => out.push_str(&format!(
            "model = transformers.AutoModelForCausalLM.from_pretrained(\"models/{folder}\", dtype=torch.float32).to(device)\n"
        )),
        // The team's checkpoint as it sits on disk, read by transformers as Gradless reads it.
        (None, Some((path, setup))) => out.push_str(&format!(
            "{setup}model = transformers.AutoModelForCausalLM.from_pretrained({path}, dtype=torch.float32).to(device)\n"
        )),
        (None, None) => out.push_str(&format!("model = {}.to(device)\n", spec.model.python_constructor())),
    }
    out.push_str(if spec.eval {
        "model.eval()   # attention dropout off\n"
    } else {
        "model.train()  # attention dropout on: every step's output changes\n"
    });
    match spec.advanced.weights {
        WeightsDtype::Fp32 => {}
        WeightsDtype::Fp16 => out.push_str("model = model.half()  # weights stored in fp16, cast once\n"),
        WeightsDtype::Bf16 => {
            out.push_str("model = model.to(torch.bfloat16)  # weights stored in bf16, cast once\n")
        }
    }
    out.push_str(&quantize_lines(spec));
    let text = spec.generate.as_ref().and_then(|g| g.prompt_text.as_ref());
    let tokenized = spec.model.decoder().is_some_and(|d| d.tokenizer().is_some());
    match (trained, text) {
        (Some((_, bos)), Some(text)) => out.push_str(&format!(
            "text = {}\nprompt = torch.tensor([[{bos}] + list(text.encode(\"utf-8\"))] * {}, device=device)  # [BOS] + the text's bytes\n",
            serde_json::to_string(text).unwrap_or_default(),
            spec.batch
        )),
        (None, Some(text)) if tokenized => out.push_str(&format!(
            "tokenizer = transformers.AutoTokenizer.from_pretrained({})  # the folder's tokenizer.json\ntext = {}\nprompt = tokenizer([text] * {}, return_tensors=\"pt\").input_ids.to(device)  # as Gradless encodes it: {prompt} tokens\n",
            checkpoint.as_ref().map_or("MODEL_DIR".to_string(), |(path, _)| path.clone()),
            serde_json::to_string(text).unwrap_or_default(),
            spec.batch
        )),
        _ => out.push_str(&format!(
            "prompt = torch.randint(0, {vocab}, ({}, {prompt}), device=device)  # random token ids\n",
            spec.batch
        )),
    }
    out.push_str(&format!("new_tokens = {new_tokens}\n\n"));
    (out, prompt, new_tokens)
}

/// The grad-mode and autocast lines that open the generation, and the indent inside them.
fn regions(spec: &RunSpec) -> (String, String) {
    let mut out = String::new();
    let mut indent = String::new();
    match spec.grad {
        GradMode::Enabled => out.push_str(
            "# autograd is on: every step's graph stays alive through the cache\n",
        ),
        GradMode::NoGrad => {
            out.push_str("with torch.no_grad():  # no graph: the cache holds only keys and values\n");
            indent.push_str("    ");
        }
        GradMode::InferenceMode => {
            out.push_str("with torch.inference_mode():  # no_grad, and no version counters or view tracking\n");
            indent.push_str("    ");
        }
    }
    if spec.autocast != Autocast::Off {
        let dtype = if spec.autocast == Autocast::Fp16 {
            "torch.float16"
        } else {
            "torch.bfloat16"
        };
        out.push_str(&format!(
            "{indent}with torch.autocast(device_type=torch.device(device).type, dtype={dtype}):\n"
        ));
        indent.push_str("    ");
    }
    (out, indent)
}

/// A hand-written greedy loop with the cache the spec asks for; `y` holds the new tokens.
pub fn hand_written_loop(spec: &RunSpec) -> String {
    let (mut out, _, _) = header(spec);
    let cache = spec.generate.as_ref().map_or(KvCacheKind::Dynamic, |g| g.cache);
    let (open, i) = regions(spec);
    out.push_str(&open);
    match cache {
        KvCacheKind::Off => {
            out.push_str(&format!("{i}ids = prompt\n"));
            out.push_str(&format!("{i}for step in range(new_tokens):  # use_cache=False: every step recomputes the whole prefix\n"));
            out.push_str(&format!("{i}    logits = model(ids, use_cache=False, logits_to_keep=1).logits\n"));
            out.push_str(&format!("{i}    next_id = logits[:, -1].argmax(-1, keepdim=True)\n"));
            out.push_str(&format!("{i}    ids = torch.cat([ids, next_id], dim=1)\n"));
            out.push_str(&format!("{i}y = ids[:, prompt.shape[1]:]\n"));
        }
        KvCacheKind::Dynamic | KvCacheKind::Static => {
            out.push_str(&cache_lines(spec, &i));
            out.push_str(&format!("{i}position = torch.arange(prompt.shape[1], device=device)\n"));
            out.push_str(&format!(
                "{i}logits = model(prompt, past_key_values=cache, cache_position=position, logits_to_keep=1).logits  # prefill\n"
            ));
            out.push_str(&format!("{i}next_id = logits[:, -1].argmax(-1, keepdim=True)\n"));
            out.push_str(&format!("{i}tokens = [next_id]\n"));
            out.push_str(&format!("{i}for step in range(1, new_tokens):  # one token per step: reads every weight and the cache\n"));
            out.push_str(&format!("{i}    position = position[-1:] + 1\n"));
            out.push_str(&format!(
                "{i}    logits = model(next_id, past_key_values=cache, cache_position=position, logits_to_keep=1).logits\n"
            ));
            out.push_str(&format!("{i}    next_id = logits[:, -1].argmax(-1, keepdim=True)\n"));
            out.push_str(&format!("{i}    tokens.append(next_id)\n"));
            out.push_str(&format!("{i}y = torch.cat(tokens, dim=1)\n"));
        }
    }
    out.push_str(&text_tail(spec));
    out
}

/// For a text prompt: the continuation printed as text (the byte model's ids below 256 are
/// bytes; a tokenized model's are decoded by its tokenizer).
fn text_tail(spec: &RunSpec) -> String {
    let tokenized = spec.model.decoder().is_some_and(|d| d.tokenizer().is_some());
    match spec.generate.as_ref().and_then(|g| g.prompt_text.as_ref()) {
        Some(_) if tokenized => "print(text + tokenizer.decode(y[0], skip_special_tokens=True))\n".into(),
        Some(_) => "print(text + bytes(t for t in y[0].tolist() if t < 256).decode(\"utf-8\", \"replace\"))\n".into(),
        None => String::new(),
    }
}

/// A team decoder with weights: the path transformers reads it from (a Python expression)
/// and the lines that set it up. A folder of the models directory is read under the
/// server's `--models-dir` (MODELS_DIR, to be set where the snippet runs); a hub cache's
/// snapshot by its repository name, offline.
fn team_checkpoint(spec: &RunSpec) -> Option<(String, String)> {
    let d = spec.model.decoder()?;
    let crate::decoder::DecoderSource::Team { folder, weights: true, .. } = &d.source else {
        return None;
    };
    Some(match folder.contains("/snapshots/") {
        true => (
            format!("{}, local_files_only=True", serde_json::to_string(&d.name).unwrap_or_default()),
            "# from the Hugging Face cache the server reads (HF_HUB_CACHE), never the network\n".into(),
        ),
        false => (
            format!("f\"{{MODELS_DIR}}/{folder}\""),
            "MODELS_DIR = \"models\"  # the server's --models-dir\n".into(),
        ),
    })
}

/// The same generation through `model.generate`; `y` holds the new tokens.
pub fn with_generate(spec: &RunSpec) -> String {
    let (mut out, _, _) = header(spec);
    let cache = spec.generate.as_ref().map_or(KvCacheKind::Dynamic, |g| g.cache);
    let (open, i) = regions(spec);
    let open = match spec.grad {
        // generate() is decorated with torch.no_grad(): a hand-written loop's grad setting
        // does not reach inside it.
        GradMode::Enabled => open.replacen(
            "# autograd is on: every step's graph stays alive through the cache",
            "# generate() runs under torch.no_grad() itself: no graph whatever the caller's mode",
            1,
        ),
        _ => open,
    };
    out.push_str(&open);
    let stored = spec.generate.as_ref().is_some_and(|g| !g.kv_dtype.is_default()) && cache != KvCacheKind::Off;
    if stored {
        // A cache of another dtype is made here and handed to generate().
        out.push_str(&cache_lines(spec, &i));
    }
    let cache_args = match cache {
        _ if stored => "past_key_values=cache",
        KvCacheKind::Dynamic => "use_cache=True",
        KvCacheKind::Static => "use_cache=True, cache_implementation=\"static\"",
        KvCacheKind::Off => "use_cache=False",
    };
    out.push_str(&format!("{i}out = model.generate(\n"));
    out.push_str(&format!("{i}    prompt, attention_mask=torch.ones_like(prompt),\n"));
    out.push_str(&format!("{i}    max_new_tokens=new_tokens, min_new_tokens=new_tokens,  # fixed length, as Gradless measures\n"));
    out.push_str(&format!("{i}    do_sample=False, {cache_args}, pad_token_id=0,\n"));
    out.push_str(&format!("{i})\n"));
    out.push_str("y = out[:, prompt.shape[1]:]\n");
    out.push_str(&text_tail(spec));
    out
}

/// The lines that make the loop's cache, `cache`, at indent `i`: transformers' dynamic or
/// static cache, its layers storing keys and values in `kv_dtype` when the spec sets one
/// (cast on the way in, back to the activations' dtype for attention, as Gradless's cache
/// does); fp8 is transformers' own per-tensor-scaled fp8 cache.
fn cache_lines(spec: &RunSpec, i: &str) -> String {
    let g = spec.generate.clone().unwrap_or_default();
    let make = match g.cache {
        KvCacheKind::Static => "transformers.StaticCache(config=model.config, max_cache_len=prompt.shape[1] + new_tokens)  # allocated once, written in place",
        _ => "transformers.DynamicCache(config=model.config)  # grows by concatenation each step",
    };
    let dtype = match g.kv_dtype {
        crate::KvDtype::AsActivations => return format!("{i}cache = {make}\n"),
        crate::KvDtype::Fp8E4m3 => {
            return format!(
                "{i}# fp8 e4m3 keys and values, one scale per layer's keys and values, set by the prefill\n\
{i}cache = transformers.QuantizedCache(backend=\"fp8\", config=model.config)\n"
            )
        }
        crate::KvDtype::Bf16 => "torch.bfloat16",
        crate::KvDtype::Fp16 => "torch.float16",
    };
    let (base, args) = match g.cache {
        KvCacheKind::Static => ("StaticLayer", "max_cache_len=layer.max_cache_len"),
        _ => ("DynamicLayer", ""),
    };
    format!(
        "{i}class StoredLayer(transformers.cache_utils.{base}):  # keys and values kept in {dtype}, attended to in the activations' dtype\n\
{i}    def update(self, key_states, value_states, *args, **kwargs):\n\
{i}        keys, values = super().update(key_states.to({dtype}), value_states.to({dtype}), *args, **kwargs)\n\
{i}        return keys.to(key_states.dtype), values.to(value_states.dtype)\n\
{i}cache = {make}\n\
{i}cache.layers = [StoredLayer({args}) for layer in cache.layers]\n"
    )
}

/// The blocks' linear layers replaced by weight-only quantized ones that call PyTorch's
/// packed kernels, quantized as gpt-fast's `quantize.py` does (what Gradless's engine runs;
/// the embedding, the norms and the LM head stay as they are). Empty when unquantized.
fn quantize_lines(spec: &RunSpec) -> String {
    let q = spec.generate.as_ref().map_or(crate::LinearQuant::NONE, |g| g.quant());
    let (class, name) = match q {
        crate::LinearQuant::None => return String::new(),
        crate::LinearQuant::Int8 => (INT8_LINEAR.to_string(), "Int8Linear"),
        crate::LinearQuant::Int4 { group_size } => (INT4_LINEAR.replace("GROUP", &group_size.to_string()), "Int4Linear"),
    };
    format!(
        "{class}\
with torch.no_grad():  # the blocks' linear layers only: the embedding, norms and LM head stay as they are
    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name, child in list(parent.named_children()):
                if isinstance(child, torch.nn.Linear):
                    setattr(parent, name, {name}(child))
"
    )
}

const INT8_LINEAR: &str = "# int8 weights, one scale per output channel (gpt-fast's WeightOnlyInt8Linear)
class Int8Linear(torch.nn.Module):
    def __init__(self, linear):
        super().__init__()
        w = linear.weight.detach().float()
        top = torch.maximum(-w.amin(1).clamp(max=0), w.amax(1).clamp(min=0))
        scales = (top / 127.5).clamp(min=torch.finfo(torch.float32).eps).to(linear.weight.dtype)
        self.register_buffer(\"weight\", (w / scales.float()[:, None]).round().clamp(-128, 127).to(torch.int8))
        self.register_buffer(\"scales\", scales)
        self.bias = linear.bias

    def forward(self, x):
        y = torch._weight_int8pack_mm(x.reshape(-1, x.shape[-1]), self.weight, self.scales)
        y = y.view(*x.shape[:-1], -1)
        return y if self.bias is None else y + self.bias
";

const INT4_LINEAR: &str = "# int4 weights, a scale and a zero per group of GROUP input columns (gpt-fast's WeightOnlyInt4Linear)
class Int4Linear(torch.nn.Module):
    def __init__(self, linear, group=GROUP):
        super().__init__()
        w = linear.weight.detach().float()
        n, k = w.shape
        g = w.reshape(n, k // group, group)
        hi, lo = g.amax(2, keepdim=True), g.amin(2, keepdim=True)
        scales = ((hi - lo).clamp(min=1e-6) / 15).to(linear.weight.dtype)
        zeros = (lo + scales.float() * 8).to(linear.weight.dtype)
        q = ((g - (zeros.float() - scales.float() * 8)) / scales.float()).round().clamp(0, 15)
        q = q.to(torch.int32).reshape(n, k)
        tiles = next((t for t in (8, 4, 2) if k % (t * 16) == 0), 1)
        if w.is_cuda:
            packed = torch._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8), tiles)
        else:
            packed = torch._convert_weight_to_int4pack_for_cpu(q, tiles)
        self.register_buffer(\"packed\", packed)
        self.register_buffer(\"scales_and_zeros\", torch.cat([scales, zeros], 2).transpose(0, 1).contiguous())
        self.group, self.bias = group, linear.bias

    def forward(self, x):
        mm = torch._weight_int4pack_mm if x.is_cuda else torch._weight_int4pack_mm_for_cpu
        y = mm(x.reshape(-1, x.shape[-1]), self.packed, self.group, self.scales_and_zeros)
        y = y.view(*x.shape[:-1], -1)
        return y if self.bias is None else y + self.bias
";
