//! The pitfall experiments: one live experiment per lesson people get wrong, each yielding
//! figures and a verdict computed from them by a rule written down on its card
//! (`threshold`), never tuned after the fact.
//!
//! - this module: the [`Card`] type and the catalogue ([`CARDS`]), which is also the
//!   dispatch table: a card holds its texts *and* its experiment, so a card cannot be listed
//!   without an experiment or run without a text.
//! - [`kit`]: what every experiment shares (context, the timing loop, the per-pass memory
//!   measurement, the noise-aware comparison, the verdict builder).
//! - the experiments, by lesson: [`modes`] (eval, grad modes, autocast), [`memory`] (what
//!   autograd keeps alive), [`allocator`] (budgets and the CUDA caching allocator),
//!   [`timing`] (warm-up and asynchronous execution), [`table`] (the classic rows side by
//!   side), [`precision`] (cast weights against autocast, TF32), [`layout`]
//!   (channels_last, the input's copy to the device, cudnn.benchmark), [`cuda_graphs`]
//!   (CUDA graph replay), [`compiled`] (a model compiled ahead of time by AOTInductor,
//!   against eager) and [`generation`] (decoder LLMs: the KV cache, prefill and
//!   decode).
//! - [`python`]: the Python side of the cards about per-call overhead (the same experiment
//!   timed from the server's Python, beside Gradless's figures from Rust).
//!
//! Each card also asks one question before it runs ([`Card::question`]): a figure its
//! report has, or the ratio of two, asked as a choice or a value on a scale; the answer
//! comes in [`PitfallOptions::prediction`], is checked before anything runs and is scored
//! against the report's figures ([`protocol::Question::score`]).
//!
//! Everything runs on the device thread, on the [`Lab`] (see [`crate::Worker::call`]),
//! under the [`RunControl`] the worker gives the task.
//!
//! Each card's rule says the regime it needs on a large GPU (an H200: 139 GB, ~1 PFLOP/s
//! in bf16, kernel launches of a few µs) and why it decides correctly there; on a CPU the
//! cards run small (96² images) to answer in seconds.

pub mod allocator;
pub mod compiled;
pub mod cuda_graphs;
pub mod figures;
pub mod generation;
pub mod kit;
pub mod layout;
pub mod memory;
pub mod modes;
pub mod precision;
pub mod python;
pub mod renamed;
pub mod table;
pub mod timing;
#[cfg(test)]
mod unspoiled;

use std::borrow::Cow;

pub use protocol::Ask;
use protocol::{
    DeviceChoice, DeviceKind, FailureKind, PitfallInfo, PitfallOptions, PitfallReport, Question,
    RunFailure,
};

use crate::lab::{Lab, RunControl};
use crate::torch_call::failure;
use kit::{Ctx, FigureName, Outcome};
use protocol::Unit;
pub use python::PythonPeer;

/// An experiment: runs on the lab under the context, returns its figures and verdict.
pub type Experiment = fn(&mut Lab, &Ctx<'_>) -> Result<Outcome, RunFailure>;

/// One lesson: what the page shows, and the experiment that checks it. The page shows it
/// in two states (see [`PitfallInfo`]): the question (`asks`, `setup`, the code under
/// `labels`, `question`), then, once the learner has predicted, the lesson (`title`,
/// `claim`, `statements`, "Falls in" / "Avoids it", `threshold`, the figures).
pub struct Card {
    pub id: &'static str,
    /// The lesson's title: it states the answer, so the page shows it after the lock-in.
    pub title: &'static str,
    /// The question state's title: neutral, posed as a question, leaving the answer open.
    pub asks: &'static str,
    /// Neutral labels of the two code variants (`pitfall`, then `fix`): what each does,
    /// never how it turns out.
    pub labels: [&'static str; 2],
    /// What the experiment will measure on the context's device, from the same settings
    /// the experiment runs with (its model and batch defaults, the options): shown before
    /// the lock-in, and checked against each report's "Measured on" by the engine's tests.
    pub setup: fn(&Ctx) -> Vec<String>,
    /// The device the effect needs to show at all; on any other the card says so before
    /// the lock-in and never grades an answer.
    pub needs: Needs,
    pub claim: &'static str,
    /// The statements the claim and the explanation make, each with how it is known
    /// ([`How`]). A test holds every one to it: a run figure the report has, a mechanism
    /// test that exists, a source step the GPU check runs.
    pub statements: &'static [Said],
    /// The PyTorch documentation the explanation rests on.
    pub source: &'static str,
    pub pitfall: &'static str,
    pub fix: &'static str,
    /// The verdict's rule, with the regime it needs.
    pub threshold: &'static str,
    /// The question asked before the experiment runs; its report's figures decide it.
    pub question: Question,
    pub experiment: Experiment,
}

/// One statement of a lesson, and how it is known.
pub struct Said {
    pub text: &'static str,
    pub known: How,
}

/// How a statement is known (the wire form is [`protocol::Known`]).
pub enum How {
    /// Decided by this run's figures, each named by its const (one ending made by
    /// [`FigureName::ending`], its name beginning with `*`, matches the first figure whose
    /// name ends with the rest, as a question's does).
    Run(&'static [FigureName]),
    /// Observed in PyTorch itself by a test of `engine/mechanisms/` (`FILE::TEST`), which
    /// `scripts/test.sh` runs with the venv's PyTorch: when PyTorch changes, the test fails.
    Pytorch(&'static str),
    /// A fact only a CUDA device shows: the PyTorch v2.11.0 source that decides it, and the
    /// GPU check's step (`scripts/gpu-check.sh`) that measures it.
    Source { file: &'static str, function: &'static str, gpu_step: &'static str },
}

impl Said {
    /// A statement this run's figures decide.
    pub const fn run(text: &'static str, figures: &'static [FigureName]) -> Said {
        Said { text, known: How::Run(figures) }
    }

    /// A statement a mechanism test observes in PyTorch (`FILE::TEST` under `engine/mechanisms/`).
    pub const fn torch(text: &'static str, test: &'static str) -> Said {
        Said { text, known: How::Pytorch(test) }
    }

    /// A CUDA-only statement: PyTorch v2.11.0's `file` and `function`, measured by `gpu_step`.
    pub const fn source(text: &'static str, file: &'static str, function: &'static str, gpu_step: &'static str) -> Said {
        Said { text, known: How::Source { file, function, gpu_step } }
    }

    /// The wire form.
    pub fn info(&self) -> protocol::Statement {
        let known = match &self.known {
            How::Run(figures) => protocol::Known::Run { figures: figures.iter().map(|f| f.name().trim_start_matches('*').to_string()).collect() },
            How::Pytorch(test) => protocol::Known::Pytorch { test: test.to_string() },
            How::Source { file, function, gpu_step } => protocol::Known::Source {
                file: file.to_string(),
                function: function.to_string(),
                gpu_step: gpu_step.to_string(),
            },
        };
        protocol::Statement { text: self.text.into(), known }
    }
}

/// Where a card's effect can show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Any device.
    Any,
    /// A CUDA GPU; the text says why a CPU cannot show it.
    Cuda(&'static str),
}

/// A question about `figure / over`, a ratio of two figures of the card's report.
pub const fn ratio(text: &'static str, figure: FigureName, over: FigureName, ask: Ask) -> Question {
    Question {
        text: Cow::Borrowed(text),
        figure: Cow::Borrowed(figure.name()),
        over: Some(Cow::Borrowed(over.name())),
        unit: Cow::Borrowed(Unit::Ratio.as_str()),
        ask,
    }
}

/// A question about one figure of the card's report, in its unit.
pub const fn value(text: &'static str, figure: FigureName, ask: Ask) -> Question {
    value_in(text, figure, figure.unit(), ask)
}

/// A question about one figure of the card's report, its answer read in `unit` (a yes/no
/// question about a `bool` figure whose answer reads as a plain number: `Unit::Plain`).
pub const fn value_in(text: &'static str, figure: FigureName, unit: Unit, ask: Ask) -> Question {
    Question {
        text: Cow::Borrowed(text),
        figure: Cow::Borrowed(figure.name()),
        over: None,
        unit: Cow::Borrowed(unit.as_str()),
        ask,
    }
}

/// A ratio of peaks or latencies that may move by orders of magnitude: ×0.01 to ×10,
/// right within a factor of 2.
pub const PEAKS: Ask = Ask::LogScale { min: 0.01, max: 10.0, within: 2.0 };
/// A latency ratio whose lesson is its direction: lower, higher, or the same within the
/// noise, decided by the 95% interval the experiment reports beside its arms
/// ([`kit::interval_figures`]), the statistic its verdict uses.
pub const SAME_TIME: Ask = Ask::Direction { timed: true };
/// A ratio of byte counts, which repeat exactly: the same means equal.
pub const SAME_BYTES: Ask = Ask::SameBytes { within: protocol::SAME_BYTES_WITHIN };
/// A number of bytes from 1 KiB to 1 TiB, right within a factor of 2.
pub const BYTES: Ask = Ask::Bytes { min: 1024.0, max: 1099511627776.0, within: 2.0 };

/// The catalogue, in the order the guided tour walks it.
pub static CARDS: [&Card; 44] = [
    &memory::EVAL_AND_AUTOGRAD,
    &modes::NOGRAD_AND_DROPOUT,
    &modes::INFERENCE_VS_NOGRAD,
    &modes::AUTOCAST,
    &allocator::BATCH_SCALING,
    &allocator::ALLOCATED_VS_RESERVED,
    &allocator::EMPTY_CACHE,
    &memory::OUTPUT_LIFETIME,
    &timing::WARM_UP,
    &timing::TIMING_GPU_WORK,
    &timing::ITEM_PER_BATCH,
    &memory::FREEZE_VS_NOGRAD,
    &table::SEED_TABLE,
    &precision::HALF_WEIGHTS,
    &layout::CHANNELS_LAST,
    &layout::INPUT_COPY,
    &precision::TF32,
    &layout::CUDNN_BENCHMARK,
    &cuda_graphs::CUDA_GRAPHS,
    // A model compiled ahead of time (torch.export + AOTInductor; see `compiled`).
    &compiled::COMPILED_FIRST_CALL,
    &compiled::COMPILED_BATCH,
    &compiled::shapes::COMPILED_SHAPES,
    &compiled::outputs::COMPILED_OUTPUTS,
    &compiled::outputs::COMPILED_SETTINGS,
    // Decoder LLMs: generation (see `generation`).
    &generation::GENERATE_NO_GRAD,
    &generation::KV_CACHE_SIZE,
    &generation::GQA,
    &generation::USE_CACHE_OFF,
    &generation::PREFILL_VS_DECODE,
    &generation::DECODE_BATCH,
    &generation::STATIC_CACHE,
    &generation::LEFT_PADDED_BATCH,
    &generation::INFERENCE_TENSOR_CACHE,
    &generation::AUTOCAST_DECODE,
    &generation::DECODER_TABLE,
    // The settings LLM teams choose today (see `generation`).
    &generation::INT4_AND_THE_KV_CACHE,
    &generation::INT8_DECODE_SPEED,
    &generation::KV_DTYPE,
    &generation::INT4_ON_A_TRAINED_MODEL,
    &generation::FP16_AND_BF16_RANGE,
    &generation::SDPA_BACKEND,
    // The decoder families teams serve now (see `generation`).
    &generation::SLIDING_WINDOW_KV,
    &generation::MOE_MEMORY,
    &generation::MOE_BATCH_READS,
];

/// Every card, in tour order, as a server whose experiments run on `device` by default
/// lists them (its setup lines, and whether the effect can show there).
pub fn catalogue(device: DeviceKind) -> Vec<PitfallInfo> {
    CARDS.iter().map(|c| c.info(device)).collect()
}

/// Every card's id, in tour order.
pub fn ids() -> Vec<String> {
    CARDS.iter().map(|c| c.id.to_string()).collect()
}

/// The device a server whose devices are `devices` runs the cards on by default: its
/// GPU where it has one (as `device: auto` resolves), its CPU otherwise.
pub fn default_device(devices: &[protocol::DeviceInfo]) -> DeviceKind {
    if devices.iter().any(|d| d.kind == DeviceKind::Cuda) {
        DeviceKind::Cuda
    } else {
        DeviceKind::Cpu
    }
}

/// The card named `id`, or by an id it had before ([`renamed::RENAMED`]); `None` for an
/// unknown id (the server answers 404).
pub fn card(id: &str) -> Option<&'static Card> {
    let id = renamed::canonical_id(id);
    CARDS.iter().copied().find(|c| c.id == id)
}

/// Whether `id` names a card.
pub fn exists(id: &str) -> bool {
    card(id).is_some()
}

/// Runs the experiment `id` on the lab's device, under `control` (cancellation, deadline:
/// checked between passes and given to every run the experiment measures). An unknown id is
/// an `Invalid` failure naming the known ones; prefer [`card`] to tell it apart first.
/// Without a Python: the per-call-overhead cards say so in a note ([`run_with`]).
pub fn run(
    lab: &mut Lab,
    id: &str,
    opts: PitfallOptions,
    control: &RunControl,
) -> Result<PitfallReport, RunFailure> {
    run_with(lab, id, opts, control, None)
}

/// [`run`], with the server's Python timing the per-call-overhead cards' Python side.
pub fn run_with(
    lab: &mut Lab,
    id: &str,
    opts: PitfallOptions,
    control: &RunControl,
    python: Option<&PythonPeer>,
) -> Result<PitfallReport, RunFailure> {
    let card = card(id).ok_or_else(|| {
        let known: Vec<_> = CARDS.iter().map(|c| c.id).collect();
        failure(
            FailureKind::Invalid,
            format!("unknown pitfall `{id}`; known: {}", known.join(", ")),
        )
    })?;
    card.run_with(lab, opts, control, python)
}

impl Card {
    /// What the page lists for this card on a server that runs it on `device`.
    pub fn info(&self, device: DeviceKind) -> PitfallInfo {
        let control = RunControl::default();
        let ctx = Ctx { device, opts: PitfallOptions::default(), control: &control, python: None };
        PitfallInfo {
            id: self.id.into(),
            aliases: renamed::aliases(self.id).map(str::to_string).collect(),
            title: self.title.into(),
            asks: self.asks.into(),
            setup: self.planned(&ctx),
            labels: self.labels.iter().map(|l| l.to_string()).collect(),
            fix_first: self.fix_first(),
            not_here: self.not_here(device).map(str::to_string),
            claim: self.claim.into(),
            why: self.explanation(),
            statements: self.statements.iter().map(Said::info).collect(),
            source: self.source.into(),
            python_pitfall: self.pitfall.into(),
            python_fix: self.fix.into(),
            threshold: self.threshold.into(),
            question: self.question.clone(),
        }
    }

    /// The explanation as one paragraph: the statements' texts.
    pub fn explanation(&self) -> String {
        self.statements.iter().map(|s| s.text).collect::<Vec<_>>().join(" ")
    }

    /// Whether the page shows this card's fix first ([`protocol::shows_fix_first`]).
    pub fn fix_first(&self) -> bool {
        protocol::shows_fix_first(self.id)
    }

    /// The setup lines for `ctx`: the card's own, then the device. The line naming the two
    /// variants ([`kit::arms`]) reads "A: …; B: …" in the order the code is shown.
    pub fn planned(&self, ctx: &Ctx) -> Vec<String> {
        self.planned_in(ctx, self.fix_first())
    }

    /// [`Card::planned`] with the variants shown fix first or not.
    fn planned_in(&self, ctx: &Ctx, fix_first: bool) -> Vec<String> {
        let mut lines: Vec<String> = (self.setup)(ctx)
            .into_iter()
            .map(|line| match line.split(kit::ARMS).collect::<Vec<_>>()[..] {
                [before, pitfall, fix] => {
                    let (a, b) = if fix_first { (fix, pitfall) } else { (pitfall, fix) };
                    format!("{before}A: {a}; B: {b}")
                }
                _ => line,
            })
            .collect();
        lines.push(match ctx.device {
            DeviceKind::Cpu => "Device: this server's CPU".to_string(),
            DeviceKind::Cuda => "Device: this server's CUDA GPU".to_string(),
        });
        lines
    }

    /// Why `device` cannot show this card's effect; `None` where it can.
    pub fn not_here(&self, device: DeviceKind) -> Option<&'static str> {
        match (self.needs, device) {
            (Needs::Cuda(why), DeviceKind::Cpu) => Some(why),
            _ => None,
        }
    }

    /// Runs this card's experiment; see [`run`].
    pub fn run(
        &self,
        lab: &mut Lab,
        opts: PitfallOptions,
        control: &RunControl,
    ) -> Result<PitfallReport, RunFailure> {
        self.run_with(lab, opts, control, None)
    }

    /// Runs this card's experiment with the server's Python, if any; see [`run_with`].
    pub fn run_with(
        &self,
        lab: &mut Lab,
        opts: PitfallOptions,
        control: &RunControl,
        python: Option<&PythonPeer>,
    ) -> Result<PitfallReport, RunFailure> {
        // A prediction is checked before anything runs: a wrong one must cost no device time.
        let predicted = opts.prediction;
        if let Some(p) = &predicted {
            self.question
                .check(p)
                .map_err(|m| failure(FailureKind::Invalid, format!("prediction: {m}")))?;
        }
        let device = match opts.device {
            DeviceChoice::Cpu => DeviceKind::Cpu,
            DeviceChoice::Cuda if lab.machine().has_cuda() => DeviceKind::Cuda,
            DeviceChoice::Cuda => {
                return Err(failure(
                    FailureKind::Invalid,
                    "this server has no CUDA device",
                ))
            }
            DeviceChoice::Auto => DeviceChoice::Auto
                .resolve(lab.machine().has_cuda())
                .unwrap_or(DeviceKind::Cpu),
        };
        let ctx = Ctx {
            device,
            opts,
            control,
            python,
        };
        let threads = lab.config().threads;
        tch::set_num_threads(threads as i32);
        // Every card starts from the same device state, wherever it sits in a tour.
        lab.fresh_state(device)?;
        let outcome = (self.experiment)(lab, &ctx)?;
        // Not graded where not applicable: said in the card's own words for this device,
        // else in the verdict's first sentence.
        let why = self.not_here(device).map(str::to_string).unwrap_or_else(|| {
            let r = &outcome.decision.reason;
            r.split_once(". ").map_or(r.clone(), |(first, _)| first.to_string())
        });
        let prediction = predicted.map(|p| self.question.score_card(p, &outcome.figures, outcome.decision.verdict, &why));
        let mut reason = outcome.decision.reason;
        if !outcome.setup.is_empty() {
            reason = format!("{} Measured on {}.", reason.trim_end(), outcome.setup);
        }
        Ok(PitfallReport {
            prediction,
            id: self.id.into(),
            claim: self.claim.into(),
            verdict: outcome.decision.verdict,
            reason,
            threshold: self.threshold.into(),
            figures: outcome.figures,
            chart: outcome.chart,
            series: outcome.series,
            notes: outcome.notes,
            table: outcome.table,
            traces: outcome.traces,
            env: lab.machine().stamp(device, threads),
            record_id: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalogue_has_every_card_once_and_finds_them_by_id() {
        let mut ids: Vec<_> = CARDS.iter().map(|c| c.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), CARDS.len());
        for c in CARDS {
            assert!(std::ptr::eq(card(c.id).unwrap(), c));
            assert!(!c.threshold.is_empty() && !c.claim.is_empty());
            // A question names one figure (or an ending), never a family's `{}`.
            let q = &c.question;
            assert!(!q.figure.contains("{}") && !q.over.as_deref().unwrap_or("").contains("{}"), "{}: the question names a family", c.id);
        }
        assert!(card("nope").is_none() && !exists("nope"));
    }

    /// Every statement says how it is known, and what it points to exists: a mechanism
    /// test in `engine/mechanisms/` (which `scripts/test.sh` runs), a PyTorch source file
    /// with a function, a step the GPU check runs. (That a run figure is in the report is
    /// checked by the device tests, which run every card.)
    #[test]
    fn every_statement_points_at_what_decides_it() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let gpu_check = std::fs::read_to_string(root.join("../scripts/gpu-check.sh")).expect("the GPU check");
        for c in CARDS {
            assert!(!c.statements.is_empty(), "{}: a lesson whose statements say nothing of how they are known", c.id);
            for s in c.statements {
                assert!(s.text.ends_with('.') || s.text.ends_with('?') || s.text.ends_with(')'), "{}: `{}` is not a sentence", c.id, s.text);
                match &s.known {
                    How::Run(figures) => {
                        assert!(!figures.is_empty(), "{}: `{}` names no figure", c.id, s.text);
                        for f in *figures {
                            assert!(!f.is_family(), "{}: `{}` names the family `{}`, not one of its figures", c.id, s.text, f.name());
                        }
                    }
                    How::Pytorch(test) => {
                        let (file, name) = test.split_once("::").unwrap_or_else(|| panic!("{}: `{test}` is not FILE::TEST", c.id));
                        let body = std::fs::read_to_string(root.join("mechanisms").join(file)).unwrap_or_else(|_| panic!("{}: no mechanism file {file}", c.id));
                        assert!(body.contains(&format!("def {name}(")), "{}: {file} has no test `{name}`", c.id);
                        assert!(name.starts_with("test_"), "{}: `{name}` is not a test unittest runs", c.id);
                    }
                    How::Source { file, function, gpu_step } => {
                        assert!(!file.is_empty() && !function.is_empty(), "{}: `{}`", c.id, s.text);
                        // A step is a row of the script's STEPS table: `"NAME GPU_LIMIT CPU_LIMIT ...`
                        // (engine/tests/gpu_check_script.rs also checks that the step runs the card).
                        assert!(gpu_check.contains(&format!("\"{gpu_step} ")), "{}: the GPU check has no step `{gpu_step}`", c.id);
                    }
                }
            }
        }
    }
}
