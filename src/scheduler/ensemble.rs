//! Triton's ensemble scheduler: a model whose "execution" is a graph of steps over other models. Each step
//! maps some of the ensemble's tensors to a composing model's inputs and that model's outputs back to new
//! ensemble tensors. A step starts as soon as every tensor it reads exists, so independent steps run at
//! the same time; steps whose tensors no requested output depends on do not run at all.
//!
//! Each step is an ordinary request to its model, through that model's own checks and scheduler (dynamic
//! batching merges it with clients' requests), on the version the step names or the newest ready one. The
//! step is resolved when it runs, so a composing model reloaded meanwhile serves it from its new version,
//! and no ensemble request fails for the reload. Tensors move between steps as the same `Bytes`: nothing is
//! re-encoded or copied on the way. A step that fails fails the request with its model's message.

use std::collections::{BTreeSet, HashMap};

use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::backends::Peers;
use crate::error::{Error, Result};
use crate::inference::InferenceRequest;
use crate::model_config::{ensemble, ModelConfig};
use crate::tensor::Tensor;

/// One step: a composing model and how its inputs and outputs map to ensemble tensors.
struct Step {
    model: String,
    /// Empty: the newest ready version (Triton's `model_version: -1`).
    version: String,
    /// (model input, ensemble tensor)
    inputs: Vec<(String, String)>,
    /// (model output, ensemble tensor)
    outputs: Vec<(String, String)>,
}

pub struct Ensemble {
    name: String,
    steps: Vec<Step>,
    /// The tensors some step reads: a step's output in here is always asked for.
    read_by_steps: BTreeSet<String>,
    peers: Peers,
}

impl Ensemble {
    /// The ensemble of a validated ensemble config; `peers` reach the composing models.
    pub fn from_config(config: &ModelConfig, peers: Peers) -> Self {
        let steps: Vec<Step> = ensemble::scheduling(config)
            .map(|ensembling| {
                ensembling
                    .step
                    .iter()
                    .map(|step| Step {
                        model: step.model_name.clone(),
                        version: if step.model_version < 0 { String::new() } else { step.model_version.to_string() },
                        inputs: step.input_map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                        outputs: step.output_map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let read_by_steps = steps.iter().flat_map(|s| s.inputs.iter().map(|(_, t)| t.clone())).collect();
        Ensemble { name: config.name.clone(), steps, read_by_steps, peers }
    }

    /// Runs the steps that `wanted` (ensemble output names) depend on, and returns those outputs.
    pub async fn run(&self, request: InferenceRequest, wanted: &[String]) -> Result<Vec<Tensor>> {
        let caller = self.peers.get().and_then(std::sync::Weak::upgrade).ok_or_else(|| {
            Error::Unavailable(format!("ensemble '{}': the server is not taking requests between models", self.name))
        })?;
        let needed = self.needed_steps(wanted);
        let mut tensors: HashMap<String, Tensor> = HashMap::new();
        for input in &request.inputs {
            tensors.insert(input.name.clone(), input.clone());
        }
        let mut waiting: Vec<usize> = needed.into_iter().collect();
        let mut running = FuturesUnordered::new();
        loop {
            let (ready, blocked): (Vec<usize>, Vec<usize>) = waiting
                .into_iter()
                .partition(|&s| self.steps[s].inputs.iter().all(|(_, t)| self.available(t, &tensors)));
            waiting = blocked;
            for index in ready {
                let step_request = self.step_request(index, &request, &tensors, wanted);
                let caller = caller.clone();
                running.push(async move { (index, caller.infer(step_request).await) });
            }
            let Some((index, answer)) = running.next().await else { break };
            let step = &self.steps[index];
            let response = answer.map_err(|e| self.step_failed(step, e))?;
            for output in response.outputs {
                if let Some((_, tensor)) = step.outputs.iter().find(|(name, _)| *name == output.name) {
                    tensors.insert(tensor.clone(), Tensor { name: tensor.clone(), ..output });
                }
            }
        }
        wanted.iter().map(|name| tensors.remove(name).ok_or_else(|| self.never_produced(name, &tensors))).collect()
    }

    /// The steps whose results `wanted` depends on, directly or through other steps.
    fn needed_steps(&self, wanted: &[String]) -> BTreeSet<usize> {
        let mut tensors: BTreeSet<&str> = wanted.iter().map(String::as_str).collect();
        let mut needed = BTreeSet::new();
        loop {
            let before = needed.len();
            for (index, step) in self.steps.iter().enumerate() {
                if !needed.contains(&index) && step.outputs.iter().any(|(_, t)| tensors.contains(t.as_str())) {
                    needed.insert(index);
                    tensors.extend(step.inputs.iter().map(|(_, t)| t.as_str()));
                }
            }
            if needed.len() == before {
                return needed;
            }
        }
    }

    /// Whether `tensor` can be read: it exists, or it is an ensemble input the request left out (an optional
    /// input, which the step then leaves out too).
    fn available(&self, tensor: &str, tensors: &HashMap<String, Tensor>) -> bool {
        tensors.contains_key(tensor) || !self.steps.iter().any(|s| s.outputs.iter().any(|(_, t)| t == tensor))
    }

    /// Step `index`'s request: the ensemble tensors it reads under its model's input names, asking for the
    /// outputs that something needs, with the ensemble request's id and parameters.
    fn step_request(
        &self,
        index: usize,
        request: &InferenceRequest,
        tensors: &HashMap<String, Tensor>,
        wanted: &[String],
    ) -> InferenceRequest {
        let step = &self.steps[index];
        let inputs = step
            .inputs
            .iter()
            .filter_map(|(input, tensor)| tensors.get(tensor).map(|t| Tensor { name: input.clone(), ..t.clone() }))
            .collect();
        let requested_outputs = step
            .outputs
            .iter()
            .filter(|(_, tensor)| self.read_by_steps.contains(tensor) || wanted.contains(tensor))
            .map(|(output, _)| output.clone())
            .collect();
        InferenceRequest {
            model: step.model.clone(),
            version: step.version.clone(),
            id: request.id.clone(),
            inputs,
            requested_outputs,
            class_counts: Vec::new(),
            parameters: request.parameters.clone(),
            responder: None,
        }
    }

    /// A step's error under the ensemble's name and the step's, of the same kind, except that a composing
    /// model not found makes the ensemble not ready rather than itself not found.
    fn step_failed(&self, step: &Step, error: Error) -> Error {
        let error = match error {
            Error::NotFound(message) => Error::NotReady(message),
            other => other,
        };
        error.context(&format!("in ensemble '{}', step '{}' failed", self.name, step.model))
    }

    /// The error for an output no step produced, naming the step that should have and what it lacked
    /// (where Triton answers an opaque "unexpected deadlock").
    fn never_produced(&self, output: &str, tensors: &HashMap<String, Tensor>) -> Error {
        let producer = self.steps.iter().find(|s| s.outputs.iter().any(|(_, t)| t == output));
        let reason = match producer {
            Some(step) => {
                let missing: Vec<&str> =
                    step.inputs.iter().filter(|(_, t)| !tensors.contains_key(t)).map(|(_, t)| t.as_str()).collect();
                format!("step '{}' that produces it did not run: it had no {}", step.model, missing.join(", "))
            }
            None => "no step produces it".to_string(),
        };
        Error::internal(format!("ensemble '{}' did not produce output '{output}': {reason}", self.name))
    }
}
