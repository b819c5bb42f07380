//! Reads a decoupled model's responses through BLS (`infer_stream`): passes its request on to the model named
//! by the request parameter `model` (default `square_int32`) and answers once with `COUNT` (INT32 `[1]`),
//! how many responses carried outputs, and `SUM` (INT32 `[1]`), the sum of their `OUT` elements. An error
//! response from the callee fails the request with its message.

use tessera_plugin::{infer_stream, Args, Model, Request, Response, Tensor};

struct StreamSum;

impl Model for StreamSum {
    fn initialize(_args: &Args) -> Result<Self, String> {
        Ok(StreamSum)
    }

    fn execute(&mut self, mut request: Request) -> Result<Response, String> {
        let model = request.string_parameter("model").unwrap_or("square_int32").to_string();
        let call = Request::new(vec![request.take_input("IN")?]);
        let (mut count, mut sum) = (0, 0);
        for response in infer_stream(&model, call)? {
            let response = response?;
            if let Ok(out) = response.output("OUT") {
                count += 1;
                sum += out.values::<i32>()?.iter().sum::<i32>();
            }
        }
        Ok(Response::new(vec![Tensor::new("COUNT", [1], &[count]), Tensor::new("SUM", [1], &[sum])]))
    }
}

tessera_plugin::export!(StreamSum);
