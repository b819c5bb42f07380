//! Builds a model's record from its directory: reads and completes the configuration, picks the versions
//! the version policy serves, and loads each of them, logging how long each took. A model that fails
//! (bad config, missing file, unavailable backend, failing initialisation) gets a record saying why; a
//! failure never escapes as an error. On a reload, a version whose configuration and files are unchanged is
//! kept as it is (same instances, no interruption) instead of being loaded again.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::fingerprint::Fingerprint;
use super::record::{ModelRecord, VersionState};
use super::{versions, ModelVersion};
use crate::backends::Runtimes;
use crate::model_config::{self, ensemble, Completer, ConfigSource, ModelConfig};
use crate::observability::metrics::Metrics;
use crate::proto::inference::ModelTransactionPolicy;
use crate::scheduler::cache::ResponseCache;

/// Everything loading needs, shared by every load.
pub struct Loader {
    pub runtime: tokio::runtime::Handle,
    pub runtimes: Runtimes,
    pub metrics: Arc<Metrics>,
    /// `--model-config-name`.
    pub config_name: Option<String>,
    /// The server's response cache (`--cache-config`), for models that enable it.
    pub cache: Option<Arc<ResponseCache>>,
}

impl Loader {
    /// Loads the model `name` from `model_dir`. `previous` is the record it replaces, whose unchanged
    /// versions are reused. Blocks: call it from a blocking thread.
    pub fn load(
        &self,
        name: &str,
        model_dir: &Path,
        config_override: Option<&str>,
        previous: Option<&ModelRecord>,
        composing: &dyn Fn(&str, i64) -> ensemble::Composing,
    ) -> ModelRecord {
        tracing::debug!(model = name, "loading from {}", model_dir.display());
        let config_file = model_config::config_path(model_dir, self.config_name.as_deref());
        let fingerprint = Fingerprint::of(model_dir, &config_file);
        let mut record = self.load_versions(name, model_dir, config_override, previous, &fingerprint, composing);
        record.fingerprint = Some(fingerprint);
        record
    }

    /// The models the ensemble in `model_dir` uses (none for any other model, or a config that cannot be
    /// read: loading it then says why).
    pub fn dependencies(&self, name: &str, model_dir: &Path, config_override: Option<&str>) -> Vec<String> {
        match model_config::load(model_dir, name, &self.source(config_override), None) {
            Ok(config) => ensemble::scheduling(&config)
                .map(|steps| steps.step.iter().map(|step| step.model_name.clone()).collect())
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    fn source<'a>(&'a self, config_override: Option<&'a str>) -> ConfigSource<'a> {
        match config_override {
            Some(json) => ConfigSource::Json(json),
            None => ConfigSource::File { config_name: self.config_name.as_deref() },
        }
    }

    fn load_versions(
        &self,
        name: &str,
        model_dir: &Path,
        config_override: Option<&str>,
        previous: Option<&ModelRecord>,
        fingerprint: &Fingerprint,
        composing: &dyn Fn(&str, i64) -> ensemble::Composing,
    ) -> ModelRecord {
        let newest = versions::newest(model_dir).map(|v| model_dir.join(v.to_string()));
        let complete = |config: &mut ModelConfig| self.runtimes.auto_complete(config, newest.as_deref());
        let complete: Option<Completer<'_>> = self.runtimes.complete_configs.then_some(&complete);
        let mut config = match model_config::load(model_dir, name, &self.source(config_override), complete) {
            Ok(config) => Arc::new(config),
            Err(reason) => return ModelRecord::failed(name, model_dir, reason.to_string()),
        };
        // An ensemble is checked against its composing models as they are now. It keeps its config when it
        // fails, so that it is reloaded when the model it waits for arrives. One with a decoupled step is
        // decoupled itself, and its config says so, as Triton's does.
        match ensemble::validate_steps(&config, composing) {
            Ok(true) => {
                Arc::make_mut(&mut config).model_transaction_policy = Some(ModelTransactionPolicy { decoupled: true })
            }
            Ok(false) => {}
            Err(reason) => {
                return ModelRecord { config: Some(config), ..ModelRecord::failed(name, model_dir, reason.to_string()) }
            }
        }
        let selected = match versions::select(model_dir, config.version_policy.as_ref()) {
            Ok(selected) => selected,
            Err(reason) => return ModelRecord::failed(name, model_dir, reason),
        };
        let versions = selected
            .into_iter()
            .map(|version| {
                let state = match reusable(previous, &config, fingerprint, version) {
                    Some(model) => VersionState::Ready(model),
                    None => self.load_version(model_dir, &config, version, fingerprint.versions.get(&version).copied()),
                };
                (version, state)
            })
            .collect();
        ModelRecord {
            name: name.to_string(),
            path: model_dir.to_path_buf(),
            config: Some(config),
            versions,
            reason: None,
            fingerprint: None,
            scratch: None,
        }
    }

    fn load_version(
        &self,
        model_dir: &Path,
        config: &Arc<ModelConfig>,
        version: i64,
        files: Option<[u8; 32]>,
    ) -> VersionState {
        let started = Instant::now();
        let name = config.name.as_str();
        match ModelVersion::load(
            &self.runtime,
            &self.runtimes,
            &self.metrics,
            self.cache.as_ref(),
            model_dir,
            config.clone(),
            version,
        ) {
            Ok(mut model) => {
                model.files = files;
                tracing::info!(model = name, version, ms = started.elapsed().as_millis() as u64, "loaded, READY");
                VersionState::Ready(Arc::new(model))
            }
            Err(reason) => {
                tracing::warn!(
                    model = name,
                    version,
                    ms = started.elapsed().as_millis() as u64,
                    "failed to load: {reason}"
                );
                VersionState::Unavailable(reason.to_string())
            }
        }
    }
}

/// The previous record's instance of `version`, when it is ready and was loaded from the same
/// configuration and the same files.
fn reusable(
    previous: Option<&ModelRecord>,
    config: &ModelConfig,
    fingerprint: &Fingerprint,
    version: i64,
) -> Option<Arc<ModelVersion>> {
    match previous?.versions.get(&version) {
        Some(VersionState::Ready(model))
            if *model.config == *config
                && model.files.is_some()
                && model.files == fingerprint.versions.get(&version).copied() =>
        {
            Some(model.clone())
        }
        _ => None,
    }
}
