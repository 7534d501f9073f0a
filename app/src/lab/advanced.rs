//! The Lab's "Advanced" settings beyond the five switches: the weights' dtype, the memory
//! format, where the input comes from each iteration, and the CUDA-only switches (TF32,
//! `cudnn.benchmark`, CUDA graphs). A choice the device (or the model) cannot run is
//! disabled, with the reason beside it, as autocast's are.

use leptos::prelude::*;
use protocol::{
    cpu_reason, Advanced, DeviceKind, InputSource, MemoryFormat, RunSpec, WeightsDtype,
};

use super::{resolved_device, LabCtx};

/// Why `name` cannot be chosen for `spec` on this server; empty when it can.
pub fn unavailable(device: DeviceKind, spec: &RunSpec, name: &str) -> String {
    match name {
        "channels_last" if !spec.model.is_conv() => format!(
            "channels_last is a layout for convolutions' 4-D tensors; {} has none",
            spec.model.display_name()
        ),
        "cuda_graph" => "not built into this server yet (see the cuda-graphs card)".into(),
        "tf32" | "cudnn_benchmark" | "input_source" if device == DeviceKind::Cpu => {
            format!("not on a CPU: {}", cpu_reason(name))
        }
        _ => String::new(),
    }
}

fn radio<T: Copy + PartialEq + Send + Sync + 'static>(
    lab: LabCtx,
    group: &'static str,
    value: T,
    word: &'static str,
    reason: Signal<String>,
    get: fn(&Advanced) -> T,
    set: fn(&mut Advanced, T),
) -> impl IntoView {
    let spec = lab.spec;
    view! {
        <label class="choice" title=move || reason.get()>
            <input
                type="radio"
                name=group
                value=word
                data-testid=format!("{group}-{word}")
                prop:checked=move || get(&spec.get().advanced) == value
                prop:disabled=move || !reason.get().is_empty()
                on:change=move |_| lab.update(&|s| set(&mut s.advanced, value))
            />
            {word}
            {move || (!reason.get().is_empty()).then(|| view! { <span class="warn" aria-hidden="true">" ⚠"</span> })}
        </label>
    }
}

/// The settings beyond the five switches, inside the Advanced section.
#[component]
pub fn BeyondSwitches(lab: LabCtx) -> impl IntoView {
    let LabCtx { spec, info, .. } = lab;
    let device = move || info.with_value(|i| resolved_device(i, spec.get().device));
    let why = move |name: &'static str| Signal::derive(move || unavailable(device(), &spec.get(), name));
    let none = Signal::derive(String::new);
    let weights = WeightsDtype::ALL.map(|w| {
        radio(lab, "weights", w, w.as_str(), none, |a| a.weights, |a, v| a.weights = v)
    });
    let formats = [
        radio(lab, "memory_format", MemoryFormat::Contiguous, "contiguous", none, |a| a.memory_format, |a, v| a.memory_format = v),
        radio(lab, "memory_format", MemoryFormat::ChannelsLast, "channels_last", why("channels_last"), |a| a.memory_format, |a, v| a.memory_format = v),
    ];
    let sources = [
        radio(lab, "input_source", InputSource::Device, "device", none, |a| a.input_source, |a, v| a.input_source = v),
        radio(lab, "input_source", InputSource::Pageable, "pageable", none, |a| a.input_source, |a, v| a.input_source = v),
        radio(lab, "input_source", InputSource::Pinned, "pinned", why("input_source"), |a| a.input_source, |a, v| a.input_source = v),
    ];
    let switch = move |name: &'static str, label: &'static str, get: fn(&Advanced) -> bool, set: fn(&mut Advanced, bool)| {
        let reason = why(name);
        view! {
            <label class="choice" title=move || reason.get()>
                <input
                    type="checkbox"
                    data-testid=name
                    prop:checked=move || get(&spec.get().advanced)
                    prop:disabled=move || !reason.get().is_empty() && !get(&spec.get().advanced)
                    on:change=move |ev| { let on = event_target_checked(&ev); lab.update(&|s| set(&mut s.advanced, on)) }
                />
                {label}
            </label>
            <p class="explain note" data-testid=format!("{name}-reason")>{move || reason.get()}</p>
        }
    };
    view! {
        <fieldset class="control beyond" data-testid="beyond-switches">
            <legend>"Weights dtype"</legend>
            {weights.into_iter().collect_view()}
            <p class="explain">"fp16/bf16 cast the weights (and the input) once, as model.half() does; autocast instead keeps fp32 weights and casts them inside every call."</p>
        </fieldset>
        <fieldset class="control beyond">
            <legend>"Memory format"</legend>
            {formats.into_iter().collect_view()}
            <p class="explain note" data-testid="memory_format-reason">{move || why("channels_last").get()}</p>
        </fieldset>
        <fieldset class="control beyond">
            <legend>"Input comes from"</legend>
            {sources.into_iter().collect_view()}
            <p class="explain">"pageable or pinned: the input sits in host memory and each timed iteration includes its copy to the device."</p>
            <p class="explain note" data-testid="input_source-reason">{move || why("input_source").get()}</p>
        </fieldset>
        <fieldset class="control beyond">
            <legend>"CUDA switches"</legend>
            {switch("tf32", "TF32 matmuls and convolutions", |a| a.tf32, |a, v| a.tf32 = v)}
            {switch("cudnn_benchmark", "cudnn.benchmark", |a| a.cudnn_benchmark, |a, v| a.cudnn_benchmark = v)}
            {switch("cuda_graph", "CUDA graph replay", |a| a.cuda_graph, |a, v| a.cuda_graph = v)}
        </fieldset>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::ModelId;

    #[test]
    fn settings_a_device_cannot_run_say_why() {
        let mlp = RunSpec::default();
        let resnet = RunSpec { model: ModelId::Resnet18, ..RunSpec::default() };
        assert!(unavailable(DeviceKind::Cpu, &mlp, "channels_last").contains("convolutions"));
        assert!(unavailable(DeviceKind::Cpu, &resnet, "channels_last").is_empty());
        assert!(unavailable(DeviceKind::Cpu, &resnet, "input_source").contains("page-locked"));
        assert!(unavailable(DeviceKind::Cuda, &resnet, "input_source").is_empty());
        assert!(unavailable(DeviceKind::Cpu, &resnet, "tf32").contains("TF32"));
        assert!(unavailable(DeviceKind::Cuda, &resnet, "tf32").is_empty());
    }
}
