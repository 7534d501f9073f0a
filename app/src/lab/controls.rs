//! The Lab's settings, one component each: model, device, module mode, grad mode,
//! autocast, batch and the iteration counts. Each reads the settings from the URL-backed
//! [`LabCtx`] and changes them through it, so a control never holds state of its own
//! (the batch field's typed text and its error are the one exception, kept in
//! [`BatchState`] so the Run button can refuse an invalid batch).

use leptos::prelude::*;
use protocol::settings::{setting, SettingId};
use protocol::{format_bytes, Autocast, DeviceChoice, DeviceKind, RunSpec};

use super::{autocast_support, LabCtx};
use crate::explain;
use crate::settings::{parse_batch, parse_count};

/// The batch field's typed text and the error it gives, shared with the Run button.
#[derive(Clone, Copy)]
pub struct BatchState {
    pub text: RwSignal<String>,
    pub error: RwSignal<Option<String>>,
}

/// What is wrong with the typed settings, if anything: the Run buttons stay disabled and
/// say why while one is set, so a run always uses exactly what the fields show.
#[derive(Clone, Copy)]
pub struct Validity {
    pub batch: BatchState,
    pub warmup: RwSignal<Option<String>>,
    pub iters: RwSignal<Option<String>>,
}

impl Validity {
    pub fn new(batch: u32) -> Validity {
        Validity {
            batch: BatchState {
                text: RwSignal::new(batch.to_string()),
                error: RwSignal::new(None),
            },
            warmup: RwSignal::new(None),
            iters: RwSignal::new(None),
        }
    }

    /// The first problem, tracked (for the view).
    pub fn problem(&self) -> Option<String> {
        self.batch
            .error
            .get()
            .or_else(|| self.warmup.get())
            .or_else(|| self.iters.get())
    }

    /// The first problem, untracked (for click handlers).
    pub fn problem_untracked(&self) -> Option<String> {
        self.batch
            .error
            .get_untracked()
            .or_else(|| self.warmup.get_untracked())
            .or_else(|| self.iters.get_untracked())
    }
}

/// Which model runs, with its parameter count and what its input is.
#[component]
pub fn ModelControl(lab: LabCtx) -> impl IntoView {
    let LabCtx { spec, info, .. } = lab;
    let catalog = StoredValue::new(crate::catalog());
    let update = move |f: &dyn Fn(&mut RunSpec)| lab.update(f);
    let hidden = move |c: &str| lab.hidden(c);
    let locked = move |c: &str| lab.locked(c);
    let models = info.with_value(|i| i.models.clone());
    view! {
        <div class="control" class:hidden=hidden("model")>
            <label for="model">"Model"</label>
            <select
                id="model"
                data-testid="model"
                prop:disabled=locked("model")
                prop:value=move || spec.get().model.as_str().to_string()
                on:change=move |ev| {
                    if let Ok(m) = catalog.get_value().parse(&event_target_value(&ev)) {
                        update(&|s| {
                            s.model = m;
                            s.input_size = None;
                        });
                    }
                }
            >
                {
                    let (team, builtin): (Vec<_>, Vec<_>) =
                        models.into_iter().partition(|m| m.team.is_some());
                    let options = move |list: Vec<protocol::ModelInfo>| {
                        list.into_iter()
                            .map(|m| {
                                let id = m.id;
                                view! {
                                    <option value=id.as_str() selected=move || spec.get().model == id>
                                        {format!("{} — {} params", m.name, param_count(m.parameters))}
                                    </option>
                                }
                            })
                            .collect_view()
                    };
                    let has_team = !team.is_empty();
                    view! {
                        <optgroup label="Built-in models">{options(builtin)}</optgroup>
                        {has_team.then(|| view! {
                            <optgroup label="This team's models" data-testid="team-models">
                                {options(team)}
                            </optgroup>
                        })}
                    }
                }
            </select>
            <p class="explain" data-testid="model-explain">
                {move || {
                    let m = spec.get().model;
                    match m.team() {
                        Some(t) => {
                            let about = t.sidecar.description.clone().map(|d| format!("{d} ")).unwrap_or_default();
                            // Every input the forward takes, then what the size setting moves.
                            let inputs = match t.sidecar.inputs.len() {
                                1 => format!("Input: {}", t.sidecar.describe_inputs()),
                                n => format!("{n} inputs, passed in order: {}", t.sidecar.describe_inputs()),
                            };
                            let size = t.sidecar.size.as_ref()
                                .map(|s| format!("; size = {} (default {})", s.meaning, s.default))
                                .unwrap_or_else(|| "; a fixed shape".into());
                            format!(
                                "{about}A team model: {} loaded with TorchScript. {inputs}{size}. Train/eval: {}.",
                                t.file, t.training.describe()
                            )
                        }
                        None => format!("Input: {} (default {}).", m.input().meaning, m.input().default),
                    }
                }}
                {move || spec.get().model.team().and_then(|t| t.sidecar.link.clone()).map(|href| view! {
                    " " <a href=href.clone() rel="noopener">"About this model"</a>
                })}
            </p>
        </div>
    }
}

/// CPU or GPU, and the note that says when there is no GPU.
#[component]
pub fn DeviceControl(lab: LabCtx) -> impl IntoView {
    let LabCtx { spec, info, .. } = lab;
    let update = move |f: &dyn Fn(&mut RunSpec)| lab.update(f);
    let hidden = move |c: &str| lab.hidden(c);
    let locked = move |c: &str| lab.locked(c);
    let devices = info.with_value(|i| i.devices.clone());
    view! {
        <div class="control" class:hidden=hidden("device")>
            <label for="device">"Device"</label>
            <select
                id="device"
                data-testid="device"
                prop:disabled=locked("device")
                prop:value=move || match spec.get().device {
                    DeviceChoice::Auto => "auto",
                    DeviceChoice::Cpu => "cpu",
                    DeviceChoice::Cuda => "cuda",
                }
                on:change=move |ev| {
                    if let Ok(d) = event_target_value(&ev).parse::<DeviceChoice>() {
                        update(&|s| s.device = d);
                    }
                }
            >
                <option value="auto" selected=move || spec.get().device == DeviceChoice::Auto>
                    "auto (GPU when present)"
                </option>
                {devices
                    .into_iter()
                    .map(|d| {
                        let choice = match d.kind {
                            DeviceKind::Cpu => DeviceChoice::Cpu,
                            DeviceKind::Cuda => DeviceChoice::Cuda,
                        };
                        let mem = d.total_memory_bytes.map(|b| format!(", {}", format_bytes(b))).unwrap_or_default();
                        view! {
                            <option value=d.kind.as_str() selected=move || spec.get().device == choice>
                                {format!("{}: {}{}", d.kind.as_str(), d.name, mem)}
                            </option>
                        }
                    })
                    .collect_view()}
            </select>
            {move || {
                info.with_value(|i| {
                    (!i.devices.iter().any(|d| d.kind == DeviceKind::Cuda))
                        .then(|| view! {
                            <p class="explain note" data-testid="no-gpu">
                                "No GPU on this server: libtorch found no CUDA device, so every figure here is measured on the CPU. CUDA-only figures (reserved memory, device-level use) are absent, not zero."
                            </p>
                        })
                })
            }}
        </div>
    }
}

/// One row of the settings table as radio buttons: the legend, the values and the words
/// beside them come from [`protocol::settings::SETTINGS`], as the Generate page's controls
/// do, so a value added to the enum appears here with no edit. The Lab adds what the table
/// cannot know: whether this device can run each value (`support`: runnable, and why not)
/// and the chosen value's explanation, folded while a prediction waits.
fn row_radios(
    lab: LabCtx,
    id: SettingId,
    guide: &'static str,
    support: impl Fn(&RunSpec, &str) -> (bool, String) + Copy + Send + Sync + 'static,
    text: impl Fn() -> String + Send + Sync + 'static,
    note: impl IntoView + 'static,
) -> impl IntoView {
    let LabCtx { spec, .. } = lab;
    let row = setting(id);
    // The radio group's name and test ids: `grad-no_grad`, `mode-eval` (a pair's words).
    let name = if row.key == "eval" { "mode" } else { row.key };
    let radios = row
        .choices()
        .into_iter()
        .map(|value| {
            let word = row.said_value(&value);
            let text = row.text(&value);
            let value = StoredValue::new(value);
            let support = move || value.with_value(|v| support(&spec.get(), v));
            let checked = move || value.with_value(|v| row.value(&spec.get()).as_deref() == Some(v.as_str()));
            view! {
                <label class="choice" title=move || support().1>
                    <input
                        type="radio"
                        name=name
                        value=word.clone()
                        data-testid=format!("{name}-{word}")
                        prop:checked=checked
                        prop:disabled=move || !support().0
                        on:change=move |_| lab.update(&|s| {
                            // A value of the table's own choices always parses.
                            value.with_value(|v| {
                                let _ = row.set(s, v);
                            })
                        })
                    />
                    {text}
                    {move || (!support().1.is_empty()).then(|| view! { <span class="warn" aria-hidden="true">" ⚠"</span> })}
                </label>
            }
        })
        .collect_view();
    view! {
        <fieldset class="control" data-guide=(!guide.is_empty()).then_some(guide) class:hidden=lab.hidden(row.key) prop:disabled=lab.locked(row.key)>
            <legend>{row.label}</legend>
            {radios}
            {folded(lab, row.key, format!("{}-explain", row.key), text)}
            {note}
        </fieldset>
    }
    .into_any()
}

/// Any value runs on any device.
fn always(_: &RunSpec, _: &str) -> (bool, String) {
    (true, String::new())
}

/// `model.eval()` or `model.train()`.
#[component]
pub fn ModeControl(lab: LabCtx) -> impl IntoView {
    let spec = lab.spec;
    row_radios(lab, SettingId::Eval, "", always, move || explain::eval_text(spec.get().eval, spec.get().model), ())
}

/// A setting's explanation, held back while a change of that setting waits for its run:
/// the page is asking what the change will do, and the explanation would answer it. It is
/// not in the page at all until then (a fold would open with one click), and shows by
/// itself once the run's result is on the charts.
fn folded(lab: LabCtx, key: &'static str, testid: String, text: impl Fn() -> String + Send + Sync + 'static) -> impl IntoView {
    let text = std::sync::Arc::new(text);
    move || {
        if lab.awaiting.get().as_deref() == Some(key) {
            view! { <p class="explain folded" data-testid=testid.clone()>"Predict first: what this setting does shows after the run."</p> }.into_any()
        } else {
            view! { <p class="explain" data-testid=testid.clone()>{crate::widgets::rich_text(&text())}</p> }.into_any()
        }
    }
}

/// Autograd on, `no_grad` or `inference_mode`.
#[component]
pub fn GradControl(lab: LabCtx) -> impl IntoView {
    let spec = lab.spec;
    row_radios(lab, SettingId::Grad, "1 2", always, move || explain::grad_text(spec.get().grad).to_string(), ())
}

/// Autocast off, fp16 or bf16, each disabled with the reason where the device cannot.
#[component]
pub fn AutocastControl(lab: LabCtx) -> impl IntoView {
    let LabCtx { spec, info, .. } = lab;
    let support = move |s: &RunSpec, value: &str| match value.parse::<Autocast>() {
        Ok(a) => info.with_value(|i| autocast_support(i, s, a)),
        Err(_) => (false, String::new()),
    };
    let note = view! {
        <p class="explain note">
            {move || {
                let s = spec.get();
                if s.autocast == Autocast::Off { String::new() } else { info.with_value(|i| autocast_support(i, &s, s.autocast).1) }
            }}
        </p>
    };
    row_radios(lab, SettingId::Autocast, "", support, move || explain::autocast_text(spec.get().autocast).to_string(), note)
}

/// The batch: a slider over powers of two, or any whole number typed in.
#[component]
pub fn BatchControl(lab: LabCtx, batch_state: BatchState) -> impl IntoView {
    let LabCtx { spec, info, .. } = lab;
    let update = move |f: &dyn Fn(&mut RunSpec)| lab.update(f);
    let hidden = move |c: &str| lab.hidden(c);
    let locked = move |c: &str| lab.locked(c);
    let limits = info.with_value(|i| i.limits.clone());
    let stops = StoredValue::new(crate::settings::batch_stops(&limits));
    let BatchState {
        text: batch_text,
        error: batch_error,
    } = batch_state;
    view! {
        <fieldset class="control plain" class:hidden=hidden("batch") prop:disabled=locked("batch")>
            <label for="batch">"Batch size"</label>
            <div class="batch">
                <input
                    type="range"
                    aria-label="Batch size (powers of two)"
                    min="0"
                    max=move || stops.with_value(|s| s.len().saturating_sub(1))
                    step="1"
                    prop:value=move || {
                        let b = spec.get().batch;
                        stops.with_value(|s| s.iter().position(|x| *x >= b).unwrap_or(s.len() - 1))
                    }
                    on:input=move |ev| {
                        if let Ok(i) = event_target_value(&ev).parse::<usize>() {
                            if let Some(b) = stops.with_value(|s| s.get(i).copied()) {
                                batch_error.set(None);
                                update(&|s| s.batch = b);
                            }
                        }
                    }
                />
                <input
                    id="batch"
                    type="text"
                    inputmode="numeric"
                    data-testid="batch"
                    aria-describedby="batch-error"
                    prop:value=move || batch_text.get()
                    on:change=move |ev| {
                        let text = event_target_value(&ev);
                        batch_text.set(text.clone());
                        match parse_batch(&text, &limits) {
                            Ok(b) => {
                                batch_error.set(None);
                                update(&|s| s.batch = b);
                            }
                            Err(e) => batch_error.set(Some(e)),
                        }
                    }
                />
            </div>
            <p id="batch-error" class="error" role="alert" data-testid="batch-error">{move || batch_error.get()}</p>
            {folded(lab, "batch", "batch-explain".into(), || explain::batch_text().to_string())}
        </fieldset>
    }
}

/// The warm-up and timed iteration counts, and the settings beyond the five switches
/// ([`super::advanced`]).
#[component]
pub fn AdvancedControl(lab: LabCtx, validity: Validity) -> impl IntoView {
    let LabCtx { spec, info, .. } = lab;
    let update = move |f: &dyn Fn(&mut RunSpec)| lab.update(f);
    let hidden = move |c: &str| lab.hidden(c);
    let (max_warmup, max_iters) = info.with_value(|i| (i.limits.max_warmup, i.limits.max_iters));
    view! {
        <details class="control" class:hidden=hidden("advanced")>
            <summary>"Advanced: iterations, precision, layout, input, CUDA switches"</summary>
            <NumberSetting
                label="Warm-up iterations (not in the statistics) "
                testid="warmup"
                min=0
                max=max_warmup
                value=Signal::derive(move || spec.get().warmup)
                on_set=Callback::new(move |w: u32| update(&|s| s.warmup = w))
                error=validity.warmup
            />
            <NumberSetting
                label="Timed iterations "
                testid="iters"
                min=1
                max=max_iters
                value=Signal::derive(move || spec.get().iters)
                on_set=Callback::new(move |n: u32| update(&|s| s.iters = n))
                error=validity.iters
            />
            <super::advanced::BeyondSwitches lab />
        </details>
    }
}

/// A whole-number setting. What is typed stays shown: a value outside `min..=max`, or not
/// a whole number, gets a message naming the limits and blocks the run, rather than being
/// silently replaced by another number.
#[component]
pub fn NumberSetting(
    label: &'static str,
    testid: &'static str,
    min: u32,
    max: u32,
    value: Signal<u32>,
    on_set: Callback<u32>,
    error: RwSignal<Option<String>>,
) -> impl IntoView {
    let text = RwSignal::new(value.get_untracked().to_string());
    // In step with the URL (back/forward, a shared link) unless the field holds a mistake.
    Effect::new(move |_| {
        let v = value.get();
        if error.get_untracked().is_none() {
            text.set(v.to_string());
        }
    });
    let what = label.trim();
    let error_id = format!("{testid}-error");
    view! {
        <label>
            {label}
            <input
                type="text"
                inputmode="numeric"
                data-testid=testid
                aria-describedby=error_id.clone()
                aria-invalid=move || error.get().is_some().to_string()
                prop:value=move || text.get()
                on:change=move |ev| {
                    let typed = event_target_value(&ev);
                    text.set(typed.clone());
                    match parse_count(&typed, what, min, max) {
                        Ok(n) => {
                            error.set(None);
                            on_set.run(n);
                        }
                        Err(e) => error.set(Some(e)),
                    }
                }
            />
        </label>
        <p id=error_id class="error" role="alert" data-testid=format!("{testid}-error")>{move || error.get()}</p>
    }
}

/// "11.7M", "11.5K", "68": parameter counts from a few dozen (a team's small module) to
/// tens of millions.
fn param_count(n: u64) -> String {
    match n {
        n if n >= 1_000_000 => format!("{:.1}M", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1}K", n as f64 / 1e3),
        n => n.to_string(),
    }
}
