//! `gradless worker --nats URL --name NAME [--device cuda:N|cpu|auto]`: one device of a
//! fleet. Starts the same device worker as `gradless serve` (through `dispatch::local::start_worker`),
//! counts its models' parameters the same way, and hands both to [`fleet::host::run`].
//! Optionally serves Prometheus metrics (`--metrics-addr`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::routing::get;

use crate::config::WorkerArgs;

/// The device a `--device` value asks for: `(cpu_only, cuda index)`.
pub fn parse_device(device: &str) -> Result<(bool, Option<u32>), String> {
    match device {
        "auto" => Ok((false, None)),
        "cpu" => Ok((true, None)),
        "cuda" => Ok((false, Some(0))),
        other => match other.strip_prefix("cuda:").map(str::parse::<u32>) {
            Some(Ok(n)) => Ok((false, Some(n))),
            _ => Err(format!("--device `{other}`: use cuda:N (e.g. cuda:0), cpu or auto")),
        },
    }
}

pub fn worker(args: WorkerArgs) -> Result<()> {
    fleet::bus::check_worker_name(&args.name).map_err(anyhow::Error::msg)?;
    let (cpu_only, cuda) = parse_device(&args.device).map_err(anyhow::Error::msg)?;
    if let Some(n) = cuda {
        // One process per GPU: libtorch then sees exactly this one, as device 0. Set
        // before libtorch starts (the device thread below is its first user).
        std::env::set_var("CUDA_VISIBLE_DEVICES", n.to_string());
    }
    let run_timeout = Duration::from_secs(args.run_timeout_s);
    // The engine's queue holds the one job this worker runs; the rest wait in JetStream.
    let engine = crate::dispatch::local::start_worker(crate::dispatch::local::worker_config(&args.engine, 1, Some(run_timeout)))?;
    if cuda.is_some() && !engine.machine().has_cuda() {
        anyhow::bail!("--device {}: libtorch finds no CUDA device here", args.device);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_flags() {
        assert_eq!(parse_device("cpu"), Ok((true, None)));
        assert_eq!(parse_device("cuda:3"), Ok((false, Some(3))));
        assert_eq!(parse_device("auto"), Ok((false, None)));
        assert!(parse_device("cuda:x").is_err());
        assert!(parse_device("tpu").is_err());
    }
}
