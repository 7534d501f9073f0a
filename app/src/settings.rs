//! The lab's settings as they live in the URL: every setting is a query parameter, so a
//! link restores exactly what its sender saw (and `&run=1` starts the run on arrival).
//! Pure functions, shared by the server render and the browser.

use protocol::settings::{self, Page, Reading, SETTINGS};
use protocol::{DeviceChoice, DeviceInfo, DeviceKind, Limits, ModelId, RunSpec};

/// The Lab's default settings on a device of `kind`: the ones that show the core lesson
/// (autograd on vs `no_grad`) plainly, in a run short enough to wait for.
///
/// - CUDA: ResNet-50, batch 32 — the seed setting; activations dominate the weights and a
///   run takes well under a second on a datacenter GPU.
/// - CPU: MobileNet-V2, batch 1. Measured with the CLI on a busy 2-core VM
///   (`gradless measure --model M --batch N --grad enabled|no_grad --threads 1 --json`,
///   20 timed + 3 warm-up iterations; peak above baseline, p50):
///
///   | model, batch       | enabled          | no_grad         | ratio | whole run |
///   |--------------------|------------------|-----------------|-------|-----------|
///   | tiny MLP, 32       | 0.3 MiB, 0.5 ms  | 0.1 MiB, 0.5 ms | 3×    | < 0.1 s   |
///   | tiny MLP, 1024     | 10.0 MiB, 23 ms  | 4.0 MiB, 22 ms  | 2.5×  | ~0.9 s    |
///   | transformer, 1     | 6.4 MiB, 24 ms   | 1.8 MiB, 26 ms  | 3.6×  | ~1.1 s    |
///   | MobileNet-V2, 1    | 74.2 MiB, 99 ms  | 11.1 MiB, 76 ms | 6.7×  | ~2.8 s    |
///   | ResNet-18, 1       | 29.6 MiB, 145 ms | 9.5 MiB, 134 ms | 3.1×  | ~4.2 s    |
///   | ResNet-18, 4       | 91.3 MiB, 468 ms | 24.5 MiB, 389 ms| 3.7×  | ~11 s     |
///
///   (the machine's load average was 7–9 on its 2 cores while measuring, so the times are
///   about 2–3× those of an idle 2-core CPU). MobileNet-V2 at batch 1 shows the largest
///   difference — 74 MiB against 11 MiB, against a 14 MiB baseline — and, idle, runs in
///   about a second; the tiny MLP's difference (the old default) is under 1 MiB, invisible
///   beside its baseline.
pub fn default_for_device(kind: DeviceKind) -> RunSpec {
    let (model, batch) = match kind {
        DeviceKind::Cuda => (ModelId::Resnet50, 32),
        DeviceKind::Cpu => (ModelId::MobilenetV2, 1),
    };
    RunSpec {
        model,
        batch,
        ..RunSpec::default()
    }
}

/// The device `choice` resolves to among `devices` (the server's, best first).
pub fn resolve_device(devices: &[DeviceInfo], choice: DeviceChoice) -> DeviceKind {
    let has_cuda = devices.iter().any(|d| d.kind == DeviceKind::Cuda);
    // A CUDA choice on a server without CUDA keeps naming CUDA: the autocast note then
    // says there is no such device.
    choice.resolve(has_cuda).unwrap_or(DeviceKind::Cuda)
}

/// The Lab's defaults on this server when the address asks for device `choice`.
pub fn lab_default(devices: &[DeviceInfo], choice: DeviceChoice) -> RunSpec {
    RunSpec {
        device: choice,
        ..default_for_device(resolve_device(devices, choice))
    }
}

/// A RunSpec from query parameters (`get`: the router's reading of a key, its last value);
/// anything missing or unreadable keeps this server's default for the device asked for
/// ([`lab_default`]). The keys are the settings table's ([`protocol::settings`]).
pub fn spec_from_query(devices: &[DeviceInfo], catalog: &protocol::Catalog, get: impl Fn(&str) -> Option<String>) -> RunSpec {
    read_query(devices, catalog, &get).0
}

fn read_query(devices: &[DeviceInfo], catalog: &protocol::Catalog, get: &dyn Fn(&str) -> Option<String>) -> (RunSpec, Reading) {
    let device = get("device")
        .and_then(|v| v.parse::<DeviceChoice>().ok())
        .unwrap_or(DeviceChoice::Auto);
    let mut spec = lab_default(devices, device);
    // The Lab measures forward passes; generate runs come from the Generate page.
    let reading = settings::read_query(SETTINGS, Page::Lab, &mut spec, get, catalog);
    (spec, reading)
}

/// The query string (without `?`) that restores `spec`.
pub fn query_from_spec(spec: &RunSpec) -> String {
    settings::query(SETTINGS, Page::Lab, spec)
}

/// What a link asked for that a page could not use, one sentence each ("model
/// “resnet999” is not a value this page knows: showing mobilenet_v2"), and each old key
/// it read under today's name, so nothing is dropped or renamed silently.
pub fn said_of_reading(page: Page, spec: &RunSpec, reading: &Reading) -> Vec<String> {
    let mut out: Vec<String> = reading
        .refused
        .iter()
        .map(|(key, v, why)| {
            let shown = settings::on_page(SETTINGS, page)
                .find(|s| s.key == key || s.legacy == Some(key.as_str()))
                .and_then(|s| s.shown(spec).map(|v| if s.key == key { v } else { format!("{}={v}", s.key) }))
                .unwrap_or_default();
            format!("{key} “{v}” is not a value this page knows ({why}): showing {shown}")
        })
        .collect();
    out.extend(reading.renamed.iter().map(|(old, v, key)| {
        format!("“{old}={v}” is the old spelling of {key}={v}, read as such: the address now says {key} (`{old}` named both the quantization and the weights' dtype)")
    }));
    out
}

/// What a link asked for that the Lab could not use ([`said_of_reading`]).
pub fn ignored_in_query(devices: &[DeviceInfo], catalog: &protocol::Catalog, get: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let (spec, reading) = read_query(devices, catalog, &get);
    said_of_reading(Page::Lab, &spec, &reading)
}

/// Checks a whole number typed by a person against `min..=max`; the message names the
/// setting and its limits.
pub fn parse_count(text: &str, what: &str, min: u32, max: u32) -> Result<u32, String> {
    let t = text.trim();
    let range = format!("{what} must be a whole number from {min} to {max} on this server");
    match t.parse::<i64>() {
        Ok(n) if (i64::from(min)..=i64::from(max)).contains(&n) => Ok(n as u32),
        Ok(n) => Err(format!("{n} is out of range: {range}")),
        Err(_) => Err(format!("“{t}” is not a whole number: {range}")),
    }
}

/// Checks a batch typed by a person; the message says what is allowed.
pub fn parse_batch(text: &str, limits: &Limits) -> Result<u32, String> {
    let text = text.trim();
    let n: i64 = text.parse().map_err(|_| {
        format!(
            "“{text}” is not a whole number; enter a batch size from 1 to {}",
            limits.max_batch
        )
    })?;
    if n < 1 {
        return Err(format!(
            "batch must be at least 1 (and at most {} on this server)",
            limits.max_batch
        ));
    }
    if n > i64::from(limits.max_batch) {
        return Err(format!(
            "batch {n} is above this server's limit of {}",
            limits.max_batch
        ));
    }
    Ok(n as u32)
}

/// The power-of-two stops of the batch slider, up to the server's limit.
pub fn batch_stops(limits: &Limits) -> Vec<u32> {
    let mut stops = vec![];
    let mut b = 1u32;
    while b <= limits.max_batch {
        stops.push(b);
        match b.checked_mul(2) {
            Some(n) => b = n,
            None => break,
        }
    }
    stops
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use protocol::{Advanced, Autocast, GradMode, InputSource, MemoryFormat, WeightsDtype};

    /// The router's own reading of an address: `leptos_router` parses the query into its
    /// `ParamsMap` and a page's `q.get(key)` takes a repeated key's last value.
    pub(crate) fn router(query: &str) -> impl Fn(&str) -> Option<String> {
        let url = leptos_router::location::RequestUrl::new(&format!("/?{query}")).parse().unwrap();
        let params = url.search_params().clone();
        move |k| params.get(k)
    }

    #[test]
    fn query_round_trips_every_setting() {
        let spec = RunSpec {
            model: ModelId::Resnet50,
            device: DeviceChoice::Cpu,
            batch: 7,
            input_size: Some(96),
            eval: false,
            grad: GradMode::InferenceMode,
            autocast: Autocast::Bf16,
            warmup: 1,
            iters: 9,
            threads: Some(2),
            advanced: Advanced {
                weights: WeightsDtype::Bf16,
                memory_format: MemoryFormat::ChannelsLast,
                input_source: InputSource::Pageable,
                tf32: true,
                cudnn_benchmark: true,
                cuda_graph: false,
                compiled: false,
            },
            generate: None,
        };
        let back = spec_from_query(&[], &protocol::Catalog::built_in(), router(&query_from_spec(&spec)));
        assert_eq!(back, spec);
        each_setting_round_trips(Page::Lab, &lab_default(&[], DeviceChoice::Cpu), query_from_spec, |q| spec_from_query(&[], &protocol::Catalog::built_in(), router(q)));
    }

    /// Every setting of `page`, one at a time, each of its values (and a number, and a
    /// model's name) set on `base`: the address `query` writes reads back to the same spec
    /// through `read`, which reads it as the router does.
    pub(crate) fn each_setting_round_trips(page: Page, base: &RunSpec, query: fn(&RunSpec) -> String, read: impl Fn(&str) -> RunSpec) {
        for s in settings::on_page(SETTINGS, page) {
            for v in s.choices().into_iter().chain(["2".to_string(), "llama_tiny_mha".to_string()]) {
                let mut one = base.clone();
                if let Some(only) = s.only_with {
                    settings::setting(only.on).set(&mut one, only.word).unwrap();
                }
                // A value the row takes but the run would refuse (a text prompt on a model
                // without a byte vocabulary) is refused by the reading too: no round trip.
                if s.set(&mut one, &v).is_err() || one.check(&protocol::Catalog::built_in(), &Default::default()).is_err() {
                    continue;
                }
                assert_eq!(read(&query(&one)), one, "{}={v}", s.key);
            }
        }
    }

    #[test]
    fn an_old_weights_key_still_reads_in_the_lab() {
        let said = ignored_in_query(&[], &protocol::Catalog::built_in(), router("model=resnet18&weights=bf16"));
        assert!(said.len() == 1 && said[0].contains("dtype=bf16"), "{said:?}");
        assert_eq!(spec_from_query(&[], &protocol::Catalog::built_in(), router("weights=bf16")).advanced.weights, WeightsDtype::Bf16);
    }

    #[test]
    fn garbage_in_the_url_falls_back_to_defaults() {
        let spec = spec_from_query(&[], &protocol::Catalog::built_in(), |k| {
            Some(if k == "batch" {
                "0".into()
            } else {
                "nonsense".into()
            })
        });
        let d = lab_default(&[], DeviceChoice::Auto);
        assert_eq!(
            (spec.model, spec.batch, spec.grad),
            (d.model, d.batch, d.grad)
        );
    }

    #[test]
    fn typed_batches_get_clear_messages() {
        let limits = Limits::default();
        assert_eq!(parse_batch(" 64 ", &limits), Ok(64));
        assert!(parse_batch("abc", &limits)
            .unwrap_err()
            .contains("not a whole number"));
        assert!(parse_batch("0", &limits)
            .unwrap_err()
            .contains("at least 1"));
        assert!(parse_batch("999999", &limits)
            .unwrap_err()
            .contains("limit"));
        let stops = batch_stops(&limits);
        assert_eq!(stops.first(), Some(&1));
        assert!(stops.windows(2).all(|w| w[1] == 2 * w[0]));
        assert!(*stops.last().unwrap() <= limits.max_batch);
    }

    #[test]
    fn counts_outside_the_limits_are_refused_with_the_limits_named() {
        for bad in ["101", "5000", "-1", "2.5", "", "abc"] {
            let e = parse_count(bad, "Timed iterations", 1, 100).unwrap_err();
            assert!(e.contains("from 1 to 100"), "{bad}: {e}");
        }
        assert_eq!(parse_count(" 100 ", "x", 1, 100), Ok(100));
        assert_eq!(parse_count("0", "x", 0, 100), Ok(0));
        let limits = Limits::default();
        let e = parse_batch("-3", &limits).unwrap_err();
        assert!(e.contains("at least 1"), "{e}");
        assert!(!e.contains("not a whole number"), "{e}");
    }

    #[test]
    fn what_a_link_asked_for_and_did_not_get_is_said() {
        let q = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(a, _)| *a == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let said = ignored_in_query(&[], &protocol::Catalog::built_in(), q(&[("model", "resnet999"), ("batch", "8")]));
        assert_eq!(said.len(), 1, "{said:?}");
        let shown = lab_default(&[], DeviceChoice::Auto).model;
        assert!(said[0].contains("resnet999") && said[0].contains(shown.as_str()));
        assert!(ignored_in_query(&[], &protocol::Catalog::built_in(), q(&[("model", "resnet18"), ("grad", "no_grad")])).is_empty());
        assert_eq!(
            ignored_in_query(&[], &protocol::Catalog::built_in(), q(&[("batch", "0"), ("iters", "x")])).len(),
            2
        );
    }

    fn device(kind: DeviceKind) -> DeviceInfo {
        DeviceInfo {
            kind,
            name: kind.as_str().into(),
            total_memory_bytes: None,
            autocast: vec![],
            no_cuda_graphs: None,
        }
    }

    #[test]
    fn the_default_follows_the_device_the_run_will_use() {
        let cpu_only = [device(DeviceKind::Cpu)];
        let gpu_server = [device(DeviceKind::Cuda), device(DeviceKind::Cpu)];
        let none = |_: &str| None;
        // The seed setting on a GPU; a small model on a CPU, never the tiny MLP whose
        // grad/no_grad difference is invisible beside its baseline.
        let gpu = spec_from_query(&gpu_server, &protocol::Catalog::built_in(), none);
        assert_eq!((gpu.model, gpu.batch), (ModelId::Resnet50, 32));
        let cpu = spec_from_query(&cpu_only, &protocol::Catalog::built_in(), none);
        assert_ne!(cpu.model, ModelId::TinyMlp);
        assert!(
            cpu.batch <= 4,
            "a CPU run must stay short: batch {}",
            cpu.batch
        );
        // Asking for the CPU on a GPU server gets the CPU's default, not ResNet-50 at 32.
        let asked_cpu =
            spec_from_query(&gpu_server, &protocol::Catalog::built_in(), |k| (k == "device").then(|| "cpu".to_string()));
        assert_eq!((asked_cpu.model, asked_cpu.batch), (cpu.model, cpu.batch));
        assert_eq!(asked_cpu.device, DeviceChoice::Cpu);
        // Only what the address leaves out is defaulted; the lesson's setting starts at
        // autograd on, so the first run shows the cost no_grad removes.
        let asked = spec_from_query(&gpu_server, &protocol::Catalog::built_in(), |k| (k == "batch").then(|| "4".to_string()));
        assert_eq!((asked.model, asked.batch), (ModelId::Resnet50, 4));
        assert_eq!(gpu.grad, GradMode::Enabled);
        // Every default is a spec the server accepts.
        for d in [gpu, cpu] {
            assert!(d.check(&protocol::Catalog::built_in(), &Limits::default()).is_ok(), "{d:?}");
        }
    }
}
