//! The command line and its settings: every option has a long flag and, for the server, an
//! environment variable. Parsed once in `main` and passed down explicitly.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use protocol::{Autocast, DeviceChoice, GradMode, RecordKind};

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
    /// The team's own models: every NAME.pt (TorchScript) with its NAME.json sidecar in this
    /// directory is served beside the built-in models (`bench/export_model.py` writes them).
    /// A file that does not load or does not match its sidecar is reported and skipped.
    #[arg(long, env = "GRADLESS_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
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
    pub db: DbArg,
    /// Access token for starting runs and experiments (reading and embeds stay open).
    /// Clients send `Authorization: Bearer <token>`; the page asks for it once.
    #[arg(long, env = "GRADLESS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Runs and experiments each client may start per minute (a burst of this many, then
    /// refilled evenly); 0 turns the limit off.
    #[arg(long, env = "GRADLESS_RATE_LIMIT", default_value_t = 120)]
    pub rate_limit: u32,
    /// Behind this many proxies that append to X-Forwarded-For, count clients by the
    /// address that many entries from the right (the flag alone: 1). 0: the socket's.
    #[arg(long, env = "GRADLESS_TRUST_FORWARDED_FOR", default_value_t = 0, num_args = 0..=1, default_missing_value = "1")]
    pub trust_forwarded_for: usize,
    /// The URL people reach this server by (e.g. behind a proxy): its host is accepted
    /// as a Host and its origin may start runs.
    #[arg(long, env = "GRADLESS_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Other origins whose pages may start runs and experiments, space- or comma-separated
    /// (e.g. `https://docs.example.com`). Default: this server's pages only.
    #[arg(long, env = "GRADLESS_ALLOWED_ORIGINS", default_value = "")]
    pub allowed_origins: String,
    /// Seconds a connection may take to send a request's headers, and stay idle between
    /// requests, before it is closed.
    #[arg(long, env = "GRADLESS_HEADER_TIMEOUT_S", default_value_t = 10)]
    pub header_timeout_s: u64,
    /// Connections open at once; more are answered 503 with Retry-After.
    #[arg(long, env = "GRADLESS_MAX_CONNECTIONS", default_value_t = crate::conn::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Event streams (run viewers) open at once; more are answered 503 with Retry-After.
    #[arg(long, env = "GRADLESS_MAX_STREAMS", default_value_t = crate::conn::DEFAULT_MAX_STREAMS)]
    pub max_streams: usize,
    /// Origins allowed to show /embed/... pages in an iframe, space- or comma-separated
    /// (e.g. `https://docs.example.com`), or `*` for any. Default: this server only.
    #[arg(long, env = "GRADLESS_EMBED_ORIGINS", default_value = "")]
    pub embed_origins: String,
    /// Onboarding paths: every NAME.toml in this folder is served at /learn/{id} (default:
    /// the `paths/` folder inside --models-dir, when there is one). A file with an error
    /// stops the start, naming the file and the field.
    #[arg(long, env = "GRADLESS_PATHS_DIR")]
    pub paths_dir: Option<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub fleet: FleetArgs,
}

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
    pub device: String,
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

/// One configuration to measure.
#[derive(Debug, Clone, Args)]
pub struct SpecArgs {
    /// A built-in model or a team model of --models-dir (`gradless models` lists them).
    #[arg(long, default_value = "tiny_mlp")]
    pub model: String,
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
    pub advanced: AdvancedArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// The advanced settings (the Lab's "Advanced" section), PyTorch's defaults unless given.
#[derive(Debug, Clone, Args)]
pub struct AdvancedArgs {
    /// Weights dtype: fp32, fp16 (model.half()) or bf16 (model.to(torch.bfloat16)); with
    /// `gradless generate` also int8 or int4 (weight-only quantization of the decoder's
    /// linear layers, the rest in the --activations dtype).
    #[arg(long, default_value = "fp32")]
    pub weights: WeightsArg,
    /// contiguous (NCHW) or channels_last (NHWC; convolution models only).
    #[arg(long, default_value = "contiguous")]
    pub memory_format: protocol::MemoryFormat,
    /// Where the input starts each iteration: device, pageable or pinned (CUDA) host memory;
    /// a host input is copied inside every timed pass.
    #[arg(long, default_value = "device")]
    pub input_source: protocol::InputSource,
    /// CUDA: TF32 on for matmuls and cuDNN (off: both off).
    #[arg(long)]
    pub tf32: bool,
    /// CUDA: torch.backends.cudnn.benchmark = True.
    #[arg(long)]
    pub cudnn_benchmark: bool,
    /// CUDA: capture the pass as a CUDA graph and replay it.
    #[arg(long)]
    pub cuda_graph: bool,
}

/// `--weights`: a dtype for every weight, or a quantization of a decoder's linear layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightsArg {
    Dtype(protocol::WeightsDtype),
    Quant(protocol::WeightQuant),
}

impl std::str::FromStr for WeightsArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "int8" => Ok(WeightsArg::Quant(protocol::WeightQuant::Int8)),
            "int4" => Ok(WeightsArg::Quant(protocol::WeightQuant::Int4)),
            _ => s
                .parse::<protocol::WeightsDtype>()
                .map(WeightsArg::Dtype)
                .map_err(|_| format!("unknown weights `{s}`; expected one of: fp32, fp16, bf16, int8, int4 (int8 and int4: `gradless generate` only)")),
        }
    }
}

impl AdvancedArgs {
    /// The settings, with int8/int4 weights' activations in fp32 (the caller that allows
    /// them sets the dtype).
    pub fn settings(&self) -> protocol::Advanced {
        protocol::Advanced {
            weights: match self.weights {
                WeightsArg::Dtype(d) => d,
                WeightsArg::Quant(_) => protocol::WeightsDtype::Fp32,
            },
            memory_format: self.memory_format,
            input_source: self.input_source,
            tf32: self.tf32,
            cudnn_benchmark: self.cudnn_benchmark,
            cuda_graph: self.cuda_graph,
        }
    }
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
    /// Also print the traced forward pass: memory, time and FLOPs at every module boundary
    /// (with --json the trace is always in the report).
    #[arg(long)]
    pub trace: bool,
}

/// `gradless generate`: one greedy generation on a decoder, the same run the Generate page
/// starts.
#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// A decoder preset (llama_tiny, smollm2_135m, qwen2_5_0_5b, llama_3_2_1b,
    /// llama_3_1_8b) or a team decoder folder of --models-dir.
    #[arg(long, default_value = protocol::decoder::CPU_PRESET)]
    pub model: String,
    #[arg(long, default_value_t = 1)]
    pub batch: u32,
    /// Prompt length in tokens (random ids, seeded).
    #[arg(long, default_value_t = 32)]
    pub prompt: u32,
    /// Tokens to generate per sequence (greedy, no end-of-sequence stop).
    #[arg(long, default_value_t = 64)]
    pub new_tokens: u32,
    /// The KV cache: dynamic (grows by concatenation), static (allocated once), off
    /// (every step recomputes the prefix).
    #[arg(long, default_value = "dynamic")]
    pub cache: protocol::KvCacheKind,
    /// With --weights int8|int4: the dtype of the activations, the scales and every weight
    /// left unquantized (embedding, norms, LM head): fp32 (default), fp16 or bf16.
    #[arg(long)]
    pub activations: Option<protocol::WeightsDtype>,
    /// With --weights int4: the group size (32, 64 or 128; default 64).
    #[arg(long)]
    pub group_size: Option<u32>,
    /// The KV cache's dtype: as_activations (default), bf16, fp16, fp8_e4m3 (CUDA with compute capability 8.9+).
    #[arg(long, default_value = "as_activations")]
    pub kv_dtype: protocol::KvDtype,
    /// Report the prefill's last-position logits (generation.prefill_logits, batch × vocab
    /// fp32) in --json, to compare with a peer number for number (bench/generate.py --quant).
    #[arg(long)]
    pub prefill_logits: bool,
    /// model.eval() (the default).
    #[arg(long, conflicts_with = "train")]
    pub eval: bool,
    /// model.train(): attention dropout active.
    #[arg(long)]
    pub train: bool,
    #[arg(long, default_value = "enabled")]
    pub grad: GradMode,
    #[arg(long, default_value = "off")]
    pub autocast: Autocast,
    /// Threads for this run (default: the server's).
    #[arg(long)]
    pub threads: Option<u32>,
    #[arg(long, default_value = "auto")]
    pub device: DeviceChoice,
    /// Print the JSON report instead of a summary.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub advanced: AdvancedArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
}

#[derive(Debug, Clone, Args)]
pub struct PitfallArgs {
    /// A pitfall id (e.g. eval-not-nograd), `list` (the cards), or `all` (every card's
    /// experiment in this one process, one after the other).
    pub id: String,
    /// With `all`: only these cards (comma-separated ids), in this order.
    #[arg(long)]
    pub only: Option<String>,
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

/// The CSP `frame-ancestors` sources for embeds: `'self'` plus each allowed origin. An
/// origin is `http(s)://host[:port]` or `*`; anything else is refused at start-up, so a
/// typo cannot silently open (or close) the embeds.
pub fn frame_ancestors(origins: &str) -> Result<String, String> {
    let mut sources = vec!["'self'".to_string()];
    for o in origins
        .split([' ', ','])
        .map(str::trim)
        .filter(|o| !o.is_empty())
    {
        let o = o.trim_end_matches('/');
        let valid = o == "*"
            || ((o.starts_with("https://") || o.starts_with("http://"))
                && o.split("://").nth(1).is_some_and(|host| {
                    !host.is_empty()
                        && host
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || "-.:*[]".contains(c))
                }));
        if !valid {
            return Err(format!(
                "embed origin `{o}` is not an origin like https://docs.example.com (or *)"
            ));
        }
        sources.push(o.to_string());
    }
    Ok(format!("frame-ancestors {}", sources.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embed_origins_become_frame_ancestors() {
        assert_eq!(frame_ancestors("").unwrap(), "frame-ancestors 'self'");
        assert_eq!(
            frame_ancestors("https://docs.example.com, http://wiki.local:8080/").unwrap(),
            "frame-ancestors 'self' https://docs.example.com http://wiki.local:8080"
        );
        assert_eq!(frame_ancestors("*").unwrap(), "frame-ancestors 'self' *");
        assert!(frame_ancestors("docs.example.com").is_err());
        assert!(frame_ancestors("https://x.com; script-src *").is_err());
    }
}
