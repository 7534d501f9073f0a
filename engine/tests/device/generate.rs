//! Generate runs obey physics, per device (see `common`): the KV cache holds exactly the
//! formula's bytes; dynamic, static and no cache give the same greedy tokens; without a
//! cache a step's time grows with the position; grad keeps a graph growing on top of the
//! cache; a static cache never grows; memory returns to the baseline. Nothing here compares
//! against a number copied from an earlier run.

use crate::common;

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
        generate: Some(GenerateSpec { new_tokens, cache }),
        ..RunSpec::default()
    }
}

/// One generation at a time in this binary: the timing test must not share the two cores
/// with the others' device threads.
fn worker() -> (Worker, std::sync::MutexGuard<'static, ()>) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    (Worker::start(WorkerConfig::default()).expect("worker starts"), turn)
}

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
    report
}

/// The generation cards' rank correlation (Spearman's, of `ys` against their order): the
/// test and the `use-cache-off` card read the same statistic.
use engine::pitfalls::generation::rules::rank_correlation;

per_device! {
fn kv_cache_bytes_equal_the_formula_at_every_step(device) {
    let (w, _turn) = worker();
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
    let (w, _turn) = worker();
    let runs: Vec<Report> = KvCacheKind::ALL
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
    let (w, _turn) = worker();
    // From 9 to 103 tokens per uncached step: compute, not the per-op dispatch, then
    // decides the step's time, and its growth stands out of a busy machine's noise.
    let (prompt, n) = (8, 96);
    let off = run(&w, generate(device, 1, prompt, n, KvCacheKind::Off, GradMode::NoGrad)).generation.unwrap();
    let cached = run(&w, generate(device, 1, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad)).generation.unwrap();
    let decode = |g: &protocol::GenerationReport| -> Vec<f64> {
        g.steps.iter().filter(|s| s.phase == GenPhase::Decode).map(|s| s.latency_ms).collect()
    };
    let (off_ms, cached_ms) = (decode(&off), decode(&cached));
    let rho = rank_correlation(&off_ms);
    assert!(rho > 0.5, "rank correlation {rho:.2} of {off_ms:?}");
    // Each uncached step reprocesses ~prompt + step tokens where a cached one feeds one:
    // the last steps compared by their medians, robust to a single slow sample.
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let tail = 8;
    let (a, b) = (median(&off_ms[off_ms.len() - tail..]), median(&cached_ms[cached_ms.len() - tail..]));
    assert!(a > 2.0 * b, "uncached {a:.3} ms vs cached {b:.3} ms");
    assert_eq!(off.kv_cache_bytes, 0);
    assert!(off.steps.iter().all(|s| s.tokens_in as u64 == prompt as u64 + s.step as u64));
}
}

per_device! {
fn grad_keeps_a_growing_graph_on_top_of_the_cache(device) {
    let (w, _turn) = worker();
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
    let (w, _turn) = worker();
    let (batch, prompt, n) = (2, 8, 12);
    let r = run(&w, generate(device, batch, prompt, n, KvCacheKind::Static, GradMode::NoGrad));
    let g = r.generation.unwrap();
    let config = &tiny().decoder().unwrap().config;
    // Allocated once, for prompt + new tokens.
    assert_eq!(g.kv_cache_tokens, prompt + n);
    assert!(g.steps.iter().all(|s| s.kv_cache_bytes == config.kv_cache_bytes((prompt + n) as u64, batch as u64, 4)));
    // Over the decode steps only the generated token ids (int64) are added.
    let decode: Vec<&protocol::GenStep> = g.steps.iter().filter(|s| s.phase == GenPhase::Decode).collect();
    for pair in decode.windows(2) {
        assert_eq!(pair[1].allocated_bytes - pair[0].allocated_bytes, batch as u64 * 8, "{pair:?}");
    }
    assert_eq!(r.memory.leaked_bytes, 0);
}
}

#[test]
fn a_decoder_too_large_for_the_budget_is_refused_naming_the_bytes() {
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
        generate: Some(GenerateSpec { new_tokens: 8, cache: KvCacheKind::Dynamic }),
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
