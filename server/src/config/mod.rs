//! The command line and its settings: every option has a long flag and, for the server, an
//! environment variable. Parsed once in `main` and passed down explicitly.
//!
//! Here the commands and their own arguments; the settings they share, one concept a module:
//! the engine's (`engine_args`), the server's (`serve_args`), a fleet's (`fleet_args`), and
//! a run's, read from the settings table (`run_args`).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use protocol::{DeviceChoice, RecordKind};

mod device_arg;
mod engine_args;
mod fleet_args;
mod run_args;
mod serve_args;

pub use device_arg::DeviceArg;
pub use engine_args::EngineArgs;
pub use fleet_args::{FleetArgs, NatsAuthArgs, WorkerArgs};
pub use run_args::{CompareRun, GenerateRun, MeasureRun, RunArgs, RunCommand};
pub use serve_args::{frame_ancestors, ServeArgs};

/// Gradless: see what PyTorch's inference settings really do, measured live with libtorch.
#[derive(Debug, Parser)]
#[command(name = "gradless", version, about, long_about = None, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Settings for `serve`, which is also what runs without a subcommand.
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

/// How every command logs (to stderr; `RUST_LOG` chooses what).
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// `text`: one line per event, coloured on a terminal and plain (no escape codes) in a
    /// file, a pipe or the journal; `json`: one JSON object per line (tracing-subscriber's
    /// format: `timestamp`, `level`, `fields.message`, `target`, and `span`/`spans` with
    /// the run id of a run's work), for Loki, Elasticsearch and friends.
    #[arg(long, env = "GRADLESS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

/// The log's line format (see [`LogArgs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the web app and its API (the default).
    Serve(ServeArgs),
    /// Measure one configuration and print a table (or the JSON report with --json).
    Measure(MeasureArgs),
    /// Measure the classic modes for one model and batch, side by side.
    Compare(CompareArgs),
    /// Generate tokens with a decoder LLM, measured step by step: the prefill, then every
    /// decode step (latency, memory, KV cache bytes).
    Generate(GenerateArgs),
    /// List the models with their parameter counts.
    Models(ModelsArgs),
    /// Serve one device to a fleet: take runs from NATS JetStream, stream their events back.
    Worker(WorkerArgs),
    /// Run a pitfall experiment (`gradless pitfall list` lists them).
    Pitfall(PitfallArgs),
    /// The recorded runs and experiments: list, show, export.
    #[command(subcommand)]
    Runs(RunsCommand),
}

/// `gradless runs ...`: read the run database a server writes (no device needed).
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// The newest recorded results first.
    List {
        #[command(flatten)]
        db: DbArg,
        /// Only runs or only pitfall experiments.
        #[arg(long)]
        kind: Option<RecordKind>,
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One recorded result: what was measured, where and when.
    Show {
        /// The record's id (the last part of its permalink).
        id: String,
        #[command(flatten)]
        db: DbArg,
        /// Print the whole record as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write a recorded result as JSON, CSV (its samples), a standalone PyTorch script, or
    /// its traced forward pass as a Chrome trace (Perfetto, chrome://tracing) or CSV.
    Export {
        id: String,
        #[command(flatten)]
        db: DbArg,
        /// json, csv, py, trace (Chrome trace-event JSON) or trace-csv.
        #[arg(long, default_value = "json")]
        format: String,
        /// The file to write (default: standard output).
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
}

/// Where the run database lives.
#[derive(Debug, Clone, Args)]
pub struct DbArg {
    /// The SQLite file of recorded runs (created on first start; `:memory:` keeps nothing).
    /// Default: $XDG_DATA_HOME/gradless/runs.sqlite3 (~/.local/share/gradless/runs.sqlite3).
    #[arg(long = "db", env = "GRADLESS_DB")]
    pub path: Option<PathBuf>,
}

impl DbArg {
    pub fn path(&self) -> PathBuf {
        self.path.clone().unwrap_or_else(crate::store::default_path)
    }
}

#[derive(Debug, Clone, Args)]
pub struct ModelsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Build this decoder on the CPU, its weights read from its folder, and say how long
    /// that took and what it holds (what bench/load_weights.py times against reading the
    /// files), instead of listing the models.
    #[arg(long, value_name = "MODEL")]
    pub load: Option<String>,
    /// The weights' dtype `--load` builds in: a checkpoint stored in another is converted
    /// tensor by tensor as it is read.
    #[arg(long, value_name = "DTYPE", default_value = "fp32", requires = "load")]
    pub load_dtype: String,
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(Debug, Clone, Args)]
pub struct MeasureArgs {
    #[command(flatten)]
    pub run: RunArgs<MeasureRun>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also print the traced forward pass: memory, time and FLOPs at every module boundary
    /// (with --json the trace is always in the report).
    #[arg(long)]
    pub trace: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// `gradless generate`: one greedy generation on a decoder, the same run the Generate page
/// starts (a decoder preset, e.g. llama_tiny, smollm2_135m, qwen2_5_0_5b, llama_3_2_1b,
/// llama_3_1_8b, or a team decoder folder of --models-dir).
#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub run: RunArgs<GenerateRun>,
    /// Print the JSON report instead of a summary.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub run: RunArgs<CompareRun>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(Debug, Clone, Args)]
pub struct PitfallArgs {
    /// A pitfall id (e.g. eval-and-autograd), `list` (the cards), or `all` (every card's
    /// experiment in this one process, one after the other).
    pub id: String,
    /// With `all`: only these cards (comma-separated ids), in this order.
    #[arg(long)]
    pub only: Option<String>,
    /// The device a card's experiment runs on. With `list`: the device the cards are
    /// described for, as a server running them there lists them (its setup lines, and
    /// whether the effect can show there); `cuda` lists a GPU server's view on any machine.
    #[arg(long, default_value = "auto")]
    pub device: DeviceChoice,
    /// The model to use instead of the card's default (a team model of --models-dir too).
    #[arg(long)]
    pub model: Option<String>,
    /// The batch to use instead of the card's default.
    #[arg(long)]
    pub batch: Option<u32>,
    /// batch-scaling: memory budget in MiB (default: the device's free memory on a GPU).
    #[arg(long)]
    pub budget_mib: Option<u64>,
    /// Your answer to the card's question (`gradless pitfall list --json` has them), locked
    /// before it runs and scored after: a value (`0.5`, `x0.5`, `12MiB`) or lower, same,
    /// higher, yes, no, skip.
    #[arg(long, value_name = "VALUE")]
    pub predict: Option<String>,
    /// Print JSON instead of text (with `all`: one array at the end).
    #[arg(long)]
    pub json: bool,
    /// With `all`: one JSON line per card as soon as it is known (what a caller under a
    /// time limit reads: every card that finished is kept).
    #[arg(long, conflicts_with = "json")]
    pub jsonl: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}
