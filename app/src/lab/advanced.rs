//! The Lab's "Advanced" settings beyond the five switches: the weights' dtype, the memory
//! format, where the input comes from each iteration, and the CUDA-only switches (TF32,
//! `cudnn.benchmark`, CUDA graphs). A choice the device (or the model) cannot run is
//! disabled, with the reason beside it, as autocast's are.

use leptos::prelude::*;
use protocol::settings::{setting, Setting, SettingId};
use protocol::{compiled_refusal, cpu_reason, Advanced, DeviceKind, GradMode, InputSource, RunSpec};

use super::{resolved_device, LabCtx};

/// Why setting `id` (for memory format and input source: their one refusable value,
/// channels_last and pinned; for a switch: turning it on) cannot be chosen for `spec` on
/// this server; empty when it can. `no_graphs`: why the device cannot capture CUDA graphs in
/// this build (from `/api/info`).
pub fn unavailable(device: DeviceKind, spec: &RunSpec, id: SettingId, no_graphs: Option<&str>) -> String {
    match id {
        SettingId::CudaGraph if device == DeviceKind::Cpu => format!("not on a CPU: {}", cpu_reason(id)),
        SettingId::CudaGraph if no_graphs.is_some() => no_graphs.unwrap_or_default().to_string(),
        SettingId::CudaGraph if spec.grad == GradMode::Enabled => {
            "needs no_grad or inference_mode: the graph captures an inference pass".into()
        }
        SettingId::CudaGraph if spec.advanced.input_source != InputSource::Device => {
            "the input must already be on the device: a graph replays fixed device buffers".into()
        }
        SettingId::MemoryFormat if !spec.model.is_conv() => format!(
            "channels_last is a layout for convolutions' 4-D tensors; {} has none",
            spec.model.display_name()
        ),
        SettingId::Tf32 | SettingId::CudnnBenchmark | SettingId::InputSource if device == DeviceKind::Cpu => {
            format!("not on a CPU: {}", cpu_reason(id))
        }
        // The spec's own rules for it, as the check would give them with it on.
        SettingId::Compiled => {
            let on = RunSpec { advanced: Advanced { compiled: true, ..spec.advanced }, ..spec.clone() };
            compiled_refusal(&on).unwrap_or_default()
        }
        _ => String::new(),
    }
}

/// One value of a setting of the table as a radio button (`{key}-{word}`), disabled with
/// `reason` when it has one.
fn radio(lab: LabCtx, row: &'static Setting, word: String, reason: Signal<String>) -> impl IntoView {
    let spec = lab.spec;
    let (checked, chosen) = (word.clone(), word.clone());
    view! {
        <label class="choice" title=move || reason.get()>
            <input
                type="radio"
                name=row.key
                value=word.clone()
                data-testid=format!("{}-{word}", row.key)
                prop:checked=move || row.value(&spec.get()).as_deref() == Some(checked.as_str())
                prop:disabled=move || !reason.get().is_empty()
                on:change=move |_| lab.update(&|s| {
                    let _ = row.set(s, &chosen);
                })
            />
            {word.clone()}
            {move || (!reason.get().is_empty()).then(|| view! { <span class="warn" aria-hidden="true">" ⚠"</span> })}
        </label>
    }
}

/// The settings beyond the five switches, inside the Advanced section.
#[component]
pub fn BeyondSwitches(lab: LabCtx) -> impl IntoView {
    let LabCtx { spec, info, .. } = lab;
    let device = move || info.with_value(|i| resolved_device(i, spec.get().device));
    let no_graphs = move || {
        info.with_value(|i| {
            let d = resolved_device(i, spec.get().device);
            i.devices.iter().find(|x| x.kind == d).and_then(|x| x.no_cuda_graphs.clone())
        })
    };
    let why = move |id: SettingId| {
        Signal::derive(move || unavailable(device(), &spec.get(), id, no_graphs().as_deref()))
    };
    let none = Signal::derive(String::new);
    // A setting's values from the table, each with why the device or the model refuses it.
    let group = move |id: SettingId| {
        let row = setting(id);
        let radios = row
            .choices()
            .into_iter()
            .map(|word| {
                let reason = match (row.id, word.as_str()) {
                    (SettingId::MemoryFormat, "channels_last") => why(SettingId::MemoryFormat),
                    (SettingId::InputSource, "pinned") => why(SettingId::InputSource),
                    _ => none,
                };
                radio(lab, row, word, reason)
            })
            .collect_view();
        (row, radios)
    };
    let (weights, weights_radios) = group(SettingId::Dtype);
    let (formats, format_radios) = group(SettingId::MemoryFormat);
    let (sources, source_radios) = group(SettingId::InputSource);
    let switch = move |id: SettingId| {
        let row = setting(id);
        let name = row.key;
        let reason = why(id);
        let on = move || row.value(&spec.get()).as_deref() == Some("1");
        view! {
            <label class="choice" title=move || reason.get()>
                <input
                    type="checkbox"
                    data-testid=name
                    prop:checked=on
                    prop:disabled=move || !reason.get().is_empty() && !on()
                    on:change=move |ev| {
                        let v = if event_target_checked(&ev) { "1" } else { "0" };
                        lab.update(&|s| {
                            let _ = row.set(s, v);
                        })
                    }
                />
                {row.label}
            </label>
            <p class="explain note" data-testid=format!("{name}-reason")>{move || reason.get()}</p>
        }
    };
    view! {
        <fieldset class="control beyond" data-testid="beyond-switches">
            <legend>{weights.label}</legend>
            {weights_radios}
            <p class="explain">"fp16/bf16 cast the weights (and the input) once, as model.half() does; autocast instead keeps fp32 weights and casts them inside every call."</p>
        </fieldset>
        <fieldset class="control beyond">
            <legend>{formats.label}</legend>
            {format_radios}
            <p class="explain note" data-testid="memory_format-reason">{move || why(SettingId::MemoryFormat).get()}</p>
        </fieldset>
        <fieldset class="control beyond">
            <legend>{sources.label}</legend>
            {source_radios}
            <p class="explain">"pageable or pinned: the input sits in host memory and each timed iteration includes its copy to the device."</p>
            <p class="explain note" data-testid="input_source-reason">{move || why(SettingId::InputSource).get()}</p>
        </fieldset>
        <fieldset class="control beyond">
            <legend>"CUDA switches"</legend>
            {switch(SettingId::Tf32)}
            {switch(SettingId::CudnnBenchmark)}
            {switch(SettingId::CudaGraph)}
        </fieldset>
        <fieldset class="control beyond">
            <legend>"torch.compile, ahead of time"</legend>
            {switch(SettingId::Compiled)}
            <p class="explain">"The model exported (torch.export) and compiled by AOTInductor in the server's Python, then run from libtorch: the first run of a model compiles it (tens of seconds to minutes, shown apart from the passes); the eager model runs beside it on the same input."</p>
        </fieldset>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::{Advanced, ModelId};

    #[test]
    fn settings_a_device_cannot_run_say_why() {
        let mlp = RunSpec::default();
        let resnet = RunSpec { model: ModelId::Resnet18, ..RunSpec::default() };
        assert!(unavailable(DeviceKind::Cpu, &mlp, SettingId::MemoryFormat, None).contains("convolutions"));
        assert!(unavailable(DeviceKind::Cpu, &resnet, SettingId::MemoryFormat, None).is_empty());
        assert!(unavailable(DeviceKind::Cpu, &resnet, SettingId::InputSource, None).contains("page-locked"));
        assert!(unavailable(DeviceKind::Cuda, &resnet, SettingId::InputSource, None).is_empty());
        assert!(unavailable(DeviceKind::Cpu, &resnet, SettingId::Tf32, None).contains("TF32"));
        assert!(unavailable(DeviceKind::Cuda, &resnet, SettingId::Tf32, None).is_empty());
        // CUDA graphs: not on a CPU; not where the build cannot capture; only for an
        // inference pass on an input already on the device.
        assert!(unavailable(DeviceKind::Cpu, &resnet, SettingId::CudaGraph, None).contains("CPU"));
        let why = "this libtorch was built without CUDA";
        assert_eq!(unavailable(DeviceKind::Cuda, &resnet, SettingId::CudaGraph, Some(why)), why);
        assert!(unavailable(DeviceKind::Cuda, &resnet, SettingId::CudaGraph, None).contains("no_grad"));
        let inference = RunSpec { grad: GradMode::InferenceMode, ..resnet.clone() };
        assert!(unavailable(DeviceKind::Cuda, &inference, SettingId::CudaGraph, None).is_empty());
        let copied = RunSpec {
            advanced: Advanced { input_source: InputSource::Pinned, ..Advanced::default() },
            ..inference
        };
        assert!(unavailable(DeviceKind::Cuda, &copied, SettingId::CudaGraph, None).contains("device"));
    }

    #[test]
    fn the_compiled_switch_says_why_as_the_spec_check_would() {
        let resnet = RunSpec { model: ModelId::Resnet18, ..RunSpec::default() };
        assert!(unavailable(DeviceKind::Cpu, &resnet, SettingId::Compiled, None).is_empty());
        let train = RunSpec { eval: false, ..resnet.clone() };
        let why = unavailable(DeviceKind::Cpu, &train, SettingId::Compiled, None);
        assert!(why.contains("turn eval on"), "{why}");
        // The same words as the spec's check, which names the setting.
        let on = RunSpec { advanced: Advanced { compiled: true, ..Advanced::default() }, ..train };
        let e = on.check(&protocol::Catalog::built_in(), &Default::default()).unwrap_err();
        assert_eq!((e.field, e.message), (SettingId::Compiled.into(), why));
    }
}
