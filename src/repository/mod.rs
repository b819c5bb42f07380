//! The live table of models: which models exist, the state of each of their versions, and why the ones
//! that do not serve are not serving. Requests look models up here; `control` changes the table (start-up
//! loads, poll-mode changes, repository API calls) by swapping whole records in, so a lookup always sees
//! either the old or the new state of a model, never half of each. Lookups answer with Triton's errors for
//! unknown or unready models.

mod control;
mod fingerprint;
mod loader;
mod model;
pub(crate) mod overrides;
mod record;
mod versions;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

pub use control::{ControlMode, IndexEntry, ModelControl};
pub use loader::Loader;
use model::Lease;
pub use model::ModelVersion;
pub use overrides::LoadOverrides;
pub use record::{ModelRecord, VersionState};

use futures_util::StreamExt;

use crate::backends::ModelCaller;
use crate::error::{Error, Result};
use crate::executor;
use crate::inference::{InferenceRequest, InferenceResponse, Responder, ResponseStream, Streamed};
use crate::scheduler;

#[derive(Default)]
pub struct ModelRepository {
    table: RwLock<BTreeMap<String, Arc<ModelRecord>>>,
}

impl ModelRepository {
    /// Every model in the table, by name.
    pub fn records(&self) -> Vec<Arc<ModelRecord>> {
        self.read().values().cloned().collect()
    }

    pub fn record(&self, name: &str) -> Result<Arc<ModelRecord>> {
        self.read().get(name).cloned().ok_or_else(|| unknown_model(name))
    }

    /// The version a request should go to: the one named, or the newest ready one when `version` is empty.
    pub fn version(&self, name: &str, version: &str) -> Result<Arc<ModelVersion>> {
        self.with_version(name, version, Arc::clone)
    }

    /// Like `version`, holding the version for an inference: it is not retired until the lease is dropped.
    /// The lease is taken under the table's lock, so a version swapped out after this returns still waits.
    fn lease(&self, name: &str, version: &str) -> Result<Lease> {
        self.with_version(name, version, Lease::new)
    }

    fn with_version<T>(&self, name: &str, version: &str, use_it: impl FnOnce(&Arc<ModelVersion>) -> T) -> Result<T> {
        let table = self.read();
        let record = table.get(name).ok_or_else(|| unknown_model(name))?;
        if version.is_empty() {
            let newest = record.ready_versions().next_back().ok_or_else(|| {
                let why = record.why_not_serving();
                Error::NotReady(format!("Request for unknown model: '{name}' has no available versions: {why}"))
            })?;
            return Ok(use_it(newest));
        }
        let unknown = || Error::NotFound(format!("Request for unknown model: '{name}' version {version} is not found"));
        let number: i64 = version.parse().map_err(|_| unknown())?;
        match record.versions.get(&number) {
            Some(VersionState::Ready(model)) => Ok(use_it(model)),
            Some(state) => Err(Error::NotReady(format!(
                "model '{name}' version {version} is not ready: {}",
                match state {
                    VersionState::Unavailable(reason) => reason.as_str(),
                    other => other.name(),
                }
            ))),
            None => Err(unknown()),
        }
    }

    /// Hands one request to the scheduler of the version it names (the newest ready one by default),
    /// holding a lease on that version until it is answered.
    pub async fn infer(&self, request: InferenceRequest) -> Result<InferenceResponse> {
        let model = self.lease(&request.model, &request.version)?;
        model.scheduler().infer(request).await
    }

    /// Like `infer`, for a client on an endpoint that takes one response (`endpoint` names it in the refusal):
    /// a decoupled model is refused as Triton refuses it.
    pub async fn infer_unary(&self, request: InferenceRequest, endpoint: &str) -> Result<InferenceResponse> {
        let model = self.lease(&request.model, &request.version)?;
        if model.scheduler().is_decoupled() {
            return Err(Error::Unimplemented(format!(
                "{endpoint} doesn't support models with decoupled transaction policy"
            )));
        }
        model.scheduler().infer(request).await
    }

    /// Hands one request to its version's scheduler and gives its response stream: the one response of a
    /// model that is not decoupled, or each response a decoupled one sends. The stream holds a lease on the
    /// version until it ends or is dropped; a decoupled request runs on a task of its own, so a stream
    /// dropped early (the client went away) does not interrupt the model, whose later sends then fail.
    pub fn infer_stream(&self, request: InferenceRequest) -> Result<ResponseStream> {
        let model = self.lease(&request.model, &request.version)?;
        if !model.scheduler().is_decoupled() {
            let answer = async move {
                let response = model.scheduler().infer(request).await;
                Streamed { response: response.map(Some), last: true }
            };
            return Ok(ResponseStream { decoupled: false, messages: futures_util::stream::once(answer).boxed() });
        }
        let (responder, receiver) = Responder::channel();
        let (id, requested) = (request.id.clone(), request.requested_outputs.clone());
        let running = model.clone();
        let execution = async move { running.scheduler().execute_decoupled(request, responder).await };
        if model.scheduler().is_sequential() {
            // A sequence's requests must reach its batcher in the order they came (one stream's requests are
            // opened in order): the first stretch, up to joining the sequence, runs here; the rest on a task.
            executor::run_here_first(execution, "a decoupled request panicked; its stream was ended");
        } else {
            tokio::spawn(execution);
        }
        Ok(ResponseStream { decoupled: true, messages: scheduler::responses(model, receiver, id, requested) })
    }

    /// Puts `record` in the table; returns the record it replaced.
    pub fn put(&self, record: ModelRecord) -> Option<Arc<ModelRecord>> {
        self.write().insert(record.name.clone(), Arc::new(record))
    }

    pub fn remove(&self, name: &str) -> Option<Arc<ModelRecord>> {
        self.write().remove(name)
    }

    /// Finishes in-flight requests and finalises every instance of every model.
    pub async fn shutdown(&self) {
        for record in self.records() {
            for version in record.ready_versions() {
                version.retire().await;
            }
        }
    }

    /// Whether every model in the table is completely loaded (strict readiness, exit-on-error).
    pub fn all_ready(&self) -> bool {
        self.read().values().all(|m| m.failures().is_empty())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<ModelRecord>>> {
        self.table.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<ModelRecord>>> {
        self.table.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Plugins call other models through the table, exactly as clients do.
#[async_trait::async_trait]
impl ModelCaller for ModelRepository {
    async fn infer(&self, request: InferenceRequest) -> Result<InferenceResponse> {
        ModelRepository::infer(self, request).await
    }

    fn infer_stream(&self, request: InferenceRequest) -> Result<ResponseStream> {
        ModelRepository::infer_stream(self, request)
    }

    fn is_ready(&self, model: &str, version: &str) -> bool {
        self.version(model, version).is_ok()
    }
}

fn unknown_model(name: &str) -> Error {
    Error::NotFound(format!("Request for unknown model: '{name}' is not found"))
}
