//! What a request and a response are once a frontend has decoded them, independent of the wire they came
//! on. A request travels by value from the frontend through the scheduler to one backend instance; its
//! tensors share their bytes with the buffer they were decoded from.

pub mod signature;

pub use signature::Signature;

use crate::tensor::Tensor;

/// A request parameter (KServe allows bool, integer, floating point and string values).
#[derive(Clone, Debug, PartialEq)]
pub enum Parameter {
    Bool(bool),
    Int(i64),
    Double(f64),
    String(String),
}

#[derive(Clone, Debug)]
pub struct InferenceRequest {
    pub model: String,
    /// The version asked for; empty means the server's choice (the highest ready version).
    pub version: String,
    pub id: String,
    pub inputs: Vec<Tensor>,
    /// Output names asked for, in the order asked; empty means every output in config order.
    pub requested_outputs: Vec<String>,
    pub parameters: Vec<(String, Parameter)>,
}

#[derive(Clone, Debug)]
pub struct InferenceResponse {
    pub model: String,
    pub version: i64,
    pub id: String,
    pub outputs: Vec<Tensor>,
}
