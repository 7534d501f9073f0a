//! What the traced pass costs: for every built-in model at its default settings (3 warm-up
//! and 20 timed iterations, eval, grad enabled and no_grad), the wall time of a whole run
//! (which includes the traced pass) against the wall time of the traced pass alone, and a
//! traced pass against an untraced one (the probe's own cost).
//!
//! `cargo run --release -p engine --example trace_overhead [cpu|cuda] [MODEL:BATCH ...]`
//! (default: every model at the default batch)

use std::time::Instant;

use engine::lab::{forward, traced_pass, Lab, LabConfig, RunControl};
use engine::torch_call::{synchronize, tch_device};
use protocol::{DeviceChoice, DeviceKind, GradMode, Limits, ModelId, RunSpec};

fn main() {
    let device = match std::env::args().nth(1).as_deref() {
        Some("cuda") => DeviceKind::Cuda,
        _ => DeviceKind::Cpu,
    };
    let mut lab = Lab::new(LabConfig::default()).expect("lab starts");
    println!(
        "{:<12} {:>5} {:<8} {:>10} {:>11} {:>9} {:>12} {:>12}",
        "model", "batch", "grad", "run ms", "traced ms", "share", "plain pass", "probe cost"
    );
    let picks: Vec<(ModelId, u32)> = std::env::args()
        .skip(2)
        .filter_map(|a| {
            let (m, b) = a.split_once(':')?;
            Some((m.parse().ok()?, b.parse().ok()?))
        })
        .collect();
    let picks = if picks.is_empty() {
        ModelId::ALL
            .iter()
            .map(|&m| (m, RunSpec::default().batch))
            .collect()
    } else {
        picks
    };
    for (model, batch) in picks {
        for grad in [GradMode::Enabled, GradMode::NoGrad] {
            let spec = RunSpec {
                model,
                batch,
                grad,
                device: match device {
                    DeviceKind::Cpu => DeviceChoice::Cpu,
                    DeviceKind::Cuda => DeviceChoice::Cuda,
                },
                ..RunSpec::default()
            };
            let checked = engine::check_spec(spec.clone(), &protocol::Catalog::built_in(), &Limits::default(), lab.machine())
                .expect("valid spec");
            let control = RunControl::default();
            // Once to build the model and find the device's peak; then the measured run.
            lab.measure(&checked, &control, &mut |_| {}).expect("run");
            let start = Instant::now();
            let report = lab.measure(&checked, &control, &mut |_| {}).expect("run");
            let run_ms = start.elapsed().as_secs_f64() * 1000.0;

            let size = checked.input_size();
            let index = lab.model_index(model, device, size).expect("model");
            let m = lab.model(index);
            let meter = lab.meter(device);
            let input = m.input(spec.batch, size, tch_device(device));
            synchronize(device).unwrap();
            let offset = meter.read().unwrap().allocated;
            let resolved = report.spec.clone();
            let mut best_traced = f64::INFINITY;
            let mut best_plain = f64::INFINITY;
            for _ in 0..3 {
                let t = Instant::now();
                let _ = traced_pass(m, &input, &resolved, device, &meter, offset).unwrap();
                best_traced = best_traced.min(t.elapsed().as_secs_f64() * 1000.0);
                let t = Instant::now();
                let out = forward(m, &input, &resolved, device).unwrap();
                synchronize(device).unwrap();
                drop(out);
                best_plain = best_plain.min(t.elapsed().as_secs_f64() * 1000.0);
            }
            let traced_ms: f64 = report.trace.iter().map(|p| p.time_ms).sum::<f64>();
            let traced_wall = traced_ms.max(best_traced);
            println!(
                "{:<12} {:>5} {:<8} {:>10.1} {:>11.2} {:>8.2}% {:>12.2} {:>11.1}%",
                model.as_str(),
                batch,
                grad.as_str(),
                run_ms,
                traced_wall,
                100.0 * traced_wall / run_ms,
                best_plain,
                100.0 * (best_traced / best_plain - 1.0)
            );
        }
    }
}
