//! The `simple` model of Triton's quick-start, as a Wasm plugin: two INT32 tensors of the same shape in,
//! their element-wise sum (`OUTPUT0`) and difference (`OUTPUT1`) out. Each request in a batch is answered on
//! its own; a request whose inputs do not fit gets an error without affecting the others.

use tessera_plugin::{Args, Model, Request, Response, Tensor};

struct AddSub;

impl Model for AddSub {
    fn initialize(_args: &Args) -> Result<Self, String> {
        Ok(AddSub)
    }

    fn execute(&mut self, request: Request) -> Result<Response, String> {
        let (a, b) = (request.input("INPUT0")?, request.input("INPUT1")?);
        if a.shape != b.shape {
            return Err(format!("INPUT0 has shape {:?} but INPUT1 has shape {:?}", a.shape, b.shape));
        }
        let (sum, difference): (Vec<i32>, Vec<i32>) = a
            .values::<i32>()?
            .into_iter()
            .zip(b.values::<i32>()?)
            .map(|(x, y)| (x.wrapping_add(y), x.wrapping_sub(y)))
            .unzip();
        Ok(Response::new(vec![
            Tensor::new("OUTPUT0", a.shape.clone(), &sum),
            Tensor::new("OUTPUT1", a.shape.clone(), &difference),
        ]))
    }
}

tessera_plugin::export!(AddSub);
