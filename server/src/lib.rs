//! The `gradless` binary's library: the web server (router, API, SSE), the CLI commands and
//! their configuration. `main.rs` only parses the command line and calls in here, so tests
//! reach everything. `gradless serve` starts in [`startup`]; where its runs go (this
//! process's device worker or a fleet's) is [`dispatch`].

// The Lab's view is one deeply nested type; the compiler's default depth is too shallow for it.
#![recursion_limit = "256"]

pub mod access;
pub mod api;
pub mod assets;
pub mod cli;
pub mod config;
pub mod conn;
pub mod dispatch;
pub mod embeds;
pub mod error;
pub mod export;
pub mod fleet_host;
pub mod learn;
pub mod learn_api;
pub mod logging;
pub mod model_counts;
pub mod openapi;
pub mod origin;
pub mod pg_store;
pub mod recorder;
pub mod router;
pub mod runs;
pub mod startup;
pub mod state;
pub mod store;
pub mod team;
pub mod trace_export;

pub use conn::listen;
pub use dispatch::local::{start_worker, worker_config};
pub use router::router;
pub use startup::{build_state, serve};
