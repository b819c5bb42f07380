//! How a model's configured inputs and outputs meet its `forward`, by Triton's PyTorch backend's rules.
//!
//! Inputs: a `forward` taking one `Dict(str, Tensor)` gets every input by name. Otherwise every argument
//! must be a tensor (or a list) and the config must declare as many inputs; they are bound by the argument
//! names when every input is one (FORWARD_ARGUMENT), else by the `<name>__<index>` suffix when every input
//! has one (NAMED_INDEX), else in config order (STRICT_CONFIG_ORDERING). Outputs: by the `__<index>`
//! suffix when every output has one, else in config order, as positions in the tuple (or list) `forward`
//! returns. The libtorch side reads the argument list (`Torch::forward_arguments`).

use std::collections::HashMap;

use crate::error::LoadResult;
use crate::model_config::ModelConfig;

/// One argument of `forward`: its name, its kind (`T` tensor, `L` list, `D` dictionary, `O` other) and its
/// type as TorchScript writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Argument {
    pub name: String,
    pub kind: char,
    pub type_name: String,
}

/// How requests' inputs become `forward`'s arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inputs {
    /// One dictionary from input name to tensor.
    Dict,
    /// Positional: the input name for each argument, in order.
    Positional(Vec<String>),
}

/// Which element of `forward`'s result each configured output is.
pub type Outputs = HashMap<String, usize>;

/// Binds the config's inputs to `arguments` and its outputs (and implicit states' outputs) to result
/// positions, or says why the model cannot be served, in Triton's words where it has them.
pub fn bind(config: &ModelConfig, arguments: &[Argument]) -> LoadResult<(Inputs, Outputs)> {
    if config.input.is_empty() {
        return Err("model configuration must contain at least one input, none were specified.".into());
    }
    // The sequence batcher's control tensors and implicit states are inputs to the model too.
    let sequence = config.sequence_batching();
    let controls = sequence.map(|s| s.control_input.as_slice()).unwrap_or_default();
    let states = sequence.map(|s| s.state.as_slice()).unwrap_or_default();
    let names: Vec<&str> = (config.input.iter().map(|i| i.name.as_str()))
        .chain(controls.iter().map(|c| c.name.as_str()))
        .chain(states.iter().map(|s| s.input_name.as_str()))
        .collect();
    let inputs = bind_inputs(&config.name, &names, arguments)?;
    let mut outputs: Vec<&str> = config.output.iter().map(|o| o.name.as_str()).collect();
    outputs.extend(states.iter().map(|s| s.output_name.as_str()));
    if !states.is_empty() {
        let all_indexed = names.iter().chain(&outputs).all(|name| index_suffix(name).is_some());
        if !all_indexed || inputs == Inputs::Dict {
            return Err(format!(
                "PyTorch model '{}' is using sequence batching with state but not all inputs and outputs follow \
                 the <name>__<index> naming convention. ",
                config.name
            )
            .into());
        }
    }
    Ok((inputs, bind_outputs(&outputs)))
}

fn bind_inputs(model: &str, names: &[&str], arguments: &[Argument]) -> LoadResult<Inputs> {
    if let [only] = arguments {
        if only.kind == 'D' {
            return Ok(Inputs::Dict);
        }
    }
    if arguments.iter().filter(|a| a.kind == 'D').count() > 1 {
        return Err(
            "Multiple inputs of kind DictType were detected. Only a single input of type Dict(str, Tensor) is \
                    supported."
                .into(),
        );
    }
    if let Some(other) = arguments.iter().find(|a| a.kind != 'T' && a.kind != 'L') {
        return Err(format!(
            "An input of type '{}' was detected in the model. Only a single input of type Dict(str, Tensor) or \
             input(s) of type Tensor are supported.",
            other.type_name
        )
        .into());
    }
    if arguments.len() != names.len() {
        return Err(format!(
            "unable to load model '{model}', configuration expects {} inputs, model provides {}",
            names.len(),
            arguments.len()
        )
        .into());
    }
    let by_argument = names.iter().all(|name| arguments.iter().any(|a| a.name == *name));
    let order: Vec<String> = if by_argument {
        arguments.iter().map(|a| a.name.clone()).collect()
    } else if let Some(indices) = names.iter().map(|name| index_suffix(name)).collect::<Option<Vec<usize>>>() {
        let mut order = vec![String::new(); names.len()];
        for (name, index) in names.iter().zip(indices) {
            let slot = order.get_mut(index).filter(|slot| slot.is_empty()).ok_or_else(|| {
                format!(
                    "input '{name}': index {index} is out of range or taken (the model takes {} inputs)",
                    names.len()
                )
            })?;
            *slot = name.to_string();
        }
        order
    } else {
        names.iter().map(|name| name.to_string()).collect()
    };
    Ok(Inputs::Positional(order))
}

fn bind_outputs(names: &[&str]) -> Outputs {
    match names.iter().map(|name| index_suffix(name)).collect::<Option<Vec<usize>>>() {
        Some(indices) => names.iter().map(|name| name.to_string()).zip(indices).collect(),
        None => names.iter().enumerate().map(|(position, name)| (name.to_string(), position)).collect(),
    }
}

/// The `<index>` of a `<name>__<index>` tensor name (digits only after the first `__`).
fn index_suffix(name: &str) -> Option<usize> {
    let (_, index) = name.split_once("__")?;
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    index.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::inference::{ModelInput, ModelOutput};

    fn config(inputs: &[&str], outputs: &[&str]) -> ModelConfig {
        ModelConfig {
            name: "m".into(),
            input: inputs.iter().map(|n| ModelInput { name: n.to_string(), ..Default::default() }).collect(),
            output: outputs.iter().map(|n| ModelOutput { name: n.to_string(), ..Default::default() }).collect(),
            ..Default::default()
        }
    }

    fn tensors(names: &[&str]) -> Vec<Argument> {
        names.iter().map(|n| Argument { name: n.to_string(), kind: 'T', type_name: "Tensor".into() }).collect()
    }

    #[test]
    fn inputs_bind_by_argument_name_then_index_then_order() {
        let by_name = bind(&config(&["b", "a"], &["OUT__0"]), &tensors(&["a", "b"])).unwrap();
        assert_eq!(by_name.0, Inputs::Positional(vec!["a".into(), "b".into()]));
        let by_index = bind(&config(&["X__1", "Y__0"], &["OUT__0"]), &tensors(&["x", "y"])).unwrap();
        assert_eq!(by_index.0, Inputs::Positional(vec!["Y__0".into(), "X__1".into()]));
        let by_order = bind(&config(&["second", "first"], &["out"]), &tensors(&["x", "y"])).unwrap();
        assert_eq!(by_order.0, Inputs::Positional(vec!["second".into(), "first".into()]));
    }

    #[test]
    fn outputs_bind_by_index_else_order() {
        let (_, outputs) = bind(&config(&["a"], &["OUT__1", "OTHER__0"]), &tensors(&["a"])).unwrap();
        assert_eq!((outputs["OUT__1"], outputs["OTHER__0"]), (1, 0));
        let (_, outputs) = bind(&config(&["a"], &["z", "y"]), &tensors(&["a"])).unwrap();
        assert_eq!((outputs["z"], outputs["y"]), (0, 1));
    }

    #[test]
    fn refusals_use_tritons_messages() {
        let int_argument = [tensors(&["x"]), vec![Argument { name: "sr".into(), kind: 'O', type_name: "int".into() }]];
        let err = bind(&config(&["x", "sr"], &["y"]), &int_argument.concat()).unwrap_err();
        assert!(err.to_string().contains("An input of type 'int' was detected"), "{err}");
        let err = bind(&config(&["a"], &["y"]), &tensors(&["a", "b"])).unwrap_err();
        assert!(err.to_string().contains("configuration expects 1 inputs, model provides 2"), "{err}");
        let dict = [Argument { name: "d".into(), kind: 'D', type_name: "Dict(str, Tensor)".into() }];
        assert_eq!(bind(&config(&["p", "q"], &["y"]), &dict).unwrap().0, Inputs::Dict);
        assert_eq!(index_suffix("INPUT__12"), Some(12));
        assert_eq!(index_suffix("INPUT__x"), None);
        assert_eq!(index_suffix("INPUT0"), None);
    }
}
