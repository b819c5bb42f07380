//! A plugin's sandbox: the linked component with the limits its config sets, and the store each of its
//! instances gets — WASI preview 2 with nothing but its mounts, read-only: the version directory at `/model`,
//! the model's directory at its own absolute path (the `model_repository` of `initialize`, so the paths a
//! Triton model builds from it resolve), and for Python models the standard library; no network, no
//! environment; guest output into the log, stdin and stdout also a way for tensors (`tensor_pipe`); the
//! memory cap; the execute deadline, checked at every epoch tick; fuel where a budget is set. Creating and
//! initialising an instance and the `auto-complete-config` call live here, since each of them runs plugin
//! code in a fresh store.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use super::bindings::{Backend as Bindings, BackendPre};
use super::epoch::EpochTicker;
use super::limits::{self, Limits, MemoryCap};
use super::state::StoreState;
use super::stdio::GuestOutput;
use super::tensor_pipe::{StagedInput, TensorPipe};
use super::GUEST_MODEL_DIR;
use crate::backends::Peers;
use crate::error::LoadResult;

/// A host directory and where the plugin sees it (read-only).
#[derive(Clone, Debug)]
pub struct Mount {
    pub host: PathBuf,
    pub guest: String,
}

impl Mount {
    /// The model's own directories: the version directory at `/model`, and the model's directory
    /// (`model_dir`, from `model_directory`) at its absolute path.
    pub fn model(version_dir: &Path, model_dir: &str) -> Vec<Mount> {
        vec![
            Mount { host: version_dir.to_path_buf(), guest: GUEST_MODEL_DIR.into() },
            Mount { host: model_dir.into(), guest: model_dir.into() },
        ]
    }
}

/// The absolute path of the model's directory (the version directory's parent): where the sandbox shows it,
/// and the `model_repository` that `initialize` is given.
pub fn model_directory(version_dir: &Path) -> LoadResult<String> {
    let parent = version_dir.parent().unwrap_or(version_dir);
    let absolute = std::path::absolute(parent).map_err(|e| format!("cannot resolve {}: {e}", parent.display()))?;
    let path = absolute.to_str().ok_or_else(|| format!("{} is not a UTF-8 path", absolute.display()))?;
    Ok(path.to_string())
}

/// The linked component and what every instance of it is created with.
pub struct Plugin {
    pub pre: BackendPre<StoreState>,
    pub label: Arc<str>,
    pub limits: Limits,
    pub peers: Peers,
    /// Every call into the plugin (instantiation included: it runs plugin code) holds `ticker.running()`.
    pub ticker: EpochTicker,
    /// The host directories the plugin sees, read-only.
    pub mounts: Vec<Mount>,
    /// The version directory as the plugin sees it (`<model directory>/<version>`).
    pub version_directory: Arc<str>,
    /// `initialize` arguments shared by every instance (the instance name is added per instance).
    pub base_args: Vec<(String, String)>,
    /// Whether the model is decoupled: its requests are answered through response senders.
    pub decoupled: bool,
    /// Whether an instance may be replaced between calls (`wasm_memory_recycle_mb`): not when instances hold
    /// state from call to call (a decoupled model's kept senders, a sequence model's sequences).
    pub recyclable: bool,
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
    pub async fn instantiate(&self, args: &[(String, String)]) -> LoadResult<(Store<StoreState>, Bindings)> {
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
    pub async fn auto_complete(&self, config_json: &str) -> LoadResult<String> {
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
        let pipe = TensorPipe::default();
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdin(StagedInput(pipe.clone()))
            .stdout(GuestOutput { label: self.label.clone(), stream: "stdout", pipe: Some(pipe.clone()) })
            .stderr(GuestOutput { label: self.label.clone(), stream: "stderr", pipe: None })
            // No sockets and no name lookups (wasmtime also refuses every address by default), no
            // environment variables, no arguments: only the mounts, read-only.
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        for mount in &self.mounts {
            wasi.preopened_dir(&mount.host, &mount.guest, FsPerms::ReadOnly)
                .map_err(|e| format!("cannot open {}: {e:#}", mount.host.display()))?;
        }
        Ok(StoreState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            label: self.label.clone(),
            memory: MemoryCap::new(self.limits),
            pipe,
            deadline: None,
            peers: self.peers.clone(),
            version_directory: self.version_directory.clone(),
            responders: Vec::new(),
            trace: None,
        })
    }
}

/// Gives a store with a fuel budget its full budget for the next call.
pub fn refuel(store: &mut Store<StoreState>, limits: &Limits) {
    if let Some(fuel) = limits.fuel {
        store.set_fuel(fuel).expect("plugins with a fuel budget run on the engine that counts fuel");
    }
}

/// The trap's cause in one line (e.g. "wasm trap: wasm `unreachable` instruction executed"), without the
/// guest backtrace that `{:#}` would add.
pub fn trap_summary(error: &wasmtime::Error, limits: &Limits) -> String {
    match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::OutOfFuel) => format!("the plugin used up its fuel budget of {}", limits.describe_fuel()),
        Some(trap) => format!("wasm trap: {trap}"),
        None => error.root_cause().to_string(),
    }
}
