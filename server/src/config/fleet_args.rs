//! A fleet's settings: how fronts and workers reach NATS, and a worker's own.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::EngineArgs;

/// How fronts and workers authenticate to NATS beyond the URL's user and password, and
/// check its certificate.
#[derive(Debug, Clone, Default, Args)]
pub struct NatsAuthArgs {
    /// A NATS credentials file (JWT + nkey), instead of credentials in the URL.
    #[arg(long, env = "GRADLESS_NATS_CREDS")]
    pub nats_creds: Option<PathBuf>,
    /// PEM file of the CA that signed the NATS server's certificate (an internal CA; the
    /// system's roots are used without it). Requires TLS.
    #[arg(long, env = "GRADLESS_NATS_CA")]
    pub nats_ca: Option<PathBuf>,
}

impl NatsAuthArgs {
    pub fn auth(&self) -> fleet::bus::NatsAuth {
        fleet::bus::NatsAuth {
            creds: self.nats_creds.clone(),
            ca: self.nats_ca.clone(),
        }
    }
}

/// A fleet front (`gradless serve --nats URL --database postgres://...`): no device of its
/// own; runs go to the workers announced in NATS, records to PostgreSQL.
#[derive(Debug, Clone, Args)]
pub struct FleetArgs {
    /// NATS server of the fleet (e.g. `nats://user:pass@nats.internal:4222`, `tls://...`).
    /// Makes this server a front: without it, the server measures on its own device.
    #[arg(long, env = "GRADLESS_NATS")]
    pub nats: Option<String>,
    #[command(flatten)]
    pub nats_auth: NatsAuthArgs,
    /// The fleet's record database, `postgres://user:pass@host/db` (fronts only).
    #[arg(long, env = "GRADLESS_DATABASE", hide_env_values = true)]
    pub database: Option<String>,
    /// Seconds a worker's announcement lives without a heartbeat: a worker silent this long
    /// has gone away (fronts and workers must agree).
    #[arg(long, env = "GRADLESS_HEARTBEAT_S", default_value_t = 5.0)]
    pub heartbeat_s: f64,
}

/// `gradless worker`: one device of a fleet.
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// The NATS server of the fleet.
    #[arg(long, env = "GRADLESS_NATS")]
    pub nats: String,
    #[command(flatten)]
    pub nats_auth: NatsAuthArgs,
    /// This worker's name, unique in the fleet (letters, digits, `-`, `_`), e.g. `gpu-host-3`.
    #[arg(long, env = "GRADLESS_WORKER_NAME")]
    pub name: String,
    /// `cuda:N` (the N-th GPU, one worker process per GPU), `cpu` (the CPU only, even on
    /// a GPU host) or `auto` (what libtorch finds).
    #[arg(long, env = "GRADLESS_DEVICE", default_value = "auto")]
    pub device: super::DeviceArg,
    /// Seconds a run may take, and a queued run may wait, before it fails.
    #[arg(long, env = "GRADLESS_RUN_TIMEOUT_S", default_value_t = 300)]
    pub run_timeout_s: u64,
    #[arg(long, env = "GRADLESS_HEARTBEAT_S", default_value_t = 5.0)]
    pub heartbeat_s: f64,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. `0.0.0.0:9464`).
    #[arg(long, env = "GRADLESS_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    #[command(flatten)]
    pub engine: EngineArgs,
}
