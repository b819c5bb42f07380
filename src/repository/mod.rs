//! The model repositories: which models exist, which of their versions are loaded, and why the others are
//! not. In control mode `none` every model of every repository is loaded at start-up; a model that fails
//! (bad config, missing file, unavailable backend, failing initialisation) is recorded as UNAVAILABLE with
//! its reason and everything else keeps serving. Lookups answer with Triton's errors for unknown or
//! unready models.

mod model;
mod versions;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use model::ModelVersion;

use crate::backends::Runtimes;
use crate::frontends::metrics::Metrics;
use crate::error::{Error, Result};
use crate::model_config::{self, ModelConfig};

/// The state of one version of a model.
pub enum VersionState {
    Ready(Arc<ModelVersion>),
    Unavailable(String),
}

/// Everything known about one model directory.
pub struct ModelRecord {
    pub name: String,
    pub path: PathBuf,
    pub config: Option<Arc<ModelConfig>>,
    pub versions: BTreeMap<i64, VersionState>,
    /// Why the model as a whole could not be loaded (config or version-directory errors).
    pub reason: Option<String>,
}

impl ModelRecord {
    fn failed(name: &str, path: &Path, reason: String) -> Self {
        ModelRecord { name: name.to_string(), path: path.to_path_buf(), config: None, versions: BTreeMap::new(), reason: Some(reason) }
    }

    /// The versions that are ready, newest last.
    pub fn ready_versions(&self) -> impl DoubleEndedIterator<Item = &Arc<ModelVersion>> {
        self.versions.values().filter_map(|v| match v {
            VersionState::Ready(model) => Some(model),
            VersionState::Unavailable(_) => None,
        })
    }

    /// Every reason this model, or one of its versions, failed.
    pub fn failures(&self) -> Vec<String> {
        let versions = self.versions.iter().filter_map(|(v, state)| match state {
            VersionState::Unavailable(reason) => Some(format!("version {v}: {reason}")),
            VersionState::Ready(_) => None,
        });
        self.reason.iter().cloned().chain(versions).collect()
    }
}

pub struct ModelRepository {
    models: BTreeMap<String, ModelRecord>,
}

impl ModelRepository {
    /// Scans every repository and loads every model found (control mode `none`). Blocks: call it from a
    /// blocking thread of `runtime`.
    pub fn load_all(
        runtime: &tokio::runtime::Handle,
        repositories: &[PathBuf],
        runtimes: &Runtimes,
        metrics: &Metrics,
    ) -> std::result::Result<Self, String> {
        let mut models: BTreeMap<String, ModelRecord> = BTreeMap::new();
        for repository in repositories {
            for (name, path) in model_directories(repository)? {
                if let Some(existing) = models.get(&name) {
                    let reason = format!(
                        "model '{name}' exists in two repositories: {} and {}",
                        existing.path.display(),
                        path.display()
                    );
                    models.insert(name.clone(), ModelRecord::failed(&name, &path, reason));
                    continue;
                }
                let record = load_model(runtime, runtimes, metrics, repository, &name, &path);
                models.insert(name, record);
            }
        }
        Ok(ModelRepository { models })
    }

    pub fn models(&self) -> impl Iterator<Item = &ModelRecord> {
        self.models.values()
    }

    pub fn record(&self, name: &str) -> Result<&ModelRecord> {
        self.models.get(name).ok_or_else(|| Error::NotFound(format!("Request for unknown model: '{name}' is not found")))
    }

    /// The version a request should go to: the one named, or the newest ready one when `version` is empty.
    pub fn version(&self, name: &str, version: &str) -> Result<Arc<ModelVersion>> {
        let record = self.record(name)?;
        if version.is_empty() {
            return record.ready_versions().next_back().cloned().ok_or_else(|| {
                let why = record.failures().join("; ");
                Error::NotReady(format!("Request for unknown model: '{name}' has no available versions: {why}"))
            });
        }
        let unknown =
            || Error::NotFound(format!("Request for unknown model: '{name}' version {version} is not found"));
        let number: i64 = version.parse().map_err(|_| unknown())?;
        match record.versions.get(&number) {
            Some(VersionState::Ready(model)) => Ok(model.clone()),
            Some(VersionState::Unavailable(reason)) => {
                Err(Error::NotReady(format!("model '{name}' version {version} is not ready: {reason}")))
            }
            None => Err(unknown()),
        }
    }

    /// Finishes in-flight requests and finalises every instance of every model.
    pub async fn shutdown(&self) {
        for model in self.models.values() {
            for version in model.ready_versions() {
                version.shutdown().await;
            }
        }
    }

    /// Whether every model loaded completely (used by strict readiness and exit-on-error).
    pub fn all_ready(&self) -> bool {
        self.models.values().all(|m| m.failures().is_empty())
    }
}

/// The model directories of one repository, by name.
fn model_directories(repository: &Path) -> std::result::Result<Vec<(String, PathBuf)>, String> {
    let entries = std::fs::read_dir(repository)
        .map_err(|e| format!("cannot read model repository {}: {e}", repository.display()))?;
    let mut dirs: Vec<_> = entries
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|entry| Some((entry.file_name().to_str()?.to_string(), entry.path())))
        .filter(|(name, _)| !name.starts_with('.'))
        .collect();
    dirs.sort();
    Ok(dirs)
}

fn load_model(
    runtime: &tokio::runtime::Handle,
    runtimes: &Runtimes,
    metrics: &Metrics,
    repository: &Path,
    name: &str,
    path: &Path,
) -> ModelRecord {
    let newest = versions::newest(path).map(|v| path.join(v.to_string()));
    let complete = |config: &mut model_config::ModelConfig| runtimes.auto_complete(config, newest.as_deref());
    let complete: Option<&dyn Fn(&mut model_config::ModelConfig) -> Result<(), String>> =
        runtimes.complete_configs.then_some(&complete);
    let config = match model_config::load(path, name, complete) {
        Ok(config) => Arc::new(config),
        Err(reason) => return ModelRecord::failed(name, path, reason),
    };
    let selected = match versions::select(path, config.version_policy.as_ref()) {
        Ok(selected) => selected,
        Err(reason) => return ModelRecord::failed(name, path, reason),
    };
    let versions = selected
        .into_iter()
        .map(|version| {
            let state = match ModelVersion::load(runtime, runtimes, metrics, repository, config.clone(), version) {
                Ok(model) => {
                    tracing::info!(model = name, version, "loaded, READY");
                    VersionState::Ready(Arc::new(model))
                }
                Err(reason) => VersionState::Unavailable(reason),
            };
            (version, state)
        })
        .collect();
    ModelRecord { name: name.to_string(), path: path.to_path_buf(), config: Some(config), versions, reason: None }
}
