//! What the repository knows about one model at one moment: where it came from, its configuration, the
//! state of each of its versions and why any of them is not serving. A record never changes once built; a
//! load, reload or unload builds a new one and swaps it in, so a reader always sees one consistent state.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::fingerprint::Fingerprint;
use super::overrides::ScratchDir;
use super::ModelVersion;
use crate::model_config::ModelConfig;

/// The reason an unloaded model or version gives in the repository index, as in Triton.
pub const UNLOADED: &str = "unloaded";

/// The state of one version of a model, named as in Triton's repository index.
#[derive(Clone)]
pub enum VersionState {
    Ready(Arc<ModelVersion>),
    Loading,
    /// Taking no new requests; finishing the ones in flight.
    Unloading,
    Unavailable(String),
}

impl VersionState {
    pub fn name(&self) -> &'static str {
        match self {
            VersionState::Ready(_) => "READY",
            VersionState::Loading => "LOADING",
            VersionState::Unloading => "UNLOADING",
            VersionState::Unavailable(_) => "UNAVAILABLE",
        }
    }
}

#[derive(Clone)]
pub struct ModelRecord {
    pub name: String,
    /// The model directory it was loaded from (for files given with a load request: a private copy).
    pub path: PathBuf,
    pub config: Option<Arc<ModelConfig>>,
    pub versions: BTreeMap<i64, VersionState>,
    /// Why the model as a whole failed (config or version directories), or why its last reload failed
    /// while the versions loaded before keep serving.
    pub reason: Option<String>,
    /// The repository content last loaded (or tried), so that poll mode reloads only what changed.
    pub fingerprint: Option<Fingerprint>,
    /// The private directory of files given with a load request; removed when no record uses it.
    pub scratch: Option<Arc<ScratchDir>>,
}

impl ModelRecord {
    pub fn failed(name: &str, path: &Path, reason: String) -> Self {
        ModelRecord {
            name: name.to_string(),
            path: path.to_path_buf(),
            config: None,
            versions: BTreeMap::new(),
            reason: Some(reason),
            fingerprint: None,
            scratch: None,
        }
    }

    /// A model serving `versions`, all loaded from `config`.
    pub fn serving(
        path: &Path,
        config: Arc<ModelConfig>,
        versions: impl IntoIterator<Item = Arc<ModelVersion>>,
    ) -> Self {
        ModelRecord {
            name: config.name.clone(),
            path: path.to_path_buf(),
            versions: versions.into_iter().map(|v| (v.version, VersionState::Ready(v))).collect(),
            config: Some(config),
            reason: None,
            fingerprint: None,
            scratch: None,
        }
    }

    /// A model whose first load is under way.
    pub fn loading(name: &str, path: &Path) -> Self {
        ModelRecord { reason: None, ..ModelRecord::failed(name, path, String::new()) }
    }

    /// The versions that are ready, oldest first.
    pub fn ready_versions(&self) -> impl DoubleEndedIterator<Item = &Arc<ModelVersion>> {
        self.versions.values().filter_map(|v| match v {
            VersionState::Ready(model) => Some(model),
            _ => None,
        })
    }

    /// Every reason this model, or one of its versions, is not fully serving. Being unloaded on request is
    /// not one (as in Triton, it does not make a strictly ready server unready).
    pub fn failures(&self) -> Vec<String> {
        let versions = self.versions.iter().filter_map(|(v, state)| match state {
            VersionState::Unavailable(reason) if reason == UNLOADED => None,
            VersionState::Unavailable(reason) => Some(format!("version {v}: {reason}")),
            VersionState::Loading => Some(format!("version {v}: loading")),
            VersionState::Unloading => Some(format!("version {v}: unloading")),
            VersionState::Ready(_) => None,
        });
        self.reason.iter().filter(|r| *r != UNLOADED).cloned().chain(versions).collect()
    }

    /// Why the model has no version to serve, for a client's error: its failures, or that it was unloaded
    /// or is still loading.
    pub fn why_not_serving(&self) -> String {
        let failures = self.failures();
        if !failures.is_empty() {
            return failures.join("; ");
        }
        let unloaded = self.reason.as_deref() == Some(UNLOADED)
            || self.versions.values().any(|v| matches!(v, VersionState::Unavailable(r) if r == UNLOADED));
        if unloaded { UNLOADED } else { "loading" }.to_string()
    }

    /// The same record with every version that was ready put in `state` (unloading, then unloaded).
    pub fn with_ready_versions(&self, state: VersionState) -> Self {
        let versions = self
            .versions
            .iter()
            .map(|(&v, s)| (v, if matches!(s, VersionState::Ready(_)) { state.clone() } else { s.clone() }))
            .collect();
        ModelRecord { versions, ..self.clone() }
    }
}
