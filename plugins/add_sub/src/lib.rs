//! The `simple` model of Triton's quick-start, as a Wasm plugin: two INT32 tensors of the same shape in,
//! their element-wise sum (`OUTPUT0`) and difference (`OUTPUT1`) out. Each request in a batch is answered on
//! its own; a request whose inputs do not fit gets an error without affecting the others.

wit_bindgen::generate!({ path: "../../wit", world: "backend" });

use tessera::backend::types::{DataType, Tensor};

struct AddSub;

impl Guest for AddSub {
    fn auto_complete_config(config_json: String) -> Result<String, String> {
        Ok(config_json)
    }

    fn initialize(_args: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn execute(requests: Vec<Request>) -> Vec<Result<Response, String>> {
        requests.iter().map(add_sub).collect()
    }

    fn finalize() {}
}

fn add_sub(request: &Request) -> Result<Response, String> {
    let a = int32_input(request, "INPUT0")?;
    let b = int32_input(request, "INPUT1")?;
    if a.shape != b.shape {
        return Err(format!("INPUT0 has shape {:?} but INPUT1 has shape {:?}", a.shape, b.shape));
    }
    let (sum, difference): (Vec<i32>, Vec<i32>) = int32_values(a)
        .zip(int32_values(b))
        .map(|(x, y)| (x.wrapping_add(y), x.wrapping_sub(y)))
        .unzip();
    Ok(Response {
        outputs: vec![
            int32_tensor("OUTPUT0", &a.shape, &sum),
            int32_tensor("OUTPUT1", &a.shape, &difference),
        ],
    })
}

fn int32_input<'r>(request: &'r Request, name: &str) -> Result<&'r Tensor, String> {
    let tensor = request
        .inputs
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| format!("missing input {name}"))?;
    if tensor.datatype != DataType::Int32 {
        return Err(format!("{name} must be INT32"));
    }
    Ok(tensor)
}

fn int32_values(tensor: &Tensor) -> impl Iterator<Item = i32> + '_ {
    tensor.data.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

fn int32_tensor(name: &str, shape: &[i64], values: &[i32]) -> Tensor {
    Tensor {
        name: name.to_string(),
        datatype: DataType::Int32,
        shape: shape.to_vec(),
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

export!(AddSub);
