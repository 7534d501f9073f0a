//! The process's log: where it goes (stderr), what it holds (`RUST_LOG`, or a default per
//! command) and how each line is written (`--log-format`, see [`crate::config::LogArgs`]).
//!
//! Text lines are coloured only when stderr is a terminal (and `NO_COLOR` is unset): the
//! escape codes tracing-subscriber writes by default are noise in a file, `journalctl`,
//! `less` or a CI log. JSON lines never carry them. A run's work is logged inside a span
//! named `run` with its `id` (see [`crate::runs::RunState::span`], and the engine's queue,
//! which runs each task in its submitter's span), so every line about a run is found by it.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the process's subscriber. `default_filter` applies when `RUST_LOG` is unset
/// or unreadable.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(colour(std::io::stderr().is_terminal()))
            .init(),
        // Each line one object; the current span and the list of spans (the run id among
        // them) come with every event.
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// Whether text lines are coloured: on a terminal, unless `NO_COLOR` says otherwise
/// (<https://no-color.org>: set and not empty).
fn colour(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
