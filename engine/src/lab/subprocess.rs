//! A Python subprocess under a run's control: the compile of a compiled run
//! (`super::compiled`) and the cards' Python peers (`crate::pitfalls::python`) start one,
//! read its output while it runs, and stop it when the run is cancelled or its time is up.

use std::io::{BufRead, Read};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use protocol::RunFailure;

use super::RunControl;

/// The prefix of a line a script writes on its stderr to say which part of its work begins
/// (`gradless-phase: export`): handed to [`run_python_reporting`]'s `on_phase` as it comes.
pub const PHASE: &str = "gradless-phase: ";

/// Runs `interpreter` with `args` (and `env` added), reading its output while it runs, for
/// at most `limit`: its stdout, or why it gave none (it could not start, failed, saying
/// why on its last line of stderr, or ran out of time and was killed). Fails only when
/// `control` says the run must stop (cancelled; the process is killed).
pub fn run_python(
    interpreter: &std::path::Path,
    args: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
    limit: Duration,
    control: &RunControl,
) -> Result<Result<String, String>, RunFailure> {
    run_python_reporting(interpreter, args, env, limit, control, &mut |_| {})
}

/// [`run_python`], calling `on_phase` on this thread with each part of its work the script
/// says begins (a stderr line starting with [`PHASE`], the rest of the line), as it comes:
/// a compile of a minute says where it is.
pub fn run_python_reporting(
    interpreter: &std::path::Path,
    args: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
    limit: Duration,
    control: &RunControl,
    on_phase: &mut dyn FnMut(&str),
) -> Result<Result<String, String>, RunFailure> {
    let who = interpreter.display().to_string();
    let mut child = match Command::new(interpreter)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => return Ok(Err(format!("could not start {who}: {e}"))),
    };
    // Read both pipes while it runs, so a full pipe never blocks it.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_string(&mut text);
            }
            text
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    // Stderr line by line: its phase lines are passed on while the process runs.
    let (phases, said) = std::sync::mpsc::channel::<String>();
    let err = child.stderr.take().map(|pipe| {
        std::thread::spawn(move || {
            let mut text = String::new();
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(phase) = line.strip_prefix(PHASE) {
                    let _ = phases.send(phase.trim().to_string());
                }
                text.push_str(&line);
                text.push('\n');
            }
            text
        })
    });
    let start = Instant::now();
    let status = loop {
        while let Ok(phase) = said.try_recv() {
            on_phase(&phase);
        }
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if !control.cancel.load(Ordering::Relaxed) && start.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let (stdout, stderr) = (out.join().unwrap_or_default(), err.map(|e| e.join().unwrap_or_default()).unwrap_or_default());
    control.check()?;
    let Some(status) = status else {
        return Ok(Err(format!("{who} was stopped after {:.0} s, its time limit", limit.as_secs_f64())));
    };
    if !status.success() {
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
        return Ok(Err(format!("{who} failed ({status}): {}", last.trim())));
    }
    Ok(Ok(stdout))
}

