//! A plugin that misbehaves on request, for the sandbox tests. Input `MODE` (INT32, one element) picks what
//! it does: 0 echoes `MODE` back as `OUTPUT`, 1 traps (a Rust panic, which aborts the instance), 2 answers
//! that request with an error, 3 loops forever, 4 allocates memory without end, 5 reads `/etc/passwd`, 6
//! writes a file into its model directory (`/model`), 7 makes host-held tensors without end, 8 spins for a
//! fixed amount of work (for the fuel budget), and a value of 1024 or more opens a TCP connection to that
//! port on 127.0.0.1. Where the sandbox stops an attempt, the request fails with the error the plugin got;
//! where it did not, the plugin answers (which the tests treat as a sandbox failure). Its
//! `auto-complete-config` fails when the config mentions `refuse_auto_complete`. The server must survive
//! every one of them and keep serving. It also prints a line when initialised and one when finalised, to
//! show that guest stdout reaches the server log and to let tests count instance lifecycles.

use tessera_plugin::{Args, DataType, Model, Request, Response, Tensor};

struct Faulty {
    /// This instance's name, as `initialize` was told it.
    instance: String,
}

impl Model for Faulty {
    fn auto_complete_config(config_json: String) -> Result<String, String> {
        if config_json.contains("refuse_auto_complete") {
            return Err("faulty plugin refuses to complete this config".into());
        }
        Ok(config_json)
    }

    fn initialize(args: &Args) -> Result<Self, String> {
        println!("faulty plugin initialised as {}", args.instance_name());
        Ok(Faulty { instance: args.instance_name().to_string() })
    }

    fn execute(&mut self, mut request: Request) -> Result<Response, String> {
        let input = request.take_input("MODE")?;
        let mode = input.values::<i32>()?.first().copied();
        match mode {
            Some(0) => Ok(echo(input)),
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
                Ok(content) => Ok(escaped(input, content.len())),
                Err(e) => Err(format!("reading /etc/passwd failed: {e}")),
            },
            Some(6) => match std::fs::write("/model/escaped.txt", b"written by a plugin") {
                Ok(()) => Ok(escaped(input, 0)),
                Err(e) => Err(format!("writing into /model failed: {e}")),
            },
            Some(7) => {
                let chunk = vec![7u8; 16 << 20];
                let mut hoard = Vec::new();
                // 16 MiB is far above INLINE_MAX, so each tensor is held by the host.
                loop {
                    hoard.push(Tensor::from_bytes("X", DataType::Uint8, [chunk.len() as i64], chunk.clone()));
                }
            }
            Some(8) => {
                std::hint::black_box((0..50_000_000u64).fold(0u64, |acc, i| std::hint::black_box(acc.wrapping_add(i))));
                Ok(echo(input))
            }
            Some(port) if port >= 1024 => match std::net::TcpStream::connect(("127.0.0.1", port as u16)) {
                Ok(_) => Ok(escaped(input, 0)),
                Err(e) => Err(format!("connecting to 127.0.0.1:{port} failed: {e}")),
            },
            other => Err(format!("unknown MODE {other:?}")),
        }
    }

    fn finalize(&mut self) {
        println!("faulty plugin finalised as {}", self.instance);
    }
}

/// The answer to a harmless mode: `MODE` back as `OUTPUT`.
fn echo(input: Tensor) -> Response {
    Response::new(vec![input.renamed("OUTPUT")])
}

/// The answer to an attempt the sandbox should have stopped, logged so that the tests see it got through.
fn escaped(input: Tensor, obtained: usize) -> Response {
    println!("faulty plugin obtained {obtained} bytes");
    echo(input)
}

tessera_plugin::export!(Faulty);
