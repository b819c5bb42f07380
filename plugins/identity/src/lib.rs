//! Echoes every input back as an output of the same type, shape and bytes. The output for an input named
//! `INPUT<suffix>` is named `OUTPUT<suffix>`; any other input keeps its name. Useful for testing the wire
//! formats of every data type end to end, and as the smallest possible plugin to copy from.

wit_bindgen::generate!({ path: "../../wit", world: "backend" });

use tessera::backend::types::Tensor;

struct Identity;

impl Guest for Identity {
    fn auto_complete_config(config_json: String) -> Result<String, String> {
        Ok(config_json)
    }

    fn initialize(_args: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn execute(requests: Vec<Request>) -> Vec<Result<Response, String>> {
        requests.into_iter().map(|r| Ok(echo(r))).collect()
    }

    fn finalize() {}
}

fn echo(request: Request) -> Response {
    let outputs = request
        .inputs
        .into_iter()
        .map(|t| Tensor { name: output_name(&t.name), ..t })
        .collect();
    Response { outputs }
}

fn output_name(input: &str) -> String {
    match input.strip_prefix("INPUT") {
        Some(suffix) => format!("OUTPUT{suffix}"),
        None => input.to_string(),
    }
}

export!(Identity);
