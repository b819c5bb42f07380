//! A plugin that misbehaves on request, for the sandbox tests. Input `MODE` (INT32, one element) picks what
//! it does: 0 echoes `MODE` back as `OUTPUT`, 1 traps (a Rust panic, which aborts the instance), 2 answers
//! that request with an error, 3 loops forever, 4 allocates memory without end, 5 reads `/etc/passwd`, 6
//! writes a file into its model directory (`/model`), and a value of 1024 or more opens a TCP connection to
//! that port on 127.0.0.1. Where the sandbox stops an attempt, the request fails with the error the plugin
//! got; where it did not, the plugin answers (which the tests treat as a sandbox failure). Its
//! `auto-complete-config` fails when the config mentions `refuse_auto_complete`. The server must survive every one of them and keep serving. It also prints
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
        if config_json.contains("refuse_auto_complete") {
            return Err("faulty plugin refuses to complete this config".into());
        }
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
        Some(3) => loop {
            std::hint::black_box(&input);
        },
        Some(4) => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1; 16 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        Some(5) => match std::fs::read("/etc/passwd") {
            Ok(content) => Ok(echo(input, content.len())),
            Err(e) => Err(format!("reading /etc/passwd failed: {e}")),
        },
        Some(6) => match std::fs::write("/model/escaped.txt", b"written by a plugin") {
            Ok(()) => Ok(echo(input, 0)),
            Err(e) => Err(format!("writing into /model failed: {e}")),
        },
        Some(port) if port >= 1024 => match std::net::TcpStream::connect(("127.0.0.1", port as u16)) {
            Ok(_) => Ok(echo(input, 0)),
            Err(e) => Err(format!("connecting to 127.0.0.1:{port} failed: {e}")),
        },
        other => Err(format!("unknown MODE {other:?}")),
    }
}

/// An answer for an attempt the sandbox should have stopped: `MODE` back, with what was obtained.
fn echo(input: Tensor, obtained: usize) -> Response {
    println!("faulty plugin obtained {obtained} bytes");
    Response { outputs: vec![Tensor { name: "OUTPUT".into(), ..input }] }
}

export!(Faulty);
