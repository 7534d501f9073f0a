//! Pieces several pages show: the figures of a finished run and of an experiment, where a
//! result was measured, the actions every recorded result offers (exports, permalink,
//! embed snippet) and the access-token field. Pages import these; widgets import no page,
//! so the page modules never depend on each other.

use leptos::prelude::*;
use protocol::{format_bytes, PitfallReport, Report, Verdict};

/// What libtorch's version suffix says about its build: `+cu130` is the CUDA 13.0 build,
/// which runs on a CPU as well (a CPU-only server often has it, from PyTorch's default
/// wheel), so pages say which build it is beside what ran on it.
/// `libtorch VERSION (its build; `on_cpu`)`: what a CUDA build means where no GPU ran.
pub fn libtorch_line(version: &str, on_cpu: Option<&str>) -> String {
    let build = version.split_once('+').map_or("", |(_, b)| b);
    if build == "cpu" {
        return format!("libtorch {version} (the CPU-only build)");
    }
    let Some(digits) = build.strip_prefix("cu").filter(|d| d.len() >= 2 && d.bytes().all(|b| b.is_ascii_digit())) else {
        return format!("libtorch {version}");
    };
    let (major, minor) = digits.split_at(digits.len() - 1);
    match on_cpu {
        Some(cpu) => format!("libtorch {version} (libtorch's build for CUDA {major}.{minor}; {cpu})"),
        None => format!("libtorch {version} (libtorch's build for CUDA {major}.{minor})"),
    }
}

/// The line that says where and when a result was measured: the device, the host's cores
/// and memory, the libraries and their builds, the threads.
pub fn provenance(env: &protocol::EnvStamp) -> String {
    let mut parts = vec![env.device_label()];
    let host = [
        env.cpu_cores.map(|n| format!("{n} CPU core{}", if n == 1 { "" } else { "s" })),
        env.device_total_memory_bytes.map(|b| {
            format!(
                "{} {}",
                format_bytes(b),
                if env.device == protocol::DeviceKind::Cuda { "GPU memory" } else { "memory" }
            )
        }),
    ];
    let host: Vec<String> = host.into_iter().flatten().collect();
    if !host.is_empty() {
        parts.push(host.join(", "));
    }
    let on_cpu = (env.device == protocol::DeviceKind::Cpu).then_some("this ran on the CPU");
    parts.push(libtorch_line(&env.libtorch_version, on_cpu));
    if let Some(c) = &env.cuda_version {
        parts.push(format!("CUDA {c}"));
    }
    if let Some(d) = &env.driver_version {
        parts.push(format!("driver {d}"));
    }
    parts.push(format!(
        "{} CPU thread{}",
        env.threads,
        if env.threads == 1 { "" } else { "s" }
    ));
    parts.push(format!("Gradless {}", env.gradless_version));
    format!("Recorded {} on {}", env.measured_at, parts.join(" · "))
}

/// A finished run's figures, with where they come from.
pub fn summary_table(r: &Report) -> impl IntoView + use<> {
    let l = &r.latency_ms;
    let m = &r.memory;
    let reserved = m
        .peak_reserved_bytes
        .map(format_bytes)
        .unwrap_or_else(|| "absent: the CPU has no caching allocator".into());
    let leak = if m.leaked_bytes == 0 {
        format!("{} (back at baseline)", format_bytes(m.after_release_bytes))
    } else {
        format!(
            "{} — {} not returned",
            format_bytes(m.after_release_bytes),
            format_bytes(m.leaked_bytes)
        )
    };
    let device_used = m
        .device_used_bytes
        .map(format_bytes)
        .unwrap_or_else(|| "absent: only a GPU reports it".into());
    view! {
        <table class="summary" data-testid="summary">
            <caption>
                {format!(
                    "{} on {} · libtorch {} · {} thread{} · {}",
                    crate::explain::run_name(r),
                    r.env.device_name,
                    r.env.libtorch_version,
                    r.env.threads,
                    if r.env.threads == 1 { "" } else { "s" },
                    r.env.measured_at
                )}
            </caption>
            <tbody>
                <tr><th>"latency p50 / p95 / p99"</th><td data-testid="p50">{format!("{:.3} / {:.3} / {:.3} ms", l.p50, l.p95, l.p99)}</td></tr>
                <tr class=if r.noise_warning().is_some() { "noisy" } else { "" }><th>"spread (interquartile range)"</th><td data-testid="iqr">{crate::explain::spread(r).unwrap_or_else(|| "absent: fewer than 4 timed iterations".into())}</td></tr>
                <tr><th>"mean ± stddev (min – max)"</th><td>{format!("{:.3} ± {:.3} ms ({:.3} – {:.3})", l.mean, l.stddev, l.min, l.max)}</td></tr>
                <tr><th>"throughput"</th><td>{format!("{:.1} samples/s", r.throughput_per_s)}</td></tr>
                <tr><th>"peak above baseline"</th><td data-testid="peak">{format_bytes(m.peak_above_baseline_bytes)}</td></tr>
                <tr><th>"baseline (weights + input)"</th><td>{format_bytes(m.baseline_bytes)}</td></tr>
                <tr><th>"peak reserved"</th><td>{reserved}</td></tr>
                <tr><th>"device memory in use"</th><td>{device_used}</td></tr>
                <tr><th>"after the output is freed"</th><td>{leak}</td></tr>
                <tr><th>"output"</th><td>{format!("{} {:?}{}{}", r.output.dtype, r.output.shape, if r.output.requires_grad { ", requires_grad: graph kept alive" } else { "" }, if r.output.is_inference { ", inference tensor" } else { "" })}</td></tr>
                <tr><th>"memory figures"</th><td>{m.source.describe()}</td></tr>
                {r.compiled.as_ref().map(|c| view! {
                    <tr><th>"compiled (AOTInductor)"</th><td data-testid="compiled-cost">{format!(
                        "once: export {:.1} s + Inductor {:.1} s + the C++ build {:.1} s + load {:.0} ms{}; package {} for batch {}..={}, {} thread kernels",
                        c.export_ms / 1000.0, (c.compile_ms - c.build_ms) / 1000.0, c.build_ms / 1000.0, c.load_ms,
                        if c.cached { " (from the cache: measured when it was built)" } else { "" },
                        format_bytes(c.package_bytes), c.batch_min, c.batch_max, c.threads
                    )}</td></tr>
                    <tr><th>"eager beside it"</th><td data-testid="compiled-eager">{format!(
                        "p50 {:.3} ms (compiled {:.3} ms, ×{:.2}), peak {} above baseline (compiled {}); {}",
                        c.eager_p50_ms, l.p50, if l.p50 > 0.0 { c.eager_p50_ms / l.p50 } else { 0.0 },
                        format_bytes(c.eager_peak_above_baseline_bytes), format_bytes(m.peak_above_baseline_bytes),
                        match c.break_even_passes {
                            Some(n) => format!("compiling pays for itself after {n:.0} passes"),
                            None => "the compiled pass is not faster here: compiling does not pay for itself".into(),
                        }
                    )}</td></tr>
                    <tr><th>"compiled against eager"</th><td data-testid="compiled-diff">{format!(
                        "largest |Δ| {:.2e}{}", c.max_abs_diff, if c.bitwise_equal { ", equal bit for bit" } else { "" }
                    )}</td></tr>
                })}
                {crate::explain::caveat(r).map(|c| view! { <tr class="caveat"><th>"caveat"</th><td data-testid="caveat">{c}</td></tr> })}
            </tbody>
        </table>
    }
}

/// Exports, permalink and embed snippet of one recorded result.
#[component]
pub fn RecordActions(
    id: String,
    run: bool,
    charts: Vec<(&'static str, &'static str)>,
) -> impl IntoView {
    let export = |format: &str| format!("/api/records/{id}/export/{format}");
    let png_buttons = charts
        .into_iter()
        .map(|(chart, name)| {
            let filename = format!("gradless-{id}-{name}.png");
            let file_attr = filename.clone();
            let on_click = move |_| {
                #[cfg(feature = "hydrate")]
                crate::charts::download_png(chart, &filename);
                #[cfg(not(feature = "hydrate"))]
                let _ = (chart, &filename);
            };
            // The chart and the file name are in the markup too: a page that does not hydrate
            // saves the picture with its script (static_page.rs).
            view! { <button data-testid=format!("png-{name}") data-png-of=chart data-png-file=file_attr on:click=on_click>{format!("PNG: {name}")}</button> }
        })
        .collect_view();
    view! {
        <section class="panel exports" data-testid="record-actions">
            <div class="actions">
                <a class="button" href=format!("/runs/{id}") rel="external" data-testid="permalink">"Permalink"</a>
                <a class="button" href=export("json") download="" data-testid="export-json">"JSON"</a>
                <a class="button" href=export("csv") download="" data-testid="export-csv">"CSV"</a>
                {run.then(|| view! { <a class="button" href=export("py") download="" data-testid="export-py" title="A standalone PyTorch script that measures this run again, the same way">"Export as Python script"</a> })}
                {png_buttons}
            </div>
            // A page that does not hydrate could not open the dialog: its full page (the
            // permalink) has it.
            {(!crate::static_page::is_static()).then(|| view! {
                <EmbedSnippet path=Signal::derive({ let id = id.clone(); move || format!("/embed/runs/{id}") }) title="Gradless: a recorded run" image=RwSignal::new(Some(format!("/runs/{id}.png"))) />
            })}
        </section>
    }
}

/// The Embed button and, once pressed, the snippet to paste into a doc page: "copy for"
/// one docs tool (see [`crate::embed::Target`]), with the theme pinned or following the
/// reader's system, and what the tool needs for it to show. `image` is the result's PNG
/// (`/runs/{id}.png`), for the tools that show a picture: in the Lab, the recorded run on
/// its charts once there is one, the dialog saying which (or that there is none yet).
#[component]
pub fn EmbedSnippet(
    path: Signal<String>,
    title: &'static str,
    #[prop(optional)] image: Option<RwSignal<Option<String>>>,
) -> impl IntoView {
    let open = RwSignal::new(false);
    // The dialog's code is a lazy function (its own wasm chunk, app/src/routes.rs): fetched
    // on the first press, then shown.
    let loaded = RwSignal::new(false);
    let dialog = EmbedDialog {
        path,
        title,
        image,
        target: RwSignal::new(crate::embed::Target::Html),
        theme: RwSignal::new(String::new()),
        copied: RwSignal::new(false),
    };
    let on_press = move |_| {
        open.update(|o| *o = !*o);
        #[cfg(feature = "hydrate")]
        if !loaded.get_untracked() {
            leptos::task::spawn_local(async move {
                __preload_embed_dialog().await;
                loaded.set(true);
            });
        }
    };
    view! {
        <button data-testid="embed" on:click=on_press>{move || if open.get() { "Hide embed code" } else { "Embed" }}</button>
        {move || (open.get() && loaded.get()).then(|| {
            #[cfg(feature = "hydrate")]
            {
                use futures::FutureExt;
                // Loaded above: the call is answered at once.
                embed_dialog(dialog).now_or_never()
            }
            #[cfg(not(feature = "hydrate"))]
            {
                let _ = dialog;
                None::<AnyView>
            }
        })}
    }
}

/// What the embed dialog shows and keeps (while hidden too).
#[derive(Clone, Copy)]
struct EmbedDialog {
    path: Signal<String>,
    title: &'static str,
    image: Option<RwSignal<Option<String>>>,
    target: RwSignal<crate::embed::Target>,
    theme: RwSignal<String>,
    copied: RwSignal<bool>,
}

#[leptos::lazy]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn embed_dialog(dialog: EmbedDialog) -> AnyView {
    let EmbedDialog { path, title, image, target, theme, copied } = dialog;
    let image = move || image.and_then(|i| i.get());
    use crate::embed::{Links, Target};
    let snippet = move || {
        let origin = {
            #[cfg(feature = "hydrate")]
            {
                web_sys::window()
                    .and_then(|w| w.location().origin().ok())
                    .unwrap_or_default()
            }
            #[cfg(not(feature = "hydrate"))]
            {
                String::new()
            }
        };
        let img = image();
        let links = Links::new(&origin, &path.get(), img.as_deref(), title, Some(&theme.get()));
        crate::embed::snippet(target.get(), &origin, &links)
    };
    let on_copy = move |_| {
        #[cfg(feature = "hydrate")]
        {
            let text = snippet();
            leptos::task::spawn_local(async move {
                copied.set(crate::client::copy_text(&text).await.is_ok());
            });
        }
    };
    let is_lab = move || path.with(|p| p.starts_with("/embed/lab"));
    let frames = move || matches!(target.get(), Target::Html | Target::Notion | Target::Confluence | Target::Jupyter);
    let options = move || {
        Target::ALL
            .into_iter()
            .map(|t| view! { <option value=t.as_str() selected=move || target.get() == t>{move || t.label(image().is_some())}</option> })
            .collect_view()
    };
    view! {
            <div class="embed-code">
                <div class="embed-choices">
                    <label>"Copy for "
                        <select data-testid="embed-target" on:change=move |ev| {
                            if let Some(t) = Target::parse(&event_target_value(&ev)) {
                                target.set(t);
                                copied.set(false);
                            }
                        }>{options()}</select>
                    </label>
                    <label>"Theme "
                        <select data-testid="embed-theme" on:change=move |ev| { theme.set(event_target_value(&ev)); copied.set(false); }>
                            <option value="" selected=move || theme.get().is_empty()>"the reader's system setting"</option>
                            <option value="light" selected=move || theme.get() == "light">"light"</option>
                            <option value="dark" selected=move || theme.get() == "dark">"dark"</option>
                        </select>
                    </label>
                </div>
                <p class="explain" data-testid="embed-note">{move || target.get().note()}</p>
                {move || is_lab().then(|| view! {
                    <p class="explain" data-testid="embed-picture">
                        {move || if image().is_some() {
                            "The picture is the recorded run on the charts; the link and the frame open the Lab with the settings on the left, measured live."
                        } else {
                            "No run is on the charts yet, so there is no picture: Markdown and Confluence get a link to the Lab with these settings, and the HTML frame a link as its fallback. Once a run finishes, its picture is in the snippets."
                        }}
                    </p>
                })}
                {move || (is_lab() && frames()).then(|| view! {
                    <p class="explain">
                        "Add "<code>"&lock=model,batch"</code>" or "<code>"&hide=snippet,history"</code>
                        " to the frame's address (after "<code>"/embed/lab?"</code>") to fix or hide controls."
                    </p>
                })}
                {move || frames().then(|| view! {
                    <p class="explain note" data-testid="embed-origins">
                        "Only pages this server allows may show the frame: its own, and the docs sites whoever runs this server has allowed. Elsewhere readers see the browser's refusal instead of the page: ask them to allow your docs site's address (scheme, host and port). The frame resizes itself to fit."
                    </p>
                })}
                <p class="explain note" data-testid="embed-reach">
                    "Pictures and frames load from this server in the reader's browser, so it must be reachable from there; link previews in Slack and Teams are fetched by their services, so an internal host will not unfurl."
                </p>
                <textarea readonly rows="9" data-testid="embed-code" aria-label="Embed code" prop:value=snippet></textarea>
                <button data-testid="copy-embed" on:click=on_copy>{move || if copied.get() { "Copied" } else { "Copy" }}</button>
            </div>
    }
    .into_any()
}


/// Text written with `backticks` around code, shown with the code as code (the card and
/// explanation texts are written that way).
pub fn rich_text(text: &str) -> impl IntoView + use<> {
    text.split('`')
        .enumerate()
        .map(|(i, part)| {
            let part = part.to_string();
            if i % 2 == 1 {
                view! { <code>{part}</code> }.into_any()
            } else {
                part.into_any()
            }
        })
        .collect_view()
}

/// The access token for a server that asks for one, kept in this browser.
#[component]
pub fn TokenField() -> impl IntoView {
    let initial = {
        #[cfg(feature = "hydrate")]
        {
            crate::client::saved_token().unwrap_or_default()
        }
        #[cfg(not(feature = "hydrate"))]
        {
            String::new()
        }
    };
    view! {
        <div class="control">
            <label for="token">"Access token"</label>
            <input
                id="token"
                type="password"
                autocomplete="off"
                data-testid="token"
                prop:value=initial
                on:change=move |ev| {
                    let _t = event_target_value(&ev);
                    #[cfg(feature = "hydrate")]
                    crate::client::save_token(&_t);
                }
            />
            <p class="explain">"This server asks for a token to start runs (reading results needs none). It stays in this browser."</p>
        </div>
    }
}

/// A finished experiment: verdict, provenance, table, figures and notes.
pub fn outcome_view(r: &PitfallReport) -> impl IntoView + use<> {
    // The claim's verdict, headed apart from the learner's grade above it: one is about
    // the card, the other about the prediction.
    let (class, word) = match r.verdict {
        Verdict::Confirmed => ("verdict confirmed", "The claim: Confirmed"),
        Verdict::Refuted => ("verdict refuted", "The claim: Refuted here"),
        Verdict::NotApplicable => ("verdict na", "The claim: Not applicable here"),
        Verdict::Inconclusive => ("verdict inconclusive", "The claim: Inconclusive here"),
    };
    let figures = r
        .figures
        .iter()
        .map(|f| view! { <tr><th>{f.name.clone()}</th><td>{f.display()}</td></tr> })
        .collect_view();
    let notes = r
        .notes
        .iter()
        .map(|n| view! { <li>{n.clone()}</li> })
        .collect_view();
    let table = r.table.clone().map(|t| {
        view! {
            <table class="summary result-table" data-testid=format!("table-{}", r.id)>
                <thead><tr>{t.columns.into_iter().map(|c| view! { <th>{c}</th> }).collect_view()}</tr></thead>
                <tbody>
                    {t.rows.into_iter().map(|row| view! { <tr>{row.into_iter().map(|c| view! { <td>{c}</td> }).collect_view()}</tr> }).collect_view()}
                </tbody>
            </table>
        }
    });
    view! {
        {r.prediction.as_ref().map(|p| view! { <div inner_html=crate::prediction::scored_html(p)></div> })}
        {r.graded_by().map(|g| view! { <p class="explain graded-by" data-testid="graded-by">{g}</p> })}
        <p class=class data-testid=format!("verdict-{}", r.id)>
            <strong>{word}</strong>" — "{r.reason.clone()}
        </p>
        <p class="explain">{provenance(&r.env)}</p>
        {table}
        <table class="summary figures"><tbody>{figures}</tbody></table>
        <ul class="notes">{notes}</ul>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cuda_build_on_a_cpu_is_named_for_what_it_is() {
        assert_eq!(
            libtorch_line("2.11.0+cu130", Some("this ran on the CPU")),
            "libtorch 2.11.0+cu130 (libtorch's build for CUDA 13.0; this ran on the CPU)"
        );
        assert_eq!(libtorch_line("2.4.1+cu118", None), "libtorch 2.4.1+cu118 (libtorch's build for CUDA 11.8)");
        assert_eq!(libtorch_line("2.11.0+cpu", Some("x")), "libtorch 2.11.0+cpu (the CPU-only build)");
        assert_eq!(libtorch_line("2.11.0", Some("x")), "libtorch 2.11.0");
    }
}
