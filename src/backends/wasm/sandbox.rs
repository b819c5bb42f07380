//! A plugin's sandbox: the linked component with the limits its config sets, and the store each of its
//! instances gets — WASI preview 2 with nothing but the version directory, read-only, at `/model`; no
//! network, no environment; guest output into the log; the memory cap; the execute deadline, checked at
//! every epoch tick; fuel where a budget is set. Creating and initialising an instance and the
//! `auto-complete-config` call live here, since each of them runs plugin code in a fresh store.

use std::path::PathBuf;
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
use super::GUEST_MODEL_DIR;
use crate::backends::Peers;
use crate::error::LoadResult;

/// The linked component and what every instance of it is created with.
pub struct Plugin {
    pub pre: BackendPre<StoreState>,
    pub label: Arc<str>,
    pub limits: Limits,
    pub peers: Peers,
    /// Every call into the plugin (instantiation included: it runs plugin code) holds `ticker.running()`.
    pub ticker: EpochTicker,
    pub version_dir: PathBuf,
    /// `initialize` arguments shared by every instance (the instance name is added per instance).
    pub base_args: Vec<(String, String)>,
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
