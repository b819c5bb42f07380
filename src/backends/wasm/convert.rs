//! Tensors and requests across the component boundary. A tensor's name, type and shape are copied; its
//! bytes travel inline when small (`INLINE_MAX`) and otherwise as `tensor-data` handles (see
//! `tensor_data`), which nothing here copies. The data types map one to one.

use bytes::Bytes;
use wasmtime::component::Resource;

use super::bindings::tessera::backend::types as wit;
use super::state::StoreState;
use super::tensor_data::HeldData;
use crate::inference::{InferenceRequest, Parameter};
use crate::observability::trace::Trace;
use crate::tensor::{DataType, Tensor};

/// The largest tensor sent inline. Measured on `simple` (callgrind): a handle costs the plugin a host call
/// to read it and one to drop it, a few thousand instructions, which buys a memcpy of several KiB.
pub const INLINE_MAX: usize = 16 * 1024;

/// A client's request, handed to the plugin: its strings and lists move into the WIT value as they are, so
/// the only copy is the one lowering makes into the plugin's memory.
pub fn request_to_wit(state: &mut StoreState, request: InferenceRequest) -> wasmtime::Result<wit::Request> {
    Ok(wit::Request {
        id: request.id,
        inputs: request
            .inputs
            .into_iter()
            .map(|t| tensor_to_wit(t, |data| state.hand_over(data)))
            .collect::<wasmtime::Result<_>>()?,
        requested_outputs: request.requested_outputs,
        parameters: request.parameters.into_iter().map(|(k, v)| (k, parameter_to_wit(v))).collect(),
    })
}

/// A tensor the plugin gave back (an output, or an input of a BLS call).
pub fn tensor_from_wit(state: &mut StoreState, tensor: wit::Tensor) -> wasmtime::Result<Tensor> {
    let data = match tensor.data {
        wit::TensorBytes::Inline(bytes) => Bytes::from(bytes),
        wit::TensorBytes::Held(handle) => state.take_back(handle)?,
    };
    Ok(Tensor { name: tensor.name, datatype: datatype_from_wit(tensor.datatype), shape: tensor.shape, data })
}

/// A response's tensors, given to the plugin (a BLS answer): new handles it owns.
pub fn response_to_wit(state: &mut StoreState, outputs: Vec<Tensor>) -> wasmtime::Result<wit::Response> {
    let outputs =
        outputs.into_iter().map(|t| tensor_to_wit(t, |data| state.hold(data))).collect::<wasmtime::Result<_>>()?;
    Ok(wit::Response { outputs })
}

/// A response's tensors, taken back from the plugin (an answer it returned or sent).
pub fn response_from_wit(state: &mut StoreState, response: wit::Response) -> wasmtime::Result<Vec<Tensor>> {
    response.outputs.into_iter().map(|t| tensor_from_wit(state, t)).collect()
}

/// A plugin's BLS request to `model` (`version` empty: the newest ready one), traced as a child of the
/// traced request being executed.
pub fn request_from_wit(
    state: &mut StoreState,
    model: String,
    version: String,
    request: wit::Request,
) -> wasmtime::Result<InferenceRequest> {
    Ok(InferenceRequest {
        model,
        version,
        id: request.id,
        inputs: request.inputs.into_iter().map(|t| tensor_from_wit(state, t)).collect::<wasmtime::Result<_>>()?,
        requested_outputs: request.requested_outputs,
        class_counts: Vec::new(),
        parameters: request.parameters.into_iter().map(|(k, v)| (k, parameter_from_wit(v))).collect(),
        responder: None,
        trace: state.trace.as_ref().map(Trace::child),
    })
}

/// A host tensor as the plugin sees it: its bytes inline when small (a buffer no one else holds is reused,
/// not copied), else through `handle`, which turns them into a `tensor-data` handle.
pub fn tensor_to_wit(
    tensor: Tensor,
    mut handle: impl FnMut(Bytes) -> wasmtime::Result<Resource<HeldData>>,
) -> wasmtime::Result<wit::Tensor> {
    let data = if tensor.data.len() <= INLINE_MAX {
        wit::TensorBytes::Inline(Vec::from(tensor.data))
    } else {
        wit::TensorBytes::Held(handle(tensor.data)?)
    };
    Ok(wit::Tensor { name: tensor.name, datatype: datatype_to_wit(tensor.datatype), shape: tensor.shape, data })
}

fn parameter_to_wit(value: Parameter) -> wit::ParameterValue {
    match value {
        Parameter::Bool(b) => wit::ParameterValue::Boolean(b),
        Parameter::Int(i) => wit::ParameterValue::Int(i),
        Parameter::Double(d) => wit::ParameterValue::Double(d),
        Parameter::String(s) => wit::ParameterValue::String(s),
    }
}

fn parameter_from_wit(value: wit::ParameterValue) -> Parameter {
    match value {
        wit::ParameterValue::Boolean(b) => Parameter::Bool(b),
        wit::ParameterValue::Int(i) => Parameter::Int(i),
        wit::ParameterValue::Double(d) => Parameter::Double(d),
        wit::ParameterValue::String(s) => Parameter::String(s),
    }
}

/// The two enums list the same types in the same order; this table is the one place that pairs them.
const DATATYPES: [(DataType, wit::DataType); 14] = [
    (DataType::Bool, wit::DataType::Boolean),
    (DataType::Uint8, wit::DataType::Uint8),
    (DataType::Uint16, wit::DataType::Uint16),
    (DataType::Uint32, wit::DataType::Uint32),
    (DataType::Uint64, wit::DataType::Uint64),
    (DataType::Int8, wit::DataType::Int8),
    (DataType::Int16, wit::DataType::Int16),
    (DataType::Int32, wit::DataType::Int32),
    (DataType::Int64, wit::DataType::Int64),
    (DataType::Fp16, wit::DataType::Fp16),
    (DataType::Fp32, wit::DataType::Fp32),
    (DataType::Fp64, wit::DataType::Fp64),
    (DataType::Bf16, wit::DataType::Bf16),
    (DataType::Bytes, wit::DataType::Bytes),
];

pub(crate) fn datatype_to_wit(datatype: DataType) -> wit::DataType {
    DATATYPES.iter().find(|(d, _)| *d == datatype).map(|(_, w)| *w).expect("every data type is in DATATYPES")
}

fn datatype_from_wit(datatype: wit::DataType) -> DataType {
    DATATYPES.iter().find(|(_, w)| *w == datatype).map(|(d, _)| *d).expect("every WIT data type is in DATATYPES")
}
