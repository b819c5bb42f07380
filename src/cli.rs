//! The command line, with tritonserver's flag names and defaults so that existing launch scripts, Helm
//! charts and Kubernetes manifests work unchanged.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Parser};

pub use crate::repository::ControlMode;

#[derive(Debug, Clone, Parser)]
#[command(name = "tessera", version, about = "A Triton-compatible inference server with WebAssembly plugins")]
pub struct Options {
    /// Path to a model repository; repeat the flag for several repositories.
    #[arg(long = "model-repository", required = true, value_name = "PATH")]
    pub model_repositories: Vec<PathBuf>,

    /// Port of the HTTP/REST endpoint (0 picks a free port).
    #[arg(long, default_value_t = 8000)]
    pub http_port: u16,

    /// Address the HTTP/REST endpoint binds to.
    #[arg(long, default_value = "0.0.0.0")]
    pub http_address: IpAddr,

    /// Port of the gRPC endpoint (0 picks a free port).
    #[arg(long, default_value_t = 8001)]
    pub grpc_port: u16,

    /// Address the gRPC endpoint binds to.
    #[arg(long, default_value = "0.0.0.0")]
    pub grpc_address: IpAddr,

    /// Port of the Prometheus metrics endpoint (`/metrics`).
    #[arg(long, default_value_t = 8002)]
    pub metrics_port: u16,

    /// Address the metrics endpoint binds to.
    #[arg(long, default_value = "0.0.0.0")]
    pub metrics_address: IpAddr,

    /// Serve Prometheus metrics.
    #[arg(long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub allow_metrics: bool,

    /// Exit at start-up if any model fails to load.
    #[arg(long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub exit_on_error: bool,

    /// Report the server ready only when every model is ready.
    #[arg(long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub strict_readiness: bool,

    /// How models are loaded: `none` loads every model at start-up and never changes them, `poll` also
    /// follows changes in the repositories, `explicit` loads only `--load-model` models at start-up and
    /// then what the repository API asks for.
    #[arg(long, default_value = "none", value_parser = parse_control_mode, value_name = "none|poll|explicit")]
    pub model_control_mode: ControlMode,

    /// In explicit mode, a model to load at start-up; repeat the flag for several, or give `*` (alone) for all.
    #[arg(long = "load-model", value_name = "NAME")]
    pub load_models: Vec<String>,

    /// In poll mode, seconds between scans of the repositories.
    #[arg(long, default_value_t = 15)]
    pub repository_poll_secs: u64,

    /// Read `configs/<NAME>.pbtxt` in each model directory instead of `config.pbtxt`, where it exists.
    #[arg(long, value_name = "NAME")]
    pub model_config_name: Option<String>,

    /// Do not complete configs from the models themselves (a config.pbtxt must then say everything).
    #[arg(long)]
    pub disable_auto_complete_config: bool,

    /// Verbose logging level (0 = off, 1 = debug lines, 2 and up = trace lines too).
    #[arg(long, default_value_t = 0)]
    pub log_verbose: u32,

    /// Log informational lines.
    #[arg(long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub log_info: bool,

    /// Log warnings.
    #[arg(long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub log_warning: bool,

    /// Log errors.
    #[arg(long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub log_error: bool,

    /// Write the log to this file (appending) instead of standard error.
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<String>,

    /// A backend setting, `<backend>,<setting>=<value>`, e.g. `onnxruntime,library=/opt/ort/libonnxruntime.so`;
    /// repeat the flag for several.
    #[arg(long = "backend-config", value_name = "BACKEND,KEY=VALUE", value_parser = parse_backend_config)]
    pub backend_config: Vec<(String, String, String)>,

    /// Largest accepted HTTP request body, after decompression, in bytes.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    pub http_max_input_size: usize,

    /// Seconds an HTTP connection has to send a request's head, counted from when the server starts
    /// waiting for it: a new connection, or a keep-alive one after its last response, is closed when it
    /// stays silent (idle) or trickles its headers for longer. A Tessera option.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..), value_name = "SECONDS")]
    pub http_header_timeout_secs: u64,

    /// Seconds a request's body has to arrive after its head; a slower one is answered 408 and its
    /// connection closed. A Tessera option.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..), value_name = "SECONDS")]
    pub http_body_timeout_secs: u64,

    /// Most client connections open at once over all ports; more are closed as they arrive. It is also
    /// kept below the process's open-file limit, so that the server always has descriptors left for its
    /// own files. A Tessera option.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..), value_name = "COUNT")]
    pub max_connections: u64,

    /// On SIGINT/SIGTERM, seconds to let in-flight requests finish before the server exits anyway (it
    /// stops accepting connections at once).
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    pub exit_timeout_secs: u64,

    /// How long (µs) a runtime thread with nothing to do keeps watching the client connections before it
    /// sleeps, so that the next request finds it awake; 0 turns it off. A Tessera option (see `busy_poll`).
    #[arg(long, default_value_t = 100, value_name = "MICROSECONDS")]
    pub busy_poll_us: u64,

    /// Where compiled plugins are cached across restarts (default: $XDG_CACHE_HOME/tessera or
    /// ~/.cache/tessera). An empty value disables the cache.
    #[arg(long, env = "TESSERA_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
}

fn parse_control_mode(text: &str) -> Result<ControlMode, String> {
    match text {
        "none" => Ok(ControlMode::None),
        "poll" => Ok(ControlMode::Poll),
        "explicit" => Ok(ControlMode::Explicit),
        other => Err(format!("'{other}' is not a model control mode (none, poll or explicit)")),
    }
}

fn parse_backend_config(text: &str) -> Result<(String, String, String), String> {
    let (backend, setting) = text.split_once(',').ok_or("expected <backend>,<setting>=<value>")?;
    let (key, value) = setting.split_once('=').ok_or("expected <backend>,<setting>=<value>")?;
    Ok((backend.to_string(), key.to_string(), value.to_string()))
}

impl Options {
    /// Checks combinations clap cannot express; the message is printed at start-up.
    pub fn check(&self) -> Result<(), String> {
        if self.load_models.iter().any(|m| m == "*") && self.load_models.len() > 1 {
            return Err("--load-model=* loads every model and must be the only --load-model given".into());
        }
        if self.repository_poll_secs == 0 && self.model_control_mode == ControlMode::Poll {
            return Err("--repository-poll-secs must be at least 1 in poll mode".into());
        }
        Ok(())
    }

    /// The log levels the flags ask for.
    pub fn log_levels(&self) -> crate::observability::logging::Levels {
        crate::observability::logging::Levels {
            info: self.log_info,
            warning: self.log_warning,
            error: self.log_error,
            verbose: self.log_verbose,
        }
    }

    /// The last value given for `backend`'s `key` with `--backend-config`.
    pub fn backend_setting(&self, backend: &str, key: &str) -> Option<&str> {
        self.backend_config.iter().rev().find(|(b, k, _)| b == backend && k == key).map(|(_, _, v)| v.as_str())
    }

    /// The compiled-plugin cache directory, or `None` when caching is disabled.
    pub fn component_cache_dir(&self) -> Option<PathBuf> {
        let base = match &self.cache_dir {
            Some(dir) if dir.as_os_str().is_empty() => return None,
            Some(dir) => dir.clone(),
            None => std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?
                .join("tessera"),
        };
        Some(base.join("components"))
    }
}
