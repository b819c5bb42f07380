//! A plugin that calls other models (Triton's BLS) and handles their errors, for the BLS tests. The request
//! parameter `chain` names models separated by commas. The request's inputs go to the first model; each
//! model's outputs become the next one's inputs (`OUTPUTn` renamed `INPUTn`); the last model's outputs
//! are the answer. A model that is not ready, or that fails, ends the chain with an error saying which.

wit_bindgen::generate!({ path: "../../wit", world: "backend" });

use tessera::backend::host;
use tessera::backend::types::{ParameterValue, Tensor};

struct Bls;

impl Guest for Bls {
    fn auto_complete_config(config_json: String) -> Result<String, String> {
        Ok(config_json)
    }

    fn initialize(_args: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn execute(requests: Vec<Request>) -> Vec<Result<Response, String>> {
        requests.into_iter().map(run).collect()
    }

    fn finalize() {}
}

fn run(request: Request) -> Result<Response, String> {
    let chain = request
        .parameters
        .iter()
        .find_map(|(key, value)| match (key.as_str(), value) {
            ("chain", ParameterValue::String(chain)) => Some(chain.clone()),
            _ => None,
        })
        .ok_or("missing string parameter 'chain'")?;
    let mut tensors = request.inputs;
    for model in chain.split(',').map(str::trim) {
        if !host::model_ready(model, "") {
            return Err(format!("handled: model '{model}' is not ready"));
        }
        let call = Request { id: request.id.clone(), inputs: tensors, requested_outputs: vec![], parameters: vec![] };
        let response = host::infer(model, "", &call).map_err(|e| format!("handled: '{model}' failed: {e}"))?;
        tensors = response.outputs;
        for tensor in &mut tensors {
            tensor.name = tensor.name.replacen("OUTPUT", "INPUT", 1);
        }
    }
    let outputs = tensors
        .into_iter()
        .map(|t| Tensor { name: t.name.replacen("INPUT", "OUTPUT", 1), ..t })
        .collect();
    Ok(Response { outputs })
}

export!(Bls);
