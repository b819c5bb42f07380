//! A plugin whose execution time is chosen by the caller, for the scheduling tests (queue timeouts,
//! priorities, preserve_ordering). Input `MS` (INT32, one value per batch row) asks for a pause in
//! milliseconds; one `execute` call pauses for the largest value in its batch, then echoes `MS` back as
//! `OUT`. The pause goes through WASI's monotonic clock, so the host's thread is free while it lasts.
//!
//! It also completes its own configuration: a config that declares no inputs or outputs gets `MS` and `OUT`
//! (INT32, one value per row), as a Triton python model's `auto_complete_config` would. With the config
//! parameter `initialize_ms` it takes that long to initialise, to test loads that take time.

use std::time::Duration;

use tessera_plugin::{Args, Model, Request, Response};

struct Sleep;

impl Model for Sleep {
    fn auto_complete_config(config_json: String) -> Result<String, String> {
        let mut config: serde_json::Value = serde_json::from_str(&config_json).map_err(|e| e.to_string())?;
        let tensor = |name: &str| serde_json::json!([{ "name": name, "data_type": "TYPE_INT32", "dims": [1] }]);
        for (field, name) in [("input", "MS"), ("output", "OUT")] {
            if config[field].as_array().is_none_or(|declared| declared.is_empty()) {
                config[field] = tensor(name);
            }
        }
        Ok(config.to_string())
    }

    /// Pauses for the config parameter `initialize_ms`, if set: a slow-loading model for the tests.
    fn initialize(args: &Args) -> Result<Self, String> {
        let config: serde_json::Value = serde_json::from_str(args.config_json()).map_err(|e| e.to_string())?;
        let pause = config["parameters"]["initialize_ms"]["string_value"].as_str().and_then(|v| v.parse().ok());
        std::thread::sleep(Duration::from_millis(pause.unwrap_or(0)));
        Ok(Sleep)
    }

    fn execute(&mut self, mut request: Request) -> Result<Response, String> {
        let input = request.take_input("MS")?;
        let longest = input.values::<i32>()?.into_iter().max().unwrap_or(0);
        std::thread::sleep(Duration::from_millis(longest.clamp(0, 60_000) as u64));
        Ok(Response::new(vec![input.renamed("OUT")]))
    }
}

tessera_plugin::export!(Sleep);
