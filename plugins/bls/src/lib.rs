//! A plugin that calls other models (Triton's BLS) and handles their errors, for the BLS tests. The request
//! parameter `chain` names models separated by commas. The request's inputs go to the first model; each
//! model's outputs become the next one's inputs (`OUTPUTn` renamed `INPUTn`); the last model's outputs
//! are the answer. A model that is not ready, or that fails, ends the chain with an error saying which.
//! The tensors travel as host handles: this plugin never copies their data.

use tessera_plugin::{infer, model_ready, Args, Model, Request, Response, Tensor};

struct Bls;

impl Model for Bls {
    fn initialize(_args: &Args) -> Result<Self, String> {
        Ok(Bls)
    }

    fn execute(&mut self, request: Request) -> Result<Response, String> {
        let chain = request.string_parameter("chain").ok_or("missing string parameter 'chain'")?.to_string();
        let mut tensors = request.inputs;
        for model in chain.split(',').map(str::trim) {
            if !model_ready(model, "") {
                return Err(format!("handled: model '{model}' is not ready"));
            }
            let response =
                infer(model, Request::new(tensors)).map_err(|e| format!("handled: '{model}' failed: {e}"))?;
            tensors = response.outputs.into_iter().map(|t| rename(t, "OUTPUT", "INPUT")).collect();
        }
        Ok(Response::new(tensors.into_iter().map(|t| rename(t, "INPUT", "OUTPUT")).collect()))
    }
}

fn rename(tensor: Tensor, from: &str, to: &str) -> Tensor {
    let name = tensor.name.replacen(from, to, 1);
    tensor.renamed(name)
}

tessera_plugin::export!(Bls);
