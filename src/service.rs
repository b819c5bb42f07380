//! The one service both frontends translate to and from (TEI's `Infer` plays this part): what the server
//! reports about itself and its models, inference, the repository API and the limits the frontends
//! enforce. Frontends hold an `Arc<Service>` and call its operations; none of them reaches the model table
//! or model control directly, so HTTP and gRPC cannot disagree about what any request means.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::inference::signature::TensorSpec;
use crate::inference::{InferenceRequest, InferenceResponse, ResponseStream};
use crate::model_config::ModelConfig;
use crate::observability::logging::{Levels, Log, LogFormat, LogSettings};
use crate::observability::trace;
use crate::proto::inference::ModelStatisticsResponse;
use crate::repository::{ModelControl, ModelRepository};
use crate::shared_memory::SharedMemory;

/// What the repository API's operations take and give, named here for the frontends.
pub use crate::repository::{IndexEntry, LoadOverrides};

/// The protocol extensions this server implements, as listed in server metadata.
pub const EXTENSIONS: [&str; 10] = [
    "binary_tensor_data",
    "cuda_shared_memory",
    "logging",
    "model_configuration",
    "model_repository",
    "model_repository(unload_dependents)",
    "parameters",
    "statistics",
    "system_shared_memory",
    "trace",
];

pub struct ServerMetadata<'a> {
    pub name: &'a str,
    pub version: &'static str,
    pub extensions: &'static [&'static str],
}

pub struct TensorMetadata {
    pub name: String,
    pub datatype: &'static str,
    pub shape: Vec<i64>,
}

pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: String,
    pub inputs: Vec<TensorMetadata>,
    pub outputs: Vec<TensorMetadata>,
}

/// What the HTTP frontend holds each request to.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    /// The largest request body, after decompression (`--http-max-input-size`).
    pub max_input_size: usize,
    /// How long a request's head may take (`--http-header-timeout-secs`).
    pub header_timeout: Duration,
    /// How long a request's body may take after its head (`--http-body-timeout-secs`).
    pub body_timeout: Duration,
}

/// How the server was started, as far as the service is concerned.
pub struct ServiceSettings {
    /// The name server metadata reports (`--id`, "triton" by default).
    pub id: String,
    /// Report the server ready only while every model is (`--strict-readiness`).
    pub strict_readiness: bool,
    pub http_limits: HttpLimits,
    /// The running log, which the logging extension reads and changes.
    pub log: Arc<Log>,
    /// Whether clients may register shared memory regions (`--allow-client-shm`).
    pub allow_client_shm: bool,
}

/// A change the logging extension asks for; `None` leaves a setting as it is.
#[derive(Default, Debug)]
pub struct LogChange {
    pub info: Option<bool>,
    pub warning: Option<bool>,
    pub error: Option<bool>,
    pub verbose: Option<u32>,
    pub format: Option<LogFormat>,
}

/// Triton's answer to a request that names a trace file: the file is chosen at start-up only.
pub const TRACE_FILE_FIXED: &str = "trace file location can not be updated through network protocol";

/// Triton's answer to a request that names a log file: the file is chosen at start-up only.
pub const LOG_FILE_FIXED: &str = "log file location can not be updated through network protocol";

pub struct Service {
    repository: Arc<ModelRepository>,
    control: Arc<ModelControl>,
    shared_memory: SharedMemory,
    settings: ServiceSettings,
    shutting_down: AtomicBool,
}

impl Service {
    pub fn new(repository: Arc<ModelRepository>, control: Arc<ModelControl>, settings: ServiceSettings) -> Self {
        let shared_memory = SharedMemory::new(settings.allow_client_shm);
        Service { repository, control, shared_memory, settings, shutting_down: AtomicBool::new(false) }
    }

    /// The shared memory regions clients registered, which inference reads inputs from and writes outputs to.
    pub fn shared_memory(&self) -> &SharedMemory {
        &self.shared_memory
    }

    pub fn http_limits(&self) -> HttpLimits {
        self.settings.http_limits
    }

    /// From now on the server reports itself neither live nor ready.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    pub fn is_live(&self) -> bool {
        !self.shutting_down.load(Ordering::Relaxed)
    }

    /// Ready unless shutting down; with strict readiness, also only when every model loaded.
    pub fn is_ready(&self) -> bool {
        self.is_live() && (!self.settings.strict_readiness || self.repository.all_ready())
    }

    /// The server's name is `--id`, "triton" unless set, as Triton answers: clients check it (Triton's own
    /// health-and-metadata examples fail on any other name). The version is Tessera's.
    pub fn server_metadata(&self) -> ServerMetadata<'_> {
        ServerMetadata { name: &self.settings.id, version: env!("CARGO_PKG_VERSION"), extensions: &EXTENSIONS }
    }

    /// The trace extension's settings for `model` (the global ones for an empty name); a model must be ready.
    pub fn trace_settings(&self, model: &str) -> Result<trace::Settings> {
        self.check_trace_scope(model)?;
        Ok(trace::tracer().settings(model))
    }

    /// Applies a trace extension change to `model` (globally for an empty name) and answers the settings now
    /// in force there.
    pub fn change_trace_settings(&self, model: &str, change: &trace::Change) -> Result<trace::Settings> {
        self.check_trace_scope(model)?;
        let settings = trace::tracer().change(model, change);
        tracing::info!(model, level = ?settings.level.names(), rate = settings.rate, count = settings.count, "trace settings changed");
        Ok(settings)
    }

    /// The OpenTelemetry exporter's settings, for the trace extension to list (none in the triton mode).
    pub fn trace_exporter_options(&self) -> Vec<(&'static str, String)> {
        trace::tracer().exporter_options()
    }

    fn check_trace_scope(&self, model: &str) -> Result<()> {
        match model.is_empty() || self.model_ready(model, "").is_ok() {
            true => Ok(()),
            false => Err(Error::invalid(format!("Request for unknown model : {model}"))),
        }
    }

    /// The logging extension's settings.
    pub fn log_settings(&self) -> LogSettings {
        self.settings.log.settings()
    }

    /// Applies what `change` sets, all of it at once, and answers the settings now in force.
    pub fn change_log_settings(&self, change: LogChange) -> LogSettings {
        let log = &self.settings.log;
        let now = log.settings();
        let levels = Levels {
            info: change.info.unwrap_or(now.levels.info),
            warning: change.warning.unwrap_or(now.levels.warning),
            error: change.error.unwrap_or(now.levels.error),
            verbose: change.verbose.unwrap_or(now.levels.verbose),
        };
        log.change(levels, change.format.unwrap_or(now.format));
        if levels != now.levels || change.format.is_some_and(|format| format != now.format) {
            let Levels { info, warning, error, verbose } = levels;
            let format = change.format.unwrap_or(now.format).name();
            tracing::info!(
                "log settings changed: info={info} warning={warning} error={error} verbose={verbose} format={format}"
            );
        }
        log.settings()
    }

    /// Ok when the version (the newest ready one for an empty `version`) can serve; else why not.
    pub fn model_ready(&self, model: &str, version: &str) -> Result<()> {
        self.repository.version(model, version).map(drop)
    }

    pub fn model_metadata(&self, model: &str, version: &str) -> Result<ModelMetadata> {
        let chosen = self.repository.version(model, version)?;
        let record = self.repository.record(model)?;
        let versions = record.ready_versions().map(|m| m.version.to_string()).collect();
        let signature = &chosen.signature;
        let describe = |specs: &[TensorSpec]| {
            specs
                .iter()
                .map(|s| TensorMetadata {
                    name: s.name.clone(),
                    datatype: s.datatype.kserve_name(),
                    shape: s.full_shape(signature.max_batch_size),
                })
                .collect()
        };
        let config = &chosen.config;
        let platform = if config.platform.is_empty() { config.backend.clone() } else { config.platform.clone() };
        Ok(ModelMetadata {
            name: chosen.name.clone(),
            versions,
            platform,
            inputs: describe(&signature.inputs),
            outputs: describe(&signature.outputs),
        })
    }

    /// The normalised configuration a version serves with.
    pub fn model_config(&self, model: &str, version: &str) -> Result<Arc<ModelConfig>> {
        Ok(self.repository.version(model, version)?.config.clone())
    }

    /// The same, as Triton's JSON (rendered once, at load).
    pub fn model_config_json(&self, model: &str, version: &str) -> Result<Arc<serde_json::Value>> {
        Ok(self.repository.version(model, version)?.config_json.clone())
    }

    /// Statistics of every ready version of every model (empty `model`), of every ready version of one
    /// model (empty `version`), or of one version.
    pub fn statistics(&self, model: &str, version: &str) -> Result<ModelStatisticsResponse> {
        let model_stats = match (model, version) {
            ("", "") => {
                self.repository.records().iter().flat_map(|m| m.ready_versions()).map(|v| v.statistics()).collect()
            }
            ("", _) => return Err(Error::invalid("a model version needs a model name")),
            (model, "") => self.repository.record(model)?.ready_versions().map(|v| v.statistics()).collect(),
            (model, version) => vec![self.repository.version(model, version)?.statistics()],
        };
        Ok(ModelStatisticsResponse { model_stats })
    }

    /// One request, for an endpoint that answers once (`endpoint`, e.g. "HTTP end point", names it when a
    /// decoupled model is refused).
    pub async fn infer_unary(&self, request: InferenceRequest, endpoint: &str) -> Result<InferenceResponse> {
        tracing::debug!(model = %request.model, version = %request.version, id = %request.id, "inference request");
        self.repository.infer_unary(request, endpoint).await
    }

    /// The responses to one request, for endpoints that stream (gRPC streams, `generate`).
    pub fn infer_stream(&self, request: InferenceRequest) -> Result<ResponseStream> {
        tracing::debug!(model = %request.model, version = %request.version, id = %request.id, "streamed inference request");
        self.repository.infer_stream(request)
    }

    /// The repository index: every model with its versions' states, or only the ready ones.
    pub fn repository_index(&self, ready_only: bool) -> Vec<IndexEntry> {
        self.control.index(ready_only)
    }

    /// The repository API's load (explicit mode): loads or reloads `model`, with what the request supplied.
    pub async fn load_model(&self, model: &str, overrides: LoadOverrides) -> Result<()> {
        self.control.load(model, overrides).await
    }

    /// The repository API's unload (explicit mode).
    pub async fn unload_model(&self, model: &str) -> Result<()> {
        self.control.unload(model).await
    }
}
