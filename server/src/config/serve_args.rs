//! `gradless serve`'s settings, and the embeds' `frame-ancestors` they give.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::{DbArg, EngineArgs, FleetArgs};

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
    /// The device this server measures on: `cuda:N` (the N-th GPU), `cpu` (the CPU only,
    /// even on a GPU host) or `auto` (what libtorch finds). A front (`--nats`) measures
    /// nothing itself and refuses anything but `auto`.
    #[arg(long, env = "GRADLESS_DEVICE", default_value = "auto")]
    pub device: super::DeviceArg,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub fleet: FleetArgs,
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
