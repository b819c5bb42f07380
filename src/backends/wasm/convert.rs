//! Tensors and requests across the component boundary. Each tensor's bytes are copied once into the guest
//! (`list<u8>`) and once out; the data types map one to one.

use bytes::Bytes;

use super::bindings::tessera::backend::types as wit;
use crate::inference::{InferenceRequest, Parameter};
use crate::tensor::{DataType, Tensor};

pub fn request_to_wit(request: &InferenceRequest) -> wit::Request {
    wit::Request {
        id: request.id.clone(),
        inputs: request.inputs.iter().map(tensor_to_wit).collect(),
        requested_outputs: request.requested_outputs.clone(),
        parameters: request.parameters.iter().map(|(k, v)| (k.clone(), parameter_to_wit(v))).collect(),
    }
}

pub fn tensor_from_wit(tensor: wit::Tensor) -> Tensor {
    Tensor {
        name: tensor.name,
        datatype: datatype_from_wit(tensor.datatype),
        shape: tensor.shape,
        data: Bytes::from(tensor.data),
    }
}

/// A plugin's BLS request to `model` (`version` empty: the newest ready one).
pub fn request_from_wit(model: String, version: String, request: wit::Request) -> InferenceRequest {
    InferenceRequest {
        model,
        version,
        id: request.id,
        inputs: request.inputs.into_iter().map(tensor_from_wit).collect(),
        requested_outputs: request.requested_outputs,
        parameters: request.parameters.into_iter().map(|(k, v)| (k, parameter_from_wit(v))).collect(),
    }
}

pub fn tensor_to_wit(tensor: &Tensor) -> wit::Tensor {
    wit::Tensor {
        name: tensor.name.clone(),
        datatype: datatype_to_wit(tensor.datatype),
        shape: tensor.shape.clone(),
        data: tensor.data.to_vec(),
    }
}

fn parameter_to_wit(value: &Parameter) -> wit::ParameterValue {
    match value {
        Parameter::Bool(b) => wit::ParameterValue::Boolean(*b),
        Parameter::Int(i) => wit::ParameterValue::Int(*i),
        Parameter::Double(d) => wit::ParameterValue::Double(*d),
        Parameter::String(s) => wit::ParameterValue::String(s.clone()),
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

fn datatype_to_wit(datatype: DataType) -> wit::DataType {
    DATATYPES.iter().find(|(d, _)| *d == datatype).map(|(_, w)| *w).expect("every data type is in DATATYPES")
}

fn datatype_from_wit(datatype: wit::DataType) -> DataType {
    DATATYPES.iter().find(|(_, w)| *w == datatype).map(|(d, _)| *d).expect("every WIT data type is in DATATYPES")
}
