//! `ModelInferRequest` → `InferenceRequest` and `InferenceResponse` → `ModelInferResponse`. Inputs come
//! either as `raw_input_contents` (one little-endian buffer per input, in input order; what tritonclient
//! sends) or as typed `contents`, or from a registered shared memory region (`shared_memory_region`,
//! `shared_memory_offset`, `shared_memory_byte_size` parameters); outputs go back as `raw_output_contents`
//! in output order, or are written into the region their request named.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{Error, Result};
use crate::inference::{InferenceRequest, InferenceResponse, Parameter};
use crate::proto::inference::{
    infer_parameter::ParameterChoice, model_infer_request::InferInputTensor, model_infer_response::InferOutputTensor,
    InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse,
};
use crate::shared_memory::{OutputPlace, SharedMemory, ShmReference};
use crate::tensor::{element_count, encode_bytes_elements, DataType, Tensor};

/// Decodes a request, and where each requested output goes in shared memory (`None`: in the response).
pub fn request_from_proto(
    request: ModelInferRequest,
    shm: &SharedMemory,
) -> Result<(InferenceRequest, Vec<Option<OutputPlace>>)> {
    let references =
        request.inputs.iter().map(|input| shm_reference(&input.name, &input.parameters)).collect::<Result<Vec<_>>>()?;
    // Inputs in shared memory have no raw contents; the others take them in order.
    let in_message = references.iter().filter(|reference| reference.is_none()).count();
    let raw = request.raw_input_contents;
    if !raw.is_empty() && raw.len() != in_message {
        return Err(Error::invalid(format!(
            "raw_input_contents has {} entries but the request has {in_message} inputs not in shared memory",
            raw.len()
        )));
    }
    let mut raw = raw.into_iter();
    let inputs = request
        .inputs
        .into_iter()
        .zip(references)
        .map(|(input, reference)| match reference {
            Some(place) => input_from_shared_memory(input, &place, shm),
            None => input_from_proto(input, raw.next()),
        })
        .collect::<Result<Vec<_>>>()?;
    let mut class_counts = Vec::new();
    let mut places = Vec::with_capacity(request.outputs.len());
    let requested_outputs = request
        .outputs
        .into_iter()
        .map(|output| {
            let class_count = class_count(&output.parameters)?;
            let place = match shm_reference(&output.name, &output.parameters)? {
                Some(_) if class_count.is_some() => {
                    return Err(Error::invalid("Output can't set both 'shared_memory_region' and 'classification'"))
                }
                Some(place) => Some(shm.output(&place)?),
                None => None,
            };
            places.push(place);
            if let Some(count) = class_count {
                class_counts.push((output.name.clone(), count));
            }
            Ok(output.name)
        })
        .collect::<Result<_>>()?;
    let request = InferenceRequest {
        model: request.model_name,
        version: request.model_version,
        id: request.id,
        inputs,
        requested_outputs,
        class_counts,
        parameters: parameters_from_proto(request.parameters)?,
        responder: None,
        trace: None,
    };
    Ok((request, places))
}

/// A tensor's shared memory parameters, if it names a region, checked as Triton checks them.
fn shm_reference(tensor: &str, parameters: &HashMap<String, InferParameter>) -> Result<Option<ShmReference>> {
    let choice = |key: &str| parameters.get(key).map(|parameter| parameter.parameter_choice.as_ref());
    let wrong_type = |key: &str, expected: &str| {
        Error::invalid(format!("invalid value type for '{key}' parameter for tensor '{tensor}', expected {expected}."))
    };
    let region = match choice("shared_memory_region") {
        None => None,
        Some(Some(ParameterChoice::StringParam(region))) => Some(region.clone()),
        Some(_) => return Err(wrong_type("shared_memory_region", "string_param")),
    };
    let number = |key: &str| match choice(key) {
        None => Ok(None),
        Some(_) if region.is_none() => Err(Error::invalid(format!(
            "'{key}' can not be specified without 'shared_memory_region' parameter for tensor '{tensor}'"
        ))),
        Some(Some(ParameterChoice::Int64Param(value))) => u64::try_from(*value)
            .map(Some)
            .map_err(|_| Error::invalid(format!("'{key}' of tensor '{tensor}' must not be negative, got {value}"))),
        Some(_) => Err(wrong_type(key, "int64_param")),
    };
    let offset = number("shared_memory_offset")?;
    let byte_size = number("shared_memory_byte_size")?;
    let Some(region) = region else { return Ok(None) };
    let Some(byte_size) = byte_size else {
        return Err(Error::invalid(format!(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor '{tensor}'"
        )));
    };
    Ok(Some(ShmReference { region, offset: offset.unwrap_or(0), byte_size }))
}

/// An input's data type, refusing a name KServe does not have.
fn input_datatype(input: &InferInputTensor) -> Result<DataType> {
    DataType::from_kserve(&input.datatype)
        .ok_or_else(|| Error::invalid(format!("input '{}' has unknown datatype '{}'", input.name, input.datatype)))
}

fn input_from_shared_memory(input: InferInputTensor, place: &ShmReference, shm: &SharedMemory) -> Result<Tensor> {
    let datatype = input_datatype(&input)?;
    let name = input.name;
    if input.contents.as_ref().is_some_and(|contents| !is_empty(contents)) {
        return Err(Error::invalid(format!("input '{name}' has both shared memory and typed contents")));
    }
    let data = shm.input(place)?;
    Ok(Tensor { name, datatype, shape: input.shape, data })
}

/// An output's `classification` parameter (tritonclient's `class_count`), with Triton's messages.
fn class_count(parameters: &HashMap<String, InferParameter>) -> Result<Option<usize>> {
    let Some(parameter) = parameters.get("classification") else { return Ok(None) };
    match parameter.parameter_choice {
        Some(ParameterChoice::Int64Param(count)) if count > 0 => Ok(Some(count as usize)),
        Some(ParameterChoice::Int64Param(_)) => {
            Err(Error::invalid("invalid value for 'classification' parameter, expected >= 0"))
        }
        _ => Err(Error::invalid("invalid value type for 'classification' parameter, expected int64_param")),
    }
}

fn input_from_proto(input: InferInputTensor, raw: Option<Bytes>) -> Result<Tensor> {
    let datatype = input_datatype(&input)?;
    let name = input.name;
    let data = match (raw, input.contents) {
        (Some(_), Some(contents)) if !is_empty(&contents) => {
            return Err(Error::invalid(format!("input '{name}' has both raw_input_contents and typed contents")))
        }
        (Some(raw), _) => raw,
        (None, Some(contents)) => {
            let count = element_count(&name, &input.shape)?;
            contents_to_bytes(&name, datatype, count, contents)?
        }
        (None, None) => return Err(Error::invalid(format!("input '{name}' has no data"))),
    };
    Ok(Tensor { name, datatype, shape: input.shape, data })
}

fn is_empty(c: &InferTensorContents) -> bool {
    c.bool_contents.is_empty()
        && c.int_contents.is_empty()
        && c.int64_contents.is_empty()
        && c.uint_contents.is_empty()
        && c.uint64_contents.is_empty()
        && c.fp32_contents.is_empty()
        && c.fp64_contents.is_empty()
        && c.bytes_contents.is_empty()
}

/// Packs typed contents into little-endian tensor bytes, checking the element count and each value's range.
fn contents_to_bytes(name: &str, datatype: DataType, count: usize, c: InferTensorContents) -> Result<Bytes> {
    let mut out = BytesMut::new();
    let fits = |v: &dyn std::fmt::Display| Error::invalid(format!("input '{name}': value {v} does not fit {datatype}"));
    let found = match datatype {
        DataType::Bool => put_all(&mut out, &c.bool_contents, |&v| Ok(u8::from(v)), BytesMut::put_u8)?,
        DataType::Int8 => {
            put_all(&mut out, &c.int_contents, |&v| i8::try_from(v).map_err(|_| fits(&v)), BytesMut::put_i8)?
        }
        DataType::Int16 => {
            put_all(&mut out, &c.int_contents, |&v| i16::try_from(v).map_err(|_| fits(&v)), BytesMut::put_i16_le)?
        }
        DataType::Int32 => put_all(&mut out, &c.int_contents, |&v| Ok(v), BytesMut::put_i32_le)?,
        DataType::Int64 => put_all(&mut out, &c.int64_contents, |&v| Ok(v), BytesMut::put_i64_le)?,
        DataType::Uint8 => {
            put_all(&mut out, &c.uint_contents, |&v| u8::try_from(v).map_err(|_| fits(&v)), BytesMut::put_u8)?
        }
        DataType::Uint16 => {
            put_all(&mut out, &c.uint_contents, |&v| u16::try_from(v).map_err(|_| fits(&v)), BytesMut::put_u16_le)?
        }
        DataType::Uint32 => put_all(&mut out, &c.uint_contents, |&v| Ok(v), BytesMut::put_u32_le)?,
        DataType::Uint64 => put_all(&mut out, &c.uint64_contents, |&v| Ok(v), BytesMut::put_u64_le)?,
        DataType::Fp32 => put_all(&mut out, &c.fp32_contents, |&v| Ok(v), BytesMut::put_f32_le)?,
        DataType::Fp64 => put_all(&mut out, &c.fp64_contents, |&v| Ok(v), BytesMut::put_f64_le)?,
        DataType::Bytes => {
            out.extend_from_slice(&encode_bytes_elements(c.bytes_contents.iter().map(|b| &b[..])));
            c.bytes_contents.len()
        }
        DataType::Fp16 | DataType::Bf16 => {
            return Err(Error::invalid(format!(
                "input '{name}': {datatype} has no typed contents field; send it in raw_input_contents"
            )))
        }
    };
    if found != count {
        return Err(Error::invalid(format!(
            "input '{name}': the shape describes {count} elements but contents has {found}"
        )));
    }
    Ok(out.freeze())
}

/// Writes each value, converted (and range-checked) by `convert`, with `put`; returns how many there were.
fn put_all<T, V>(
    out: &mut BytesMut,
    values: &[T],
    convert: impl Fn(&T) -> Result<V>,
    put: impl Fn(&mut BytesMut, V),
) -> Result<usize> {
    for value in values {
        put(out, convert(value)?);
    }
    Ok(values.len())
}

fn parameters_from_proto(parameters: HashMap<String, InferParameter>) -> Result<Vec<(String, Parameter)>> {
    let mut converted: Vec<_> = parameters
        .into_iter()
        .map(|(key, value)| {
            let parameter = match value.parameter_choice {
                Some(ParameterChoice::BoolParam(b)) => Parameter::Bool(b),
                Some(ParameterChoice::Int64Param(i)) => Parameter::Int(i),
                Some(ParameterChoice::StringParam(s)) => Parameter::String(s),
                Some(ParameterChoice::DoubleParam(d)) => Parameter::Double(d),
                // The 64 bits are kept: `sequence_id` reads them back as unsigned, other parameters refuse
                // a value past i64::MAX as negative.
                Some(ParameterChoice::Uint64Param(u)) => Parameter::Int(u as i64),
                None => return Err(Error::invalid(format!("parameter '{key}' has no value"))),
            };
            Ok((key, parameter))
        })
        .collect::<Result<_>>()?;
    converted.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(converted)
}

/// Encodes a response; an output with a place in `places` (by position) is written there, and goes back
/// with empty contents, as Triton sends it.
pub fn response_to_proto(response: InferenceResponse, places: &[Option<OutputPlace>]) -> Result<ModelInferResponse> {
    let mut outputs = Vec::with_capacity(response.outputs.len());
    let mut raw = Vec::with_capacity(response.outputs.len());
    for (i, tensor) in response.outputs.into_iter().enumerate() {
        let data = match places.get(i).and_then(Option::as_ref) {
            Some(place) => {
                place.write(&tensor.name, &tensor.data)?;
                Bytes::new()
            }
            None => tensor.data,
        };
        outputs.push(InferOutputTensor {
            name: tensor.name,
            datatype: tensor.datatype.kserve_name().to_string(),
            shape: tensor.shape,
            parameters: HashMap::new(),
            contents: None,
        });
        raw.push(data);
    }
    Ok(ModelInferResponse {
        model_name: response.model,
        model_version: response.version.to_string(),
        id: response.id,
        parameters: HashMap::new(),
        outputs,
        raw_output_contents: raw,
    })
}
