//! `gradless`: parse the command line, start logging, hand over to the library.

use std::process::ExitCode;

use clap::Parser;
use server::config::{Cli, Command};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let serving = matches!(cli.command, None | Some(Command::Serve));
    let default_filter = if serving { "info" } else { "warn" };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();

    let engine = &cli.serve.engine;
    match cli.command {
        None | Some(Command::Serve) => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(server::serve(cli.serve))
        }
        Some(Command::Measure(args)) => {
            let worker = server::start_worker(server::worker_config(engine, 1, None))?;
            server::cli::measure(&worker, &args)
        }
        Some(Command::Compare(args)) => {
            let worker = server::start_worker(server::worker_config(engine, 1, None))?;
            server::cli::compare(&worker, &args)
        }
        Some(Command::Models { json }) => {
            let worker = server::start_worker(server::worker_config(engine, 1, None))?;
            server::cli::models(&worker, json)
        }
    }
}
