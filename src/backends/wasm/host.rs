//! `tessera:backend/host`, the imports every plugin gets: `log` into the server log, BLS (`infer`,
//! `model-ready`) to call the server's other models through their schedulers, as clients do, and
//! `version-directory`, where the instance's model files are.

use super::bindings::tessera::backend::{host, types};
use super::state::StoreState;
use super::{convert, limits};

impl types::Host for StoreState {}

impl host::Host for StoreState {
    async fn log(&mut self, level: types::LogLevel, message: String) -> wasmtime::Result<()> {
        let model = &*self.label;
        match level {
            types::LogLevel::Error => tracing::error!(target: "plugin", model, "{message}"),
            types::LogLevel::Warn => tracing::warn!(target: "plugin", model, "{message}"),
            types::LogLevel::Info => tracing::info!(target: "plugin", model, "{message}"),
            types::LogLevel::Verbose => tracing::debug!(target: "plugin", model, "{message}"),
        }
        Ok(())
    }

    /// A BLS call: the request goes through the callee's checks and scheduler like a client's, and any
    /// failure comes back to the plugin as an error it can handle.
    async fn infer(
        &mut self,
        model: String,
        version: String,
        request: types::Request,
    ) -> wasmtime::Result<Result<types::Response, String>> {
        let request = convert::request_from_wit(self, model.clone(), version, request)?;
        let Some(caller) = self.caller() else {
            return Ok(Err("the server is not accepting calls between models yet".into()));
        };
        // Bounded, or a model calling itself would wait for itself forever.
        let Some(answer) = limits::by_deadline(self.deadline, caller.infer(request)).await else {
            return Ok(Err(format!("'{model}' did not answer before this plugin's execute timeout")));
        };
        match answer {
            Ok(response) => Ok(Ok(convert::response_to_wit(self, response.outputs)?)),
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    async fn model_ready(&mut self, model: String, version: String) -> wasmtime::Result<bool> {
        Ok(self.caller().is_some_and(|caller| caller.is_ready(&model, &version)))
    }

    async fn version_directory(&mut self) -> wasmtime::Result<String> {
        Ok(self.version_directory.to_string())
    }
}
