//! A model version that loaded: its configuration (as parsed, and as JSON for `/config`), its signature,
//! and the scheduler that runs its requests over its instances.
//!
//! A version also counts the requests that hold it (`Lease`), so that a reload or unload can retire it
//! without failing any of them: retiring waits until the last lease is gone, then finalises the instances.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use crate::backends::{Instance, LoadContext, Runtimes};
use crate::error::LoadResult;
use crate::inference::{Labels, Signature};
use crate::model_config::{self, ensemble, ModelConfig};
use crate::observability::metrics::Metrics;
use crate::observability::stats::Stats;
use crate::proto::inference::ModelStatistics;
use crate::scheduler::cache::ResponseCache;
use crate::scheduler::Scheduler;

pub struct ModelVersion {
    pub name: String,
    pub version: i64,
    pub config: Arc<ModelConfig>,
    pub config_json: Arc<serde_json::Value>,
    pub signature: Signature,
    scheduler: Scheduler,
    /// The content hash of the version directory it was loaded from, when known (see `loader`).
    pub(super) files: Option<[u8; 32]>,
    /// Requests holding a lease on this version.
    users: AtomicUsize,
    /// Signalled when `users` drops to zero.
    idle: Notify,
}

impl ModelVersion {
    /// Loads the backend and creates every instance the config's instance groups ask for. Blocks: call it
    /// from a blocking thread; instances are initialised on `runtime`. `cache` is the server's response
    /// cache, used if the config enables it.
    pub fn load(
        runtime: &tokio::runtime::Handle,
        runtimes: &Runtimes,
        metrics: &Metrics,
        cache: Option<&Arc<ResponseCache>>,
        model_dir: &std::path::Path,
        config: Arc<ModelConfig>,
        version: i64,
    ) -> LoadResult<Self> {
        let mut loaded = Self::load_uncached(runtime, runtimes, metrics, model_dir, config, version)?;
        if loaded.config.response_cache.as_ref().is_some_and(|c| c.enable) {
            match cache {
                Some(cache) => loaded.scheduler = loaded.scheduler.with_cache(cache.clone()),
                None => tracing::warn!(
                    model = %loaded.name,
                    "the config enables the response cache, but the server has none (--cache-config local,size=N): \
                     every request runs"
                ),
            }
        }
        Ok(loaded)
    }

    fn load_uncached(
        runtime: &tokio::runtime::Handle,
        runtimes: &Runtimes,
        metrics: &Metrics,
        model_dir: &std::path::Path,
        config: Arc<ModelConfig>,
        version: i64,
    ) -> LoadResult<Self> {
        let labels = Labels::read(&config, model_dir)?;
        if ensemble::is_ensemble(&config) {
            let signature = Signature::from_config(&config)?.with_labels(labels);
            let stats = Arc::new(Stats::new(metrics.for_model(&config.name, version)));
            let scheduler = Scheduler::ensemble(&config, version, signature.clone(), runtimes.peers.clone(), stats);
            return Ok(Self::assemble(config, version, signature, scheduler));
        }
        let name = config.name.clone();
        let version_dir = model_dir.join(version.to_string());
        let config_json = model_config::to_json(&config);
        let ctx = LoadContext {
            model: &name,
            version,
            version_dir: &version_dir,
            repository: model_dir,
            config: &config,
            config_json: &config_json.to_string(),
        };
        let backend = runtimes.load(&ctx)?;
        let mut instances = Vec::new();
        for group in &config.instance_group {
            for index in 0..group.count {
                let instance_name = format!("{}_{index}", group.name);
                let instance = runtime
                    .block_on(backend.create_instance(&instance_name))
                    .map_err(|e| format!("instance {instance_name}: {e}"))?;
                instances.push(instance);
            }
        }
        Self::serving(runtime, metrics, config, (version, Some(model_dir)), instances, labels)
    }

    /// A version of the (normalised) `config` served by `instances`, however they were made: by a backend
    /// at load, or directly by code that embeds the server (the in-process tests do).
    pub fn with_instances(
        runtime: &tokio::runtime::Handle,
        metrics: &Metrics,
        config: Arc<ModelConfig>,
        version: i64,
        instances: Vec<Box<dyn Instance>>,
    ) -> LoadResult<Self> {
        Self::serving(runtime, metrics, config, (version, None), instances, Labels::default())
    }

    /// A version served by `instances`, answering classification requests with `labels`.
    /// `model_dir` is the model's directory when it was loaded from one.
    fn serving(
        runtime: &tokio::runtime::Handle,
        metrics: &Metrics,
        config: Arc<ModelConfig>,
        (version, model_dir): (i64, Option<&std::path::Path>),
        instances: Vec<Box<dyn Instance>>,
        labels: Labels,
    ) -> LoadResult<Self> {
        let signature = Signature::from_config(&config)?.with_labels(labels);
        let stats = Arc::new(Stats::new(metrics.for_model(&config.name, version)));
        let scheduler = Scheduler::new(runtime, &config, (version, model_dir), signature.clone(), instances, stats)?;
        Ok(Self::assemble(config, version, signature, scheduler))
    }

    fn assemble(config: Arc<ModelConfig>, version: i64, signature: Signature, scheduler: Scheduler) -> Self {
        ModelVersion {
            name: config.name.clone(),
            version,
            config_json: Arc::new(model_config::to_json(&config)),
            config,
            signature,
            scheduler,
            files: None,
            users: AtomicUsize::new(0),
            idle: Notify::new(),
        }
    }

    /// The version's scheduler, which runs its requests.
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    pub fn statistics(&self) -> ModelStatistics {
        self.scheduler.statistics()
    }

    /// Waits until no request holds a lease on this version any more, then finishes its in-flight requests
    /// and finalises its instances. The caller must have made the version unreachable first, so that no
    /// new lease can be taken.
    pub async fn retire(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.users.load(Ordering::Acquire) == 0 {
                break;
            }
            idle.await;
        }
        self.scheduler.shutdown().await;
    }
}

/// A request's hold on a model version: while any lease exists, the version is not retired.
pub struct Lease(Arc<ModelVersion>);

impl Lease {
    pub fn new(version: &Arc<ModelVersion>) -> Self {
        version.users.fetch_add(1, Ordering::AcqRel);
        Lease(version.clone())
    }
}

impl Clone for Lease {
    fn clone(&self) -> Self {
        Lease::new(&self.0)
    }
}

impl AsRef<Scheduler> for Lease {
    fn as_ref(&self) -> &Scheduler {
        self.0.scheduler()
    }
}

impl std::ops::Deref for Lease {
    type Target = ModelVersion;

    fn deref(&self) -> &ModelVersion {
        &self.0
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.0.users.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
