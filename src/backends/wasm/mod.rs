//! The WebAssembly plugin backend: each model version is a component implementing `wit/backend.wit`.
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
mod convert;
mod epoch;
mod host;
mod limits;
mod tensor_data;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use self::bindings::{Backend as Bindings, BackendPre};
use self::cache::{ComponentCache, Origin};
use self::epoch::EpochTicker;
use self::host::{GuestOutput, StoreState};
use self::limits::{Limits, MemoryCap};
use super::{Backend, Instance, LoadContext, Peers};
use crate::error::{Error, LoadResult, Result};
use crate::inference::InferenceRequest;
use crate::model_config::{self, ModelConfig};
use crate::model_files;
use crate::tensor::Tensor;

mod bindings {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "backend",
        // Tensor handles are plain table operations: synchronous host calls, which cost much less than
        // async ones. Everything else (BLS calls wait for other models) is async.
        imports: { "tessera:backend/types": trappable, default: async | trappable },
        exports: { default: async },
        with: { "tessera:backend/types.tensor-data": super::tensor_data::HeldData },
    });
}

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
        let plain = Linked::new(Config::new().epoch_interruption(true))?;
        let metered = Linked::new(Config::new().epoch_interruption(true).consume_fuel(true))?;
        let ticker = start_epoch_ticker(&[&plain.engine, &metered.engine])?;
        Ok(WasmRuntime { plain, metered, cache: ComponentCache::new(cache_dir), peers, ticker })
    }

    /// Compiles (or loads from cache) and links the component at `component` (the version's plugin, or a
    /// Python model's build), then checks it exports the world.
    pub fn load(&self, ctx: &LoadContext<'_>, component: &Path) -> LoadResult<WasmModel> {
        let label = format!("{}:{}", ctx.model, ctx.version);
        let mut plugin = self.link(&label, component, ctx.version_dir, ctx.config)?;
        plugin.base_args = vec![
            ("model_name".into(), ctx.model.to_string()),
            ("model_version".into(), ctx.version.to_string()),
            ("model_repository".into(), ctx.repository.display().to_string()),
            ("model_config".into(), ctx.config_json.to_string()),
            ("model_instance_kind".into(), "CPU".into()),
            ("model_instance_device_id".into(), "0".into()),
        ];
        Ok(WasmModel(Arc::new(plugin)))
    }

    /// Lets the plugin `component` (of the model in `version_dir`) complete its own configuration, as
    /// Triton's python backend calls `TritonPythonModel.auto_complete_config`: `auto-complete-config` runs
    /// on a fresh instance that is never initialised, with the config as Triton-style JSON, and its answer
    /// replaces the config. Blocks: call it from a blocking thread of the runtime.
    pub fn auto_complete(&self, config: &mut ModelConfig, version_dir: &Path, component: &Path) -> LoadResult<()> {
        let label = format!("{}:auto-complete", config.name);
        let plugin = self.link(&label, component, version_dir, config)?;
        let json = model_config::to_json(config).to_string();
        let answer = tokio::runtime::Handle::current().block_on(plugin.auto_complete(&json))?;
        *config = model_config::parse_json(&answer, "the plugin's auto-complete-config answer")?;
        Ok(())
    }

    /// The linked component at `path`, sandboxed in `version_dir`, with the limits its config sets.
    fn link(&self, label: &str, path: &Path, version_dir: &Path, config: &ModelConfig) -> LoadResult<Plugin> {
        let wasm = model_files::read_regular(path, model_files::PLUGIN_LIMIT)
            .map_err(|e| format!("cannot load plugin {e}"))?;
        let label: Arc<str> = label.into();
        let limits = Limits::from_config(config)?;
        let linked = if limits.fuel.is_some() { &self.metered } else { &self.plain };
        let started = Instant::now();
        let (component, origin) = self
            .cache
            .load(&linked.engine, &wasm)
            .map_err(|e| format!("{} is not a valid component: {e:#}", path.display()))?;
        match origin {
            Origin::Cache => {
                tracing::info!(model = &*label, "loaded compiled component from cache in {:?}", started.elapsed())
            }
            Origin::Compiled => tracing::info!(model = &*label, "compiled component in {:?}", started.elapsed()),
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
            version_dir: version_dir.to_path_buf(),
            base_args: Vec::new(),
        })
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

/// The plugin of the model in `version_dir`, if its file is there.
pub fn plugin_path(config: &ModelConfig, version_dir: &Path) -> Option<PathBuf> {
    Some(version_dir.join(plugin_file(config))).filter(|path| model_files::is_regular_file(path))
}

/// The plugin's file name in a version directory: `default_model_filename`, else `model.wasm`.
pub fn plugin_file(config: &ModelConfig) -> &str {
    model_config::model_file_name(config, "model.wasm")
}

/// A loaded model version; instances share its `Plugin`.
pub struct WasmModel(Arc<Plugin>);

/// The linked component and what every instance of it is created with.
struct Plugin {
    pre: BackendPre<StoreState>,
    label: Arc<str>,
    limits: Limits,
    peers: Peers,
    /// Every call into the plugin (instantiation included: it runs plugin code) holds `ticker.running()`.
    ticker: EpochTicker,
    version_dir: PathBuf,
    /// `initialize` arguments shared by every instance (the instance name is added per instance).
    base_args: Vec<(String, String)>,
}

impl Plugin {
    /// A new store with the plugin's sandbox and limits, and an instance in it, not yet initialised.
    async fn fresh_instance(&self) -> LoadResult<(Store<StoreState>, Bindings)> {
        let mut store = self.new_store()?;
        let _running = self.ticker.running();
        let bindings =
            self.pre.instantiate_async(&mut store).await.map_err(|e| format!("cannot instantiate: {e:#}"))?;
        Ok((store, bindings))
    }

    /// A fresh store and instance, initialised: used at load and after every trap.
    async fn instantiate(&self, args: &[(String, String)]) -> LoadResult<(Store<StoreState>, Bindings)> {
        let (mut store, bindings) = self.fresh_instance().await?;
        refuel(&mut store, &self.limits);
        let _running = self.ticker.running();
        bindings
            .call_initialize(&mut store, args)
            .await
            .map_err(|e| format!("initialize trapped: {}", trap_summary(&e, &self.limits)))?
            .map_err(|e| format!("initialize failed: {e}"))?;
        Ok((store, bindings))
    }

    /// Runs `auto-complete-config` on a fresh, uninitialised instance, within the execute timeout.
    async fn auto_complete(&self, config_json: &str) -> LoadResult<String> {
        let (mut store, bindings) = self.fresh_instance().await?;
        store.data_mut().deadline = limits::deadline(&self.limits);
        refuel(&mut store, &self.limits);
        let _running = self.ticker.running();
        let answer = bindings
            .call_auto_complete_config(&mut store, config_json)
            .await
            .map_err(|e| format!("auto-complete-config trapped: {}", trap_summary(&e, &self.limits)))?;
        Ok(answer.map_err(|e| format!("auto-complete-config failed: {e}"))?)
    }

    /// A store with the plugin's sandbox and limits.
    fn new_store(&self) -> LoadResult<Store<StoreState>> {
        let mut store = Store::new(self.pre.engine(), self.new_state()?);
        store.limiter(|state| &mut state.memory);
        refuel(&mut store, &self.limits); // instantiating runs plugin code too
        store.set_epoch_deadline(1);
        let timeout = self.limits.describe_timeout();
        store.epoch_deadline_callback(move |state| match state.data().deadline {
            Some(deadline) if Instant::now() >= deadline => {
                wasmtime::bail!("the plugin ran past its execute timeout of {timeout}")
            }
            _ => Ok(UpdateDeadline::Yield(1)),
        });
        Ok(store)
    }

    fn new_state(&self) -> LoadResult<StoreState> {
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(GuestOutput { label: self.label.clone(), stream: "stdout" })
            .stderr(GuestOutput { label: self.label.clone(), stream: "stderr" })
            // No sockets and no name lookups (wasmtime also refuses every address by default), no
            // environment variables, no arguments: only the version directory, read-only.
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .preopened_dir(&self.version_dir, GUEST_MODEL_DIR, FsPerms::ReadOnly)
            .map_err(|e| format!("cannot open {}: {e:#}", self.version_dir.display()))?;
        Ok(StoreState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            label: self.label.clone(),
            memory: MemoryCap::new(self.limits),
            deadline: None,
            peers: self.peers.clone(),
        })
    }
}

#[async_trait]
impl Backend for WasmModel {
    async fn create_instance(&self, instance_name: &str) -> LoadResult<Box<dyn Instance>> {
        let plugin = &self.0;
        let mut args = plugin.base_args.clone();
        args.push(("model_instance_name".into(), instance_name.to_string()));
        let live = plugin.instantiate(&args).await?;
        Ok(Box::new(WasmInstance { model: plugin.clone(), args, live: Some(live) }))
    }
}

struct WasmInstance {
    model: Arc<Plugin>,
    args: Vec<(String, String)>,
    /// `None` after a trap whose re-instantiation failed; the next call tries again.
    live: Option<(Store<StoreState>, Bindings)>,
}

impl WasmInstance {
    async fn live(&mut self) -> Result<&mut (Store<StoreState>, Bindings)> {
        if self.live.is_none() {
            let fresh = self.model.instantiate(&self.args).await.map_err(|e| {
                Error::internal(format!("model '{}': cannot re-create the plugin instance: {e}", self.model.label))
            })?;
            self.live = Some(fresh);
        }
        Ok(self.live.as_mut().expect("set above"))
    }
}

#[async_trait]
impl Instance for WasmInstance {
    async fn execute(&mut self, requests: &[InferenceRequest]) -> Vec<Result<Vec<Tensor>>> {
        let _running = self.model.ticker.running();
        let label = self.model.label.clone();
        let limits = self.model.limits;
        let (store, bindings) = match self.live().await {
            Ok(live) => live,
            Err(e) => return requests.iter().map(|_| Err(e.clone())).collect(),
        };
        let wit_requests = match requests
            .iter()
            .map(|r| convert::request_to_wit(store.data_mut(), r))
            .collect::<wasmtime::Result<Vec<_>>>()
        {
            Ok(wit_requests) => wit_requests,
            Err(e) => {
                let e = Error::internal(format!("model '{label}': cannot hand the request to the plugin: {e:#}"));
                return requests.iter().map(|_| Err(e.clone())).collect();
            }
        };
        store.data_mut().deadline = limits::deadline(&limits);
        refuel(store, &limits);
        // The store's epoch deadline is the tick after the last one it saw, usually long past by the next
        // call; left so, each call that follows a tick would yield at its first instruction, a trip
        // through the scheduler for nothing (≈ one call in fifteen at concurrency 1). From now, a call
        // yields only when a tick falls inside it.
        store.set_epoch_deadline(1);
        let outcome = bindings.call_execute(&mut *store, &wit_requests).await;
        store.data_mut().deadline = None;
        match outcome {
            Ok(results) if results.len() == requests.len() => {
                results.into_iter().map(|r| response_from_wit(store.data_mut(), &label, r)).collect()
            }
            Ok(results) => {
                let e = Error::internal(format!(
                    "model '{label}': plugin answered {} requests with {} responses",
                    requests.len(),
                    results.len()
                ));
                requests.iter().map(|_| Err(e.clone())).collect()
            }
            Err(trap) => {
                tracing::warn!(model = &*label, "plugin trapped, re-creating the instance: {trap:#}");
                self.live = None;
                let e = Error::internal(format!("model '{label}': plugin trapped: {}", trap_summary(&trap, &limits)));
                requests.iter().map(|_| Err(e.clone())).collect()
            }
        }
    }

    async fn finalize(&mut self) {
        if let Some((store, bindings)) = self.live.as_mut() {
            refuel(store, &self.model.limits);
            let _running = self.model.ticker.running();
            if let Err(e) = bindings.call_finalize(&mut *store).await {
                tracing::warn!(model = &*self.model.label, "finalize trapped: {e:#}");
            }
        }
    }
}

/// One request's answer from the plugin: its outputs taken back from their handles, or its error.
fn response_from_wit(
    state: &mut StoreState,
    label: &str,
    result: std::result::Result<bindings::tessera::backend::types::Response, String>,
) -> Result<Vec<Tensor>> {
    let response = result.map_err(|message| Error::internal(format!("model '{label}': {message}")))?;
    response
        .outputs
        .into_iter()
        .map(|t| convert::tensor_from_wit(state, t))
        .collect::<wasmtime::Result<_>>()
        .map_err(|e| Error::internal(format!("model '{label}': the plugin returned a tensor it does not own: {e:#}")))
}

/// Gives a store with a fuel budget its full budget for the next call.
fn refuel(store: &mut Store<StoreState>, limits: &Limits) {
    if let Some(fuel) = limits.fuel {
        store.set_fuel(fuel).expect("plugins with a fuel budget run on the engine that counts fuel");
    }
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

/// The trap's cause in one line (e.g. "wasm trap: wasm `unreachable` instruction executed"), without the
/// guest backtrace that `{:#}` would add.
fn trap_summary(error: &wasmtime::Error, limits: &Limits) -> String {
    match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::OutOfFuel) => format!("the plugin used up its fuel budget of {}", limits.describe_fuel()),
        Some(trap) => format!("wasm trap: {trap}"),
        None => error.root_cause().to_string(),
    }
}
