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
//!
//! A decoupled step (one whose model is decoupled) may answer with many responses. As in Triton, each response
//! starts a lineage of its own (a `Branch`): the steps after it run once per response, on that response's
//! tensors, and each lineage that produces the requested outputs is one response of the ensemble, which is
//! then decoupled itself (its config's check refuses a step that would mix two lineages).

use std::collections::{BTreeSet, HashMap};

use futures_util::stream::{SelectAll, StreamExt};

use crate::backends::Peers;
use crate::error::{Error, Result};
use crate::inference::{InferenceRequest, Responder, Streamed};
use crate::model_config::{ensemble, ModelConfig};
use crate::observability::trace::Trace;
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

    /// Runs the steps that `wanted` (ensemble output names) depend on, and returns those outputs (an ensemble
    /// that is not decoupled).
    pub async fn run(&self, request: InferenceRequest, wanted: &[String]) -> Result<Vec<Tensor>> {
        let (branches, answer) = self.run_steps(&request, wanted, None).await?;
        answer.ok_or_else(|| {
            let missing =
                wanted.iter().find(|name| !branches[0].tensors.contains_key(*name)).map_or("", String::as_str);
            self.never_produced(missing, &branches[0].tensors)
        })
    }

    /// Runs a decoupled ensemble's request: each set of the `wanted` outputs its steps produce goes to
    /// `responder` as one response as soon as it is complete, then the final flag. A client that goes away
    /// stops it.
    pub async fn run_decoupled(
        &self,
        request: InferenceRequest,
        wanted: &[String],
        responder: &Responder,
    ) -> Result<()> {
        self.run_steps(&request, wanted, Some(responder)).await?;
        // Nothing to do if the client has gone away meanwhile.
        let _ = responder.send(Ok(None), true).await;
        Ok(())
    }

    /// Runs the steps that `wanted` depends on, in every lineage. Each lineage's wanted outputs, once they all
    /// exist, go to `responder` (a decoupled ensemble), or are returned (the first; any other ensemble has one
    /// lineage). Also returns the branches, the request's own first.
    async fn run_steps(
        &self,
        request: &InferenceRequest,
        wanted: &[String],
        responder: Option<&Responder>,
    ) -> Result<(Vec<Branch>, Option<Vec<Tensor>>)> {
        let caller = self.peers.get().and_then(std::sync::Weak::upgrade).ok_or_else(|| {
            Error::Unavailable(format!("ensemble '{}': the server is not taking requests between models", self.name))
        })?;
        let needed = self.needed_steps(wanted);
        let inputs = request.inputs.iter().map(|input| (input.name.clone(), input.clone())).collect();
        let mut branches = vec![Branch { parent: None, tensors: inputs, started: BTreeSet::new(), answered: false }];
        let mut answer = None;
        let mut running = SelectAll::new();
        loop {
            for branch in 0..branches.len() {
                for &index in &needed {
                    if !self.can_start(index, branch, &branches) {
                        continue;
                    }
                    branches[branch].started.insert(index);
                    let step_request =
                        self.step_request(index, request, |tensor| lookup(&branches, branch, tensor), wanted);
                    let answers =
                        caller.infer_stream(step_request).map_err(|e| self.step_failed(&self.steps[index], e))?;
                    let decoupled = answers.decoupled;
                    running.push(answers.messages.map(move |message| (branch, index, decoupled, message)));
                }
            }
            let Some((branch, index, decoupled, Streamed { response, .. })) = running.next().await else { break };
            let step = &self.steps[index];
            let Some(response) = response.map_err(|e| self.step_failed(step, e))? else { continue };
            // A decoupled step's response starts a lineage; any other step's outputs join its own.
            let target = match decoupled {
                true => {
                    let started = branches[branch].started.clone();
                    branches.push(Branch { parent: Some(branch), tensors: HashMap::new(), started, answered: false });
                    branches.len() - 1
                }
                false => branch,
            };
            for output in response.outputs {
                if let Some((_, tensor)) = step.outputs.iter().find(|(name, _)| *name == output.name) {
                    branches[target].tensors.insert(tensor.clone(), Tensor { name: tensor.clone(), ..output });
                }
            }
            for branch in 0..branches.len() {
                let Some(outputs) = self.complete(branch, &mut branches, wanted) else { continue };
                match responder {
                    Some(responder) => {
                        if responder.send(Ok(Some(outputs)), false).await.is_err() {
                            return Ok((branches, None));
                        }
                    }
                    None => answer = answer.or(Some(outputs)),
                }
            }
        }
        Ok((branches, answer))
    }

    /// Whether step `index` can start in `branch`: not started there, every input it reads exists there
    /// (or is an optional input left out), and one of them is the branch's own (a step on the request's own
    /// tensors runs once, in the first branch, not again in every lineage).
    fn can_start(&self, index: usize, branch: usize, branches: &[Branch]) -> bool {
        let step = &self.steps[index];
        let at = &branches[branch];
        !at.started.contains(&index)
            && step.inputs.iter().all(|(_, t)| self.available(t, lookup(branches, branch, t)))
            && (at.parent.is_none() || step.inputs.iter().any(|(_, t)| at.tensors.contains_key(t)))
    }

    /// `branch`'s wanted outputs, once they all exist and one is its own (so that each lineage answers once,
    /// and the lineages it descends from do not answer for it).
    fn complete(&self, branch: usize, branches: &mut [Branch], wanted: &[String]) -> Option<Vec<Tensor>> {
        let at = &branches[branch];
        if at.answered || (at.parent.is_some() && !wanted.iter().any(|name| at.tensors.contains_key(name))) {
            return None;
        }
        let outputs = wanted.iter().map(|name| lookup(branches, branch, name).cloned()).collect::<Option<Vec<_>>>()?;
        branches[branch].answered = true;
        Some(outputs)
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

    /// Whether `tensor` can be read: it exists (`found`), or it is an ensemble input the request left out (an
    /// optional input, which the step then leaves out too).
    fn available(&self, tensor: &str, found: Option<&Tensor>) -> bool {
        found.is_some() || !self.steps.iter().any(|s| s.outputs.iter().any(|(_, t)| t == tensor))
    }

    /// Step `index`'s request: the ensemble tensors it reads under its model's input names, asking for the
    /// outputs that something needs, with the ensemble request's id and parameters.
    fn step_request<'t>(
        &self,
        index: usize,
        request: &InferenceRequest,
        tensors: impl Fn(&str) -> Option<&'t Tensor>,
        wanted: &[String],
    ) -> InferenceRequest {
        let step = &self.steps[index];
        let inputs = step
            .inputs
            .iter()
            .filter_map(|(input, tensor)| tensors(tensor).map(|t| Tensor { name: input.clone(), ..t.clone() }))
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
            trace: request.trace.as_ref().map(Trace::child),
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

/// The tensors of one lineage of a request: the request's own inputs and what the steps on them make (the
/// first branch), or what one response of a decoupled step holds and the steps after it make.
struct Branch {
    /// The lineage this one descends from: its tensors can be read here too.
    parent: Option<usize>,
    tensors: HashMap<String, Tensor>,
    /// Steps started in this lineage (a new lineage inherits its parent's, so nothing runs twice).
    started: BTreeSet<usize>,
    /// Whether this lineage's outputs were answered.
    answered: bool,
}

/// `tensor` as `branch` sees it: its own, or a lineage's it descends from.
fn lookup<'b>(branches: &'b [Branch], branch: usize, tensor: &str) -> Option<&'b Tensor> {
    let mut at = Some(branch);
    while let Some(index) = at {
        if let Some(found) = branches[index].tensors.get(tensor) {
            return Some(found);
        }
        at = branches[index].parent;
    }
    None
}
