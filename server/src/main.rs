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
    // Which GPU libtorch sees is decided here, while the process has one thread and before
    // libtorch starts (`DeviceArg::apply_before_libtorch`).
    match &cli.command {
        None => cli.serve.device.apply_before_libtorch(),
        Some(Command::Serve(args)) => args.device.apply_before_libtorch(),
        Some(Command::Worker(args)) => args.device.apply_before_libtorch(),
        _ => {}
    }
    let serving = matches!(cli.command, None | Some(Command::Serve(_)) | Some(Command::Worker(_)));
    let default_filter = if serving { "info" } else { "warn" };
    server::logging::init(cli.log.log_format, default_filter);

    // The CLI commands run one thing at a time: a queue of one is enough, and no time limit.
    let worker = |engine| -> anyhow::Result<engine::Worker> {
        let catalog = server::team::load(engine)?;
        server::start_worker(engine::WorkerConfig { catalog, ..server::worker_config(engine, 1, None) })
    };
    match cli.command {
        None => tokio::runtime::Runtime::new()?.block_on(server::serve(cli.serve)),
        Some(Command::Serve(args)) => tokio::runtime::Runtime::new()?.block_on(server::serve(args)),
        Some(Command::Worker(args)) => server::fleet_host::worker(args),
        Some(Command::Measure(args)) => server::cli::measure(&worker(&args.engine)?, &args),
        Some(Command::Compare(args)) => server::cli::compare(&worker(&args.engine)?, &args),
        Some(Command::Generate(args)) => server::cli::generate(&worker(&args.engine)?, &args),
        Some(Command::Models(args)) if args.load.is_some() => {
            let catalog = server::team::load(&args.engine)?;
            server::cli::load_weights(&catalog, &args)
        }
        Some(Command::Models(args)) => server::cli::models(&worker(&args.engine)?, args.json),
        Some(Command::Pitfall(args)) if args.id == "list" => server::cli::pitfall_list(args.device, args.json),
        Some(Command::Pitfall(args)) if args.id == "all" => server::cli::pitfall_all(&worker(&args.engine)?, &args),
        Some(Command::Pitfall(args)) => server::cli::pitfall(&worker(&args.engine)?, &args),
        // Reading the record needs no device: no worker is started.
        Some(Command::Runs(cmd)) => server::cli::runs(cmd),
    }
}
