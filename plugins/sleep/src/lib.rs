//! A plugin whose execution time is chosen by the caller, for the scheduling tests (queue timeouts,
//! priorities, preserve_ordering). Input `MS` (INT32, one value per batch row) asks for a pause in
//! milliseconds; one `execute` call pauses for the largest value in its batch, then echoes `MS` back as
//! `OUT`. The pause goes through WASI's monotonic clock, so the host's thread is free while it lasts.

wit_bindgen::generate!({ path: "../../wit", world: "backend" });

use std::time::Duration;

use tessera::backend::types::Tensor;

struct Sleep;

impl Guest for Sleep {
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
    let input = request.inputs.into_iter().find(|t| t.name == "MS").ok_or("missing input MS")?;
    let longest = input
        .data
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .max()
        .unwrap_or(0);
    std::thread::sleep(Duration::from_millis(longest.clamp(0, 60_000) as u64));
    Ok(Response { outputs: vec![Tensor { name: "OUT".into(), ..input }] })
}

export!(Sleep);
