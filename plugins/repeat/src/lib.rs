//! Triton's `repeat_int32` test model (its `repeat` backend), as a decoupled plugin: inputs `IN` (INT32
//! `[n]`), `DELAY` (UINT32 `[n]`, milliseconds) and `WAIT` (UINT32 `[1]`, milliseconds). For each element
//! `i` it waits `DELAY[i]`, then sends a response with `OUT = [IN[i]]` and `IDX = [i]`; after the last it
//! sends the final flag alone. Triton's backend sends from a thread and releases the request after `WAIT`;
//! a plugin sends from `execute`, so the instance is held until the last response and at least `WAIT`.
//! `IN` and `DELAY` of different shapes are refused with Triton's message.

use std::time::{Duration, Instant};

use tessera_plugin::{Args, DecoupledModel, Request, Response, Sender, Tensor};

struct Repeat;

impl DecoupledModel for Repeat {
    fn initialize(_args: &Args) -> Result<Self, String> {
        Ok(Repeat)
    }

    fn execute(&mut self, request: Request, sender: Sender) -> Result<(), String> {
        let started = Instant::now();
        let (values, delays) = (request.input("IN")?, request.input("DELAY")?);
        if values.shape != delays.shape {
            return Err(format!(
                "expected IN and DELAY shape to match, got {} and {}",
                shape_text(&values.shape),
                shape_text(&delays.shape)
            ));
        }
        let wait = request.input("WAIT")?.values::<u32>()?;
        let wait = *wait.first().ok_or("unexpected size for WAIT input")?;
        for (index, (value, delay)) in values.values::<i32>()?.into_iter().zip(delays.values::<u32>()?).enumerate() {
            std::thread::sleep(Duration::from_millis(delay.into()));
            if sender.is_cancelled() {
                break;
            }
            let outputs = vec![Tensor::new("OUT", [1], &[value]), Tensor::new("IDX", [1], &[index as u32])];
            sender.send(Response::new(outputs))?;
        }
        sender.finish()?;
        let release = Duration::from_millis(wait.into());
        if let Some(left) = release.checked_sub(started.elapsed()) {
            std::thread::sleep(left);
        }
        Ok(())
    }
}

/// A shape as Triton's backends print it: `[2,3]`.
fn shape_text(shape: &[i64]) -> String {
    let dims: Vec<String> = shape.iter().map(i64::to_string).collect();
    format!("[{}]", dims.join(","))
}

tessera_plugin::export_decoupled!(Repeat);
