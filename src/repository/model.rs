//! A model version that loaded: its configuration (as parsed, and as JSON for `/config`), its signature,
//! and the instance pool that runs it. Inference goes through here so that every request is checked
//! against the signature before it is queued and every answer after it is executed.
//!
//! A version also counts the requests that hold it (`Lease`), so that a reload or unload can retire it
//! without failing any of them: retiring waits until the last lease is gone, then finalises the instances.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::backends::{LoadContext, Runtimes};
use crate::error::Result;
use crate::inference::{InferenceRequest, InferenceResponse, Signature};
use crate::model_config::{self, ModelConfig};
use crate::observability::metrics::Metrics;
use crate::observability::stats::Stats;
use crate::proto::inference::ModelStatistics;
use crate::scheduler::batcher::{self, Batcher};
use crate::scheduler::InstancePool;
use crate::tensor::Tensor;

pub struct ModelVersion {
    pub name: String,
    pub version: i64,
    pub config: Arc<ModelConfig>,
    pub config_json: Arc<serde_json::Value>,
    pub signature: Signature,
    pool: Arc<InstancePool>,
    /// Present when the config enables dynamic batching.
    batcher: Option<Batcher>,
    stats: Arc<Stats>,
    /// The content hash of the version directory it was loaded from, when known (see `loader`).
    pub(super) files: Option<[u8; 32]>,
    /// Requests holding a lease on this version.
    users: AtomicUsize,
    /// Signalled when `users` drops to zero.
    idle: Notify,
}

impl ModelVersion {
    /// Loads the backend and creates every instance the config's instance groups ask for. Blocks: call it
    /// from a blocking thread; instances are initialised on `runtime`.
    pub fn load(
        runtime: &tokio::runtime::Handle,
        runtimes: &Runtimes,
        metrics: &Metrics,
        model_dir: &std::path::Path,
        config: Arc<ModelConfig>,
        version: i64,
    ) -> std::result::Result<Self, String> {
        let name = config.name.clone();
        let version_dir = model_dir.join(version.to_string());
        let signature = Signature::from_config(&config)?;
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
        let pool = Arc::new(InstancePool::new(&format!("{name}:{version}"), instances));
        let stats = Arc::new(Stats::new(metrics.for_model(&name, version)));
        let batcher = batcher::Policy::from_config(&config)
            .map(|policy| Batcher::start(runtime, policy, pool.clone(), stats.clone()));
        Ok(ModelVersion {
            name,
            version,
            config,
            config_json: Arc::new(config_json),
            signature,
            pool,
            batcher,
            stats,
            files: None,
            users: AtomicUsize::new(0),
            idle: Notify::new(),
        })
    }

    pub async fn infer(&self, request: InferenceRequest) -> Result<InferenceResponse> {
        let arrived = Instant::now();
        self.stats.started();
        let (result, queue) = self.run(request).await;
        self.stats.finished(result.is_ok(), arrived.elapsed(), queue);
        result
    }

    /// Checks, queues and executes one request; also returns its time in the queue.
    async fn run(&self, request: InferenceRequest) -> (Result<InferenceResponse>, Duration) {
        if let Err(e) = self.signature.check_request(&request) {
            return (Err(e), Default::default());
        }
        let wishes = match request.scheduling_wishes() {
            Ok(wishes) => wishes,
            Err(e) => return (Err(e), Default::default()),
        };
        let id = request.id.clone();
        let requested = request.requested_outputs.clone();
        let batch_size = self.batch_size(&request);
        let (result, queue) = match &self.batcher {
            Some(batcher) => {
                let answer = batcher.submit(request, batch_size, wishes).await;
                (answer.result.and_then(|produced| self.signature.select_outputs(&requested, produced)), answer.queue)
            }
            None => self.execute_alone(request, &requested, batch_size).await,
        };
        let response =
            result.map(|outputs| InferenceResponse { model: self.name.clone(), version: self.version, id, outputs });
        (response, queue)
    }

    /// Runs one request on its own (no dynamic batching) and selects its outputs, recording the execution
    /// with the selection as its output stage.
    async fn execute_alone(
        &self,
        request: InferenceRequest,
        requested: &[String],
        batch_size: u64,
    ) -> (Result<Vec<Tensor>>, Duration) {
        let execution = self.pool.execute(request).await;
        let output_started = Instant::now();
        let result = execution.result.and_then(|produced| self.signature.select_outputs(requested, produced));
        if let Some(mut timing) = execution.timing {
            timing.compute_output = output_started.elapsed();
            self.stats.executed(batch_size, &timing);
        }
        (result, execution.queue)
    }

    /// How many inferences a request carries: its batch dimension when the model batches, else one.
    fn batch_size(&self, request: &InferenceRequest) -> u64 {
        match (self.signature.max_batch_size > 0, request.inputs.first()) {
            (true, Some(input)) => input.shape.first().copied().unwrap_or(1).max(1) as u64,
            _ => 1,
        }
    }

    pub fn statistics(&self) -> ModelStatistics {
        self.stats.snapshot(&self.name, self.version)
    }

    /// Finishes in-flight requests and finalises every instance.
    pub async fn shutdown(&self) {
        self.pool.shutdown().await;
    }

    /// Waits until no request holds a lease on this version any more, then shuts it down. The caller must
    /// have made the version unreachable first, so that no new lease can be taken.
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
        self.shutdown().await;
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
