//! The guided start: three steps through the Lab's core lesson (autograd on, then
//! `no_grad`, then every mode side by side). Each step points at the control and the chart
//! that matter — the Lab marks them while the step is current — and can be done by
//! clicking it or by doing it with the controls; progress is remembered in this browser.
//! Also the first view's recorded run: which recorded run stands for "the default
//! settings" and how it is labelled.

use leptos::prelude::*;
use protocol::{DeviceKind, GradMode, Report, RunSpec};
use serde::{Deserialize, Serialize};

/// Where the guide's progress is kept in the browser.
pub const GUIDE_KEY: &str = "gradless-guide";

/// Progress through the guided start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guide {
    /// Steps done: 0 to [`STEPS`]`.len()` (finished).
    pub done: usize,
    /// Put away by the reader (it can be brought back).
    pub dismissed: bool,
}

/// What the guide reacts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Happened {
    /// A single run finished (not one of a comparison's).
    RunFinished(GradMode),
    /// Compare all modes finished.
    ComparisonFinished,
}

/// One step: what to do, what to look at, and the controls and charts it points at (the
/// elements carrying `data-guide` with the step's number).
pub struct Step {
    pub action: &'static str,
    pub look: &'static str,
}

pub const STEPS: [Step; 3] = [
    Step {
        action: "Run with autograd on",
        look: "Look at the memory chart: the peak above the baseline is what autograd keeps for a backward pass that inference never makes.",
    },
    Step {
        action: "Switch to no_grad and run",
        look: "What changed? The previous run stays on the charts, dotted, and the chart says by how much the peak fell.",
    },
    Step {
        action: "Compare all modes",
        look: "Five runs, one after another, side by side below: train and eval with autograd, train under no_grad, eval under inference_mode, and last eval under no_grad, which the charts then show against eval with autograd.",
    },
];

impl Guide {
    /// The step to do now (0-based), if the guide is showing and not finished.
    pub fn current(&self) -> Option<usize> {
        (!self.dismissed && self.done < STEPS.len()).then_some(self.done)
    }

    /// Progress after `what` happened: a step counts only when it is the current one and
    /// what happened is what it asks for.
    pub fn after(self, what: Happened) -> Guide {
        let step_done = matches!(
            (self.done, what),
            (0, Happened::RunFinished(GradMode::Enabled))
                | (1, Happened::RunFinished(GradMode::NoGrad))
                | (2, Happened::ComparisonFinished)
        );
        Guide {
            done: if step_done { self.done + 1 } else { self.done },
            ..self
        }
    }

    /// Reads saved progress; anything unreadable starts afresh.
    pub fn parse(text: &str) -> Guide {
        serde_json::from_str::<Guide>(text)
            .map(|g| Guide {
                done: g.done.min(STEPS.len()),
                ..g
            })
            .unwrap_or_default()
    }

    /// The runs of step 3, from the current settings: the grad modes it teaches, autocast
    /// off, ordered so that the charts end on eval under no_grad against eval with autograd
    /// (the charts draw the last run against the one before it).
    pub fn comparison_rows(current: &RunSpec) -> Vec<RunSpec> {
        let row = |eval, grad| RunSpec {
            eval,
            grad,
            autocast: protocol::Autocast::Off,
            ..current.clone()
        };
        vec![
            row(false, GradMode::Enabled),
            row(false, GradMode::NoGrad),
            row(true, GradMode::InferenceMode),
            row(true, GradMode::Enabled),
            row(true, GradMode::NoGrad),
        ]
    }

    /// The spec step `index`'s click runs, from the current settings.
    pub fn spec_for(index: usize, current: &RunSpec) -> RunSpec {
        let mut s = current.clone();
        match index {
            0 => s.grad = GradMode::Enabled,
            1 => s.grad = GradMode::NoGrad,
            _ => {}
        }
        s
    }
}

/// The label [`protocol::RecordSummary`] gives a run of `spec`: how the recorded list is
/// searched for the default settings.
pub fn summary_label(spec: &RunSpec) -> String {
    format!("{} · {}", spec.model.as_str(), spec.label())
}

/// Whether recorded run `r` is a run of `spec` on a device of kind `device`, so the first
/// view may show it as "the default settings, recorded".
pub fn is_run_of(r: &Report, spec: &RunSpec, device: DeviceKind) -> bool {
    let s = &r.spec;
    s.model == spec.model
        && s.batch == spec.batch
        && s.eval == spec.eval
        && s.grad == spec.grad
        && s.autocast == spec.autocast
        && s.warmup == spec.warmup
        && s.iters == spec.iters
        // The server records the input size it used: "not set" is the model's default.
        && s.input_size.unwrap_or(s.model.input().default)
            == spec.input_size.unwrap_or(spec.model.input().default)
        && r.env.device == device
}

/// "Recorded 2026-11-30 16:20 UTC on <hardware>": the first view's label for a recorded run.
pub fn recorded_label(r: &Report) -> String {
    let at = &r.env.measured_at;
    let when = match (at.get(..10), at.get(11..16)) {
        (Some(day), Some(time)) => format!("{day} {time} UTC"),
        _ => at.clone(),
    };
    format!(
        "Recorded {when} on {} ({}): the default settings, {}. Press Run to measure them again now.",
        r.env.device_name,
        r.env.device.as_str(),
        crate::explain::run_name(r)
    )
}

/// The guide's panel: the three steps, the current one marked, each a button that does it.
#[component]
pub fn GuidePanel(guide: RwSignal<Guide>, on_step: Callback<usize>) -> impl IntoView {
    let dismiss = move |_| guide.update(|g| g.dismissed = true);
    let restart = move |_| {
        guide.set(Guide::default());
    };
    view! {
        <section class="guide" aria-label="Guided start" data-testid="guide" class:hidden=move || guide.with(|g| g.dismissed)>
            <div class="guide-head">
                <h2>"The lesson in three steps"</h2>
                <span class="guide-count" data-testid="guide-progress">
                    {move || guide.with(|g| if g.done >= STEPS.len() { "done: all three".to_string() } else { format!("{} of {} done", g.done, STEPS.len()) })}
                </span>
                <button class="link" data-testid="guide-restart" on:click=restart>"Start over"</button>
                <button class="link" data-testid="guide-dismiss" on:click=dismiss>"Hide"</button>
            </div>
            <ol class="guide-steps">
                {STEPS
                    .iter()
                    .enumerate()
                    .map(|(i, step)| {
                        let state = move || guide.with(|g| if g.done > i { "done" } else if g.done == i { "current" } else { "later" });
                        view! {
                            <li class=move || format!("guide-step {}", state()) aria-current=move || (state() == "current").then_some("step")>
                                <button
                                    class=move || if state() == "current" { "primary" } else { "" }
                                    data-testid=format!("guide-step-{}", i + 1)
                                    on:click=move |_| on_step.run(i)
                                >
                                    {format!("{}. {}", i + 1, step.action)}
                                </button>
                                <span class="guide-state">{move || match state() { "done" => " ✓ done", _ => "" }}</span>
                                <p class="explain">{step.look}</p>
                            </li>
                        }
                    })
                    .collect_view()}
            </ol>
            {move || guide.with(|g| g.done >= STEPS.len()).then(|| view! {
                <p class="guide-end" data-testid="guide-finished">
                    "That is the lesson: autograd keeps activations for a backward pass, no_grad and inference_mode do not; eval() changes the layers, not the memory. The "
                    <a href="/pitfalls">"Pitfalls"</a>" page tests the claims people get wrong."
                </p>
            })}
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_step_ends_on_the_grad_modes_it_teaches() {
        let current = RunSpec { autocast: protocol::Autocast::Bf16, ..RunSpec::default() };
        let rows = Guide::comparison_rows(&current);
        assert!(rows.iter().all(|r| r.autocast == protocol::Autocast::Off));
        // Every grad mode the step names, in both modes where it says so.
        for grad in GradMode::ALL {
            assert!(rows.iter().any(|r| r.grad == grad), "{grad:?}");
        }
        assert!(rows.iter().any(|r| !r.eval && r.grad == GradMode::Enabled));
        // The charts show the last run against the one before: eval, no_grad against autograd.
        let (before, last) = (&rows[rows.len() - 2], &rows[rows.len() - 1]);
        assert_eq!((before.eval, before.grad), (true, GradMode::Enabled));
        assert_eq!((last.eval, last.grad), (true, GradMode::NoGrad));
        assert!(STEPS[2].look.starts_with("Five runs"));
        assert_eq!(rows.len(), 5);
    }

    #[test]
    fn the_guide_advances_only_when_its_current_step_is_done() {
        let g = Guide::default();
        assert_eq!(g.current(), Some(0));
        // no_grad first does not finish "run with autograd on".
        assert_eq!(g.after(Happened::RunFinished(GradMode::NoGrad)), g);
        let g = g.after(Happened::RunFinished(GradMode::Enabled));
        assert_eq!(g.current(), Some(1));
        // A comparison before step 2 does not skip it.
        assert_eq!(g.after(Happened::ComparisonFinished), g);
        let g = g.after(Happened::RunFinished(GradMode::NoGrad));
        assert_eq!(g.current(), Some(2));
        let g = g.after(Happened::ComparisonFinished);
        assert_eq!(g.current(), None, "finished");
        assert_eq!(g.done, STEPS.len());
        // Finished stays finished.
        assert_eq!(g.after(Happened::RunFinished(GradMode::Enabled)), g);
    }

    #[test]
    fn progress_survives_the_browser_and_bad_storage_starts_afresh() {
        let g = Guide {
            done: 2,
            dismissed: true,
        };
        let saved = serde_json::to_string(&g).unwrap();
        assert_eq!(Guide::parse(&saved), g);
        assert_eq!(g.current(), None, "dismissed: nothing is pointed at");
        assert_eq!(Guide::parse("{oops"), Guide::default());
        assert_eq!(
            Guide::parse(r#"{"done":99,"dismissed":false}"#).done,
            STEPS.len()
        );
    }

    #[test]
    fn a_step_runs_its_grad_mode_and_keeps_every_other_setting() {
        let current = RunSpec {
            batch: 7,
            grad: GradMode::InferenceMode,
            ..RunSpec::default()
        };
        let one = Guide::spec_for(0, &current);
        let two = Guide::spec_for(1, &current);
        assert_eq!((one.grad, two.grad), (GradMode::Enabled, GradMode::NoGrad));
        assert_eq!((one.batch, one.model), (current.batch, current.model));
    }

    fn recorded(model: &str, grad: &str, device: &str) -> Report {
        serde_json::from_value(serde_json::json!({
            "spec": {"model": model, "device": "auto", "batch": 1, "input_size": null, "eval": true,
                     "grad": grad, "autocast": "off", "warmup": 3, "iters": 20, "threads": null},
            "env": {"device": device, "device_name": "Test CPU 9000", "device_total_memory_bytes": null,
                    "driver_version": null, "cuda_version": null, "cudnn_version": null,
                    "libtorch_version": "2.11.0", "cpu_model": "Test CPU 9000", "threads": 1,
                    "measured_at": "2026-11-30T16:20:31Z", "gradless_version": "0"},
            "latency_ms": {"mean": 1.0, "p50": 1.0, "p95": 1.0, "p99": 1.0, "min": 1.0, "max": 1.0, "stddev": 0.0},
            "throughput_per_s": 1.0,
            "memory": {"source": "cpu_tensor_memory", "baseline_bytes": 1, "peak_allocated_bytes": 2,
                       "peak_above_baseline_bytes": 1, "peak_reserved_bytes": null, "after_release_bytes": 1,
                       "leaked_bytes": 0, "device_used_bytes": null},
            "output": {"dtype": "Float", "shape": [1, 10], "is_inference": false, "requires_grad": true},
            "warmup": [], "samples": []
        }))
        .unwrap()
    }

    #[test]
    fn the_first_view_shows_only_a_run_of_the_default_settings_on_this_device() {
        let default = crate::settings::default_for_device(DeviceKind::Cpu);
        let model = default.model.as_str();
        let r = recorded(model, "enabled", "cpu");
        assert!(is_run_of(&r, &default, DeviceKind::Cpu));
        assert!(!is_run_of(&r, &default, DeviceKind::Cuda), "another device");
        assert!(!is_run_of(
            &recorded(model, "no_grad", "cpu"),
            &default,
            DeviceKind::Cpu
        ));
        assert!(!is_run_of(
            &recorded("resnet18", "enabled", "cpu"),
            &default,
            DeviceKind::Cpu
        ));
        // The server records the input size it resolved: the model's default is "not set".
        let mut resolved = r.clone();
        resolved.spec.input_size = Some(default.model.input().default);
        assert!(is_run_of(&resolved, &default, DeviceKind::Cpu));
        resolved.spec.input_size = Some(default.model.input().default / 2);
        assert!(!is_run_of(&resolved, &default, DeviceKind::Cpu));
        // The list is searched by the label the server gives a recorded run.
        assert_eq!(
            protocol::Record {
                id: "0123456789abcdef".into(),
                body: protocol::RecordBody::Run(Box::new(r.clone()))
            }
            .summary()
            .label,
            summary_label(&default)
        );
        // Labelled as recorded, with its date and hardware.
        let label = recorded_label(&r);
        assert!(
            label.starts_with("Recorded 2026-11-30 16:20 UTC on Test CPU 9000 (cpu)"),
            "{label}"
        );
    }
}
