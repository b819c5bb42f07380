//! Requests and responses: finding inputs and parameters, and calling other models (BLS).

use crate::bindings::tessera::backend::host;
use crate::{ParameterValue, Request, Response, Tensor};

impl Request {
    /// A request for another model (see [`infer`]) with these inputs and nothing else.
    pub fn new(inputs: Vec<Tensor>) -> Self {
        Request { id: String::new(), inputs, requested_outputs: Vec::new(), parameters: Vec::new() }
    }

    /// The input called `name`.
    pub fn input(&self, name: &str) -> Result<&Tensor, String> {
        find_named(&self.inputs, name, "input")
    }

    /// Takes the input called `name` out of the request, to pass it on without copying its data.
    pub fn take_input(&mut self, name: &str) -> Result<Tensor, String> {
        take_named(&mut self.inputs, name, "input")
    }

    /// The request parameter `key`, if the client sent it.
    pub fn parameter(&self, key: &str) -> Option<&ParameterValue> {
        self.parameters.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The string parameter `key`, if the client sent one.
    pub fn string_parameter(&self, key: &str) -> Option<&str> {
        match self.parameter(key) {
            Some(ParameterValue::String(value)) => Some(value),
            _ => None,
        }
    }

    /// The integer parameter `key`, if the client sent one.
    pub fn int_parameter(&self, key: &str) -> Option<i64> {
        match self.parameter(key) {
            Some(ParameterValue::Int(value)) => Some(*value),
            _ => None,
        }
    }

    /// Whether the client wants the output `name` (it asked for it, or for no output in particular).
    pub fn wants(&self, name: &str) -> bool {
        self.requested_outputs.is_empty() || self.requested_outputs.iter().any(|o| o == name)
    }
}

impl Response {
    pub fn new(outputs: Vec<Tensor>) -> Self {
        Response { outputs }
    }

    /// The output called `name` (of a response from [`infer`]).
    pub fn output(&self, name: &str) -> Result<&Tensor, String> {
        find_named(&self.outputs, name, "output")
    }

    /// Takes the output called `name` out of the response, to pass it on without copying its data.
    pub fn take_output(&mut self, name: &str) -> Result<Tensor, String> {
        take_named(&mut self.outputs, name, "output")
    }
}

/// The tensor called `name` among `tensors`; `kind` ("input", "output") names it in the error.
fn find_named<'a>(tensors: &'a [Tensor], name: &str, kind: &str) -> Result<&'a Tensor, String> {
    tensors.iter().find(|t| t.name == name).ok_or_else(|| format!("missing {kind} {name}"))
}

/// Removes the tensor called `name` from `tensors` and returns it (order is not kept).
fn take_named(tensors: &mut Vec<Tensor>, name: &str, kind: &str) -> Result<Tensor, String> {
    let at = tensors.iter().position(|t| t.name == name).ok_or_else(|| format!("missing {kind} {name}"))?;
    Ok(tensors.swap_remove(at))
}

/// Runs `request` on the newest ready version of `model` (Triton's BLS), through the server's normal checks
/// and scheduler. Its tensors move to the host; every failure comes back as `Err` with the callee's
/// message.
pub fn infer(model: &str, request: Request) -> Result<Response, String> {
    host::infer(model, "", request)
}
