//! What a plugin implements, and the facts it is initialised with.

use crate::{Request, Response};

/// A model plugin. One value lives in each instance (`instance_group` count), created by `initialize`
/// and dropped after `finalize`; instances share nothing.
pub trait Model: Sized + 'static {
    /// Completes the model configuration (Triton-style JSON) before any instance is initialised, as
    /// `TritonPythonModel.auto_complete_config` does. The default leaves it unchanged.
    fn auto_complete_config(config_json: String) -> Result<String, String> {
        Ok(config_json)
    }

    /// Builds one instance. An error fails the model's load with that message.
    fn initialize(args: &Args) -> Result<Self, String>;

    /// Answers one request. An error fails only that request, with that message.
    fn execute(&mut self, request: Request) -> Result<Response, String>;

    /// Answers a batch of requests, one result each, in order. Override it to work on the batch as a whole.
    fn execute_batch(&mut self, requests: Vec<Request>) -> Vec<Result<Response, String>> {
        requests.into_iter().map(|request| self.execute(request)).collect()
    }

    /// Called once before the instance is dropped (model unload or server shutdown).
    fn finalize(&mut self) {}
}

/// What `initialize` is told, by the names Triton's python backend uses: `model_name`, `model_version`,
/// `model_instance_name`, `model_instance_kind`, `model_instance_device_id`, `model_repository` and
/// `model_config` (JSON).
#[derive(Debug, Clone)]
pub struct Args {
    pairs: Vec<(String, String)>,
}

impl Args {
    pub fn new(pairs: Vec<(String, String)>) -> Self {
        Args { pairs }
    }

    /// The value of `key`, if the host passed it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    pub fn model_name(&self) -> &str {
        self.get("model_name").unwrap_or_default()
    }

    pub fn model_version(&self) -> &str {
        self.get("model_version").unwrap_or_default()
    }

    pub fn instance_name(&self) -> &str {
        self.get("model_instance_name").unwrap_or_default()
    }

    /// The model configuration as Triton-style JSON.
    pub fn config_json(&self) -> &str {
        self.get("model_config").unwrap_or("{}")
    }
}
