//! A plugin that misbehaves on request, for the sandbox tests. Input `MODE` (INT32, one element) picks what
//! it does: 0 echoes `MODE` back as `OUTPUT`, 1 traps (a Rust panic, which aborts the instance), 2 answers
//! that request with an error. The server must survive every one of them and keep serving. It also prints
//! a line when initialised and one when finalised, to show that guest stdout reaches the server log and to
//! let tests count instance lifecycles.

wit_bindgen::generate!({ path: "../../wit", world: "backend" });

use std::sync::OnceLock;

use tessera::backend::types::Tensor;

struct Faulty;

/// This instance's name, as `initialize` was told it.
static INSTANCE: OnceLock<String> = OnceLock::new();

impl Guest for Faulty {
    fn auto_complete_config(config_json: String) -> Result<String, String> {
        Ok(config_json)
    }

    fn initialize(args: Vec<(String, String)>) -> Result<(), String> {
        let instance = args.iter().find(|(k, _)| k == "model_instance_name").map_or("?", |(_, v)| v.as_str());
        println!("faulty plugin initialised as {instance}");
        let _ = INSTANCE.set(instance.to_string());
        Ok(())
    }

    fn execute(requests: Vec<Request>) -> Vec<Result<Response, String>> {
        requests.into_iter().map(run).collect()
    }

    fn finalize() {
        println!("faulty plugin finalised as {}", INSTANCE.get().map_or("?", String::as_str));
    }
}

fn run(request: Request) -> Result<Response, String> {
    let input = request
        .inputs
        .into_iter()
        .find(|t| t.name == "MODE")
        .ok_or("missing input MODE")?;
    let mode = input.data.get(..4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    match mode {
        Some(0) => Ok(Response { outputs: vec![Tensor { name: "OUTPUT".into(), ..input }] }),
        Some(1) => panic!("faulty plugin asked to trap"),
        Some(2) => Err("faulty plugin asked to fail this request".into()),
        other => Err(format!("unknown MODE {other:?}")),
    }
}

export!(Faulty);
