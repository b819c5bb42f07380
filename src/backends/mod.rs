//! Backends run models. A `Backend` is one loaded model version (compiled code, weights); it creates
//! `Instance`s, each of which executes batches of requests. The scheduler owns the instances; backends never
//! see where a request came from. One submodule per kind of backend.
//!
//! `execute` is async so that a backend whose work is short and interruptible (Wasm, which yields to the
//! runtime at every epoch tick) runs on the request's own task with no thread hand-off, while a backend that
//! blocks (a native library) moves its work to a thread of its own inside its implementation.

mod identity;
mod leftovers;
pub(crate) mod onnx;
pub mod tensorflow;
mod threaded;
mod torch;

pub(crate) mod wasm;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};

use anyhow::Context;
use async_trait::async_trait;

use crate::error::{LoadResult, Result};
use crate::inference::{InferenceRequest, InferenceResponse, ResponseStream};
use crate::model_config::ModelConfig;
use crate::model_files;
use crate::tensor::{DataType, Tensor};

#[async_trait]
pub trait Backend: Send + Sync {
    /// Creates and initialises one instance; `instance_name` is e.g. `simple_0_1`. An error fails the load.
    async fn create_instance(&self, instance_name: &str) -> LoadResult<Box<dyn Instance>>;
}

#[async_trait]
pub trait Instance: Send {
    /// Executes the requests and returns one result per request, in order: the outputs it produced, or why
    /// that request failed.
    async fn execute(&mut self, requests: Vec<InferenceRequest>) -> Vec<Result<Vec<Tensor>>>;

    /// Called once before the instance is dropped.
    async fn finalize(&mut self) {}
}

/// How model code reaches the server's other models (Triton's BLS, business logic scripting): a request
/// through the same checks and scheduler (batching included) as one from a client.
#[async_trait]
pub trait ModelCaller: Send + Sync {
    async fn infer(&self, request: InferenceRequest) -> Result<InferenceResponse>;
    /// The responses of a request to a model that may be decoupled (any number; one if it is not).
    fn infer_stream(&self, request: InferenceRequest) -> Result<ResponseStream>;
    fn is_ready(&self, model: &str, version: &str) -> bool;
}

/// The server's `ModelCaller`, set once the model table exists (backends are created before it). Weak, so
/// that the table, which owns the backends, is not kept alive by them.
pub type Peers = Arc<OnceLock<Weak<dyn ModelCaller>>>;

/// What a backend needs to load one model version.
pub struct LoadContext<'a> {
    pub model: &'a str,
    pub version: i64,
    pub version_dir: &'a Path,
    pub repository: &'a Path,
    pub config: &'a ModelConfig,
    pub config_json: &'a str,
}

/// The process-wide state of every backend kind (engines, caches), created once at start-up.
pub struct Runtimes {
    pub wasm: wasm::WasmRuntime,
    pub onnx: onnx::OnnxRuntime,
    pub torch: torch::TorchRuntime,
    pub tensorflow: tensorflow::TensorflowRuntime,
    /// Where Python models' runtime is.
    pub python: wasm::python::PythonRuntime,
    /// Whether to auto-complete configs (`--disable-auto-complete-config` turns it off).
    pub complete_configs: bool,
    /// The server's models, for code that calls them (plugins' BLS, ensembles' steps).
    pub peers: Peers,
}

/// Where the backends' run-time pieces are, as `--backend-config` gives them (`None`: look where each
/// backend looks by default).
#[derive(Clone, Debug, Default)]
pub struct NativePlaces {
    /// `--backend-config=onnxruntime,library=PATH`
    pub onnx_library: Option<PathBuf>,
    /// `--backend-config=pytorch,library=PATH`
    pub torch_library: Option<PathBuf>,
    /// `--backend-config=python,runtime-dir=PATH`
    pub python_runtime: Option<PathBuf>,
}

/// The backends this server runs, by the names configs give them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    Wasm,
    Python,
    OnnxRuntime,
    PyTorch,
    TensorFlow,
    Identity,
}

impl BackendKind {
    pub const ALL: [BackendKind; 6] = [
        BackendKind::Wasm,
        BackendKind::Python,
        BackendKind::OnnxRuntime,
        BackendKind::PyTorch,
        BackendKind::TensorFlow,
        BackendKind::Identity,
    ];

    /// The name a config gives the backend (`backend: "..."`).
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Wasm => "wasm",
            BackendKind::Python => "python",
            BackendKind::OnnxRuntime => "onnxruntime",
            BackendKind::PyTorch => "pytorch",
            BackendKind::TensorFlow => "tensorflow",
            BackendKind::Identity => "identity",
        }
    }

    /// The `platform` Triton gives the backend's models, for the backends that have one.
    fn platform(self) -> Option<&'static str> {
        match self {
            BackendKind::OnnxRuntime => Some(ONNX_PLATFORM),
            BackendKind::PyTorch => Some(PYTORCH_PLATFORM),
            BackendKind::TensorFlow => Some(GRAPHDEF_PLATFORM),
            BackendKind::Wasm | BackendKind::Python | BackendKind::Identity => None,
        }
    }

    /// The backend a config asks for, by its `backend` or its `platform`; `None` when it names one this
    /// server does not run, or none.
    pub fn of(config: &ModelConfig) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| {
            kind.name() == config.backend
                || (!config.platform.is_empty() && kind.platform() == Some(&config.platform))
                || (*kind == BackendKind::TensorFlow && config.platform == SAVEDMODEL_PLATFORM)
        })
    }

    /// The backend that the model file in `version_dir` implies, for a config that names none.
    fn implied_by_files(version_dir: &Path) -> Option<Self> {
        [
            ("model.onnx", BackendKind::OnnxRuntime),
            ("model.pt", BackendKind::PyTorch),
            ("model.graphdef", BackendKind::TensorFlow),
            ("model.wasm", BackendKind::Wasm),
            ("model.py", BackendKind::Python),
        ]
        .into_iter()
        .find(|(file, _)| model_files::is_regular_file(&version_dir.join(file)))
        .map(|(_, kind)| kind)
    }
}

/// Refuses a config naming a tensor of a type the backend cannot move (`moves`), saying what it moves.
fn refuse_types(config: &ModelConfig, moves: impl Fn(DataType) -> bool, what_it_moves: &str) -> LoadResult<()> {
    let tensors = (config.input.iter().map(|i| ("input", &i.name, i.data_type)))
        .chain(config.output.iter().map(|o| ("output", &o.name, o.data_type)));
    for (role, name, data_type) in tensors {
        let datatype = DataType::from_config(data_type);
        if !datatype.is_some_and(&moves) {
            let type_name = datatype.map_or("invalid".into(), |t| t.to_config().as_str_name().to_string());
            return Err(format!("{role} '{name}' is {type_name}: {what_it_moves}").into());
        }
    }
    Ok(())
}

/// The file `.cache/<relative>` that setup made in the checkout the server was built in: looked for under each
/// ancestor of the executable (`target/release/tessera` sits inside the checkout).
fn setup_cache_file(relative: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors().map(|dir| dir.join(".cache").join(relative)).find(|candidate| candidate.is_file())
}

/// The platform names Triton gives ONNX Runtime, PyTorch and TensorFlow models.
const ONNX_PLATFORM: &str = "onnxruntime_onnx";
const PYTORCH_PLATFORM: &str = "pytorch_libtorch";
const GRAPHDEF_PLATFORM: &str = "tensorflow_graphdef";
const SAVEDMODEL_PLATFORM: &str = "tensorflow_savedmodel";

impl Runtimes {
    /// Creates every backend kind's runtime: the WebAssembly engines (compiled plugins cached in
    /// `cache_dir`; plugins reach other models through `peers`), and ONNX Runtime, the PyTorch library and the
    /// Python runtime where `places` says, else found as each runtime says. `complete_configs`: auto-complete
    /// configs from the models.
    pub fn new(
        cache_dir: Option<PathBuf>,
        peers: Peers,
        places: NativePlaces,
        complete_configs: bool,
    ) -> anyhow::Result<Self> {
        Ok(Runtimes {
            wasm: wasm::WasmRuntime::new(cache_dir, peers.clone()).context("cannot create the WebAssembly engine")?,
            onnx: onnx::OnnxRuntime::new(places.onnx_library),
            torch: torch::TorchRuntime::new(places.torch_library),
            tensorflow: tensorflow::TensorflowRuntime::default(),
            python: wasm::python::PythonRuntime::new(places.python_runtime),
            complete_configs,
            peers,
        })
    }

    /// Fills in what a config leaves out from the model itself, as Triton's backends do: the platform
    /// from the model file when the config names none, then (ONNX) inputs, outputs and batching from the
    /// graph of the `newest` version directory, or (Wasm, Python) whatever the plugin's
    /// `auto-complete-config` answers, as Triton's python backend asks every model. An ONNX config that
    /// names everything is left alone.
    pub fn auto_complete(&self, config: &mut ModelConfig, newest: Option<&Path>) -> LoadResult<()> {
        if config.platform.is_empty() && config.backend.is_empty() {
            if let Some(kind) = newest.and_then(BackendKind::implied_by_files) {
                match kind.platform() {
                    Some(platform) => config.platform = platform.into(),
                    None => config.backend = kind.name().into(),
                }
            }
        }
        let Some(dir) = newest else { return Ok(()) };
        match BackendKind::of(config) {
            Some(BackendKind::OnnxRuntime) => self.onnx.auto_complete(config, dir),
            Some(BackendKind::Wasm) => match wasm::plugin_path(config, dir) {
                Some(plugin) => self.wasm.auto_complete(config, dir, wasm::ComponentFile::Own(&plugin), Vec::new()),
                // Without a plugin file there is nothing to ask; the load then fails saying it is missing.
                None => Ok(()),
            },
            Some(BackendKind::Python) => {
                let (component, mounts) = self.python.component(dir, config)?;
                self.wasm.auto_complete(config, dir, wasm::ComponentFile::Shared(&component), mounts)
            }
            Some(BackendKind::PyTorch | BackendKind::TensorFlow | BackendKind::Identity) | None => Ok(()),
        }
    }

    /// Loads a model version with the backend its (normalised) config names. Compiles: call it from a
    /// blocking thread.
    pub fn load(&self, ctx: &LoadContext<'_>) -> LoadResult<Arc<dyn Backend>> {
        match BackendKind::of(ctx.config) {
            Some(BackendKind::Wasm) => {
                let plugin = ctx.version_dir.join(wasm::plugin_file(ctx.config));
                Ok(Arc::new(self.wasm.load(ctx, wasm::ComponentFile::Own(&plugin), Vec::new())?))
            }
            Some(BackendKind::Python) => {
                let (component, mounts) = self.python.component(ctx.version_dir, ctx.config)?;
                Ok(Arc::new(self.wasm.load(ctx, wasm::ComponentFile::Shared(&component), mounts)?))
            }
            // A graph answers each request once; it has no way to send more.
            Some(BackendKind::OnnxRuntime) if crate::model_config::is_decoupled(ctx.config) => Err(
                "the onnxruntime backend cannot serve a decoupled model (model_transaction_policy { decoupled: true }): \
                 an ONNX graph answers each request once"
                    .into(),
            ),
            Some(BackendKind::OnnxRuntime) => Ok(Arc::new(self.onnx.load(ctx)?)),
            Some(BackendKind::PyTorch) if crate::model_config::is_decoupled(ctx.config) => Err(
                "the pytorch backend cannot serve a decoupled model (model_transaction_policy { decoupled: true }): \
                 a TorchScript module answers each request once"
                    .into(),
            ),
            Some(BackendKind::PyTorch) => Ok(Arc::new(self.torch.load(ctx)?)),
            Some(BackendKind::TensorFlow) if crate::model_config::is_decoupled(ctx.config) => {
                Err("the tensorflow backend cannot serve a decoupled model: a graph answers each request once".into())
            }
            Some(BackendKind::TensorFlow) => Ok(Arc::new(self.tensorflow.load(ctx)?)),
            Some(BackendKind::Identity) if crate::model_config::is_decoupled(ctx.config) => {
                Err("the identity backend cannot serve a decoupled model: it answers each request once".into())
            }
            Some(BackendKind::Identity) => Ok(Arc::new(identity::load(ctx)?)),
            None => {
                let what = if ctx.config.platform.is_empty() {
                    format!("backend '{}'", ctx.config.backend)
                } else {
                    format!("platform '{}'", ctx.config.platform)
                };
                let available: Vec<_> = BackendKind::ALL.iter().map(|kind| kind.name()).collect();
                Err(format!("{what} is not available in this server (available backends: {})", available.join(", "))
                    .into())
            }
        }
    }
}
