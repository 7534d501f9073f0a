//! The vocabulary every part of Gradless speaks: what a run asks for ([`RunSpec`]), what it
//! streams while it runs ([`Event`]) and what it reports at the end ([`Report`]).
//!
//! This crate is compiled for the browser (WASM) as well as for the server, so it holds
//! plain data and pure functions only: no libtorch, no I/O. Structural validation of a
//! spec lives here so that the browser and the server give the same message for the
//! same mistake; checks that need the device (is there a GPU? can it do bf16?) live in
//! the engine.

mod advanced;
mod catalog;
pub mod bytes_rule;
mod compiled;
pub mod decoder;
mod errors;
mod events;
mod figure;
mod format;
mod generate;
mod info;
pub mod learn;
mod model;
mod partial;
pub mod noise;
mod pitfall;
mod predict;
mod python;
mod python_generate;
mod quant;
pub use quant::*;
mod quality;
pub use quality::{Quality, QualityPlan, QualityRow};
pub use python_generate::{hand_written_loop as python_generate_loop, with_generate as python_generate_hf};
mod record;
mod report;
mod spec;
pub mod stats;
pub mod team;
#[doc(hidden)]
pub mod testing;
mod trace;
pub mod settings;
pub mod words;
pub use advanced::*;
pub use catalog::Catalog;
pub use compiled::{compiled_batch_range, compiled_refusal, CompiledFacts};
pub use errors::*;
pub use events::*;
pub use figure::{Figure, Unit};
pub use format::*;
pub use generate::*;
pub use info::*;
pub use pitfall::{
    ChartKind, Known, PitfallInfo, PitfallOptions, PitfallReport, Series, Statement, Table, Verdict,
    shows_fix_first, BUDGET_PRESETS, DEFAULT_CPU_BUDGET_BYTES, DEFAULT_CUDA_BUDGET_BYTES,
};
pub use predict::{bytes_direction, Ask, Choice, Prediction, Question, Scored, SAME_BYTES_WITHIN};
pub use python::python_snippet;
pub use record::{is_record_id, Record, RecordBody, RecordKind, RecordStatus, RecordSummary, Unfinished};
pub use report::*;
pub use model::*;
pub use partial::PartialRun;
pub use spec::*;
pub use trace::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_json_is_the_default_spec() {
        let spec: RunSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(spec, RunSpec::default());
    }

    #[test]
    fn unknown_fields_and_models_are_rejected_by_name() {
        let e = serde_json::from_str::<RunSpec>(r#"{"batchsize": 3}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("batchsize"), "{e}");
        // A name that could be a team model's reads (records of removed models must), and
        // the check refuses it by name; one that could not be is refused while reading.
        let spec = serde_json::from_str::<RunSpec>(r#"{"model": "resnet9"}"#).unwrap();
        let e = spec.check(&Catalog::built_in(), &Limits::default()).unwrap_err();
        assert_eq!(e.field, "model");
        assert!(
            e.message.contains("resnet9") && e.message.contains("resnet18"),
            "{e}"
        );
        let e = serde_json::from_str::<RunSpec>(r#"{"model": "../etc"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("../etc") && e.contains("resnet18"), "{e}");
    }

    #[test]
    fn check_names_the_field_at_fault() {
        let limits = Limits::default();
        let cases = [
            (
                RunSpec {
                    batch: 0,
                    ..Default::default()
                },
                "batch",
            ),
            (
                RunSpec {
                    batch: limits.max_batch + 1,
                    ..Default::default()
                },
                "batch",
            ),
            (
                RunSpec {
                    iters: 0,
                    ..Default::default()
                },
                "iters",
            ),
            (
                RunSpec {
                    warmup: limits.max_warmup + 1,
                    ..Default::default()
                },
                "warmup",
            ),
            (
                RunSpec {
                    threads: Some(0),
                    ..Default::default()
                },
                "threads",
            ),
            (
                RunSpec {
                    model: ModelId::Resnet18,
                    input_size: Some(8),
                    ..Default::default()
                },
                "input_size",
            ),
        ];
        for (spec, field) in cases {
            assert_eq!(spec.check(&Catalog::built_in(), &limits).unwrap_err().field, field, "{spec:?}");
        }
        assert!(RunSpec::default().check(&Catalog::built_in(), &limits).is_ok());
    }

    #[test]
    fn events_are_tagged_by_type() {
        let json = serde_json::to_value(Event::Queued { position: 2 }).unwrap();
        assert_eq!(json["type"], "queued");
        assert_eq!(json["position"], 2);
    }

    #[test]
    fn parse_round_trips_every_name() {
        for m in ModelId::ALL {
            assert_eq!(m.as_str().parse::<ModelId>().unwrap(), m);
        }
        for g in GradMode::ALL {
            assert_eq!(g.as_str().parse::<GradMode>().unwrap(), g);
        }
        for &a in words::all::<Autocast>() {
            assert_eq!(a.as_str().parse::<Autocast>().unwrap(), a);
        }
        assert!("gpu".parse::<DeviceChoice>().is_err());
    }

    #[test]
    fn bytes_format_in_binary_units() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
