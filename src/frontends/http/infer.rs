//! `POST /v2/models/{m}[/versions/{v}]/infer`: KServe JSON requests and Triton's binary tensor data
//! extension. With `Inference-Header-Content-Length: N`, the first N body bytes are the JSON header and
//! the rest are the binary inputs, in input order, each as long as its `binary_data_size` parameter says.
//! Binary input tensors are slices of the request body: no copy. Outputs go back as JSON or, when asked
//! (`binary_data` per output, `binary_data_output` per request), as binary after the JSON header. A tensor
//! whose parameters name a registered shared memory region is read from (an input, without a copy) or
//! written into (an output) that region instead.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::chunks::Chunks;
use super::decoded_body;
use super::json_data::{self, JsonData};
use super::shared_memory;
use crate::error::{Error, Result};
use crate::frontends::traced::{self, Arrived, Wire};
use crate::inference::{InferenceRequest, InferenceResponse, Parameter};
use crate::service::Service;
use crate::shared_memory::{OutputPlace, SharedMemory};
use crate::tensor::{element_count, DataType, Tensor};

const HEADER_LENGTH: &str = "inference-header-content-length";

/// Binary outputs larger than this in all are sent as a chain of their own buffers (`chunks`) rather than
/// copied into one.
const CHAIN_FROM: usize = 64 * 1024;

pub async fn infer(
    ctx: State<Arc<Service>>,
    Path(model): Path<String>,
    arrived: Option<Extension<Arrived>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(ctx, model, String::new(), arrived, headers, body).await
}

pub async fn infer_version(
    ctx: State<Arc<Service>>,
    Path((model, version)): Path<(String, String)>,
    arrived: Option<Extension<Arrived>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(ctx, model, version, arrived, headers, body).await
}

async fn handle(
    State(ctx): State<Arc<Service>>,
    model: String,
    version: String,
    arrived: Option<Extension<Arrived>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let trace = traced::sample(&model, &headers, arrived.map(|Extension(arrived)| arrived), Wire::Http);
    let result = async {
        let body = decoded_body(&headers, body, ctx.http_limits().max_input_size)?;
        let (mut request, output_forms) = decode_request(model, version, &headers, body, ctx.shared_memory())?;
        request.trace = trace.clone();
        let response = ctx.infer_unary(request, "HTTP end point").await;
        traced::answered(&trace);
        encode_response(&response?, &output_forms)
    };
    let mut response = result.await.unwrap_or_else(IntoResponse::into_response);
    traced::send_with(trace, Wire::Http, response.extensions_mut());
    response
}

#[derive(Deserialize)]
struct RequestHeader {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Map<String, Value>,
    inputs: Vec<InputHeader>,
    #[serde(default)]
    outputs: Vec<OutputHeader>,
}

#[derive(Deserialize)]
struct InputHeader {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    #[serde(default)]
    parameters: Map<String, Value>,
    #[serde(default)]
    data: Option<Value>,
}

#[derive(Deserialize)]
struct OutputHeader {
    name: String,
    #[serde(default)]
    parameters: Map<String, Value>,
}

/// How one output goes back: in the JSON, as binary after it, or written into a shared memory region.
pub(crate) enum OutputForm {
    Json,
    Binary,
    SharedMemory(OutputPlace),
}

/// How an output not in shared memory goes back, by whether the client wants it in binary.
fn form_of(binary: bool) -> OutputForm {
    if binary {
        OutputForm::Binary
    } else {
        OutputForm::Json
    }
}

/// Decodes the body into a request, and how the client wants each requested output (one form alone applies
/// to every output).
pub(crate) fn decode_request(
    model: String,
    version: String,
    headers: &HeaderMap,
    body: Bytes,
    shm: &SharedMemory,
) -> Result<(InferenceRequest, Vec<OutputForm>)> {
    let header_length = match headers.get(HEADER_LENGTH) {
        None => body.len(),
        Some(value) => {
            let length: usize = value.to_str().ok().and_then(|v| v.trim().parse().ok()).ok_or_else(|| {
                Error::invalid(format!("Inference-Header-Content-Length {value:?} is not a non-negative integer"))
            })?;
            if length > body.len() {
                return Err(Error::invalid(format!(
                    "Inference-Header-Content-Length is {length} but the body has only {} bytes",
                    body.len()
                )));
            }
            length
        }
    };
    let header: RequestHeader = serde_json::from_slice(&body[..header_length])
        .map_err(|e| Error::invalid(format!("malformed inference request JSON: {e}")))?;
    let mut binary = body.slice(header_length..);
    let mut inputs = Vec::with_capacity(header.inputs.len());
    for input in header.inputs {
        inputs.push(decode_input(input, &mut binary, shm)?);
    }
    if !binary.is_empty() {
        return Err(Error::invalid(format!(
            "the body has {} bytes of binary data beyond what the inputs' binary_data_size parameters account for",
            binary.len()
        )));
    }
    let binary_default = flag(&header.parameters, "binary_data_output")?.unwrap_or(false);
    let mut output_forms = Vec::with_capacity(header.outputs.len());
    let mut requested_outputs = Vec::with_capacity(header.outputs.len());
    let mut class_counts = Vec::new();
    for output in header.outputs {
        let class_count = class_count(&output.parameters, &output.name)?;
        let binary = flag(&output.parameters, "binary_data")?;
        let form = match shared_memory::reference(&output.parameters)? {
            Some(_) if output.parameters.contains_key("classification") => {
                return Err(Error::invalid("Output can't set both 'shared_memory_region' and 'classification'"))
            }
            Some(_) if binary == Some(true) => {
                return Err(Error::invalid("Output can't set both 'shared_memory_region' and 'binary_data'"))
            }
            Some(place) => OutputForm::SharedMemory(shm.output(&place)?),
            None => form_of(binary.unwrap_or(binary_default)),
        };
        output_forms.push(form);
        if let Some(count) = class_count {
            class_counts.push((output.name.clone(), count));
        }
        requested_outputs.push(output.name);
    }
    if requested_outputs.is_empty() {
        output_forms = vec![form_of(binary_default)];
    }
    let request = InferenceRequest {
        model,
        version,
        id: header.id.unwrap_or_default(),
        inputs,
        requested_outputs,
        class_counts,
        parameters: parameters(header.parameters)?,
        responder: None,
        trace: None,
    };
    Ok((request, output_forms))
}

fn decode_input(input: InputHeader, binary: &mut Bytes, shm: &SharedMemory) -> Result<Tensor> {
    let name = input.name;
    let datatype = DataType::from_kserve(&input.datatype)
        .ok_or_else(|| Error::invalid(format!("input '{name}' has unknown datatype '{}'", input.datatype)))?;
    let count = element_count(&name, &input.shape)?;
    if let Some(place) = shared_memory::reference(&input.parameters)? {
        check_one_source(&name, input.data.is_some(), &input.parameters)?;
        let data = shm.input(&place)?;
        return Ok(Tensor { name, datatype, shape: input.shape, data });
    }
    let binary_size = match input.parameters.get("binary_data_size") {
        None => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            Error::invalid(format!("input '{name}': binary_data_size must be a non-negative integer, got {v}"))
        })? as usize),
    };
    let data = match (binary_size, &input.data) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid(format!("input '{name}' has both JSON data and binary_data_size")))
        }
        (Some(size), None) => {
            if size > binary.len() {
                return Err(Error::invalid(format!(
                    "input '{name}' declares binary_data_size {size} but only {} bytes of binary data remain in the body",
                    binary.len()
                )));
            }
            binary.split_to(size)
        }
        (None, Some(data)) => json_data::decode(&name, datatype, count, data)?,
        (None, None) => return Err(Error::invalid(format!("input '{name}' has neither data nor binary_data_size"))),
    };
    Ok(Tensor { name, datatype, shape: input.shape, data })
}

/// An input in shared memory must not also carry data (Triton's message, naming what it set).
fn check_one_source(name: &str, has_data: bool, parameters: &Map<String, Value>) -> Result<()> {
    let set: Vec<&str> = [
        (has_data, "'data'"),
        (parameters.contains_key("binary_data_size"), "'binary_data_size'"),
        (true, "'shared_memory_region'"),
    ]
    .into_iter()
    .filter_map(|(present, field)| present.then_some(field))
    .collect();
    match set.len() {
        1 => Ok(()),
        _ => Err(Error::invalid(format!(
            "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', \
             'shared_memory_region' in 'parameters'. But set {} (input '{name}')",
            set.join(" ")
        ))),
    }
}

fn flag(parameters: &Map<String, Value>, key: &str) -> Result<Option<bool>> {
    match parameters.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(Error::invalid(format!("parameter '{key}' must be true or false, got {other}"))),
    }
}

/// An output's `classification` parameter: how many top classes to answer with (0, as absent: none).
fn class_count(parameters: &Map<String, Value>, output: &str) -> Result<Option<usize>> {
    match parameters.get("classification") {
        None => Ok(None),
        Some(value) => match value.as_u64() {
            Some(0) => Ok(None),
            Some(count) => Ok(Some(usize::try_from(count).unwrap_or(usize::MAX))),
            None => Err(Error::invalid(format!(
                "Unable to set 'classification' of output '{output}': expected a non-negative integer, got {value}"
            ))),
        },
    }
}

fn parameters(map: Map<String, Value>) -> Result<Vec<(String, Parameter)>> {
    map.into_iter()
        .filter(|(key, _)| key != "binary_data_output")
        .map(|(key, value)| Ok((key.clone(), parameter_from_json(&key, value)?)))
        .collect()
}

/// A request parameter from its JSON value: a bool, an integer, another number or a string.
pub(super) fn parameter_from_json(key: &str, value: Value) -> Result<Parameter> {
    Ok(match value {
        Value::Bool(b) => Parameter::Bool(b),
        Value::String(s) => Parameter::String(s),
        // An integer past i64::MAX keeps its 64 bits (as the gRPC frontend does): `sequence_id` reads them
        // back as unsigned.
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Parameter::Int(i),
            (None, Some(u)) => Parameter::Int(u as i64),
            _ => Parameter::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        other => {
            return Err(Error::invalid(format!("parameter '{key}' must be a bool, number or string, got {other}")))
        }
    })
}

#[derive(Serialize)]
struct ResponseHeader<'r> {
    model_name: &'r str,
    model_version: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    id: &'r str,
    outputs: Vec<OutputEntry<'r>>,
}

#[derive(Serialize)]
struct OutputEntry<'r> {
    name: &'r str,
    datatype: &'static str,
    shape: &'r [i64],
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<BinaryParameters>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<JsonData<'r>>,
}

#[derive(Serialize)]
struct BinaryParameters {
    binary_data_size: usize,
}

/// Encodes the response; `forms[i]` says how output i goes back (one entry alone applies to all). Outputs
/// for shared memory are written into their regions here, and listed without data.
pub(crate) fn encode_response(response: &InferenceResponse, forms: &[OutputForm]) -> Result<Response> {
    let form = |i: usize| forms.get(i).or(forms.first()).unwrap_or(&OutputForm::Json);
    let is_binary = |i: usize| matches!(form(i), OutputForm::Binary);
    let mut outputs = Vec::with_capacity(response.outputs.len());
    for (i, t) in response.outputs.iter().enumerate() {
        let (parameters, data) = match form(i) {
            OutputForm::Json => (None, Some(JsonData(t))),
            OutputForm::Binary => (Some(BinaryParameters { binary_data_size: t.data.len() }), None),
            OutputForm::SharedMemory(place) => {
                place.write(&t.name, &t.data)?;
                (None, None)
            }
        };
        outputs.push(OutputEntry {
            name: &t.name,
            datatype: t.datatype.kserve_name(),
            shape: &t.shape,
            parameters,
            data,
        });
    }
    let header = ResponseHeader {
        model_name: &response.model,
        model_version: response.version.to_string(),
        id: &response.id,
        outputs,
    };
    let json = serde_json::to_vec(&header).map_err(|e| Error::invalid(e.to_string()))?;
    if !(0..response.outputs.len()).any(is_binary) {
        return Ok(([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], json).into_response());
    }
    let header_length = json.len();
    let binary: Vec<&Bytes> =
        response.outputs.iter().enumerate().filter(|(i, _)| is_binary(*i)).map(|(_, t)| &t.data).collect();
    let binary_size: usize = binary.iter().map(|b| b.len()).sum();
    // Large outputs go out from their own buffers; small ones are copied behind the header, which costs less
    // than a frame each.
    let body = if binary_size > CHAIN_FROM {
        Body::new(Chunks::new(std::iter::once(Bytes::from(json)).chain(binary.into_iter().cloned())))
    } else {
        let mut body = json;
        body.reserve(binary_size);
        binary.iter().for_each(|b| body.extend_from_slice(b));
        Body::from(body)
    };
    Ok((
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream")),
            (header::HeaderName::from_static(HEADER_LENGTH), HeaderValue::from(header_length)),
        ],
        body,
    )
        .into_response())
}
