//! The command line and its settings: every option has a long flag and, for the server, an
//! environment variable. Parsed once in `main` and passed down explicitly.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::builder::TypedValueParser as _;
use clap::{Args, Parser, Subcommand, ValueEnum};
use protocol::settings::{Kind, RunKind, Setting, SETTINGS};
use protocol::{DeviceChoice, RecordKind, RunSpec};

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
    /// A folder holding a Hugging Face `config.json` (with `model.safetensors` or a sharded
    /// index, and its `tokenizer.json`) is a decoder served under the folder's name; a hub
    /// cache's `models--ORG--NAME` as ORG/NAME.
    #[arg(long, env = "GRADLESS_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// Also serve the decoders of the Hugging Face hub cache transformers reads
    /// (`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`), each as
    /// ORG/NAME at the revision `refs/main` names. Never touches the network.
    #[arg(long, env = "GRADLESS_HF_CACHE")]
    pub hf_cache: bool,
    /// The text a tokenized decoder's quality is measured on (`generate.quality`: bits per
    /// byte and perplexity under each weights dtype, quantization and KV dtype). Default:
    /// the trained model's held-out slice of PyTorch's source.
    #[arg(long, env = "GRADLESS_QUALITY_TEXT")]
    pub quality_text: Option<PathBuf>,
    /// A Python with PyTorch that times the per-call-overhead cards (inference-vs-nograd,
    /// warm-up, sync-timing, item-sync, cuda-graphs) a second time, beside Gradless's
    /// figures: Gradless calls libtorch from Rust, a team's code pays Python per op. Default:
    /// the venv's, `$GRADLESS_VENV/bin/python` (`~/.cache/gradless/venv` unless set), when
    /// it exists; `off` (or empty): none (the cards say so in a note).
    #[arg(long, env = "GRADLESS_PYTHON", default_value = venv_python(), value_parser = clap::builder::OsStringValueParser::new().map(PathBuf::from))]
    pub python: Option<PathBuf>,
}

impl EngineArgs {
    /// The Python the cards' Python side runs with (`None` for `off`).
    pub fn python(&self) -> Option<PathBuf> {
        self.python.clone().filter(|p| !p.as_os_str().is_empty() && p.as_os_str() != "off")
    }
}

/// The venv's Python where it exists, as scripts/env.sh finds the venv: `$GRADLESS_VENV`,
/// else `$GRADLESS_CACHE/venv`, else `~/.cache/gradless/venv`.
fn venv_python() -> Option<&'static str> {
    static FOUND: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
            let venv = var("GRADLESS_VENV")
                .or_else(|| var("GRADLESS_CACHE").map(|c| c.join("venv")))
                .or_else(|| var("HOME").map(|h| h.join(".cache/gradless/venv")))?;
            let python = venv.join("bin/python");
            python.is_file().then(|| python.to_str().map(String::from)).flatten()
        })
        .as_deref()
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

/// A command's run settings: a flag for each setting of the table
/// ([`protocol::settings::SETTINGS`]) that applies to the command's kind of run, over the
/// command's defaults. Nothing here names a setting: a row added to the table is a flag of
/// every command whose runs it applies to.
pub trait RunCommand {
    const RUN: RunKind;
    /// Keys the command sets itself (compare varies the mode, grad and autocast).
    const SKIP: &'static [&'static str];
    fn defaults() -> RunSpec;
    /// The settings table (a test's may have a row more).
    fn table() -> &'static [Setting] {
        SETTINGS
    }
}

/// `gradless measure`'s settings.
#[derive(Debug, Clone)]
pub struct MeasureRun;
impl RunCommand for MeasureRun {
    const RUN: RunKind = RunKind::Forward;
    const SKIP: &'static [&'static str] = &[];
    fn defaults() -> RunSpec {
        RunSpec::default()
    }
}

/// `gradless compare`'s: measure's, but the modes it compares.
#[derive(Debug, Clone)]
pub struct CompareRun;
impl RunCommand for CompareRun {
    const RUN: RunKind = RunKind::Forward;
    const SKIP: &'static [&'static str] = &["eval", "grad", "autocast"];
    fn defaults() -> RunSpec {
        RunSpec::default()
    }
}

/// `gradless generate`'s: one greedy generation on a decoder.
#[derive(Debug, Clone)]
pub struct GenerateRun;
impl RunCommand for GenerateRun {
    const RUN: RunKind = RunKind::Generate;
    const SKIP: &'static [&'static str] = &[];
    fn defaults() -> RunSpec {
        RunSpec {
            model: protocol::decoder::CPU_PRESET.parse().unwrap_or(protocol::ModelId::TinyMlp),
            batch: 1,
            input_size: Some(32),
            generate: Some(protocol::GenerateSpec::default()),
            ..RunSpec::default()
        }
    }
}

/// The settings a command line gave, over the command's defaults. The model stays a name
/// until the models directory is loaded (`cli::model`).
#[derive(Debug, Clone)]
pub struct RunArgs<C> {
    pub spec: RunSpec,
    pub model: String,
    command: std::marker::PhantomData<C>,
}

impl<C: RunCommand> RunArgs<C> {
    /// The rows of the table this command takes, in the table's order.
    pub fn rows() -> impl Iterator<Item = &'static Setting> {
        C::table().iter().filter(|s| s.applies_to(C::RUN) && !C::SKIP.contains(&s.key))
    }
}

/// The old flag of two settings (`--weights`): a value is read as the setting whose word
/// it is.
fn legacy_flags<C: RunCommand>() -> Vec<&'static str> {
    let mut flags: Vec<&str> = RunArgs::<C>::rows().filter_map(|s| s.legacy).collect();
    flags.dedup();
    flags
}

/// A setting's argument id: its key, apart from the ids of the command's other arguments
/// (`EngineArgs` has a `threads` of its own).
fn id(key: &str) -> &'static str {
    Box::leak(format!("setting:{key}").into_boxed_str())
}

impl<C: RunCommand> clap::Args for RunArgs<C> {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        use clap::{Arg, ArgAction};
        let defaults = C::defaults();
        for row in Self::rows() {
            let shown = row.value(&defaults).filter(|_| !row.quiet);
            let help = match (&shown, row.kind) {
                (Some(v), Kind::Count { .. } | Kind::Choice(_) | Kind::Name(_)) => format!("{} [default: {v}]", row.help),
                _ => row.help.to_string(),
            };
            cmd = match row.kind {
                Kind::Switch => cmd.arg(Arg::new(id(row.key)).long(row.flag).action(ArgAction::SetTrue).help(help)),
                Kind::Pair { on, off } => {
                    let default = |word| if (shown.as_deref() == Some("1")) == (word == on) { " (the default)" } else { "" };
                    cmd.arg(Arg::new(id(on)).long(on).action(ArgAction::SetTrue).conflicts_with(id(off)).help(format!("{}{}", row.help, default(on))))
                        .arg(Arg::new(id(off)).long(off).action(ArgAction::SetTrue).help(format!("The other side of --{on}{}", default(off))))
                }
                Kind::Choice(words) => cmd.arg(
                    Arg::new(id(row.key))
                        .long(row.flag)
                        .value_parser(clap::builder::PossibleValuesParser::new(words()))
                        .help(help),
                ),
                Kind::Count { .. } => cmd.arg(Arg::new(id(row.key)).long(row.flag).value_name("N").help(help)),
                Kind::Name(_) => cmd.arg(Arg::new(id(row.key)).long(row.flag).value_name("NAME").help(help)),
                Kind::Text => cmd.arg(Arg::new(id(row.key)).long(row.flag).value_name("TEXT").help(help)),
            };
        }
        for old in legacy_flags::<C>() {
            cmd = cmd.arg(Arg::new(id(old)).long(old).hide(true));
        }
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl<C: RunCommand> clap::FromArgMatches for RunArgs<C> {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut spec = C::defaults();
        let mut model = spec.model.as_str().to_string();
        let invalid = |flag: &str, e: String| clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("--{flag}: {e}\n"));
        let text = |key: &str| m.try_get_one::<String>(&format!("setting:{key}")).ok().flatten().cloned();
        let flag = |key: &str| m.try_get_one::<bool>(&format!("setting:{key}")).ok().flatten().copied().unwrap_or(false);
        for old in legacy_flags::<C>() {
            if let Some(v) = text(old) {
                let row = Self::rows()
                    .filter(|s| s.legacy == Some(old) && text(s.key).is_none())
                    .find(|s| s.set(&mut spec.clone(), &v).is_ok())
                    .ok_or_else(|| invalid(old, format!("unknown value `{v}` (--{old} is the old flag of the weights' dtype and the quantization: use --dtype or --quant)")))?;
                row.set(&mut spec, &v).map_err(|e| invalid(row.flag, e))?;
            }
        }
        for row in Self::rows() {
            let given = match row.kind {
                Kind::Switch => flag(row.key).then(|| "1".to_string()),
                Kind::Pair { on, off } => match (flag(on), flag(off)) {
                    (true, _) => Some("1".into()),
                    (_, true) => Some("0".into()),
                    _ => None,
                },
                _ => text(row.key),
            };
            match (given, row.kind) {
                (Some(v), Kind::Name(_)) => model = v,
                (Some(v), _) => row.set(&mut spec, &v).map_err(|e| invalid(row.flag, e))?,
                (None, _) => {}
            }
        }
        // A text prompt sets the prompt's length: the command's default length gives way,
        // an explicit --prompt is left for the spec's check to compare.
        let text_prompt = spec.generate.as_ref().is_some_and(|g| g.prompt_text.is_some());
        if text_prompt && text("prompt").is_none() {
            spec.input_size = None;
        }
        Ok(RunArgs { spec, model, command: std::marker::PhantomData })
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
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

    #[derive(Debug, Parser)]
    struct Line<C: RunCommand + Clone + Send + Sync + 'static> {
        #[command(flatten)]
        run: RunArgs<C>,
    }

    fn parse<C: RunCommand + Clone + Send + Sync + 'static>(args: &[&str]) -> Result<RunArgs<C>, clap::Error> {
        Line::<C>::try_parse_from(std::iter::once("gradless").chain(args.iter().copied())).map(|l| l.run)
    }

    #[test]
    fn python_is_a_path_or_off() {
        #[derive(Debug, Parser)]
        struct Engine {
            #[command(flatten)]
            engine: EngineArgs,
        }
        let parse = |args: &[&str]| Engine::try_parse_from(std::iter::once("gradless").chain(args.iter().copied())).unwrap().engine;
        assert_eq!(parse(&["--python", "/opt/py/bin/python"]).python(), Some(PathBuf::from("/opt/py/bin/python")));
        assert_eq!(parse(&["--python", "off"]).python(), None);
        assert_eq!(parse(&["--python", ""]).python(), None);
        // The default is the venv's Python, only where it exists.
        assert!(parse(&[]).python().is_none_or(|p| p.ends_with("bin/python") && p.is_file()));
    }

    #[test]
    fn the_flags_are_the_tables_and_int4_on_bf16_is_one_command() {
        let run = parse::<GenerateRun>(&["--model", "llama_tiny", "--dtype", "bf16", "--quant", "int4", "--group-size", "32", "--kv-dtype", "bf16", "--train"]).unwrap();
        let g = run.spec.generate.clone().unwrap();
        assert_eq!((run.spec.advanced.weights, g.weights, g.group_size, g.kv_dtype), (protocol::WeightsDtype::Bf16, protocol::WeightQuant::Int4, Some(32), protocol::KvDtype::Bf16));
        assert!(!run.spec.eval);
        assert_eq!(run.model, "llama_tiny");
        // The old flag reads as the setting whose word its value is.
        let old = parse::<GenerateRun>(&["--weights", "int8"]).unwrap();
        assert_eq!(old.spec.generate.unwrap().weights, protocol::WeightQuant::Int8);
        let old = parse::<MeasureRun>(&["--weights", "bf16"]).unwrap();
        assert_eq!(old.spec.advanced.weights, protocol::WeightsDtype::Bf16);
        let e = parse::<MeasureRun>(&["--weights", "int4"]).unwrap_err().to_string();
        assert!(e.contains("--dtype"), "{e}");
        // A word the setting does not take is refused with the ones it does.
        let e = parse::<GenerateRun>(&["--kv-dtype", "fp4"]).unwrap_err().to_string();
        assert!(e.contains("fp8_e4m3"), "{e}");
        // compare sets the modes itself.
        assert!(parse::<CompareRun>(&["--grad", "no_grad"]).is_err());
    }

    #[derive(Debug, Clone)]
    struct WithANewRow;
    impl RunCommand for WithANewRow {
        const RUN: RunKind = RunKind::Generate;
        const SKIP: &'static [&'static str] = &[];
        fn defaults() -> RunSpec {
            GenerateRun::defaults()
        }
        fn table() -> &'static [Setting] {
            protocol::testing::settings_with_a_new_row()
        }
    }

    #[test]
    fn a_row_added_to_the_table_is_a_flag() {
        let run = parse::<WithANewRow>(&["--logits"]).unwrap();
        assert!(run.spec.generate.unwrap().prefill_logits);
        assert!(parse::<GenerateRun>(&["--logits"]).is_err());
    }

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
