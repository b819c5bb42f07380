//! Triton's `identity` backend (`backend: "identity"`): each output `OUTPUT<i>` is input `INPUT<i>`, same
//! type, shape and bytes. Triton's own test repositories are full of such models (the client memory-growth,
//! timeout and valgrind tests, among others), so serving the backend natively lets those repositories load
//! unchanged. The bytes are handed on, never copied.
//!
//! The config is checked as Triton's backend checks it, with its messages: as many outputs as inputs, names
//! that follow `INPUT<i>` / `OUTPUT<i>`, and each output the same data type and (reshaped) shape as its input.
//! Its test parameters apply: `execute_delay_ms` holds every execution that long (the instance stays busy,
//! as Triton's blocking backend keeps it), `creation_delay_sec` holds the load.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;

use super::{Backend, Instance, LoadContext};
use crate::error::{Error, LoadResult, Result};
use crate::inference::InferenceRequest;
use crate::model_config::{self, ModelConfig};
use crate::tensor::Tensor;

/// A loaded identity model: which input each output echoes, and how long an execution waits.
#[derive(Clone)]
pub struct IdentityModel {
    /// (output name, input name), in the config's output order.
    pairs: Vec<(String, String)>,
    execute_delay: Duration,
}

/// Checks the config and waits out `creation_delay_sec`; blocks, as loads run on a blocking thread.
pub fn load(ctx: &LoadContext<'_>) -> LoadResult<IdentityModel> {
    let pairs = pairs(ctx.config)?;
    let execute_delay = model_config::parameter::<u64>(ctx.config, "execute_delay_ms", "a whole number")?;
    if let Some(seconds) = model_config::parameter::<u64>(ctx.config, "creation_delay_sec", "a whole number")? {
        tracing::info!(model = ctx.model, seconds, "creation delay");
        std::thread::sleep(Duration::from_secs(seconds));
    }
    Ok(IdentityModel { pairs, execute_delay: Duration::from_millis(execute_delay.unwrap_or(0)) })
}

/// Pairs each output with its input by the index in their names, refusing what Triton's backend refuses.
fn pairs(config: &ModelConfig) -> LoadResult<Vec<(String, String)>> {
    if config.input.len() != config.output.len() {
        return Err("model configuration must have equal input/output pairs".into());
    }
    let mut inputs = HashMap::new();
    for input in &config.input {
        let index = input
            .name
            .strip_prefix("INPUT")
            .ok_or_else(|| format!("expected input name to follow INPUT<index> pattern, got '{}'", input.name))?;
        let shape = input.reshape.as_ref().map_or(&input.dims, |r| &r.shape);
        inputs.insert(index, (input, shape));
    }
    let mut pairs = Vec::with_capacity(config.output.len());
    for output in &config.output {
        let index = output
            .name
            .strip_prefix("OUTPUT")
            .ok_or_else(|| format!("expected output name to follow OUTPUT<index> pattern, got '{}'", output.name))?;
        let (input, input_shape) = inputs.get(index).ok_or("expected input and output indices to match")?;
        if input.data_type != output.data_type {
            return Err(format!(
                "expected input and output datatype to match, got {} and {}",
                input.data_type().as_str_name(),
                output.data_type().as_str_name()
            )
            .into());
        }
        let output_shape = output.reshape.as_ref().map_or(&output.dims, |r| &r.shape);
        if *input_shape != output_shape {
            return Err(format!(
                "expected input and output shape to match, got {} and {}",
                model_config::dims_text(input_shape),
                model_config::dims_text(output_shape)
            )
            .into());
        }
        pairs.push((output.name.clone(), input.name.clone()));
    }
    Ok(pairs)
}

#[async_trait]
impl Backend for IdentityModel {
    async fn create_instance(&self, _instance_name: &str) -> LoadResult<Box<dyn Instance>> {
        Ok(Box::new(self.clone()))
    }
}

#[async_trait]
impl Instance for IdentityModel {
    async fn execute(&mut self, requests: Vec<InferenceRequest>) -> Vec<Result<Vec<Tensor>>> {
        if !self.execute_delay.is_zero() {
            tokio::time::sleep(self.execute_delay).await;
        }
        requests.iter().map(|request| self.echo(request)).collect()
    }
}

impl IdentityModel {
    /// The outputs of one request: each output is its input under the output's name. An optional input left
    /// out fails the request if its output is wanted (asked for, or nothing asked for: every output).
    fn echo(&self, request: &InferenceRequest) -> Result<Vec<Tensor>> {
        let mut outputs = Vec::with_capacity(self.pairs.len());
        for (output, input) in &self.pairs {
            match request.inputs.iter().find(|tensor| tensor.name == *input) {
                Some(tensor) => outputs.push(Tensor { name: output.clone(), ..tensor.clone() }),
                None if request.requested_outputs.is_empty() || request.requested_outputs.contains(output) => {
                    return Err(Error::invalid(format!("failed to get input '{input}'")))
                }
                None => {}
            }
        }
        Ok(outputs)
    }
}
