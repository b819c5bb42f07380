//! Echoes every input back as an output of the same type, shape and bytes. The output for an input named
//! `INPUT<suffix>` is named `OUTPUT<suffix>`; any other input keeps its name. Useful for testing the wire
//! formats of every data type end to end, and as the smallest possible plugin to copy from. The data is
//! never copied into the plugin: each output is its input's handle under a new name.

use tessera_plugin::{Args, Model, Request, Response};

struct Identity;

impl Model for Identity {
    fn initialize(_args: &Args) -> Result<Self, String> {
        Ok(Identity)
    }

    fn execute(&mut self, request: Request) -> Result<Response, String> {
        let outputs = request
            .inputs
            .into_iter()
            .map(|t| {
                let name = output_name(&t.name);
                t.renamed(name)
            })
            .collect();
        Ok(Response::new(outputs))
    }
}

fn output_name(input: &str) -> String {
    match input.strip_prefix("INPUT") {
        Some(suffix) => format!("OUTPUT{suffix}"),
        None => input.to_string(),
    }
}

tessera_plugin::export!(Identity);
