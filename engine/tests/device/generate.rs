//! Generate runs obey physics, per device (see `common`): the KV cache holds exactly the
//! formula's bytes; dynamic, static and no cache give the same greedy tokens; without a
//! cache a step's time grows with the position; grad keeps a graph growing on top of the
//! cache; a static cache never grows; memory returns to the baseline; the masked static
//! cache (what CUDA graph replay attends over) gives today's tokens. Nothing here compares
//! against a number copied from an earlier run.
//!
//! Memory is asserted as each device's allocator holds it ([`allocated_for`]): the CPU's
//! counter sees the bytes asked for; CUDA's caching allocator rounds every tensor up to
//! whole 512 B blocks (a `[batch, 1]` int64 token holds 512 B, not `batch × 8`).

use crate::common;

use engine::device::allocated_for;
use engine::{MeasureError, Worker, WorkerConfig};
use protocol::{
    DeviceKind, FailureKind, GenPhase, GenerateSpec, GradMode, KvCacheKind, ModelId, Report,
    RunSpec,
};

fn tiny() -> ModelId {
    protocol::decoder::CPU_PRESET.parse().unwrap()
}

fn generate(device: DeviceKind, batch: u32, prompt: u32, new_tokens: u32, cache: KvCacheKind, grad: GradMode) -> RunSpec {
    RunSpec {
        model: tiny(),
        device: common::choice(device),
        batch,
        input_size: Some(prompt),
        eval: true,
        grad,
        threads: Some(1),
        generate: Some(GenerateSpec { new_tokens, cache, ..Default::default() }),
        ..RunSpec::default()
    }
}

/// One generation at a time in this binary: the timing test must not share the two cores
/// with the others' device threads.
use crate::common::worker;

fn run(w: &Worker, spec: RunSpec) -> Report {
    let mut steps = 0;
    let report = w
        .measure(spec, |e| {
            if matches!(e, protocol::Event::Step { .. }) {
                steps += 1;
            }
        })
        .expect("generation succeeds");
    let g = report.generation.as_ref().expect("a generation section");
    assert_eq!(steps, g.steps.len(), "every step was streamed");
    // Every generation says where its weights came from; random ones say so.
    let source = g.weights_source.as_deref().expect("where the weights came from");
    let random = report.spec.model.decoder().is_some_and(|d| d.random_weights());
    assert_eq!(source.contains("seeded"), random, "{source}");
    report
}

// The generation cards' rank correlation (Spearman's, of `ys` against their order): the
// test and the `use-cache-off` card read the same statistic.

per_device! {
fn kv_cache_bytes_equal_the_formula_at_every_step(device) {
    let w = worker();
    let (batch, prompt, n) = (2, 12, 9);
    let r = run(&w, generate(device, batch, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad));
    let g = r.generation.unwrap();
    let config = &tiny().decoder().unwrap().config;
    // After N new tokens the cache holds prompt + N − 1 positions, as transformers' does.
    assert_eq!(g.kv_cache_tokens, prompt + n - 1);
    assert_eq!(g.kv_cache_bytes, g.kv_cache_formula_bytes);
    assert_eq!(g.kv_cache_bytes, config.kv_cache_bytes((prompt + n - 1) as u64, batch as u64, 4));
    for s in &g.steps {
        let held = prompt as u64 + s.step as u64;
        assert_eq!(s.kv_cache_bytes, config.kv_cache_bytes(held, batch as u64, 4), "step {}", s.step);
    }
    assert_eq!(g.tokens.len(), batch as usize);
    assert!(g.tokens.iter().all(|t| t.len() == n as usize));
    assert_eq!(g.prompt_tokens[0].len(), prompt as usize);
    assert_eq!(r.memory.leaked_bytes, 0, "memory returned to the baseline");
}
}

per_device! {
fn dynamic_static_and_no_cache_generate_the_same_tokens(device) {
    let w = worker();
    let runs: Vec<Report> = protocol::words::all::<KvCacheKind>().iter().copied()
        .into_iter()
        .map(|cache| run(&w, generate(device, 2, 10, 12, cache, GradMode::NoGrad)))
        .collect();
    let tokens: Vec<_> = runs.iter().map(|r| r.generation.clone().unwrap().tokens).collect();
    assert_eq!(tokens[0], tokens[1], "dynamic vs static");
    assert_eq!(tokens[0], tokens[2], "dynamic vs off");
    // The preset's random weights are wide enough that greedy decoding does not just
    // repeat one token, so the equality above compares something.
    let distinct: std::collections::HashSet<_> = tokens[0][0].iter().collect();
    assert!(distinct.len() > 1, "{:?}", tokens[0][0]);
    for r in &runs {
        assert_eq!(r.memory.leaked_bytes, 0, "{}", r.spec.label());
    }
}
}

per_device! {
fn without_a_cache_step_time_rises_with_the_position(device) {
    let w = worker();
    // From 9 to 103 tokens per uncached step: compute, not the per-op dispatch, then
    // decides the step's time, and its growth stands out of a busy machine's noise.
    let (prompt, n) = (8, 96);
    let off = run(&w, generate(device, 1, prompt, n, KvCacheKind::Off, GradMode::NoGrad)).generation.unwrap();
    let cached = run(&w, generate(device, 1, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad)).generation.unwrap();
    let decode = |g: &protocol::GenerationReport| -> Vec<f64> {
        g.steps.iter().filter(|s| s.phase == GenPhase::Decode).map(|s| s.latency_ms).collect()
    };
    let (off_ms, cached_ms) = (decode(&off), decode(&cached));
    assert_eq!(off.tokens, cached.tokens);
    assert_eq!(off.kv_cache_bytes, 0);
    assert!(off.steps.iter().all(|s| s.tokens_in as u64 == prompt as u64 + s.step as u64));
    if device == DeviceKind::Cuda {
        // Not on CUDA: the tiny decoder's step is launch-bound there (a few hundred
        // kernels of a few microseconds each), so 9 or 103 tokens per step take the same
        // time on a big GPU. The use-cache-off card measures the effect on the 1B shape.
        return;
    }
    // Another process's load only ever adds time to a step, in bursts longer than one: the
    // fastest step of a window is the one the machine left alone. So the windows are
    // compared by their minima (a rank correlation over all steps read -0.05 on a busy CI
    // machine whose bursts doubled 20 steps at a time).
    let fastest = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let window = 24;
    let (first, last) = (fastest(&off_ms[..window]), fastest(&off_ms[off_ms.len() - window..]));
    assert!(last > 1.5 * first, "uncached: fastest of the first {window} steps {first:.3} ms, of the last {last:.3} ms: {off_ms:?}");
    // Each uncached step reprocesses ~prompt + step tokens where a cached one feeds one.
    let tail = 8;
    let (a, b) = (fastest(&off_ms[off_ms.len() - tail..]), fastest(&cached_ms[cached_ms.len() - tail..]));
    assert!(a > 2.0 * b, "uncached {a:.3} ms vs cached {b:.3} ms");
}
}

per_device! {
fn grad_keeps_a_growing_graph_on_top_of_the_cache(device) {
    let w = worker();
    let (prompt, n) = (16, 16);
    let grad = run(&w, generate(device, 1, prompt, n, KvCacheKind::Dynamic, GradMode::Enabled));
    let no_grad = run(&w, generate(device, 1, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad));
    let (g, ng) = (grad.generation.as_ref().unwrap(), no_grad.generation.as_ref().unwrap());
    let last = |g: &protocol::GenerationReport| g.steps.last().unwrap().allocated_bytes;
    assert!(
        last(g) > last(ng) + ng.kv_cache_bytes,
        "grad {} vs no_grad {} + KV {}",
        last(g),
        last(ng),
        ng.kv_cache_bytes
    );
    // The excess grows step after step, and no_grad holds nothing but the cache.
    let graph: Vec<u64> = g.steps.iter().map(|s| s.graph_bytes).collect();
    assert!(graph.windows(2).all(|w| w[1] > w[0]), "{graph:?}");
    assert!(ng.steps.iter().all(|s| s.graph_bytes == 0), "{:?}", ng.steps);
    // Freed when the generation's outputs are dropped.
    assert_eq!(grad.memory.leaked_bytes, 0);
}
}

per_device! {
fn a_static_cache_never_grows(device) {
    let w = worker();
    let (batch, prompt, n) = (2, 8, 12);
    let r = run(&w, generate(device, batch, prompt, n, KvCacheKind::Static, GradMode::NoGrad));
    let g = r.generation.unwrap();
    let config = &tiny().decoder().unwrap().config;
    // Allocated once, for prompt + new tokens.
    assert_eq!(g.kv_cache_tokens, prompt + n);
    assert!(g.steps.iter().all(|s| s.kv_cache_bytes == config.kv_cache_bytes((prompt + n) as u64, batch as u64, 4)));
    // Over the decode steps only the generated token ids (int64) are added: one
    // `[batch, 1]` tensor per step, as the device's allocator holds it.
    let decode: Vec<&protocol::GenStep> = g.steps.iter().filter(|s| s.phase == GenPhase::Decode).collect();
    for pair in decode.windows(2) {
        assert_eq!(pair[1].allocated_bytes - pair[0].allocated_bytes, allocated_for(device, batch as u64 * 8), "{pair:?}");
    }
    assert_eq!(r.memory.leaked_bytes, 0);
}
}

#[test]
fn a_decoder_too_large_for_the_budget_is_refused_naming_the_bytes() {
    let _one_at_a_time = crate::common::cpu_lock();
    let w = Worker::start(WorkerConfig {
        lab: engine::LabConfig {
            memory_limit_bytes: Some(512 << 20),
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    let spec = RunSpec {
        model: "llama_3_1_8b".parse().unwrap(),
        device: protocol::DeviceChoice::Cpu,
        batch: 1,
        input_size: Some(16),
        generate: Some(GenerateSpec { new_tokens: 8, cache: KvCacheKind::Dynamic, ..Default::default() }),
        ..RunSpec::default()
    };
    let e = w.check(spec.clone()).map(|_| ()).and_then(|_| w.admit(spec.clone()).map(|_| ()));
    let e = e.unwrap_err();
    assert_eq!(e.field, "model");
    assert!(e.message.contains("weights 29.") || e.message.contains("GiB"), "{}", e.message);
    // The worker is still there and runs the next generation.
    let r = w.measure(generate(DeviceKind::Cpu, 1, 4, 3, KvCacheKind::Dynamic, GradMode::NoGrad), |_| {});
    assert!(r.is_ok(), "{r:?}");
    // A generate run on a model that is not a decoder is refused by name.
    let bad = RunSpec { model: ModelId::Resnet18, input_size: None, ..generate(DeviceKind::Cpu, 1, 4, 3, KvCacheKind::Dynamic, GradMode::NoGrad) };
    let e = w.check(bad).unwrap_err();
    assert_eq!(e.field, "model");
    assert!(e.message.contains("llama_tiny"), "{}", e.message);
    match w.measure(generate(DeviceKind::Cpu, 1, 4, 0, KvCacheKind::Dynamic, GradMode::NoGrad), |_| {}) {
        Err(MeasureError::Rejected(e)) => assert!(e.to_string().contains("new_tokens"), "{e}"),
        other => panic!("{other:?}"),
    }
    let _ = FailureKind::OutOfMemory;
}

per_device! {
fn every_step_holds_exactly_its_cache_and_tokens(device) {
    let w = worker();
    let (batch, prompt, n) = (2u64, 12u64, 6u64);
    let config = &tiny().decoder().unwrap().config;
    let layers = config.num_hidden_layers as u64;
    let token = allocated_for(device, batch * 8);
    for cache in protocol::words::all::<KvCacheKind>().iter().copied() {
        let r = run(&w, generate(device, batch as u32, prompt as u32, n as u32, cache, GradMode::NoGrad));
        let g = r.generation.unwrap();
        for s in &g.steps {
            let step = s.step as u64;
            // Keys and values of each layer: 2 × layers tensors of equal size.
            let per_tensor = s.kv_cache_bytes / (2 * layers).max(1);
            let cache_held = 2 * layers * allocated_for(device, per_tensor);
            // Without a cache the loop also holds the sequence so far (prompt + tokens).
            let sequence = match cache {
                KvCacheKind::Off => allocated_for(device, (prompt + step + 1) * batch * 8),
                _ => 0,
            };
            let expected = r.memory.baseline_bytes + cache_held + (step + 1) * token + sequence;
            assert_eq!(s.allocated_bytes, expected, "{} step {step}: {s:?}", cache.as_str());
            assert_eq!(s.graph_bytes, 0, "{} step {step}", cache.as_str());
        }
        assert_eq!(r.memory.leaked_bytes, 0, "{}", cache.as_str());
    }
}
}

per_device! {
fn under_autocast_the_kv_formula_equals_the_measured_cache(device) {
    let w = worker();
    let (batch, prompt, n) = (1, 16, 8);
    for cache in [KvCacheKind::Dynamic, KvCacheKind::Static] {
        let spec = RunSpec {
            autocast: protocol::Autocast::Bf16,
            ..generate(device, batch, prompt, n, cache, GradMode::NoGrad)
        };
        let g = run(&w, spec).generation.unwrap();
        // fp32 weights: the keys are fp32 (RoPE's fp32 cos and sin), the values are kept in
        // the keys' dtype as transformers' caches keep them.
        assert_eq!(g.kv_cache_element_bytes, 4, "{}", cache.as_str());
        assert_eq!(g.kv_cache_value_element_bytes, 4, "{}", cache.as_str());
        assert_eq!(g.kv_cache_bytes, g.kv_cache_formula_bytes, "{}", cache.as_str());
    }
}
}

per_device! {
fn each_phase_names_the_attention_backend_it_ran(device) {
    let w = worker();
    let g = run(&w, generate(device, 1, 12, 4, KvCacheKind::Dynamic, GradMode::NoGrad)).generation.unwrap();
    let a = g.attention.expect("the backends are reported");
    let decode = a.decode.expect("a decode step ran");
    match device {
        // The CPU has its flash kernel and math.
        DeviceKind::Cpu => {
            assert!(matches!(a.prefill, protocol::SdpBackend::Flash | protocol::SdpBackend::Math), "{a:?}");
            assert!(matches!(decode, protocol::SdpBackend::Flash | protocol::SdpBackend::Math), "{a:?}");
        }
        // cuDNN attention builds a plan per key length: switched off for decode, and said.
        DeviceKind::Cuda => {
            assert_ne!(decode, protocol::SdpBackend::Cudnn, "{a:?}");
            assert!(a.note.contains("cuDNN"), "{a:?}");
        }
    }
    // The admission's prediction of the prefill's backend agrees on whether the scores
    // are materialised.
    let spec = w.check(generate(device, 1, 12, 4, KvCacheKind::Dynamic, GradMode::NoGrad)).unwrap();
    let predicted = engine::lab::prefill_backend(spec.spec());
    assert_eq!(predicted.materialises_scores(), a.prefill.materialises_scores(), "{predicted:?} vs {a:?}");
}
}

per_device! {
fn the_bandwidth_counts_the_positions_attended_not_the_capacity(device) {
    let w = worker();
    let (prompt, n) = (8, 10);
    let st = run(&w, generate(device, 1, prompt, n, KvCacheKind::Static, GradMode::NoGrad)).generation.unwrap();
    let dy = run(&w, generate(device, 1, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad)).generation.unwrap();
    let config = &tiny().decoder().unwrap().config;
    for (s, d) in st.steps.iter().zip(&dy.steps).filter(|(s, _)| s.phase == GenPhase::Decode) {
        let want = st.weights_bytes + config.kv_cache_bytes(s.position as u64 + 1, 1, 4);
        assert_eq!(engine::lab::generate::decode_bytes_read(&st, s), want, "step {}", s.step);
        // The dynamic cache holds exactly what the step attended to.
        assert_eq!(engine::lab::generate::decode_bytes_read(&dy, d), dy.weights_bytes + d.kv_cache_bytes);
    }
}
}

per_device! {
fn the_masked_whole_capacity_path_gives_todays_tokens(device) {
    use engine::models::decoder::{Decoder, KvCache, Logits, Position};
    use engine::trace::Probe;
    use tch::{Kind, Tensor};
    common::require(device);
    let _no_grad = tch::no_grad_guard();
    let dev = engine::torch_call::tch_device(device);
    tch::manual_seed(0);
    let vs = tch::nn::VarStore::new(dev);
    let config = tiny().decoder().unwrap().config.clone();
    let decoder = Decoder::new(&vs.root(), &config);
    let layers = config.num_hidden_layers as usize;
    let (batch, prompt, n) = (2i64, 10i64, 12i64);
    let ids = Tensor::randint(config.vocab_size as i64, [batch, prompt], (Kind::Int64, dev));
    // Greedy decoding; `masked`: the masked static cache, positions as device tensors.
    let greedy = |masked: bool| {
        let mut cache = match masked {
            true => KvCache::static_masked(layers, prompt + n),
            false => KvCache::new(KvCacheKind::Static, layers, prompt + n),
        };
        let (mut fed, mut position) = (ids.shallow_clone(), 0);
        let (mut tokens, mut logits_seen, mut sdp) = (vec![], vec![], None);
        for step in 0..n {
            let pos = Tensor::from_slice(&[position]).to_device(dev);
            let at = if masked && step > 0 { Position::Tensor(&pos) } else { Position::At(position) };
            let ask = if step == 1 { Some(&mut sdp) } else { None };
            let logits = decoder.forward_at(&fed, at, &mut cache, false, Logits::Last, &mut Probe::off(), ask);
            let next = logits.argmax(-1, false);
            position += fed.size()[1];
            logits_seen.push(logits.to_device(tch::Device::Cpu));
            tokens.push(Vec::<i64>::try_from(next.view([-1]).to_device(tch::Device::Cpu)).unwrap());
            fed = next;
        }
        assert!(sdp.is_some(), "the decode step's backend is named");
        (tokens, logits_seen)
    };
    let (today, today_logits) = greedy(false);
    let (masked, masked_logits) = greedy(true);
    assert_eq!(today, masked, "greedy tokens");
    let distinct: std::collections::HashSet<_> = today.iter().flatten().collect();
    assert!(distinct.len() > 1, "{today:?}");
    for (step, (a, b)) in today_logits.iter().zip(&masked_logits).enumerate() {
        let diff = (a - b).abs().max().double_value(&[]);
        let scale = a.abs().max().double_value(&[]).max(1.0);
        assert!(diff <= 1e-4 * scale, "step {step}: logits differ by {diff} (scale {scale})");
    }
}
}

per_device! {
fn cuda_graph_replay_of_the_decode_step_is_accepted_on_cuda_only(device) {
    let w = worker();
    let graph = |cache| RunSpec {
        advanced: protocol::Advanced { cuda_graph: true, ..Default::default() },
        ..generate(device, 2, 10, 12, cache, GradMode::NoGrad)
    };
    // A dynamic cache is told to use the static one...
    let e = w.check(graph(KvCacheKind::Dynamic)).unwrap_err();
    assert_eq!(e.field, "advanced.cuda_graph");
    assert!(e.message.contains("static"), "{}", e.message);
    match device {
        // ...which a CPU refuses by the same field, saying why (no GPU kernels to replay).
        DeviceKind::Cpu => {
            let e = w.check(graph(KvCacheKind::Static)).unwrap_err();
            assert_eq!(e.field, "advanced.cuda_graph");
            assert!(e.message.contains("CPU"), "{}", e.message);
        }
        // ...and CUDA runs: the replayed steps give the eager static cache's tokens and
        // leave nothing behind (the capture's side stream was primed at start-up).
        DeviceKind::Cuda => {
            let replayed = run(&w, graph(KvCacheKind::Static));
            let eager = run(&w, generate(device, 2, 10, 12, KvCacheKind::Static, GradMode::NoGrad));
            let (r, e) = (replayed.generation.as_ref().unwrap(), eager.generation.as_ref().unwrap());
            assert!(r.decode_graph);
            assert_eq!(r.tokens, e.tokens);
            assert_eq!(r.kv_cache_bytes, e.kv_cache_bytes);
            assert_eq!(replayed.memory.leaked_bytes, 0, "{:?}", replayed.memory);
            let decode = r.attention.as_ref().and_then(|a| a.decode);
            assert!(matches!(decode, Some(protocol::SdpBackend::MemoryEfficient | protocol::SdpBackend::Math | protocol::SdpBackend::Flash)), "{:?}", r.attention);
        }
    }
}
}

per_device! {
/// Issue 54: a generation runs its steps under the spec's CUDA math switches, as a forward
/// run does around its passes; a CPU refuses them, naming the field.
fn a_generation_runs_under_the_specs_math_switches(device) {
    use engine::torch_ext::BackendFlags;
    let w = worker();
    let with = |tf32, cudnn_benchmark| RunSpec {
        advanced: protocol::Advanced { tf32, cudnn_benchmark, ..Default::default() },
        ..generate(device, 1, 8, 4, KvCacheKind::Dynamic, GradMode::NoGrad)
    };
    match device {
        DeviceKind::Cpu => {
            for (spec, field) in [(with(true, false), "advanced.tf32"), (with(false, true), "advanced.cudnn_benchmark")] {
                let e = w.check(spec).unwrap_err();
                assert_eq!(e.field, field, "{e}");
            }
        }
        DeviceKind::Cuda => {
            let before = BackendFlags::read().unwrap();
            for (tf32, bench) in [(true, true), (false, false)] {
                let checked = w.check(with(tf32, bench)).unwrap();
                // Read on the device thread while each step is streamed: inside the loop.
                let seen = w
                    .call(move |lab| {
                        let mut seen = vec![];
                        lab.measure(&checked, &engine::RunControl::default(), &mut |e| {
                            if matches!(e, protocol::Event::Step { .. }) {
                                seen.push(BackendFlags::read().unwrap());
                            }
                        })
                        .unwrap();
                        seen
                    })
                    .unwrap();
                let want = BackendFlags { tf32_matmul: tf32, tf32_cudnn: tf32, cudnn_benchmark: bench };
                assert_eq!(seen, vec![want; 4], "tf32 {tf32}, cudnn_benchmark {bench}");
                assert_eq!(BackendFlags::read().unwrap(), before, "restored after the run");
            }
        }
    }
}
}

#[test]
fn admission_counts_the_attention_scores_only_where_math_runs() {
    let _one_at_a_time = crate::common::cpu_lock();
    let spec = |device, weights| RunSpec {
        model: "llama_3_1_8b".parse().unwrap(),
        device,
        batch: 32,
        input_size: Some(8192),
        eval: true,
        grad: GradMode::InferenceMode,
        advanced: protocol::Advanced { weights, ..Default::default() },
        generate: Some(GenerateSpec { new_tokens: 64, cache: KvCacheKind::Static, ..Default::default() }),
        ..RunSpec::default()
    };
    let cuda = engine::lab::decoder_footprint(&spec(protocol::DeviceChoice::Cuda, protocol::WeightsDtype::Bf16)).unwrap();
    let c = &"llama_3_1_8b".parse::<ModelId>().unwrap().decoder().unwrap().config;
    let scores = 32 * c.num_attention_heads as u64 * 8192 * 8192 * 4;
    // Flash never holds the scores: the footprint is weights + cache + layer temporaries.
    assert!(cuda.activations < scores / 4, "{cuda:?}");
    assert!(cuda.total() < 200 << 30, "{cuda:?}");
    // Train mode with dropout on the CPU runs math: its scores count.
    let tiny_train = RunSpec { eval: false, grad: GradMode::NoGrad, ..generate(DeviceKind::Cpu, 1, 64, 4, KvCacheKind::Dynamic, GradMode::NoGrad) };
    assert_eq!(engine::lab::prefill_backend(&tiny_train), protocol::SdpBackend::Math);
    // The prediction agrees with libtorch on the CPU, dropout or not, fp32 or bf16.
    use tch::{Kind, Tensor};
    let _g = tch::no_grad_guard();
    for (dropout, kind, weights) in [(0.0, Kind::Float, protocol::WeightsDtype::Fp32), (0.1, Kind::Float, protocol::WeightsDtype::Fp32), (0.0, Kind::BFloat16, protocol::WeightsDtype::Bf16)] {
        let q = Tensor::randn([1, 8, 64, 32], (kind, tch::Device::Cpu));
        let kv = Tensor::randn([1, 2, 64, 32], (kind, tch::Device::Cpu));
        let chosen = engine::torch_ext::sdp_choice(&q, &kv, &kv, None, dropout, true, true).unwrap().unwrap();
        let s = RunSpec {
            eval: dropout == 0.0,
            advanced: protocol::Advanced { weights, ..Default::default() },
            ..tiny_train.clone()
        };
        assert_eq!(engine::lab::prefill_backend(&s), chosen, "dropout {dropout} {kind:?}");
    }
}

#[test]
fn a_decoder_is_built_in_its_dtype_without_an_fp32_transient() {
    let _one_at_a_time = crate::common::cpu_lock();
    let counter = engine::torch_ext::CpuMemoryCounter::install().unwrap();
    let before = counter.read().unwrap().current;
    counter.reset_peak().unwrap();
    let model = engine::models::Model::build_in(tiny(), tch::Device::Cpu, 16, protocol::WeightsDtype::Bf16);
    let peak = counter.read().unwrap().peak - before;
    let held = model.resident_bytes();
    let fp32 = tiny().decoder().unwrap().config.parameters() * 4;
    assert_eq!(model.weights, protocol::WeightsDtype::Bf16);
    // The weights in bf16 plus one variable's temporary at most, never the fp32 copy.
    assert!(held < fp32 / 2 + (64 << 10), "held {held} of fp32 {fp32}");
    assert!(peak < held + fp32 / 4, "peak {peak}, held {held}, fp32 {fp32}");
}
