//! The command line and its settings: every option has a long flag and, for the server, an
//! environment variable. Parsed once in `main` and passed down explicitly.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use protocol::{Autocast, DeviceChoice, GradMode, ModelId};

/// Gradless: see what PyTorch's inference settings really do, measured live with libtorch.
#[derive(Debug, Parser)]
#[command(name = "gradless", version, about, long_about = None, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Settings for `serve`, which is also what runs without a subcommand.
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the web app and its API (the default).
    Serve(ServeArgs),
    /// Measure one configuration and print a table (or the JSON report with --json).
    Measure(MeasureArgs),
    /// Measure the classic modes for one model and batch, side by side.
    Compare(CompareArgs),
    /// List the models with their parameter counts.
    Models(ModelsArgs),
    /// Run a pitfall experiment (`gradless pitfall list` lists them).
    Pitfall(PitfallArgs),
}

/// Engine settings shared by the server and the CLI.
#[derive(Debug, Clone, Args)]
pub struct EngineArgs {
    /// libtorch intra-op CPU threads for runs that do not choose (default: half the CPUs).
    #[arg(long = "default-threads", env = "GRADLESS_THREADS")]
    pub threads: Option<u32>,
    /// Largest batch a run may ask for.
    #[arg(long, env = "GRADLESS_MAX_BATCH", default_value_t = 1024)]
    pub max_batch: u32,
    /// Treat a run that allocates more than this many MiB as out of memory (a device budget).
    #[arg(long, env = "GRADLESS_MEMORY_LIMIT_MIB")]
    pub memory_limit_mib: Option<u64>,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "GRADLESS_ADDR", default_value = "127.0.0.1:3000")]
    pub addr: SocketAddr,
    /// Folder with the built site: pkg/ (wasm, js, css) and the public files.
    #[arg(long, env = "GRADLESS_SITE_ROOT", default_value = "target/site")]
    pub site_root: PathBuf,
    /// Runs that may wait for the device before new ones are refused with 503.
    #[arg(long, env = "GRADLESS_QUEUE", default_value_t = 16)]
    pub queue_capacity: usize,
    /// Seconds a run may take before it is stopped.
    #[arg(long, env = "GRADLESS_RUN_TIMEOUT_S", default_value_t = 300)]
    pub run_timeout_s: u64,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// One configuration to measure.
#[derive(Debug, Clone, Args)]
pub struct SpecArgs {
    #[arg(long, default_value = "tiny_mlp")]
    pub model: ModelId,
    #[arg(long, default_value_t = 32)]
    pub batch: u32,
    /// Model-specific input size (features, image side, sequence length); default per model.
    #[arg(long)]
    pub input_size: Option<u32>,
    /// Threads for this run (default: the server's).
    #[arg(long)]
    pub threads: Option<u32>,
    #[arg(long, default_value = "auto")]
    pub device: DeviceChoice,
    #[arg(long, default_value_t = 3)]
    pub warmup: u32,
    #[arg(long, default_value_t = 20)]
    pub iters: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ModelsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(Debug, Clone, Args)]
pub struct MeasureArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    /// model.eval() (the default).
    #[arg(long, conflicts_with = "train")]
    pub eval: bool,
    /// model.train(): Dropout active, BatchNorm on batch statistics.
    #[arg(long)]
    pub train: bool,
    #[arg(long, default_value = "enabled")]
    pub grad: GradMode,
    #[arg(long, default_value = "off")]
    pub autocast: Autocast,
}

#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
}

#[derive(Debug, Clone, Args)]
pub struct PitfallArgs {
    /// A pitfall id (e.g. eval-not-nograd), or `list`.
    pub id: String,
    #[arg(long, default_value = "auto")]
    pub device: DeviceChoice,
    /// The model to use instead of the card's default.
    #[arg(long)]
    pub model: Option<ModelId>,
    /// The batch to use instead of the card's default.
    #[arg(long)]
    pub batch: Option<u32>,
    /// batch-scaling: memory budget in MiB (default: the device's free memory on a GPU).
    #[arg(long)]
    pub budget_mib: Option<u64>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}
