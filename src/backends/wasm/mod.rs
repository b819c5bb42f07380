//! The WebAssembly plugin host: each model version is a component implementing `wit/backend.wit`, the
//! contract. One file per part of it:
//! - `instance`: a loaded version and its instances, calling the `backend` exports (`execute`, …);
//! - `sandbox`: the linked component and the store every instance gets (WASI, limits, deadlines);
//! - `state`: what a store holds; `stdio`: guest output into the log; `tensor_pipe`: tensors through
//!   stdin and stdout;
//! - `host`: the `tessera:backend/host` imports (log, BLS); `tensor_data`: the `types.tensor-data`
//!   resource; `streaming`: response senders for decoupled models; `convert`: requests and tensors across
//!   the boundary;
//! - `limits`, `epoch`, `cache`: memory caps and deadlines, the epoch ticker, compiled-code cache;
//! - `python`: Python models (`model.py`), built into components that run here like any plugin.
//!
//! One `Engine` serves the whole process. A model version is compiled once (or loaded from the on-disk
//! cache) and pre-linked into an `InstancePre`; every instance of the model gets its own `Store`, so
//! instances share nothing and run in parallel. A trap (panic, out-of-bounds access, …) fails only the
//! requests of that `execute` call: the store is thrown away and a fresh instance created and initialised
//! for the next call, and the model stays ready.
//!
//! Calls into a plugin are async and run on the request's own task: no hand-off to another thread, which
//! on a busy machine costs more than the plugin's work. So that a long-running plugin cannot hold a runtime
//! thread, a background thread (`epoch`) advances the engine's epoch every `EPOCH_TICK` while a plugin
//! call is under way, and every store yields to the executor at each tick.

mod cache;
pub(crate) mod convert;
mod epoch;
mod host;
mod instance;
pub(crate) mod limits;
pub mod python;
mod sandbox;
pub(crate) mod state;
mod stdio;
mod streaming;
pub(crate) mod tensor_data;
pub(crate) mod tensor_pipe;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine};

use self::bindings::{Backend as Bindings, BackendPre};
use self::cache::{ComponentCache, Origin};
use self::epoch::EpochTicker;
use self::instance::WasmModel;
use self::limits::Limits;
pub use self::sandbox::Mount;
use self::sandbox::Plugin;
use self::state::StoreState;
use super::{LoadContext, Peers};
use crate::error::LoadResult;
use crate::model_config::{self, ModelConfig};
use crate::model_files;

mod bindings {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "backend",
        // Tensor handles are plain table operations: synchronous host calls, which cost much less than
        // async ones. Everything else (BLS calls wait for other models) is async.
        imports: { "tessera:backend/types": trappable, default: async | trappable },
        exports: { default: async },
        with: {
            "tessera:backend/types.tensor-data": super::tensor_data::HeldData,
            "tessera:backend/streaming.response-sender": super::streaming::SenderHandle,
            "tessera:backend/streaming.response-stream": super::streaming::CallStream,
        },
    });
}

pub(crate) use bindings::tessera::backend::types as wit_types;

/// The environment variable that makes the server name plugins' compiled functions for `perf`.
const PERFMAP_VARIABLE: &str = "TESSERA_PERFMAP";

/// Where plugins see their model version directory (read-only).
pub const GUEST_MODEL_DIR: &str = "/model";

pub struct WasmRuntime {
    /// For plugins without a fuel budget.
    plain: Linked,
    /// For plugins with one (`wasm_fuel`): counting fuel slows the code, so only they pay for it.
    metered: Linked,
    cache: ComponentCache,
    /// The other models, for plugins' BLS calls.
    peers: Peers,
    ticker: EpochTicker,
}

impl WasmRuntime {
    /// `cache_dir`: where compiled components are kept across restarts (`None`: always compile). `peers`:
    /// how plugins reach other models.
    pub fn new(cache_dir: Option<PathBuf>, peers: Peers) -> anyhow::Result<Self> {
        let plain = Linked::new(&engine_config())?;
        let metered = Linked::new(engine_config().consume_fuel(true))?;
        let ticker = start_epoch_ticker(&[&plain.engine, &metered.engine])?;
        Ok(WasmRuntime { plain, metered, cache: ComponentCache::new(cache_dir), peers, ticker })
    }

    /// Compiles (or loads from cache) and links the component at `component` (the version's plugin, or the
    /// Python runtime), then checks it exports the world. `mounts`: what the sandbox shows besides the model's
    /// own directories.
    pub fn load(
        &self,
        ctx: &LoadContext<'_>,
        component: ComponentFile<'_>,
        mounts: Vec<Mount>,
    ) -> LoadResult<WasmModel> {
        let label = format!("{}:{}", ctx.model, ctx.version);
        let mut plugin = self.link(&label, component, ctx.version_dir, ctx.config, mounts)?;
        plugin.base_args = vec![
            ("model_name".into(), ctx.model.to_string()),
            ("model_version".into(), ctx.version.to_string()),
            ("model_repository".into(), sandbox::model_directory(ctx.version_dir)?),
            ("model_config".into(), ctx.config_json.to_string()),
            ("model_instance_kind".into(), "CPU".into()),
            ("model_instance_device_id".into(), "0".into()),
        ];
        Ok(WasmModel(Arc::new(plugin)))
    }

    /// Lets the plugin `component` (of the model in `version_dir`) complete its own configuration, as
    /// Triton's python backend calls `TritonPythonModel.auto_complete_config`: `auto-complete-config` runs
    /// on a fresh instance that is never initialised, with the config as Triton-style JSON, and its answer
    /// replaces the config. `mounts` as for `load`. Blocks: call it from a blocking thread of the runtime.
    pub fn auto_complete(
        &self,
        config: &mut ModelConfig,
        version_dir: &Path,
        component: ComponentFile<'_>,
        mounts: Vec<Mount>,
    ) -> LoadResult<()> {
        let label = format!("{}:auto-complete", config.name);
        let plugin = self.link(&label, component, version_dir, config, mounts)?;
        let json = model_config::to_json(config).to_string();
        let answer = tokio::runtime::Handle::current().block_on(plugin.auto_complete(&json))?;
        *config = model_config::parse_json(&answer, "the plugin's auto-complete-config answer")?;
        Ok(())
    }

    /// The linked component at `path`, sandboxed in the model's directories and `mounts`, with the limits its
    /// config sets.
    fn link(
        &self,
        label: &str,
        file: ComponentFile<'_>,
        version_dir: &Path,
        config: &ModelConfig,
        mounts: Vec<Mount>,
    ) -> LoadResult<Plugin> {
        let path = file.path();
        let model_dir = sandbox::model_directory(version_dir)?;
        let version = version_dir.file_name().unwrap_or_default().to_string_lossy();
        let version_directory = format!("{model_dir}/{version}").into();
        let mut all_mounts = Mount::model(version_dir, &model_dir);
        all_mounts.extend(mounts);
        let read = || {
            model_files::read_regular(path, model_files::PLUGIN_LIMIT).map_err(|e| format!("cannot load plugin {e}"))
        };
        let label: Arc<str> = label.into();
        let limits = Limits::from_config(config)?;
        let linked = if limits.fuel.is_some() { &self.metered } else { &self.plain };
        let started = Instant::now();
        let loaded = match file {
            ComponentFile::Own(_) => self.cache.load(&linked.engine, &read()?),
            ComponentFile::Shared(_) => {
                self.cache.load_kept(&linked.engine, path, || read().map_err(anyhow::Error::msg))
            }
        };
        let (component, origin) = loaded.map_err(|e| format!("{} is not a valid component: {e:#}", path.display()))?;
        match origin {
            Origin::Cache => {
                tracing::info!(model = &*label, "loaded compiled component from cache in {:?}", started.elapsed())
            }
            Origin::Compiled => tracing::info!(model = &*label, "compiled component in {:?}", started.elapsed()),
            Origin::Kept => tracing::debug!(model = &*label, "component already loaded"),
        }
        let decoupled = model_config::is_decoupled(config);
        if decoupled && !imports_streaming(&component, &linked.engine) {
            return Err(format!(
                "model is decoupled (model_transaction_policy {{ decoupled: true }}) but {} does not import \
                 tessera:backend/streaming, so it cannot send responses",
                path.display()
            )
            .into());
        }
        let pre = linked
            .linker
            .instantiate_pre(&component)
            .map_err(|e| format!("{} cannot be linked: {e:#}", path.display()))?;
        let pre = BackendPre::new(pre)
            .map_err(|e| format!("{} does not implement tessera:backend/backend: {e:#}", path.display()))?;
        Ok(Plugin {
            pre,
            label,
            limits,
            peers: self.peers.clone(),
            ticker: self.ticker.clone(),
            mounts: all_mounts,
            version_directory,
            base_args: Vec::new(),
            decoupled,
            recyclable: !decoupled && config.sequence_batching().is_none(),
        })
    }
}

/// The file of a component to load.
#[derive(Clone, Copy)]
pub enum ComponentFile<'a> {
    /// A model's own plugin.
    Own(&'a Path),
    /// A component many models run (the Python runtime): loaded once and kept.
    Shared(&'a Path),
}

impl ComponentFile<'_> {
    fn path(&self) -> &Path {
        match self {
            ComponentFile::Own(path) | ComponentFile::Shared(path) => path,
        }
    }
}

/// An engine and the host's imports linked for it.
struct Linked {
    engine: Engine,
    linker: Linker<StoreState>,
}

impl Linked {
    fn new(config: &Config) -> anyhow::Result<Self> {
        let engine = Engine::new(config)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        Bindings::add_to_linker::<StoreState, HasSelf<StoreState>>(&mut linker, |state| state)?;
        Ok(Linked { engine, linker })
    }
}

/// Whether `component` imports the streaming interface (any 1.x version), without which it cannot serve a
/// decoupled model.
fn imports_streaming(component: &wasmtime::component::Component, engine: &Engine) -> bool {
    component.component_type().imports(engine).any(|(name, _)| name.starts_with("tessera:backend/streaming@1."))
}

/// The plugin of the model in `version_dir`, if its file is there.
pub fn plugin_path(config: &ModelConfig, version_dir: &Path) -> Option<PathBuf> {
    Some(version_dir.join(plugin_file(config))).filter(|path| model_files::is_regular_file(path))
}

/// The plugin's file name in a version directory: `default_model_filename`, else `model.wasm`.
pub fn plugin_file(config: &ModelConfig) -> &str {
    model_config::model_file_name(config, "model.wasm")
}

/// What both engines share: epoch interruption (deadlines and yielding), and, for profiling plugins, with
/// TESSERA_PERFMAP set, the compiled code of every plugin named in /tmp/perf-<pid>.map, so that `perf report`
/// shows guest functions (CPython's, numpy's) by name.
fn engine_config() -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    if std::env::var_os(PERFMAP_VARIABLE).is_some() {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    config
}

/// The ticker that advances both engines' epochs for as long as they exist.
fn start_epoch_ticker(engines: &[&Engine]) -> std::io::Result<EpochTicker> {
    let engines: Vec<_> = engines.iter().map(|engine| engine.weak()).collect();
    EpochTicker::start(move || {
        engines.iter().all(|engine| match engine.upgrade() {
            Some(engine) => {
                engine.increment_epoch();
                true
            }
            None => false,
        })
    })
}
