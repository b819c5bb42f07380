//! The command line, with tritonserver's flag names and defaults so that existing launch scripts, Helm
//! charts and Kubernetes manifests work unchanged.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, CommandFactory, FromArgMatches, Parser};

pub use crate::observability::logging::LogFormat;
use crate::observability::trace;
use crate::observability::trace::settings::{parse_count, parse_log_frequency, parse_rate};
pub use crate::repository::ControlMode;

mod compat;
mod healthcheck;

pub use healthcheck::Healthcheck;

/// The flags, grouped under tritonserver's headings and in its order. tritonserver's flags that mean
/// nothing here are in `compat`, added to the same command.
#[derive(Debug, Clone, Parser)]
#[command(name = "tessera", version, about = "A Triton-compatible inference server with WebAssembly plugins")]
pub struct Options {
    /// Identifier for this server: the name server metadata reports.
    #[arg(help_heading = "Server", long, default_value = "triton", value_name = "ID")]
    pub id: String,

    /// On SIGINT/SIGTERM, seconds to let in-flight requests finish before the server exits anyway (it
    /// stops accepting connections at once).
    #[arg(help_heading = "Server", long, default_value_t = 30, value_name = "SECONDS")]
    pub exit_timeout_secs: u64,

    /// On SIGINT/SIGTERM, seconds to go on serving while reporting not ready, before the ports close (then
    /// `--exit-timeout-secs` applies): a load balancer or Kubernetes' endpoints see the replica leave and stop
    /// sending it requests before its connections close. A second signal cuts it short. A Tessera option.
    #[arg(help_heading = "Server", long, default_value_t = 0, value_name = "SECONDS")]
    pub exit_drain_secs: u64,

    /// Most client connections open at once over all ports; more are closed as they arrive. It is also
    /// kept below the process's open-file limit, so that the server always has descriptors left for its
    /// own files. A Tessera option.
    #[arg(help_heading = "Server", long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..), value_name = "COUNT")]
    pub max_connections: u64,

    /// How long (µs) a runtime thread with nothing to do keeps watching the client connections before it
    /// sleeps, so that the next request finds it awake; 0 turns it off. A Tessera option (see `busy_poll`).
    #[arg(help_heading = "Server", long, default_value_t = 100, value_name = "MICROSECONDS")]
    pub busy_poll_us: u64,

    /// Verbose logging level (0 = off, 1 = debug lines, 2 and up = trace lines too; `true` is 1).
    #[arg(help_heading = "Logging", long, default_value_t = 0, value_parser = parse_int_bool, value_name = "LEVEL")]
    pub log_verbose: u32,

    /// Log informational lines.
    #[arg(help_heading = "Logging", long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub log_info: bool,

    /// Log warnings.
    #[arg(help_heading = "Logging", long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub log_warning: bool,

    /// Log errors.
    #[arg(help_heading = "Logging", long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub log_error: bool,

    /// How each line starts: `default` (tritonserver's "LMMDD hh:mm:ss.ssssss pid file:line]"), `ISO8601`
    /// ("YYYY-MM-DDThh:mm:ssZ L pid file:line]"), or `json` (one JSON object per line, for log shippers).
    #[arg(help_heading = "Logging", long, default_value = "default", value_parser = parse_log_format, value_name = "default|ISO8601|json")]
    pub log_format: LogFormat,

    /// Write the log to this file (appending) instead of standard output and error.
    #[arg(help_heading = "Logging", long, value_name = "PATH")]
    pub log_file: Option<String>,

    /// Path to a model repository; repeat the flag for several repositories.
    #[arg(
        help_heading = "Model Repository",
        long = "model-repository",
        visible_alias = "model-store",
        required = true,
        value_name = "PATH"
    )]
    pub model_repositories: Vec<PathBuf>,

    /// Exit at start-up if any model fails to load.
    #[arg(help_heading = "Model Repository", long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub exit_on_error: bool,

    /// Do not complete configs from the models themselves (a config.pbtxt must then say everything).
    #[arg(help_heading = "Model Repository", long)]
    pub disable_auto_complete_config: bool,

    /// Report the server ready only when every model is ready.
    #[arg(help_heading = "Model Repository", long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub strict_readiness: bool,

    /// How models are loaded: `none` loads every model at start-up and never changes them, `poll` also
    /// follows changes in the repositories, `explicit` loads only `--load-model` models at start-up and
    /// then what the repository API asks for.
    #[arg(help_heading = "Model Repository", long, default_value = "none", value_parser = parse_control_mode, value_name = "none|poll|explicit")]
    pub model_control_mode: ControlMode,

    /// In poll mode, seconds between scans of the repositories.
    #[arg(help_heading = "Model Repository", long, default_value_t = 15)]
    pub repository_poll_secs: u64,

    /// In explicit mode, a model to load at start-up; repeat the flag for several, or give `*` (alone) for all.
    #[arg(help_heading = "Model Repository", long = "load-model", value_name = "NAME")]
    pub load_models: Vec<String>,

    /// Read `configs/<NAME>.pbtxt` in each model directory instead of `config.pbtxt`, where it exists.
    #[arg(help_heading = "Model Repository", long, value_name = "NAME")]
    pub model_config_name: Option<String>,

    /// How many models may be building at once (loads beyond it wait their turn).
    #[arg(help_heading = "Model Repository", long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..), value_name = "COUNT")]
    pub model_load_thread_count: u32,

    /// Serve HTTP/REST.
    #[arg(help_heading = "HTTP", long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub allow_http: bool,

    /// Address the HTTP/REST endpoint binds to.
    #[arg(help_heading = "HTTP", long, default_value = "0.0.0.0")]
    pub http_address: IpAddr,

    /// Port of the HTTP/REST endpoint (0 picks a free port).
    #[arg(help_heading = "HTTP", long, default_value_t = 8000)]
    pub http_port: u16,

    /// Largest accepted HTTP request body, after decompression, in bytes.
    #[arg(help_heading = "HTTP", long, default_value_t = 64 * 1024 * 1024)]
    pub http_max_input_size: usize,

    /// Seconds an HTTP connection has to send a request's head, counted from when the server starts
    /// waiting for it: a new connection, or a keep-alive one after its last response, is closed when it
    /// stays silent (idle) or trickles its headers for longer. A Tessera option.
    #[arg(help_heading = "HTTP", long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..), value_name = "SECONDS")]
    pub http_header_timeout_secs: u64,

    /// Seconds a request's body has to arrive after its head; a slower one is answered 408 and its
    /// connection closed. A Tessera option.
    #[arg(help_heading = "HTTP", long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..), value_name = "SECONDS")]
    pub http_body_timeout_secs: u64,

    /// Require a header for some categories of HTTP endpoints: `<api>[,<api>…]:<header>=<value>`, the apis
    /// being health, metadata, inference, shared-memory, model-config, model-repository, statistics,
    /// trace and logging; repeat the flag for other headers. A request without the header is answered 403.
    #[arg(help_heading = "HTTP", long, value_name = "API,...:HEADER=VALUE")]
    pub http_restricted_api: Vec<String>,

    /// Serve gRPC.
    #[arg(help_heading = "GRPC", long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub allow_grpc: bool,

    /// Address the gRPC endpoint binds to.
    #[arg(help_heading = "GRPC", long, default_value = "0.0.0.0")]
    pub grpc_address: IpAddr,

    /// Port of the gRPC endpoint (0 picks a free port).
    #[arg(help_heading = "GRPC", long, default_value_t = 8001)]
    pub grpc_port: u16,

    /// The same as `--http-restricted-api` for gRPC methods; the header is `triton-grpc-protocol-<header>`
    /// and a call without it is answered UNAVAILABLE.
    #[arg(help_heading = "GRPC", long, value_name = "PROTOCOL,...:HEADER=VALUE")]
    pub grpc_restricted_protocol: Vec<String>,

    /// Serve Prometheus metrics.
    #[arg(help_heading = "Metrics", long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub allow_metrics: bool,

    /// Address the metrics endpoint binds to.
    #[arg(help_heading = "Metrics", long, default_value = "0.0.0.0")]
    pub metrics_address: IpAddr,

    /// Port of the Prometheus metrics endpoint (`/metrics`).
    #[arg(help_heading = "Metrics", long, default_value_t = 8002)]
    pub metrics_port: u16,

    /// A trace setting: `<setting>=<value>` for every mode (`level=OFF|TIMESTAMPS|TENSORS`, repeatable;
    /// `rate=N`, every N-th request; `count=N`, at most N traces, -1 for no limit; `mode=triton`), or
    /// `triton,<setting>=<value>` for Triton's trace files (`file=PATH`; `log-frequency=N`, write the file
    /// every N traces, to PATH.0, PATH.1, …, or 0: to PATH at shutdown).
    #[arg(help_heading = "Tracing", long = "trace-config", value_name = "[MODE,]KEY=VALUE")]
    pub trace_config: Vec<String>,

    /// A backend setting, `<backend>,<setting>=<value>`, e.g. `onnxruntime,library=/opt/ort/libonnxruntime.so`;
    /// repeat the flag for several.
    #[arg(help_heading = "Backend", long = "backend-config", value_name = "BACKEND,KEY=VALUE", value_parser = parse_backend_config)]
    pub backend_config: Vec<(String, String, String)>,

    /// Where compiled plugins are cached across restarts (default: $XDG_CACHE_HOME/tessera or
    /// ~/.cache/tessera). An empty value disables the cache. A Tessera option.
    #[arg(help_heading = "Backend", long, env = "TESSERA_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,

    /// A response cache setting, `<cache>,<setting>=<value>`: `local,size=N` keeps up to N bytes of answers in
    /// memory for models whose config enables `response_cache` (the only cache here is `local`).
    #[arg(help_heading = "Response Cache", long = "cache-config", value_name = "CACHE,KEY=VALUE", value_parser = parse_backend_config)]
    pub cache_config: Vec<(String, String, String)>,

    /// Let clients register and unregister shared memory regions for inference inputs and outputs (false:
    /// register and unregister are refused, as in tritonserver).
    #[arg(help_heading = "Shared Memory", long, default_value_t = false, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub allow_client_shm: bool,

    /// DEPRECATED (as in tritonserver): `true` is `--disable-auto-complete-config`.
    #[arg(help_heading = "DEPRECATED", long, default_value_t = false, action = ArgAction::Set, value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub strict_model_config: bool,

    /// DEPRECATED (as in tritonserver): the same as `--trace-config triton,file=PATH`.
    #[arg(help_heading = "DEPRECATED", long, value_name = "PATH")]
    pub trace_file: Option<String>,

    /// DEPRECATED (as in tritonserver): the same as `--trace-config level=LEVEL`.
    #[arg(help_heading = "DEPRECATED", long, value_name = "LEVEL")]
    pub trace_level: Vec<String>,

    /// DEPRECATED (as in tritonserver): the same as `--trace-config rate=N`.
    #[arg(help_heading = "DEPRECATED", long, value_name = "N")]
    pub trace_rate: Option<String>,

    /// DEPRECATED (as in tritonserver): the same as `--trace-config count=N`.
    #[arg(help_heading = "DEPRECATED", long, value_name = "N")]
    pub trace_count: Option<String>,

    /// DEPRECATED (as in tritonserver): the same as `--trace-config triton,log-frequency=N`.
    #[arg(help_heading = "DEPRECATED", long, value_name = "N")]
    pub trace_log_frequency: Option<String>,

    /// DEPRECATED (as in tritonserver): the same as `--cache-config local,size=N`.
    #[arg(help_heading = "DEPRECATED", long, value_name = "BYTES")]
    pub response_cache_byte_size: Option<usize>,

    /// What the flags from `compat` asked for, read by `Options::parse_command_line`.
    #[arg(skip)]
    pub notices: Vec<String>,
}

fn parse_control_mode(text: &str) -> Result<ControlMode, String> {
    match text {
        "none" => Ok(ControlMode::None),
        "poll" => Ok(ControlMode::Poll),
        "explicit" => Ok(ControlMode::Explicit),
        other => Err(format!("'{other}' is not a model control mode (none, poll or explicit)")),
    }
}

/// tritonserver's `--log-verbose` takes a level or a boolean.
fn parse_int_bool(text: &str) -> Result<u32, String> {
    match text {
        "true" | "on" => Ok(1),
        "false" | "off" => Ok(0),
        number => number.parse().map_err(|_| format!("'{number}' is not a verbose level (a number, true or false)")),
    }
}

fn parse_log_format(text: &str) -> Result<LogFormat, String> {
    LogFormat::from_name(text)
        .ok_or_else(|| format!("invalid argument for --log-format: '{text}' (default, ISO8601 or json)"))
}

/// `<name>,<setting>=<value>`, as `--backend-config` and `--cache-config` take.
fn parse_backend_config(text: &str) -> Result<(String, String, String), String> {
    let (backend, setting) = text.split_once(',').ok_or("expected <backend>,<setting>=<value>")?;
    let (key, value) = setting.split_once('=').ok_or("expected <backend>,<setting>=<value>")?;
    Ok((backend.to_string(), key.to_string(), value.to_string()))
}

/// The command line less a first argument `tritonserver`: runtimes written for Triton's image (KServe's
/// `kserve-tritonserver` among them) start the container with `tritonserver <flags>` as its arguments, which
/// in Tessera's image follow the entrypoint, `tessera`.
fn arguments_without_tritonserver(
    arguments: impl IntoIterator<Item = std::ffi::OsString>,
) -> impl Iterator<Item = std::ffi::OsString> {
    let mut arguments = arguments.into_iter().peekable();
    let program = arguments.next();
    if arguments.peek().is_some_and(|first| first == "tritonserver") {
        arguments.next();
    }
    program.into_iter().chain(arguments)
}

impl Options {
    /// The process's command line, tritonserver's flags for other servers included; exits with clap's
    /// message on a bad one, or with ours on one that `compat` refuses or a trace or cache setting Tessera
    /// does not have.
    pub fn parse_command_line() -> Self {
        let command = compat::add_to(Options::command());
        let matches = command.get_matches_from(arguments_without_tritonserver(std::env::args_os()));
        let mut options = Options::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        let checked = compat::notices(&matches).and_then(|notices| {
            options.notices = notices;
            options.trace_settings()?;
            options.response_cache_size()
        });
        if let Err(refusal) = checked {
            Options::command().error(clap::error::ErrorKind::ArgumentConflict, refusal).exit();
        }
        options
    }

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

    /// The response cache's size in bytes, if the flags configure one (`None`: no cache). Refuses caches and
    /// settings other than the local cache's size, which Tessera does not have.
    pub fn response_cache_size(&self) -> Result<Option<usize>, String> {
        let mut size = self.response_cache_byte_size;
        for (cache, key, value) in &self.cache_config {
            match (cache.as_str(), key.as_str()) {
                ("local", "size") => {
                    size = Some(
                        value.parse().map_err(|_| format!("--cache-config local,size={value}: not a byte count"))?,
                    )
                }
                ("local", other) => return Err(format!("--cache-config: the local cache has no setting '{other}'")),
                (other, _) => {
                    return Err(format!("--cache-config: unknown cache '{other}' (Tessera has the 'local' cache)"))
                }
            }
        }
        Ok(size.filter(|&bytes| bytes > 0))
    }

    /// The trace settings the flags ask for (deprecated spellings first, `--trace-config` over them), and the
    /// OpenTelemetry exporter's.
    pub fn trace_settings(&self) -> Result<(trace::Settings, trace::Exporter), String> {
        let mut given: Vec<(String, String, String)> = Vec::new();
        let deprecated = [
            ("triton", "file", &self.trace_file),
            ("", "rate", &self.trace_rate),
            ("", "count", &self.trace_count),
            ("triton", "log-frequency", &self.trace_log_frequency),
        ];
        for (mode, key, value) in deprecated {
            if let Some(value) = value {
                given.push((mode.into(), key.into(), value.clone()));
            }
        }
        given.extend(self.trace_level.iter().map(|level| (String::new(), "level".into(), level.clone())));
        for text in &self.trace_config {
            let (mode, setting) = match text.split_once(',') {
                Some((mode, setting)) => (mode, setting),
                None => ("", text.as_str()),
            };
            let (key, value) = setting
                .split_once('=')
                .ok_or_else(|| format!("--trace-config {text}: expected [<mode>,]<setting>=<value>"))?;
            given.push((mode.into(), key.into(), value.into()));
        }
        let mut settings = trace::Settings::default();
        let mut exporter = trace::Exporter::default();
        let mut levels = Vec::new();
        for (mode, key, value) in &given {
            let refuse = |why: &str| {
                format!(
                    "--trace-config {}{key}={value}: {why}",
                    if mode.is_empty() { String::new() } else { format!("{mode},") }
                )
            };
            let number = |min, max| trace::settings::parse_number(key, value, min, max).map_err(|e| refuse(&e));
            match (mode.as_str(), key.as_str()) {
                ("", "mode") => {
                    settings.mode = match value.as_str() {
                        "triton" => trace::Mode::Triton,
                        "opentelemetry" => trace::Mode::OpenTelemetry,
                        _ => return Err(refuse("the mode is 'triton' or 'opentelemetry'")),
                    }
                }
                ("" | "triton", "level") => levels.push(value.clone()),
                ("" | "triton", "rate") => settings.rate = parse_rate(key, value).map_err(|e| refuse(&e))?,
                ("" | "triton", "count") => settings.count = parse_count(key, value).map_err(|e| refuse(&e))?,
                ("triton", "file") => settings.file = value.clone(),
                ("triton", "log-frequency") => {
                    settings.log_frequency = parse_log_frequency(key, value).map_err(|e| refuse(&e))?
                }
                ("opentelemetry", "url") => exporter.url = value.clone(),
                ("opentelemetry", "resource") => {
                    let (name, text) =
                        value.split_once('=').ok_or_else(|| refuse("expected resource=<key>=<value>"))?;
                    exporter.resource.push((name.to_string(), text.to_string()));
                }
                ("opentelemetry", "bsp_max_queue_size") => exporter.bsp_max_queue_size = Some(number(1, u32::MAX)?),
                ("opentelemetry", "bsp_schedule_delay") => exporter.bsp_schedule_delay = Some(number(0, u32::MAX)?),
                ("opentelemetry", "bsp_max_export_batch_size") => {
                    exporter.bsp_max_export_batch_size = Some(number(1, u32::MAX)?)
                }
                ("" | "triton" | "opentelemetry", _) => return Err(refuse("unknown trace setting")),
                _ => return Err(refuse("the mode is 'triton' or 'opentelemetry'")),
            }
        }
        settings.level = trace::Level::from_names(levels.iter().map(String::as_str))?;
        exporter.check().map_err(|e| format!("--trace-config opentelemetry: {e}"))?;
        Ok((settings, exporter))
    }

    /// Whether configs are completed from the models (neither flag that turns it off was given).
    pub fn complete_configs(&self) -> bool {
        !self.disable_auto_complete_config && !self.strict_model_config
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
