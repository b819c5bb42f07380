//! What a request and a response are once a frontend has decoded them, independent of the wire they came
//! on. A request travels by value from the frontend through the scheduler to one backend instance; its
//! tensors share their bytes with the buffer they were decoded from.

pub(crate) mod classification;
pub(crate) mod responder;
pub(crate) mod sequence;
pub(crate) mod signature;

pub use classification::Labels;
pub use responder::{Partial, Responder, SendError};
pub use sequence::{CorrelationId, SequenceFlags};
pub use signature::Signature;

use std::time::Duration;

use crate::error::{Error, Result};
use crate::observability::trace::Trace;
use crate::tensor::Tensor;

/// A request parameter (KServe allows bool, integer, floating point and string values).
#[derive(Clone, Debug, PartialEq)]
pub enum Parameter {
    Bool(bool),
    Int(i64),
    Double(f64),
    String(String),
}

#[derive(Clone, Debug, Default)]
pub struct InferenceRequest {
    pub model: String,
    /// The version asked for; empty means the server's choice (the highest ready version).
    pub version: String,
    pub id: String,
    pub inputs: Vec<Tensor>,
    /// Output names asked for, in the order asked; empty means every output in config order.
    pub requested_outputs: Vec<String>,
    /// Requested outputs to answer with their top classes, and how many (the classification extension).
    pub class_counts: Vec<(String, usize)>,
    pub parameters: Vec<(String, Parameter)>,
    /// Where a decoupled model sends this request's responses; set by the scheduler, `None` for other models.
    pub responder: Option<Responder>,
    /// The request's trace, when a frontend sampled it (or its ensemble's was).
    pub trace: Option<Trace>,
}

/// What a request asks of the scheduler through its parameters: Triton's `priority` (0 means the model's
/// default level) and `timeout` in microseconds (0 or absent means none of its own).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SchedulingWishes {
    pub priority: u64,
    pub timeout: Option<Duration>,
}

impl InferenceRequest {
    /// Reads the `priority` and `timeout` parameters, refusing values that are not non-negative integers.
    pub fn scheduling_wishes(&self) -> Result<SchedulingWishes> {
        let mut wishes = SchedulingWishes::default();
        for (key, value) in &self.parameters {
            let field = match key.as_str() {
                "priority" | "timeout" => key.as_str(),
                _ => continue,
            };
            let number = match value {
                Parameter::Int(n) if *n >= 0 => *n as u64,
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "the '{field}' parameter must be a non-negative integer, got {other:?}"
                    )))
                }
            };
            match field {
                "priority" => wishes.priority = number,
                _ => wishes.timeout = (number > 0).then(|| Duration::from_micros(number)),
            }
        }
        Ok(wishes)
    }
}

#[derive(Clone, Debug)]
pub struct InferenceResponse {
    pub model: String,
    pub version: i64,
    pub id: String,
    pub outputs: Vec<Tensor>,
}

/// One message of a request's response stream: a response (`None`: only the final flag, for a decoupled
/// model that ends a request without one), or why the request failed, and whether it is the last.
#[derive(Debug)]
pub struct Streamed {
    pub response: Result<Option<InferenceResponse>>,
    pub last: bool,
}

/// The responses to one request, as `Service::infer_stream` gives them: one for a model that is not
/// decoupled, any number for one that is. `decoupled` says which.
pub struct ResponseStream {
    pub decoupled: bool,
    pub messages: futures_util::stream::BoxStream<'static, Streamed>,
}
