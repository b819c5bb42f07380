//! A loaded Wasm model version (`WasmModel`) and its instances. Each instance owns a store and an
//! initialised instance of the plugin in it; `execute` hands a batch of requests across the boundary in one
//! call and takes the answers back. A trap fails only the requests of that call: the store is thrown away,
//! and the next call re-creates and initialises a fresh instance. An instance whose memory reached
//! `wasm_memory_recycle_mb` is finalized and replaced the same way, after its call has answered.
//!
//! A decoupled model's requests carry responders: the store holds them during the call, for the plugin's
//! `streaming.sender`, and a request still open when the call returns is ended with an error at its
//! execute deadline unless the plugin completes it before.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use wasmtime::Store;

use super::bindings::{self, Backend as Bindings};
use super::sandbox::{refuel, trap_summary, Plugin};
use super::state::StoreState;
use super::{convert, limits};
use crate::backends::{Backend, Instance};
use crate::error::{Error, LoadResult, Result};
use crate::inference::{InferenceRequest, Responder};
use crate::tensor::Tensor;

/// A loaded model version; instances share its `Plugin`.
pub struct WasmModel(pub(super) Arc<Plugin>);

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
    /// Finalizes the instance and lets it go: its memory reached `wasm_memory_recycle_mb`. The next call
    /// initialises a fresh one.
    async fn recycle(&mut self) {
        let memory = self.live.as_ref().map_or(0, |(store, _)| store.data().memory.linear_bytes());
        tracing::info!(
            model = &*self.model.label,
            "re-creating the instance: its memory grew to {} MiB, past {}",
            memory >> 20,
            self.model.limits.describe_recycling()
        );
        self.finalize().await;
        self.live = None;
    }

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
    async fn execute(&mut self, mut requests: Vec<InferenceRequest>) -> Vec<Result<Vec<Tensor>>> {
        let _running = self.model.ticker.running();
        let label = self.model.label.clone();
        let limits = self.model.limits;
        let decoupled = self.model.decoupled;
        let recyclable = self.model.recyclable;
        let count = requests.len();
        let fail_all = |e: Error| (0..count).map(|_| Err(e.clone())).collect();
        let (store, bindings) = match self.live().await {
            Ok(live) => live,
            Err(e) => return fail_all(e),
        };
        let responders: Vec<Option<Responder>> = requests.iter_mut().map(|r| r.responder.take()).collect();
        let trace = match requests.as_slice() {
            [only] => only.trace.clone(),
            _ => None,
        };
        let wit_requests = match requests
            .into_iter()
            .map(|r| convert::request_to_wit(store.data_mut(), r))
            .collect::<wasmtime::Result<Vec<_>>>()
        {
            Ok(wit_requests) => wit_requests,
            Err(e) => {
                return fail_all(Error::internal(format!(
                    "model '{label}': cannot hand the request to the plugin: {e:#}"
                )))
            }
        };
        let deadline = limits::deadline(&limits);
        store.data_mut().deadline = deadline;
        store.data_mut().responders = responders;
        store.data_mut().trace = trace;
        refuel(store, &limits);
        // The store's epoch deadline is the tick after the last one it saw, usually long past by the next
        // call; left so, each call that follows a tick would yield at its first instruction, a trip
        // through the scheduler for nothing (≈ one call in fifteen at concurrency 1). From now, a call
        // yields only when a tick falls inside it.
        store.set_epoch_deadline(1);
        let outcome = bindings.call_execute(&mut *store, &wit_requests).await;
        store.data_mut().deadline = None;
        store.data_mut().trace = None;
        store.data_mut().empty_pipe();
        let responders = std::mem::take(&mut store.data_mut().responders);
        if decoupled && outcome.is_ok() {
            end_open_requests_at(deadline, responders, &label, &limits);
        }
        match outcome {
            // A decoupled model may answer everything through its senders and return nothing.
            Ok(results) if results.is_empty() && decoupled => (0..count).map(|_| Ok(Vec::new())).collect(),
            Ok(results) if results.len() == count => {
                let answers = results.into_iter().map(|r| response_from_wit(store.data_mut(), &label, r)).collect();
                if store.data().memory.due_for_recycling() && recyclable {
                    self.recycle().await;
                }
                answers
            }
            Ok(results) => fail_all(Error::internal(format!(
                "model '{label}': plugin answered {count} requests with {} responses",
                results.len()
            ))),
            Err(trap) => {
                tracing::warn!(model = &*label, "plugin trapped, re-creating the instance: {trap:#}");
                self.live = None;
                fail_all(Error::internal(format!("model '{label}': plugin trapped: {}", trap_summary(&trap, &limits))))
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

/// Ends each request still open at `deadline` with an error, unless the plugin completes it before (from a
/// later call, with a sender it kept). Without a deadline (no execute timeout) requests stay open until
/// their senders are gone.
fn end_open_requests_at(
    deadline: Option<Instant>,
    responders: Vec<Option<Responder>>,
    label: &Arc<str>,
    limits: &limits::Limits,
) {
    let Some(deadline) = deadline else { return };
    let error = Error::internal(format!(
        "model '{label}': the plugin did not send the final response within its execute timeout of {}",
        limits.describe_timeout()
    ));
    for responder in responders.into_iter().flatten().filter(|r| !r.is_complete()) {
        let error = error.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(deadline.into()).await;
            responder.fail(error).await;
        });
    }
}

/// One request's answer from the plugin: its outputs taken back from their handles, or its error.
fn response_from_wit(
    state: &mut StoreState,
    label: &str,
    result: std::result::Result<bindings::tessera::backend::types::Response, String>,
) -> Result<Vec<Tensor>> {
    let response = result.map_err(|message| Error::internal(format!("model '{label}': {message}")))?;
    convert::response_from_wit(state, response)
        .map_err(|e| Error::internal(format!("model '{label}': the plugin returned a tensor it does not own: {e:#}")))
}
