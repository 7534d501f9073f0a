//! The Generate page (`/generate`): the five switches, the batch and the KV cache on a
//! decoder LLM, one greedy generation measured step by step — the prefill (time to first
//! token), then every decode step's latency and memory, the KV cache's bytes beside its
//! formula — with the Python that does the same in its two usual forms. The settings live
//! in the URL ([`crate::gen_settings`]); runs are recorded and linked as
//! in the Lab. The results column is [`crate::gen_results`].

use leptos::prelude::*;
use leptos_router::hooks::{use_navigate, use_query_map};
use leptos_router::NavigateOptions;
use protocol::settings::{self, Kind, Page, Setting, SettingId, SETTINGS};
use protocol::{format_bytes, GenerateSpec, GradMode, KvCacheKind, Report, RunSpec, ServerInfo, WeightQuant};

use crate::gen_results::GenResults;
pub use crate::gen_settings::{default_model, query_from_spec, spec_from_query};
use crate::run_view::{Phase, RunView};
use crate::widgets::TokenField;

mod run;
#[cfg(feature = "hydrate")]
use run::{execute, first_view};
#[cfg(test)]
use run::is_default_generation;

/// The rows of "Compare cache modes" and "Compare grad modes".
pub fn comparison(spec: &RunSpec, what: Comparison) -> Vec<RunSpec> {
    match what {
        Comparison::Cache => protocol::words::all::<KvCacheKind>()
            .iter()
            .map(|&cache| {
                let mut s = spec.clone();
                s.generate = Some(GenerateSpec {
                    cache,
                    ..spec.generate.clone().unwrap_or_default()
                });
                s.advanced.cuda_graph = false;
                s
            })
            .collect(),
        Comparison::Grad => GradMode::ALL
            .into_iter()
            .map(|grad| RunSpec { grad, ..spec.clone() })
            .collect(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    Cache,
    Grad,
}

/// What a control of the table ([`protocol::settings`]) says under it for `spec`: the
/// chosen value's own sentence where the page has one, else the row's help.
fn explain(row: &Setting, spec: &RunSpec) -> String {
    let g = spec.generate.clone().unwrap_or_default();
    match row.id {
        SettingId::Cache => explain_cache(g.cache).to_string(),
        SettingId::Grad => explain_grad(spec.grad).to_string(),
        SettingId::Quant => explain_quant(g.weights).to_string(),
        SettingId::Eval if spec.eval => "eval(): attention dropout off.".to_string(),
        SettingId::Eval => "train(): attention dropout on (where the config has attention_dropout > 0), so the tokens can change from run to run.".to_string(),
        _ => row.help.to_string(),
    }
}

pub fn explain_quant(q: WeightQuant) -> &'static str {
    match q {
        WeightQuant::None => "The blocks' linear layers in the weights' dtype. Quantized, they are stored as int8 or int4 and multiplied by PyTorch's packed kernels; the embeddings, norms and head stay as they are (as gpt-fast does).",
        WeightQuant::Int8 => "int8 weight-only: one byte a weight plus a scale per output channel, multiplied by torch._weight_int8pack_mm. The KV cache and the activations keep their dtype.",
        WeightQuant::Int4 => "int4 weight-only: half a byte a weight plus a scale and a zero point per group, multiplied by torch._weight_int4pack_mm. Smaller groups follow the weights more closely and cost more bytes.",
    }
}

pub fn explain_cache(cache: KvCacheKind) -> &'static str {
    match cache {
        KvCacheKind::Dynamic => "Dynamic: each step appends the new token's keys and values to every layer's cache by concatenation (transformers' DynamicCache). Each step feeds one token; the cache grows by the formula's bytes per token.",
        KvCacheKind::Static => "Static: the cache for prompt + new tokens is allocated once and written in place (StaticCache, gpt-fast). Memory stays flat from the first step, and fixed shapes are what lets a decode step be replayed as a CUDA graph.",
        KvCacheKind::Off => "Off (use_cache=False): nothing is kept, so every step runs the whole prefix again. Each step's time grows with the position and the total roughly quadratically; memory stays low.",
    }
}

pub fn explain_grad(grad: GradMode) -> &'static str {
    match grad {
        GradMode::Enabled => "Autograd on, as in a hand-written loop without torch.no_grad(): every step's graph stays alive through the cache's keys and values, so memory grows faster than the cache, step after step (allenai/OLMo#164: 4 GB to 24 GB in 100 steps). model.eval() does not stop it. model.generate() runs under no_grad itself.",
        GradMode::NoGrad => "torch.no_grad(): no graph, so the cache holds only keys and values.",
        GradMode::InferenceMode => "torch.inference_mode(): no_grad plus no version counters or view tracking. A cache made inside it cannot be updated in place outside it.",
    }
}

#[component]
pub fn GeneratePage() -> impl IntoView {
    let info = expect_context::<ServerInfo>();
    let auth_required = info.auth_required;
    // Each preset, and whether the default generation on it fits this server's budget:
    // one that cannot says so here, before Run, with admission's figures.
    let decoders: Vec<(String, String, Option<String>)> = info
        .models
        .iter()
        .filter(|m| m.id.is_decoder())
        .map(|m| {
            // A model on random seeded weights says so in the picker itself: its text and
            // quality figures are of a model that does not exist.
            let random = m.id.decoder().is_some_and(|d| d.random_weights());
            let name = format!("{} · {} parameters{}", m.name, group(m.parameters), if random { " · random weights" } else { "" });
            let text = match &m.fit {
                Some(_) => format!("{name} · does not fit this server at the default settings"),
                None => name,
            };
            (m.id.as_str().to_string(), text, m.fit.clone())
        })
        .collect();
    let fits: Vec<(String, Option<String>)> = decoders.iter().map(|(id, _, fit)| (id.clone(), fit.clone())).collect();
    let info = StoredValue::new(info);
    let catalog = StoredValue::new(crate::catalog());
    let query = use_query_map();
    let spec = Memo::new(move |_| info.with_value(|i| query.with(|q| spec_from_query(&i.devices, &catalog.get_value(), |k| q.get(k)))));
    let navigate = use_navigate();
    let set = Callback::new(move |next: RunSpec| {
        navigate(
            &format!("/generate?{}", query_from_spec(&next)),
            NavigateOptions { scroll: false, ..Default::default() },
        );
    });
    let update = move |f: &dyn Fn(&mut RunSpec)| {
        let mut s = spec.get_untracked();
        f(&mut s);
        set.run(s);
    };
    let view_state = RwSignal::new(RunView::default());
    let finished: RwSignal<Vec<(String, Report)>> = RwSignal::new(vec![]);
    let compared: RwSignal<Vec<(String, Report)>> = RwSignal::new(vec![]);
    let busy = Memo::new(move |_| view_state.with(|v| v.phase.busy()));

    // What the status says of the run on the charts when it was not measured now (a
    // recorded run, a first visit's default run); cleared when a run starts.
    let shown_note = RwSignal::new(None::<String>);
    let run_specs = move |rows: Vec<RunSpec>| {
        shown_note.set(None);
        // The settings run two screens down on a laptop, and on a phone the results sit
        // above them: what the run draws must be in view when it starts.
        #[cfg(feature = "hydrate")]
        crate::charts::bring_into_view("gen-top");
        #[cfg(feature = "hydrate")]
        leptos::task::spawn_local(execute(rows, view_state, finished, compared));
        #[cfg(not(feature = "hydrate"))]
        let _ = (rows, view_state, finished, compared);
    };
    // A change of one setting since the generation on the charts is predicted first (the
    // Lab's box, with this page's settings).
    let prediction = crate::lab::predict::BoxArgs {
        spec,
        shown: Signal::derive(move || view_state.with(|v| v.report.clone().filter(|_| v.phase == Phase::Done))),
        pending: RwSignal::new(None),
        locked: Signal::derive(move || busy.get()),
        loaded: RwSignal::new(false),
        generate: true,
    };
    // The setting changed since the generation on the charts while its prediction is
    // asked: its help stays folded until the run (client-side, as the box itself).
    let awaiting = RwSignal::new(None::<String>);
    // What the quality measurement will score, asked of the server when it is switched on
    // (GET /api/quality-plan), keyed by the model and device it was asked for: its time is
    // then shown before it runs, at the prefill rate the run measures first. Held as one
    // string (see `gen_quality::plan_entry`), and asked by the same effect: a signal of a
    // type of its own and an effect of its own would add their reactive machinery (~2 KB
    // brotli) to this page's code.
    let plan = RwSignal::new(None::<String>);
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let now = spec.get();
        // Folded until the run's result, not until the press of Generate.
        let changed = prediction.shown.with(|r| r.as_ref().and_then(|r| crate::lab::predict::one_change(&now, &r.spec, true)).map(|c| c.0));
        if awaiting.get_untracked() != changed && !busy.get() {
            awaiting.set(changed);
        }
        crate::gen_quality::ask(&now, plan);
    });
    // The plan of the settings on the page, once the server has said it.
    let plan_now = move || crate::gen_quality::read(&spec.get(), plan);
    let run_one = move |_| {
        let s = spec.get_untracked();
        prediction.pending.set(crate::lab::predict::pending(prediction, &s));
        run_specs(vec![s])
    };
    let compare_cache = move |_| {
        prediction.pending.set(None);
        run_specs(comparison(&spec.get_untracked(), Comparison::Cache))
    };
    let compare_grad = move |_| {
        prediction.pending.set(None);
        run_specs(comparison(&spec.get_untracked(), Comparison::Grad))
    };

    // A link with `&run=1` starts the run on arrival; a bare address shows the newest
    // recorded default generation, labelled, or runs the default once on a fresh server.
    // A bare address's recorded generation is shown as the server's pictures until the
    // visitor acts (charts::defer_until_wanted); leaving the page lets its charts draw.
    #[cfg(feature = "hydrate")]
    if query.with_untracked(|q| q.get("model").is_none() && q.get("run").is_none())
        && crate::charts::defer_until_wanted()
    {
        on_cleanup(crate::charts::want_echarts);
    }
    Effect::new(move |done: Option<bool>| {
        if done == Some(true) {
            return true;
        }
        #[cfg(feature = "hydrate")]
        {
            let auto = query.with_untracked(|q| q.get("run").as_deref() == Some("1"));
            let bare = query.with_untracked(|q| q.get("model").is_none());
            let default = spec.get_untracked();
            if auto {
                run_specs(vec![default]);
            } else if bare {
                leptos::task::spawn_local(first_view(default, view_state, finished, shown_note));
            }
        }
        true
    });

    // Every control drawn from the settings table: a select for a choice (or a number the
    // row offers), a number field for a count; hidden where it does not apply (int4's
    // group size without int4).
    let control = move |row: &'static Setting| {
        let id = format!("gen-{}", row.key.replace('_', "-"));
        // A text prompt sets the prompt's length: its count control gives way.
        let hidden = move || {
            let s = spec.get();
            !row.in_use(&s) || (row.id == SettingId::InputSize && s.generate.as_ref().is_some_and(|g| g.prompt_text.is_some()))
        };
        let shown = move || row.shown(&spec.get()).unwrap_or_default();
        let put = move |v: String| update(&|s| {
            let _ = row.set(s, &v);
        });
        let field = match row.kind {
            Kind::Count { min, max, offer, .. } if offer.is_empty() => view! {
                <input id=id.clone() data-testid=id.clone() type="number" min=min.to_string() max=max.to_string()
                    prop:value=shown
                    on:change=move |ev| put(event_target_value(&ev).trim().to_string()) />
            }
            .into_any(),
            _ => view! {
                <select id=id.clone() data-testid=id.clone() on:change=move |ev| put(event_target_value(&ev))>
                    {row.choices().into_iter().map(|value| {
                        let text = row.text(&value);
                        let v = value.clone();
                        view! { <option value=value selected=move || shown() == v>{text}</option> }
                    }).collect_view()}
                </select>
            }
            .into_any(),
        };
        view! {
            <label class="control" for=id.clone() hidden=hidden>
                <span class="control-name">{row.label}</span>
                {field}
                {folded_help(awaiting, id.clone(), row.key, move || explain(row, &spec.get()))}
            </label>
        }
    };
    let controls = settings::on_page(SETTINGS, Page::Generate)
        .filter(|row| row.has_control(Page::Generate))
        .map(control)
        .collect_view();

    // The KV cache's bytes per token are the answer a pitfall card asks for: the picker
    // names them once that card has been answered in this browser (the results show the
    // cache measured beside its formula after any generation).
    let kv_told = RwSignal::new(false);
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| kv_told.set(crate::pitfalls::answered_here(KV_CARD)));
    let model_picker = view! {
        <label class="control" for="gen-model">
            <span class="control-name">"Model"</span>
            <select id="gen-model" data-testid="gen-model" on:change=move |ev| {
                let v = event_target_value(&ev);
                if let Ok(m) = catalog.get_value().parse(&v) { update(&|s| *s = crate::gen_settings::with_model(s, m)); }
            }>
                {decoders.into_iter().map(|(value, text, _)| {
                    let v = value.clone();
                    view! { <option value=value selected=move || spec.get().model.as_str() == v>{text}</option> }
                }).collect_view()}
            </select>
            <span class="explain" data-testid="gen-model-shape">{move || spec.get().model.decoder().map(|d| format!("{}. {}", d.provenance(), shape_line(&d.config, kv_told.get()))).unwrap_or_default()}</span>
            {move || {
                let model = spec.get().model;
                fits.iter().find(|(id, _)| id == model.as_str()).and_then(|(_, fit)| fit.clone()).map(|why| {
                    view! { <p class="explain note warn" data-testid="gen-fit">{format!("At the default settings (batch 1, prompt 32, 64 new tokens, fp32): {why}")}</p> }
                })
            }}
        </label>
    };

    // A text model's own controls: its prompt as text, and the quality measurement.
    let byte_controls = move || {
        let s = spec.get();
        let decoder = s.model.decoder().filter(|d| d.takes_text())?;
        let byte_level = decoder.byte_bos().is_some();
        let g = s.generate.clone().unwrap_or_default();
        let given = g.prompt_text.is_some();
        let text = g.prompt_text.clone().unwrap_or_default();
        let bytes = text.len();
        let (max, fed) = match decoder.tokenizer() {
            None => (
                protocol::MAX_PROMPT_TEXT_BYTES as usize,
                "fed as [BOS] + its bytes: this model's vocabulary is the 256 byte values".to_string(),
            ),
            Some(t) => (
                protocol::MAX_TOKENIZED_TEXT_BYTES as usize,
                format!(
                    "encoded on the server by the folder's tokenizer ({}), at most {} tokens beside the new ones",
                    t.describe(),
                    decoder.config.max_position_embeddings.saturating_sub(g.new_tokens)
                ),
            ),
        };
        Some(view! {
            <label class="control control-wide" for="gen-prompt-text">
                <span class="control-name">"Prompt text"</span>
                <textarea id="gen-prompt-text" data-testid="gen-prompt-text" rows="2" spellcheck="false"
                    prop:value=text
                    on:change=move |ev| {
                        let v = event_target_value(&ev);
                        update(&|s| {
                            if let Some(g) = s.generate.as_mut() { g.prompt_text = Some(v.clone()); }
                            s.input_size = None;
                        });
                    }></textarea>
                <span class="explain" class:warn={given && (bytes > max || bytes == 0)}>{match given {
                    true => format!("{bytes} of at most {max} bytes of UTF-8, {fed}. Greedy decoding continues it."),
                    // An address without text: the run takes random ids, as the count says.
                    false => format!("No text: the prompt is {} random ids (the prompt length below). Type text to start from it instead: at most {max} bytes of UTF-8, {fed}.", s.resolved_input_size()),
                }}</span>
            </label>
            {Some(view! {
            <label class="control control-check" for="gen-quality">
                <input type="checkbox" id="gen-quality" data-testid="gen-quality-toggle" prop:checked=g.quality
                    on:change=move |ev| {
                        let on = event_target_checked(&ev);
                        update(&|s| { if let Some(g) = s.generate.as_mut() { g.quality = on; } });
                    } />
                <span class="control-name">"Measure quality on held-out text"</span>
                <span class="explain">{match byte_level {
                    true => "After the run: bits per byte on 64 KiB of PyTorch source the model never saw, under fp32, bf16, fp16, int8, int4 (groups of 32, 64, 128) and half-precision KV caches, beside gzip -9. Each row says how long it took.".to_string(),
                    false => format!("After the run: bits per byte and perplexity on the server's quality text (--quality-text; else 64 KiB of PyTorch source), as its tokenizer encodes it, under fp32, bf16, fp16, int8, int4 (groups of 32, 64, 128) and half-precision KV caches, beside gzip -9: one pass over the text per setting through {:.1} M parameters. Each row says how long it took.", decoder.config.parameters() as f64 / 1e6),
                }}</span>
                {g.quality.then(|| view! {
                    <span class="explain" data-testid="gen-quality-plan">{move || match plan_now() {
                        None => "Asking the server what it will score…".to_string(),
                        Some(Ok(p)) => format!("{}: its time is shown once the run's prefill has measured a rate.", crate::gen_quality::plan_words(&p, byte_level)),
                        Some(Err(e)) => format!("The server cannot say what it will score: {e}"),
                    }}</span>
                })}
            </label>
            })}
        })
    };
    let settings_line = move || spec.get().label();
    // What the address asked for that the page could not use, and old keys it read under
    // today's names (`weights=int4` as `quant=int4`), so nothing is changed silently.
    let address_notes = move || {
        let said = info.with_value(|i| {
            query.with(|q| {
                let (spec, reading) = crate::gen_settings::read_query(&i.devices, &catalog.get_value(), &|k| q.get(k));
                crate::settings::said_of_reading(Page::Generate, &spec, &reading)
            })
        });
        (!said.is_empty()).then(|| {
            view! {
                <div class="note address-notes" data-testid="gen-address-notes">
                    {said.into_iter().map(|s| view! { <p>{s}</p> }).collect_view()}
                </div>
            }
        })
    };
    let status = move || {
        view_state.with(|v| match &v.phase {
            Phase::Idle => shown_note.get().unwrap_or_else(|| "Press Generate to measure one generation on this server.".into()),
            Phase::Submitting => "Sending…".into(),
            Phase::Queued(n) => format!("Waiting for the device ({n} ahead)."),
            Phase::Running { done, total } => {
                let s = spec.get();
                let planned = plan_now().and_then(Result::ok).filter(|_| s.generate.as_ref().is_some_and(|g| g.quality));
                let byte_level = s.model.decoder().is_some_and(|d| d.byte_bos().is_some());
                let then = planned.map(|p| format!(" {}", crate::gen_quality::quality_ahead(&p, byte_level, &v.steps))).unwrap_or_default();
                format!("Generating: {done} of {total} (one warm-up generation, then each step).{then}")
            }
            Phase::Working { what, .. } => format!("{what}."),
            Phase::Done => shown_note.get().unwrap_or_else(|| {
                let ran = v.report.as_ref().map_or_else(|| "these settings".to_string(), crate::gen_results::ran_with);
                format!("Done: every figure below was measured by this generation, now, with {ran}.")
            }),
            Phase::Failed(m) => format!("Failed: {m}"),
        })
    };

    view! {
        <div class="generate-page" data-testid="generate-page">
            <section class="controls" aria-label="Generation settings">
                <h1>"Generate: the settings on a decoder LLM"</h1>
                <p class="lede">
                    "A greedy generation on a decoder LLM, measured token by token on this server: the prefill (one pass over the prompt, time to first token), then one decode step per token. The presets' random seeded weights give real memory and latency and meaningless text; the model trained on PyTorch's source writes text."
                </p>
                {model_picker}
                {byte_controls}
                {controls}
                <p class="settings-line" data-testid="gen-settings">{settings_line}</p>
                {address_notes}
                {auth_required.then(|| view! { <TokenField /> })}
                <crate::lab::predict::LazyPrediction args=prediction />
                <div class="actions gen-actions">
                    <button class="primary" data-testid="gen-run" on:click=run_one disabled=move || busy.get()>"Generate"</button>
                    <button data-testid="gen-compare-cache" aria-label="Compare cache modes" on:click=compare_cache disabled=move || busy.get()><span class="wide-only">"Compare "</span>"cache modes"</button>
                    <button data-testid="gen-compare-grad" aria-label="Compare grad modes" on:click=compare_grad disabled=move || busy.get()><span class="wide-only">"Compare "</span>"grad modes"</button>
                </div>
                <p class="status" data-testid="gen-status" role="status">{status}</p>
                <crate::gen_results::GenText view_state spec />
            </section>
            <GenResults view_state finished compared />
            <GenSnippets spec />
        </div>
    }
}

/// A control's help (`key`: its setting's address key, as `one_change` names it), folded
/// while a change of its setting awaits its prediction: the help would answer the question
/// asked.
fn folded_help(awaiting: RwSignal<Option<String>>, id: String, key: &'static str, help: impl Fn() -> String + Send + Sync + 'static) -> impl IntoView {
    move || {
        let asked = awaiting.with(|a| a.as_deref() == Some(key));
        if asked {
            // Not in the page at all until the run: a fold would open with one click.
            view! { <span class="explain folded" data-testid=format!("{id}-explain")>"Predict first: what this setting does shows after the run."</span> }.into_any()
        } else {
            view! { <span class="explain" data-testid=format!("{id}-explain")>{help()}</span> }.into_any()
        }
    }
}

/// The card whose question is the KV cache's bytes per token ([`shape_line`]).
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
const KV_CARD: &str = "kv-cache-size";

/// A decoder's shape under the picker; its KV cache per token only when `kv_told` (the card
/// that asks for it has been answered here), else where to find it.
fn shape_line(c: &protocol::decoder::DecoderConfig, kv_told: bool) -> String {
    let notes = c.family_notes();
    let kv = match kv_told {
        true => format!("KV cache {} per token per sequence (fp32)", format_bytes(c.kv_cache_bytes(1, 1, 4))),
        false => "the KV cache's bytes are measured beside their formula once it generates".to_string(),
    };
    format!(
        "{} layers, hidden {}, {} heads / {} KV heads of {}, vocab {}; {kv}{}",
        c.num_hidden_layers,
        c.hidden_size,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.vocab_size,
        if notes.is_empty() { String::new() } else { format!(". {notes}") }
    )
}

fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The two Python forms, each runnable as copied.
#[component]
fn GenSnippets(spec: Memo<RunSpec>) -> impl IntoView {
    view! {
        <section class="snippet gen-snippets" aria-label="The same in PyTorch">
            <h2>"The same in PyTorch"</h2>
            <p class="explain">"A hand-written loop, as Gradless runs it:"</p>
            <pre tabindex="0"><code data-testid="gen-snippet-loop">{move || protocol::python_generate_loop(&spec.get())}</code></pre>
            <p class="explain">"The same through transformers' generate():"</p>
            <pre tabindex="0"><code data-testid="gen-snippet-generate">{move || protocol::python_generate_hf(&spec.get())}</code></pre>
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_view_finds_a_recorded_default_generation_by_its_listed_label() {
        let default = spec_from_query(&[], &protocol::Catalog::built_in(), |_| None);
        // What /api/records lists for a recorded run of these settings.
        let listed = protocol::Record {
            id: "r1".into(),
            body: protocol::RecordBody::Run(Box::new(generation_report(&default))),
        }
        .summary()
        .label;
        assert_eq!(listed, crate::lab::guide::summary_label(&default));
        let report = generation_report(&default);
        assert!(is_default_generation(&report, &default));
        let other = RunSpec { batch: default.batch + 1, ..default.clone() };
        assert!(!is_default_generation(&report, &other));
    }

    fn generation_report(spec: &RunSpec) -> Report {
        let mut r = protocol::testing::report("no_grad", spec.batch, vec![]);
        r.spec = RunSpec { input_size: Some(spec.resolved_input_size()), ..spec.clone() };
        r.generation = Some(serde_json::from_value(serde_json::json!({
            "cache": "dynamic", "prompt_len": 8, "new_tokens": 8, "batch": 1, "prefill_ms": 1.0,
            "steps": [], "kv_cache_bytes": 0, "kv_cache_formula_bytes": 0, "kv_cache_tokens": 0,
            "kv_cache_element_bytes": 4, "decode_ms_per_token": null, "tokens_per_s": 1.0,
            "tokens_per_s_total": 1.0, "weights_bytes": 0, "decode_bandwidth_gb_s": null,
            "decode_bandwidth_percent": null, "bandwidth_source": null, "prefill_flops": 0,
            "prefill_tflops": 0.0, "prefill_percent_of_peak": null, "decode_flops_per_step": 0,
            "decode_intensity_flops_per_byte": 0.0, "warmup_ms": 1.0, "prompt_tokens": [], "tokens": []
        })).expect("a generation section"));
        r
    }

    #[test]
    fn comparisons_vary_one_setting() {
        let s = spec_from_query(&[], &protocol::Catalog::built_in(), |_| None);
        let cache = comparison(&s, Comparison::Cache);
        assert_eq!(cache.len(), 3);
        assert!(cache.iter().all(|r| r.grad == s.grad));
        let grad = comparison(&s, Comparison::Grad);
        assert_eq!(grad.iter().map(|r| r.grad).collect::<Vec<_>>(), GradMode::ALL);
    }
}
