//! `gradless worker --nats URL --name NAME [--device cuda:N|cpu|auto]` (`config::DeviceArg`): one device of a
//! fleet. Starts the same device worker as `gradless serve` (through `dispatch::local::start_worker`),
//! counts its models' parameters the same way, and hands both to [`fleet::host::run`].
//! Optionally serves Prometheus metrics (`--metrics-addr`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::routing::get;

use crate::config::WorkerArgs;

pub fn worker(args: WorkerArgs) -> Result<()> {
    fleet::bus::check_worker_name(&args.name).map_err(anyhow::Error::msg)?;
    // One process per GPU: `main` set CUDA_VISIBLE_DEVICES from --device before libtorch
    // started (`DeviceArg::apply_before_libtorch`), so it sees exactly this one, as device 0.
    let cpu_only = args.device == crate::config::DeviceArg::Cpu;
    let run_timeout = Duration::from_secs(args.run_timeout_s);
    // The engine's queue holds the one job this worker runs; the rest wait in JetStream.
    let engine = crate::dispatch::local::start_worker(crate::dispatch::local::worker_config(&args.engine, 1, Some(run_timeout)))?;
    args.device.check_found(engine.machine().has_cuda()).map_err(anyhow::Error::msg)?;
    let models = crate::model_counts::model_infos(&engine)?;
    let heartbeat = Duration::from_secs_f64(args.heartbeat_s.max(0.5));
    let mut card = fleet::host::card(&args.name, &engine, models, cpu_only);
    card.heartbeat_ttl_ms = heartbeat.as_millis() as u64;
    tracing::info!(worker = %args.name, device = %card.label(), "worker ready");
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        if let Some(addr) = args.metrics_addr {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("could not listen on {addr} for metrics"))?;
            tracing::info!("metrics at http://{}/metrics", listener.local_addr()?);
            let app = axum::Router::new()
                .route("/metrics", get(|| async { fleet::metrics::global().render() }))
                .route("/healthz", get(|| async { "ok" }));
            tokio::spawn(async move { axum::serve(listener, app).await });
        }
        let bus = fleet::bus::Bus::connect(
            &args.nats,
            &format!("gradless-worker-{}", args.name),
            &args.nats_auth.auth(),
        )
        .await?;
        let options = fleet::host::WorkerOptions {
            name: args.name.clone(),
            heartbeat_ttl: heartbeat,
            run_timeout,
            cpu_only,
            started_ms: card.started_ms,
            measurer: fleet::host::measurer(&card),
        };
        fleet::host::run(bus, Arc::new(engine), card, options, crate::conn::shutdown_signal()).await
    })
}
