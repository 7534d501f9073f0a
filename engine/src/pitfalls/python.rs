//! The Python side of the cards about per-call overhead (inference-vs-nograd, warm-up,
//! timing-gpu-work, item-per-batch, cuda-graphs). Gradless times libtorch called from Rust, which pays
//! no Python interpreter per op; a team's code is Python, and pays it on every op and module
//! call. So these cards run their experiment a second time from the server's Python
//! ([`PythonPeer`]: `gradless serve --python PATH`, passed in through
//! [`crate::WorkerConfig::python`]), with `python/gradless/card_peer.py` (compiled in,
//! `crate::python_package`), after their own
//! timing, and add its figures beside theirs: `Python: NAME` is the figure `NAME` timed from
//! Python, `Python / Gradless: NAME` Python's time over Gradless's.
//!
//! The peer answers raw latencies per arm; the card computes every median, ratio and
//! interval from them with the code its own figures use. A server without a Python, or a
//! peer that fails or runs past its time limit, gives a note in the report, never a failed
//! card; only a cancelled experiment stops. Nothing here reads the environment: the
//! interpreter is what the server was configured with.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use protocol::{DeviceKind, Figure, RunFailure};
use serde::Deserialize;

use crate::lab::RunControl;

/// The peer's program, from the sources compiled in (`python -c PROGRAM REQUEST`): a server
/// needs no checkout.
pub fn program() -> String {
    crate::python_package::program(crate::python_package::Entry::CardPeer)
}

/// The prefix of a figure timed from Python: `Python: NAME` is Gradless's `NAME`, from Python.
pub const PYTHON: &str = "Python: ";
/// The prefix of Python's time over Gradless's for the figure named after it.
pub const OVER: &str = "Python / Gradless: ";

/// The Python a server times the cards' Python side with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonPeer {
    /// An interpreter with PyTorch (the venv's `bin/python` by default; see the server's
    /// `--python`).
    pub interpreter: PathBuf,
    /// The most one card's Python side may take, interpreter start and `import torch`
    /// included; it is also kept inside the experiment's own deadline.
    pub time_limit: Duration,
}

/// The setup line of every card with a Python side, after the line saying that its own
/// timings pay no Python interpreter per op.
pub const SETUP: &str = "Where this server has a Python with PyTorch, the same experiment is also timed from it, as a team's Python code runs it: the same shapes, threads, warm-up and alternation, with the interpreter's cost per op";

/// What one card's Python side may take by default.
pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(120);
/// Kept free before the experiment's deadline, for the card to finish its report.
const DEADLINE_MARGIN: Duration = Duration::from_secs(5);
/// Less than this left: the peer is not started (importing torch alone takes seconds).
const LEAST: Duration = Duration::from_secs(10);

impl PythonPeer {
    pub fn new(interpreter: impl Into<PathBuf>) -> PythonPeer {
        PythonPeer { interpreter: interpreter.into(), time_limit: DEFAULT_TIME_LIMIT }
    }

    /// Runs the peer on `request`: what it timed, or why it did not (`Ok(Err(why))`). Fails
    /// only when `control` says the experiment must stop (cancelled; the peer is killed).
    pub fn time(&self, request: &serde_json::Value, control: &RunControl) -> Result<Result<Timed, String>, RunFailure> {
        let limit = match control.time_left() {
            Some(left) => self.time_limit.min(left.saturating_sub(DEADLINE_MARGIN)),
            None => self.time_limit,
        };
        if limit < LEAST {
            return Ok(Err(format!("only {:.0} s of the experiment's time was left", limit.as_secs_f64())));
        }
        let who = self.interpreter.display().to_string();
        let request = request.to_string();
        let program = program();
        let stdout = match crate::lab::run_python(&self.interpreter, &["-c", &program, &request], &[], limit, control)? {
            Ok(out) => out,
            Err(why) => return Ok(Err(why)),
        };
        let answer = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
        Ok(serde_json::from_str::<Timed>(answer).map_err(|e| format!("{who}'s answer could not be read ({e}): `{}`", answer.chars().take(200).collect::<String>())))
    }
}

/// What the peer timed (see `python/gradless/card_peer.py`).
#[derive(Clone, Debug, Deserialize)]
pub struct Timed {
    pub python: String,
    pub torch: String,
    pub device: String,
    pub device_name: String,
    pub threads: u32,
    /// Each arm's latencies in milliseconds, in the order they were timed.
    #[serde(default)]
    pub samples: BTreeMap<String, Vec<f64>>,
    #[serde(default)]
    pub notes: Vec<String>,
    /// Why nothing was timed on this device.
    #[serde(default)]
    pub not_applicable: Option<String>,
}

impl Timed {
    /// The arm's latencies, when it has some and each is a positive, finite number of ms.
    pub fn arm(&self, name: &str) -> Option<&[f64]> {
        self.samples
            .get(name)
            .map(Vec::as_slice)
            .filter(|s| !s.is_empty() && s.iter().all(|x| x.is_finite() && *x > 0.0))
    }

    /// "Python 3.11.7, PyTorch 2.11.0, 2 threads".
    pub fn who(&self) -> String {
        format!("Python {}, PyTorch {}, {} thread{}", self.python, self.torch, self.threads, if self.threads == 1 { "" } else { "s" })
    }
}

/// The request for card `card`: its own parameters (`params`, an object) with the device,
/// the threads and the seed every request carries.
pub fn request(card: &str, device: DeviceKind, threads: u32, seed: i64, params: serde_json::Value) -> serde_json::Value {
    let mut r = match params {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    r.insert("card".into(), card.into());
    r.insert("device".into(), device.as_str().into());
    r.insert("threads".into(), threads.into());
    r.insert("seed".into(), seed.into());
    serde_json::Value::Object(r)
}

/// Runs the Python side of a card, when the server has a Python: what it timed, with the
/// report's notes saying what was done (or why nothing was, in place of figures).
pub fn ask(
    peer: Option<&PythonPeer>,
    control: &RunControl,
    request: &serde_json::Value,
    notes: &mut Vec<String>,
) -> Result<Option<Timed>, RunFailure> {
    let Some(peer) = peer else {
        notes.push(absent("this server has no Python configured (`gradless serve --python PATH`, or GRADLESS_PYTHON)"));
        return Ok(None);
    };
    match peer.time(request, control)? {
        Err(why) => {
            notes.push(absent(&why));
            Ok(None)
        }
        Ok(t) => match &t.not_applicable {
            Some(why) => {
                notes.push(format!("Not timed from Python on this device: {why}"));
                Ok(None)
            }
            None => {
                notes.push(format!(
                    "Also timed from Python ({}): the same experiment with the same shapes, threads, warm-up, alternation and medians, in the figures named \"Python: …\"; \"Python / Gradless: …\" is Python's time over Gradless's. Gradless calls libtorch from Rust and pays no Python interpreter per op; the Python figures are what a team's Python code sees. The Python side builds the same architecture with its own random weights, which do not change a pass's time.",
                    t.who()
                ));
                notes.extend(t.notes.iter().cloned());
                Ok(Some(t))
            }
        },
    }
}

/// The note in place of the Python figures.
fn absent(why: &str) -> String {
    format!("Not timed from Python: {why}. Gradless's figures are libtorch called from Rust, which pays no Python interpreter per op; a team's Python code also pays that on every op and module call.")
}

/// The figure `name` timed from Python (`Python: NAME`), and, where Gradless's own figures
/// have `name` in milliseconds, Python's time over Gradless's (`Python / Gradless: NAME`).
pub fn beside(gradless: &[Figure], name: &str, value: f64, unit: &str) -> Vec<Figure> {
    let mut out = vec![Figure { name: format!("{PYTHON}{name}"), value, unit: unit.into() }];
    let ours = gradless.iter().find(|f| f.name == name && f.unit == "ms" && unit == "ms").map(|f| f.value);
    if let Some(g) = ours.filter(|g| *g > 0.0) {
        out.push(Figure { name: format!("{OVER}{name}"), value: value / g, unit: "ratio".into() });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    #[test]
    fn python_figures_sit_beside_gradless_ones_with_their_ratio() {
        let ours = vec![
            Figure { name: "a p50".into(), value: 2.0, unit: "ms".into() },
            Figure { name: "a / b".into(), value: 1.1, unit: "ratio".into() },
        ];
        let f = beside(&ours, "a p50", 3.0, "ms");
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].name.as_str(), f[0].value), ("Python: a p50", 3.0));
        assert_eq!((f[1].name.as_str(), f[1].value, f[1].unit.as_str()), ("Python / Gradless: a p50", 1.5, "ratio"));
        // A ratio of ratios means nothing: the Python figure alone.
        assert_eq!(beside(&ours, "a / b", 1.0, "ratio").len(), 1);
        assert_eq!(beside(&ours, "missing", 1.0, "ms").len(), 1);
    }

    #[test]
    fn a_missing_or_failing_python_is_a_note_not_a_failure() {
        let control = RunControl::default();
        let req = request("warm-up", DeviceKind::Cpu, 1, 0, serde_json::json!({"model": "resnet18"}));
        assert_eq!(req["card"], "warm-up");
        assert_eq!(req["device"], "cpu");
        assert_eq!(req["model"], "resnet18");
        let mut notes = vec![];
        assert!(ask(None, &control, &req, &mut notes).unwrap().is_none());
        assert!(notes[0].starts_with("Not timed from Python: this server has no Python configured"), "{notes:?}");
        assert!(notes[0].contains("no Python interpreter per op"), "{notes:?}");
        let mut notes = vec![];
        let peer = PythonPeer::new("/nonexistent/bin/python");
        assert!(ask(Some(&peer), &control, &req, &mut notes).unwrap().is_none());
        assert!(notes[0].contains("could not start /nonexistent/bin/python"), "{notes:?}");
        // An interpreter that runs but is not Python with the peer's answer.
        let mut notes = vec![];
        let peer = PythonPeer::new("false");
        assert!(ask(Some(&peer), &control, &req, &mut notes).unwrap().is_none());
        assert!(notes[0].contains("failed"), "{notes:?}");
        // Too little of the experiment's time left: not started.
        let short = RunControl { deadline: Some(Instant::now() + Duration::from_secs(3)), ..RunControl::default() };
        let mut notes = vec![];
        assert!(ask(Some(&PythonPeer::new("python3")), &short, &req, &mut notes).unwrap().is_none());
        assert!(notes[0].contains("time was left"), "{notes:?}");
    }

    #[test]
    fn a_cancelled_experiment_stops_the_peer_and_fails() {
        let control = RunControl::default();
        control.cancel.store(true, Ordering::Relaxed);
        let peer = PythonPeer::new("sleep");
        // `sleep -c SOURCE REQUEST` fails at once or sleeps: either way, cancelled.
        let req = request("warm-up", DeviceKind::Cpu, 1, 0, serde_json::json!({}));
        let err = ask(Some(&peer), &control, &req, &mut vec![]).unwrap_err();
        assert_eq!(err.kind, protocol::FailureKind::Cancelled);
    }

    #[test]
    fn an_answer_is_read_and_its_arms_checked() {
        let t: Timed = serde_json::from_str(r#"{"card":"x","python":"3.11.7","torch":"2.11.0","device":"cpu","device_name":"cpu","threads":2,"samples":{"a":[1.0,2.0],"b":[],"c":[1.0,0.0]},"notes":[],"not_applicable":null}"#).unwrap();
        assert_eq!(t.arm("a"), Some(&[1.0, 2.0][..]));
        assert!(t.arm("b").is_none() && t.arm("c").is_none() && t.arm("d").is_none());
        assert_eq!(t.who(), "Python 3.11.7, PyTorch 2.11.0, 2 threads");
    }
}
