//! The `simple` model of Triton's quick-start, as a Wasm plugin: two INT32 tensors of the same shape in,
//! their element-wise sum (`OUTPUT0`) and difference (`OUTPUT1`) out. Each request in a batch is answered on
//! its own; a request whose inputs do not fit gets an error without affecting the others.
//!
//! It completes its own configuration as Triton's backends complete `simple`'s from the model file: a config
//! that declares no inputs (or no outputs) gets `simple`'s (INT32, dims `[ 16 ]`). Triton's model-control
//! examples reload `simple` with a config of `max_batch_size` alone and rely on that.

use tessera_plugin::{Args, Model, Request, Response, Tensor};

struct AddSub;

impl Model for AddSub {
    fn auto_complete_config(config_json: String) -> Result<String, String> {
        let mut config: serde_json::Value = serde_json::from_str(&config_json).map_err(|e| e.to_string())?;
        let tensors = |names: [&str; 2]| {
            serde_json::json!(
                names.map(|name| serde_json::json!({ "name": name, "data_type": "TYPE_INT32", "dims": [16] }))
            )
        };
        for (field, names) in [("input", ["INPUT0", "INPUT1"]), ("output", ["OUTPUT0", "OUTPUT1"])] {
            if config[field].as_array().is_none_or(|declared| declared.is_empty()) {
                config[field] = tensors(names);
            }
        }
        Ok(config.to_string())
    }

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
