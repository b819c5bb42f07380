//! A model version that loaded: its configuration (as parsed, and as JSON for `/config`), its signature,
//! and the instance pool that runs it. Inference goes through here so that every request is checked
//! against the signature before it is queued and every answer after it is executed.

use std::sync::Arc;

use crate::backends::{LoadContext, Runtimes};
use crate::error::Result;
use crate::inference::{InferenceRequest, InferenceResponse, Signature};
use crate::model_config::{self, ModelConfig};
use crate::scheduler::InstancePool;

pub struct ModelVersion {
    pub name: String,
    pub version: i64,
    pub config: Arc<ModelConfig>,
    pub config_json: Arc<serde_json::Value>,
    pub signature: Signature,
    pool: InstancePool,
}

impl ModelVersion {
    /// Loads the backend and creates every instance the config's instance groups ask for. Blocks: call it
    /// from a blocking thread; instances are initialised on `runtime`.
    pub fn load(
        runtime: &tokio::runtime::Handle,
        runtimes: &Runtimes,
        repository: &std::path::Path,
        config: Arc<ModelConfig>,
        version: i64,
    ) -> std::result::Result<Self, String> {
        let name = config.name.clone();
        let version_dir = repository.join(&name).join(version.to_string());
        let signature = Signature::from_config(&config)?;
        let config_json = model_config::to_json(&config);
        let ctx = LoadContext {
            model: &name,
            version,
            version_dir: &version_dir,
            repository: &repository.join(&name),
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
        let pool = InstancePool::new(&format!("{name}:{version}"), instances);
        Ok(ModelVersion { name, version, config, config_json: Arc::new(config_json), signature, pool })
    }

    pub async fn infer(&self, request: InferenceRequest) -> Result<InferenceResponse> {
        self.signature.check_request(&request)?;
        let id = request.id.clone();
        let requested = request.requested_outputs.clone();
        let produced = self.pool.execute(request).await?;
        let outputs = self.signature.select_outputs(&requested, produced)?;
        Ok(InferenceResponse { model: self.name.clone(), version: self.version, id, outputs })
    }

    /// Finishes in-flight requests and finalises every instance.
    pub async fn shutdown(&self) {
        self.pool.shutdown().await;
    }
}
