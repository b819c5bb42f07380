//! Triton's `square_int32` test model (its `square` backend), as a decoupled plugin: input `IN` (INT32
//! `[1]`) holding `n`; it sends `n` responses, each with `OUT = [n]`, then the final flag alone (so `n = 0`
//! answers with no response at all).

use tessera_plugin::{Args, DecoupledModel, Request, Response, Sender, Tensor};

struct Square;

impl DecoupledModel for Square {
    fn initialize(_args: &Args) -> Result<Self, String> {
        Ok(Square)
    }

    fn execute(&mut self, request: Request, sender: Sender) -> Result<(), String> {
        let values = request.input("IN")?.values::<i32>()?;
        let &[count] = values.as_slice() else {
            return Err(format!("expected IN to hold one element, got {}", values.len()));
        };
        for _ in 0..count.max(0) {
            if sender.is_cancelled() {
                break;
            }
            sender.send(Response::new(vec![Tensor::new("OUT", [1], &[count])]))?;
        }
        sender.finish()
    }
}

tessera_plugin::export_decoupled!(Square);
