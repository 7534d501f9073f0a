//! `gradless pitfall`: the card list, one card's experiment, and every card in one process.

use std::io::Write;

use anyhow::{bail, Result};
use engine::Worker;

use super::{model, print_json};
use crate::config::PitfallArgs;

/// `gradless pitfall list`: the cards as a server running them on `device` lists them (its
/// setup lines, and whether the effect can show there). `auto` is this machine's default
/// device, its GPU where libtorch sees one; `cuda` describes a GPU server's cards on any
/// machine (listing runs nothing, and starts no worker).
pub fn pitfall_list(device: protocol::DeviceChoice, json: bool) -> Result<()> {
    let device = match device {
        protocol::DeviceChoice::Cpu => protocol::DeviceKind::Cpu,
        protocol::DeviceChoice::Cuda => protocol::DeviceKind::Cuda,
        protocol::DeviceChoice::Auto if engine::torch_ext::cuda_available() => protocol::DeviceKind::Cuda,
        protocol::DeviceChoice::Auto => protocol::DeviceKind::Cpu,
    };
    let cards = engine::pitfalls::catalogue(device);
    if json {
        return print_json(&cards.into_iter().map(Listed::from).collect::<Vec<_>>());
    }
    let mut out = std::io::stdout().lock();
    for c in cards {
        writeln!(out, "{:<22} {}", c.id, c.title)?;
    }
    Ok(())
}

/// A card as `gradless pitfall list --json` prints it: what the page lists (the API's
/// `PitfallInfo`), and `answer`, its question's answer controls in the page's words.
#[derive(serde::Serialize)]
struct Listed {
    #[serde(flatten)]
    info: protocol::PitfallInfo,
    answer: Answer,
}

/// A question's answer controls as the page shows them before the lock-in
/// (`app/src/prediction.rs`, `PredictControls`), formatted by `protocol` as the page formats
/// them: the choices offered, or the log-scale slider's two ends and the value it starts at,
/// and when an answer counts as right. `scripts/questions-doc.py` writes docs/questions.md
/// from them, so that page formats no number itself.
#[derive(Debug, serde::Serialize)]
struct Answer {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    choices: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scale: Option<Scale>,
    counted_right: String,
}

/// A log-scale slider: its two ends, and the value it starts at (its middle).
#[derive(Debug, serde::Serialize)]
struct Scale {
    from: String,
    middle: String,
    to: String,
}

impl From<protocol::PitfallInfo> for Listed {
    fn from(info: protocol::PitfallInfo) -> Listed {
        use protocol::{Ask, Choice};
        let q = &info.question;
        let choices = match q.ask {
            Ask::Choice { .. } | Ask::Direction { .. } | Ask::SameBytes { .. } => vec![Choice::Lower, Choice::Same, Choice::Higher],
            Ask::YesNo => vec![Choice::Yes, Choice::No],
            Ask::LogScale { .. } | Ask::Bytes { .. } => vec![],
        };
        let scale = match q.ask {
            // The slider starts halfway along its log scale.
            Ask::LogScale { min, max, .. } | Ask::Bytes { min, max, .. } => Some(Scale {
                from: q.format(min),
                middle: q.format(min * ((max / min).ln() / 2.0).exp()),
                to: q.format(max),
            }),
            _ => None,
        };
        let answer = Answer { choices: choices.into_iter().map(Choice::as_str).collect(), scale, counted_right: q.tolerance() };
        Listed { info, answer }
    }
}

/// The options a card's experiment runs with, from the command line (no prediction).
fn options(worker: &Worker, args: &PitfallArgs) -> Result<protocol::PitfallOptions> {
    Ok(protocol::PitfallOptions {
        device: args.device,
        model: args.model.as_deref().map(|m| model(worker.catalog(), m)).transpose()?,
        batch: args.batch,
        budget_bytes: args.budget_mib.map(|m| m * 1024 * 1024),
        prediction: None,
    })
}

/// `gradless pitfall ID`.
pub fn pitfall(worker: &Worker, args: &PitfallArgs) -> Result<()> {
    if !engine::pitfalls::exists(&args.id) {
        let known = engine::pitfalls::ids();
        bail!("unknown pitfall `{}`; known: {}", args.id, known.join(", "));
    }
    let question = &engine::pitfalls::card(&args.id).expect("checked above").question;
    let prediction = args.predict.as_deref().map(|p| question.parse(p)).transpose();
    let options = protocol::PitfallOptions {
        prediction: prediction.map_err(|e| anyhow::anyhow!("--predict: {e} ({})", question.text))?,
        ..options(worker, args)?
    };
    // The same checked path as the server's: batch ceiling, budget, deadline, panic barrier.
    let report = worker
        .run_experiment(&args.id, options)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.id))?;
    if args.json {
        return print_json(&report);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{} — on {} ({})",
        report.id,
        report.env.device_name,
        report.env.device.as_str()
    )?;
    writeln!(out, "claim:     {}", report.claim)?;
    writeln!(out, "verdict:   {}", report.verdict.as_str().to_uppercase())?;
    writeln!(out, "because:   {}", report.reason)?;
    writeln!(out, "rule:      {}", report.threshold)?;
    // Each statement of the lesson, and how it is known.
    if let Some(card) = engine::pitfalls::card(&report.id) {
        for s in card.info(report.env.device).statements {
            writeln!(out, "said:      {} [{}]", s.text, s.known.describe())?;
        }
    }
    if let Some(p) = &report.prediction {
        writeln!(out, "question:  {} ({})", p.question.text, p.question.tolerance())?;
        writeln!(out, "predicted: {}", p.sentence())?;
    }
    if let Some(t) = &report.table {
        writeln!(
            out,
            "  {}",
            t.columns
                .iter()
                .map(|c| format!("{c:<22}"))
                .collect::<String>()
        )?;
        for row in &t.rows {
            writeln!(
                out,
                "  {}",
                row.iter().map(|c| format!("{c:<22}")).collect::<String>()
            )?;
        }
    }
    for f in &report.figures {
        writeln!(out, "  {:<58} {}", f.name, f.display())?;
    }
    for n in &report.notes {
        writeln!(out, "note:      {n}")?;
    }
    Ok(())
}


/// One card's outcome in `gradless pitfall all`: its report, or why it has none.
#[derive(serde::Serialize)]
struct CardOutcome {
    id: String,
    /// Wall-clock seconds the experiment took, queueing included.
    seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    report: Option<protocol::PitfallReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// `gradless pitfall all`: every card's experiment, one after the other, in this one
/// process, so the device is initialised, its libraries primed and its facts probed once
/// (35 processes would pay CUDA's start-up 35 times). A card that fails is reported
/// with its reason and the others still run; the command fails if any card did.
///
/// `--json` prints one JSON array at the end; `--jsonl` prints each card's outcome as one
/// line the moment it is known, so a caller that stops the command (a time limit) keeps
/// every card that finished. `--only a,b` runs those cards (with `--model`/`--batch`, all
/// of them on that model or batch).
pub fn pitfall_all(worker: &Worker, args: &PitfallArgs) -> Result<()> {
    // A model or batch for every card only where the cards are named: the whole catalogue
    // mixes forward models and decoders.
    if args.predict.is_some() || (args.only.is_none() && (args.model.is_some() || args.batch.is_some())) {
        bail!("`pitfall all` runs every card with its own model and batch, and asks no question: --model and --batch apply to one card (`gradless pitfall ID --model ...`) or to the cards --only names, --predict to one card");
    }
    let catalogue: Vec<String> = engine::pitfalls::ids();
    let ids: Vec<String> = match &args.only {
        None => catalogue.clone(),
        Some(list) => {
            let ids: Vec<String> = list.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
            if let Some(bad) = ids.iter().find(|id| !catalogue.contains(id)) {
                bail!("--only: unknown pitfall `{bad}`; known: {}", catalogue.join(", "));
            }
            if ids.is_empty() {
                bail!("--only: no card named (a comma-separated list of ids, e.g. eval-and-autograd,kv-cache-size)");
            }
            ids
        }
    };
    let options = options(worker, args)?;
    let started = std::time::Instant::now();
    let mut outcomes = Vec::with_capacity(ids.len());
    for (i, id) in ids.iter().enumerate() {
        if !args.json && !args.jsonl {
            eprint!("[{}/{}] {id} ... ", i + 1, ids.len());
        }
        let t = std::time::Instant::now();
        let result = worker.run_experiment(id, options.clone());
        let seconds = t.elapsed().as_secs_f64();
        let outcome = match result {
            Ok(report) => CardOutcome { id: id.clone(), seconds, report: Some(report), error: None },
            Err(e) => CardOutcome { id: id.clone(), seconds, report: None, error: Some(e.to_string()) },
        };
        if args.jsonl {
            let mut out = std::io::stdout().lock();
            serde_json::to_writer(&mut out, &outcome)?;
            writeln!(out)?;
            out.flush()?;
        } else if !args.json {
            match (&outcome.report, &outcome.error) {
                (Some(r), _) => eprintln!("{} ({seconds:.1} s)", r.verdict.as_str()),
                (None, Some(e)) => eprintln!("FAILED ({seconds:.1} s): {e}"),
                (None, None) => unreachable!("an outcome has a report or an error"),
            }
        }
        outcomes.push(outcome);
    }
    if args.json {
        print_json(&outcomes)?;
    } else if !args.jsonl {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{:<26} {:<15} {:>8}  because", "card", "verdict", "seconds")?;
        for o in &outcomes {
            let (verdict, why) = match (&o.report, &o.error) {
                (Some(r), _) => (r.verdict.as_str().to_string(), engine::torch_call::first_line(&r.reason)),
                (None, e) => ("failed".to_string(), e.clone().unwrap_or_default()),
            };
            let why: String = why.chars().take(100).collect();
            writeln!(out, "{:<26} {:<15} {:>8.1}  {why}", o.id, verdict, o.seconds)?;
        }
        writeln!(out, "{} cards in {:.1} s", outcomes.len(), started.elapsed().as_secs_f64())?;
    }
    let failed: Vec<&str> = outcomes.iter().filter(|o| o.error.is_some()).map(|o| o.id.as_str()).collect();
    if !failed.is_empty() {
        bail!("{} of {} cards failed: {}", failed.len(), outcomes.len(), failed.join(", "));
    }
    Ok(())
}
