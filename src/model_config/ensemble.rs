//! Ensemble configs (`platform: "ensemble"` with `ensemble_scheduling { step [ … ] }`), checked as Triton
//! checks them before any composing model is looked at: every step names a model and maps inputs and
//! outputs; no ensemble tensor is produced twice; no model input is fed twice in one step; data flows from
//! the ensemble's inputs to every one of its outputs (a cycle or an unconnected tensor shows here, naming the
//! tensor); no tensor is left unused. The messages are Triton's. What needs the composing models (their
//! inputs, outputs, types, shapes, batch sizes) is checked when the ensemble loads.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::ModelConfig;
use crate::error::LoadResult;
use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::{DataType, ModelEnsembling};

/// Triton's platform name for ensembles.
pub const ENSEMBLE_PLATFORM: &str = "ensemble";

/// The steps of an ensemble config; `None` for any other model.
pub fn scheduling(config: &ModelConfig) -> Option<&ModelEnsembling> {
    match &config.scheduling_choice {
        Some(SchedulingChoice::EnsembleScheduling(ensembling)) => Some(ensembling),
        _ => None,
    }
}

pub fn is_ensemble(config: &ModelConfig) -> bool {
    config.platform == ENSEMBLE_PLATFORM || scheduling(config).is_some()
}

/// One ensemble tensor in the data-flow graph: which tensors it is computed from, which it feeds.
#[derive(Default)]
struct Node {
    produced: bool,
    ready: bool,
    from: BTreeSet<String>,
    feeds: BTreeSet<String>,
}

/// Checks an ensemble config on its own (see the module doc).
pub fn validate(config: &ModelConfig) -> LoadResult<()> {
    let name = &config.name;
    let Some(ensembling) = scheduling(config) else {
        return Err(format!("ensemble scheduling must be set for ensemble {name} whose platform is ensemble").into());
    };
    if config.platform != ENSEMBLE_PLATFORM {
        return Err(format!(
            "ensemble scheduling cannot be set for model '{name}' whose platform is not {ENSEMBLE_PLATFORM}"
        )
        .into());
    }
    if !config.instance_group.is_empty() {
        return Err(format!("instance group should not be specified for ensemble '{name}'").into());
    }
    if config.optimization.is_some() {
        return Err(format!("optimization should not be specified for ensemble '{name}'").into());
    }
    if ensembling.step.is_empty() {
        return Err(format!("must specify 'step' for ensemble '{name}'").into());
    }
    let mut graph = graph(config, ensembling)?;
    flow(config, &mut graph)?;
    let outputs: BTreeSet<&str> = config.output.iter().map(|o| o.name.as_str()).collect();
    for (tensor, node) in &graph {
        if !outputs.contains(tensor.as_str()) && (!node.ready || node.feeds.is_empty()) {
            return Err(format!("ensemble tensor '{tensor}' is unused in ensemble '{name}'").into());
        }
    }
    Ok(())
}

/// The data-flow graph of the ensemble's tensors, from its steps.
fn graph(config: &ModelConfig, ensembling: &ModelEnsembling) -> LoadResult<BTreeMap<String, Node>> {
    let name = &config.name;
    let mut graph: BTreeMap<String, Node> = BTreeMap::new();
    for (index, step) in ensembling.step.iter().enumerate() {
        let missing = |what: &str| format!("must specify '{what}' in step {index} of ensemble '{name}'");
        if step.model_name.is_empty() {
            return Err(missing("model_name").into());
        }
        if step.input_map.is_empty() {
            return Err(missing("input_map").into());
        }
        if step.output_map.is_empty() {
            return Err(missing("output_map").into());
        }
        for produced in step.output_map.values() {
            let node = graph.entry(produced.clone()).or_default();
            if node.produced {
                return Err(format!(
                    "ensemble tensor '{produced}' can appear in an output map only once for ensemble '{name}' step {index}"
                )
                .into());
            }
            node.produced = true;
        }
        // A model input can be named only once: the proto map guarantees it, so each consumed tensor feeds
        // every tensor the step produces.
        for consumed in step.input_map.values() {
            for produced in step.output_map.values() {
                graph.entry(consumed.clone()).or_default().feeds.insert(produced.clone());
                graph.entry(produced.clone()).or_default().from.insert(consumed.clone());
            }
        }
    }
    Ok(graph)
}

/// Marks every tensor that the ensemble's inputs reach, then checks that each output is reached, naming
/// the first unconnected tensor behind one that is not.
fn flow(config: &ModelConfig, graph: &mut BTreeMap<String, Node>) -> LoadResult<()> {
    let name = &config.name;
    let mut ready: VecDeque<String> = VecDeque::new();
    for input in &config.input {
        let Some(node) = graph.get_mut(&input.name) else {
            return Err(format!("ensemble input '{}' for ensemble {name}' is not used", input.name).into());
        };
        node.ready = true;
        ready.push_back(input.name.clone());
    }
    while let Some(tensor) = ready.pop_front() {
        let feeds: Vec<String> = graph[&tensor].feeds.iter().cloned().collect();
        for next in feeds {
            if graph[&next].ready {
                continue;
            }
            if graph[&next].from.iter().all(|from| graph[from].ready) {
                graph.get_mut(&next).expect("in the graph").ready = true;
                ready.push_back(next);
            }
        }
    }
    for output in &config.output {
        let Some(node) = graph.get(&output.name) else {
            return Err(format!("ensemble output '{}' for ensemble {name}' is not used", output.name).into());
        };
        if node.ready {
            continue;
        }
        let mut message = format!("output '{}' for ensemble '{name}' is not written", output.name);
        if let Some(source) = unconnected_source(graph, &output.name) {
            message += &format!(": at least one of its depending tensors, '{source}', is not connected");
        }
        return Err(message.into());
    }
    Ok(())
}

/// Following not-ready tensors back from `tensor`, the last one reached (cycles are cut); `None` when
/// `tensor` itself is where it stops.
fn unconnected_source(graph: &BTreeMap<String, Node>, tensor: &str) -> Option<String> {
    let mut seen = BTreeSet::new();
    let mut last = tensor.to_string();
    while let Some(next) = graph[&last].from.iter().find(|from| !graph[*from].ready && !seen.contains(*from)).cloned() {
        seen.insert(next.clone());
        last = next;
    }
    (last != tensor).then_some(last)
}

/// What a composing model is, for checking an ensemble against it: its config, or why it cannot serve.
pub type Composing = Result<std::sync::Arc<ModelConfig>, String>;

/// Checks an ensemble against its composing models, as Triton does when it loads one: each is loaded (the
/// version a step names, when it names one), allows the ensemble's batch size, has the inputs and outputs
/// the step maps and no unmapped required input, and agrees with the ensemble and the other steps on the
/// data type and shape of every tensor it shares with them. `lookup(model, version)` finds a composing
/// model (`version` -1: any). Answers whether the ensemble is decoupled: as in Triton, it is when one of its
/// steps is (see `decoupled_lineage`).
pub fn validate_steps(config: &ModelConfig, lookup: impl Fn(&str, i64) -> Composing) -> LoadResult<bool> {
    let name = &config.name;
    let Some(ensembling) = scheduling(config) else { return Ok(false) };
    let mut decoupled = Vec::with_capacity(ensembling.step.len());
    let batching = config.max_batch_size > 0;
    let mut tensors: BTreeMap<String, TensorShape> = BTreeMap::new();
    for (io_name, data_type, dims) in
        config.input.iter().map(|i| (&i.name, i.data_type, i.reshape.as_ref().map_or(&i.dims, |r| &r.shape))).chain(
            config.output.iter().map(|o| (&o.name, o.data_type, o.reshape.as_ref().map_or(&o.dims, |r| &r.shape))),
        )
    {
        tensors.insert(io_name.clone(), TensorShape::new(name, batching, data_type, dims));
    }
    for step in &ensembling.step {
        let model = &step.model_name;
        let composing =
            lookup(model, step.model_version).map_err(|why| format!("ensemble '{name}' depends on '{model}' {why}"))?;
        if composing.max_batch_size != 0 && composing.max_batch_size < config.max_batch_size {
            return Err(format!(
                "ensemble {name} allows maximum batch size {}, but it contains model {model} which only allows maximum batch size to be {}",
                config.max_batch_size, composing.max_batch_size
            )
            .into());
        }
        let step_batching = composing.max_batch_size > 0;
        decoupled.push(super::is_decoupled(&composing));
        for (input, tensor) in &step.input_map {
            if !composing.input.iter().any(|i| &i.name == input) {
                return Err(format!(
                    "in ensemble {name}, ensemble tensor {tensor} is mapping to non-existing input {input} in model {model}"
                )
                .into());
            }
        }
        for input in &composing.input {
            let Some((_, tensor)) = step.input_map.iter().find(|(i, _)| **i == input.name) else {
                if input.optional {
                    continue;
                }
                return Err(format!(
                    "in ensemble {name}, input {} in model {model} is not mapped to any ensemble tensors",
                    input.name
                )
                .into());
            };
            let shape = TensorShape::new(model, step_batching, input.data_type, &input.dims);
            agree(&mut tensors, tensor, shape, name)?;
        }
        for (output, tensor) in &step.output_map {
            let Some(declared) = composing.output.iter().find(|o| &o.name == output) else {
                return Err(format!(
                    "in ensemble {name}, ensemble tensor {tensor} is mapped from non-existing output {output} in model {model}"
                )
                .into());
            };
            let shape = TensorShape::new(model, step_batching, declared.data_type, &declared.dims);
            agree(&mut tensors, tensor, shape, name)?;
        }
    }
    decoupled_lineage(config, ensembling, &decoupled)
}

/// Whether any step of the ensemble is decoupled (`decoupled[i]`: step i's model is). Each response of a
/// decoupled step starts a lineage of its own that the steps after it run in, once per response; a step
/// that read tensors of two lineages could not know which of them to pair, so, as in Triton, it is refused.
/// Tensors are labelled with their lineage (0: the request's own) in data-flow order.
fn decoupled_lineage(config: &ModelConfig, ensembling: &ModelEnsembling, decoupled: &[bool]) -> LoadResult<bool> {
    let mut lineage: BTreeMap<&str, usize> = config.input.iter().map(|i| (i.name.as_str(), 0)).collect();
    let mut labels = 0;
    let mut done = vec![false; ensembling.step.len()];
    loop {
        let mut progressed = false;
        for (index, step) in ensembling.step.iter().enumerate() {
            if done[index] {
                continue;
            }
            let Some(inputs) =
                step.input_map.values().map(|tensor| lineage.get(tensor.as_str()).copied()).collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            if inputs.windows(2).any(|pair| pair[0] != pair[1]) {
                return Err(format!(
                    "in ensemble {}, step of model '{}' receives inputs originated from different decoupled models",
                    config.name, step.model_name
                )
                .into());
            }
            let label = match decoupled[index] {
                true => {
                    labels += 1;
                    labels
                }
                false => inputs.first().copied().unwrap_or(0),
            };
            lineage.extend(step.output_map.values().map(|tensor| (tensor.as_str(), label)));
            done[index] = true;
            progressed = true;
        }
        if !progressed {
            return Ok(labels != 0);
        }
    }
}

/// A tensor's type and shape as one model sees it.
struct TensorShape {
    model: String,
    data_type: i32,
    dims: Vec<i64>,
    /// With the batch dimension, for a model that batches.
    full_dims: Vec<i64>,
}

impl TensorShape {
    fn new(model: &str, batching: bool, data_type: i32, dims: &[i64]) -> Self {
        let full_dims =
            if batching { std::iter::once(-1).chain(dims.iter().copied()).collect() } else { dims.to_vec() };
        TensorShape { model: model.to_string(), data_type, dims: dims.to_vec(), full_dims }
    }
}

/// Records `seen` for `tensor`, or checks it against what another model said of it. A batching and a
/// non-batching model agree when the non-batching one's dims are the batching one's with the batch in front.
fn agree(
    tensors: &mut BTreeMap<String, TensorShape>,
    tensor: &str,
    seen: TensorShape,
    ensemble: &str,
) -> LoadResult<()> {
    let Some(known) = tensors.get(tensor) else {
        tensors.insert(tensor.to_string(), seen);
        return Ok(());
    };
    let type_name = |t: i32| DataType::try_from(t).map_or_else(|_| t.to_string(), |t| t.as_str_name().to_string());
    let prefix = format!("in ensemble {ensemble}, ensemble tensor {tensor}: ");
    if known.data_type != seen.data_type {
        return Err(format!(
            "{prefix}inconsistent data type: {} is inferred from model {} while {} is inferred from model {}",
            type_name(known.data_type),
            known.model,
            type_name(seen.data_type),
            seen.model
        )
        .into());
    }
    let fits =
        |a: &[i64], b: &[i64]| a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| x == -1 || y == -1 || x == y);
    if !fits(&known.dims, &seen.dims) && !fits(&known.full_dims, &seen.full_dims) {
        return Err(format!(
            "{prefix}inconsistent shape: {} is inferred from model {} while {} is inferred from model {}",
            super::dims_text(&known.full_dims),
            known.model,
            super::dims_text(&seen.full_dims),
            seen.model
        )
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_config::parse_text;

    fn ensemble(steps: &str, outputs: &[&str]) -> ModelConfig {
        let outputs: Vec<String> =
            outputs.iter().map(|o| format!("{{ name: \"{o}\" data_type: TYPE_FP32 dims: [ 1 ] }}")).collect();
        let text = format!(
            "name: \"e\" platform: \"ensemble\"
             input [ {{ name: \"IN\" data_type: TYPE_FP32 dims: [ 1 ] }} ]
             output [ {} ]
             ensemble_scheduling {{ step [ {steps} ] }}",
            outputs.join(", ")
        );
        parse_text(&text, "e").unwrap()
    }

    fn step(model: &str, inputs: &[(&str, &str)], outputs: &[(&str, &str)]) -> String {
        let map = |kind: &str, pairs: &[(&str, &str)]| {
            pairs.iter().map(|(k, v)| format!("{kind} {{ key: \"{k}\" value: \"{v}\" }}")).collect::<Vec<_>>().join(" ")
        };
        format!(
            "{{ model_name: \"{model}\" model_version: -1 {} {} }}",
            map("input_map", inputs),
            map("output_map", outputs)
        )
    }

    #[test]
    fn accepts_a_chain_and_a_diamond() {
        let chain = [step("a", &[("X", "IN")], &[("Y", "mid")]), step("b", &[("X", "mid")], &[("Y", "OUT")])];
        validate(&ensemble(&chain.join(", "), &["OUT"])).unwrap();
        let diamond = [
            step("a", &[("X", "IN")], &[("Y", "left")]),
            step("b", &[("X", "IN")], &[("Y", "right")]),
            step("c", &[("A", "left"), ("B", "right")], &[("Y", "OUT")]),
        ];
        validate(&ensemble(&diamond.join(", "), &["OUT"])).unwrap();
    }

    #[test]
    fn refuses_what_triton_refuses_with_its_messages() {
        let twice = [step("a", &[("X", "IN")], &[("Y", "OUT")]), step("b", &[("X", "IN")], &[("Y", "OUT")])];
        let error = validate(&ensemble(&twice.join(", "), &["OUT"])).unwrap_err();
        assert_eq!(error, "ensemble tensor 'OUT' can appear in an output map only once for ensemble 'e' step 1");
        let cycle =
            [step("a", &[("X", "IN"), ("Z", "loop")], &[("Y", "OUT")]), step("b", &[("X", "OUT")], &[("Y", "loop")])];
        // Triton's walk back from OUT goes round the cycle and ends on OUT itself, so it names no tensor.
        assert_eq!(
            validate(&ensemble(&cycle.join(", "), &["OUT"])).unwrap_err(),
            "output 'OUT' for ensemble 'e' is not written"
        );
        let unfed = [step("a", &[("X", "IN"), ("Z", "ghost")], &[("Y", "OUT")])];
        let error = validate(&ensemble(&unfed.join(", "), &["OUT"])).unwrap_err();
        assert_eq!(error, "output 'OUT' for ensemble 'e' is not written: at least one of its depending tensors, 'ghost', is not connected");
        let unmapped = [step("a", &[("X", "IN")], &[("Y", "OUT")])];
        let error = validate(&ensemble(&unmapped.join(", "), &["OUT", "OTHER"])).unwrap_err();
        assert_eq!(error, "ensemble output 'OTHER' for ensemble e' is not used");
        let unused = [step("a", &[("X", "IN")], &[("Y", "OUT"), ("Z", "spare")])];
        let error = validate(&ensemble(&unused.join(", "), &["OUT"])).unwrap_err();
        assert_eq!(error, "ensemble tensor 'spare' is unused in ensemble 'e'");
        let no_model =
            ["{ input_map { key: \"X\" value: \"IN\" } output_map { key: \"Y\" value: \"OUT\" } }".to_string()];
        let error = validate(&ensemble(&no_model.join(", "), &["OUT"])).unwrap_err();
        assert_eq!(error, "must specify 'model_name' in step 0 of ensemble 'e'");
    }
}
